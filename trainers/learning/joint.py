"""The joint-learner protocol: a MARL algorithm sees the whole iteration (every seat's rollout, which model sits where)
and updates the models it owns.

The per-seat `Learner` (`trainers.learning.registry`) sees one seat's rollout and updates one model: independent
learning (IPPO). Algorithms that couple the seats need them together: a centralized critic reads the joint transcript
(MAPPO, `trainers.learning.mappo`), a group baseline is taken over joint samples (MAGRPO, `trainers.learning.magrpo`),
sequential-update methods order the models' updates. So the trainer hands every iteration to one `JointLearner`:

    batch = JointBatch(rollouts={seat: Rollout}, models={seat: model name}, generators={seat: torch.Generator})
    stats = algorithm.step(batch)            # {seat: {stat: float}}

A joint learner owns one per-model learner object per model (`JointLearner.learners`; Adam kept as ``.optimizer``
for FSDP2 re-sharding), exactly as a per-seat learner does, so role exchange, checkpoints, exact resume and data
parallelism work unchanged. `IndependentLearners` runs the per-seat learners through this protocol (CORY: IPPO
with the collective reward).

Seats are in acting order (the pioneer first, then the observer; an N-seat chain would add more in order) and every
helper here loops over them, so nothing assumes two seats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import torch

from trainers.learning.experience import Rollout

__all__ = ["FrozenLearner", "IndependentLearners", "JointBatch", "JointLearner", "check_joint_batch"]


@dataclass
class JointBatch:
    """One iteration's experience, every seat together.

    Attributes:
        rollouts: seat -> its `Rollout` (B rows each; row i of every seat belongs to the same episode), in acting
            order (``"pioneer"`` first).
        models: seat -> the name of the model (``"llm1"``, ``"llm2"``) sitting there this iteration.
        generators: seat -> the torch generator of that seat's mini-batch order (seeded by the trainer from
            (seed, iteration, seat)); a missing seat gets None (unseeded).
        group_size: k; rows [g·k, (g+1)·k) of every seat answer the same query (1 = every row its own query).
        tokenizers: seat -> the tokenizer of the model sitting there: each seat's rollout is in its own tokens; a
            learner that reads another seat's tokens (a centralized critic) crosses them as text when two seats'
            tokenizers differ (docs/seats.md). Empty: every seat shares one tokenizer.
        frozen: the seats a frozen partner holds (a snapshot of a population, `trainers.matchmaking`): their rollouts
            are part of the iteration (the joint reward, the joint transcript), their models are never updated and
            the learner owns none of them; every other seat is `learning`.
    """

    rollouts: dict[str, Rollout]
    models: dict[str, str]
    generators: dict[str, torch.Generator | None] = field(default_factory=dict)
    group_size: int = 1
    tokenizers: dict[str, Any] = field(default_factory=dict)
    frozen: tuple[str, ...] = ()

    @property
    def seats(self) -> tuple[str, ...]:
        """The seats in acting order."""
        return tuple(self.rollouts)

    @property
    def learning(self) -> tuple[str, ...]:
        """The seats whose models this iteration updates (every seat but the `frozen` ones), in acting order."""
        return tuple(seat for seat in self.rollouts if seat not in self.frozen)

    @property
    def batch_size(self) -> int:
        """Rows per seat (B)."""
        return next(iter(self.rollouts.values())).batch_size


@runtime_checkable
class JointLearner(Protocol):
    """What the trainer needs from a MARL algorithm.

    * `learners`: model name -> that model's learner object (checkpointed and moved with the model at role
      exchange; the `Learner` protocol's `state_dict` / `load_state_dict` / `reset_state`).
    * `step(batch)`: one update of every owned model from the `JointBatch`; returns ``{seat: flat float stats}``
      for the `JointBatch.learning` seats, holding at least ``task_reward``, ``kl`` (sequence KL to the reference,
      nats) and ``kl_coef`` per seat. A frozen seat's rollout may be read (the joint reward, the joint transcript);
      its model is never updated.
    """

    learners: Mapping[str, Any]

    def step(self, batch: JointBatch) -> dict[str, dict[str, float]]: ...


def check_joint_batch(batch: JointBatch, owned: Mapping[str, Any], *, algo: str) -> None:
    """Refuse a batch the learner cannot update.

    Raises:
        ValueError: no seat; `models` and `rollouts` naming different seats; a learning seat whose model the learner
            does not own (names it and the owned ones); rollouts of different batch sizes.
    """
    if not batch.rollouts:
        raise ValueError(f"{algo}: the batch holds no seat")
    if set(batch.models) != set(batch.rollouts):
        raise ValueError(f"{algo}: JointBatch.models names seats {sorted(batch.models)}, its rollouts "
                         f"{sorted(batch.rollouts)}; give every seat's model")
    foreign = {seat: batch.models[seat] for seat in batch.learning if batch.models[seat] not in owned}
    if foreign:
        raise ValueError(f"{algo} was asked to update {foreign} (seat: model), but owns only {sorted(owned)}; build "
                         "the joint learner over every model of the run (trainers.learning.registry.make_joint_learner)")
    sizes = {seat: r.batch_size for seat, r in batch.rollouts.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"{algo}: the seats' rollouts have different batch sizes {sizes}; row i of every seat must "
                         "be the same episode")


class IndependentLearners:
    """The per-seat learners as one joint learner: each seat's model updates on its own rollout (independent
    learning, IPPO; CORY's paper setting with the collective reward in every seat's rollout). `learners`: model
    name -> its `Learner` (`make_learner`).

    `step` calls ``learners[models[seat]].step(rollouts[seat], generator=generators[seat])`` for each learning seat
    in acting order, so independent learning under this protocol gives the same numbers as one learner per seat
    called alone.
    """

    name = "independent"

    def __init__(self, learners: Mapping[str, Any]) -> None:
        self.learners = dict(learners)

    def step(self, batch: JointBatch) -> dict[str, dict[str, float]]:
        check_joint_batch(batch, self.learners, algo=self.name)
        return {seat: self.learners[batch.models[seat]].step(batch.rollouts[seat],
                                                              generator=batch.generators.get(seat))
                for seat in batch.learning}


class FrozenLearner:
    """The learner of a frozen model (a population's snapshot partner, `trainers.matchmaking`): it owns nothing and
    never changes the model. It keeps the `Learner` protocol (`trainers.learning.registry`), so the role-exchange
    wrapper, checkpoints and resets treat a frozen model like any other; the trainer hands its seat to the joint
    learner as `JointBatch.frozen` (never updated)."""

    kl_coef = 0.0

    def step(self, rollout: Rollout, *, generator: torch.Generator | None = None) -> dict[str, float]:  # noqa: ARG002
        """No update: the rollout's mean task reward, the `Learner` stats' first key."""
        return {"task_reward": float(rollout.task_reward.float().mean())}

    def reset_state(self) -> None:
        """Nothing to reset."""

    def state_dict(self) -> dict[str, Any]:
        """Empty: a frozen model's checkpoint holds its weights alone."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: ARG002
        """Nothing to restore."""
