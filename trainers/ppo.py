"""`PPOLearner`: one agent's PPO update on a `Rollout` (TRL 0.11.4 `PPOTrainer.step` semantics).

One `step(rollout)`:

1. score scaling / normalisation / clipping (`use_score_scaling`, `use_score_norm`, `score_clip`);
2. one no-grad forward of the policy (old logprobs, values) and of the shared reference model (ref logprobs);
3. shaped per-token rewards: −β·KL_t on every response token plus the score on the last one (β from the KL
   controller), then GAE (γ, λ) → advantages (whitened) and returns;
4. `ppo_epochs` passes of shuffled mini-batches with gradient accumulation, optional gradient clipping, the
   ratio-threshold guard (skipped mini-batches are counted) and optional early stopping on the policy KL;
5. the KL controller update with the batch-mean sequence KL and n_steps = batch size.

The learner owns everything that travels with a model at role exchange: the optimizer state, the KL controller and
the score statistics (`state_dict` / `load_state_dict`, `reset_state` for the official code's reset-on-swap).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from trainers import ppo_math
from trainers.config import PPOConfig
from trainers.distributed import DataParallel
from trainers.kl_control import make_kl_controller
from trainers.rollout import Rollout, score_rollout
from trainers.score_scaling import RunningMoments, scale_scores

logger = logging.getLogger(__name__)


_FUSED_ADAM_DEVICES = ("cpu", "cuda")
_FUSED_ADAM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def make_adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with torch's defaults (betas (0.9, 0.999), eps 1e-8, no weight decay), as TRL's `PPOTrainer` builds it.

    Uses the fused kernel (one pass over each tensor per step) when every parameter is a float tensor on CPU or
    CUDA: the same update rule, equal to the default for-loop implementation up to float32 round-off (~1e-7), and
    about 4-5x faster per step on CPU (benchmarks/README.md), which is ~1.1 s per step saved for a 135M-parameter
    full fine-tune. Falls back to the default implementation otherwise.

    Args:
        params: the parameters to optimise.
        lr: learning rate.
    """
    fused = all(p.device.type in _FUSED_ADAM_DEVICES and p.dtype in _FUSED_ADAM_DTYPES for p in params)
    if fused:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except RuntimeError as err:  # a torch build without the fused kernel for this device
            logger.debug("fused Adam unavailable (%s); using the default implementation", err)
    return torch.optim.Adam(params, lr=lr)


class NonFiniteLossError(FloatingPointError):
    """A PPO loss or gradient became NaN/inf; training stops so the last good checkpoint is kept."""


def checked_trainable_parameters(agent, ref_model) -> list[torch.nn.Parameter]:
    """The agent's trainable parameters, refused if empty or if the reference model holds any of them.

    Raises:
        ValueError: no trainable parameter, or a reference model that shares trainable tensors with the policy
            (it would move with the policy and the KL penalty would vanish).
    """
    params = list(agent.trainable_parameters())
    ref_params = {id(p) for p in ref_model.parameters()}
    shared = [p for p in params if id(p) in ref_params]
    if shared:
        raise ValueError(
            f"the reference model shares {len(shared)} trainable parameter tensors with the policy; "
            "the reference must be a frozen copy (agents.copy_for_two_agents) or the LoRA base with adapters off"
        )
    if not params:
        raise ValueError("the agent has no trainable parameter; check use_lora / requires_grad settings")
    return params


def backward_batches(config: PPOConfig, generator: torch.Generator | None):
    """One epoch of shuffled indices: yields, per optimiser step, the list of its mini-batch index tensors.

    Each optimiser step covers `mini_batch_size * gradient_accumulation_steps` rows of the `batch_size` (TRL 0.11's
    backward batches).
    """
    order = torch.randperm(config.batch_size, generator=generator)
    for b_start in range(0, config.batch_size, config.backward_batch_size):
        backward_idx = order[b_start:b_start + config.backward_batch_size]
        yield [backward_idx[m:m + config.mini_batch_size]
               for m in range(0, config.backward_batch_size, config.mini_batch_size)]


