"""`PPOLearner`: one agent's PPO update on a `Rollout` (TRL 0.11.4 `PPOTrainer.step` semantics).

One `step(rollout)`:

1. score scaling / normalisation / clipping (`use_score_scaling`, `use_score_norm`, `score_clip`);
2. one no-grad forward of the policy (old logprobs, values) and of the shared reference model (ref logprobs);
3. shaped per-token rewards: −β·KL_t on every response token plus the score on the last one (β from the KL
   controller), then GAE (γ, λ) → advantages (whitened) and returns;
4. `ppo_epochs` passes of shuffled mini-batches with gradient accumulation, optional gradient clipping, the
   ratio-threshold guard (skipped mini-batches are counted) and optional early stopping on the policy KL;
5. the KL controller update with the batch-mean sequence KL and n_steps = batch size.

Steps 4 and 5 and the statistics are the step every learner shares (`trainers.learning.update.PolicyLearner`); this
module holds what is PPO's: steps 1–3 (`prepare`), the mini-batch loss, early stopping, its statistics and the
score statistics that travel with the model (`reset_state`).
"""

from __future__ import annotations

from typing import Any

import torch

from trainers.learning import ppo_math
from trainers.learning.score_scaling import RunningMoments, scale_scores
from trainers.learning.update import PolicyLearner, pooled_minibatch_loss
from trainers.learning.experience import Rollout, score_rollout
from trainers.learning.configs import PPOConfig
from trainers.learning.registry import LearnerSpec


def critic_values(agent, critic: Rollout) -> torch.Tensor:
    """The value head's predictions (float32 (B, T), no grad, eval mode) at the response tokens of `critic`: the
    same responses after the critic's own prompt (`PolicyLearner.step`'s ``critic``)."""
    agent.eval()
    with torch.no_grad():
        return agent.evaluate(critic.query, critic.query_mask, critic.response, critic.response_mask,
                              allowed=critic.allowed, temperature=critic.temperature).values.float()


