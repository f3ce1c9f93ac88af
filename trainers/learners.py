"""The learner protocol and the registry of learners by name (`CORYConfig`/CLI `--learner`).

A learner owns one model's optimisation: it is built from an agent, the shared reference model and a config, and the
trainer and the role-exchange wrapper only ever call the methods below. Any object with them plugs in.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import torch

from trainers.rollout import Rollout


@runtime_checkable
class Learner(Protocol):
    """What the CORY trainer and `RoleExchange` need from a learner.

    * `step(rollout, generator=...)`: one update on this seat's `Rollout`; returns flat float stats. Keys the trainer
      reads: `task_reward`, `kl` (sequence KL to the reference, nats) and `kl_coef` (for the combined reward).
    * `reset_state()`: fresh optimizer / controller state (role exchange with `reset_on_exchange`).
    * `state_dict()` / `load_state_dict(state)`: everything but the weights, for checkpoints; `state["optimizer"]`
      must be a `torch.optim` state dict (saved with torch.save, loaded with weights_only=True), the rest JSON-able.
    """

    def step(self, rollout: Rollout, *, generator: torch.Generator | None = None) -> dict[str, float]: ...

    def reset_state(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _ppo(agent, ref_model, config):
    from trainers.ppo import PPOLearner

    return PPOLearner(agent, ref_model, config)


LEARNERS: dict[str, Callable[..., Learner]] = {"ppo": _ppo}


def register_learner(name: str, factory: Callable[..., Learner]) -> None:
    """Make `factory(agent, ref_model, config)` available as `--learner name`."""
    LEARNERS[name] = factory


def make_learner(name: str, agent, ref_model, config) -> Learner:
    """Build the learner registered as `name`.

    Raises:
        ValueError: for an unknown name (lists the registered ones).
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; registered learners: {sorted(LEARNERS)}")
    return LEARNERS[name](agent, ref_model, config)
