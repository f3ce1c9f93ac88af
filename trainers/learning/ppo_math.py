"""Pure PPO maths for language-model fine-tuning (TRL 0.7–0.11 formulas).

Small functions, tensors in and tensors out: no config, no `self`, inputs never edited in place, reductions on an
explicit `dim=-1`, masks are `torch.bool` (False marks padding after EOS). Shapes: B batch, T response tokens,
V vocabulary. KL values are in nats. The log-probabilities and entropies these functions read come from
`agents.forward` (the response forward an agent scores with).

The pipeline one PPO learner runs per iteration:

1. `kl_penalty` / `compute_rewards`: per-token reward −β·KL(π‖π_ref) on every response token plus the (collective)
   score on the last real token.
2. `gae_advantages`: GAE over the response tokens, then masked whitening of the advantages.
3. `ppo_loss` (`policy_loss` + `vf_coef` · `value_loss`) on each mini-batch, with its statistics.

Score scaling / normalisation / clipping (TRL's `RunningMoments`) lives in `trainers.learning.score_scaling`.

Padding: every (B, T) output of this module is 0 where `mask` is False, and no value at a padded position reaches a
function that can overflow (`torch.exp` of a log-ratio): the log-ratio is set to 0 there first (`masked_delta`), so
a padded position holding any finite number (or garbage) cannot make a loss or a gradient inf/NaN through
``inf · 0``. TRL 0.11 leaves whatever the arithmetic gives at padding positions and masks them in every consumer,
so all masked results agree with TRL.

Example (γ = 0.1, λ = 1, V = 0 gives A_t = r_t + 0.1·A_{t+1}):

>>> import torch
>>> adv, ret = gae_advantages(torch.tensor([[4.0, 5.0, 6.0, 9.0]]), torch.zeros(1, 4),
...                           torch.tensor([[True, True, True, False]]), gamma=0.1, lam=1.0, whiten=False)
>>> [round(a, 4) for a in adv[0].tolist()]
[4.56, 5.6, 6.0, 0.0]
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from cory_env.checks import check_number

logger = logging.getLogger(__name__)

__all__ = ["KL_PENALTY_KINDS", "approx_kl", "compute_rewards", "gae_advantages", "kl_penalty", "masked_delta",
           "masked_mean", "masked_var", "masked_whiten", "policy_kl", "policy_loss", "ppo_loss", "value_loss"]

KL_PENALTY_KINDS = ("kl", "abs", "mse", "full", "k3")
"""Valid `kind` values of `kl_penalty` (same names as `PPOConfig.kl_penalty`)."""

WHITEN_EPS = 1e-8
"""Added to the variance before the reciprocal square root in `masked_whiten` (TRL's constant)."""

SumFn = Callable[[torch.Tensor], torch.Tensor]
"""Sums a tensor over the data-parallel processes (`trainers.distributed.DataParallel.sum`)."""


# ----- Argument checks (private) --------------------------------------------------------------------------------------


def _check_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "x") -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a torch.bool tensor, got {got}; pass `mask.bool()` (True = real token)")
    if mask.shape != like.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match {name} shape {tuple(like.shape)}; "
                         "pass the response mask aligned with the (B, T) response tokens")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, tensor in items[1:]:
        if tensor.shape != first.shape:
            raise ValueError(f"{name} shape {tuple(tensor.shape)} does not match {first_name} shape "
                             f"{tuple(first.shape)}; all per-token tensors must be (B, T) over the same response "
                             "tokens")


