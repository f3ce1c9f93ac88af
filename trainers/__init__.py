"""MARL trainer layer for CORY, in four parts a newcomer can read in this order:

| package | what |
|---|---|
| `trainers.config` | the run's configs (`PPOConfig`, `ModelConfig`, `CORYConfig`; `EnvConfig` and `SamplingConfig` from the env and agents) and the flat dict that joins them (`RunConfigs`) |
| `trainers.learning` | PPO maths, KL control, score scaling, the shared update loop, `PPOLearner`, `GRPOLearner`, the learner registry |
| `trainers.loop` | rollouts, role exchange, building a run, `CORYTrainer`, run directory, checkpoints, metrics, data parallelism |
| `trainers.evaluation` | the pioneer's (and the pair's) evaluation, pass@k |
| `trainers.cli` | the `cory` command: train, launch, eval, plot, bench, presets |

Names are imported lazily so `import trainers.learning.ppo_math` stays light (torch only).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CORYConfig": "trainers.config", "ModelConfig": "trainers.config", "PPOConfig": "trainers.config",
    "RunConfigs": "trainers.config",
    "CORYTrainer": "trainers.loop.cory", "Bundle": "trainers.loop.role_exchange",
    "RoleExchange": "trainers.loop.role_exchange", "Rollout": "trainers.loop.rollout",
    "Learner": "trainers.learning.learners", "make_learner": "trainers.learning.learners",
    "register_learner": "trainers.learning.learners",
    "PPOLearner": "trainers.learning.ppo", "GRPOLearner": "trainers.learning.grpo",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