def checked_rollout(rollout: Rollout, config: PPOConfig, device: torch.device) -> Rollout:
    """`rollout` on the learner's `device`, refused unless it has exactly `config.batch_size` rows.

    Raises:
        ValueError: another number of rows (both numbers named).
    """
    if rollout.batch_size != config.batch_size:
        raise ValueError(
            f"rollout has {rollout.batch_size} rows but PPOConfig.batch_size={config.batch_size}; "
            "roll out exactly batch_size episodes per update"
        )
    return rollout.to(device)


def optimizer_step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
                   max_grad_norm: float | None, dist: DataParallel | None = None) -> None:
    """Average gradients over data-parallel processes (`dist`), optional gradient-norm clipping, then one optimiser
    step and zeroed gradients.

    Raises:
        NonFiniteLossError: if the gradient norm is NaN/inf (the weights are left untouched).
    """
    if dist is not None:
        dist.sync_gradients(params)
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        if not math.isfinite(float(norm)):
            raise NonFiniteLossError("gradient norm is not finite; the last checkpoint is intact")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def global_sequence_kl(kl: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                       dist: DataParallel) -> tuple[float, float]:
    """Batch-mean sequence KL to the reference, over every process's rows (TRL ``objective/kl``).

    Args:
        kl: float (B, T), the per-token estimate that shapes the reward (`ppo_math.kl_penalty` with the configured
            `kl_penalty`); this is what the KL controller reads, as in TRL.
        logprobs, ref_logprobs: float (B, T) policy and reference log-probabilities of the response tokens.
        mask: bool (B, T).
        dist: the data-parallel group (sums rows and counts over processes, one all-reduce).

    Returns:
        (kl, kl_k1): mean over rows of Σ_t kl_t, and of Σ_t (logp_t − ref_logp_t) (the k1 estimate), nats.
    """
    rows = torch.stack([(kl * mask).sum(dim=-1), ((logprobs - ref_logprobs) * mask).sum(dim=-1)])  # (2, B)
    rows = rows.to(torch.float64)
    totals = dist.sum(torch.cat([rows.sum(dim=-1), rows.new_tensor([float(rows.shape[-1])])]))
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])


def mean_over_minibatches(stats: list[dict[str, float]]) -> dict[str, float]:
    """Each statistic's mean over the update's mini-batches, skipping those where it is undefined (NaN: the variance
    of a mini-batch with one token); NaN only when it is undefined in every mini-batch."""
    out = {}
    for key in stats[0]:
        values = [s[key] for s in stats if not math.isnan(s[key])]
        out[key] = sum(values) / len(values) if values else float("nan")
    return out


def pooled_minibatch_loss(dist: DataParallel, loss: torch.Tensor, stats: dict[str, float], mask: torch.Tensor, *,
                          algo: str, terms: tuple[str, ...], fix: str) -> tuple[torch.Tensor, dict[str, float]]:
    """A learner's mini-batch loss and statistics, ready for data-parallel training (the identity for one process).

    One all-reduce (`DataParallel.pool_token_means`) gives the statistics as token means over every process's tokens
    and the loss weight that makes the averaged gradient the global token mean's. A non-finite loss on any process
    raises on every process, so none is left waiting in a collective.

    Args:
        loss: float (), this process's differentiable mini-batch loss.
        stats: python floats from the loss function.
        mask: bool (b, T), the mini-batch's response tokens.
        algo: name in the error message ("PPO", "GRPO"); terms: keys of `stats` the message shows; fix: its advice.

    Returns:
        (weighted loss, pooled stats).

    Raises:
        NonFiniteLossError: the loss is NaN/inf on this or another process.
    """
    local = {key: stats[key] for key in terms}
    pooled, weight = dist.pool_token_means({**stats, "nonfinite": float(not torch.isfinite(loss))}, mask)
    if pooled.pop("nonfinite") > 0:
        detail = ", ".join(f"{key}={value}" for key, value in local.items())
        raise NonFiniteLossError(f"{algo} loss is not finite (this process: loss {float(loss.detach())}, {detail}); "
                                 f"{fix}")
    return loss * weight, pooled