def _check_rows_nonempty(mask: torch.Tensor) -> None:
    empty = (~mask.any(dim=-1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"mask selects no token in row(s) {empty.tolist()}; every response needs at least one real "
                         "token (EOS is kept as the last response token)")


# ----- Masked statistics ----------------------------------------------------------------------------------------------


def masked_delta(a: torch.Tensor, b: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """a − b where `mask` is True, exactly 0 elsewhere (also in the gradient), so padding never reaches an `exp`.

    Args:
        a, b: float (B, T), e.g. log-probabilities of the same tokens under two policies.
        mask: bool (B, T), or None for every position.

    Returns:
        float (B, T).
    """
    delta = a - b
    if mask is None:
        return delta
    return torch.where(mask, delta, torch.zeros((), dtype=delta.dtype, device=delta.device))


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Mean of `x` over the positions where `mask` is True.

    Args:
        x: float (B, T), e.g. per-token KL in nats.
        mask: bool (B, T); False marks padding after EOS.
        dim: reduce only this dimension (e.g. -1 for a per-row mean); None reduces everything.

    Returns:
        float, shape () when `dim` is None, else `x`'s shape without `dim`.

    Raises:
        TypeError: if `mask` is not bool.
        ValueError: if the shapes differ, or `mask` selects nothing (in some row, when `dim` is given).

    Source:
        TRL 0.11.4 `trl.core.masked_mean`.
    """
    _check_mask(mask, x)
    n = mask.sum() if dim is None else mask.sum(dim=dim)
    if bool((n == 0).any()):
        raise ValueError("mask selects no token" + ("" if dim is None else f" along dim={dim} in some row")
                         + ": are all responses empty?")
    kept = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))  # inf/NaN at padding stays out
    total = kept.sum() if dim is None else kept.sum(dim=dim)
    return total / n


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `x` over the positions where `mask` is True (all of them pooled).

    var = masked_mean((x − masked_mean(x))²), times n / (n − 1) (Bessel's correction) when `unbiased`.

    Args:
        x: float (B, T).
        mask: bool (B, T).
        unbiased: apply Bessel's correction, n = mask.sum() (TRL's default).

    Returns:
        float, shape ().

    Raises:
        TypeError: if `mask` is not bool.
        ValueError: if the shapes differ; if `mask` selects no element, or fewer than 2 when `unbiased`
            (TRL divides by zero there; use a larger mini-batch).

    Source:
        TRL 0.11.4 `trl.core.masked_var`.
    """
    _check_mask(mask, x)
    n = int(mask.sum())
    if n < (2 if unbiased else 1):
        raise ValueError(f"mask selects {n} element(s); the {'unbiased ' if unbiased else ''}variance needs at least "
                         f"{2 if unbiased else 1} (PPO whitens over the whole batch's response tokens: use "
                         "batch_size >= 2)")
    mean = masked_mean(x, mask)
    variance = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        variance = variance * (n / (n - 1))
    return variance


def _global_masked_moments(x: torch.Tensor, mask: torch.Tensor, reduce_sum: SumFn) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance) of the masked elements of `x` pooled over all processes (see `masked_whiten`)."""
    _check_mask(mask, x)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    totals = reduce_sum(torch.stack([torch.where(mask, x, zero).sum(), mask.sum().to(x.dtype)]))  # (2,): Σx, n
    n = float(totals[1])
    if n < 2:
        raise ValueError(f"mask selects {n:g} element(s) over all processes; the unbiased variance needs at least 2 "
                         "(PPO whitens over the whole batch's response tokens: use batch_size >= 2)")
    mean = totals[0] / n
    squares = reduce_sum(torch.where(mask, (x - mean) ** 2, zero).sum().reshape(1))[0]
    return mean, squares / n * (n / (n - 1))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, *,
                  reduce_sum: Optional[SumFn] = None) -> torch.Tensor:
    """Whiten `x` with its masked mean and (unbiased) variance.

    out = (x − μ) / sqrt(σ² + 1e-8), plus μ back when not `shift_mean`. μ and σ² pool all masked elements.
    Padding positions are transformed too (TRL semantics); mask them in what follows.

    Args:
        x: float (B, T).
        mask: bool (B, T).
        shift_mean: if False, keep the original mean (used by TRL's `whiten_rewards`).
        reduce_sum: data-parallel training: a function summing a tensor over processes
            (`trainers.distributed.DataParallel.sum`); μ and σ² then pool the masked elements of every process
            (two-pass: the global mean, then the global sum of squared deviations). None: this process only.

    Returns:
        float (B, T).

    Raises:
        TypeError / ValueError: as `masked_var` (fewer than 2 masked elements, counted over all processes).

    Source:
        TRL 0.11.4 `trl.core.masked_whiten` (TRL whitens per process; here the statistics are global).
    """
    if reduce_sum is None:
        mean, var = masked_mean(x, mask), masked_var(x, mask)
    else:
        mean, var = _global_masked_moments(x, mask, reduce_sum)
    whitened = (x - mean) * torch.rsqrt(var + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


# ----- KL penalty and shaped rewards ----------------------------------------------------------------------------------


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "kl", *,
               logits: Optional[torch.Tensor] = None, ref_logits: Optional[torch.Tensor] = None,
               mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per-token estimate of KL(π‖π_ref) between the policy and the reference model on sampled tokens.

    With Δ = logp − ref_logp of the sampled token:

    - "kl": Δ (k1; unbiased, can be negative).
    - "abs": abs(Δ).
    - "mse": ½ Δ² (k2).
    - "k3": (r − 1) − log r with r = exp(−Δ) = π_ref/π (unbiased, always ≥ 0).
    - "full": Σ_v π(v)·(log π(v) − log π_ref(v)), the exact KL over the vocabulary from the two (B, T, V) logits.

    Args:
        logprobs, ref_logprobs: float (B, T), log π and log π_ref of the sampled response tokens.
        kind: one of `KL_PENALTY_KINDS` (`PPOConfig.kl_penalty`; paper: "full").
        logits, ref_logits: float (B, T, V), the policy's and the reference model's logits; required for "full".
        mask: bool (B, T) or None. Given, padded positions are 0 and never reach k3's exp (whose overflow at a
            padded position would make the gradient NaN through inf · 0); None: every position is computed (mask
            the result yourself).

    Returns:
        float (B, T) in nats.

    Raises:
        ValueError: on an unknown `kind`, mismatched shapes, or "full" without both logits.

    Source:
        TRL 0.11.4 `PPOTrainer._kl_penalty` ("full" = `F.kl_div(ref_logprob, logprob, log_target=True,
        reduction="none").sum(-1)`); k3: J. Schulman, "Approximating KL divergence" (2020 blog).
    """
    if kind not in KL_PENALTY_KINDS:
        raise ValueError(f"unknown kl_penalty kind {kind!r}; use one of {KL_PENALTY_KINDS}")
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    if kind == "full":
        if logits is None or ref_logits is None:
            raise ValueError("kind='full' needs logits and ref_logits (B, T, V); pass both or use kind='kl'")
        _check_same_shape(logits=logits, ref_logits=ref_logits)
        if logits.shape[:-1] != logprobs.shape:
            raise ValueError(f"logits shape {tuple(logits.shape)} does not fit logprobs shape {tuple(logprobs.shape)}; "
                             "logits must be (B, T, V)")
        logp = F.log_softmax(logits, dim=-1)
        ref_logp = F.log_softmax(ref_logits, dim=-1)
        lowest = torch.finfo(logp.dtype).min
        # clamp: a token with π = 0 contributes 0 (not 0·inf = NaN), also in the gradient
        full = (logp.exp() * (logp.clamp(min=lowest) - ref_logp.clamp(min=lowest))).sum(dim=-1)
        return full if mask is None else torch.where(mask, full, torch.zeros((), dtype=full.dtype, device=full.device))
    if mask is not None:
        _check_mask(mask, logprobs, "logprobs")
    delta = masked_delta(logprobs, ref_logprobs, mask)
    if kind == "kl":
        return delta
    if kind == "abs":
        return delta.abs()
    if kind == "mse":
        return 0.5 * delta.square()
    ratio = torch.exp(-delta)  # kind == "k3"
    return (ratio - 1) + delta


def compute_rewards(scores: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                    kl_coef: float, kind: str = "kl", *, logits: Optional[torch.Tensor] = None,
                    ref_logits: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token rewards: −β·KL on every response token, plus the sequence score on the last real token.

    Args:
        scores: float (B,), the sequence-level reward (for CORY the collective reward, after `scale_scores`).
            Cast to `logprobs.dtype`.
        logprobs, ref_logprobs: as in `kl_penalty` (no gradient needed).
        mask: bool (B, T); each row needs at least one True.
        kl_coef: β ≥ 0, the KL controller's current value (`PPOConfig.init_kl_coef` at the start).
        kind, logits, ref_logits: the KL estimator and its logits, see `kl_penalty`.

    Returns:
        (rewards, non_score_reward, kl), each float (B, T) and 0 at padding: rewards = non_score_reward + score at
        the last True of each row; non_score_reward = −β·kl; kl in nats per token (its row sum is the sequence KL).

    Raises:
        ValueError: on shape mismatches, a row with no real token, an unknown `kind`, or a `kl_coef` that is not a
            finite number >= 0.

    Source:
        TRL 0.11.4 `PPOTrainer.compute_rewards`.
    """
    _check_mask(mask, logprobs, "logprobs")
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    if scores.shape != logprobs.shape[:1]:
        raise ValueError(f"scores shape {tuple(scores.shape)} does not match batch size {logprobs.shape[0]}; pass one "
                         "score per response, shape (B,)")
    kl_coef = check_number(float(kl_coef), "kl_coef", low=0, fix="check the KL controller's value")
    _check_rows_nonempty(mask)
    kl = kl_penalty(logprobs, ref_logprobs, kind, logits=logits, ref_logits=ref_logits, mask=mask)
    non_score_reward = -kl_coef * kl
    t = mask.shape[-1]
    last = (t - 1) - mask.flip(-1).int().argmax(dim=-1)
    at_last = F.one_hot(last, t).to(kl.dtype)
    rewards = non_score_reward + at_last * scores.to(kl.dtype).unsqueeze(-1)
    return rewards, non_score_reward, kl


# ----- GAE ------------------------------------------------------------------------------------------------------------


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                   lam: float = 0.95, *, whiten: bool = True, whiten_rewards: bool = False,
                   reduce_sum: Optional[SumFn] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the response tokens, then masked whitening of the advantages.

    Rewards and values are first multiplied by the mask, so padding carries no reward and no bootstrap value;
    the value after the last token is 0. Going backwards over t:
    δ_t = r_t + γ·V_{t+1} − V_t,  A_t = δ_t + γλ·A_{t+1};  returns R_t = A_t + V_t (before whitening).

    Args:
        rewards: float (B, T), from `compute_rewards`.
        values: float (B, T), the value head's predictions at rollout time (old values).
        mask: bool (B, T).
        gamma: discount γ in [0, 1] (`PPOConfig.gamma`, default 1.0).
        lam: GAE λ in [0, 1] (`PPOConfig.lam`, default 0.95).
        whiten: whiten the advantages with `masked_whiten` (TRL); False returns the raw GAE.
        whiten_rewards: first whiten the masked rewards with `shift_mean=False` (`PPOConfig.whiten_rewards`),
            padding set back to 0 (as TRL >= 0.12; TRL 0.11.4 left whitened padding in the recursion, so a row's
            advantages depended on how much padding the batch gave it).
        reduce_sum: data-parallel: whiten with statistics pooled over processes (see `masked_whiten`).

    Returns:
        (advantages, returns), each float (B, T), detached, 0 at padding.

    Raises:
        TypeError / ValueError: on a non-bool mask or mismatched shapes; whitening needs ≥ 2 real tokens.

    Source:
        GAE: Schulman et al., arXiv:1506.02438 (eq. 16); TRL 0.11.4 `PPOTrainer.compute_advantages`.
    """
    _check_mask(mask, rewards, "rewards")
    _check_same_shape(rewards=rewards, values=values)
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    values = torch.where(mask, values.detach(), zero)
    rewards = torch.where(mask, rewards.detach(), zero)
    if whiten_rewards:  # padding back to 0 (TRL >= 0.12): 0.11.4 let (0 − μ)/σ + μ of padding flow into A_t
        rewards = torch.where(mask, masked_whiten(rewards, mask, shift_mean=False, reduce_sum=reduce_sum), zero)
    t_len = rewards.shape[-1]
    next_values = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    deltas = rewards + gamma * next_values - values
    last_gae = torch.zeros_like(deltas[..., 0])
    reversed_advantages = []
    for t in reversed(range(t_len)):
        last_gae = deltas[..., t] + gamma * lam * last_gae
        reversed_advantages.append(last_gae)
    advantages = torch.stack(reversed_advantages[::-1], dim=-1)
    returns = advantages + values
    if whiten:
        advantages = masked_whiten(advantages, mask, reduce_sum=reduce_sum)
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    return torch.where(mask, advantages, zero), torch.where(mask, returns, zero)


# ----- PPO losses -----------------------------------------------------------------------------------------------------


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cliprange: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate loss.

    ratio = exp(logp − old_logp); loss = masked_mean(max(−A·ratio, −A·clip(ratio, 1 − ε, 1 + ε))).

    Args:
        logprobs: float (B, T), log π_θ of the response tokens (with gradient).
        old_logprobs: float (B, T), log π at rollout time.
        advantages: float (B, T), from `gae_advantages`.
        mask: bool (B, T).
        cliprange: ε ≥ 0 (`PPOConfig.cliprange`, default 0.2).

    Returns:
        (loss, clipfrac): float () each; clipfrac is the fraction of real tokens where the clipped term is taken.

    Raises:
        TypeError / ValueError: on a non-bool mask, mismatched shapes or an empty mask.

    Source:
        PPO: Schulman et al., arXiv:1707.06347 (eq. 7); TRL 0.11.4 `PPOTrainer.loss` (pg_loss, pg_clipfrac).
    """
    _check_mask(mask, logprobs, "logprobs")
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    ratio = torch.exp(masked_delta(logprobs, old_logprobs, mask))  # 1 at padding: nothing there can overflow
    losses = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.max(losses, losses_clipped), mask)
    clipfrac = masked_mean(torch.gt(losses_clipped, losses).to(logprobs.dtype), mask)
    return loss, clipfrac


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               cliprange_value: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value-head loss.

    V_clip = clip(V, V_old − c, V_old + c); loss = ½·masked_mean(max((V − R)², (V_clip − R)²)).

    Args:
        values: float (B, T), the value head's current predictions (with gradient).
        old_values: float (B, T), predictions at rollout time.
        returns: float (B, T), targets from `gae_advantages`.
        mask: bool (B, T).
        cliprange_value: c ≥ 0 (`PPOConfig.cliprange_value`, default 0.2).

    Returns:
        (loss, clipfrac): float () each; clipfrac is the fraction of real tokens where the clipped error is larger.

    Raises:
        TypeError / ValueError: on a non-bool mask, mismatched shapes or an empty mask.

    Source:
        TRL 0.11.4 `PPOTrainer.loss` (vf_loss, vf_clipfrac; `trl.core.clip_by_value`).
    """
    _check_mask(mask, values, "values")
    _check_same_shape(values=values, old_values=old_values, returns=returns)
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    losses = (values - returns) ** 2
    losses_clipped = (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(losses, losses_clipped), mask)
    clipfrac = masked_mean(torch.gt(losses_clipped, losses).to(values.dtype), mask)
    return loss, clipfrac


def approx_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Approximate KL between the rollout policy and the current policy: ½·masked_mean((logp − old_logp)²).

    Not the KL to the reference model (that is `kl_penalty`). `logprobs`, `old_logprobs`, `mask`: as in
    `policy_loss`.

    Returns:
        float () in nats.

    Source:
        TRL 0.11.4 `PPOTrainer.loss`, stat `policy/approxkl`.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    return 0.5 * masked_mean((logprobs - old_logprobs) ** 2, mask)


def policy_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """k1 estimate of KL(π_old‖π_θ) on the rollout tokens: masked_mean(old_logp − logp).

    TRL's `early_stopping` compares this (not `approx_kl`) with 1.5 · `target_kl`. `logprobs`, `old_logprobs`,
    `mask`: as in `policy_loss`.

    Returns:
        float () in nats (can be negative).

    Source:
        TRL 0.11.4 `PPOTrainer.loss`, stat `policy/policykl`; `PPOTrainer._early_stop`.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    return masked_mean(old_logprobs - logprobs, mask)


def _stat_var(x: torch.Tensor, mask: torch.Tensor, reduce_sum: Optional[SumFn]) -> torch.Tensor:
    """Unbiased masked variance for the logged statistics: NaN below 2 tokens; pooled over processes if asked."""
    if reduce_sum is not None:
        try:
            return _global_masked_moments(x, mask, reduce_sum)[1]
        except ValueError:
            return torch.tensor(float("nan"))
    return masked_var(x, mask) if int(mask.sum()) > 1 else torch.tensor(float("nan"))


def ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, values: torch.Tensor, old_values: torch.Tensor,
             advantages: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *, cliprange: float = 0.2,
             cliprange_value: float = 0.2, vf_coef: float = 0.1, entropy: Optional[torch.Tensor] = None,
             ent_coef: float = 0.0, ratio_threshold: Optional[float] = None,
             reduce_sum: Optional[SumFn] = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO mini-batch loss policy_loss + vf_coef · value_loss − ent_coef · entropy, with TRL's statistics.

    If the mean policy ratio over real tokens exceeds `ratio_threshold`, the mini-batch is skipped as in TRL: the
    loss (and the logged policy/value losses) are multiplied by 0 and a warning is logged.

    Args:
        logprobs, old_logprobs, advantages, mask: as in `policy_loss` (the advantages whitened).
        values, old_values, returns: as in `value_loss`.
        cliprange: policy ratio clip ε (default 0.2).
        cliprange_value: value clip c (default 0.2).
        vf_coef: value loss coefficient (default 0.1).
        entropy: float (B, T), optional per-token policy entropy (nats; `agents.forward.entropy_from_logits`):
            logged, and with `ent_coef` > 0 its token mean is a bonus in the loss (needs its gradient).
        ent_coef: entropy bonus coefficient (`PPOConfig.ent_coef`; TRL: none, 0; CleanRL PPO: 0.01).
        ratio_threshold: skip threshold on the mean ratio (`PPOConfig.ratio_threshold`; TRL uses 10.0);
            None (default) never skips.
        reduce_sum: data-parallel: take the skip decision on the mean ratio over every process's tokens (see
            `masked_whiten`), so all processes skip together; `returns_var` and `values_var` pool every process's
            tokens too. The other statistics are this process's token means.

    Returns:
        (loss, stats). loss: float (), differentiable. stats: python floats (TRL name in brackets):
        `loss` (loss/total), `policy_loss` (loss/policy), `value_loss` (loss/value, without vf_coef),
        `approx_kl` (policy/approxkl), `policy_kl` (policy/policykl), `clipfrac` (policy/clipfrac),
        `value_clipfrac` (val/clipfrac), `ratio` (mean of policy/ratio), `advantages_mean`
        (policy/advantages_mean), `returns_mean`, `returns_var` (returns/mean, var), `value_pred` (val/vpred),
        `value_error` (val/error), `values_mean`, `values_var` (val/mean, var; of the old values),
        `skipped` (1.0 when the ratio threshold zeroed this mini-batch), and `entropy` (policy/entropy) when given.

    Raises:
        TypeError / ValueError: on a non-bool mask, mismatched shapes, or fewer than 2 real tokens (variances).

    Source:
        TRL 0.11.4 `PPOTrainer.loss`; PPO: arXiv:1707.06347 (eq. 9 for the entropy bonus; CleanRL `ppo.py`).
    """
    # policy_loss and value_loss check the mask and their three tensors each: all six are then mask-shaped
    if entropy is not None:
        _check_same_shape(logprobs=logprobs, entropy=entropy)
    elif ent_coef:
        raise ValueError("ent_coef > 0 needs the per-token entropy (pass entropy=)")
    pg_loss, pg_clipfrac = policy_loss(logprobs, old_logprobs, advantages, mask, cliprange)
    vf_loss, vf_clipfrac = value_loss(values, old_values, returns, mask, cliprange_value)
    loss = pg_loss + vf_coef * vf_loss
    if ent_coef:
        loss = loss - ent_coef * masked_mean(entropy, mask)
    ratio = torch.exp(masked_delta(logprobs, old_logprobs, mask)).detach()
    ratio_mean = masked_mean(ratio, mask)
    decisive = ratio_mean
    if reduce_sum is not None and ratio_threshold is not None:
        totals = reduce_sum(torch.stack([(ratio * mask).sum(), mask.sum().to(ratio.dtype)]))
        decisive = totals[0] / totals[1]
    skipped = ratio_threshold is not None and float(decisive) > ratio_threshold
    if skipped:
        logger.warning("mean policy ratio %.2f exceeds ratio_threshold=%s: skipping this mini-batch (loss set to 0)",
                       float(decisive), ratio_threshold)
        pg_loss, vf_loss, loss = pg_loss * 0.0, vf_loss * 0.0, loss * 0.0
    with torch.no_grad():
        stats = {
            "loss": loss,
            "policy_loss": pg_loss,
            "value_loss": vf_loss,
            "approx_kl": approx_kl(logprobs, old_logprobs, mask),
            "policy_kl": policy_kl(logprobs, old_logprobs, mask),
            "clipfrac": pg_clipfrac,
            "value_clipfrac": vf_clipfrac,
            "ratio": ratio_mean,
            "advantages_mean": masked_mean(advantages, mask),
            "returns_mean": masked_mean(returns, mask),
            "returns_var": _stat_var(returns, mask, reduce_sum),
            "value_pred": masked_mean(values, mask),
            "value_error": masked_mean((values - returns) ** 2, mask),
            "values_mean": masked_mean(old_values, mask),
            "values_var": _stat_var(old_values, mask, reduce_sum),
        }
        if entropy is not None:
            stats["entropy"] = masked_mean(entropy, mask)
    out = {name: float(value.detach()) for name, value in stats.items()}
    out["skipped"] = float(skipped)
    return loss, out
