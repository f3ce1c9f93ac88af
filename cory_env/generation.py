"""How a seat generates: `SamplingConfig` (how the model in a seat draws its tokens) and the per-seat settings of a
run (`EnvConfig.seat_generation`: a seat's own sampling, response lengths and stop strings over the defaults).

The env decides when a response ends (its lengths and stop strings, `cory_env.episode`); the agent in the seat draws
the tokens with the seat's `SamplingConfig` (`agents.LLMAgent.act_batch`). Both are one seat's generation settings,
so they are read in one place: `SEAT_GENERATION_TYPES` is derived from `SamplingConfig`'s own fields and the env's
`ENV_GENERATION_KEYS`, and `seat_sampling` gives each seat the `SamplingConfig` its model samples with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cory_env.checks import check_finite_fields, check_number
from cory_env.overrides import override_types

__all__ = ["ENV_GENERATION_KEYS", "MAX_PENALTY", "MIN_TEMPERATURE", "SEAT_GENERATION_TYPES", "SamplingConfig",
           "sampling_settings", "seat_sampling"]


#: The smallest `SamplingConfig.temperature`: logits of magnitude ~1e2 divided by less would near float32's range.
MIN_TEMPERATURE = 1e-3
#: The largest `SamplingConfig.repetition_penalty` (and 1 / it the smallest), for the same reason.
MAX_PENALTY = 1e3


@dataclass(frozen=True)
class SamplingConfig:
    """How an agent samples tokens while acting (the paper's IMDB run: top_k=0, top_p=1.0, repetition 1.1)."""

    _argument_group_name = "sampling options (SamplingConfig)"  # `cory train --help` group (transformers.HfArgumentParser)

    temperature: float = field(default=1.0, metadata={
        "help": "Softmax temperature (>= 0.001); 1.0 samples from the policy itself (paper: 1.0). These "
                "sampling options are every seat's default; a seat's own: --seat_generation SEAT.FIELD=VALUE (e.g. "
                "observer.temperature=0.7; also top_k, top_p, repetition_penalty, min/max_new_tokens, stop_strings)."})
    top_k: int = field(default=0, metadata={
        "help": "Keep only the k most likely tokens; 0 disables (paper IMDB: 0; GSM8K eval: 10). Passed "
                "explicitly: transformers' generate would default to 50."})
    top_p: float = field(default=1.0, metadata={
        "help": "Nucleus sampling mass in (0, 1]; 1.0 disables (paper IMDB: 1.0; GSM8K eval: 0.7)."})
    repetition_penalty: float = field(default=1.0, metadata={
        "help": "CTRL repetition penalty (in [0.001, 1000]) on tokens already in the context window; "
                "1.0 disables (paper: 1.1)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        check_number(self.temperature, "temperature", low=MIN_TEMPERATURE,
                     fix="logits divided by a smaller one overflow to inf; 1.0 samples plainly, top_k 1 greedily")
        check_number(self.top_k, "top_k", integer=True, low=0, fix="0 disables")
        check_number(self.top_p, "top_p", above=0, high=1, fix="1.0 disables")
        check_number(self.repetition_penalty, "repetition_penalty", low=1 / MAX_PENALTY, high=MAX_PENALTY,
                     fix="logits divided by a penalty further from 1 overflow to inf; 1.0 disables (paper: 1.1)")

    @property
    def is_exact(self) -> bool:
        """True when the tokens are drawn from exactly the distribution PPO scores (`agents.forward.policy_logits`:
        temperature and action mask); top-k, top-p and the repetition penalty depend on the sampled context and make
        the learner's importance ratio inexact (the update is then slightly off-policy)."""
        return self.top_k == 0 and self.top_p == 1.0 and self.repetition_penalty == 1.0

    @property
    def is_plain(self) -> bool:
        """True when sampling is from the unmodified policy (no penalty, temperature 1, no truncation)."""
        return self.temperature == 1.0 and self.top_k == 0 and self.top_p == 1.0 and self.repetition_penalty == 1.0

    def penalty_processors(self):
        """Processors applied before the action mask (they need the context ids): a transformers
        ``LogitsProcessorList``."""
        from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor
        procs = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(penalty=self.repetition_penalty))
        return procs

    def warpers(self):
        """Temperature, top-k and top-p warpers, in `generate`'s order; disabled ones are left out (a transformers
        ``LogitsProcessorList``)."""
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
        procs = LogitsProcessorList()
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k > 0:
            procs.append(TopKLogitsWarper(top_k=self.top_k))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p=self.top_p))
        return procs


#: The per-seat settings the env applies itself (response lengths and stop strings); the others are `SamplingConfig`'s.
ENV_GENERATION_KEYS = ("min_new_tokens", "max_new_tokens", "stop_strings")
#: What `EnvConfig.seat_generation` may set per seat -> its type: every `SamplingConfig` field (the agent in the seat
#: samples with them) and the env's own `ENV_GENERATION_KEYS`.
SEAT_GENERATION_TYPES = {**override_types(SamplingConfig), "min_new_tokens": int, "max_new_tokens": int,
                         "stop_strings": list[str]}


def sampling_settings(settings: Mapping) -> dict:
    """The `SamplingConfig` fields of one seat's settings (``{field: value}``, `EnvConfig.seat_generation`)."""
    return {k: v for k, v in settings.items() if k not in ENV_GENERATION_KEYS}


def seat_sampling(sampling: SamplingConfig, seat_generation: Mapping | None,
                  seats: Sequence[str]) -> dict[str, SamplingConfig]:
    """Seat -> the `SamplingConfig` of the model sitting there: `sampling` (every seat's default) with the seat's own
    sampling settings (`EnvConfig.seat_generation`, checked there) over it; `sampling` itself for a seat without any.

    Raises:
        ValueError: a seat's value `SamplingConfig` refuses (the seat named).
    """
    own = seat_generation or {}
    out = {}
    for seat in seats:
        settings = sampling_settings(own.get(seat, {}))
        try:
            out[seat] = dataclasses.replace(sampling, **settings) if settings else sampling
        except ValueError as err:
            raise ValueError(f"seat_generation {seat}: {err}") from None
    return out
