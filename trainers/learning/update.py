"""The update loop every learner shares: Adam, mini-batch order, gradient accumulation and clipping, data-parallel
pooling, the batch-mean sequence KL and the checks around them.

`PPOLearner` (`trainers.learning.ppo`) and `GRPOLearner` (`trainers.learning.grpo`) differ only in what they compute
per mini-batch (their loss) and before it (advantages): `PolicyLearner.step` is the step both take (its class
docstring lists it in order). A custom learner can reuse any of these (docs/extending.md).
"""

from __future__ import annotations

import contextvars
import logging
import math
from typing import Any, Sequence

import torch

from trainers.learning.configs import TOKEN_MEAN_OVER, UpdateConfig
from trainers.learning.kl_control import make_kl_controller
from trainers.learning.ppo_math import masked_delta
from trainers.distributed import DataParallel
from trainers.learning.experience import Rollout

logger = logging.getLogger(__name__)

__all__ = ["NonFiniteLossError", "PolicyLearner", "backward_batches", "checked_rollout", "checked_trainable_parameters",
           "first_nonfinite", "global_sequence_kl", "gradients_checked", "make_adam", "mean_over_minibatches",
           "optimizer_step", "pooled_minibatch_loss", "run_epochs", "step_loss_weights"]

_FUSED_ADAM_DEVICES = ("cpu", "cuda")
_FUSED_ADAM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: True while `optimizer_step` steps an optimizer after checking its gradients (`gradients_checked`).
_GRADIENTS_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("gradients_checked", default=False)


