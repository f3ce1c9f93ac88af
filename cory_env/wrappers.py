"""Tianshou's view of the CORY AEC env: the observation adapter (the env stays library-agnostic).

Tianshou 2.0.1 trains PettingZoo envs through `tianshou.env.PettingZooEnv`, which expects
``{"observation": ..., "action_mask": ...}``; `TianshouObsWrapper` turns our ``input_ids`` / ``attention_mask`` /
``action_mask`` dict into that, with padding positions written as the extra id V so a token embedding of size V + 1
can tell them apart. `PettingZooEnv` also requires identical spaces for all agents: ours are (both seats share L
and V). The learning side, Tianshou's multi-agent algorithm with the fix for sequential-turn credit (Tianshou issue
#399), is `trainers.learning.sequential_marl.SequentialMultiAgentOnPolicyAlgorithm`.

Example:
    >>> from tianshou.env import PettingZooEnv
    >>> from cory_env.tasks.tiny_vocab import CONTEXT_LEN, tiny_vocab_tokenizer
    >>> from cory_env.token_env import env as cory_env
    >>> pz = PettingZooEnv(TianshouObsWrapper(cory_env(task="tiny_vocab", tokenizer=tiny_vocab_tokenizer(),
    ...                                                context_len=CONTEXT_LEN)))
    >>> obs, info = pz.reset(seed=0)
    >>> obs["agent_id"], obs["obs"].shape
    ('pioneer', (12,))

The wrapper needs PettingZoo and Gymnasium only, not Tianshou.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseWrapper

__all__ = ["TianshouObsWrapper"]


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
