"""`BatchedCORYEnv`: B CORY episodes at once, the view trainers roll out through.

Same episode rules, observations and rewards as the AEC env (`cory_env.token_env`), with a leading batch axis:
the batch moves in lock-step phases, one per seat of the seating (all pioneers, then all observers, ...). Rows
whose response ended keep receiving actions, which are ignored (pad is appended with attention mask 0), so each
step shifts every left-padded window left by one column and a KV-cached agent can reuse its cache.

Example:
    >>> from agents.tiny import tiny_tokenizer
    >>> env = BatchedCORYEnv(EnvConfig(), tiny_tokenizer(), batch_size=4)
    >>> obs, info = env.reset(seed=0)
    >>> while not env.done:
    ...     obs, rewards, terminations, truncations, infos = env.step(np.zeros(4, dtype=np.int64))
    >>> rewards["pioneer"].shape, env.transcript().seats["observer"].response_ids[0]
    ((4,), [0])
"""

from __future__ import annotations

import numpy as np

from cory_env.config import EnvConfig
from cory_env.checks import check_groups
from cory_env.episode import EpisodeBatch, EpisodeTranscript, readonly_view
from cory_env.seating import Seating

__all__ = ["BatchedCORYEnv"]


class BatchedCORYEnv:
    """B CORY episodes stepped together (see the module docstring and docs/architecture.md).

    Args:
        config, reward_fn, task, task_options: as for `cory_env.token_env.raw_env`.
        **kwargs: as for `cory_env.token_env.raw_env`.
        tokenizer: tokenizer object or name (required); or seat -> tokenizer when the seats' models use different
            tokenizers (`EpisodeBatch`, docs/seats.md; `set_tokenizers` moves them at role exchange).
        batch_size: B.
        seating: a `cory_env.seating.Seating`, or a seating spec (``"cory"``, ``"ppo"``: the pioneer alone, the PPO
            baseline's and the evaluations' env, ``"chain:N"``); default ``config.seating`` (None: the task's
            default seating). `possible_agents`, rewards, infos and the transcript hold its seats.
        group_size: k, rows per query (GRPO's samples per query).
        task_tokenizer: as for `EpisodeBatch` (default the first seat's).

    Raises:
        TypeError, ValueError: for bad arguments (see `EnvConfig`, `EpisodeBatch`).
    """

    def __init__(self, config: EnvConfig | None = None, tokenizer=None, batch_size: int = 1, reward_fn=None,
                 task=None, seating: Seating | str | None = None, task_options=None, *, group_size: int = 1,
                 task_tokenizer=None, **kwargs) -> None:
        self._episode = EpisodeBatch.from_config(config, tokenizer, batch_size=batch_size, task=task,
                                                 reward_fn=reward_fn, seating=seating, task_options=task_options,
                                                 task_tokenizer=task_tokenizer, **kwargs)
        self.config = self._episode.config
        #: k: rows [g·k, (g+1)·k) play one query (GRPO's samples per query); 1 = every row its own.
        self.group_size = check_groups(batch_size, group_size, fix="pass a group_size that divides batch_size")
        #: The `Seating` played.
        self.seating = self._episode.seating
        self.possible_agents = list(self._episode.seats)
        self.batch_size = batch_size
        self.context_len = self.config.context_len
        self._seat_tokenizers()
        self._zeros = readonly_view(np.zeros(batch_size, dtype=np.float64))
        self._false = readonly_view(np.zeros(batch_size, dtype=bool))
        self._true = readonly_view(np.ones(batch_size, dtype=bool))

    def _seat_tokenizers(self) -> None:
        ep, B = self._episode, self.batch_size
        #: Seat -> its tokenizer (one object for every seat unless the seats' models use different ones).
        self.tokenizers = dict(ep.tokenizers)
        #: Seat -> its action-space size V_seat.
        self.vocab_sizes = dict(ep.vocab_sizes)
        self.tokenizer, self.pad_token_id, self.vocab_size = ep.tokenizer, ep.pad_id, ep.vocab_size  # the first seat's
        #: Seat -> its int8 (B, V_seat) read-only action mask.
        self.action_masks = {s: np.broadcast_to(ep.action_masks[s], (B, ep.vocab_sizes[s])) for s in ep.seats}
        self.action_mask = self.action_masks[ep.seats[0]]

    def set_tokenizers(self, tokenizer) -> None:
        """Seat the tokenizers (one for all seats, or seat -> tokenizer), between episodes: role exchange moves a
        model's tokenizer with it (`EpisodeBatch.set_tokenizers`; nothing happens when they are already seated).

        Raises:
            RuntimeError: during an episode. ValueError: a mapping that does not name every seat once.
        """
        self._episode.set_tokenizers(tokenizer)
        if any(self.tokenizers[s] is not t for s, t in self._episode.tokenizers.items()):
            self._seat_tokenizers()

    @property
    def max_new_tokens(self) -> int:
        """The longest response any seat may write, in tokens (the task's, or a seat's own from
        `EnvConfig.seat_generation`)."""
        return self._episode.max_new_tokens

    @property
    def text_channel(self) -> bool:
        """True when some seats use different tokenizers, so what a seat reads of another crosses as text
        (docs/seats.md)."""
        return self._episode.text_channel

    @property
    def task(self):
        """The resolved `Task`."""
        return self._episode.task

    @property
    def agent_selection(self) -> str | None:
        """The seat acting now ("pioneer", "observer", ... in seating order), or None when done (or before reset)."""
        return self._episode.acting

    @property
    def done(self) -> bool:
        """True once every response of the last seat ended (rewards are out)."""
        return self._episode.done

    @property
    def active(self) -> np.ndarray:
        """bool (B,) copy: rows still writing in the current phase."""
        return self._episode.active

    def observe(self, seat: str | None = None) -> dict[str, np.ndarray]:
        """A seat's windows (default: the acting seat, or the last seat once done).

        Returns:
            ``input_ids`` int64 (B, L) and ``attention_mask`` int64 (B, L) read-only views in the seat's own tokens,
            ``action_mask`` int8 (B, V_seat) read-only broadcast view.
        """
        seat = seat or self.agent_selection or self.possible_agents[-1]
        if seat not in self.possible_agents:
            raise ValueError(f"unknown seat {seat!r}; seats are {self.possible_agents}")
        ids, mask = self._episode.window(seat)
        return {"input_ids": ids, "attention_mask": mask, "action_mask": self.action_masks[seat]}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start B episodes (row i draws from stream ``(seed, i)``, `EpisodeBatch.reset`); ``options={"queries": [text
        or ids] * B}`` plays those; with `group_size` k (the constructor's) row i draws stream ``(seed, i // k)``, so
        k consecutive rows share a query; ``options={"stream_offset": o}`` adds o to every row's stream;
        ``options={"responses": {seat: [ids] * B}}`` gives those seats' responses (they do not act: counterfactual
        episodes, `EpisodeBatch.reset`).

        Returns:
            (the first seat's observation, info) with ``info["query_text"]`` the B query texts.
        """
        options = options or {}
        self._episode.reset(seed=seed, queries=options.get("queries"), group_size=self.group_size,
                            stream_offset=options.get("stream_offset", 0), responses=options.get("responses"))
        return self.observe(), {"query_text": list(self._episode.query_text)}

    def step(self, actions) -> tuple[dict, dict, dict, dict, dict]:
        """Append one token per row for the acting seat: `actions`, int (B,) token ids (numpy or CPU tensor), ignored
        for rows in ``~active``.

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``: the next acting seat's observation (the last
            seat's last one once done); rewards seat -> float64 (B,), 0 until done, then the seat's reward
            (R = M · r: the collective reward); terminations seat -> bool (B,), all True once done; truncations
            all False; infos seat -> ``{}`` until done, then ``task_reward`` float64 (B,), ``response_text`` list[str], ``response_len``
            int64 (B,). Returned arrays are read-only.

        Raises:
            RuntimeError: before `reset` or after done.
            TypeError, ValueError: for bad actions (seat, row and value named).
        """
        self._episode.step(actions)
        seats = self.possible_agents
        truncations = dict.fromkeys(seats, self._false)
        if not self._episode.done:
            return (self.observe(), dict.fromkeys(seats, self._zeros), dict.fromkeys(seats, self._false),
                    truncations, {s: {} for s in seats})
        ep = self._episode
        rewards = {s: readonly_view(ep.reward[s]) for s in seats}
        infos = {s: {"task_reward": readonly_view(ep.task_reward[s]), "response_text": list(ep.response_text[s]),
                     "response_len": np.array([len(r) for r in ep.response[s]], dtype=np.int64)} for s in seats}
        return self.observe(), rewards, dict.fromkeys(seats, self._true), truncations, infos

    def transcript(self) -> EpisodeTranscript:
        """The finished batch (see `EpisodeTranscript`). Raises RuntimeError before done."""
        return self._episode.transcript()

    def close(self) -> None:
        """Nothing to release."""
