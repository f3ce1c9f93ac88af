"""Test-only oracle: TRL 0.11.4 PPO equations, transcribed literally in TRL's per-call style.

Written from the equations of `trl/core.py` (masked_mean, masked_var, masked_whiten, logprobs_from_logits,
entropy_from_logits, clip_by_value) and `trl/trainer/ppo_trainer.py` (`_kl_penalty`, `compute_rewards`,
`compute_advantages`, `loss`, the score block of `step`) and `trl/trainer/utils.py` (RunningMoments,
AdaptiveKLController), keeping TRL's order of operations: float masks, per-row loops in `compute_rewards`, a reverse
Python loop in `compute_advantages`, whitening before masking. No input validation, no padding clean-up: exactly the
numbers TRL would produce, so `trainers.learning.ppo_math` can be compared with it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


# ---- trl/core.py ---------------------------------------------------------------------------------------------------


def logprobs_from_logits(logits, labels):
    logp = F.log_softmax(logits, dim=2)
    return torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)


def entropy_from_logits(logits):
    pd = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def masked_mean(values, mask, axis=None):
    mask = mask.to(values.dtype)
    if axis is None:
        return (values * mask).sum() / mask.sum()
    return (values * mask).sum(axis) / mask.sum(axis)


def masked_var(values, mask, unbiased=True):
    mean = masked_mean(values, mask)
    centered = values - mean
    variance = masked_mean(centered**2, mask)
    if unbiased:
        mask_sum = mask.to(values.dtype).sum()
        variance = variance * (mask_sum / (mask_sum - 1))
    return variance


def masked_whiten(values, mask, shift_mean=True):
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened


def clip_by_value(x, tensor_min, tensor_max):
    return torch.max(torch.min(x, tensor_max), tensor_min)


# ---- trl/trainer/ppo_trainer.py -----------------------------------------------------------------------------------


def kl_penalty(logprob, ref_logprob, kind):
    """`logprob` / `ref_logprob` are (B, T) gathered log-probs, or (B, T, V) full log-softmax for kind 'full'."""
    if kind == "kl":
        return logprob - ref_logprob
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind == "mse":
        return 0.5 * (logprob - ref_logprob).square()
    if kind == "full":
        return F.kl_div(ref_logprob, logprob, log_target=True, reduction="none").sum(-1)
    if kind == "k3":  # not in TRL 0.11; Schulman's k3 with ratio = pi_ref / pi
        log_ratio = ref_logprob - logprob
        return (log_ratio.exp() - 1) - log_ratio
    raise NotImplementedError(kind)


def compute_rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind):
    rewards, non_score_rewards, kls = [], [], []
    for score, logprob, ref_logprob, mask in zip(scores, logprobs, ref_logprobs, masks):
        kl = kl_penalty(logprob, ref_logprob, kind)
        kls.append(kl)
        non_score_reward = -kl_coef * kl
        non_score_rewards.append(non_score_reward)
        reward = non_score_reward.clone()
        last_non_masked_index = mask.nonzero()[-1]
        reward[last_non_masked_index] += score
        rewards.append(reward)
    return torch.stack(rewards), torch.stack(non_score_rewards), torch.stack(kls)


def compute_advantages(values, rewards, mask, gamma, lam, whiten_rewards=False):
    mask = mask.to(values.dtype)
    lastgaelam = 0
    advantages_reversed = []
    gen_len = rewards.shape[-1]
    values = values * mask
    rewards = rewards * mask
    if whiten_rewards:
        rewards = masked_whiten(rewards, mask, shift_mean=False)
    for t in reversed(range(gen_len)):
        nextvalues = values[:, t + 1] if t < gen_len - 1 else 0.0
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam = delta + gamma * lam * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1]).transpose(0, 1)
    returns = advantages + values
    raw = advantages
    advantages = masked_whiten(advantages, mask).detach()
    return values, advantages, returns, raw


def loss(old_logprobs, values, logits_entropy, vpreds, logprobs, mask, advantages, returns,
         cliprange, cliprange_value, vf_coef, ratio_threshold=10.0):
    """`values` are the old values, `vpreds` the new ones (TRL's argument names); returns (total, stats)."""
    vpredclipped = clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), mask)

    ratio = torch.exp(logprobs - old_logprobs)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses).float(), mask)

    total = pg_loss + vf_coef * vf_loss
    avg_ratio = masked_mean(ratio, mask).item()
    if avg_ratio > ratio_threshold:
        pg_loss = pg_loss * 0.0
        vf_loss = vf_loss * 0.0
        total = total * 0.0

    stats = {
        "loss": total,
        "policy_loss": pg_loss,
        "value_loss": vf_loss,
        "approx_kl": 0.5 * masked_mean((logprobs - old_logprobs) ** 2, mask),
        "policy_kl": masked_mean(old_logprobs - logprobs, mask),
        "clipfrac": pg_clipfrac,
        "value_clipfrac": vf_clipfrac,
        "ratio": masked_mean(ratio, mask),
        "advantages_mean": masked_mean(advantages, mask),
        "returns_mean": masked_mean(returns, mask),
        "returns_var": masked_var(returns, mask),
        "value_pred": masked_mean(vpreds, mask),
        "value_error": masked_mean((vpreds - returns) ** 2, mask),
        "values_mean": masked_mean(values, mask),
        "values_var": masked_var(values, mask),
    }
    if logits_entropy is not None:
        stats["entropy"] = masked_mean(entropy_from_logits(logits_entropy), mask)
    return total, stats


