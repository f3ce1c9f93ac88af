"""Tests for `trainers.learning.kl_control`: TRL's adaptive update rule, the fixed controller, state round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainers import trl_reference as trl
from trainers.learning.kl_control import AdaptiveKLController, FixedKLController, KLController, make_kl_controller


def test_adaptive_update_hand_computed():
    ctl = AdaptiveKLController(init_kl_coef=0.4, target=6.0, horizon=10000)
    ctl.update(current_kl=7.2, n_steps=100)  # error 0.2 -> mult 1 + 0.2 * 100 / 10000
    assert ctl.value == pytest.approx(0.4 * 1.002)
    ctl.update(current_kl=3.0, n_steps=1000)  # error -0.5 clipped to -0.2 -> mult 0.98
    assert ctl.value == pytest.approx(0.4 * 1.002 * 0.98)
    ctl.update(current_kl=6.0, n_steps=1000)  # on target: unchanged
    assert ctl.value == pytest.approx(0.4 * 1.002 * 0.98)


def test_adaptive_error_is_clipped_both_ways():
    up = AdaptiveKLController(1.0, target=1.0, horizon=100)
    up.update(1e6, n_steps=10)
    assert up.value == pytest.approx(1.02)
    down = AdaptiveKLController(1.0, target=1.0, horizon=100)
    down.update(-50.0, n_steps=10)  # k1 KL can be negative
    assert down.value == pytest.approx(0.98)


def test_adaptive_accepts_tensor_and_numpy_kl():
    ctl = AdaptiveKLController(0.2, 6.0, 10000)
    ctl.update(torch.tensor(7.0), 16)  # error 1/6 -> mult 1 + (1/6) * 16 / 10000
    assert type(ctl.value) is float and ctl.value == pytest.approx(0.2 * (1 + (1 / 6) * 16 / 10000), rel=1e-12)
    ctl.update(np.float32(5.0), 16)  # error -1/6 -> mult 1 - (1/6) * 16 / 10000
    assert type(ctl.value) is float
    assert ctl.value == pytest.approx(0.2 * (1 + (1 / 6) * 16 / 10000) * (1 - (1 / 6) * 16 / 10000), rel=1e-12)
    same = AdaptiveKLController(0.2, 6.0, 10000)
    same.update(7.0, 16)
    same.update(5.0, 16)
    assert ctl.value == same.value  # a tensor or numpy KL updates exactly as the float does


def test_adaptive_matches_trl_over_a_run():
    rng = np.random.default_rng(0)
    ours, theirs = AdaptiveKLController(0.4, 6.0, 10000), trl.AdaptiveKLController(0.4, 6.0, 10000)
    for kl in rng.uniform(-2.0, 20.0, size=200):
        ours.update(float(kl), 256)
        theirs.update(float(kl), 256)
    assert ours.value == pytest.approx(float(theirs.value), rel=1e-12)
    assert ours.value != pytest.approx(0.4)


def test_fixed_controller_never_moves():
    ctl = FixedKLController(0.1)
    for kl in (0.0, 100.0, -3.0):
        ctl.update(kl, 256)
    assert ctl.value == 0.1


@pytest.mark.parametrize("ctl", [AdaptiveKLController(0.3, 5.0, 2000), FixedKLController(0.05)])
def test_state_dict_round_trip(ctl):
    ctl.update(9.0, 64)
    state = ctl.state_dict()
    assert all(type(v) is float for v in state.values())
    fresh = make_kl_controller(isinstance(ctl, AdaptiveKLController), 1.0, 1.0, 1.0)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    fresh.update(1.0, 64)
    ctl.update(1.0, 64)
    assert fresh.value == ctl.value


def test_load_state_dict_rejects_other_kind():
    with pytest.raises(ValueError, match="adap_kl_ctrl"):
        FixedKLController(0.1).load_state_dict(AdaptiveKLController(0.1, 6.0, 10.0).state_dict())
    with pytest.raises(ValueError, match="state keys"):
        AdaptiveKLController(0.1, 6.0, 10.0).load_state_dict({"value": 0.1})


def test_factory_and_protocol():
    adaptive = make_kl_controller(adap_kl_ctrl=True, init_kl_coef=0.4, target=6.0, horizon=10000)
    fixed = make_kl_controller(adap_kl_ctrl=False, init_kl_coef=0.1, target=6.0, horizon=10000)
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.value == 0.4
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.1
    assert isinstance(adaptive, KLController) and isinstance(fixed, KLController)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(init_kl_coef=-0.1, target=6.0, horizon=10.0), "init_kl_coef"),
        (dict(init_kl_coef=0.1, target=0.0, horizon=10.0), "target"),
        (dict(init_kl_coef=0.1, target=6.0, horizon=-1.0), "horizon"),
        (dict(init_kl_coef=0.1, target=6.0, horizon=0.0), "^horizon=0.0 is invalid: use a value > 0$"),
        (dict(init_kl_coef=0.1, target=-2.0, horizon=10.0), "^target=-2.0 is invalid: use a value > 0$"),
        (dict(init_kl_coef=-0.1, target=6.0, horizon=10.0), "^init_kl_coef=-0.1 is invalid: use a value >= 0$"),
        (dict(init_kl_coef=float("inf"), target=6.0, horizon=10.0), "^init_kl_coef=inf is invalid: use a finite"),
        (dict(init_kl_coef=float("nan"), target=6.0, horizon=10.0), "init_kl_coef"),
    ],
)
def test_adaptive_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveKLController(**kwargs)


def test_update_rejects_bad_arguments():
    ctl = AdaptiveKLController(0.1, 6.0, 10.0)
    with pytest.raises(ValueError, match="current_kl"):
        ctl.update(float("inf"), 1)
    with pytest.raises(ValueError, match="n_steps"):
        ctl.update(1.0, -1)
    ctl.update(100.0, 0)  # zero samples is allowed (an empty step): beta stays put
    assert ctl.value == 0.1
    with pytest.raises(ValueError, match="kl_coef"):
        FixedKLController("0.1x")
    with pytest.raises(ValueError, match="kl_coef"):
        FixedKLController(-1.0)


def test_errors_name_the_argument_and_the_controller_kind():
    with pytest.raises(ValueError, match="^kl_coef=-1.0 is invalid: use a value >= 0$"):
        FixedKLController(-1.0)
    with pytest.raises(ValueError, match="^FixedKLController state keys"):
        FixedKLController(0.1).load_state_dict({"value": 0.1, "target": 6.0})
    with pytest.raises(ValueError, match="^AdaptiveKLController state keys"):
        AdaptiveKLController(0.1, 6.0, 10.0).load_state_dict({"value": 0.1})


def test_type_errors_name_the_argument_and_its_type():
    with pytest.raises(ValueError,
                       match=r"^horizon='ten' is invalid: use a number \(got str\); write it without quotes$"):
        AdaptiveKLController(0.1, 6.0, "ten")


def test_factory_defaults_are_trl_target_6_and_horizon_10000():
    ctl = make_kl_controller(True, 0.1)
    assert (ctl.value, ctl.target, ctl.horizon) == (0.1, 6.0, 10000.0)
