"""MARL trainer layer for CORY: PPO maths, KL control, PPO learner, CORY trainer, role exchange.

Names are imported lazily so `import trainers.ppo_math` stays light (torch only).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CORYConfig": "trainers.config", "PPOConfig": "trainers.config", "CORYTrainer": "trainers.cory",
    "Learner": "trainers.learners", "make_learner": "trainers.learners", "register_learner": "trainers.learners",
    "PPOLearner": "trainers.ppo", "GRPOLearner": "trainers.grpo", "Bundle": "trainers.role_exchange", "RoleExchange": "trainers.role_exchange",
    "Rollout": "trainers.rollout",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
