"""Token sampling for acting: `SamplingConfig` and one sampling step built on transformers' logits processors.

One step applies, in `generate`'s order: repetition penalty, the observation's action mask (banned tokens get
-inf, as `generate`'s min-new-tokens / bad-words processors do), then temperature, top-k and top-p warpers, and
draws from the softmax. Every parameter is explicit: transformers 5 `generate` silently uses ``top_k=50`` when
``top_k`` is not passed, here 0 means off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


@dataclass(frozen=True)
class SamplingConfig:
    """How an agent samples tokens while acting (the paper's IMDB run: top_k=0, top_p=1.0, repetition 1.1)."""

    temperature: float = field(
        default=1.0,
        metadata={"help": "Softmax temperature (> 0); 1.0 samples from the policy itself (paper: 1.0)."},
    )
    top_k: int = field(
        default=0,
        metadata={"help": "Keep only the k most likely tokens; 0 disables (paper IMDB: 0; GSM8K eval: 10)."},
    )
    top_p: float = field(
        default=1.0,
        metadata={"help": "Nucleus sampling mass in (0, 1]; 1.0 disables (paper IMDB: 1.0; GSM8K eval: 0.7)."},
    )
    repetition_penalty: float = field(
        default=1.0,
        metadata={"help": "CTRL repetition penalty (> 0) on tokens already in the context window; 1.0 disables "
                  "(paper: 1.1)."},
    )

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}; use 1.0 for plain sampling")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}; use 0 to disable")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}; use 1.0 to disable")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}; use 1.0 to disable")

    @property
    def is_plain(self) -> bool:
        """True when sampling is from the unmodified policy (no penalty, temperature 1, no truncation)."""
        return self.temperature == 1.0 and self.top_k == 0 and self.top_p == 1.0 and self.repetition_penalty == 1.0

    def penalty_processors(self) -> LogitsProcessorList:
        """Processors applied before the action mask (they need the context ids)."""
        procs = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(penalty=self.repetition_penalty))
        return procs

    def warpers(self) -> LogitsProcessorList:
        """Temperature, top-k and top-p warpers, in `generate`'s order; disabled ones are left out."""
        procs = LogitsProcessorList()
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k > 0:
            procs.append(TopKLogitsWarper(top_k=self.top_k))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p=self.top_p))
        return procs


def action_mask_tensor(action_mask: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """Bool (B, V) or (1, V) tensor of allowed tokens, or None when every token is allowed.

    A read-only broadcast view (row stride 0, the env's uniform mask) is read once, not B times.

    Args:
        action_mask: int8 (B, V), 1 = allowed.
    """
    mask = np.asarray(action_mask)
    if mask.ndim == 2 and mask.strides[0] == 0:
        mask = mask[:1]
    if mask.all():
        return None
    return torch.from_numpy(np.array(mask, dtype=bool, copy=True)).to(device)


def sample_step(
    logits: torch.Tensor,
    context_ids: torch.Tensor,
    allowed: torch.Tensor | None,
    penalties: LogitsProcessorList,
    warpers: LogitsProcessorList,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: float32 (B, V), raw next-token logits of the policy.
        context_ids: int64 (B, L), the context window (for the repetition penalty).
        allowed: bool (B, V) or (1, V) allowed tokens, or None for all.
        penalties, warpers: from `SamplingConfig`.
        generator: RNG for ``torch.multinomial``; None uses torch's global RNG.

    Returns:
        ``(tokens, logprobs)``: int64 (B,) sampled ids and float32 (B,) their log-probability under the *raw*
        policy ``log_softmax(logits)`` (what `LLMAgent.evaluate` returns for the same tokens; nats).

    Raises:
        ValueError: if the action mask bans every token of a row.
    """
    scores = penalties(context_ids, logits) if len(penalties) else logits
    if allowed is not None:
        if not bool(allowed.any(dim=-1).all()):
            raise ValueError("action_mask bans every token of some row; the env must allow at least one action")
        scores = scores.masked_fill(~allowed, float("-inf"))
    if len(warpers):
        scores = warpers(context_ids, scores)
    probs = torch.softmax(scores, dim=-1)
    tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    chosen = logits.gather(-1, tokens[:, None]).squeeze(-1)
    logprobs = chosen - torch.logsumexp(logits, dim=-1)
    return tokens, logprobs
