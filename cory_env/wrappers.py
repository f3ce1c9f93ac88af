"""Tianshou adapter for the CORY AEC env, with the fix for sequential-turn credit (Tianshou issue #399).

Tianshou 2.0.1 trains PettingZoo envs through `tianshou.env.PettingZooEnv` and `MultiAgentOnPolicyAlgorithm`
(one algorithm per seat; `possible_agents` order = reward-vector columns). Two things stand in the way:

1. **Observation format.** `PettingZooEnv` expects ``{"observation": ..., "action_mask": ...}``;
   `TianshouObsWrapper` turns our ``input_ids`` / ``attention_mask`` / ``action_mask`` dict into that, with
   padding positions written as the extra id V so a token embedding of size V + 1 can tell them apart.
   `PettingZooEnv` also requires identical spaces for all agents: ours are (both seats share L and V).
2. **Credit in a sequential env (issue #399).** Tianshou stores one transition per env step and ends the episode
   on the step whose ``terminated`` flag is set: the observer's last token. The collective reward arrives on that
   step only, so the pioneer's transitions never carry it, and the pioneer's last transition is not marked
   terminal (its GAE runs on into the next episode). `redistribute_terminal_reward` moves, for every finished
   episode, each other seat's column of the terminal reward onto that seat's last transition and marks it
   terminated (buffer and batch, in place, idempotent); `SequentialMultiAgentOnPolicyAlgorithm` runs it before the
   per-seat preprocessing (GAE). Per-column reward sums and the collector's episode returns are unchanged.

Example:
    >>> from tianshou.env import PettingZooEnv
    >>> from cory_env.tasks.tiny_vocab import CONTEXT_LEN, tiny_vocab_tokenizer
    >>> from cory_env.token_env import env as cory_env
    >>> pz = PettingZooEnv(TianshouObsWrapper(cory_env(task="tiny_vocab", tokenizer=tiny_vocab_tokenizer(),
    ...                                                context_len=CONTEXT_LEN)))
    >>> obs, info = pz.reset(seed=0)
    >>> obs["agent_id"], obs["obs"].shape
    ('pioneer', (12,))

Tianshou is imported lazily, so this module costs nothing without it.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseWrapper

__all__ = ["SequentialMultiAgentOnPolicyAlgorithm", "TianshouObsWrapper", "redistribute_terminal_reward"]


class TianshouObsWrapper(BaseWrapper):
    """Present the CORY AEC env's observations as Tianshou's ``{"observation", "action_mask"}`` dict.

    ``observation`` is int64 (L,): the window's token ids, with padding (attention mask 0) replaced by V.
    ``action_mask`` is the task's int8 (V,) mask. One space object per seat, identical for both seats. `last`
    returns numeric infos only (see there).

    Args:
        env: a CORY AEC env (`cory_env.env(...)` or `raw_env`).
    """

    def __init__(self, env) -> None:
        super().__init__(env)
        inner = env.observation_space(env.possible_agents[0])
        L = inner["input_ids"].shape[0]
        V = inner["action_mask"].shape[0]
        self._pad_index = V
        self._space = spaces.Dict({
            "observation": spaces.Box(0, V, shape=(L,), dtype=np.int64),
            "action_mask": spaces.Box(0, 1, shape=(V,), dtype=np.int8),
        })

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._space

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        obs = super().observe(agent)
        ids = np.where(obs["attention_mask"] == 1, obs["input_ids"], self._pad_index)
        return {"observation": ids, "action_mask": obs["action_mask"]}

    def last(self, observe: bool = True):
        """`AECEnv.last`, with an info of fixed numeric keys (``task_reward`` float, ``response_len`` int; 0 until
        the episode ends): Tianshou's buffer stores infos column-wise and rejects missing values and texts."""
        obs, reward, terminated, truncated, info = super().last(observe)
        info = {"task_reward": float(info.get("task_reward", 0.0)), "response_len": int(info.get("response_len", 0))}
        return obs, reward, terminated, truncated, info

    def step(self, action) -> None:
        # Tianshou acts for a finished seat too; PettingZoo expects None there.
        if self.terminations.get(self.agent_selection) or self.truncations.get(self.agent_selection):
            action = None
        elif action is not None:
            action = int(np.asarray(action).reshape(-1)[0])
        super().step(action)


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


def _algorithm_class():
    from tianshou.algorithm.multiagent.marl import MultiAgentOnPolicyAlgorithm

    class SequentialMultiAgentOnPolicyAlgorithm(MultiAgentOnPolicyAlgorithm):
        """`MultiAgentOnPolicyAlgorithm` for turn-based envs: every seat's last transition gets its terminal
        reward and ``terminated`` flag (`redistribute_terminal_reward`) before each seat's GAE.

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

    return SequentialMultiAgentOnPolicyAlgorithm


def __getattr__(name: str):
    if name == "SequentialMultiAgentOnPolicyAlgorithm":
        cls = _algorithm_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'cory_env.wrappers' has no attribute {name!r}")
