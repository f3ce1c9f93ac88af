"""The response forward pass and the maths read from its logits: the one implementation of each.

`response_forward` runs a causal LM once over ``[query; response]`` and keeps the T positions that predict the
response tokens; `policy_logits` turns those logits into the distribution an agent samples from (temperature, the
task's action mask); `logprobs_from_logits` and `entropy_from_logits` read log-probabilities and entropies from
it. `agents.LLMAgent.evaluate`, `agents.ReferenceModel.evaluate` and the sampler (`agents.sampling`) all use these
functions, so acting, scoring and the PPO/GRPO updates see the same numbers token for token.

Shapes: B batch, Q query tokens, T response tokens, V vocabulary, H hidden size; log-probabilities in nats.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ResponseForward", "check_response_inputs", "entropy_from_logits", "logprobs_from_logits", "policy_logits",
           "position_ids_from_mask", "response_forward"]


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a left-padded batch, as ``generate`` builds them, from its int or bool (B, S) attention
    `mask` (0/False on padding): int64 (B, S), ``cumsum(mask) - 1`` on real tokens, 1 on padding."""
    mask = mask.long()
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of `tokens` under ``softmax(logits)``, in fp32: the logit of the token minus the logsumexp
    over the vocabulary (no second (B, T, V) tensor is allocated).

    Args:
        logits: float (B, T, V), the logits that predict each response token (already shifted by one position),
            usually `policy_logits`.
        tokens: int64 (B, T), the response token ids, in [0, V).

    Returns:
        float32 (B, T), nats (<= 0).

    Raises:
        TypeError: if `tokens` is not an integer tensor.
        ValueError: if the leading shapes of `logits` and `tokens` differ.

    Source: TRL 0.11.4 ``trl.core.logprobs_from_logits`` (gather=True); TRL ``selective_log_softmax``.
    """
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"tokens must be int64 token ids, got {tokens.dtype}; pass `tokens.long()`")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits shape {tuple(logits.shape)} does not fit tokens shape {tuple(tokens.shape)}; "
                         "logits must be (B, T, V) for tokens (B, T)")
    logits = logits.float()
    chosen = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def policy_logits(logits: torch.Tensor, *, temperature: float = 1.0,
                  allowed: torch.Tensor | None = None) -> torch.Tensor:
    """The logits of the distribution an agent samples its actions from, in fp32: ``logits / temperature``, with
    every token the task bans (``allowed`` False) at the dtype's lowest finite value (probability 0; finite so that
    entropies and full-vocabulary KLs stay finite).

    Log-probabilities, entropies and KLs that PPO reads must come from this distribution, not from the raw model:
    tokens drawn from a tempered or masked softmax but scored under the raw one make every update off-policy (the
    k1 KL estimate even turns negative, rewarding the policy for moving mass onto banned tokens). Top-k, top-p and
    the repetition penalty are not applied here (they depend on the sampled context), so with them the rollout
    distribution and this one differ (`SamplingConfig.is_exact`).

    Args:
        logits: float (..., V) raw model logits.
        temperature: > 0; the sampling temperature (TRL's PPO trainer divides the policy's and the reference's
            logits by it too).
        allowed: bool (V,) (or broadcastable to `logits`) tokens the env allows, or None for all.

    Returns:
        float32 (..., V).
    """
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), torch.finfo(logits.dtype).min)
    return logits


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` along the last dim: H = logsumexp(z) − Σ_v softmax(z)_v · z_v = −Σ_v p_v log p_v.

    Tokens at probability 0 (`policy_logits`' lowest finite value, or −inf) contribute 0, with a zero gradient.

    Args:
        logits: float (B, T, V), usually `policy_logits`.

    Returns:
        float32 (B, T), nats, in [0, log V].

    Source: TRL 0.11.4 ``trl.core.entropy_from_logits``.
    """
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    # clamp: a -inf logit has probability 0 and contributes 0 (not 0 * -inf = NaN); finite logits pass unchanged
    return torch.logsumexp(logits, dim=-1) - (probs * logits.clamp(min=torch.finfo(logits.dtype).min)).sum(-1)


