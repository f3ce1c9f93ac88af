"""The learner protocol and the registry of learners by name (`CORYConfig`/CLI `--learner`).

A learner owns one model's optimisation: it is built from an agent, the shared reference model and a config, and the
trainer and the role-exchange wrapper only ever call the methods below. Any object with them plugs in; register a
factory with `register_learner` and pick it with `--learner NAME` (guide: docs/learners.md).

Agents act, learners learn (Tianshou's Policy/Algorithm split): acting on batched observations is the agent's job
(`agents.LLMAgent.act_batch`, KV cached, called by `trainers.loop.rollout.run_episodes`); a learner never samples. It
receives a finished `Rollout` of its seat, re-scores it with `agent.evaluate` (and the reference model) and updates
the agent's trainable parameters in place. So one agent class serves every learner, and a learner can be swapped
without touching rollout code. A learner that needs several samples per query (GRPO) asks for them through
`PPOConfig.group_size`, which the trainer passes to the rollout.

| name | class | critic | notes |
|---|---|---|---|
| ``"ppo"`` | `trainers.learning.ppo.PPOLearner` | value head | TRL 0.11 PPO, the paper's learner |
| ``"grpo"`` | `trainers.learning.grpo.GRPOLearner` | none | group-relative advantages, needs ``group_size >= 2`` |
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from trainers.loop.rollout import Rollout


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


def _ppo(agent, ref_model, config, dist=None):
    from trainers.learning.ppo import PPOLearner

    return PPOLearner(agent, ref_model, config, dist=dist)


def _grpo(agent, ref_model, config, dist=None):
    from trainers.learning.grpo import GRPOLearner

    return GRPOLearner(agent, ref_model, config, dist=dist)


def _check_grpo(config) -> None:
    from trainers.learning.grpo import GRPOLearner

    GRPOLearner.check_config(config)


_grpo.check_config = _check_grpo  # what `check_learner` runs before any model is built
# both keep their Adam as `learner.optimizer`, which a checkpoint gathers whole and re-shards on load (FSDP2 runs)
_ppo.supports_sharding = _grpo.supports_sharding = True


LEARNERS: dict[str, Callable[..., Learner]] = {"ppo": _ppo, "grpo": _grpo}


def register_learner(name: str, factory: Callable[..., Learner], *, overwrite: bool = False) -> None:
    """Make `factory(agent, ref_model, config) -> Learner` available as `--learner name`.

    Args:
        name: registry key (e.g. "reinforce").
        factory: called once per model with (agent, shared reference model, `PPOConfig`).
        overwrite: replace an existing entry of the same name.

    Raises:
        TypeError: if `factory` is not callable.
        ValueError: if `name` is empty, or already registered and not `overwrite`.
    """
    if not callable(factory):
        raise TypeError(f"learner factory for {name!r} must be callable (agent, ref_model, config) -> Learner, "
                        f"got {type(factory).__name__}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"learner name must be a non-empty str, got {name!r}")
    if name in LEARNERS and not overwrite:
        raise ValueError(f"learner {name!r} is already registered; pass overwrite=True to replace it")
    LEARNERS[name] = factory


def accepts_dist(factory: Callable[..., Learner]) -> bool:
    """True if `factory` takes a ``dist`` keyword (or ``**kwargs``): it can train data-parallel."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return "dist" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def check_learner(name: str, config, *, sharded: bool = False) -> None:
    """Check, before any model is built, that `name` is registered and fits `config`.

    A factory may carry a ``check_config(config)`` attribute (GRPO's checks `group_size`); it is called here.

    Args:
        sharded: the run is FSDP2-sharded (``--sharding fsdp``): the factory must declare
            ``supports_sharding = True``.

    Raises:
        ValueError: an unknown name (lists the registered ones), settings the learner refuses, or a sharded run
            with a factory that does not declare sharding support (its optimizer state would be checkpointed as
            shards it cannot reload).
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; registered learners: {sorted(LEARNERS)}")
    if sharded and not getattr(LEARNERS[name], "supports_sharding", False):
        raise ValueError(
            f"learner {name!r} does not declare FSDP2 support (`supports_sharding = True` on its factory): its "
            "optimizer state would hold shards that a checkpoint cannot restore. Build it on "
            "trainers.learning.update.PolicyLearner (its `optimizer` attribute is re-sharded on load) and set "
            "the attribute, or train with --sharding none"
        )
    check = getattr(LEARNERS[name], "check_config", None)
    if check is not None:
        check(config)


def make_learner(name: str, agent, ref_model, config, *, dist=None, sharded: bool = False) -> Learner:
    """Build the learner registered as `name`.

    Args:
        dist: the data-parallel group (`trainers.loop.distributed.DataParallel`), passed as ``dist=`` to factories that
            accept it; a factory without ``dist`` is called as ``factory(agent, ref_model, config)`` (one process
            only).
        sharded: the models are FSDP2-sharded (`CORYConfig.sharded`; see `check_learner`).

    Raises:
        ValueError: for an unknown name (lists the registered ones), a multi-process run with a learner whose
            factory takes no ``dist`` (it would not average gradients and the replicas would drift apart), or an
            FSDP2-sharded run (`sharded`) with a factory that does not declare sharding (`check_learner`).
        TypeError: if the factory's result does not implement the `Learner` protocol.
    """
    check_learner(name, config, sharded=sharded)
    factory = LEARNERS[name]
    accepts = accepts_dist(factory)
    if dist is not None and dist.enabled and not accepts:
        raise ValueError(
            f"learner {name!r} cannot train data-parallel: its factory takes no `dist` argument, so it would not "
            f"average gradients across the {dist.world_size} processes. Add a `dist=None` keyword and call "
            "dist.sync_gradients(params) before each optimiser step (docs/learners.md), or run one process"
        )
    learner = factory(agent, ref_model, config, dist=dist) if accepts and dist is not None else \
        factory(agent, ref_model, config)
    if not isinstance(learner, Learner):
        missing = [m for m in ("step", "reset_state", "state_dict", "load_state_dict") if not hasattr(learner, m)]
        raise TypeError(f"learner factory {name!r} returned {type(learner).__name__}, which lacks {missing}")
    return learner


def kl_estimator(name: str, config) -> str:
    """The per-token KL estimator learner `name` penalises and logs as ``kl`` (`ppo_math.kl_penalty` kind):
    GRPO's (k3 when `kl_in_loss`, `trainers.learning.grpo.penalised_kl_kind`), else `PPOConfig.kl_penalty`; evaluations
    report the KL with the same estimator as training."""
    if name == "grpo":
        from trainers.learning.grpo import penalised_kl_kind

        return penalised_kl_kind(config)
    return config.kl_penalty
