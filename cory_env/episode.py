"""`EpisodeBatch`: the pure state of B CORY episodes advancing in lock-step (no PettingZoo).

One episode is played by the seats of a `cory_env.seating.Seating`, in order: CORY's pioneer writes a response a1 to its
prompt, one token per step; once every pioneer response in the batch has ended, each observer prompt is built by the
knowledge-transfer template from the query q and a1 (token ids spliced, a1 without its trailing EOS); the observers
write a2; then every seat gets its reward (R = M · r: the collective reward) and the episode is done. With N seats the
phases continue the same way, seat k's prompt showing what its `Seat` sees (the query, the responses of the seats it
reads). A response ends at EOS (kept as its last token) or at the episode's response length, drawn from [min_new_tokens,
max_new_tokens] and shared by every seat (a seat with its own range, `EnvConfig.seat_generation`, draws its own after
the shared draws). Seats may use different tokenizers (a model per slot): each acts in its own vocabulary and reads the
others as text (`EpisodeBatch`, docs/seats.md); the queries themselves are drawn and cut in one reference tokenizer, the
task's (`EpisodeBatch.query_tokenizer`: the run's first model's), so they are the same whoever sits in the first seat.

Each seat has a write-once buffer (B, L + T_max): its prompt is right-aligned at column L, token k of the
response goes to column L + k, and its observation window after k tokens is columns [k, k + L). Rows whose
response ended write the pad id with attention mask 0. Windows are read-only views into the buffer and stay
valid until the next `reset` (which allocates new buffers), so callers can keep them without copying.

Seeding: row i of ``reset(seed=s)`` draws from its own generator, stream ``(s, i)`` of numpy's `SeedSequence` (record
index, query length, response length, in that order, whether or not an explicit query is given); ``reset()`` without a
seed continues the generators. Streams of different seeds are independent draws, and ``stream_offset=o`` moves row i to
stream ``(s, o + i)``: a B-row batch equals B single-row batches reset with seed s and stream offsets 0, ..., B - 1.

The AEC env (`cory_env.token_env`) is the B = 1 view, `cory_env.BatchedCORYEnv` the batched one. The single-agent
seating (`Seating.single_agent()`, ``seating="ppo"``: the PPO baseline, evaluation) has the pioneer alone, rewarded
with its own task reward.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cory_env.checks import check_groups, check_number
from cory_env.config import EnvConfig
from cory_env.rewards import score_texts
from cory_env.seating import PIONEER, Seating, seating_of
from cory_env.tasks import Task, env_arguments, make_task
from cory_env.tasks.base import with_templates
from cory_env.tasks import task_tokenizer as own_tokenizer
from cory_env.hub import as_tokenizer
from cory_env.tokenizer import encode_text

__all__ = ["EpisodeBatch", "EpisodeTranscript", "SeatTranscript", "partner_records", "readonly_view"]

logger = logging.getLogger(__name__)


@dataclass
class SeatTranscript:
    """One seat's side of B finished episodes (see `EpisodeTranscript`): its token ids are those of the seat's own
    tokenizer (``pad_id`` its pad id; ``allowed`` its bool (V_seat,) allowed actions, None: every token)."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    response_text: list[str]
    task_reward: np.ndarray
    reward: np.ndarray
    pad_id: int | None = None
    allowed: np.ndarray | None = None


@dataclass
class EpisodeTranscript:
    """B finished episodes: queries, records and, per seat (in acting order), prompts, responses (EOS kept when
    emitted), texts, task rewards (float64 (B,)) and rewards (float64 (B,): R = M · r, the collective reward);
    ``allowed`` is the first seat's bool (V,) set of allowed actions (None: every token), which a learner needs to
    score actions under the distribution they were sampled from (each seat's own: `SeatTranscript.allowed`; they
    differ only when the seats use different tokenizers). ``query_ids`` are the reference tokenizer's
    (`EpisodeBatch.query_tokenizer`); each seat's own are in its ``prompt_ids``."""

    query_ids: list[list[int]]
    query_text: list[str]
    records: list[dict]
    seats: dict[str, SeatTranscript] = field(default_factory=dict)
    allowed: np.ndarray | None = None


MAX_TOKENS_PER_CHAR = 4
"""A UTF-8 character is at most 4 bytes, so a byte-level tokenizer spreads it over at most 4 tokens."""


def _clean_cut(tokenizer, part: list[int], full: str, *, end: bool) -> bool:
    """Whether the token slice `part` of a sequence whose text is `full` is cut on character boundaries: its text
    has no U+FFFD at the cut (`end`: a prefix, cut at its end; else a suffix, cut at its start) that `full` lacks."""
    text = tokenizer.decode(part, skip_special_tokens=True)
    if end:
        return not text.endswith("\ufffd") or full.startswith(text)
    return not text.startswith("\ufffd") or full.endswith(text)


