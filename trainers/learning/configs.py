"""The learners' own configs: `PPOConfig` (the update every learner shares, and PPO's value head, GAE and score
scaling) and `GRPOConfig` (the group-relative learners' options: samples per query, normalisation, where the KL goes).

Each registered learner declares which of them it reads (`trainers.learning.learners.LearnerSpec.config_class`) and
which `PPOConfig` fields it ignores, so that `cory train` can warn about an option that does nothing and show only
the flags the chosen learner reads. A field whose effect depends on another declares it beside the fields
(``_unread_when``: ``field -> (configs, seating) -> reason or None``, checked when the field differs from its
default; ``_unread_always``: checked at any value); `trainers.unread_options` reads them. Field names are unique across
every config class of a run (`trainers.config.RunConfigs`): a run's settings stay one flat ``{field: value}`` dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cory_env.checks import MAX_MAGNITUDE
from cory_env.config import check_finite_fields
from trainers.learning.kl_control import PROPORTIONAL_ERROR_CLIP
from trainers.learning.ppo_math import KL_PENALTY_KINDS

__all__ = ["GRPOConfig", "PPOConfig", "TOKEN_MEAN_OVER", "check_field", "check_kl_horizon"]

TOKEN_MEAN_OVER = ("optimizer_step", "mini_batch")
"""`PPOConfig.token_mean_over` values (`trainers.learning.update.step_loss_weights`)."""


def check_field(cond: bool, name: str, value, fix: str) -> None:
    """Raise ``ValueError("{name}={value!r} is invalid: {fix}")`` unless `cond` (the configs' one field check)."""
    if not cond:
        raise ValueError(f"{name}={value!r} is invalid: {fix}")


def check_kl_horizon(config: "PPOConfig", num_processes: int = 1) -> None:
    """Refuse an adaptive KL controller whose one step can move β by 100 % or more: β ← β · (1 + e · n_steps /
    horizon) with e down to −0.2 turns β negative when 0.2 · n_steps ≥ horizon (n_steps = batch_size · processes).

    Raises:
        ValueError: naming horizon, batch_size, the processes and the smallest horizon that works.
    """
    if config.adap_kl_ctrl and config.kl_step_bound(num_processes) >= 1:
        n_steps = config.batch_size * num_processes
        per = f" x {num_processes} processes" if num_processes > 1 else ""
        raise ValueError(
            f"horizon={config.horizon!r} is invalid with batch_size={config.batch_size}{per}: the adaptive KL "
            f"controller changes beta by up to 0.2 * {n_steps} / horizon = {config.kl_step_bound(num_processes):.0%} "
            f"per step, so beta could turn negative; use horizon > {PROPORTIONAL_ERROR_CLIP * n_steps:g} (TRL "
            "default 10000), or adap_kl_ctrl=False")


@dataclass
class PPOConfig:
    """The update every learner shares (learning rate, batch sizes, epochs, clipping, the KL controller) and PPO's
    own fields (value head, GAE, score scaling, early stopping, the ratio guard); TRL names, defaults = TRL 0.11.4
    `PPOConfig` unless noted. Which fields a learner ignores is its `LearnerSpec.ignores`
    (`trainers.learning.learners`)."""

    _argument_group_name = "update options (PPOConfig; every learner; value-head, GAE and score options: ppo and mappo)"
    #: When a field does nothing, declared beside it (read by `trainers.unread_options`): field -> rule
    #: ``(configs, seating) -> reason or None``; `_unread_when` rules are checked when the field differs from
    #: its default, `_unread_always` rules at any value.
    _unread_when = {
        **dict.fromkeys(("target", "horizon"), lambda c, seating: (
            None if c.ppo.adap_kl_ctrl else "with adap_kl_ctrl=False (β stays init_kl_coef)")),
        "target_kl": lambda c, seating: None if c.ppo.early_stopping else "without early_stopping=True",
        "use_score_norm": lambda c, seating: (None if c.ppo.use_score_scaling
                                              else "without use_score_scaling=True (as in TRL)"),
    }
    _unread_always = {
        "adap_kl_ctrl": lambda c, seating: (
            "with init_kl_coef=0: the adaptive controller scales β multiplicatively, so it stays 0 (target and "
            "horizon do nothing); set init_kl_coef > 0 or adap_kl_ctrl=False"
            if c.ppo.adap_kl_ctrl and c.ppo.init_kl_coef == 0 else None),
    }

    learning_rate: float = field(default=1.41e-5, metadata={"help": "Adam learning rate (TRL default 1.41e-5; paper IMDB 1.41e-5)."})
    batch_size: int = field(default=16, metadata={"help": "Queries per iteration B (paper IMDB: 256; TRL default 128). Must be divisible by mini_batch_size * gradient_accumulation_steps."})
    mini_batch_size: int = field(default=16, metadata={"help": "Samples per optimiser mini-batch (paper IMDB: 256)."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Mini-batches accumulated per optimiser step (TRL default 1)."})
    token_mean_over: str = field(default="optimizer_step", metadata={"help": "What a loss's token mean is taken over: optimizer_step (every response token of the optimiser step, so gradient accumulation and data-parallel splits give the gradient of the undivided batch) or mini_batch (each accumulated mini-batch its own token mean, averaged: TRL 0.11)."})
    ppo_epochs: int = field(default=4, metadata={"help": "Passes over the rollout per update (TRL default 4; paper IMDB 4)."})
    init_kl_coef: float = field(default=0.2, metadata={"help": "Initial KL penalty coefficient beta (TRL default 0.2; paper CORY IMDB 0.4)."})
    adap_kl_ctrl: bool = field(default=True, metadata={"help": "Use the adaptive KL controller (Ziegler et al. 2019, TRL AdaptiveKLController); False = fixed beta."})
    target: float = field(default=6.0, metadata={"help": "Adaptive KL controller target KL in nats per sequence (TRL default 6)."})
    horizon: float = field(default=10000.0, metadata={"help": "Adaptive KL controller horizon in samples (TRL default 10000)."})
    kl_penalty: str = field(default="kl", metadata={"help": "Per-token KL estimator: kl (k1 = logp - ref_logp), abs, mse, full (full-vocabulary KL; paper), k3. TRL default 'kl'."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor for GAE, in [0, 1] (TRL default 1)."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda, in [0, 1] (TRL default 0.95)."})
    cliprange: float = field(default=0.2, metadata={"help": "PPO policy ratio clip epsilon (TRL default 0.2)."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Value clip range around the old values (TRL default 0.2)."})
    vf_coef: float = field(default=0.1, metadata={"help": "Value loss coefficient (TRL default 0.1)."})
    ent_coef: float = field(default=0.0, metadata={"help": "Entropy bonus: the loss subtracts ent_coef * mean per-token policy entropy (nats), against early collapse (TRL: none, 0; CleanRL PPO: 0.01)."})
    max_grad_norm: Optional[float] = field(default=None, metadata={"help": "Clip the gradient norm to this value; None = no clipping (TRL default; paper: none)."})
    early_stopping: bool = field(default=False, metadata={"help": "Stop the PPO epochs early once approx_kl > 1.5 * target_kl (TRL)."})
    target_kl: float = field(default=1.0, metadata={"help": "approx_kl threshold for early_stopping (TRL default 1)."})
    ratio_threshold: float = field(default=10.0, metadata={"help": "Skip a mini-batch whose mean policy ratio exceeds this (TRL default 10); skipped ones are counted in ppo/skipped_batches."})
    use_score_scaling: bool = field(default=False, metadata={"help": "Divide scores by their running std (TRL). Paper CORY IMDB: on."})
    use_score_norm: bool = field(default=False, metadata={"help": "With use_score_scaling, also subtract the running mean (TRL). Paper CORY IMDB: on."})
    score_clip: Optional[float] = field(default=None, metadata={"help": "Clip (scaled) scores to [-score_clip, score_clip]; None = off (TRL default)."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whiten the shaped per-token rewards before GAE (TRL default False)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        for name in ("batch_size", "mini_batch_size", "gradient_accumulation_steps", "ppo_epochs"):
            check_field(getattr(self, name) >= 1, name, getattr(self, name), "use a positive integer")
        if self.batch_size < 2:
            raise ValueError(
                f"batch_size={self.batch_size} is too small: the learners whiten the advantages (PPO) and the scores "
                "(score scaling) with the unbiased variance over the batch, which needs at least 2 tokens or scores, "
                "and a batch of one 1-token response has one; use batch_size >= 2"
            )
        backward = self.mini_batch_size * self.gradient_accumulation_steps
        if self.batch_size % backward:
            raise ValueError(
                f"batch_size={self.batch_size} is not divisible by mini_batch_size={self.mini_batch_size} * "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} = {backward}; "
                "choose batch_size as a multiple of their product"
            )
        check_field(self.token_mean_over in TOKEN_MEAN_OVER, "token_mean_over", self.token_mean_over,
               f"use one of {TOKEN_MEAN_OVER}")
        check_field(self.kl_penalty in KL_PENALTY_KINDS, "kl_penalty", self.kl_penalty, f"use one of {KL_PENALTY_KINDS}")
        check_field(self.learning_rate > 0, "learning_rate", self.learning_rate, "use a positive learning rate")
        for name in ("init_kl_coef", "vf_coef", "ent_coef", "cliprange_value"):
            check_field(getattr(self, name) >= 0, name, getattr(self, name), "use a value >= 0")
        for name in ("init_kl_coef", "vf_coef", "ent_coef"):  # loss weights: 1e300 overflowed the loss to inf
            check_field(getattr(self, name) <= MAX_MAGNITUDE, name, getattr(self, name),
                        f"use a value <= {MAX_MAGNITUDE:g} (a larger weight overflows the loss to inf)")
        check_field(self.cliprange > 0, "cliprange", self.cliprange,
               "use a value > 0 (0 clips every ratio to 1: the policy gradient would vanish after the first step)")
        for name in ("target", "horizon", "target_kl", "ratio_threshold"):
            check_field(getattr(self, name) > 0, name, getattr(self, name), "use a value > 0")
        for name in ("gamma", "lam"):
            check_field(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "use a value in [0, 1]")
        for name in ("max_grad_norm", "score_clip"):
            value = getattr(self, name)
            check_field(value is None or value > 0, name, value, "use a positive value, or None to disable")
        check_kl_horizon(self)

    def kl_step_bound(self, num_processes: int = 1) -> float:
        """The largest relative change of β in one adaptive step: 0.2 · n_steps / horizon, with n_steps =
        batch_size · processes (`trainers.learning.kl_control.AdaptiveKLController`)."""
        return PROPORTIONAL_ERROR_CLIP * self.batch_size * num_processes / self.horizon

    @property
    def backward_batch_size(self) -> int:
        """Samples per optimiser step: mini_batch_size * gradient_accumulation_steps."""
        return self.mini_batch_size * self.gradient_accumulation_steps


@dataclass
class GRPOConfig:
    """The group-relative learners' own options (``--learner grpo``, ``--learner magrpo``); the update itself (learning
    rate, batch sizes, epochs, clipping, the KL controller) is `PPOConfig`'s."""

    _argument_group_name = "GRPO options (GRPOConfig; read by learners grpo and magrpo)"  # `cory train --help` group

    group_size: int = field(default=1, metadata={"help": "Samples per query k. The rollout repeats each query k times in consecutive rows (batch_size must be divisible by k); 1 = distinct queries (PPO). GRPO needs k >= 2 (DeepSeekMath: 64)."})
    scale_rewards: bool = field(default=True, metadata={"help": "Divide the group-centred rewards by the group's std (DeepSeekMath outcome supervision); False = only subtract the group mean (Dr. GRPO)."})
    kl_in_loss: bool = field(default=True, metadata={"help": "KL to the reference model as a k3 loss term beta * KL (DeepSeekMath eq. 3) (True), or as a sequence penalty beta * sum_t KL_t (estimator kl_penalty) subtracted from the advantage after the reward's group normalisation, centred on its group (False; beta then prices one nat in advantage units). beta = the KL controller's value (init_kl_coef)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        check_field(self.group_size >= 1, "group_size", self.group_size, "use a positive integer (1 = no grouping)")
