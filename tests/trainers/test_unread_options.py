"""Options a run does not read are named at its start, derived from the specs and the fields' own declarations
(`trainers.config.unread`)."""

from __future__ import annotations

import logging

import pytest

from cory_env.seating import Seating, config_seating
from cory_env.tasks import make_task
from trainers.config import RunConfigs
from trainers.loop.cory import CORYTrainer
from trainers.config.unread import unread_options


def _inert(flat: dict) -> list[str]:
    """unread_options of a flat config, with its seating (tasks whose data needs the hub take CORY's two seats)."""
    configs = RunConfigs.from_flat(flat, strict=True)
    if configs.env.task == "gsm8k":
        return unread_options(configs, Seating.from_spec(configs.env.seating or "cory"))
    task = make_task(configs.env.task, configs.env, None, configs.task_options)
    return unread_options(configs, config_seating(configs.env, task))


@pytest.mark.parametrize(
    ("cory", "ppo", "env", "expected"),
    [
        ({"num_iterations": 3, "role_exchange_period": 5}, {}, {},
         "role_exchange_period=5 does nothing with num_iterations=3: no role exchange happens"),
        ({"num_iterations": 3}, {}, {}, "role_exchange_period=5 does nothing with num_iterations=3"),  # the default
        ({"num_iterations": 5, "role_exchange_period": 5}, {}, {}, "no iteration runs with swapped roles"),
        ({"role_exchange_period": 0, "reset_on_exchange": True}, {}, {},
         "reset_on_exchange=True does nothing: no role exchange happens in this run"),
        ({}, {}, {"seating": "ppo", "knowledge_transfer": False},
         "knowledge_transfer=False does nothing with a single seat"),
        ({"role_exchange_period": 3}, {}, {"seating": "ppo", "partner_reward_coef": 2.0},
         "partner_reward_coef=2.0, role_exchange_period=3 do nothing with a single seat"),
        ({}, {}, {"seating": "ppo", "observer_template": "{query}: {response}"},
         "observer_template='{query}: {response}' does nothing with a single seat"),
        ({}, {}, {"task": "relay", "observer_template": "{query} {response}"},
         "observer_template='{query} {response}' does nothing with this seating: no seat both sees the query"),
        ({"num_iterations": 10, "role_exchange_period": 12}, {}, {"task": "chain_relay"},
         "role_exchange_period=12 does nothing with num_iterations=10"),
        ({"lora_r": 8}, {}, {}, "lora_r=8 does nothing without use_lora=True"),
        ({"lora_r": 8, "lora_alpha": 4}, {}, {}, "lora_r=8, lora_alpha=4 do nothing without use_lora=True"),
        ({"models": ["llm2.lora_r=8"]}, {}, {},  # a slot's own option, as the run-wide one
         "llm2.lora_r=8 does nothing without use_lora=True in slot llm2 (set llm2.use_lora=true)"),
        ({"use_lora": True, "models": ["llm2.use_lora=false", "llm2.lora_alpha=4"]}, {}, {},
         "llm2.lora_alpha=4 does nothing without use_lora=True in slot llm2"),
        ({"use_lora": True, "lora_dropout": 0.1}, {}, {}, "lora_dropout=0.1 does nothing with disable_dropout=True"),
        ({"learner": "grpo"}, {"group_size": 2, "vf_coef": 0.5, "whiten_rewards": True}, {},
         "vf_coef=0.5, whiten_rewards=True do nothing: read by learner ppo and learner mappo only (this run: "
         "learner='grpo'"),
        ({"learner": "grpo", "disable_dropout": False}, {"group_size": 2, "value_head_dropout": 0.2}, {},
         "value_head_dropout=0.2 does nothing: not read by learner='grpo'"),
        ({"learner": "grpo"}, {"group_size": 2, "kl_penalty": "abs"}, {},
         "kl_penalty='abs' does nothing with kl_in_loss=True (the KL is a k3 term in the loss)"),
        ({"learner": "magrpo"}, {"group_size": 2, "gamma": 0.9}, {},
         "gamma=0.9 does nothing: read by learner ppo and learner mappo only (this run: learner='magrpo'"),
        ({"learner": "mappo"}, {"scale_rewards": False}, {},
         "scale_rewards=False does nothing: read by learner grpo and learner magrpo only (this run: "
         "learner='mappo', task='imdb')"),
        ({}, {"kl_in_loss": False}, {}, "kl_in_loss=False does nothing: read by learner grpo and learner magrpo only"),
        ({}, {"target_kl": 0.1}, {}, "target_kl=0.1 does nothing without early_stopping=True"),
        ({}, {"use_score_scaling": False, "use_score_norm": True}, {},
         "use_score_norm=True does nothing without use_score_scaling=True"),
        ({}, {"init_kl_coef": 0.0}, {}, "adap_kl_ctrl=True does nothing with init_kl_coef=0"),
        ({}, {"adap_kl_ctrl": False, "target": 1.0}, {}, "target=1.0 does nothing with adap_kl_ctrl=False"),
        ({}, {}, {"task": "gsm8k", "reward": "distilbert-imdb"},
         "reward='distilbert-imdb' does nothing: not read by task='gsm8k'"),
        ({}, {}, {"task": "tiny_vocab", "max_new_tokens": 9}, "max_new_tokens=9 does nothing: not read by task='tiny_vocab'"),
        ({}, {}, {"task": "gsm8k", "min_review_chars": 9},
         "min_review_chars=9 does nothing: read by task imdb only (this run: learner='ppo', task='gsm8k')"),
        ({"num_iterations": 4, "checkpoint_every": 4}, {}, {}, "checkpoint_every=4 does nothing with num_iterations=4"),
        ({"eval_every": 2}, {}, {}, "eval_every=2 does nothing with eval_episodes=0"),
        ({"eval_episodes": 1}, {}, {}, "eval_influence=True does nothing with eval_episodes=1: influence plays"),
        ({"population": 3, "matchmaking": "uniform", "role_exchange_period": 2}, {}, {},
         "role_exchange_period=2 does nothing: matchmaking='uniform' seats the models each iteration by its own rule"),
    ],
)
def test_each_inert_combination_is_named(cory, ppo, env, expected):
    messages = _inert({**cory, **ppo, **env})
    assert any(expected in m for m in messages), messages


