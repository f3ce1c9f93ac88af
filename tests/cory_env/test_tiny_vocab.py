"""The tiny-vocabulary task: tokenizer, reward, a scripted optimal policy vs a random one, env integration."""

from __future__ import annotations

import numpy as np
import pytest

from cory_env import BatchedCORYEnv, make_task
from cory_env.tasks.tiny_vocab import (
    CONTEXT_LEN,
    SYMBOLS,
    VOCAB,
    tiny_vocab_records,
    tiny_vocab_reward,
    tiny_vocab_tokenizer,
)
from cory_env.token_env import env as aec_env


@pytest.fixture(scope="module")
def tok():
    return tiny_vocab_tokenizer()


def _env(tok, batch_size, **kwargs):
    return BatchedCORYEnv(task="tiny_vocab", tokenizer=tok, batch_size=batch_size, context_len=CONTEXT_LEN, **kwargs)


def _play(env, pioneer, observer, seed=0):
    """Run one batch; `pioneer`/`observer` map (query ids, own response so far, pioneer response) -> token id."""
    env.reset(seed=seed)
    ep = env._episode  # noqa: SLF001 - the scripted policies read the episode's query ids directly
    while not env.done:
        seat = env.agent_selection
        a1 = ep.response_ids("pioneer")
        own = ep.response_ids(seat)
        policy = pioneer if seat == "pioneer" else observer
        env.step(np.array([policy(q, r, p) for q, r, p in zip(ep.query_ids, own, a1)], dtype=np.int64))
    return env.transcript()


def optimal_pioneer(query, own, _):
    return query[len(own)]                                  # name the first two query symbols


def optimal_observer(query, own, a1):
    rest = [t for t in query if t not in a1]
    return rest[len(own)]                                   # name the two the pioneer left


def test_tokenizer_round_trip(tok):
    assert len(tok) == len(VOCAB) == 20 and tok.eos_token_id == tok.pad_token_id == 0
    ids = tok.encode("c f h k", add_special_tokens=False)
    assert ids == [VOCAB[s] for s in "cfhk"]
    assert tok.decode(ids + [0], skip_special_tokens=True) == "c f h k"


def test_records_and_reward_by_hand():
    records = tiny_vocab_records()
    assert len(records) == 1820 and len({r["query"] for r in records}) == 1820
    assert all(len(set(r["query"].split())) == 4 for r in records[:50])
    assert tiny_vocab_reward(["a b c d"], ["a a"], [{}]) == [0.5]         # a repeat names one symbol
    assert tiny_vocab_reward(["a b c d"], ["e b"], [{}]) == [0.5]         # e is not in the query
    assert tiny_vocab_reward(["a b c d"], ["c d"], [{"partner_response": "a b"}]) == [1.0]
    assert tiny_vocab_reward(["a b c d"], ["a d"], [{"partner_response": "a b"}]) == [0.5]


def test_scripted_optimum_scores_two_and_random_scores_much_less(tok):
    env = _env(tok, 64)
    best = _play(env, optimal_pioneer, optimal_observer)
    assert best.seats["pioneer"].reward == pytest.approx(np.full(64, 2.0))
    assert best.seats["pioneer"].task_reward == pytest.approx(np.ones(64))
    rng = np.random.default_rng(0)
    allowed = np.flatnonzero(env.action_mask[0])
    assert set(allowed) == {0, *(VOCAB[s] for s in SYMBOLS)}
    rand = _play(env, lambda *a: int(rng.choice(allowed)), lambda *a: int(rng.choice(allowed)), seed=1)
    assert rand.seats["observer"].reward.mean() < 0.8                      # expected about 0.42


def test_observer_must_read_the_pioneer(tok):
    # an observer that ignores a1 and names the same two symbols as the pioneer scores 0
    copycat = _play(_env(tok, 16), optimal_pioneer, optimal_pioneer)
    assert copycat.seats["observer"].task_reward == pytest.approx(np.zeros(16))
    # without knowledge transfer the observer's prompt holds no a1
    no_kt = _env(tok, 4, knowledge_transfer=False)
    no_kt.reset(seed=0)
    while no_kt.agent_selection == "pioneer":
        no_kt.step(np.full(4, VOCAB["a"]))
    assert VOCAB[":"] not in no_kt.observe("observer")["input_ids"]


def test_aec_env_gives_both_seats_the_collective_reward(tok):
    env = aec_env(task="tiny_vocab", tokenizer=tok, context_len=CONTEXT_LEN)
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        if terminated:
            assert reward == pytest.approx(2.0) and info["task_reward"] == pytest.approx(1.0)
            env.step(None)
            continue
        ids = obs["input_ids"][obs["attention_mask"] == 1].tolist()
        q = ids[:4]
        if agent == "pioneer":
            env.step(q[len(ids) - 5])
        else:
            a1 = ids[5:7]
            env.step([t for t in q if t not in a1][len(ids) - 8])


def test_any_tokenizer_works_without_action_mask(tiny_tok):
    task = make_task("tiny_vocab", None, tiny_tok)
    assert task.action_mask is None and task.max_new_tokens == 2
