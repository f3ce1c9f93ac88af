"""
# CORY pioneer seat as a Gymnasium env (``cory/Pioneer-v0``, ``cory/TinyVocab-v0``)

The single-agent view of a CORY task for standard RL libraries: the pioneer answers the query token by token, and
the episode ends with its response; the reward is its own task reward (the PPO baseline's setting: the seating
``"ppo"``, the default). Same task, reward, tokenizer, prompt and observations as the PettingZoo env's pioneer seat
(`cory_env.token_env`), over the same episode core (`EpisodeBatch`, B = 1).

With a seating of N > 1 seats (``seating="cory"``, ``"chain:N"``) the learner still plays the pioneer, and a fixed
**partner policy** plays the later seats once its response ends (default: uniform over the allowed tokens, from
the env's seeded ``np_random``); the reward is then the pioneer's seat reward R = (M · r)_pioneer, e.g. the
collective reward r1 + r2 (training one seat of a seating against fixed partners).

| | |
|---|---|
| Import | ``import cory_env; gymnasium.make("cory/TinyVocab-v0")`` or ``cory_env.gym_env.PioneerEnv(...)`` |
| Action space | ``Discrete(V)``, the next token id |
| Observation space | ``Dict`` of ``input_ids`` (L,) int64, ``attention_mask`` (L,) int64, ``action_mask`` (V,) int8 |
| Reward | 0 on every step; r(q, a) when the response ends (EOS or the episode's response length); with partners, the pioneer's seat reward once they answered |
| Termination | when the response ends (with partners: once the last seat answered); never truncated (responses have a bounded length) |

Registered ids (``import cory_env`` registers them):

* ``cory/Pioneer-v0``: any task; pass ``tokenizer=`` and `EnvConfig` fields, e.g.
  ``gymnasium.make("cory/Pioneer-v0", tokenizer=tok, task="imdb", context_len=64)``.
* ``cory/TinyVocab-v0``: the tiny-vocabulary task (`cory_env.tasks.tiny_vocab`) with its own 20-token tokenizer
  and ``context_len=12``; optimum: return 1.

## Observation and action

As in the AEC env: the left-padded window of the pioneer's prompt and response so far, and the task's action mask
(1 = allowed). The mask is advisory here, as in Gymnasium's ``Discrete.sample(mask=...)``: every action of the
space is accepted, and a masked token is written like any other (the task reward scores it). ``action_masks()``
returns the same mask as bool (V,): the method name sb3-contrib's ``MaskablePPO`` looks for.

## Arguments

``config`` (`EnvConfig`) or its fields, ``tokenizer`` (required unless the task is ``"tiny_vocab"``),
``reward_fn``, ``task`` (name or `Task`), ``seating`` (a `cory_env.seating.Seating` or a spec; default ``"ppo"``,
the pioneer alone), ``partner_policy`` (``(seat, observation) -> token id`` for the later seats), ``render_mode``
(None or "ansi"). ``reset(seed, options)`` with ``options={"query": text or token ids}`` plays that query.

## Version history

* v0: first release; an episode draws from stream ``(seed, stream_offset)`` of numpy's `SeedSequence`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cory_env.config import check_render_mode
from cory_env.episode import EpisodeBatch
from cory_env.seating import Seating

__all__ = ["PioneerEnv", "register_envs"]

#: `PioneerEnv`'s seating when none is given: the pioneer alone (the single-agent baseline).
ALONE = "ppo"


class PioneerEnv(gym.Env):
    """The pioneer seat of a CORY task as a Gymnasium env (see the module docstring).

    Args:
        config, reward_fn, task, task_options, render_mode: as for `cory_env.token_env.raw_env`.
        **kwargs: as for `cory_env.token_env.raw_env`.
        tokenizer: tokenizer object or name; None for a task with its own tokenizer (``"tiny_vocab"``, ``"relay"``;
            `cory_env.tasks.task_tokenizer`).
        seating: a `Seating` or a seating spec; default ``config.seating``, and ``"ppo"`` (the pioneer alone) when
            that is None too. The learner plays its first seat.
        partner_policy: ``(seat, observation) -> int`` token id for every later seat (observation: that seat's
            window, as the pioneer's); None: uniform over the allowed tokens, drawn from ``self.np_random``.

    Raises:
        TypeError, ValueError: for bad arguments (see `EnvConfig`, `EpisodeBatch`).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, config=None, tokenizer=None, *, reward_fn=None, task=None,
                 seating: Seating | str | None = None, task_options=None, partner_policy=None,
                 render_mode: str | None = None, **kwargs) -> None:
        check_render_mode(render_mode, self.metadata["render_modes"])
        self.render_mode = render_mode
        if seating is None and kwargs.get("seating") is None and getattr(config, "seating", None) is None:
            seating = ALONE  # the learner alone unless a seating is named
        self._episode = EpisodeBatch.from_config(config, tokenizer, batch_size=1, task=task, reward_fn=reward_fn,
                                                 seating=seating, task_options=task_options, **kwargs)
        self.config = self._episode.config
        #: The `Seating` played; the learner is its first seat.
        self.seating = self._episode.seating
        self.seat = self.seating.first
        self._partner = self._uniform_partner if partner_policy is None else partner_policy
        self.tokenizer = self._episode.tokenizer
        V, L = self._episode.vocab_size, self.config.context_len
        self.action_space = spaces.Discrete(V)
        self.observation_space = spaces.Dict({
            "input_ids": spaces.Box(0, V - 1, shape=(L,), dtype=np.int64),
            "attention_mask": spaces.Box(0, 1, shape=(L,), dtype=np.int64),
            "action_mask": spaces.Box(0, 1, shape=(V,), dtype=np.int8),
        })
        self._action = np.zeros(1, dtype=np.int64)

    def _obs(self, seat: str | None = None) -> dict[str, np.ndarray]:
        ids, mask = self._episode.window(seat or self.seat)
        return {"input_ids": ids[0].copy(), "attention_mask": mask[0].copy(),
                "action_mask": self._episode.action_mask.copy()}

    def _uniform_partner(self, seat: str, observation: dict[str, np.ndarray]) -> int:  # noqa: ARG002 - policy API
        return int(self.np_random.choice(np.flatnonzero(observation["action_mask"])))

    def _play_partners(self) -> None:
        """The later seats answer with the partner policy until the episode is done."""
        ep = self._episode
        while not ep.done:
            seat = ep.acting
            self._action[0] = self._partner(seat, self._obs(seat))
            ep.step(self._action)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode; ``options={"query": text or token ids}`` plays that query; ``options={"stream_offset":
        i}`` draws from stream ``(seed, i)`` as the AEC env does.

        Returns:
            (observation, info) with ``info["query_text"]``.
        """
        super().reset(seed=seed)
        if seed is None and self._episode.phase is None:
            seed = int(self.np_random.integers(2**31))  # first reset without a seed: Gymnasium's entropy
        options = options or {}
        query = options.get("query")
        self._episode.reset(seed=seed, queries=None if query is None else [query],
                            stream_offset=options.get("stream_offset", 0))
        return self._obs(), {"query_text": self._episode.query_text[0]}

    def step(self, action) -> tuple[dict, float, bool, bool, dict[str, Any]]:
        """Append one token to the pioneer's response (once it ends, the partners answer).

        Returns:
            (observation, reward, terminated, truncated, info); at the end info holds the pioneer's ``task_reward``
            (float), ``response_text`` (str) and ``response_len`` (int, tokens).

        Raises:
            RuntimeError: before `reset` or after the episode ended.
            TypeError: for a non-integer action.
            ValueError: for a token id outside [0, V), or a partner's action that the episode refuses.
        """
        if self._episode.acting != self.seat:
            raise RuntimeError("step() before reset()" if self._episode.phase is None else
                               "the episode ended; call reset()")
        a = np.asarray(action)
        if a.dtype.kind not in "iu" or a.size != 1:
            raise TypeError(f"action must be one integer token id, got {action!r}")
        if not 0 <= int(a.reshape(-1)[0]) < self.action_space.n:
            raise ValueError(f"action {int(a.reshape(-1)[0])} is outside the vocabulary [0, {self.action_space.n})")
        self._action[0] = int(a.reshape(-1)[0])
        if self._episode.step(self._action, check=False) and not self._episode.done:
            self._play_partners()
        if not self._episode.done:
            return self._obs(), 0.0, False, False, {}
        ep, seat = self._episode, self.seat
        info = {"task_reward": float(ep.task_reward[seat][0]), "response_text": ep.response_text[seat][0],
                "response_len": len(ep.response[seat][0])}
        return self._obs(), float(ep.reward[seat][0]), True, False, info

    def action_masks(self) -> np.ndarray:
        """The current action mask as bool (V,) (True = allowed), a copy of the observation's ``action_mask``; the
        name is sb3-contrib's convention (``MaskablePPO`` calls it through the vectorised env)."""
        return self._episode.action_mask.astype(bool)

    def render(self) -> str | None:
        """The query and the response so far as text (render_mode "ansi")."""
        if self.render_mode is None or self._episode.phase is None:
            return None
        text = self.tokenizer.decode(self._episode.response_ids(self.seat)[0], skip_special_tokens=True)
        return f"query: {self._episode.query_text[0]!r}\n{self.seat}: {text!r}"

    def close(self) -> None:
        """Nothing to release."""


def register_envs() -> None:
    """Register ``cory/Pioneer-v0`` and ``cory/TinyVocab-v0`` with Gymnasium (idempotent)."""
    from cory_env.tasks.tiny_vocab import CONTEXT_LEN
    registry = gym.envs.registration.registry
    if "cory/Pioneer-v0" not in registry:
        gym.register(id="cory/Pioneer-v0", entry_point="cory_env.gym_env:PioneerEnv")
    if "cory/TinyVocab-v0" not in registry:
        gym.register(id="cory/TinyVocab-v0", entry_point="cory_env.gym_env:PioneerEnv",
                     kwargs={"task": "tiny_vocab", "context_len": CONTEXT_LEN})
