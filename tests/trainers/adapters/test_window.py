"""`trainers.adapters.window`: the window every adapter's env gets is the smallest that holds a whole query and every
response a seat reads, for any seating."""

from __future__ import annotations

import logging

import pytest

import cory_env
from cory_env.tasks import task_tokenizer
from trainers.adapters.window import episode_size


@pytest.mark.parametrize(("task", "seating", "context_len"), [
    ("tiny_vocab", "ppo", 7),        # "q1 q2 q3 q4 ?" + 2 answer tokens
    ("tiny_vocab", None, 10),        # the observer: "q1 q2 q3 q4 : a1 a2 ?" + 2
    ("tiny_vocab", "chain:4", 14),   # seat 4 reads 3 answers of 2 tokens
    ("tiny_vocab", "chain:6", 18),
    ("relay", None, 7),              # the observer sees ": a1 a2 ?" only; the pioneer's prompt is the longest
    ("chain_relay", "chain:5", 7),   # each seat reads the previous one only
])
def test_episode_size_is_hand_computed(task, seating, context_len):
    size = episode_size(task, seating)
    assert size.context_len == context_len and size.max_new_tokens == 2
    assert size.max_episode_steps == 2 * size.num_seats


def _truncations(caplog, task, seating, context_len, episodes=3):
    env = cory_env.env(task=task, tokenizer=task_tokenizer(task), context_len=context_len, seating=seating)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cory_env.episode"):
        for seed in range(episodes):
            env.reset(seed=seed)
            for agent in env.agent_iter():
                _, _, terminated, truncated, _ = env.last()
                env.step(None if terminated or truncated else int(env.action_space(agent).sample(
                    env.observe(agent)["action_mask"])))
    return [r for r in caplog.records if "truncated" in r.getMessage()]


@pytest.mark.parametrize(("task", "seating"), [("tiny_vocab", "chain:4"), ("tiny_vocab", "cory"), ("relay", None)])
def test_episode_size_is_the_smallest_window_without_truncation(caplog, task, seating):
    L = episode_size(task, seating).context_len
    assert not _truncations(caplog, task, seating, L)
    assert _truncations(caplog, task, seating, L - 1)  # one token less cuts every query


def test_episode_size_refuses_a_task_without_its_own_tokenizer():
    with pytest.raises(ValueError, match="task 'imdb' brings no tokenizer of its own.*use one of"):
        episode_size("imdb")
