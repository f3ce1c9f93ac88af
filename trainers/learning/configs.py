"""The learners' configs, one class per learner on a shared base (TRL's layout: `trl/trainer/base_config.py` and one
``*Config`` per trainer):

| class | holds | read by |
|---|---|---|
| `UpdateConfig` | what every policy update shares: learning rate, batch sizes, epochs, clip range, the KL controller (β, its estimator), gradient norm, entropy bonus, token averaging | every learner (a plug-in's own config subclasses it) |
| `PPOConfig` | `UpdateConfig` + PPO's value head, GAE, score scaling, early stopping and ratio guard | ``ppo``, ``mappo`` |
| `GRPOConfig` | `UpdateConfig` + samples per query, group normalisation, where the KL goes | ``grpo``, ``magrpo`` |

A learner receives one instance of its class (`trainers.learning.registry.LearnerSpec.config_class`); every
invariant of a class is checked in its ``__post_init__``. A field whose effect depends on another declares it beside
the fields (``_unread_when``: ``field -> (configs, seating) -> reason or None``, checked when the field differs from
its default; ``_unread_always``: checked at any value); `trainers.config.unread` reads them. Field names are unique
across the config classes of a run (`trainers.config.RunConfigs`): a run's settings stay one flat ``{field: value}``
dict, so ``--batch_size`` and a ``config.yaml`` read the same whichever learner runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cory_env.checks import MAX_MAGNITUDE, check_field, check_number
from cory_env.checks import check_finite_fields
from cory_env.checks import check_groups
from trainers.learning.kl_control import PROPORTIONAL_ERROR_CLIP

__all__ = ["GRPOConfig", "PPOConfig", "TOKEN_MEAN_OVER", "UpdateConfig", "check_kl_horizon"]

TOKEN_MEAN_OVER = ("optimizer_step", "mini_batch")
"""`PPOConfig.token_mean_over` values (`trainers.learning.update.step_loss_weights`)."""


def check_loss_weights(config, *names: str) -> None:
    """Each of `names` a loss weight in [0, `MAX_MAGNITUDE`] (1e300 overflowed the loss to inf); `check_number`'s
    message otherwise (β >= 0 reads as in the KL controllers and `compute_rewards`)."""
    for name in names:
        check_number(getattr(config, name), name, low=0)
        check_number(getattr(config, name), name, high=MAX_MAGNITUDE, fix="a larger weight overflows the loss to inf")


def check_kl_horizon(config: "UpdateConfig", num_processes: int = 1) -> None:
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
class UpdateConfig:
    """What every learner's policy update shares (TRL names; defaults = TRL 0.11.4 `PPOConfig` unless noted): the
    learning rate, the batch sizes, the epochs, the clip range, the KL controller and its estimator, the gradient
    norm, the entropy bonus and the token averaging. A learner with no options of its own reads this class; a
    learner with some subclasses it (`PPOConfig`, `GRPOConfig`, a plug-in's)."""

    _argument_group_name = "update options (UpdateConfig; every learner)"  # `cory train --help` group
    #: When a field does nothing, declared beside it (read by `trainers.config.unread`): field -> rule
    #: ``(configs, seating) -> reason or None``; `_unread_when` rules are checked when the field differs from
    #: its default, `_unread_always` rules at any value.
    _unread_when = {
        **dict.fromkeys(("target", "horizon"), lambda c, seating: (
            None if c.update.adap_kl_ctrl else "with adap_kl_ctrl=False (β stays init_kl_coef)")),
    }
    _unread_always = {
        "adap_kl_ctrl": lambda c, seating: (
            "with init_kl_coef=0: the adaptive controller scales β multiplicatively, so it stays 0 (target and "
            "horizon do nothing); set init_kl_coef > 0 or adap_kl_ctrl=False"
            if c.update.adap_kl_ctrl and c.update.init_kl_coef == 0 else None),
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
    cliprange: float = field(default=0.2, metadata={"help": "PPO policy ratio clip epsilon (TRL default 0.2)."})
    ent_coef: float = field(default=0.0, metadata={"help": "Entropy bonus: the loss subtracts ent_coef * mean per-token policy entropy (nats), against early collapse (TRL: none, 0; CleanRL PPO: 0.01)."})
    max_grad_norm: Optional[float] = field(default=None, metadata={"help": "Clip the gradient norm to this value; None = no clipping (TRL default; paper: none)."})

    def __post_init__(self) -> None:
        check_finite_fields(self)
        for name in ("batch_size", "mini_batch_size", "gradient_accumulation_steps", "ppo_epochs"):
            check_field(getattr(self, name) >= 1, name, getattr(self, name), "use a positive integer")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size} is too small: the learners whiten the advantages (PPO) "
                             "and the scores (score scaling) with the unbiased variance over the batch, which needs at "
                             "least 2 tokens or scores, and a batch of one 1-token response has one; use "
                             "batch_size >= 2")
        if self.batch_size % self.backward_batch_size:
            raise ValueError(f"batch_size={self.batch_size} is not divisible by mini_batch_size={self.mini_batch_size} "
                             f"* gradient_accumulation_steps={self.gradient_accumulation_steps} = "
                             f"{self.backward_batch_size}; choose batch_size as a multiple of their product")
        check_field(self.token_mean_over in TOKEN_MEAN_OVER, "token_mean_over", self.token_mean_over,
                    f"use one of {TOKEN_MEAN_OVER}")
        from trainers.learning.ppo_math import KL_PENALTY_KINDS  # here: torch stays out of `cory train --help`
        check_field(self.kl_penalty in KL_PENALTY_KINDS, "kl_penalty", self.kl_penalty,
                    f"use one of {KL_PENALTY_KINDS}")
        check_field(self.learning_rate > 0, "learning_rate", self.learning_rate, "use a positive learning rate")
        check_loss_weights(self, "init_kl_coef", "ent_coef")
        check_field(self.cliprange > 0, "cliprange", self.cliprange,
                    "use a value > 0 (0 clips every ratio to 1: the policy gradient would vanish after the first "
                    "step)")
        for name in ("target", "horizon"):
            check_field(getattr(self, name) > 0, name, getattr(self, name), "use a value > 0")
        check_field(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm,
                    "use a positive value, or None to disable")
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
class PPOConfig(UpdateConfig):
    """`UpdateConfig` + PPO's own options: the value head (GAE, value clipping and loss weight), score scaling,
    reward whitening, early stopping and the ratio guard (``--learner ppo``, ``--learner mappo``)."""

    _argument_group_name = "PPO options (PPOConfig; read by learners ppo and mappo)"  # `cory train --help` group
    _unread_when = {
        **UpdateConfig._unread_when,
        "target_kl": lambda c, seating: None if c.update.early_stopping else "without early_stopping=True",
        "use_score_norm": lambda c, seating: (None if c.update.use_score_scaling
                                              else "without use_score_scaling=True (as in TRL)"),
    }

    gamma: float = field(default=1.0, metadata={"help": "Discount factor for GAE, in [0, 1] (TRL default 1)."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda, in [0, 1] (TRL default 0.95)."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Value clip range around the old values (TRL default 0.2)."})
    vf_coef: float = field(default=0.1, metadata={"help": "Value loss coefficient (TRL default 0.1)."})
    early_stopping: bool = field(default=False, metadata={"help": "Stop the PPO epochs early once approx_kl > 1.5 * target_kl (TRL)."})
    target_kl: float = field(default=1.0, metadata={"help": "approx_kl threshold for early_stopping (TRL default 1)."})
    ratio_threshold: float = field(default=10.0, metadata={"help": "Skip a mini-batch whose mean policy ratio exceeds this (TRL default 10); skipped ones are counted in ppo/skipped_batches."})
    use_score_scaling: bool = field(default=False, metadata={"help": "Divide scores by their running std (TRL). Paper CORY IMDB: on."})
    use_score_norm: bool = field(default=False, metadata={"help": "With use_score_scaling, also subtract the running mean (TRL). Paper CORY IMDB: on."})
    score_clip: Optional[float] = field(default=None, metadata={"help": "Clip (scaled) scores to [-score_clip, score_clip]; None = off (TRL default)."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whiten the shaped per-token rewards before GAE (TRL default False)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_loss_weights(self, "vf_coef")
        check_field(self.cliprange_value >= 0, "cliprange_value", self.cliprange_value, "use a value >= 0")
        for name in ("target_kl", "ratio_threshold"):
            check_field(getattr(self, name) > 0, name, getattr(self, name), "use a value > 0")
        for name in ("gamma", "lam"):
            check_field(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "use a value in [0, 1]")
        check_field(self.score_clip is None or self.score_clip > 0, "score_clip", self.score_clip,
                    "use a positive value, or None to disable")

@dataclass
class GRPOConfig(UpdateConfig):
    """`UpdateConfig` + the group-relative learners' own options (``--learner grpo``, ``--learner magrpo``): samples
    per query, the group normalisation, where the KL goes."""

    _argument_group_name = "GRPO options (GRPOConfig; read by learners grpo and magrpo)"  # `cory train --help` group
    _unread_when = {
        **UpdateConfig._unread_when,
        "kl_penalty": lambda c, seating: (
            "with kl_in_loss=True (the KL is a k3 term in the loss); pass --kl_in_loss false to penalise the "
            "advantage with kl_penalty's estimator" if c.update.kl_in_loss else None),
    }

    group_size: int = field(default=4, metadata={"help": "Samples per query k >= 2. The rollout repeats each query k times in consecutive rows (batch_size must be divisible by k); the group mean is the baseline (DeepSeekMath: 64; TRL num_generations: 8)."})
    scale_rewards: bool = field(default=True, metadata={"help": "Divide the group-centred rewards by the group's std (DeepSeekMath outcome supervision); False = only subtract the group mean (Dr. GRPO)."})
    kl_in_loss: bool = field(default=True, metadata={"help": "KL to the reference model as a k3 loss term beta * KL (DeepSeekMath eq. 3) (True), or as a sequence penalty beta * sum_t KL_t (estimator kl_penalty) subtracted from the advantage after the reward's group normalisation, centred on its group (False; beta then prices one nat in advantage units). beta = the KL controller's value (init_kl_coef)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_field(self.group_size >= 2, "group_size", self.group_size,
                    "GRPO needs at least 2 samples per query (its baseline is the group mean); pass --group_size 4 "
                    "(batch_size must be a multiple of it)")
        check_groups(self.batch_size, self.group_size, fix="the rollout plays each query group_size times in "
                                                           "consecutive rows; choose batch_size as a multiple of it")
        check_field(self.kl_in_loss or self.kl_penalty != "full", "kl_penalty", self.kl_penalty,
                    "GRPO's advantage penalty (kl_in_loss=False) takes a per-token estimate: use kl, abs, mse or k3")
