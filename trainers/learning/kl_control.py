"""KL controllers: the coefficient β of the per-token KL penalty to the reference model.

Each PPO learner (pioneer and observer seat each have one) owns a controller. After every PPO step the learner
calls `update(current_kl, n_steps)` with the batch mean of the sequence KL (token sum, nats, of the estimator that
shapes the reward: `PPOConfig.kl_penalty`, as TRL 0.11.4) and the number of samples in the step; `value` is the β used by `ppo_math.compute_rewards` at the next rollout.

>>> ctl = make_kl_controller(adap_kl_ctrl=True, init_kl_coef=0.4, target=6.0, horizon=10000)
>>> ctl.update(current_kl=12.0, n_steps=256)   # KL far above target: β grows by 0.2 * 256 / 10000
>>> round(ctl.value, 6)
0.402048
"""

from __future__ import annotations

from typing import Protocol, Union, runtime_checkable

from cory_env.checks import check_number

__all__ = ["AdaptiveKLController", "FixedKLController", "KLController", "make_kl_controller"]

PROPORTIONAL_ERROR_CLIP = 0.2
"""Bound on |KL/target − 1| in the adaptive update (Ziegler et al. 2019; TRL)."""


@runtime_checkable
class KLController(Protocol):
    """What a learner needs from a KL controller."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt `value` after a PPO step."""

    def state_dict(self) -> dict[str, float]:
        """The state as plain floats."""

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore a state from `state_dict`."""


class AdaptiveKLController:
    """Proportional controller that steers the sequence KL towards `target`.

    e = clip(current_kl / target − 1, −0.2, 0.2);  β ← β · (1 + e · n_steps / horizon).

    Args:
        init_kl_coef: initial β ≥ 0 (`PPOConfig.init_kl_coef`).
        target: target sequence KL in nats, > 0 (`PPOConfig.target`).
        horizon: samples over which the error is corrected, > 0 (`PPOConfig.horizon`).

    Raises:
        ValueError: on a β that is not a number >= 0 or a target / horizon that is not a number > 0
            (`cory_env.checks.check_number`).

    Source:
        Ziegler et al., "Fine-Tuning Language Models from Human Preferences", arXiv:1909.08593 (sec. 2.2);
        TRL 0.11.4 `trl.trainer.utils.AdaptiveKLController`.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float) -> None:
        self.value = check_number(init_kl_coef, "init_kl_coef", low=0)
        self.target = check_number(target, "target", above=0)
        self.horizon = check_number(horizon, "horizon", above=0)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move β one step towards the target.

        Args:
            current_kl: batch mean of the per-sequence KL to the reference model, nats (float, 0-dim tensor or
                NumPy scalar).
            n_steps: samples in the PPO step (TRL: batch_size × processes), ≥ 0.

        Raises:
            ValueError: if `current_kl` is not a finite number or `n_steps` is negative.
        """
        kl = check_number(float(current_kl), "current_kl", fix="check the rollout's KL")
        check_number(n_steps, "n_steps", low=0, fix="pass the number of samples in the step")
        error = min(max(kl / self.target - 1.0, -PROPORTIONAL_ERROR_CLIP), PROPORTIONAL_ERROR_CLIP)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        """{"value", "target", "horizon"} as plain floats."""
        return {"value": float(self.value), "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore a state from `state_dict`.

        Raises:
            ValueError: if the keys are not exactly those of `state_dict`.
        """
        _check_keys(self, state)
        self.value, self.target, self.horizon = (float(state[key]) for key in ("value", "target", "horizon"))

    def __repr__(self) -> str:
        return f"AdaptiveKLController(value={self.value:g}, target={self.target:g}, horizon={self.horizon:g})"


class FixedKLController:
    """Constant β = `kl_coef` ≥ 0 (`PPOConfig.init_kl_coef` with `adap_kl_ctrl=False`).

    Raises:
        ValueError: on a β that is not a number >= 0 (`cory_env.checks.check_number`).

    Source:
        TRL 0.11.4 `trl.trainer.utils.FixedKLController`.
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = check_number(kl_coef, "kl_coef", low=0)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Do nothing (β is fixed); same signature as `AdaptiveKLController.update`."""

    def state_dict(self) -> dict[str, float]:
        """{"value"} as a plain float."""
        return {"value": float(self.value)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """As `AdaptiveKLController.load_state_dict`."""
        _check_keys(self, state)
        self.value = float(state["value"])

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value:g})"


def _check_keys(ctl: Union[AdaptiveKLController, FixedKLController], state: dict[str, float]) -> None:
    expected = set(ctl.state_dict())
    if set(state) != expected:
        raise ValueError(f"{type(ctl).__name__} state keys {sorted(state)} != {sorted(expected)}; load a state saved "
                         "by the same controller kind (check adap_kl_ctrl)")


def make_kl_controller(adap_kl_ctrl: bool, init_kl_coef: float, target: float = 6.0,
                       horizon: float = 10000.0) -> Union[AdaptiveKLController, FixedKLController]:
    """Build the KL controller named by the PPO config.

    Args:
        adap_kl_ctrl: True for `AdaptiveKLController`, False for `FixedKLController` (`PPOConfig.adap_kl_ctrl`).
        init_kl_coef: initial β (`PPOConfig.init_kl_coef`).
        target: adaptive target KL, nats (`PPOConfig.target`, default 6); ignored when fixed.
        horizon: adaptive horizon, samples (`PPOConfig.horizon`, default 10000); ignored when fixed.

    Raises:
        ValueError: see the controllers.

    Source:
        TRL 0.11.4 `PPOTrainer.__init__` (kl_ctl selection).
    """
    if adap_kl_ctrl:
        return AdaptiveKLController(init_kl_coef, target, horizon)
    return FixedKLController(init_kl_coef)