class PPOLearner:
    """PPO for one seat's agent against the shared frozen reference model.

    Args:
        agent: an `agents.LLMAgent` (policy + value head) with `evaluate(...)` and `trainable_parameters()`.
        ref_model: the shared frozen `agents.ReferenceModel` (never optimised).
        config: `PPOConfig` (`batch_size` and `mini_batch_size` count this process's rows).
        dist: the data-parallel group (`trainers.distributed.DataParallel`); default single process. With several
            processes every statistic that steers the update (score moments, advantage whitening, the ratio guard,
            early stopping, the KL controller) is global and gradients are averaged, so the replicas stay equal.

    Raises:
        ValueError: if the reference model shares a trainable parameter with the agent.
    """

    name = "ppo"

    def __init__(self, agent, ref_model, config: PPOConfig, *, dist: DataParallel | None = None) -> None:
        self.agent = agent
        self.ref_model = ref_model
        self.config = config
        self.dist = DataParallel() if dist is None else dist
        self._reduce_sum = self.dist.sum if self.dist.enabled else None
        self._params = checked_trainable_parameters(agent, ref_model)
        self.reset_state()

    # ------------------------------------------------------------------ state that travels with the model
    def reset_state(self) -> None:
        """Fresh Adam state, KL controller and score statistics (what the official code's disk swap does)."""
        cfg = self.config
        self.optimizer = make_adam(self._params, cfg.learning_rate)
        self.kl_ctl = make_kl_controller(cfg.adap_kl_ctrl, cfg.init_kl_coef, cfg.target, cfg.horizon)
        self.score_moments = RunningMoments()

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "score_moments": self.score_moments.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.score_moments.load_state_dict(state["score_moments"])

    # ------------------------------------------------------------------ the update
    def prepare(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """Scores, old logprobs/values, reference logprobs, shaped rewards, advantages and returns (no grad).

        Returns:
            dict with float32 tensors: scores (B,), logprobs, ref_logprobs, values, kl, rewards, non_score_reward,
            advantages, returns (all (B, T), zero on padding).
        """
        cfg = self.config
        mask = rollout.response_mask
        scores = scale_scores(
            rollout.scores.float(), self.score_moments,
            use_score_scaling=cfg.use_score_scaling, use_score_norm=cfg.use_score_norm, score_clip=cfg.score_clip,
            reduce_sum=self._reduce_sum,
        )
        full = cfg.kl_penalty == "full"
        old, ref = score_rollout(self.agent, self.ref_model, rollout, return_logits=full)
        rewards, non_score_reward, kl = ppo_math.compute_rewards(
            scores, old.logprobs, ref.logprobs, mask, self.kl_ctl.value, cfg.kl_penalty,
            logits=old.logits if full else None, ref_logits=ref.logits if full else None,
        )
        advantages, returns = ppo_math.gae_advantages(rewards, old.values, mask, cfg.gamma, cfg.lam,
                                                      whiten_rewards=cfg.whiten_rewards, reduce_sum=self._reduce_sum)
        return {
            "scores": scores, "logprobs": old.logprobs, "ref_logprobs": ref.logprobs, "values": old.values * mask,
            "kl": kl, "rewards": rewards, "non_score_reward": non_score_reward,
            "advantages": advantages, "returns": returns,
        }

    def step(self, rollout: Rollout, *, generator: torch.Generator | None = None) -> dict[str, float]:
        """One PPO update on `rollout`.

        Args:
            rollout: this seat's experience (B must equal `config.batch_size`).
            generator: torch generator for the mini-batch order (seeded by the trainer).

        Returns:
            Flat stats (python floats): task_reward, score, kl (sequence KL to the reference: token sum of the
            `kl_penalty` estimator that shapes the reward, batch mean, nats; TRL objective/kl; the KL controller
            reads it), kl_k1 (the same with the k1 estimate logp − ref_logp), kl_coef (β used this step),
            non_score_reward (= −β·kl),
            policy_loss, value_loss, entropy, approx_kl, policy_kl, clipfrac, value_clipfrac, ratio,
            response_len, skipped_batches, epochs.

        Raises:
            ValueError: if the rollout batch size differs from `config.batch_size`.
            NonFiniteLossError: if a loss becomes NaN/inf.
        """
        cfg = self.config
        rollout = checked_rollout(rollout, cfg, self.agent.device)
        mask = rollout.response_mask
        data = self.prepare(rollout)
        kl_coef = float(self.kl_ctl.value)
        self.agent.train()
        train_stats: list[dict[str, float]] = []
        skipped = 0
        epochs_done = 0
        early_stop = False
        self.optimizer.zero_grad(set_to_none=True)
        for _ in range(cfg.ppo_epochs):
            for minibatches in backward_batches(cfg, generator):
                for idx in minibatches:
                    stats, loss = self._minibatch_loss(rollout, data, idx)
                    skipped += int(stats.pop("skipped"))
                    (loss / cfg.gradient_accumulation_steps).backward()
                    train_stats.append(stats)
                optimizer_step(self.optimizer, self._params, cfg.max_grad_norm, self.dist)
            epochs_done += 1
            if cfg.early_stopping and self._global_policy_kl(train_stats[-1]) > 1.5 * cfg.target_kl:
                early_stop = True
                break
        self.agent.eval()
        # TRL objective/kl: the estimator that shapes the reward (kl_penalty), summed over the response
        mean_kl, mean_k1 = global_sequence_kl(data["kl"], data["logprobs"], data["ref_logprobs"], mask, self.dist)
        self.kl_ctl.update(mean_kl, cfg.batch_size * self.dist.world_size)
        out = mean_over_minibatches(train_stats)
        out.update(
            task_reward=float(rollout.task_reward.mean()),
            score=float(rollout.scores.mean()),
            kl=mean_kl,
            kl_k1=mean_k1,
            kl_coef=kl_coef,
            non_score_reward=float((data["non_score_reward"] * mask).sum(dim=-1).mean()),
            response_len=float(mask.sum(dim=-1).float().mean()),
            skipped_batches=float(skipped),
            epochs=float(epochs_done),
            early_stopped=float(early_stop),
        )
        return self.dist.mean_stats(out)

    def _global_policy_kl(self, stats: dict[str, float]) -> float:
        return self.dist.mean_stats({"policy_kl": stats["policy_kl"]})["policy_kl"]

    def _minibatch_loss(self, rollout: Rollout, data: dict[str, torch.Tensor], idx: torch.Tensor):
        mb = rollout.select(idx)
        width = mb.response.shape[1]
        new = self.agent.evaluate(mb.query, mb.query_mask, mb.response, mb.response_mask, allowed=mb.allowed)
        loss, stats = ppo_math.ppo_loss(
            logprobs=new.logprobs,
            old_logprobs=data["logprobs"][idx, :width],
            values=new.values,
            old_values=data["values"][idx, :width],
            advantages=data["advantages"][idx, :width],
            returns=data["returns"][idx, :width],
            mask=mb.response_mask,
            entropy=new.entropy,
            ent_coef=self.config.ent_coef,
            cliprange=self.config.cliprange,
            cliprange_value=self.config.cliprange_value,
            vf_coef=self.config.vf_coef,
            ratio_threshold=self.config.ratio_threshold,
            reduce_sum=self._reduce_sum,
        )
        loss, stats = pooled_minibatch_loss(
            self.dist, loss, stats, mb.response_mask, algo="PPO", terms=("policy_loss", "value_loss"),
            fix="lower learning_rate or enable max_grad_norm / score_clip; the last checkpoint is intact")
        return stats, loss