def make_adam(params: list[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with torch's defaults (betas (0.9, 0.999), eps 1e-8, no weight decay), as TRL's `PPOTrainer` builds it.

    Uses the fused kernel when every parameter is a float tensor on CPU or CUDA: the same update rule, equal to the
    default for-loop implementation up to float32 round-off (~1e-7), about 4-5x faster per step on CPU
    (benchmarks/README.md); else the default implementation.
    """
    fused = all(p.device.type in _FUSED_ADAM_DEVICES and p.dtype in _FUSED_ADAM_DTYPES for p in params)
    if fused:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except RuntimeError as err:  # a torch build without the fused kernel for this device
            logger.debug("fused Adam unavailable (%s); using the default implementation", err)
    return torch.optim.Adam(params, lr=lr)


class NonFiniteLossError(FloatingPointError):
    """A loss, gradient or weight became NaN/inf; training stops before the weights or a checkpoint take it, so the
    last good checkpoint is kept."""


def first_nonfinite(tensors: Sequence[torch.Tensor]) -> int | None:
    """The index of the first tensor holding a NaN or ±inf, or None when every one is finite.

    One fused pass (the 2-norm of each tensor, in float32, then one host sync), as long as one `clip_grad_norm_`;
    only when a norm is not finite are the tensors read one by one, so that a norm overflowing on huge but finite
    values is not taken for a NaN. An FSDP2 ``DTensor`` is read as this process's shard (the caller combines
    processes). `tensors`: float tensors of any shapes, on one device.
    """
    local = [t.detach().to_local() if hasattr(t, "to_local") else t.detach() for t in tensors]
    if not local:
        return None
    norms = torch._foreach_norm(local, 2, dtype=torch.float32)
    if bool(torch.stack(norms).isfinite().all()):
        return None
    return next((i for i, t in enumerate(local) if not bool(torch.isfinite(t).all())), None)


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
        raise ValueError(f"the reference model shares {len(shared)} trainable parameter tensors with the policy; the "
                         "reference must be a frozen copy (agents.copy_for_agents) or the LoRA base with adapters off")
    if not params:
        raise ValueError("the agent has no trainable parameter; check use_lora / requires_grad settings")
    return params


def backward_batches(config: UpdateConfig, generator: torch.Generator | None):
    """One epoch of shuffled indices: yields, per optimiser step, the list of its mini-batch index tensors.

    Each optimiser step covers `mini_batch_size * gradient_accumulation_steps` rows of the `batch_size` (TRL 0.11's
    backward batches).
    """
    order = torch.randperm(config.batch_size, generator=generator)
    for b_start in range(0, config.batch_size, config.backward_batch_size):
        backward_idx = order[b_start:b_start + config.backward_batch_size]
        yield [backward_idx[m:m + config.mini_batch_size]
               for m in range(0, config.backward_batch_size, config.mini_batch_size)]


def checked_rollout(rollout: Rollout, config: UpdateConfig, device: torch.device) -> Rollout:
    """`rollout` on the learner's `device`, refused unless it has exactly `config.batch_size` rows.

    Raises:
        ValueError: another number of rows (both numbers named).
    """
    if rollout.batch_size != config.batch_size:
        raise ValueError(f"rollout has {rollout.batch_size} rows but batch_size={config.batch_size}; "
                         "roll out exactly batch_size episodes per update")
    return rollout.to(device)


def optimizer_step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
                   max_grad_norm: float | None, dist: DataParallel | None = None) -> None:
    """Average gradients over data-parallel processes (`dist`), optional gradient-norm clipping, then one optimiser
    step and zeroed gradients.

    The gradient norm is checked whatever `max_grad_norm` is: with it, the norm `clip_grad_norm_` clips by; without,
    the same norm computed and nothing changed (the step's numbers are those of an unchecked step).

    Raises:
        NonFiniteLossError: if the gradient norm is NaN/inf, with or without `max_grad_norm` (the weights and the
            optimizer state are left untouched).
    """
    if dist is not None:
        dist.sync_gradients(params)
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm) if max_grad_norm is not None else _grad_norm(params)
    if not math.isfinite(float(norm)):
        raise NonFiniteLossError("gradient norm is not finite; the last checkpoint is intact")
    token = _GRADIENTS_CHECKED.set(True)
    try:
        optimizer.step()
    finally:
        _GRADIENTS_CHECKED.reset(token)
    optimizer.zero_grad(set_to_none=True)


def gradients_checked() -> bool:
    """True while `optimizer_step` steps an optimizer whose gradient norm it has just found finite (a check made
    before every step, such as the trainer's `trainers.loop.guards`, need not read the gradients again)."""
    return _GRADIENTS_CHECKED.get()


def _grad_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The 2-norm of every gradient of `params` together, as `clip_grad_norm_` computes it, with no clipping."""
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if get_total_norm is None:
        return torch.nn.utils.clip_grad_norm_(params, math.inf)  # scales by exactly 1.0
    return get_total_norm([p.grad for p in params if p.grad is not None])


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
    zero = torch.zeros((), dtype=kl.dtype, device=kl.device)
    rows = torch.stack([torch.where(mask, kl, zero).sum(dim=-1),
                        masked_delta(logprobs, ref_logprobs, mask).sum(dim=-1)])  # (2, B)
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
    """A learner's mini-batch loss, checked, and its statistics pooled over data-parallel processes.

    One all-reduce (`DataParallel.pool_token_means`) gives the statistics as token means over every process's
    tokens. A non-finite loss on any process raises on every process, so none is left waiting in a collective. The
    loss itself is returned as it is (this process's token mean).

    Args:
        loss: float (), this process's differentiable mini-batch loss (a token mean over `mask`).
        stats: python floats from the loss function.
        mask: bool (b, T), the mini-batch's response tokens.
        algo: name in the error message ("PPO", "GRPO"); terms: keys of `stats` the message shows; fix: its advice.

    Returns:
        (loss, pooled stats).

    Raises:
        NonFiniteLossError: the loss is NaN/inf on this or another process.
    """
    local = {key: stats[key] for key in terms}
    pooled, _ = dist.pool_token_means({**stats, "nonfinite": float(not torch.isfinite(loss))}, mask)
    if pooled.pop("nonfinite") > 0:
        detail = ", ".join(f"{key}={value}" for key, value in local.items())
        raise NonFiniteLossError(f"{algo} loss is not finite (this process: loss {float(loss.detach())}, {detail}); "
                                 f"{fix}")
    return loss, pooled


def step_loss_weights(row_tokens: torch.Tensor, minibatches: list[torch.Tensor], *, over: str = "optimizer_step",
                      dist: DataParallel | None = None) -> list[float]:
    """The factor each mini-batch's token-mean loss is multiplied by before ``backward`` in one optimiser step.

    With n_m this process's tokens in mini-batch m, W processes, N_m = Σ_processes n_m and N = Σ_m N_m the tokens of
    the whole optimiser step over every process:

    * ``over="optimizer_step"`` (default): w_m = n_m · W / N. The averaged gradient of Σ_m w_m · mean_m(l) is then
      the gradient of Σ_tokens l / N, the token mean over the whole step, whatever the split into mini-batches
      (gradient accumulation) and processes: accumulation is a larger mini-batch.
    * ``over="mini_batch"`` (TRL 0.11.4): w_m = (n_m · W / N_m) / A for A accumulated mini-batches: each mini-batch
      takes its own token mean and the step averages them, so a short mini-batch's tokens weigh more (the
      transformers#34191 kind of mismatch).

    Args:
        row_tokens: float or int (B,), the tokens each row of the rollout contributes (its response length).
        minibatches: the int64 index tensors of the step's mini-batches (`backward_batches`).
        over: one of `TOKEN_MEAN_OVER`.
        dist: the data-parallel group (one all-reduce of the per-mini-batch counts); None = one process.

    Returns:
        One float per mini-batch (they sum to W over the step with "optimizer_step", with one process to 1).

    Raises:
        ValueError: an unknown `over`, or a step without any token.
    """
    if over not in TOKEN_MEAN_OVER:
        raise ValueError(f"token_mean_over must be one of {TOKEN_MEAN_OVER}, got {over!r}")
    local = torch.stack([row_tokens[idx].sum() for idx in minibatches]).to(torch.float64)  # (A,)
    world = 1 if dist is None else dist.world_size
    totals = local if dist is None else dist.sum(local)
    if not float(totals.sum()) > 0:
        raise ValueError("an optimiser step holds no response token; every response needs at least one token")
    if over == "optimizer_step":
        weights = local * world / totals.sum()
    else:
        weights = local * world / totals.clamp(min=1.0) / len(minibatches)
    return weights.tolist()


def run_epochs(config: UpdateConfig, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
               dist: DataParallel | None, generator: torch.Generator | None, minibatch_loss, *,
               row_tokens: torch.Tensor | None = None, stop_after_epoch=None) -> tuple[list[dict[str, float]], int, bool]:
    """`config.ppo_epochs` passes over the rollout: shuffled mini-batches (`backward_batches`), their losses
    weighted by `step_loss_weights` (`config.token_mean_over`) and accumulated over
    `config.gradient_accumulation_steps`, one `optimizer_step` per backward batch.

    Args:
        config: `UpdateConfig` (ppo_epochs, batch sizes, gradient accumulation, max_grad_norm, token_mean_over).
        optimizer, params: the learner's optimizer and the parameters it updates.
        dist: the data-parallel group (gradients averaged before each step), or None.
        generator: the mini-batch order's generator (seeded by the trainer).
        minibatch_loss: ``minibatch_loss(idx) -> (loss, stats)`` for the rows `idx` (int64 (b,)): a differentiable float
            () loss, this process's token mean over those rows (`pooled_minibatch_loss`), and python-float statistics.
        row_tokens: float or int (B,), tokens per row of the rollout (the response lengths); None counts one
            token per row (a per-row mean loss).
        stop_after_epoch: ``stop_after_epoch(last_stats) -> bool``, asked after each epoch with the statistics of
            its last mini-batch (PPO's early stopping); None never stops early.

    Returns:
        (every mini-batch's statistics in order, epochs run, whether `stop_after_epoch` stopped the update).

    Raises:
        NonFiniteLossError: from `optimizer_step` (a non-finite gradient norm, whatever `max_grad_norm`) or the
            loss function.
    """
    stats: list[dict[str, float]] = []
    epochs = 0
    if row_tokens is None:
        row_tokens = torch.ones(config.batch_size)
    optimizer.zero_grad(set_to_none=True)
    for _ in range(config.ppo_epochs):
        for minibatches in backward_batches(config, generator):
            weights = step_loss_weights(row_tokens, minibatches, over=config.token_mean_over, dist=dist)
            for idx, weight in zip(minibatches, weights):
                loss, mb_stats = minibatch_loss(idx)
                (loss * weight).backward()
                stats.append(mb_stats)
            optimizer_step(optimizer, params, config.max_grad_norm, dist)
        epochs += 1
        if stop_after_epoch is not None and stop_after_epoch(stats[-1]):
            return stats, epochs, True
    return stats, epochs, False


class PolicyLearner:
    """The step both built-in learners take, around what differs between them (a template method).

    A subclass implements `prepare` (no-grad scores of the rollout: old and reference log-probabilities, the
    per-token KL it penalises, advantages, ...) and `_minibatch_loss` (its loss on some rows), and may add
    `_stop_after_epoch` and `_update_stats`. `step` then runs the same sequence for every learner:

    1. `checked_rollout` (the seat's `Rollout` on the learner's device, exactly `batch_size` rows); `prepare`;
       β = the KL controller's value;
    2. `run_epochs` over `_minibatch_loss` (through `pooled_minibatch_loss`) in train mode (eval mode again after);
    3. the KL controller's update with the batch-mean sequence KL (`global_sequence_kl` of ``prepare``'s ``kl``,
       n_steps = the global batch size);
    4. statistics: the mini-batch means, then task_reward, score, kl, kl_k1, kl_coef (β of this step), then the
       learner's own (`_update_stats`), averaged over processes.

    It owns what travels with a model at role exchange: the Adam state and the KL controller (`state_dict`,
    `load_state_dict`, `reset_state`). Not required by the `Learner` protocol (`trainers.learning.registry`): a
    custom learner may start from it or from nothing.

    Args:
        agent: an `agents.LLMAgent` with `evaluate(...)` and `trainable_parameters()`.
        ref_model: the shared frozen `agents.ReferenceModel` (never optimised).
        config: the learner's `UpdateConfig` (sizes count this process's rows).
        dist: the data-parallel group (`trainers.distributed.DataParallel`); default single process.

    Raises:
        ValueError: a reference model that shares a trainable parameter with the agent.
    """

    name = "policy"

    def __init__(self, agent, ref_model, config: UpdateConfig, *, dist: DataParallel | None = None) -> None:
        self.agent, self.ref_model, self.config = agent, ref_model, config
        self.dist = DataParallel() if dist is None else dist
        self._reduce_sum = self.dist.sum if self.dist.enabled else None
        self._params = checked_trainable_parameters(agent, ref_model)
        self.reset_state()

    # ------------------------------------------------------------------ state that travels with the model
    def reset_state(self) -> None:
        """Fresh Adam state and KL controller (what the official code's disk swap does)."""
        cfg = self.config
        self.optimizer = make_adam(self._params, cfg.learning_rate)
        self.kl_ctl = make_kl_controller(cfg.adap_kl_ctrl, cfg.init_kl_coef, cfg.target, cfg.horizon)

    @property
    def kl_coef(self) -> float:
        """β the next `step` penalises with: the KL controller's value (`Learner.kl_coef`)."""
        return float(self.kl_ctl.value)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "kl_ctl": self.kl_ctl.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])

    # ------------------------------------------------------------------ what a learner defines
    def prepare(self, rollout: Rollout, critic: Rollout | None = None) -> dict[str, Any]:
        """No-grad tensors of the rollout; must hold ``logprobs``, ``ref_logprobs`` and ``kl`` (B, T). `critic`: the
        value head's input when it differs from the policy's (`step`); a learner without a critic refuses it."""
        raise NotImplementedError

    def _minibatch_loss(self, rollout: Rollout, data: dict[str, torch.Tensor],
                        idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """(loss, stats) on rows `idx`, through `pooled_minibatch_loss`."""
        raise NotImplementedError

    def _stop_after_epoch(self):
        """`run_epochs`' ``stop_after_epoch`` (None: never stop early)."""
        return None

    def _update_stats(self, rollout: Rollout, data: dict[str, torch.Tensor], stats: list[dict[str, float]],
                      epochs: int, stopped: bool) -> dict[str, float]:
        """The learner's own statistics of this step (may pop per-mini-batch counters from `stats`)."""
        return {}

    # ------------------------------------------------------------------ the update
    def step(self, rollout: Rollout, *, generator: torch.Generator | None = None,
             critic: Rollout | None = None) -> dict[str, float]:
        """One update on `rollout` (see the class docstring).

        Args:
            rollout: this seat's experience (B must equal `config.batch_size`).
            generator: torch generator for the mini-batch order (seeded by the trainer).
            critic: the same rows' responses after another prompt, which the value head reads instead of the seat's
                own prompt (a centralized critic's joint transcript, `trainers.learning.mappo`); None = the seat's
                prompt. Only learners with a value head accept it.

        Returns:
            Flat stats (python floats), averaged over processes: the mini-batch loss statistics; task_reward,
            score; kl (sequence KL to the reference: token sum of the penalised estimator, batch mean, nats; the KL
            controller reads it), kl_k1 (the same with the k1 estimate logp − ref_logp), kl_coef (β used this
            step); then the learner's own (see its class docstring).

        Raises:
            ValueError: if the rollout batch size differs from `config.batch_size`.
            NonFiniteLossError: if a loss becomes NaN/inf.
        """
        cfg = self.config
        rollout = checked_rollout(rollout, cfg, self.agent.device)
        mask = rollout.response_mask
        if critic is None:
            data = self.prepare(rollout)
        else:
            critic = checked_rollout(critic, cfg, self.agent.device)
            if not torch.equal(critic.response_mask, mask):
                raise ValueError("the critic's input must hold the rollout's responses (same response_mask); build "
                                 "it with trainers.learning.mappo.joint_critic_inputs")
            data = self.prepare(rollout, critic)
        kl_coef = self.kl_coef
        self.agent.train()
        stats, epochs, stopped = run_epochs(cfg, self.optimizer, self._params, self.dist, generator,
                                            lambda idx: self._minibatch_loss(rollout, data, idx),
                                            row_tokens=mask.sum(dim=-1), stop_after_epoch=self._stop_after_epoch())
        self.agent.eval()
        # TRL objective/kl: the estimator that shapes the reward (or the loss), summed over the response
        seq_kl, seq_k1 = global_sequence_kl(data["kl"], data["logprobs"], data["ref_logprobs"], mask, self.dist)
        self.kl_ctl.update(seq_kl, cfg.batch_size * self.dist.world_size)
        own = self._update_stats(rollout, data, stats, epochs, stopped)
        out = mean_over_minibatches(stats)
        out.update(task_reward=float(rollout.task_reward.mean()), score=float(rollout.scores.mean()), kl=seq_kl,
                   kl_k1=seq_k1, kl_coef=kl_coef, **own)
        return self.dist.mean_stats(out)
