"""`GRPOLearner`: critic-free Group Relative Policy Optimization for one seat's agent (DeepSeekMath §4.1).

The rollout holds k = `group_size` responses per query in consecutive rows (`trainers.rollout.run_episodes` with
``group_size=k``). One `step(rollout)`:

1. one no-grad forward of the policy (old logprobs) and of the shared reference model (ref logprobs);
2. sequence rewards: the scores (collective reward for CORY); with ``kl_in_loss=False`` also the penalty β·Σ_t KL_t;
3. group-relative advantages (`group_advantages`): reward minus its group's mean, divided by the group's std when
   ``scale_rewards``, minus the penalty's deviation from its group mean; every token of a response gets its
   sequence's advantage (outcome supervision);
4. `ppo_epochs` passes of shuffled mini-batches of the PPO clipped surrogate (`ppo_math.policy_loss`), plus
   β·k3-KL to the reference model when ``kl_in_loss`` (DeepSeekMath eq. 3), with gradient accumulation;
5. the KL controller update with the batch-mean sequence KL of the penalised estimator (β is fixed unless
   `adap_kl_ctrl`).

Steps 4 and 5 are the step every learner shares (`trainers.learning.update.PolicyLearner`, as PPO); this module
holds what is GRPO's: steps 1–3 (`prepare`), the loss and its statistics.

No value head is trained (the agent's value head is ignored). For the CORY observer a group shares the query q
but not the prompt (each row saw a different pioneer answer a1); the baseline is still the group mean, i.e. the
expected collective reward for q under the current pair of policies.

Source: Shao et al., "DeepSeekMath", arXiv:2402.03300, §4.1 (eq. 3 objective, eq. 4 k3 KL estimator, outcome
supervision advantages Â_{i,t} = (r_i − mean(r)) / std(r)).
"""

from __future__ import annotations

import torch

from cory_env.checks import check_number
from cory_env.checks import check_groups
from trainers.learning.configs import GRPOConfig
from trainers.learning import ppo_math
from trainers.learning.update import PolicyLearner, pooled_minibatch_loss
from trainers.learning.experience import Rollout, score_rollout
from trainers.learning.registry import LearnerSpec

