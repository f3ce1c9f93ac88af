"""The pioneer seat as a Gymnasium env: registration, `check_env`, rewards, errors."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import cory_env  # noqa: F401 - registers the cory/ ids
from cory_env.gym_env import PioneerEnv
from cory_env.tasks.tiny_vocab import VOCAB


def test_make_registered_tiny_vocab_passes_check_env():
    env = gymnasium.make("cory/TinyVocab-v0")
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space["input_ids"].shape == (12,) and env.action_space.n == 20


def test_generic_id_with_another_tokenizer_passes_check_env(tiny_tok):
    env = gymnasium.make("cory/Pioneer-v0", tokenizer=tiny_tok, task="imdb", context_len=32, max_new_tokens=4)
    check_env(env.unwrapped, skip_render_check=True)


def test_optimal_episode_returns_one_and_seeding_is_deterministic():
    env = PioneerEnv(task="tiny_vocab", context_len=12, render_mode="ansi")
    obs, info = env.reset(seed=3)
    query = [VOCAB[s] for s in info["query_text"].split()]
    again, _ = PioneerEnv(task="tiny_vocab", context_len=12).reset(seed=3)
    np.testing.assert_array_equal(obs["input_ids"], again["input_ids"])
    total, terminated, steps = 0.0, False, 0
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(query[steps])
        total, steps = total + reward, steps + 1
        assert not truncated
    assert total == 1.0 and steps == 2 and info["response_len"] == 2
    assert "pioneer" in env.render()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(query[0])


def test_bad_actions_raise():
    env = PioneerEnv(task="tiny_vocab", context_len=12)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        env.step(20)
    with pytest.raises(TypeError, match="integer"):
        env.step(1.5)
    _, reward, _, _, _ = env.step(VOCAB[":"])  # masked tokens are accepted (advisory mask) and score 0
    assert reward == 0.0


def test_action_masks_is_the_observation_mask_as_bool():
    env = PioneerEnv(task="tiny_vocab", context_len=12)
    obs, _ = env.reset(seed=0)
    mask = env.action_masks()
    assert mask.dtype == bool and mask.shape == (20,)
    np.testing.assert_array_equal(mask, obs["action_mask"].astype(bool))
    mask[:] = False  # a copy: the env's mask is untouched
    assert env.action_masks().sum() == 17