class EpisodeBatch:
    """B CORY episodes in lock-step phases: ``phase`` is None (before reset), the acting seat's name (in seating
    order), "done".

    Args:
        task: the `Task` (records, reward function, templates, lengths, action mask, default seating).
        tokenizer: prepared tokenizer (`prepare_tokenizer`), V = ``len(tokenizer)``; or a mapping seat -> its
            tokenizer when the seats' models use different ones (the module docstring; docs/seats.md).
            `set_tokenizers` moves them between episodes.
        batch_size: B.
        context_len: L, observation window length in tokens.
        seating: the `Seating` (seats, what each sees, reward matrix); None: the task's default seating
            (`cory_env.seating.seating_of`: CORY's two seats unless the task declares others).
        truncate_query: truncate too-long queries from the left with a warning (True) or raise (False).
        seat_generation: per-seat settings ``{seat: {field: value}}`` (`EnvConfig.seat_generation`); the env reads
            ``min_new_tokens`` / ``max_new_tokens`` (the seat's own response-length range instead of the task's)
            and ``stop_strings``; the sampling fields are the agents'.
        stop_strings: strings that end every seat's response (a seat's own ``stop_strings`` replace them): the
            response ends at the token whose text completes one (kept), as `generate`'s ``stop_strings``.
        task_tokenizer: the tokenizer the task was built with (its `Task.action_mask` is for it) and the queries
            are drawn and cut in (`query_tokenizer`); default the first seat's at construction.

    Raises:
        ValueError: if B < 1, a seat has no valid template on the task (`Seating.template_of`) or an empty one, L
            cannot hold a template + the shortest query + the responses it reads + max_new_tokens, the task's
            action mask is not (V,) (or exists for one tokenizer only while the seats use several), a tokenizer
            mapping misses a seat or names another, or `seat_generation` names a seat the seating does not have.
    """

    def __init__(self, task: Task, tokenizer, *, batch_size: int = 1, context_len: int = 128,
                 seating: Seating | None = None, truncate_query: bool = True,
                 seat_generation: Mapping[str, Mapping] | None = None,
                 stop_strings: Sequence[str] | None = None, task_tokenizer=None) -> None:
        check_number(batch_size, "batch_size", integer=True, low=1)
        self.task = task
        self.batch_size, self.context_len = batch_size, context_len
        self.truncate_query = truncate_query
        self.seating = seating_of(seating, task=task)
        #: Seats that act in this batch, in order.
        self.seats = self.seating.names
        seat_generation = dict(seat_generation or {})
        unknown = sorted(set(seat_generation) - set(self.seats))
        if unknown:
            raise ValueError(f"seat_generation names the seat(s) {unknown}, which the seating "
                             f"{self.seating.label!r} does not have; name one of {list(self.seats)}")
        #: Seat -> (min_new_tokens, max_new_tokens) of its responses: the task's, or the seat's own.
        self.lengths = {s: (seat_generation.get(s, {}).get("min_new_tokens", task.min_new_tokens),
                            seat_generation.get(s, {}).get("max_new_tokens", task.max_new_tokens))
                        for s in self.seats}
        for seat, (low, high) in self.lengths.items():
            check_number(high, f"seat_generation {seat}.max_new_tokens", integer=True, low=low,
                         fix=f"at least the seat's min_new_tokens={low}")
        self._own_lengths = [s for s in self.seats if self.lengths[s] != (task.min_new_tokens, task.max_new_tokens)]
        #: Seat -> the strings that end its responses (empty: none).
        self.stop_strings = {s: tuple(seat_generation.get(s, {}).get("stop_strings", stop_strings or ()))
                             for s in self.seats}
        #: The longest response any seat may write (the buffers' width beyond L).
        self.max_new_tokens = max(high for _, high in self.lengths.values())
        self.tokenizers: dict[str, object] = {}
        #: The tokenizer the task was built with (`Task.action_mask` is for it; other tokenizers: `action_mask_for`).
        first = tokenizer.get(self.seats[0]) if isinstance(tokenizer, Mapping) else tokenizer
        self.task_tokenizer = first if task_tokenizer is None else task_tokenizer  # a bad mapping: set_tokenizers
        #: The tokenizer the queries are drawn and cut in (the task's; fixed: role exchange does not move it), so an
        #: episode's query is the same whichever model sits in the first seat.
        self.query_tokenizer = self.task_tokenizer
        self.set_tokenizers(tokenizer)
        self._rngs: list[np.random.Generator] | None = None
        self._k: dict[str, int] = {}  # seat -> tokens written by every active row (set at reset)
        self._given: dict[str, list[list[int]]] = {}  # seat -> given responses of this episode (`reset`)
        self.phase: str | None = None

    def set_tokenizers(self, tokenizer) -> None:
        """Seat the tokenizers: one for every seat, or a mapping seat -> tokenizer (role exchange moves a model's
        tokenizer with it). Rebuilds the prompts, the action masks and the query budget; call it between episodes
        (before `reset`, or once done). Giving the tokenizers already seated does nothing.

        Raises:
            RuntimeError: during an episode.
            ValueError: a mapping that misses a seat or names another; what the constructor refuses.
        """
        if isinstance(tokenizer, Mapping):
            if set(tokenizer) != set(self.seats):
                raise ValueError(f"the tokenizer mapping names the seats {sorted(tokenizer)}, the seating has "
                                 f"{list(self.seats)}; give one tokenizer per seat")
            tokenizers = {s: tokenizer[s] for s in self.seats}
        else:
            tokenizers = dict.fromkeys(self.seats, tokenizer)
        if all(tokenizers[s] is self.tokenizers.get(s) for s in self.seats):
            return
        if getattr(self, "phase", None) not in (None, "done"):
            raise RuntimeError(f"set_tokenizers() during an episode (seat {self.phase!r} is acting); call it "
                               "before reset() or once the episode is done")
        self.tokenizers = tokenizers
        first = self.seats[0]
        #: The first seat's tokenizer (the queries are `query_tokenizer`'s).
        self.tokenizer = tokenizers[first]
        #: True when some seats use different tokenizers (what they read crosses as text: the text channel).
        self.text_channel = len({id(t) for t in tokenizers.values()}) > 1
        self.vocab_sizes = {s: len(t) for s, t in tokenizers.items()}
        self.eos_ids = {s: int(t.eos_token_id) for s, t in tokenizers.items()}
        self.pad_ids = {s: int(t.pad_token_id) for s, t in tokenizers.items()}
        self.vocab_size, self.eos_id, self.pad_id = self.vocab_sizes[first], self.eos_ids[first], self.pad_ids[first]
        by_tokenizer: dict[int, dict] = {}  # one set of templates per distinct tokenizer
        self.prompts = {}
        for seat, tok in tokenizers.items():
            if id(tok) not in by_tokenizer:
                by_tokenizer[id(tok)] = self.seating.prompt_templates(self.task, tok)
            self.prompts[seat] = by_tokenizer[id(tok)][seat]
        for seat, prompt in self.prompts.items():
            if not (prompt.literal_len or prompt.query_count or prompt.response_slots):
                raise ValueError(f"seat {seat!r}: its prompt {prompt.template!r} ({prompt.name}) holds no token; a "
                                 "prompt needs at least one token of text")
        masks = {id(tok): self._action_mask(self._task_mask(tok), len(tok)) for tok in tokenizers.values()}
        self.action_masks = {s: masks[id(t)][0] for s, t in tokenizers.items()}
        self.alloweds = {s: masks[id(t)][1] for s, t in tokenizers.items()}
        self.action_mask, self.allowed = self.action_masks[first], self.alloweds[first]
        self._record_ids: dict[int, tuple[list[int], list[int] | None]] = {}  # ids, clean cut lengths
        self.query_budget = self._query_budget(self._check_records())

    def _task_mask(self, tokenizer):
        """The task's action mask for `tokenizer` (`Task.action_mask`, else `Task.action_mask_for`)."""
        task = self.task
        if tokenizer is self.task_tokenizer or task.action_mask is None:
            return task.action_mask
        if task.action_mask_for is None:
            raise ValueError(f"task {task.name!r} restricts the actions with a mask made for one tokenizer, and a seat "
                             "uses another; give the Task an action_mask_for (tokenizer -> mask), or seat models that "
                             "share the task's tokenizer")
        return task.action_mask_for(tokenizer)

    # ----- construction helpers -------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: EnvConfig | None, tokenizer, *, batch_size: int = 1, task: Task | str | None = None,
                    reward_fn=None, seating: Seating | str | None = None, task_options=None, task_tokenizer=None,
                    **kwargs) -> EpisodeBatch:
        """Build from an env view's constructor arguments, the one place they are read (every view, the trainer's
        env and the evaluations' call it): keyword `EnvConfig` fields override `config` and keyword task options go
        to the task's options (`cory_env.tasks.env_arguments`); the resolved config is the result's `config`.

        Given objects are trusted as they are: a `Seating` object is played without being derived again, and a `Task`
        object (built once by the caller, e.g. `plan_run`) takes only the config's templates when they are set; names
        are built (`cory_env.tasks.make_task`, `cory_env.seating.seating_of`). `reward_fn` (a name or a callable)
        replaces the task's reward either way. `tokenizer` None takes the task's own (`cory_env.tasks.task_tokenizer`).

        Raises:
            TypeError: a task that is neither a name nor a `Task`; an unknown keyword (`env_arguments`).
            ValueError: what the config, the task, the seating or the episode core refuse.
        """
        if isinstance(task, str):
            kwargs["task"], task = task, None
        if isinstance(seating, str):
            kwargs["seating"], seating = seating, None
        if task is not None and not isinstance(task, Task):
            raise TypeError(f"task must be a task name or a Task, got {type(task).__name__}")
        config, task_options = env_arguments(config, task, task_options, **kwargs)
        if tokenizer is None and task is None:
            tokenizer = own_tokenizer(config.task)
        if isinstance(tokenizer, Mapping):  # a tokenizer per seat (docs/seats.md); the task is built with the first's
            tokenizer = {seat: as_tokenizer(tok) for seat, tok in tokenizer.items()}
            task_tok = tokenizer.get(PIONEER, next(iter(tokenizer.values())))  # the first seat's, by convention
        else:
            tokenizer = task_tok = as_tokenizer(tokenizer)
        if task_tokenizer is not None:  # the queries' tokenizer (a run's first model's), whoever sits first
            task_tok = task_tokenizer = as_tokenizer(task_tokenizer)
        if task is None:
            task = make_task(config.task, config, task_tok, task_options)  # its builder reads the templates
            task_tokenizer = task_tok
        else:  # a Task object: the config's templates, when set, are the prompts to play
            task = with_templates(task, config)
        if reward_fn is not None:
            task = replace(task, reward_fn=reward_fn)
        if not isinstance(seating, Seating):
            seating = seating_of(config.seating, task=task, knowledge_transfer=config.knowledge_transfer,
                                 partner_reward_coef=config.partner_reward_coef)
        episode = cls(task, tokenizer, batch_size=batch_size, context_len=config.context_len, seating=seating,
                      truncate_query=config.truncate_query, seat_generation=config.seat_generation,
                      stop_strings=config.stop_strings, task_tokenizer=task_tokenizer)
        episode.config = config
        return episode

    def _query_budget(self, shortest: int) -> int:
        """Most query tokens for which every seat's prompt + its max_new_tokens fits in L (a reading seat counts the
        longest read responses); refused when not even the `shortest` query the task can draw fits whole."""
        L = self.context_len
        room = []
        for seat in self.seating.seats:
            p, T = self.prompts[seat.name], self.lengths[seat.name][1]
            read_T = max((self.lengths[r][1] for r in seat.reads), default=T)
            room.append((L - T - p.literal_len - p.response_slots * read_T, p.query_count, p, T, read_T))
        # a prompt without {query} (a private query, `cory_env.tasks.relay`) only has to fit itself
        budget = min(free // count if count else (L if free >= 0 else -1) for free, count, *_ in room)
        if budget < shortest:
            need = max(p.literal_len + p.query_count * shortest + p.response_slots * read_T + T
                       for _, _, p, T, read_T in room)
            raise ValueError(f"context_len={L} is too small: the longest prompt (template + {shortest}-token query "
                             f"+ the responses it reads) plus max_new_tokens={self.max_new_tokens} needs {need} "
                             f"tokens; raise context_len to >= {need} or lower max_new_tokens")
        return budget

    def _check_records(self) -> int:
        """Refuse now any record whose query encodes to no token; returns the fewest query tokens an episode needs
        (``query_tokens[0]``; whole queries: the shortest when ``truncate_query`` is False, else 1)."""
        prefix = (self.task.query_tokens[1] + MAX_TOKENS_PER_CHAR) * MAX_TOKENS_PER_CHAR if self.task.query_tokens \
            else None
        texts = [str(r["query"])[:prefix] for r in self.task.records]
        lengths = [len(ids) for ids in encode_text(self.query_tokenizer, texts)]
        empty = [i for i, n in enumerate(lengths) if not n]
        if empty:
            raise ValueError(f"task {self.task.name!r}: record {empty[0]} has an empty query "
                             f"{self.task.records[empty[0]]['query'][:40]!r} (no token"
                             f"{f'; {len(empty) - 1} more records too' if len(empty) > 1 else ''}); drop empty rows "
                             "from the data")
        if self.task.query_tokens:
            return self.task.query_tokens[0]
        return 1 if self.truncate_query else min(lengths, default=1)

    def _action_mask(self, mask, V: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(read-only int8 (V,) mask, bool (V,) allowed ids or None when every id is allowed)."""
        out = np.ones(V, dtype=np.int8) if mask is None else np.array(mask, dtype=np.int8)  # Task checked: 1-D
        if out.shape != (V,):
            raise ValueError(f"task {self.task.name!r}: action_mask has shape {np.shape(mask)}, expected (V,) = "
                             f"({V},) for this tokenizer")
        out.flags.writeable = False
        return out, None if mask is None else out.astype(bool)

    # ----- reset ----------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, queries: Sequence[str | Sequence[int]] | None = None,
              group_size: int = 1, stream_offset: int = 0,
              responses: Mapping[str, Sequence[Sequence[int]]] | None = None) -> None:
        """Start B new episodes.

        Args:
            seed: row i draws from the generator of stream ``(seed, stream_offset + i // group_size)`` (numpy
                ``default_rng([seed, stream])``: independent across seeds and streams); None continues the current
                generators (fresh entropy on the first reset).
            queries: optional B explicit queries (text, or token ids), used whole (no `query_tokens` cut);
                their records are ``{"query": text}``.
            group_size: k; rows [g·k, (g+1)·k) share a stream, so they play the same record, query length and
                response length (group sampling for GRPO). B must be a multiple of k.
            stream_offset: o >= 0, the stream of the first row (group): a batch with offset o plays the rows
                o·k, o·k + 1, ... of a larger batch with the same seed (data-parallel ranks, evaluation batches).
            responses: seat -> B given responses (token ids of that seat's tokenizer, EOS kept when it ends one):
                those seats do not act; their responses are written as if sampled, and the later seats read them
                (counterfactual episodes: the observer given another query's answer or none,
                `trainers.evaluation.influence`). Each response is cut to the seat's longest response.

        Raises:
            TypeError: for a non-int seed or a query that is neither text nor token ids.
            ValueError: for a negative seed or stream_offset, a wrong number of queries, an empty query, token ids
                outside [0, V), or (with ``truncate_query=False``) a query longer than the context allows.
        """
        B = self.batch_size
        check_groups(B, group_size, fix="pass a group_size that divides the env's batch_size")
        check_number(stream_offset, "stream_offset", integer=True, low=0)
        if seed is not None:
            check_number(seed, "seed", integer=True, low=0, fix="numpy's SeedSequence takes non-negative seeds; or None")
            self._rngs = [np.random.default_rng([int(seed), int(stream_offset) + i // group_size]) for i in range(B)]
        elif self._rngs is None:
            self._rngs = [np.random.default_rng() for _ in range(B)]
        if queries is not None and len(queries) != B:
            raise ValueError(f"got {len(queries)} queries for batch_size={B}; give exactly one per row")
        self._given = self._checked_responses(responses or {})
        task, qt = self.task, self.task.query_tokens
        query_ids, records, max_new = [], [], np.empty(B, dtype=np.int64)
        own_new = {seat: np.empty(B, dtype=np.int64) for seat in self._own_lengths}
        for i, rng in enumerate(self._rngs):
            index = int(rng.integers(len(task.records)))
            q_len = int(rng.integers(qt[0], qt[1] + 1)) if qt else None
            max_new[i] = rng.integers(task.min_new_tokens, task.max_new_tokens + 1)
            for seat in self._own_lengths:  # a seat's own length range: drawn after the shared draws
                own_new[seat][i] = rng.integers(self.lengths[seat][0], self.lengths[seat][1] + 1)
            if queries is None:
                ids, record = self._record_query(index, q_len), task.records[index]
            else:
                ids = self._explicit_query(queries[i])
                record = {"query": queries[i] if isinstance(queries[i], str) else None}
            query_ids.append(self._fit_query(ids))
            records.append(record)
        self.query_ids, self.records = query_ids, records
        self._max_new = {seat: own_new.get(seat, max_new) for seat in self.seats}  # seat -> (B,) response lengths
        self._seat_queries: dict[str, list[list[int]]] = {}  # seats of another tokenizer: the query re-encoded
        self.query_text = self.query_tokenizer.batch_decode(query_ids, skip_special_tokens=True)
        for rec, text in zip(records, self.query_text):
            if rec["query"] is None:
                rec["query"] = text
        W = self.context_len + self.max_new_tokens
        self._ids = {s: np.full((B, W), self.pad_ids[s], dtype=np.int64) for s in self.seats}
        self._mask = {s: np.zeros((B, W), dtype=np.int64) for s in self.seats}
        self._views = {s: (readonly_view(self._ids[s]), readonly_view(self._mask[s])) for s in self.seats}
        self._k = dict.fromkeys(self.seats, 0)
        self.prompt_ids: dict[str, list[list[int]]] = {}
        self._answers: dict[str, list[list[int]]] = {}  # each ended seat's responses without their EOS
        self._start_phase(self.seats[0], self._seat_prompts(self.seats[0]))  # the first seat reads no seat

    def _checked_responses(self, responses: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, list[list[int]]]:
        """`reset`'s given responses as lists, checked: known seats, B rows, ids in the seat's vocabulary."""
        out = {}
        for seat, rows in responses.items():
            if seat not in self.seats:
                raise ValueError(f"responses given for seat {seat!r}, which the seating does not have; seats are "
                                 f"{list(self.seats)}")
            rows = [[int(t) for t in row] for row in rows]
            if len(rows) != self.batch_size:
                raise ValueError(f"seat {seat!r}: {len(rows)} given responses for batch_size={self.batch_size}; give "
                                 "one per row")
            V = self.vocab_sizes[seat]
            bad = [t for row in rows for t in row if not 0 <= t < V]
            if bad:
                raise ValueError(f"seat {seat!r}: given response token ids {bad[:5]} are outside its vocabulary "
                                 f"[0, {V})")
            out[seat] = rows
        return out

    def _play_given(self, seat: str) -> None:
        """Write `seat`'s given responses (`reset`'s ``responses``) as if sampled, each cut at its first EOS and at the
        seat's longest response (`lengths`, not the row's drawn length), and end the phase."""
        L, given, eos, longest = self.context_len, self._given[seat], self.eos_ids[seat], self.lengths[seat][1]
        for i, row in enumerate(given):
            row = row[:row.index(eos) + 1] if eos in row else row
            row = row[:longest]
            self._ids[seat][i, L:L + len(row)] = row
            self._mask[seat][i, L:L + len(row)] = 1
            self._resp_len[i] = len(row)
        self._k[seat] = int(self._resp_len.max())
        self._active[:] = False
        self._n_active = 0
        self._end_phase(seat)

    def _record_query(self, index: int, q_len: int | None) -> list[int]:
        """Record `index`'s query ids: its first `q_len` tokens (all when None), moved to the nearest character
        boundary (the largest clean cut <= q_len, else the smallest above) so the query text holds no U+FFFD."""
        cached = self._record_ids.get(index)
        if cached is None:
            text = self.task.records[index]["query"]
            ids = encode_text(self.query_tokenizer, text)
            if not ids:
                raise ValueError(f"task {self.task.name!r}: record {index} has an empty query {text!r}; drop "
                                 "empty rows from the data")
            cuts = None
            if self.task.query_tokens:
                full = self.query_tokenizer.decode(ids, skip_special_tokens=True)
                ids = ids[: self.task.query_tokens[1] + MAX_TOKENS_PER_CHAR]
                cuts = [k for k in range(1, len(ids) + 1)
                        if _clean_cut(self.query_tokenizer, ids[:k], full, end=True)]
            cached = self._record_ids[index] = (ids, cuts)
        ids, cuts = cached
        if not cuts:  # whole queries (q_len None: ids[:None] is all of them)
            return ids[:q_len]
        below = [k for k in cuts if k <= q_len]
        return ids[: below[-1] if below else cuts[0]]

    def _explicit_query(self, query) -> list[int]:
        if isinstance(query, str):
            try:
                query.encode("utf-8")
            except UnicodeEncodeError as exc:  # lone surrogates: tokenizers fail on them with an obscure message
                raise ValueError(f"query text is not valid Unicode ({exc.reason} at character {exc.start}: "
                                 f"{query[exc.start]!r}); decode the text properly or drop it") from exc
            ids = encode_text(self.query_tokenizer, query)
        elif isinstance(query, (Sequence, np.ndarray)) and all(
                isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in query):
            ids = [int(t) for t in query]
            vocab = len(self.query_tokenizer)
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"query token ids {bad[:5]} are outside the vocabulary [0, {vocab}) of the "
                                 "queries' tokenizer (query_tokenizer: the task's)")
        else:
            raise TypeError(f"a query must be text or a sequence of token ids, got {type(query).__name__}: "
                            f"{query!r}")
        if not ids:
            raise ValueError(f"empty query {query!r}: give at least one token of text")
        return ids

    def _fit_query(self, ids: list[int]) -> list[int]:
        budget = self.query_budget
        if len(ids) <= budget:
            return ids
        if not self.truncate_query:
            raise ValueError(f"query of {len(ids)} tokens does not fit context_len={self.context_len} (at most "
                             f"{budget} query tokens with these templates and max_new_tokens="
                             f"{self.max_new_tokens}); shorten it, raise context_len or set truncate_query=True")
        start = len(ids) - budget
        full = self.query_tokenizer.decode(ids, skip_special_tokens=True)
        while start < len(ids) - 1 and not _clean_cut(self.query_tokenizer, ids[start:], full, end=False):
            start += 1  # not inside a character
        logger.warning("query of %d tokens truncated from the left to %d to fit context_len=%d; raise --context_len "
                       "(or lower max_new_tokens) to keep it whole", len(ids), len(ids) - start, self.context_len)
        return ids[start:]

    # ----- stepping -------------------------------------------------------------------------------------------
    def step(self, actions: np.ndarray, *, check: bool = True) -> bool:
        """Append one token per row to the acting seat's responses.

        Args:
            actions: int (B,) token ids; rows whose response already ended ignore theirs (pad is written).
            check: validate `actions` (callers that validated already pass False).

        Returns:
            True when this step ended the phase (the next seat's turn begins, or the episode is done).

        Raises:
            RuntimeError: before `reset` or after the episode is done.
            TypeError, ValueError: for non-integer actions, a wrong shape, or (active rows) ids outside [0, V)
                or banned by the action mask; the seat, row and value are named.
        """
        seat = self.acting
        if seat is None:
            raise RuntimeError("step() before reset()" if self.phase is None else
                               "the episode is done; call reset() to start a new one")
        if check:
            actions = self._checked(actions, seat)
        # Lock-step: every active row has written exactly k tokens, so lengths need no per-row counter.
        k = self._k[seat] + 1
        col, active, eos = self.context_len + k - 1, self._active, self.eos_ids[seat]
        if self._n_active == self.batch_size:
            self._ids[seat][:, col] = actions
            self._mask[seat][:, col] = 1
            ended = actions == eos
        else:
            self._ids[seat][:, col] = np.where(active, actions, self.pad_ids[seat])
            self._mask[seat][:, col] = active
            ended = (actions == eos) & active
        if k >= self._shortest:
            ended |= active & (self._max_new[seat] <= k)
        if self.stop_strings[seat]:
            ended |= self._stopped(seat, k, active & ~ended)
        self._k[seat] = k
        n_ended = np.count_nonzero(ended)
        if n_ended:
            self._resp_len[ended] = k
            active[ended] = False
            self._n_active -= n_ended
            if self._n_active == 0:
                self._end_phase(seat)
                return True
        return False

    def _stopped(self, seat: str, k: int, rows: np.ndarray) -> np.ndarray:
        """bool (B,): the `rows` whose response (k tokens) now holds one of the seat's stop strings in the text of
        its last tokens (a stop string is completed by the newest token, as `generate`'s ``stop_strings``)."""
        out = np.zeros(self.batch_size, dtype=bool)
        L, tok, stops = self.context_len, self.tokenizers[seat], self.stop_strings[seat]
        for i in np.flatnonzero(rows):  # a row whose text held a stop string before ended then
            text = tok.decode(self._ids[seat][i, L:L + k].tolist(), skip_special_tokens=True)
            out[i] = any(stop in text for stop in stops)
        return out

    def _checked(self, actions, seat: str) -> np.ndarray:
        a = np.asarray(actions)
        if a.dtype.kind not in "iu":
            raise TypeError(f"seat {seat!r}: actions must be integer token ids, got dtype {a.dtype}")
        if a.shape != (self.batch_size,):
            raise ValueError(f"seat {seat!r}: actions must have shape (B,) = ({self.batch_size},), got {a.shape}")
        V, allowed = self.vocab_sizes[seat], self.alloweds[seat]
        bad = np.flatnonzero(self._active & ((a < 0) | (a >= V)))  # a finished row's action is ignored
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"seat {seat!r}: action {int(a[i])} in row {i} is outside the vocabulary "
                             f"[0, {V}); sample token ids from Discrete({V})")
        if allowed is not None:
            bad = np.flatnonzero(self._active & ~allowed[np.clip(a, 0, V - 1)])
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"seat {seat!r}: action {int(a[i])} in row {i} is banned by the task's "
                                 "action_mask; sample from the allowed tokens")
        return a

    def _start_phase(self, seat: str, prompts: list[list[int]]) -> None:
        L = self.context_len
        ids, mask = self._ids[seat], self._mask[seat]
        if self.text_channel:  # the budget counted the first seat's tokens; what another reads may need more
            room = L - self.lengths[seat][1]
            longest = max(len(p) for p in prompts)
            if longest > room:
                raise ValueError(f"seat {seat!r}: its prompt, with the query and the answers it reads encoded by its "
                                 f"own tokenizer, has {longest} tokens, and with max_new_tokens="
                                 f"{self.lengths[seat][1]} does not fit context_len={L}"
                                 f"{'' if self.truncate_query else ' (truncate_query=False)'}; raise context_len to "
                                 f">= {longest + self.lengths[seat][1]} (or shorten the answers it reads: "
                                 "max_new_tokens)")
        for i, prompt in enumerate(prompts):
            ids[i, L - len(prompt):L] = prompt
            mask[i, L - len(prompt):L] = 1
        self.prompt_ids[seat] = prompts
        self._active = np.ones(self.batch_size, dtype=bool)
        self._n_active = self.batch_size
        self._resp_len = np.zeros(self.batch_size, dtype=np.int64)
        self._shortest = int(self._max_new[seat].min())
        self.phase = seat
        if seat in self._given:
            self._play_given(seat)

    def _seat_query(self, seat: str) -> list[list[int]]:
        """The queries in `seat`'s tokens: `query_ids` when it uses the queries' tokenizer, else the query texts
        encoded by its own as plain text (`cory_env.tokenizer.encode_text`)."""
        tok = self.tokenizers[seat]
        if tok is self.query_tokenizer:
            return self.query_ids
        if seat not in self._seat_queries:
            self._seat_queries[seat] = encode_text(tok, self.query_text)
        return self._seat_queries[seat]

    def _read(self, writer: str, reader: str, i: int) -> list[int]:
        """Row i's answer of seat `writer` (without EOS) as seat `reader` reads it: the same ids with a shared
        tokenizer, else its text encoded by the reader's tokenizer as plain text (`cory_env.tokenizer.encode_text`)."""
        answer = self._answers[writer][i]
        if self.tokenizers[writer] is self.tokenizers[reader]:
            return answer
        return encode_text(self.tokenizers[reader], self.tokenizers[writer].decode(answer, skip_special_tokens=True))

    def _seat_prompts(self, seat: str) -> list[list[int]]:
        """Every row's prompt of `seat` through its template; a query re-encoded in a seat's own tokens beyond the
        budget keeps its last tokens (said once per phase, with the fix)."""
        reads, template = self.seating.seat(seat).reads, self.prompts[seat]
        prompts, room, cut = [], self.context_len - self.lengths[seat][1], 0
        for i, q in enumerate(self._seat_query(seat)):
            read = {s: self._read(s, seat, i) for s in reads}
            answers = [t for s in reads for t in read[s]]
            prompt = template.build(q, answers, seat_responses=read)
            if self.text_channel and len(prompt) > room and self.truncate_query and template.query_count and q:
                keep = max(0, len(q) - -(-(len(prompt) - room) // template.query_count))
                prompt, cut = template.build(q[len(q) - keep:], answers, seat_responses=read), cut + 1
            prompts.append(prompt)
        if cut:
            logger.warning("seat %r: %d of %d queries, encoded by its own tokenizer, cut from the left to fit "
                           "context_len=%d; raise --context_len to keep them whole", seat, cut, len(prompts),
                           self.context_len)
        return prompts

    def _end_phase(self, seat: str) -> None:
        k = self.seats.index(seat)
        eos = self.eos_ids[seat]
        self._answers[seat] = [r[:-1] if r and r[-1] == eos else r for r in self.response_ids(seat)]
        if k + 1 < len(self.seats):  # the next seat's prompt: what it sees of the query and the earlier answers
            self._start_phase(self.seats[k + 1], self._seat_prompts(self.seats[k + 1]))
            return
        seats, B = self.seats, self.batch_size
        self.response = {s: self.response_ids(s) for s in seats}
        self.response_text = {s: self.tokenizers[s].batch_decode(self.response[s], skip_special_tokens=True)
                              for s in seats}
        records = list(self.records)
        for j in range(1, len(seats)):  # later seats' rows also carry the earlier answers (partner-aware rewards)
            records += partner_records(self.records, [self.response_text[s] for s in seats[:j]])
        scores = score_texts(self.task.reward_fn, self.task.name, self.query_text * len(seats),
                             [text for s in seats for text in self.response_text[s]], records)
        self.task_reward = {s: scores[i * B:(i + 1) * B] for i, s in enumerate(seats)}
        self.reward = self.seating.rewards([self.task_reward[s] for s in seats])
        self.phase = "done"

    # ----- views ----------------------------------------------------------------------------------------------
    def window(self, seat: str) -> tuple[np.ndarray, np.ndarray]:
        """A seat's current observation window: read-only int64 (B, L) input_ids and attention_mask views.

        Before the seat's phase its window is all padding (mask 0); after its phase it stays on the last window
        (prompt + whole response)."""
        k, (ids, mask) = self._k[seat], self._views[seat]
        return ids[:, k:k + self.context_len], mask[:, k:k + self.context_len]

    def response_ids(self, seat: str) -> list[list[int]]:
        """Each row's response so far for `seat` (EOS kept when emitted)."""
        L = self.context_len
        if seat == self.phase:
            lengths = np.where(self._active, self._k[seat], self._resp_len)
        elif self._k[seat] == 0:
            return [[] for _ in range(self.batch_size)]
        else:
            lengths = self._mask[seat][:, L:].sum(axis=1)
        return [row[L:L + n].tolist() for row, n in zip(self._ids[seat], lengths)]

    @property
    def active(self) -> np.ndarray:
        """bool (B,) copy: rows still writing in the current phase (all False once done)."""
        return self._active.copy() if self.acting is not None else np.zeros(self.batch_size, dtype=bool)

    @property
    def acting(self) -> str | None:
        """The seat writing now, or None (before `reset`, or done)."""
        return self.phase if self.phase in self._k else None

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def transcript(self) -> EpisodeTranscript:
        """The finished episodes (see `EpisodeTranscript`).

        Raises:
            RuntimeError: if the episode is not done.
        """
        if not self.done:
            raise RuntimeError(f"transcript() needs a finished episode; the current phase is {self.phase!r}")
        seats = {s: SeatTranscript(prompt_ids=self.prompt_ids[s], response_ids=self.response[s],
                                   response_text=self.response_text[s], task_reward=self.task_reward[s].copy(),
                                   reward=self.reward[s].copy(), pad_id=self.pad_ids[s], allowed=self.alloweds[s])
                 for s in self.seats}
        return EpisodeTranscript(query_ids=self.query_ids, query_text=list(self.query_text),
                                 records=self.records, seats=seats, allowed=self.allowed)


def partner_records(records: Sequence[dict], earlier: Sequence[Sequence[str]]) -> list[dict]:
    """The records a later seat's rows are scored with: each of the B `records` with the earlier seats' answers
    (`earlier`: per earlier seat in seat order, its B response texts), the last one as ``partner_response`` and all
    in seat order as ``partner_responses`` (partner-aware rewards: `relay`)."""
    return [{**r, "partner_response": earlier[-1][i], "partner_responses": [e[i] for e in earlier]}
            for i, r in enumerate(records)]


def readonly_view(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a` (what the env hands out: callers cannot edit the episode state through it)."""
    view = a.view()
    view.flags.writeable = False
    return view