STD_EPS = 1e-4
"""Added to the group std before dividing (TRL `GRPOTrainer`'s constant); a zero-std group gets advantage 0."""


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: bool = True,
                     penalty: torch.Tensor | None = None) -> torch.Tensor:
    """Group-relative advantages of k consecutive rows per query.

    A_i = (r_i − mean_g(r)) / (std_g(r) + 1e-4) when `scale` (std with Bessel's correction, as TRL), else
    r_i − mean_g(r); then, with a `penalty` p (β · the sequence KL), A_i −= p_i − mean_g(p). A group whose rewards
    are all equal gets 0 from the reward part.

    The penalty is centred on its group but never divided by the reward's std: so β keeps the meaning of a price in
    advantage units per nat (as the loss weight β of ``kl_in_loss`` has next to the normalised policy loss), and a
    group without reward spread is not blown up by 1/(std + 1e-4). Dividing the penalised reward r − β·KL by its own
    group std (verl's KL-in-reward GRPO) rescales the penalty to unit size whatever β is: a 1000× change of β moved
    the advantages by 15 %.

    Args:
        rewards: float (B,), one task (or collective) reward per response; rows [g·k, (g+1)·k) answer the same query.
        group_size: k ≥ 2.
        scale: divide the reward part by the group std (DeepSeekMath); False only centres (Dr. GRPO).
        penalty: float (B,) or None, the per-sequence penalty β·Σ_t KL_t (``kl_in_loss=False``).

    Returns:
        float (B,), same dtype as `rewards`.

    Raises:
        ValueError: if `rewards` is not 1-D, k < 2, B is not a multiple of k, or `penalty` is not shaped like it.

    Source:
        DeepSeekMath, arXiv:2402.03300, §4.1.2 (outcome supervision); the KL-penalised reward r − β·KL of RLHF
        (Ziegler et al., arXiv:1909.08593, eq. 2) with the group mean as the baseline of each part.

    >>> [round(a, 3) for a in group_advantages(torch.tensor([1.0, 3.0, 2.0, 2.0]), 2).tolist()]
    [-0.707, 0.707, 0.0, 0.0]
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (B,), got shape {tuple(rewards.shape)}")
    check_number(group_size, "group_size", integer=True, low=2,
                 fix="group-relative advantages need 2 samples per query or more (GRPOConfig.group_size)")
    check_groups(rewards.shape[0], group_size)
    if penalty is not None and penalty.shape != rewards.shape:
        raise ValueError(f"penalty must be shaped like rewards {tuple(rewards.shape)}, got {tuple(penalty.shape)}")
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=-1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=-1, keepdim=True) + STD_EPS)
    if penalty is not None:
        costs = penalty.view(-1, group_size).to(centred.dtype)
        centred = centred - (costs - costs.mean(dim=-1, keepdim=True))
    return centred.reshape(-1)


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, cliprange: float = 0.2, kl_coef: float = 0.0, entropy: torch.Tensor | None = None,
              ent_coef: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO mini-batch loss: clipped surrogate with sequence advantages, plus β·k3-KL to the reference.

    loss = policy_loss(logp, old_logp, A_i on every token of response i, ε)
    + β · masked_mean(k3(logp, ref_logp)) − ent_coef · masked_mean(entropy), k3 = π_ref/π − log(π_ref/π) − 1,
    with `ppo_math.policy_loss`. Token-level means over the mini-batch (TRL's default) rather than DeepSeekMath's
    per-sequence mean.

    Args:
        logprobs: float (B, T), current log π_θ of the response tokens (with gradient).
        old_logprobs: float (B, T), log π at rollout time.
        ref_logprobs: float (B, T), log π_ref.
        advantages: float (B,), from `group_advantages`.
        mask: bool (B, T).
        cliprange: ε (`UpdateConfig.cliprange`).
        kl_coef: β; 0 drops the KL term (KL penalised in the reward instead).
        entropy: float (B, T), optional per-token entropy (nats): logged, and a bonus with `ent_coef` > 0.
        ent_coef: entropy bonus coefficient (`UpdateConfig.ent_coef`; 0 = none, DeepSeekMath).

    Returns:
        (loss, stats): loss float (), differentiable; stats python floats policy_loss, kl_loss (k3, token mean,
        nats), clipfrac, approx_kl, policy_kl, ratio, and entropy when given.

    Raises:
        TypeError / ValueError: on a non-bool mask, mismatched shapes, or advantages that are not (B,).

    Source:
        DeepSeekMath, arXiv:2402.03300, §4.1.1 eq. 3 (objective) and eq. 4 (k3 KL estimator).
    """
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    token_adv = advantages.unsqueeze(-1).expand_as(logprobs) * mask
    pg_loss, clipfrac = ppo_math.policy_loss(logprobs, old_logprobs, token_adv, mask, cliprange)
    kl_loss = ppo_math.masked_mean(ppo_math.kl_penalty(logprobs, ref_logprobs, "k3", mask=mask), mask)
    loss = pg_loss + kl_coef * kl_loss if kl_coef else pg_loss
    if ent_coef:
        if entropy is None:
            raise ValueError("ent_coef > 0 needs the per-token entropy (pass entropy=)")
        loss = loss - ent_coef * ppo_math.masked_mean(entropy, mask)
    with torch.no_grad():
        stats = {
            "policy_loss": float(pg_loss), "kl_loss": float(kl_loss), "clipfrac": float(clipfrac),
            "approx_kl": float(ppo_math.approx_kl(logprobs, old_logprobs, mask)),
            "policy_kl": float(ppo_math.policy_kl(logprobs, old_logprobs, mask)),
            "ratio": float(ppo_math.masked_mean(torch.exp(ppo_math.masked_delta(logprobs, old_logprobs, mask)), mask)),
        }
        if entropy is not None:
            stats["entropy"] = float(ppo_math.masked_mean(entropy, mask))
    return loss, stats


def penalised_kl_kind(config: GRPOConfig) -> str:
    """The KL estimator GRPO penalises (and logs as `kl`): k3 when `GRPOConfig.kl_in_loss`, else
    `UpdateConfig.kl_penalty`."""
    return "k3" if config.kl_in_loss else config.kl_penalty


def group_of(config: GRPOConfig) -> int:
    """Responses per query (`LearnerSpec.samples_per_query` of grpo and magrpo)."""
    return config.group_size