class PPOLearner(PolicyLearner):
    """PPO for one seat's agent against the shared frozen reference model (`PolicyLearner.step` with PPO's rewards,
    advantages and loss).

    Args:
        agent, ref_model: as `PolicyLearner`'s (the agent's value head is trained).
        config: `PPOConfig` (`batch_size` and `mini_batch_size` count this process's rows).
        dist: the data-parallel group (`trainers.distributed.DataParallel`); default single process. With several
            processes every statistic that steers the update (score moments, advantage whitening, the ratio guard,
            early stopping, the KL controller) is global and gradients are averaged, so the replicas stay equal.

    `step(rollout, generator=)` returns flat stats (python floats): the mini-batch means policy_loss, value_loss,
    entropy, approx_kl, policy_kl, clipfrac, value_clipfrac, ratio, ...; task_reward, score, kl (sequence KL to the
    reference: token sum of the `kl_penalty` estimator that shapes the reward, batch mean, nats; TRL objective/kl;
    the KL controller reads it), kl_k1 (the same with the k1 estimate logp − ref_logp), kl_coef (β used this step);
    non_score_reward (= −β·kl), response_len, skipped_batches, epochs, early_stopped.

    Raises:
        ValueError: if the reference model shares a trainable parameter with the agent.
    """

    name = "ppo"

    # ------------------------------------------------------------------ state that travels with the model
    def reset_state(self) -> None:
        """Fresh Adam state, KL controller and score statistics (what the official code's disk swap does)."""
        super().reset_state()
        self.score_moments = RunningMoments()

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "score_moments": self.score_moments.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.score_moments.load_state_dict(state["score_moments"])

    # ------------------------------------------------------------------ the update
    def prepare(self, rollout: Rollout, critic: Rollout | None = None) -> dict[str, Any]:
        """Scores, old logprobs/values, reference logprobs, shaped rewards, advantages and returns (no grad); `critic`:
        the value head's input (`PolicyLearner.step`), None = the rollout's own prompt.

        Returns:
            dict with float32 tensors: scores (B,), logprobs, ref_logprobs, values, kl, rewards, non_score_reward,
            advantages, returns (all (B, T), zero on padding); ``"critic"``: `critic` (the mini-batches read it).
        """
        cfg = self.config
        mask = rollout.response_mask
        scores = scale_scores(rollout.scores.float(), self.score_moments, use_score_scaling=cfg.use_score_scaling,
                              use_score_norm=cfg.use_score_norm, score_clip=cfg.score_clip, reduce_sum=self._reduce_sum)
        full = cfg.kl_penalty == "full"
        old, ref = score_rollout(self.agent, self.ref_model, rollout, return_logits=full, need_values=critic is None)
        values = old.values if critic is None else critic_values(self.agent, critic)
        rewards, non_score_reward, kl = ppo_math.compute_rewards(
            scores, old.logprobs, ref.logprobs, mask, self.kl_coef, cfg.kl_penalty,
            logits=old.logits if full else None, ref_logits=ref.logits if full else None,
        )
        advantages, returns = ppo_math.gae_advantages(rewards, values, mask, cfg.gamma, cfg.lam,
                                                      whiten_rewards=cfg.whiten_rewards, reduce_sum=self._reduce_sum)
        return {"scores": scores, "logprobs": old.logprobs, "ref_logprobs": ref.logprobs, "values": values * mask,
                "kl": kl, "rewards": rewards, "non_score_reward": non_score_reward,
                "advantages": advantages, "returns": returns, "critic": critic}

    def _stop_after_epoch(self):
        """PPO's early stopping: after an epoch whose last mini-batch's policy KL (over every process) exceeds
        1.5 · `target_kl` (TRL)."""
        cfg = self.config
        return (lambda last: self._global_policy_kl(last) > 1.5 * cfg.target_kl) if cfg.early_stopping else None

    def _update_stats(self, rollout, data, stats, epochs, stopped) -> dict[str, float]:
        mask = rollout.response_mask
        skipped = sum(int(mb.pop("skipped")) for mb in stats)  # the ratio guard's skips, counted not averaged
        return {"non_score_reward": float((data["non_score_reward"] * mask).sum(dim=-1).mean()),
                "response_len": float(mask.sum(dim=-1).float().mean()), "skipped_batches": float(skipped),
                "epochs": float(epochs), "early_stopped": float(stopped)}

    def _global_policy_kl(self, stats: dict[str, float]) -> float:
        return self.dist.mean_stats({"policy_kl": stats["policy_kl"]})["policy_kl"]

    def _minibatch_loss(self, rollout: Rollout, data: dict[str, torch.Tensor], idx: torch.Tensor):
        mb = rollout.select(idx)
        width = mb.response.shape[1]
        new = self.agent.evaluate(mb.query, mb.query_mask, mb.response, mb.response_mask, allowed=mb.allowed,
                                  temperature=mb.temperature)
        values = new.values
        if data["critic"] is not None:  # a centralized critic: the value head reads the joint transcript
            cmb = data["critic"].select(idx)
            values = self.agent.evaluate(cmb.query, cmb.query_mask, cmb.response, cmb.response_mask,
                                         allowed=cmb.allowed, temperature=cmb.temperature).values
        loss, stats = ppo_math.ppo_loss(logprobs=new.logprobs, old_logprobs=data["logprobs"][idx, :width],
                                        values=values, old_values=data["values"][idx, :width],
                                        advantages=data["advantages"][idx, :width],
                                        returns=data["returns"][idx, :width], mask=mb.response_mask,
                                        entropy=new.entropy, ent_coef=self.config.ent_coef,
                                        cliprange=self.config.cliprange, cliprange_value=self.config.cliprange_value,
                                        vf_coef=self.config.vf_coef, ratio_threshold=self.config.ratio_threshold,
                                        reduce_sum=self._reduce_sum)
        return pooled_minibatch_loss(
            self.dist, loss, stats, mb.response_mask, algo="PPO", terms=("policy_loss", "value_loss"),
            fix="lower learning_rate or enable max_grad_norm / score_clip; the last checkpoint is intact")


SPEC = LearnerSpec(PPOLearner, config_class=PPOConfig, supports_sharding=True,
                   summary="per seat: TRL 0.11 PPO with a value head (the paper's learner; IPPO under CORY)")
"""``--learner ppo`` (`trainers.learning.registry.LEARNERS`)."""
