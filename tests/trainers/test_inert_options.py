"""Options that cannot take effect are named at the start of a run (issue #15.10)."""

from __future__ import annotations

import logging

import pytest

from cory_env.seating import Seating, config_seating
from trainers.config import RunConfigs
from trainers.loop.cory import CORYTrainer
from trainers.loop.inert_options import inert_options


def _inert(flat: dict) -> list[str]:
    """inert_options of a flat config, with its seating (tasks whose data needs the hub take CORY's two seats)."""
    configs = RunConfigs.from_flat(flat, strict=True)
    if configs.env.task == "gsm8k":
        return inert_options(configs, Seating.from_spec(configs.env.seating or "cory"))
    return inert_options(configs, config_seating(configs.env))


@pytest.mark.parametrize(
    ("cory", "ppo", "env", "expected"),
    [
        ({"num_iterations": 3, "role_exchange_period": 5}, {}, {}, "role_exchange_period=5 > num_iterations=3"),
        ({"num_iterations": 5, "role_exchange_period": 5}, {}, {}, "no iteration runs with swapped roles"),
        ({"role_exchange_period": 0, "reset_on_exchange": True}, {}, {}, "reset_on_exchange=True does nothing"),
        ({}, {}, {"seating": "ppo", "knowledge_transfer": False},
         "knowledge_transfer=False do(es) nothing with seating='ppo'"),
        ({}, {}, {"seating": "ppo", "observer_template": "{query}: {response}"},
         "observer_template='{query}: {response}' do(es) nothing with seating='ppo'"),
        ({}, {}, {"task": "relay", "observer_template": "{query} {response}"},
         "observer_template='{query} {response}' does nothing with this seating: no seat both sees the query"),
        ({"num_iterations": 10, "role_exchange_period": 12}, {}, {"task": "chain_relay"},
         "role_exchange_period=12 > num_iterations=10"),
        ({"lora_r": 8}, {}, {}, "lora_r=8 do(es) nothing without use_lora=True"),
        ({"learner": "grpo"}, {"group_size": 2, "vf_coef": 0.5, "whiten_rewards": True}, {},
         "vf_coef=0.5, whiten_rewards=True do(es) nothing with learner='grpo'"),
        ({"learner": "grpo"}, {"group_size": 2, "kl_penalty": "abs"}, {}, "kl_penalty='abs' do(es) nothing"),
        ({"learner": "magrpo"}, {"group_size": 2, "gamma": 0.9}, {}, "gamma=0.9 do(es) nothing with learner='magrpo'"),
        ({"learner": "mappo"}, {"scale_rewards": False}, {}, "scale_rewards=False do(es) nothing with learner='mappo'"),
        ({}, {"kl_in_loss": False}, {}, "kl_in_loss=False do(es) nothing with learner='ppo'"),
        ({}, {"target_kl": 0.1}, {}, "target_kl=0.1 does nothing without early_stopping=True"),
        ({}, {"use_score_scaling": False, "use_score_norm": True}, {}, "use_score_norm=True does nothing"),
        ({}, {"init_kl_coef": 0.0}, {}, "stays 0"),
        ({}, {"adap_kl_ctrl": False, "target": 1.0}, {}, "target=1.0 do(es) nothing with adap_kl_ctrl=False"),
        ({}, {}, {"task": "gsm8k", "reward": "distilbert-imdb"}, "reward='distilbert-imdb' do(es) nothing with task"),
        ({"num_iterations": 4, "checkpoint_every": 4}, {}, {}, "only the final checkpoint"),
        ({"eval_every": 2}, {}, {}, "eval_every=2 does nothing with eval_episodes=0"),
    ],
)
def test_each_inert_combination_is_named(cory, ppo, env, expected):
    messages = _inert({**cory, **ppo, **env})
    assert any(expected in m for m in messages), messages


def test_defaults_and_the_presets_are_quiet():
    from trainers.cli.presets import PRESETS

    assert _inert({}) == []
    for name, preset in PRESETS.items():
        assert _inert(preset) == [], name


def test_the_trainer_says_so_at_start(tiny_run, caplog):
    """role_exchange_period > num_iterations used to run without a single exchange and say nothing."""
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        trainer = CORYTrainer(*tiny_run("few", num_iterations=2, role_exchange_period=5))
    assert "role_exchange_period=5 > num_iterations=2: no role exchange happens" in caplog.text
    trainer.train()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        CORYTrainer(*tiny_run("few", num_iterations=2, role_exchange_period=5, resume=True)).train()
    assert "nothing to train" in caplog.text
