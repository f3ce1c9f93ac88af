"""Acting: one sampling step on transformers' logits processors, and `KVCachedSampler`.

`KVCachedSampler` turns env observations into next tokens. Inside a phase the env shifts its left-padded context
window one column left per step, so when the new ``ids[:, :-1]`` equal the previous ``ids[:, 1:]`` (and likewise
the mask) only the last column is fed to the model with the KV cache; anything else (a new episode, the observer's
fresh prompt) rebuilds the cache with one prefill. The attention-mask history grows with the cache and positions
come from its cumsum, as in ``generate``.

One sampling step applies, in `generate`'s order: repetition penalty, the observation's action mask (banned tokens get
-inf, as `generate`'s min-new-tokens / bad-words processors do), then temperature, top-k and top-p warpers, and
draws from the softmax. Every parameter is explicit: transformers 5 `generate` silently uses ``top_k=50`` when
``top_k`` is not passed, here 0 means off.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessorList

from agents.forward import policy_logits, position_ids_from_mask
from agents.precision import autocast
from agents.reference import is_peft_model
from cory_env.generation import MAX_PENALTY, MIN_TEMPERATURE, SamplingConfig  # noqa: F401 (re-exported)


def action_mask_tensor(action_mask: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """Bool (B, V) or (1, V) tensor of the tokens `action_mask` (int8 (B, V), 1 = allowed) allows, or None when
    every token is allowed. A read-only broadcast view (row stride 0, the env's uniform mask) is read once."""
    mask = np.asarray(action_mask)
    if mask.ndim == 2 and mask.strides[0] == 0:
        mask = mask[:1]
    if mask.all():
        return None
    return torch.from_numpy(np.array(mask, dtype=bool, copy=True)).to(device)


def sample_step(logits: torch.Tensor, context_ids: torch.Tensor, allowed: torch.Tensor | None,
                penalties: LogitsProcessorList, warpers: LogitsProcessorList, generator: torch.Generator | None = None,
                temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: float32 (B, V), raw next-token logits of the policy.
        context_ids: int64 (B, L), the context window (for the repetition penalty).
        allowed: bool (B, V) or (1, V) allowed tokens, or None for all.
        penalties, warpers: from `SamplingConfig`.
        generator: RNG for ``torch.multinomial``; None uses torch's global RNG.
        temperature: the sampling temperature (also one of `warpers`), for the returned log-probabilities.

    Returns:
        ``(tokens, logprobs)``: int64 (B,) sampled ids and float32 (B,) their log-probability under the policy's
        sampling distribution ``log_softmax(policy_logits(logits, temperature, allowed))`` (what
        `LLMAgent.evaluate` returns for the same tokens; nats). It is the exact sampling probability unless top-k,
        top-p or a repetition penalty is on (`SamplingConfig.is_exact`).

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
    policy = policy_logits(logits, temperature=temperature, allowed=allowed)
    logprobs = policy.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(policy, dim=-1)
    return tokens, logprobs


def penalty_context(ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
    """The context a repetition penalty may read: the window with every padded position (attention mask 0)
    replaced by a real token of the same row, so padding counts as no token at all.

    The penalty (transformers' `RepetitionPenaltyLogitsProcessor`) penalises every id present in its context, and the
    env left-pads its window with the pad id (EOS for SmolLM2 and GPT-2), which would count as already seen. Repeating
    a token already present changes nothing, so the result equals the penalty over the real tokens alone.

    Args:
        ids: int64 (B, L) window; mask: int (B, L), 1 on real tokens (each row holds at least one).

    Returns:
        int64 (B, L) tensor.
    """
    ids = np.asarray(ids, dtype=np.int64)
    real = np.asarray(mask) != 0
    first = real.argmax(axis=1)  # a real token of each row (rows without any keep their ids: nothing to read)
    filler = ids[np.arange(ids.shape[0]), first][:, None]
    return torch.from_numpy(np.where(real, ids, filler))


@dataclass
class _KVState:
    """Acting state of one episode batch: the last observation, the KV cache and its attention mask."""

    ids: np.ndarray  # int64 (B, L), copy of the last observation's input_ids
    mask: np.ndarray  # int64 (B, L), copy of the last observation's attention_mask
    mask_hist: torch.Tensor  # int64 (B, S), attention mask of everything in the cache
    n_real: torch.Tensor  # int64 (B,), real tokens in the cache (next position id)
    cache: Any  # transformers Cache
    step: int  # tokens sampled since the last prefill


def _cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument: ``cache`` (recent transformers 5) or ``past_key_values`` (older)."""
    base = model.get_base_model() if is_peft_model(model) else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _returned_cache(out: Any) -> Any:
    return out["cache"] if "cache" in out else out["past_key_values"]


def _first_real_column(mask: np.ndarray) -> int:
    """Index of the first column holding a real token in any row (the last column if none)."""
    cols = np.flatnonzero(mask.any(axis=0))
    return int(cols[0]) if cols.size else mask.shape[1] - 1


class KVCachedSampler:
    """Next-token sampling over the env's sliding window, reusing the model's KV cache between steps.

    Args:
        model: the causal LM (or ``PeftModel``; the caller activates the right adapter before each call).
        precision: the resolved precision the forwards run in (`agents.precision`: "fp32", "bf16-mixed", ...).
    """

    def __init__(self, model: torch.nn.Module, sampling: SamplingConfig, precision: str = "fp32") -> None:
        self.model, self.precision = model, precision
        self._temperature = sampling.temperature
        self._penalties = sampling.penalty_processors()
        self._warpers = sampling.warpers()
        self._cache_kwarg = _cache_kwarg(model)
        self._kv: _KVState | None = None
        self.last_hidden: torch.Tensor | None = None

    def reset(self) -> None:
        """Drop the cache; the next call prefills."""
        self._kv = None

    def __call__(self, ids: np.ndarray, mask: np.ndarray, action_mask: np.ndarray,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one token per row (call under ``torch.inference_mode()``).

        Args:
            ids: int64 (B, L) left-padded window; mask: int (B, L); action_mask: int8 (B, V), 1 = allowed.
            generator: RNG for sampling; None uses torch's global RNG.

        Returns:
            ``(tokens, logprobs, logits)``: int64 (B,), float32 (B,) log-probabilities of the tokens under the
            sampling distribution (`sample_step`; nats), float32 (B, V) raw next-token logits. Also sets
            ``last_hidden``: (B, H) the last hidden state that produced the logits (the output layer's input), for
            a value head.

        Raises:
            ValueError: non-finite logits (the message names the acting step: tokens since the last prefill), or
                an action mask banning every token of a row.
        """
        device = self.model.get_input_embeddings().weight.device
        head = self.model.get_output_embeddings()
        captured: list[torch.Tensor] = []
        hook = head.register_forward_pre_hook(lambda module, args: captured.append(args[0][:, -1]))
        try:
            with autocast(self.precision, device):
                logits = (self._decode_step(ids, mask, device) if self._continues(ids, mask)
                          else self._prefill(ids, mask, device))
        finally:
            hook.remove()
        logits = logits.float()
        self.last_hidden = captured[-1] if captured else None
        step = self._kv.step
        # One reduction: a row sum is finite iff every logit is (fp32 logits are far below overflow).
        if not bool(torch.isfinite(logits.sum(-1)).all()):
            bad = torch.nonzero(~torch.isfinite(logits).all(-1)).flatten().tolist()
            self._kv = None
            raise ValueError(f"non-finite logits at acting step {step} (rows {bad}); the model weights or inputs "
                             f"hold NaN/inf")
        context = penalty_context(ids, mask).to(device) if len(self._penalties) else None
        tokens, logprobs = sample_step(logits, context, action_mask_tensor(action_mask, device), self._penalties,
                                       self._warpers, generator, self._temperature)
        self._kv.step += 1
        return tokens, logprobs, logits

    def _continues(self, ids: np.ndarray, mask: np.ndarray) -> bool:
        kv = self._kv
        if kv is None or kv.ids.shape != ids.shape:
            return False
        # A real (mask 1) token leaving the window would stay in the cache but not in a full forward.
        return (not kv.mask[:, 0].any()
                and np.array_equal(ids[:, :-1], kv.ids[:, 1:])
                and np.array_equal(mask[:, :-1], kv.mask[:, 1:]))

    def _prefill(self, ids: np.ndarray, mask: np.ndarray, device: torch.device) -> torch.Tensor:
        # Columns that are padding in every row change nothing (masked keys, positions from the cumsum): skip
        # them, as `generate` pads only to the longest prompt.
        start = _first_real_column(mask)
        ids_t = torch.from_numpy(np.array(ids[:, start:], dtype=np.int64)).to(device)
        mask_t = torch.from_numpy(np.array(mask[:, start:], dtype=np.int64)).to(device)
        out = self.model(input_ids=ids_t, attention_mask=mask_t, position_ids=position_ids_from_mask(mask_t),
                         use_cache=True, logits_to_keep=1)
        self._kv = _KVState(ids=np.array(ids, dtype=np.int64), mask=np.array(mask, dtype=np.int64),
                            mask_hist=mask_t, n_real=mask_t.sum(-1), cache=_returned_cache(out), step=0)
        return out.logits[:, -1]

    def _decode_step(self, ids: np.ndarray, mask: np.ndarray, device: torch.device) -> torch.Tensor:
        kv = self._kv
        new_ids = torch.from_numpy(np.array(ids[:, -1:], dtype=np.int64)).to(device)
        new_mask = torch.from_numpy(np.array(mask[:, -1:], dtype=np.int64)).to(device)
        kv.mask_hist = torch.cat([kv.mask_hist, new_mask], dim=1)
        kv.n_real = kv.n_real + new_mask[:, 0]
        position = torch.where(new_mask[:, 0] == 1, kv.n_real - 1, torch.ones_like(kv.n_real))
        out = self.model(input_ids=new_ids, attention_mask=kv.mask_hist, position_ids=position[:, None],
                         use_cache=True, **{self._cache_kwarg: kv.cache})
        kv.cache = _returned_cache(out)
        kv.ids = np.array(ids, dtype=np.int64)
        kv.mask = np.array(mask, dtype=np.int64)
        return out.logits[:, -1]
