"""`Task`: what a CORY episode is about (queries, task reward, prompt templates, lengths, default seating);
`TaskSpec`: what the task registry (``--task``) knows of a task before it is built."""

from __future__ import annotations

import dataclasses

from collections.abc import Callable, Sequence
from dataclasses import dataclass, is_dataclass
from typing import Any

import numpy as np

from cory_env.checks import check_field, check_flag, check_number
from cory_env.registry import PluginContractError
from cory_env.prompts import OBSERVER_REQUIRED, PIONEER_TEMPLATE, parse_template
from cory_env.rewards import make_reward_fn
from cory_env.seating import READS, check_num_seats

__all__ = ["OPTIONAL_ENV_FIELDS", "EVALUATIONS", "Task", "TaskSpec"]


@dataclass(frozen=True, eq=False)
class Task:
    """A token-level CORY task. Built-in ones come from `cory_env.tasks.make_task`; any `Task` can be passed to
    the env directly.

    Attributes:
        name: task name, used in logs and error messages.
        records: the query source, a sequence of dicts each with a ``"query"`` text plus any extra fields (e.g.
            GSM8K ``"answer"``); the env draws one per episode and hands it to `reward_fn`.
        reward_fn: ``reward_fn(query_texts, response_texts, records) -> sequence of floats``, one per pair,
            scoring query text + response text; a reward name or a 2-argument ``(queries, responses)`` callable
            is accepted and normalised to that form (`cory_env.rewards.make_reward_fn`).
        observer_template: knowledge-transfer template, the prompt of a seat that sees the query and reads earlier
            seats: ``{query}`` and ``{response}`` (the read seats' answers; `cory_env.seating`).
        pioneer_template: the prompt of a seat that sees the query and reads no seat (the pioneer; every seat
            without knowledge transfer): a ``{query}`` placeholder.
        response_only_template: the prompt of a seat that reads earlier seats but does not see the query (a query
            private to the first seat: `cory_env.tasks.relay`): ``{response}``, no ``{query}``; None: none (such a
            seating is refused).
        blank_template: the prompt of a seat that sees neither the query nor a response (a private query without
            knowledge transfer): no placeholder; None: none.
        num_seats: the task's default number of seats (`EnvConfig.seating` None): 2 (CORY).
        private_query: its default seatings show the query to the first seat only (Seat.sees_query).
        seat_reads: what each seat of its default seatings reads: ``"all"`` earlier seats, or ``"previous"`` (the
            seat just before).
        query_tokens: ``(min, max)``: keep the first k tokens of the query text, k drawn per episode from
            [min, max] (IMDB: (2, 7)); None keeps the whole query.
        min_new_tokens, max_new_tokens: per-episode response length range in tokens (shared by both seats).
        action_mask: optional int8 (V,) array, 1 = token allowed, applied to every step of every seat.
        action_mask_for: optional ``tokenizer -> int8 (V,) array or None``: the task's mask for another tokenizer
            (a seat whose model brings its own tokenizer, docs/seats.md); None: a task with an `action_mask` is
            refused for seats of different tokenizers.

    Raises:
        ValueError: (at construction) for empty records, any record without a non-empty "query" text, a template
            without its placeholders (or with one its view does not show), bad lengths, seat defaults or an
            all-zero action mask.
        TypeError: if `reward_fn` is neither a reward name nor a 2- or 3-argument callable.
    """

    name: str
    records: Sequence[dict]
    reward_fn: Callable[[list[str], list[str], list[dict]], Sequence[float]] | str
    observer_template: str
    pioneer_template: str = PIONEER_TEMPLATE
    response_only_template: str | None = None
    blank_template: str | None = None
    num_seats: int = 2
    private_query: bool = False
    seat_reads: str = "all"
    query_tokens: tuple[int, int] | None = None
    min_new_tokens: int = 4
    max_new_tokens: int = 15
    action_mask: np.ndarray | None = None
    action_mask_for: Callable[[Any], np.ndarray | None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Task.name must be a non-empty str, got {self.name!r}")
        if len(self.records) == 0:
            raise ValueError(f"task {self.name!r} has no records; give at least one {{'query': ...}} dict")
        bad = [i for i, r in enumerate(self.records)
               if not isinstance(r, dict) or not isinstance(r.get("query"), str) or not r["query"]]
        if bad:  # every record, now: an empty one would otherwise fail iterations later, when first drawn
            example = self.records[bad[0]]
            raise ValueError(f"task {self.name!r}: record {bad[0]}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}"
                             f" is not a dict with a non-empty 'query' text: {str(example)[:80]!r}; drop such rows "
                             "from the data")
        # frozen dataclass: normalise the reward to the 3-argument form once, here
        object.__setattr__(self, "reward_fn", make_reward_fn(self.reward_fn))
        parse_template(self.observer_template, required=OBSERVER_REQUIRED, name="observer_template")
        parse_template(self.pioneer_template, required=("query",), name="pioneer_template")
        for name, required in (("response_only_template", ("response",)), ("blank_template", ())):
            template = getattr(self, name)
            if template is None:
                continue
            shown = {p for _, p in parse_template(template, required=required, name=name) if p}
            if shown - set(required):
                raise ValueError(f"task {self.name!r}: {name} {template!r} shows "
                                 f"{', '.join('{' + p + '}' for p in sorted(shown - set(required)))}, which its seat "
                                 f"does not see; remove {'it' if len(shown - set(required)) == 1 else 'them'}")
        check_num_seats(self.num_seats, f"task {self.name!r}: num_seats")
        check_flag(self.private_query, f"task {self.name!r}: private_query")
        if self.seat_reads not in READS:
            raise ValueError(f"task {self.name!r}: seat_reads must be one of {READS}, got {self.seat_reads!r}")
        check_number(self.max_new_tokens, f"task {self.name!r}: max_new_tokens", integer=True, low=1)
        check_number(self.min_new_tokens, f"task {self.name!r}: min_new_tokens", integer=True, low=1,
                     high=self.max_new_tokens, fix="at most max_new_tokens")
        if self.query_tokens is not None:
            lo, hi = (check_number(n, f"task {self.name!r}: query_tokens", integer=True) for n in self.query_tokens)
            check_field(1 <= lo <= hi, f"task {self.name!r}: query_tokens", self.query_tokens,
                        "use (min, max) with 1 <= min <= max, or None to keep whole queries")
        if self.action_mask is not None:
            mask = np.asarray(self.action_mask)
            if mask.ndim != 1 or not np.isin(mask, (0, 1)).all() or not mask.any():
                raise ValueError(f"task {self.name!r}: action_mask must be a (V,) array of 0/1 with at least one "
                                 f"1, got shape {mask.shape}")


#: `EnvConfig` fields that only some tasks read; a `TaskSpec` lists those its task reads (`TaskSpec.reads`), and a run
#: warns when it sets one its task does not read. The other fields (lengths of the window, seating, templates, ...)
#: every task honours.
OPTIONAL_ENV_FIELDS = ("data_path", "reward", "heldout_fraction", "query_split", "min_new_tokens", "max_new_tokens")
#: The built-in ways `cory eval` scores a task's checkpoint (`trainers.cli.eval.EVALUATIONS`): ``"pioneer"`` (the
#: pioneer alone: task reward, KL, distinct-n on the held-out queries), ``"pass@k"`` (sampled answers checked for
#: correctness), or ``"none"``; a task may carry its own callable instead (`TaskSpec.evaluation`).
EVALUATIONS = ("pioneer", "pass@k", "none")


@dataclass(frozen=True)
class TaskSpec:
    """A registered task (`cory_env.tasks.TASKS`, ``--task NAME``): how to build it and what it reads.

    Attributes:
        builder: ``builder(config, tokenizer[, options=]) -> Task``: `config` is the run's `EnvConfig`,
            `tokenizer` the env's (None when the task is built only to check a run before any model loads);
            ``options`` (passed only when `options` is set) the run's instance of the task's options class.
        options: the dataclass of the task's own options (each field with ``metadata={"help": ...}``; its flat
            names must not clash with another config's), or None. ``cory train --task NAME`` shows them in their
            own group, a run's ``config.yaml`` records them, and `RunConfigs.task_options` holds them.
        tokenizer: ``() -> tokenizer`` for a task that brings its own vocabulary (the tiny model is built over it;
            the Gymnasium view's default tokenizer), or None: the model's tokenizer.
        reads: the `OPTIONAL_ENV_FIELDS` the task reads (a run that sets another one is warned that it does nothing).
        evaluation: how `cory eval` scores it: a built-in evaluation's name (`EVALUATIONS`), or the task's own
            callable ``evaluate(target, args) -> Path`` (``target``: `trainers.loop.evaluate.EvalTarget`; ``args``:
            the parsed ``cory eval`` options), which prints what it found and returns the file it wrote.
        resolve: ``(config) -> config``, run once per run before any env is built: decide where the data comes
            from (IMDB: ``data_path="hub"`` becomes None when the hub is unreachable), so that every env of the run
            reads the same source; None: nothing to decide.
        summary: one line for tables and ``--help``.

    Raises:
        ValueError: (at construction) `options` that is not a dataclass, a field of `reads` that is not optional,
            an unknown evaluation.
    """

    builder: Callable[..., Task]
    options: type | None = None
    tokenizer: Callable[[], Any] | None = None
    reads: tuple[str, ...] = ()
    evaluation: str | Callable[..., Any] = "pioneer"
    resolve: Callable[[Any], Any] | None = None
    summary: str = ""

    def __post_init__(self) -> None:
        if not callable(self.builder):
            raise ValueError(f"TaskSpec.builder must be callable (config, tokenizer) -> Task, got {self.builder!r}")
        if self.options is not None and not (isinstance(self.options, type) and is_dataclass(self.options)):
            raise ValueError(f"TaskSpec.options must be a dataclass class, got {self.options!r}")
        unknown = sorted(set(self.reads) - set(OPTIONAL_ENV_FIELDS))
        if unknown:
            raise ValueError(f"TaskSpec.reads names {unknown}, which are not optional EnvConfig fields; choose from "
                             f"{OPTIONAL_ENV_FIELDS} (every task reads the others)")
        if not callable(self.evaluation) and self.evaluation not in EVALUATIONS:
            raise ValueError(f"TaskSpec.evaluation must be one of {EVALUATIONS} or a callable (target, args) -> "
                             f"Path, got {self.evaluation!r}")

    def heldout_split(self, config) -> tuple[str, str | None]:
        """(the query split a held-out evaluation reads, why it is not a held-out one): ``("test", None)`` when
        the task reads `heldout_fraction` and the run sets one > 0; else ``("train", reason)``: the evaluation draws
        training queries with a fresh seed, and `reason` (with the fix) says why."""
        if "heldout_fraction" not in self.reads:
            return "train", (f"task {config.task!r} has no held-out split (it does not read heldout_fraction); its "
                             "evaluation draws training queries with a fresh seed")
        if config.heldout_fraction <= 0:
            return "train", ("heldout_fraction=0: the evaluation draws training queries with a fresh seed; set "
                             "--heldout_fraction 0.2 for held-out queries")
        return "test", None

    def build(self, config, tokenizer, options: Any = None) -> Task:
        """The `Task`: ``builder(config, tokenizer[, options=])`` with `options` (None: the options class's defaults).

        Raises:
            TypeError: `options` of another class than `options` (or any, for a task without options).
            cory_env.registry.PluginContractError: (a `TypeError` and a `ValueError`) the builder's result is not a
                `Task`.
        """
        kwargs = {}
        if self.options is None and options is not None:
            raise TypeError(f"this task has no options class, got {type(options).__name__}")
        if self.options is not None:
            if options is None:
                options = self.options()
            elif not isinstance(options, self.options):
                raise TypeError(f"task options must be a {self.options.__name__}, got {type(options).__name__}")
            kwargs["options"] = options
        task = self.builder(config, tokenizer, **kwargs)
        if not isinstance(task, Task):
            raise PluginContractError(f"task builder {getattr(self.builder, '__qualname__', self.builder)!r} returned "
                            f"{type(task).__name__}, not a cory_env.tasks.Task")
        return with_templates(task, config)


def with_templates(task: Task, config) -> Task:
    """`task` with the templates `config` sets (`EnvConfig.pioneer_template`, `observer_template`; None keeps the
    task's own): the one place a run's templates replace a task's (`TaskSpec.build`, and a `Task` object handed to an
    env, `cory_env.episode.EpisodeBatch.from_config`)."""
    given = {key: getattr(config, key, None) for key in ("pioneer_template", "observer_template")}
    given = {key: value for key, value in given.items() if value is not None}
    return dataclasses.replace(task, **given) if given else task