class GRPOLearner(PolicyLearner):
    """GRPO for one seat's agent against the shared frozen reference model (see the module docstring;
    `PolicyLearner.step` with GRPO's advantages and loss).

    Args:
        agent, ref_model: as `PolicyLearner`'s (the agent's value head is unused).
        config: `GRPOConfig` (the shared update and group_size, scale_rewards, kl_in_loss); sizes count this
            process's rows.
        dist: the data-parallel group (default single process); groups never span processes.

    `step(rollout, generator=)` returns flat stats: the mini-batch means policy_loss, kl_loss (k3 to the reference,
    token mean; logged also when the KL is in the reward), approx_kl, policy_kl, clipfrac, ratio, entropy;
    task_reward, score, kl (sequence KL to the reference, batch mean, nats, with the penalised estimator: k3 when
    `kl_in_loss`, else `kl_penalty`; the KL controller reads it), kl_k1 (the same with the k1 estimate
    logp − ref_logp), kl_coef (β); reward_std (mean within-group std of the scores), zero_std_groups
    (fraction of groups whose scores are all equal: no task signal, whatever the KL penalty), response_len, epochs.

    Raises:
        ValueError: the reference model shares a trainable parameter with the agent.
    """

    name = "grpo"

    # ------------------------------------------------------------------ the update
    def prepare(self, rollout: Rollout, critic: Rollout | None = None) -> dict[str, torch.Tensor]:
        """Old and reference logprobs, per-token KL, sequence rewards and advantages (no grad).

        Raises:
            ValueError: a `critic` input: GRPO trains no value head (use ``--learner mappo``'s PPO learners).

        Returns:
            dict of float32 tensors: logprobs, ref_logprobs, kl (B, T; 0 on padding), rewards (B,; the scores,
            without any KL), advantages (B,).
        """
        if critic is not None:
            raise ValueError("GRPO has no critic: it cannot read a critic input; use a PPO learner (mappo)")
        opts, mask = self.config, rollout.response_mask
        old, ref = score_rollout(self.agent, self.ref_model, rollout, need_values=False)
        kl = ppo_math.kl_penalty(old.logprobs, ref.logprobs, penalised_kl_kind(opts), mask=mask)
        rewards = rollout.scores.float()
        penalty = None if opts.kl_in_loss else self.kl_coef * kl.sum(dim=-1)
        advantages = group_advantages(rewards, opts.group_size, scale=opts.scale_rewards, penalty=penalty)
        return {"logprobs": old.logprobs, "ref_logprobs": ref.logprobs, "kl": kl, "rewards": rewards,
                "advantages": advantages}

    def _update_stats(self, rollout, data, stats, epochs, stopped) -> dict[str, float]:
        grouped = data["rewards"].view(-1, self.config.group_size)  # the task (collective) rewards, no KL
        return {"reward_std": float(grouped.std(dim=-1).mean()),
                "zero_std_groups": float((grouped.max(dim=-1).values == grouped.min(dim=-1).values).float().mean()),
                "response_len": float(rollout.response_mask.sum(dim=-1).float().mean()),
                "epochs": float(self.config.ppo_epochs)}

    def _minibatch_loss(self, rollout: Rollout, data: dict[str, torch.Tensor], idx: torch.Tensor):
        beta = self.kl_coef  # β of this step: the controller moves only after the epochs
        mb = rollout.select(idx)
        width = mb.response.shape[1]
        new = self.agent.evaluate(mb.query, mb.query_mask, mb.response, mb.response_mask, allowed=mb.allowed,
                                  temperature=mb.temperature)
        loss, stats = grpo_loss(new.logprobs, data["logprobs"][idx, :width], data["ref_logprobs"][idx, :width],
                                data["advantages"][idx], mb.response_mask, cliprange=self.config.cliprange,
                                kl_coef=beta if self.config.kl_in_loss else 0.0, entropy=new.entropy,
                                ent_coef=self.config.ent_coef)
        return pooled_minibatch_loss(self.dist, loss, stats, mb.response_mask, algo="GRPO",
                                     terms=("policy_loss", "kl_loss"), fix="lower learning_rate or set max_grad_norm")


SPEC = LearnerSpec(GRPOLearner, config_class=GRPOConfig, value_head=False, samples_per_query=group_of,
                   kl_kind=penalised_kl_kind, supports_sharding=True,
                   summary="per seat: critic-free GRPO, group-relative advantages (DeepSeekMath)")
"""``--learner grpo`` (`trainers.learning.registry.LEARNERS`)."""