def step_score_block(scores, running, use_score_scaling, use_score_norm, score_clip):
    if use_score_scaling:
        running.update(scores)
        kwargs = dict(dtype=scores.dtype, device=scores.device)
        score_scaling_factor = torch.tensor(running.std, **kwargs) + torch.finfo(scores.dtype).eps
        if use_score_norm:
            scores = (scores - torch.tensor(running.mean, **kwargs)) / score_scaling_factor
        else:
            scores = scores / score_scaling_factor
    if score_clip is not None:
        scores_dtype = scores.dtype
        scores = torch.clip(scores.float(), -score_clip, score_clip).to(dtype=scores_dtype)
    return scores


# ---- trl/trainer/utils.py -----------------------------------------------------------------------------------------


class RunningMoments:
    def __init__(self):
        self.mean = 0
        self.std = 1
        self.var = 1
        self.count = 1e-24

    @torch.no_grad()
    def update(self, xs):
        xs_count = xs.numel()
        xs_var, xs_mean = torch.var_mean(xs, unbiased=False)
        xs_mean, xs_var = xs_mean.float(), xs_var.float()
        delta = xs_mean - self.mean
        tot_count = self.count + xs_count
        new_sum = xs_var * xs_count
        old_sum = self.var * self.count + delta**2 * self.count * xs_count / tot_count
        tot_sum = old_sum + new_sum
        self.mean += (delta * xs_count / tot_count).item()
        new_var = tot_sum / tot_count
        self.std = (new_var * tot_count / (tot_count - 1)).float().sqrt().item()
        self.var = new_var.item()
        self.count = tot_count
        return xs_mean.item(), (xs_var * xs_count / (xs_count - 1)).float().sqrt().item()


class AdaptiveKLController:
    def __init__(self, init_kl_coef, target, horizon):
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current, n_steps):
        proportional_error = np.clip(current / self.target - 1, -0.2, 0.2)
        mult = 1 + proportional_error * n_steps / self.horizon
        self.value *= mult


def naive_gae_row(rewards, values, gamma, lam):
    """Textbook GAE on one unpadded row (lists of floats), V after the end = 0: A_t = sum_l (γλ)^l δ_{t+l}."""
    n = len(rewards)
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < n else 0.0) - values[t] for t in range(n)]
    return [sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, n)) for t in range(n)]


def naive_full_kl(logits, ref_logits):
    """KL(π‖π_ref) at each position by the definition, in float64 (B, T, V) -> (B, T)."""
    p = torch.softmax(logits.double(), dim=-1)
    return (p * (torch.log(p) - torch.log_softmax(ref_logits.double(), dim=-1))).sum(-1)

