"""
# CORY token environment (``cory_token_v0``)

Two copies of an LLM fine-tuned together (CORY, Ma et al., NeurIPS 2024, arXiv 2410.06101). The **pioneer**
answers a query q token by token; then the **observer** answers the same q after reading the pioneer's answer a1
(**knowledge transfer**). Both seats receive the **collective reward** r(q, a1) + r(q, a2).

| | |
|---|---|
| Import | ``from cory_env import env, raw_env`` |
| Agents | ``possible_agents = ["pioneer", "observer"]`` (seats; models move between them at role exchange); any seating: its seat names (`cory_env.seating`) |
| Action space | ``Discrete(V)``, V = ``len(tokenizer)``: the next token id; with a tokenizer per seat, each seat's own V_seat |
| Observation space | ``Dict`` of ``input_ids`` (L,) int64, ``attention_mask`` (L,) int64, ``action_mask`` (V,) int8 (per seat: V_seat) |
| Tokenizer per seat | one for all seats, or ``tokenizer={seat: tokenizer}`` (each seat acts and observes in its own tokens; what it reads crosses as text: docs/seats.md); ``env.unwrapped.tokenizers`` says which |
| Reward | 0 on every step; at the end both seats get r_i + c * r_j (c = ``partner_reward_coef``, default 1); N seats: R = M · r |
| Arguments | ``config`` (`EnvConfig`) or its fields, ``tokenizer``, ``reward_fn``, ``task``, ``seating``, ``render_mode`` |

## Observation

A seat's own context window of L = ``context_len`` tokens, left padded with the pad id: its prompt followed by
its response so far. ``attention_mask`` is 0 on padding. ``action_mask`` is all ones unless the task bans tokens
(one read-only array, shared between steps). Before its turn the observer's window is all padding. Arrays are
read-only views, valid until the next ``reset``.

## Action

One token id per step (``Discrete(V)``; with a task action mask, only ids whose mask entry is 1). The pioneer
acts first, one token per step, until it emits EOS or reaches the episode's response length (drawn per episode
from [min_new_tokens, max_new_tokens], IMDB 4-15, shared by both seats). Then ``agent_selection``
moves to the observer (`AgentSelector.next()` once per response, not per token), whose prompt is the
knowledge-transfer template filled with the query's and the pioneer's exact token ids (IMDB, official code:
``I can make this sentence "{query}{response}" more positive: {query}``). With ``knowledge_transfer=False`` (the
paper's w/o KT ablation) the observer's prompt is the pioneer's (the query alone). Both seats stay live until
the observer's response ends; then both terminate together and must each be stepped once with ``None``.

Other line-ups are data (`cory_env.seating.Seating`; ``seating="ppo"`` the pioneer alone, ``seating="chain:N"``
N seats, seat k reading seats < k): the seats act in order, each seat's prompt shows what its `Seat` sees (the
query, the responses of the seats it reads), and every seat terminates when the last one's response ends.

## Rewards

Intermediate rewards are 0. When the last seat's response ends, the task reward scores *text* (query + response,
decoded with ``skip_special_tokens=True``; never the observer's template): r_k = r(q, a_k), and seat i gets R_i =
Σ_j M_ij r_j (`Seating.reward_matrix`; two seats: the collective reward r_i + c * r_j). The per-token KL penalty to
the reference model is **not** part of the env reward: the learners add it (TRL-style PPO: -beta * KL_t per token).
``infos[seat]`` then holds ``task_reward`` (float), ``response_text`` (str) and ``response_len`` (int, tokens).

## Arguments

See `cory_env.config.EnvConfig` for every field. Also:

* ``tokenizer``: a Hugging Face tokenizer, or a name as ``--model`` takes it (the offline alias
  ``"smollm2-135m-instruct"``, a ``.gguf`` file, a local folder or a hub id; `cory_env.hub.load_tokenizer`). One
  without a pad token gets pad = EOS and left padding. A mapping ``{seat: tokenizer}`` gives each seat its own (its
  model's): the seat's spaces, observations and actions are in its tokens, and `set_tokenizers` changes them
  between episodes (role exchange moves a model with its tokenizer).
* ``reward_fn``: a reward name (``"vader"``, ``"distilbert-imdb"``) or a callable ``(queries, responses)`` or
  ``(queries, responses, records)`` returning one float per pair; overrides the task's reward.
* ``task``: a task name or a `cory_env.tasks.Task` object.
* ``seating``: a `cory_env.seating.Seating` or a seating spec (``"cory"``, ``"ppo"``, ``"chain:N"``); default the
  config's ``seating`` field (None: the task's default line-up).
* ``reset(seed, options)``: ``options={"query": text or token ids}`` plays that query (whole; it is truncated from
  the left with a warning if it does not fit L, or raises with ``truncate_query=False``); ``options={"stream_offset":
  i}`` draws the episode from stream ``(seed, i)``, the stream of row i of a `BatchedCORYEnv` reset with the same seed.

Errors: actions outside [0, V), non-integer actions, a non-None action for a finished seat, stepping before
``reset``, an empty query and a misbehaving reward function raise ``TypeError``/``ValueError``/``RuntimeError``
naming the problem (`env()` adds PettingZoo's wrappers, whose bounds assertion fires first for out-of-range ids).

## Version history

* v0: first release; an episode draws from stream ``(seed, stream_offset)`` of numpy's `SeedSequence`.
"""

