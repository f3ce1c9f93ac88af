import pytest

from trainers.config import CORYConfig, PPOConfig


def test_defaults_are_trl_defaults():
    cfg = PPOConfig()
    assert (cfg.gamma, cfg.lam, cfg.cliprange, cfg.cliprange_value, cfg.vf_coef) == (1.0, 0.95, 0.2, 0.2, 0.1)
    assert (cfg.init_kl_coef, cfg.target, cfg.horizon, cfg.ppo_epochs) == (0.2, 6.0, 10000.0, 4)
    assert cfg.backward_batch_size == cfg.mini_batch_size * cfg.gradient_accumulation_steps


def test_batch_not_divisible_names_all_three():
    with pytest.raises(ValueError) as err:
        PPOConfig(batch_size=10, mini_batch_size=4, gradient_accumulation_steps=2)
    msg = str(err.value)
    assert "batch_size=10" in msg and "mini_batch_size=4" in msg and "gradient_accumulation_steps=2" in msg


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kl_penalty": "kl2"}, "kl_penalty"),
        ({"init_kl_coef": -0.1}, "init_kl_coef"),
        ({"gamma": 1.5}, "gamma"),
        ({"lam": -0.1}, "lam"),
        ({"cliprange": -1.0}, "cliprange"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"ppo_epochs": 0}, "ppo_epochs"),
        ({"target": 0.0}, "target"),
    ],
)
def test_ppo_config_rejects(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PPOConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"role_exchange_period": -1}, "role_exchange_period"),
        ({"algo": "mappo"}, "algo"),
        ({"checkpoint_every": -2}, "checkpoint_every"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": 0.0}, "temperature"),
        ({"eta": -1.0}, "eta"),
        ({"resume": True, "overwrite": True}, "resume"),
        ({"dtype": "float8"}, "dtype"),
        ({"device": "gpu0"}, "device"),
    ],
)
def test_cory_config_rejects(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CORYConfig(**kwargs)


def test_batch_size_one_is_refused_with_the_real_reason():
    """Issue #15.6: batch 1 used to crash mid-run (whitening one token) with advice that could not be followed."""
    with pytest.raises(ValueError, match=r"batch_size=1.*whiten.*at least 2 tokens.*batch_size >= 2"):
        PPOConfig(batch_size=1, mini_batch_size=1)
    PPOConfig(batch_size=2, mini_batch_size=1)
