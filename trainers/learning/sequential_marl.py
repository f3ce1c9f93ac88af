"""Tianshou's multi-agent on-policy algorithm for turn-based envs: the fix for sequential-turn credit (Tianshou
issue #399), so both CORY seats learn from the collective reward.

Tianshou 2.0.1 trains PettingZoo envs through `tianshou.env.PettingZooEnv` and `MultiAgentOnPolicyAlgorithm` (one
algorithm per seat; `possible_agents` order = reward-vector columns). It stores one transition per env step and ends
the episode on the step whose ``terminated`` flag is set: in the CORY env the observer's last token. The collective
reward arrives on that step only, so the pioneer's transitions never carry it, and the pioneer's last transition is
not marked terminal (its GAE runs on into the next episode). `redistribute_terminal_reward` moves, for every
finished episode, each other seat's column of the terminal reward onto that seat's last transition and marks it
terminated (buffer and batch, in place, idempotent); `SequentialMultiAgentOnPolicyAlgorithm` runs it before the
per-seat preprocessing (GAE). Per-column reward sums and the collector's episode returns are unchanged.

The env side (the observation adapter) is `cory_env.wrappers.TianshouObsWrapper`; `examples/tianshou_marl.py`
trains both seats with one `tianshou.algorithm.PPO` each. Importing this module imports Tianshou.
"""

from __future__ import annotations

import numpy as np
from tianshou.algorithm.multiagent.marl import MultiAgentOnPolicyAlgorithm

__all__ = ["SequentialMultiAgentOnPolicyAlgorithm", "redistribute_terminal_reward"]


def redistribute_terminal_reward(batch, buffer, indices: np.ndarray, agent_idx: dict) -> int:
    """Give every seat its share of the terminal reward on its own last transition, marked terminated.

    For each finished episode (a transition with ``terminated`` set, owned by seat s*), and each other seat a:
    find a's last transition j in that episode (walking back with ``buffer.prev``), add the terminal reward's
    column a to ``rew[j, a]`` and zero it on the terminal step, and set ``terminated[j] = True``. Done flags used
    for episode boundaries are left alone, so the buffer's episode bookkeeping is untouched. Idempotent.

    Args:
        batch: the sampled Tianshou `Batch` (``buffer[indices]``), edited in place.
        buffer: the Tianshou replay buffer, edited in place (``rew`` (N, n_seats) float, ``terminated`` (N,)).
        indices: int (n,), the buffer positions of `batch`.
        agent_idx: seat id -> reward column (`PettingZooEnv.agent_idx`).

    Returns:
        The number of transitions that received a terminal reward.

    Raises:
        ValueError: if the buffer's rewards are not (N, n_seats).

    Source:
        Tianshou issue #399 (sequential multi-agent envs: only the last mover sees the terminal reward).
    """
    rew = buffer.rew
    if not isinstance(rew, np.ndarray) or rew.ndim != 2 or rew.shape[1] != len(agent_idx):
        raise ValueError(f"expected buffer rewards of shape (N, {len(agent_idx)}), got "
                         f"{getattr(rew, 'shape', type(rew).__name__)}; collect with a PettingZooEnv")
    position = {int(i): p for p, i in enumerate(indices)}
    agent_ids = buffer.obs.agent_id
    moved = 0
    for end in np.asarray(indices)[np.asarray(buffer.terminated[indices], dtype=bool)]:
        end = int(end)
        owner = agent_ids[end]
        waiting = {a for a in agent_idx if a != owner}
        j = end
        while waiting:
            previous = int(buffer.prev(np.array([j]))[0])
            if previous == j:  # reached the first transition of the episode
                break
            j = previous
            seat = agent_ids[j]
            if seat in waiting:
                waiting.discard(seat)
                col = agent_idx[seat]
                rew[j, col] += rew[end, col]
                rew[end, col] = 0.0
                buffer.terminated[j] = True
                if j in position:
                    batch.rew[position[j]] = rew[j]
                    batch.terminated[position[j]] = True
                moved += 1
        if end in position:
            batch.rew[position[end]] = rew[end]
    return moved


class SequentialMultiAgentOnPolicyAlgorithm(MultiAgentOnPolicyAlgorithm):
    """`MultiAgentOnPolicyAlgorithm` for turn-based envs: every seat's last transition gets its terminal reward and
    ``terminated`` flag (`redistribute_terminal_reward`) before each seat's GAE.

    Args:
        algorithms: one on-policy algorithm per seat, in `possible_agents` order.
        env: the `tianshou.env.PettingZooEnv` (gives the seat -> reward column map).
    """

    def __init__(self, *, algorithms, env) -> None:
        super().__init__(algorithms=algorithms, env=env)
        self.agent_idx = dict(env.agent_idx)

    def _preprocess_batch(self, batch, buffer, indices):
        redistribute_terminal_reward(batch, buffer, indices, self.agent_idx)
        return super()._preprocess_batch(batch, buffer, indices)
