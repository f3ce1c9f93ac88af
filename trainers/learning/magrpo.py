"""`MAGRPO`: one group-relative advantage of the joint reward, shared by every seat (``--learner magrpo``).

Multi-Agent Group Relative Policy Optimization ("LLM Collaboration With Multi-Agent Reinforcement Learning",
arXiv:2508.04652, Algorithm 1 and eq. 1; the CoMLRL library), in its aligned form for a sequential chain: each query is
played k = `GRPOConfig.group_size` times along the chain (the pioneer answers k times, the observer answers each of
those answers once), giving k joint samples g with joint reward R^(g) = Σ_seats r(q, a_seat^(g)) (the seats' task
rewards: the team's return). Every seat's tokens of joint sample g get the same advantage

    Â^(g) = (R^(g) − mean_G(R)) / (std_G(R) + 1e-4)      (``scale_rewards=True``; MAGRPO eq. 1 is the centred
                                                           form, ``--scale_rewards false``, Dr. GRPO)

and each model then takes GRPO's clipped-surrogate step on its own prompt and response with that advantage
(`trainers.learning.grpo.GRPOLearner`: ``ppo_epochs`` epochs, mini-batches, the k3 KL to the shared reference model
in the loss with ``kl_in_loss``, else each seat's own KL penalty centred on its group).

Relation to CORY with GRPO learners (``--learner grpo``): there each seat normalises its own scores, the collective
reward r(q,a1) + c·r(q,a2) of `EnvConfig.partner_reward_coef` c. With c = 1 that is the joint reward and the two
coincide exactly (a test holds them equal); MAGRPO's advantage is the team's whatever c is, and for N seats the
sum over all of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from trainers.learning.configs import GRPOConfig
from trainers.learning.experience import Rollout
from trainers.learning.grpo import GRPOLearner, group_of, penalised_kl_kind
from trainers.learning.joint import JointBatch, check_joint_batch
from trainers.learning.registry import LearnerSpec, reference_of

__all__ = ["MAGRPO", "joint_reward"]


def joint_reward(rollouts: Mapping[str, Rollout]) -> torch.Tensor:
    """R (float32 (B,)): the sum of every seat's task reward r(q, a_seat) per joint sample (row).

    Raises:
        ValueError: no seat, or seats with different batch sizes.
    """
    if not rollouts:
        raise ValueError("the joint reward needs at least one seat")
    rewards = [r.task_reward.float() for r in rollouts.values()]
    if len({t.shape for t in rewards}) != 1:
        raise ValueError(f"the seats' task rewards have different shapes {[tuple(t.shape) for t in rewards]}")
    return torch.stack(rewards).sum(dim=0)


class MAGRPO:
    """MAGRPO over the run's models (see the module docstring); a `trainers.learning.joint.JointLearner`.

    Args:
        agents: model name -> `agents.LLMAgent` (each gets a `GRPOLearner`; its value head is unused).
        ref_model: as for `trainers.learning.mappo.MAPPO`.
        config: `GRPOConfig` (group_size k ≥ 2).
        dist: the data-parallel group (groups never span processes; gradients and statistics pooled per model).

    `step(batch)` returns ``{seat: GRPO's statistics}``; ``score`` and ``reward_std`` there are the joint reward's.

    Raises:
        ValueError: a batch whose `group_size` differs from the config's, or naming a model it does not own.
    """

    name = "magrpo"

    def __init__(self, agents: Mapping[str, Any], ref_model, config: GRPOConfig, *, dist=None) -> None:
        self.config = config
        self.learners = {name: GRPOLearner(agent, reference_of(ref_model, name), config, dist=dist)
                         for name, agent in agents.items()}

    def joint_rollouts(self, batch: JointBatch) -> dict[str, Rollout]:
        """Every learning seat's rollout with its scores replaced by the joint reward (`joint_reward` over every
        seat, a frozen partner's included), so that each seat's group-relative advantage is the shared Â^(g)."""
        check_joint_batch(batch, self.learners, algo="MAGRPO")
        if batch.group_size != self.config.group_size:
            raise ValueError(f"MAGRPO: the batch holds groups of {batch.group_size} rows, GRPOConfig.group_size is "
                             f"{self.config.group_size}; roll out with group_size={self.config.group_size}")
        joint = joint_reward(batch.rollouts)
        return {seat: dataclasses.replace(batch.rollouts[seat], scores=joint.to(batch.rollouts[seat].scores.device))
                for seat in batch.learning}

    def step(self, batch: JointBatch) -> dict[str, dict[str, float]]:
        return {seat: self.learners[batch.models[seat]].step(rollout, generator=batch.generators.get(seat))
                for seat, rollout in self.joint_rollouts(batch).items()}


SPEC = LearnerSpec(MAGRPO, config_class=GRPOConfig, joint=True, joint_reward=True, value_head=False,
                   samples_per_query=group_of, kl_kind=penalised_kl_kind, supports_sharding=True,
                   summary="joint: one group-relative advantage of the joint reward shared by every seat (MAGRPO)")
"""``--learner magrpo`` (`trainers.learning.registry.LEARNERS`)."""
