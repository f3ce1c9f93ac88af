"""The run's configs and the flat dict that joins them."""

from __future__ import annotations

import dataclasses

import pytest

from cory_env import EnvConfig
from cory_env.tasks.imdb import IMDBOptions
from trainers.config import BASE_CLASSES, CORYConfig, GRPOConfig, PPOConfig, RunConfigs, flat_field_types


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
        ({"checkpoint_every": -2}, "checkpoint_every"),
        ({"eta": -1.0}, "eta"),
        ({"resume": True, "overwrite": True}, "resume"),
        ({"device": "gpu0"}, "device"),
    ],
)
def test_cory_config_rejects(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CORYConfig(**kwargs)


@pytest.mark.parametrize(
    "flat, field",
    [
        ({"dtype": "float8"}, "dtype"),
        ({"lora_r": 0}, "lora_r"),
        ({"value_head_dropout": 1.0}, "value_head_dropout"),
        ({"top_p": 0.0}, "top_p"),
        ({"temperature": 0.0}, "temperature"),
        ({"lora_alpha": 0}, "lora_alpha"),
        ({"lora_dropout": 1.0}, "lora_dropout"),
        ({"cliprange": 0.0}, "cliprange"),
        ({"torch_threads": -1}, "torch_threads"),
        ({"token_mean_over": "sequence"}, "token_mean_over"),
        ({"seating": "chain:0"}, "seating"),
        ({"seating": "mappo"}, "seating='mappo' is not a seating spec"),
    ],
)
def test_model_and_sampling_configs_reject(flat, field):
    with pytest.raises(ValueError, match=field):
        RunConfigs.from_flat(flat)


def _float_fields():
    import dataclasses
    import typing

    from trainers.config import all_config_classes

    out = []
    for cls in all_config_classes():
        hints = typing.get_type_hints(cls)
        out += [(cls, f.name) for f in dataclasses.fields(cls) if float in (hints[f.name], *typing.get_args(hints[f.name]))]
    return out


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("cls, name", _float_fields(), ids=lambda x: getattr(x, "__name__", x))
def test_every_float_option_refuses_non_finite_values(cls, name, value):
    """--learning_rate inf (or YAML .inf) passed a `> 0` check and NaN failed no check."""
    with pytest.raises(ValueError, match=rf"^{name}={value!r} is invalid: use a finite number"):
        cls(**{name: value})


def test_flat_dict_round_trip_and_the_run_before_the_split():
    """One flat dict <-> the configs of a run (the base ones, the task's and the learner's options); a config.yaml
    written before ModelConfig / SamplingConfig existed (the same flat keys) reads into the same configs."""
    configs = RunConfigs.from_flat({"model": "tiny", "use_lora": True, "temperature": 0.7, "batch_size": 8,
                                    "mini_batch_size": 4, "task": "tiny_vocab", "num_iterations": 3})
    assert (configs.model.model, configs.model.use_lora, configs.sampling.temperature) == ("tiny", True, 0.7)
    assert (configs.update.batch_size, configs.env.task, configs.run.num_iterations) == (8, "tiny_vocab", 3)
    assert configs.task_options is None and type(configs.update) is PPOConfig  # tiny_vocab has no options
    flat = configs.to_flat()
    assert RunConfigs.from_flat(flat) == configs
    assert len(flat) == sum(len(dataclasses.fields(c)) for c in (*BASE_CLASSES, PPOConfig))  # names are unique
    old_run = {**flat, "obsolete_key": 1}  # unknown keys: ignored when reading a run, refused when strict
    assert RunConfigs.from_flat(old_run) == configs
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['obsolete_key'\]"):
        RunConfigs.from_flat(old_run, strict=True)
    assert set(flat_field_types(configs)) == set(flat)
    grpo = RunConfigs.from_flat({"learner": "grpo", "group_size": 4, "min_review_chars": 50}, strict=True)
    assert grpo.update == GRPOConfig(group_size=4) and grpo.task_options == IMDBOptions(min_review_chars=50)
    assert {"group_size", "min_review_chars"} <= set(grpo.to_flat()) and RunConfigs.from_flat(grpo.to_flat()) == grpo


def test_the_options_of_another_learner_or_task_are_kept_apart_as_unread():
    """A flat config of learner ppo holding GRPO's options (every config.yaml written before the tree did) reads
    them into `unread`, out of the run's configs and of what it records."""
    configs = RunConfigs.from_flat({"learner": "ppo", "group_size": 4, "task": "gsm8k", "query_max_tokens": 9},
                                   strict=True)
    assert type(configs.update) is PPOConfig and configs.task_options is None
    assert dict(configs.unread) == {"group_size": 4, "query_max_tokens": 9}
    assert "group_size" not in configs.to_flat()


def test_sections_of_the_wrong_class_and_clashing_plugin_options_are_refused():
    with pytest.raises(TypeError, match="learner 'ppo' the learner reads a PPOConfig, got a GRPOConfig"):
        RunConfigs(update=GRPOConfig())
    with pytest.raises(TypeError, match="reads a GRPOConfig, got a IMDBOptions"):
        RunConfigs(run=CORYConfig(learner="grpo"), update=IMDBOptions())
    with pytest.raises(TypeError, match="reads no options of its own"):
        RunConfigs(task_options=GRPOConfig(), env=EnvConfig(task="tiny_vocab"))
    with pytest.raises(ValueError, match=r"unknown learner 'nope'; known learners: ppo, grpo, mappo, magrpo"):
        RunConfigs(run=CORYConfig(learner="nope"))


def test_batch_size_one_is_refused_with_the_real_reason():
    """Batch 1 used to crash mid-run (whitening one token) with advice that could not be followed."""
    with pytest.raises(ValueError, match=r"batch_size=1.*whiten.*at least 2 tokens.*batch_size >= 2"):
        PPOConfig(batch_size=1, mini_batch_size=1)
    PPOConfig(batch_size=2, mini_batch_size=1)


def test_a_flat_config_with_the_old_algo_key_is_refused_when_strict():
    """`algo` became `EnvConfig.seating` (its flag `--algo` stays an alias); the flat key of that unreleased era is no
    longer migrated: a YAML file holding it is an unknown option."""
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['algo'\]"):
        RunConfigs.from_flat({"algo": "ppo", "num_iterations": 3}, strict=True)


@pytest.mark.parametrize(("cls", "field", "value", "message"), [
    (PPOConfig, "learning_rate", "1e3",
     "learning_rate='1e3' is invalid: use a number (got str); write it without quotes"),
    (PPOConfig, "batch_size", True, "batch_size=True is invalid: use an integer (got bool)"),
    (PPOConfig, "ppo_epochs", 2.0, "ppo_epochs=2.0 is invalid: use an integer (got float)"),
    (PPOConfig, "adap_kl_ctrl", 1, "adap_kl_ctrl=1 is invalid: use True or False (got int)"),
    (CORYConfig, "seed", -1, "seed=-1 is invalid: use an integer >= 0"),
    (CORYConfig, "output_dir", 3, "output_dir=3 is invalid: use a str (got int)"),
    (IMDBOptions, "query_max_tokens", 3.0, "query_max_tokens=3.0 is invalid: use an integer (got float)"),
])
def test_every_field_takes_a_value_of_its_declared_kind_only(cls, field, value, message):
    """One strict check (`cory_env.checks.check_number` through every config's first check): text, bools and
    floats are not read as the numbers or flags they are not."""
    import re

    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**{field: value})


def test_partner_coefficients_and_weights_are_bounded():
    from cory_env import EnvConfig

    with pytest.raises(ValueError, match=r"partner_reward_coef=1e\+308 is invalid: use a magnitude of at most 1e\+06"):
        EnvConfig(partner_reward_coef=1e308)
    assert EnvConfig(partner_reward_coef=-1e6).partner_reward_coef == -1e6
