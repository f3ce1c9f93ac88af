"""`EnvConfig`: every setting of the token-level CORY environment, one field each.

The config is `transformers.HfArgumentParser`-friendly: plain scalar fields only. The tokenizer, a reward
callable and a `Task` object are constructor arguments of the env, not config fields.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, replace

from cory_env.checks import check_field, check_finite_fields, check_number
from cory_env.generation import SEAT_GENERATION_TYPES, SamplingConfig, sampling_settings
from cory_env.overrides import convert_value, parse_overrides

from cory_env.prompts import OBSERVER_REQUIRED, parse_template
from cory_env.seating import canonical_seating_spec

__all__ = ["ONE_SEAT", "EnvConfig", "RenderModeError", "check_render_mode", "resolve_config"]


#: Why a knowledge-transfer or partner option does nothing with a single seat (`EnvConfig._unread_when`, read by
#: `trainers.config.unread`).
ONE_SEAT = "with a single seat (the single-agent baseline): there is no observer and no role exchange"


def observer_template_reason(seating) -> str | None:
    """Why `EnvConfig.observer_template` does nothing on `seating` (None when some seat reads it)."""
    if seating.num_seats == 1:
        return ONE_SEAT
    if not any(s.sees_query and s.reads for s in seating.seats):
        return ("with this seating: no seat both sees the query and reads another (a private query, or "
                "knowledge_transfer=False); those seats' prompts are the task's response_only_template / "
                "blank_template / pioneer_template")
    return None


QUERY_SPLITS = ("train", "test")
"""Valid `EnvConfig.query_split` values."""


@dataclass(frozen=True)
class EnvConfig:
    """Settings of one CORY token environment (AEC or batched view).

    Built-in tasks (`make_task`) read the query, response-length and template fields from here; a `Task`
    object passed to the env directly carries its own lengths, and only non-None template fields override it.

    Raises:
        ValueError: from `__post_init__`, naming the field, its value and the fix.
    """

    _argument_group_name = "task and episode options (EnvConfig)"  # `cory train --help` group (transformers.HfArgumentParser)
    #: When a field does nothing, declared beside it (read by `trainers.config.unread`): field -> rule
    #: ``(configs, seating) -> reason or None``; `_unread_when` rules are checked when the field differs from
    #: its default, `_unread_always` rules at any value.
    _unread_when = {
        **dict.fromkeys(("knowledge_transfer", "partner_reward_coef"),
                        lambda c, seating: ONE_SEAT if seating.num_seats == 1 else None),
        "observer_template": lambda c, seating: observer_template_reason(seating),
    }

    task: str = field(default="imdb", metadata={
        "help": "The task, by registry name (cory_env.tasks.TASKS; built in: imdb, the paper's sentiment "
                "continuation; gsm8k, grade-school maths; tiny_vocab, relay and chain_relay, toys with known "
                "optima), as an importable 'module:attr' of a TaskSpec, or by the name of an installed "
                "plug-in (entry-point group cory.tasks); docs/extending.md. A `Task` object can be passed "
                "to the env instead."})
    data_path: str | None = field(default=None, metadata={
        "help": "Where the task's queries come from. None: built-in offline data (IMDB: the package's "
                "review openings); a local CSV/JSONL/Parquet file; or 'hub' (IMDB: Hugging Face "
                "`stanfordnlp/imdb`, split train, with an offline fallback to the built-in openings)."})
    reward: str = field(default="vader", metadata={
        "help": "The task reward, by registry name (cory_env.rewards.REWARDS; built in, IMDB's: 'vader' "
                "(offline; VADER compound of query + response, in [-1, 1]), 'vader-gain' (VADER(q + a) - "
                "VADER(q)) or 'distilbert-imdb' (the paper's raw POSITIVE logit)), an importable "
                "'module:function' taking (queries, responses), or an installed plug-in's name (entry-point "
                "group cory.rewards). Read by the tasks whose TaskSpec says so (imdb); tasks with their own "
                "reward (gsm8k, the toys) ignore it. A callable goes to the env constructor as `reward_fn` "
                "(a run records it as module:function when importable)."})
    heldout_fraction: float = field(default=0.0, metadata={
        "help": "Fraction of the queries kept out of training for evaluation (tasks whose TaskSpec reads it: imdb "
                "and the toys), chosen by a hash of each query's text (the same slice on every machine and run); 0 = "
                "none (eval then draws fresh-seed queries from the training data)."})
    query_split: str = field(default="train", metadata={
        "help": "Which queries are drawn (tasks that read heldout_fraction): 'train' (all but the held-out slice) or "
                "'test' (the held-out slice; needs heldout_fraction > 0). `cory eval` picks 'test' when "
                "the run has a held-out slice."})
    min_new_tokens: int = field(default=4, metadata={
        "help": "Lower end of the per-episode response length, in tokens, drawn from [min_new_tokens, "
                "max_new_tokens] and shared by both seats (paper/official code: 4). A response may "
                "still end earlier with EOS."})
    max_new_tokens: int = field(default=15, metadata={
        "help": "Upper end of the per-episode response length, in tokens (official code: "
                "LengthSampler(4, 16), i.e. 15). Must be >= 1."})
    stop_strings: typing.Optional[list[str]] = field(default=None, metadata={
        "help": "Strings that end a response (every seat, unless seat_generation sets the seat's own): "
                "the response ends at the token whose text completes one, kept as its last token (as "
                "transformers' generate stop_strings); None: only EOS and the length end it. On the command "
                "line each item's escapes are read (\\n a newline, \\t a tab, \\\\ a backslash); an "
                "empty item is refused."})
    seat_generation: typing.Optional[list[str]] = field(default=None, metadata={
        "help": "Per-seat generation settings over the defaults (the sampling options, min/max_new_tokens, "
                "stop_strings): SEAT.FIELD=VALUE entries, e.g. observer.temperature=0.7 "
                "observer.max_new_tokens=24 pioneer.stop_strings=.,! (a comma list: write a comma as \\, "
                "a newline as \\n, a tab as \\t, a backslash as \\\\; or a JSON list such as "
                "[\"\\n\", \",\"]; an empty item is refused); in YAML a mapping "
                "{observer: {temperature: 0.7}}. Fields: temperature, top_k, top_p, repetition_penalty, "
                "min_new_tokens, max_new_tokens, stop_strings. Recorded as {seat: {field: value}}; "
                "docs/seats.md."})
    context_len: int = field(default=128, metadata={
        "help": "L: length of the left-padded observation window, in tokens. Every prompt must leave "
                "room for max_new_tokens (prompt + max_new_tokens <= L)."})
    truncate_query: bool = field(default=True, metadata={
        "help": "If a query does not fit the context window, keep its last tokens and log a warning "
                "(True) or raise ValueError (False)."})
    seating: str | None = field(default=None, metadata={
        "help": "The seat line-up (cory_env.seating): cory (pioneer, then observer: the paper), ppo "
                "(the pioneer alone: the single-agent baseline; --algo is another name for this option), "
                "chain:N (N seats in order, 1 <= N <= 256; seat k reads the earlier seats); None: the "
                "task's default (cory; chain:3 for chain_relay).", "aliases": ["--algo"]})
    knowledge_transfer: bool = field(default=True, metadata={
        "help": "True: each seat after the first reads the earlier seats' responses (the observer's "
                "prompt is the knowledge-transfer template over q and a1: CORY). False: no seat reads "
                "another; the observer sees the pioneer's prompt alone (the paper's 'w/o KT' ablation)."})
    partner_reward_coef: float = field(default=1.0, metadata={
        "help": "c in the collective reward r_i + c * r_j, and off the diagonal of the reward matrix of "
                "N seats (paper: 1, cooperative; -1 competitive; 0 independent)."})
    observer_template: str | None = field(default=None, metadata={
        "help": "Knowledge-transfer template with {query} and {response} placeholders (the prompt of "
                "a seat that sees the query and reads earlier seats); None: the task's default (IMDB, "
                "official code: 'I can make this sentence \"{query}{response}\" more positive: "
                "{query}')."})
    pioneer_template: str | None = field(default=None, metadata={
        "help": "Pioneer prompt template with a {query} placeholder; None: the task's default "
                "('{query}')."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"task must be a non-empty task name such as 'imdb', got {self.task!r}; pass a "
                             "Task object to the env as `task=` instead")
        if not isinstance(self.reward, str) or not self.reward:
            raise ValueError(f"reward must be a reward name such as 'vader', got {self.reward!r}; pass a "
                             "callable to the env as `reward_fn=` instead")
        check_number(self.heldout_fraction, "heldout_fraction", low=0, below=1,
                     fix="0.1 keeps a tenth of the reviews for evaluation, 0 none")
        if self.query_split not in QUERY_SPLITS:
            raise ValueError(f"query_split must be one of {QUERY_SPLITS}, got {self.query_split!r}")
        if self.query_split == "test" and self.heldout_fraction == 0:
            raise ValueError("query_split='test' needs a held-out slice: set heldout_fraction > 0 (e.g. 0.1), "
                             "or use query_split='train'")
        check_number(self.min_new_tokens, "min_new_tokens", integer=True, low=1,
                     fix="a response has at least one token")
        check_number(self.max_new_tokens, "max_new_tokens", integer=True, low=self.min_new_tokens,
                     fix=f"at least min_new_tokens={self.min_new_tokens}; raise max_new_tokens or lower min_new_tokens")
        if self.stop_strings is not None:
            stops = convert_value(self.stop_strings, list[str], "stop_strings")
            object.__setattr__(self, "stop_strings", check_stop_strings(stops, "stop_strings"))
        seats = parse_overrides(self.seat_generation, SEAT_GENERATION_TYPES, name="seat_generation")
        for seat, settings in (seats or {}).items():
            low = settings.get("min_new_tokens", self.min_new_tokens)
            check_number(low, f"seat_generation {seat}.min_new_tokens", integer=True, low=1,
                         fix="a response has at least one token")
            check_number(settings.get("max_new_tokens", self.max_new_tokens), f"seat_generation {seat}.max_new_tokens",
                         integer=True, low=low, fix=f"at least the seat's min_new_tokens={low}")
            if "stop_strings" in settings:
                check_stop_strings(settings["stop_strings"], f"seat_generation {seat}.stop_strings")
            try:  # the seat's sampling values, checked by SamplingConfig itself
                SamplingConfig(**sampling_settings(settings))
            except ValueError as err:
                raise ValueError(f"seat_generation {seat}: {err}") from None
        object.__setattr__(self, "seat_generation", seats)
        check_number(self.context_len, "context_len", integer=True, low=2,
                     fix="a window of at least prompt + max_new_tokens tokens")
        check_number(self.partner_reward_coef, "partner_reward_coef", bounded=True)
        # one spelling ("chain:04" -> "chain:4"): a resumed run compares it with the run's config
        object.__setattr__(self, "seating", canonical_seating_spec(self.seating))
        if self.observer_template is not None:
            parse_template(self.observer_template, required=OBSERVER_REQUIRED, name="observer_template")
        if self.pioneer_template is not None:
            parse_template(self.pioneer_template, required=("query",), name="pioneer_template")


def check_stop_strings(stops, name: str) -> list[str]:
    """`stops` as a list of non-empty strings.

    Raises:
        ValueError: naming `name`, for an empty string or a non-string entry.
    """
    check_field(isinstance(stops, list) and all(isinstance(s, str) and s for s in stops), name, stops,
                "give non-empty strings, e.g. ['.', '!']")
    return list(stops)


class RenderModeError(ValueError, TypeError):
    """A render mode the env does not have. Both a `ValueError` (a bad value) and a `TypeError`: vectorising
    constructors that first try ``render_mode="rgb_array"`` and fall back without it on TypeError (Stable-Baselines3's
    ``make_vec_env``) then build the env without rendering."""


def check_render_mode(render_mode: str | None, modes: list[str]) -> None:
    """Raise `RenderModeError` unless `render_mode` is None or one of `modes`."""
    if render_mode not in (None, *modes):
        raise RenderModeError(f"render_mode must be None or one of {modes}, got {render_mode!r}")


def resolve_config(config: EnvConfig | None = None, **overrides) -> EnvConfig:
    """An `EnvConfig` from a config object and/or field keyword arguments (keywords win).

    Raises:
        TypeError: if `config` is not an `EnvConfig` or a keyword is not a field (the fields are listed).
        ValueError: from `EnvConfig.__post_init__`.
    """
    names = [f.name for f in fields(EnvConfig)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise TypeError(f"unknown env argument(s) {unknown}; EnvConfig fields are {names} (tokenizer, reward_fn, "
                        "task and render_mode are the other constructor arguments)")
    if config is None:
        return EnvConfig(**overrides)
    if not isinstance(config, EnvConfig):
        raise TypeError(f"config must be an EnvConfig, got {type(config).__name__}; or pass its fields as "
                        "keyword arguments")
    return replace(config, **overrides) if overrides else config
