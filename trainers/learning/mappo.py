"""`MAPPO`: PPO in every seat with a centralized critic on the joint transcript (``--learner mappo``).

Centralized training, decentralized execution (Yu et al., "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games", NeurIPS 2022, §3: MAPPO; Lowe et al. 2017 for the centralized critic). Each model keeps its own
actor, value head, Adam state and KL controller (a `trainers.learning.ppo.PPOLearner`), but the value V(s_t) that
GAE bootstraps from is a function of the **global state**, not of the seat's own observation:

* the actor of seat k reads its own prompt (for the observer: the knowledge-transfer prompt; on relay it never sees
  the query) and is unchanged at inference, where the pioneer answers alone;
* the critic of seat k reads the joint transcript up to its token t: the first seat's prompt (the query as the
  pioneer sees it, private parts included), then every earlier seat's response, then seat k's own response prefix
  (`joint_critic_inputs`). In a sequential game nothing else exists yet when seat k acts, so this is the whole
  global state; for the first seat it equals its own prompt, and its update is IPPO's.

Rewards, GAE (γ, λ), whitening, the clipped policy and value losses, the KL penalty to the shared reference model
and every `PPOConfig` option are PPO's (TRL 0.11.4 `PPOTrainer.step`); only the values differ:
Â_t = Σ_l (γλ)^l δ_{t+l}, δ_t = r_t + γ V(s_{t+1}) − V(s_t), with V the seat's value head on the joint transcript
(MAPPO eq. 1 advantages with the centralized V). The value head trains on that input too, so a model that moves
between seats at role exchange learns one centralized value function for both seats.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from cory_env.tokenizer import encode_text
from trainers.learning.configs import PPOConfig
from trainers.learning.registry import LearnerSpec, reference_of
from trainers.learning.experience import Rollout, pad_sequences
from trainers.learning.joint import JointBatch, check_joint_batch
from trainers.learning.ppo import PPOLearner

__all__ = ["MAPPO", "joint_critic_inputs"]


def _rows(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m].tolist() for row, m in zip(ids, mask)]


def joint_critic_inputs(rollouts: Mapping[str, Rollout],
                        tokenizers: Mapping[str, Any] | None = None) -> dict[str, Rollout | None]:
    """The centralized critic's input of every seat: its responses after the joint transcript that precedes them.

    For seats s_0, s_1, ... in acting order, seat k's critic prompt is row by row
    ``prompt(s_0) + response(s_0) + ... + response(s_{k-1})`` (the real tokens only, left padded), followed by
    seat k's own response; seat 0's is None (its critic reads its own prompt, which is already the global state).

    Args:
        rollouts: seat -> `Rollout` in acting order, B rows each (row i of every seat is the same episode).
        tokenizers: seat -> its tokenizer, when the seats use different ones (`JointBatch.tokenizers`): every
            part written in another seat's tokens reaches seat k's critic as text (that seat's decode, seat k's
            encode), as knowledge transfer does (docs/seats.md); None or empty: one vocabulary, ids spliced.

    Returns:
        seat -> a `Rollout` (query/query_mask: the joint prompt, int64/bool (B, Q'); the other fields the seat's
        own) or None for the first seat.

    Raises:
        ValueError: fewer than two seats (a single seat has nothing to centralise), or seats with different batch sizes.
    """
    seats = list(rollouts)
    if len(seats) < 2:
        raise ValueError(f"a centralized critic needs at least two seats, got {seats}; the single-agent baseline "
                         "has nothing to centralise (use --learner ppo)")
    sizes = {seat: r.batch_size for seat, r in rollouts.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"the seats' rollouts have different batch sizes {sizes}")
    first = rollouts[seats[0]]
    pad_id = int(first.query[~first.query_mask][0]) if not bool(first.query_mask.all()) else 0
    toks = dict(tokenizers or {})
    if len({id(t) for t in toks.values()}) <= 1:
        toks = {}
    parts = [(seats[0], _rows(first.query, first.query_mask))]  # (writer, B token lists): the transcript so far
    out: dict[str, Rollout | None] = {seats[0]: None}
    for before, seat in zip(seats, seats[1:]):
        prev = rollouts[before]
        parts.append((before, _rows(prev.response, prev.response_mask)))
        joint = [[] for _ in range(first.batch_size)]
        for writer, rows in parts:
            if toks and toks[writer] is not toks[seat]:  # the text channel: the writer's decode, the reader's encode
                rows = encode_text(toks[seat], [toks[writer].decode(r, skip_special_tokens=True) for r in rows])
            joint = [j + r for j, r in zip(joint, rows)]
        query, query_mask = pad_sequences(joint, pad_id if not toks else 0, side="left")
        own = rollouts[seat]
        out[seat] = Rollout(query=query.to(own.query.device), query_mask=query_mask.to(own.query.device),
                            response=own.response, response_mask=own.response_mask, scores=own.scores,
                            task_reward=own.task_reward, allowed=own.allowed, temperature=own.temperature)
    return out


class MAPPO:
    """PPO per model with a centralized critic (see the module docstring); a `trainers.learning.joint.JointLearner`.

    Args:
        agents: model name -> `agents.LLMAgent` (two or more; each gets a `PPOLearner`).
        ref_model: the shared frozen `agents.ReferenceModel`, or model name -> its own (models of different bases:
            `trainers.learning.registry.reference_of`).
        config: `PPOConfig` (every field as for ``--learner ppo``).
        dist: the data-parallel group; statistics and gradients are pooled by each `PPOLearner` as for PPO.

    `step(batch)` returns ``{seat: PPO's statistics}`` (`PPOLearner.step`).

    Raises:
        ValueError: fewer than two models (`joint_critic_inputs`), or a batch naming a model it does not own.
    """

    name = "mappo"

    def __init__(self, agents: Mapping[str, Any], ref_model, config: PPOConfig, *, dist=None) -> None:
        if len(agents) < 2:
            raise ValueError(f"MAPPO needs at least two models (a centralized critic over the seats), got "
                             f"{sorted(agents)}; train the single-agent baseline with --learner ppo")
        self.learners = {name: PPOLearner(agent, reference_of(ref_model, name), config, dist=dist)
                         for name, agent in agents.items()}

    def step(self, batch: JointBatch) -> dict[str, dict[str, float]]:
        check_joint_batch(batch, self.learners, algo="MAPPO")
        critics = joint_critic_inputs(batch.rollouts, batch.tokenizers)  # a frozen partner's answers included
        return {seat: self.learners[batch.models[seat]].step(batch.rollouts[seat], generator=batch.generators.get(seat),
                                                              critic=critics[seat])
                for seat in batch.learning}


SPEC = LearnerSpec(MAPPO, config_class=PPOConfig, joint=True, needs_partner=True, supports_sharding=True,
                   summary="joint: PPO with a centralized critic on the joint transcript (MAPPO)")
"""``--learner mappo`` (`trainers.learning.registry.LEARNERS`)."""
