"""The episode sizes an adapter's env needs, computed from the task and the seating: the smallest context window in
which every seat's prompt holds a whole query, the responses it reads and its own response, and the most env steps
of an episode. No adapter keeps a window of its own; their networks read L and V from the env's spaces.

Example:
    >>> size = episode_size("tiny_vocab", "chain:4")
    >>> size.context_len, size.max_new_tokens, size.num_seats, size.max_episode_steps
    (14, 2, 4, 8)
"""

from __future__ import annotations

from dataclasses import dataclass

from cory_env.config import EnvConfig
from cory_env.seating import Seating, config_seating
from cory_env.tasks import TASKS, make_task, task_spec, task_tokenizer
from cory_env.tokenizer import encode_text, prepare_tokenizer

__all__ = ["LADDER_CONTEXT_LEN", "EpisodeSize", "aec_env", "default_context_len", "episode_size"]

#: The window the learning ladder's tiny rungs play (`benchmarks/learning.py`: ``--context_len 12``): an adapter's
#: default window when it fits the seating (`default_context_len`), so a library's arm plays the env this project's
#: arms play and its seeded numbers stay comparable.
LADDER_CONTEXT_LEN = 12


@dataclass(frozen=True)
class EpisodeSize:
    """How large one episode of a task under a seating is, in tokens.

    Attributes:
        context_len: L, the smallest window that fits every seat's prompt (its template, the longest query it sees,
            each response it reads at ``max_new_tokens``) followed by its own ``max_new_tokens`` response, so no
            query is cut.
        max_new_tokens: T, the longest response of a seat.
        num_seats: N, the seats that answer in turn.
    """

    context_len: int
    max_new_tokens: int
    num_seats: int

    @property
    def max_episode_steps(self) -> int:
        """Most env steps of one episode: every seat answers with at most T tokens (N · T)."""
        return self.num_seats * self.max_new_tokens


def episode_size(task: str = "tiny_vocab", seating: Seating | str | None = None) -> EpisodeSize:
    """The sizes of an episode of a task that brings its own tokenizer (``tiny_vocab``, ``relay``, ``chain_relay``;
    `cory_env.tasks.TaskSpec.tokenizer`), played with `seating` (a `Seating` or a spec; None: the task's default) and
    the env's defaults (knowledge transfer on). ``context_len`` grows with the seats: seat k of ``chain:N`` reads
    k - 1 responses.

    Raises:
        ValueError: a task without a tokenizer of its own (the adapters' networks embed the task's vocabulary), an
            unknown task or a bad seating spec.
    """
    if task_spec(task).tokenizer is None:
        own = [name for name, spec in TASKS.known() if spec.tokenizer is not None]  # imports no plug-in
        raise ValueError(f"task {task!r} brings no tokenizer of its own, and the library adapters embed a task's own "
                         f"vocabulary; use one of {own}")
    tokenizer = prepare_tokenizer(task_tokenizer(task))
    config = EnvConfig(task=task)
    built = make_task(task, config, tokenizer)
    seats = seating if isinstance(seating, Seating) else config_seating(EnvConfig(task=task, seating=seating), built)
    T = built.max_new_tokens
    if built.query_tokens:
        longest = built.query_tokens[1]
    else:
        queries = [str(r["query"]) for r in built.records]
        longest = max(len(ids) for ids in encode_text(tokenizer, queries))
    prompts = seats.prompt_templates(built, tokenizer).values()
    return EpisodeSize(context_len=max(p.prompt_len(longest, T) for p in prompts) + T, max_new_tokens=T,
                       num_seats=seats.num_seats)


def default_context_len(task: str = "tiny_vocab", seating: Seating | str | None = None) -> int:
    """An adapter's default window: the ladder's `LADDER_CONTEXT_LEN` when every prompt fits it, else the smallest
    that does (`episode_size`), so it grows with the seats (``chain:4``: 14, ``chain:6``: 18).

    >>> default_context_len("tiny_vocab", "cory"), default_context_len("tiny_vocab", "chain:6")
    (12, 18)
    """
    return max(LADDER_CONTEXT_LEN, episode_size(task, seating).context_len)


def aec_env(task: str = "tiny_vocab", seating: Seating | str | None = None, *, context_len: int | None = None):
    """The CORY AEC env an adapter wraps: a task with its own tokenizer (and action mask), its seating, and the
    window `default_context_len` when `context_len` is None.

    Raises:
        ValueError: a task without its own tokenizer, a bad seating, or a `context_len` too small for even the
            shortest query (the env's error names the length needed).
    """
    from cory_env import env
    context_len = default_context_len(task, seating) if context_len is None else context_len
    return env(task=task, tokenizer=task_tokenizer(task), context_len=context_len, seating=seating)