def test_a_scheme_that_reseats_every_iteration_does_not_warn_of_a_role_exchange_it_never_promised():
    messages = _inert({"num_iterations": 3, "population": 3, "matchmaking": "uniform"})  # the default period 5
    assert not any("role_exchange_period" in m for m in messages), messages
    # a model whose seat changes is reset (Population), whatever the period
    assert _inert({"num_iterations": 3, "population": 3, "matchmaking": "uniform", "reset_on_exchange": True}) == []


def test_the_trainer_names_snapshot_options_a_run_is_too_short_for(tiny_run, caplog):
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        CORYTrainer(tiny_run("snap", num_iterations=2, task="relay", context_len=12, population=2,
                             matchmaking="snapshots", matchmaking_options=["every=50"]))
    assert "matchmaking_options {'every': 50, 'keep': 3, 'p_snapshot': 0.5} do nothing with num_iterations=2: no " \
           "snapshot is taken" in caplog.text


def test_a_slots_lora_options_under_lora_are_read():
    assert _inert({"models": ["llm2.lora_r=8", "llm2.use_lora=true"]}) == []
    assert _inert({"use_lora": True, "models": ["llm2.lora_r=8"]}) == []


def test_defaults_and_the_presets_are_quiet():
    from trainers.config.presets import PRESETS

    assert _inert({}) == []
    for name, preset in PRESETS.items():
        assert _inert(preset) == [], name


def test_the_trainer_says_so_at_start(tiny_run, caplog):
    """role_exchange_period > num_iterations used to run without a single exchange and say nothing."""
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        trainer = CORYTrainer(tiny_run("few", num_iterations=2, role_exchange_period=5))
    assert "role_exchange_period=5 does nothing with num_iterations=2: no role exchange happens" in caplog.text
    trainer.train()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        CORYTrainer(tiny_run("few", num_iterations=2, role_exchange_period=5, resume=True)).train()
    assert "nothing to train" in caplog.text