from __future__ import annotations

import logging

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import AgentSelector, wrappers

from cory_env.config import EnvConfig, check_render_mode
from cory_env.episode import EpisodeBatch
from cory_env.seating import Seating

__all__ = ["env", "raw_env"]

logger = logging.getLogger(__name__)


def env(**kwargs) -> AECEnv:
    """`raw_env` wrapped in PettingZoo's `AssertOutOfBoundsWrapper` and `OrderEnforcingWrapper`."""
    return wrappers.OrderEnforcingWrapper(wrappers.AssertOutOfBoundsWrapper(raw_env(**kwargs)))


class raw_env(AECEnv):  # noqa: N801 - PettingZoo naming convention
    """The CORY token environment, one episode (the B = 1 view of `EpisodeBatch`). See the module docstring.

    Args:
        config: an `EnvConfig`; keyword fields override it (or build one when it is None).
        tokenizer: tokenizer object or name (required).
        reward_fn: reward name or callable overriding the task's.
        task: a task name or `Task` object (default: ``config.task``).
        seating: a `Seating` or a seating spec (default: ``config.seating``; None: the task's default seating).
        render_mode: None or "ansi".
        task_options: the task's options (`cory_env.tasks.TaskSpec.options`: an instance or a dict; None: its defaults).
        **kwargs: `EnvConfig` fields, and fields of the task's options (``min_review_chars=100`` for IMDB).

    Raises:
        TypeError, ValueError: for bad arguments (see `EnvConfig`, `EpisodeBatch`).
    """

    metadata = {"name": "cory_token_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, config: EnvConfig | None = None, tokenizer=None, *, reward_fn=None, task=None,
                 seating: Seating | str | None = None, task_options=None, render_mode: str | None = None,
                 **kwargs) -> None:
        super().__init__()
        check_render_mode(render_mode, self.metadata["render_modes"])
        self.render_mode = render_mode
        self._episode = EpisodeBatch.from_config(config, tokenizer, batch_size=1, task=task, reward_fn=reward_fn,
                                                 seating=seating, task_options=task_options, **kwargs)
        self.config = self._episode.config
        #: The `Seating` played.
        self.seating = self._episode.seating
        self.possible_agents = list(self.seating.names)
        self.agents: list[str] = []
        self.agent_selection = None
        self.rewards, self._cumulative_rewards, self.terminations, self.truncations, self.infos = {}, {}, {}, {}, {}
        self._seat_spaces()
        self._selector = AgentSelector(self.possible_agents)
        self._action = np.zeros(1, dtype=np.int64)

    def _seat_spaces(self) -> None:
        ep, L = self._episode, self.config.context_len
        self.tokenizer = ep.tokenizer  # the first seat's
        #: Seat -> its tokenizer (docs/seats.md).
        self.tokenizers = dict(ep.tokenizers)
        self._action_spaces = {s: spaces.Discrete(ep.vocab_sizes[s]) for s in self.possible_agents}
        self._observation_spaces = {
            s: spaces.Dict({
                "input_ids": spaces.Box(0, ep.vocab_sizes[s] - 1, shape=(L,), dtype=np.int64),
                "attention_mask": spaces.Box(0, 1, shape=(L,), dtype=np.int64),
                "action_mask": spaces.Box(0, 1, shape=(ep.vocab_sizes[s],), dtype=np.int8),
            }) for s in self.possible_agents
        }

    def set_tokenizers(self, tokenizer) -> None:
        """Seat the tokenizers between episodes (one for all, or seat -> tokenizer; `EpisodeBatch.set_tokenizers`):
        the seats' spaces follow.

        Raises:
            RuntimeError: during an episode. ValueError: a mapping that does not name every seat once.
        """
        if self.agents and not all(self.terminations.get(a) for a in self.agents):
            raise RuntimeError("set_tokenizers() during an episode; call it before reset()")
        self._episode.set_tokenizers(tokenizer)
        self._seat_spaces()

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_spaces[agent]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """The seat's window: ``input_ids`` (L,) int64, ``attention_mask`` (L,) int64, ``action_mask`` (V,) int8."""
        if agent not in self._action_spaces:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        if self._episode.phase is None:
            raise RuntimeError("observe() before reset(); call reset(seed=...) first")
        ids, mask = self._episode.window(agent)
        return {"input_ids": ids[0], "attention_mask": mask[0], "action_mask": self._episode.action_masks[agent]}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Start an episode; ``options={"query": text or token ids}`` plays that query, ``options={"stream_offset":
        i}`` draws from stream ``(seed, i)`` (row i of a batched env with the same seed); other keys are ignored."""
        options = options or {}
        query = options.get("query")
        self._episode.reset(seed=seed, queries=None if query is None else [query],
                            stream_offset=options.get("stream_offset", 0))
        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self._selector.reset()

    def step(self, action) -> None:
        """Append the acting seat's next token (``None`` for a finished seat).

        Raises:
            RuntimeError: before `reset` or once every seat was removed.
            TypeError: for a non-integer action (the seat is named).
            ValueError: for an id outside [0, V) or banned by the action mask, or a non-None action for a finished seat.
        """
        if not self.agents:
            raise RuntimeError("step() before reset()" if self._episode.phase is None else
                               "the episode is over (every seat finished); call reset()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError(f"seat {agent!r} has finished its episode; step it with None, got {action!r}")
            self._was_dead_step(action)
            return
        self._action[0] = self._checked(agent, action)
        self._cumulative_rewards[agent] = 0.0
        if self._episode.step(self._action, check=False):
            if self._episode.done:
                self._finish()
            self.agent_selection = self._selector.next()
        self._accumulate_rewards()

    def render(self) -> str | None:
        """The query and every seat's response so far as text (render_mode "ansi")."""
        if self.render_mode is None:
            logger.warning("render() called without render_mode; create the env with render_mode='ansi'")
            return None
        ep = self._episode
        if ep.phase is None:
            return "(no episode: call reset())"
        lines = [f"query: {ep.query_text[0]!r}"]
        for seat in self.possible_agents:
            text = self.tokenizers[seat].decode(ep.response_ids(seat)[0], skip_special_tokens=True)
            lines.append(f"{seat}: {text!r}")
        return "\n".join(lines)

    def close(self) -> None:
        """Nothing to release (the tokenizer and reward function belong to the caller)."""

    def transcript(self):
        """The finished episode as an `EpisodeTranscript` (B = 1)."""
        return self._episode.transcript()

    def _checked(self, agent: str, action) -> int:
        V = self._episode.vocab_sizes[agent]
        if type(action) is not int:
            if isinstance(action, np.integer) or (isinstance(action, np.ndarray) and action.shape in ((), (1,))
                                                  and action.dtype.kind in "iu"):
                action = int(action.reshape(-1)[0]) if isinstance(action, np.ndarray) else int(action)
            else:
                raise TypeError(f"seat {agent!r}: action must be an integer token id in [0, {V}), "
                                f"got {action!r} ({type(action).__name__})")
        if not 0 <= action < V:
            raise ValueError(f"seat {agent!r}: action {action} is outside the vocabulary [0, {V}); "
                             f"sample token ids from Discrete({V})")
        allowed = self._episode.alloweds[agent]
        if allowed is not None and not allowed[action]:
            raise ValueError(f"seat {agent!r}: action {action} is banned by the task's action_mask; sample from "
                             "observation['action_mask']")
        return action

    def _finish(self) -> None:
        ep = self._episode
        for seat in self.possible_agents:
            self.rewards[seat] = float(ep.reward[seat][0])
            self.terminations[seat] = True
            self.infos[seat] = {"task_reward": float(ep.task_reward[seat][0]),
                                "response_text": ep.response_text[seat][0],
                                "response_len": len(ep.response[seat][0])}