@dataclass
class ResponseForward:
    """Outputs of `response_forward` at the T positions that predict the response tokens.

    Attributes:
        logits: (B, T, V) in the model dtype.
        hidden: (B, T, H) last hidden state, or None when not requested.
    """

    logits: torch.Tensor
    hidden: torch.Tensor | None


def check_response_inputs(query: torch.Tensor, query_mask: torch.Tensor, response: torch.Tensor,
                          response_mask: torch.Tensor) -> None:
    """Raise `ValueError` / `TypeError` unless query (B, Q) and response (B, T) and their masks line up."""
    for name, t in (("query", query), ("response", response)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != torch.long:
            raise TypeError(f"{name} must be an int64 tensor of shape (B, length), got "
                            f"{getattr(t, 'dtype', type(t))} {tuple(getattr(t, 'shape', ()))}")
    for name, m, t in (("query_mask", query_mask, query), ("response_mask", response_mask, response)):
        if not isinstance(m, torch.Tensor) or m.shape != t.shape:
            raise ValueError(f"{name} must have the shape of its ids {tuple(t.shape)}, got "
                             f"{tuple(getattr(m, 'shape', ()))}")
    if query.shape[0] != response.shape[0]:
        raise ValueError(f"query batch {query.shape[0]} != response batch {response.shape[0]}")
    if query.shape[1] < 1 or response.shape[1] < 1:
        raise ValueError(f"query and response need >= 1 column, got Q={query.shape[1]}, T={response.shape[1]}")


def response_forward(model: nn.Module, query: torch.Tensor, query_mask: torch.Tensor, response: torch.Tensor,
                     response_mask: torch.Tensor, *, output_hidden: bool = False) -> ResponseForward:
    """One forward over ``[query; response]`` keeping only the positions that predict response tokens.

    Position ``Q - 1 + t`` predicts response token ``t``; logits are computed only for those T positions
    (``logits_to_keep`` as an index tensor, which transformers' causal LMs accept). Positions come from the mask
    cumsum, so left padding in the query and right padding in the response do not shift the real tokens; query
    columns that are padding in every row are skipped.

    Args:
        model: a causal LM (or a ``PeftModel`` around one).
        query: int64 (B, Q), left padded. query_mask: (B, Q) bool/int, False on padding.
        response: int64 (B, T), right padded. response_mask: (B, T) bool/int, False on padding.
        output_hidden: also return the last hidden state (for a value head).

    Returns:
        `ResponseForward` with logits (B, T, V) and optionally hidden (B, T, H).

    Raises:
        TypeError / ValueError: on malformed inputs (see `check_response_inputs`).
    """
    check_response_inputs(query, query_mask, response, response_mask)
    real_cols = torch.nonzero(query_mask.bool().any(dim=0)).flatten()
    if real_cols.numel() and int(real_cols[0]) > 0:  # drop columns that are padding in every row
        query, query_mask = query[:, int(real_cols[0]):], query_mask[:, int(real_cols[0]):]
    t = response.shape[1]
    ids = torch.cat([query, response], dim=1)
    mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    s = ids.shape[1]
    # The T positions that predict the response, as an index tensor: the output layer is then one (B·T, H) × (H, V)
    # matrix product, where an int ``logits_to_keep`` would make B separate ones (B× the memory traffic;
    # benchmarks/iteration_profile.py). Same maths; the blocking can move the last bit of a logit.
    keep = torch.arange(s - t - 1, s - 1, device=ids.device)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False,
                output_hidden_states=output_hidden, logits_to_keep=keep)
    hidden = out.hidden_states[-1][:, s - t - 1:s - 1] if output_hidden else None
    return ResponseForward(logits=out.logits, hidden=hidden)
