"""EnvConfig: CLI-friendly (HfArgumentParser) and frozen."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import HfArgumentParser

from cory_env import EnvConfig
from cory_env.tasks.imdb import IMDBOptions


def test_hf_argument_parser_reads_every_field():
    (config,) = HfArgumentParser(EnvConfig).parse_args_into_dataclasses(
        ["--max_new_tokens", "9", "--knowledge_transfer", "false", "--data_path", "hub",
         "--partner_reward_coef", "-1"])
    assert (config.max_new_tokens, config.knowledge_transfer, config.data_path) == (9, False, "hub")
    assert config.partner_reward_coef == -1.0 and config.observer_template is None
    assert all(f.metadata.get("help") for f in dataclasses.fields(EnvConfig))


def test_defaults_follow_the_paper_and_config_is_frozen():
    config = EnvConfig()
    options = IMDBOptions()
    assert (options.query_min_tokens, options.query_max_tokens, config.min_new_tokens, config.max_new_tokens) == (
        2, 7, 4, 15)
    assert (config.partner_reward_coef, config.knowledge_transfer, config.reward) == (1.0, True, "vader")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.context_len = 3


@pytest.mark.parametrize("kwargs, message", [
    ({"heldout_fraction": 1.0}, r"^heldout_fraction=1.0 is invalid: use a value in \[0, 1\); 0.1 keeps a tenth"),
    ({"heldout_fraction": -0.1}, r"^heldout_fraction=-0.1 is invalid: use a value in \[0, 1\)"),
    ({"query_split": "valid"}, "query_split must be one of"),
    ({"query_split": "test"}, "needs a held-out slice"),
])
def test_heldout_options_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kwargs)
