"""The chain-relay task: N seats pass a private query along; its optima with and without transfer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.seating import Seating, seat_names
from cory_env.tasks import make_task, task_tokenizer
from cory_env.tasks.chain_relay import chain_relay_reward, heldout_blind_value, without_kt_optimum
from cory_env.tasks.tiny_vocab import SYMBOLS, VOCAB, tiny_vocab_records


def test_the_reward_by_hand():
    assert chain_relay_reward(["a b c d"] * 4, ["a b", "b b", "x a", "d c a"], [{}] * 4) == [1.0, 0.5, 0.5, 1.0]


def test_the_default_seating_is_a_chain_of_three_with_a_private_query():
    task = make_task("chain_relay", EnvConfig(task="chain_relay"), task_tokenizer("chain_relay"))
    assert (task.num_seats, task.private_query, task.seat_reads) == (3, True, "previous")
    benv = BatchedCORYEnv(EnvConfig(task="chain_relay", context_len=12), task_tokenizer("chain_relay"))
    assert benv.possible_agents == ["pioneer", "observer_1", "observer_2"]
    assert benv.seating == Seating.chain(3, private_query=True, reads="previous")


def _play(num_seats: int, knowledge_transfer: bool, policy, batch: int = 256, seed: int = 0) -> np.ndarray:
    """Every seat answers with `policy(seat, window ids) -> 2 symbols`; returns the pioneer's reward per row."""
    tok = task_tokenizer("chain_relay")
    benv = BatchedCORYEnv(EnvConfig(task="chain_relay", context_len=12, seating=f"chain:{num_seats}",
                                    knowledge_transfer=knowledge_transfer), tok, batch_size=batch)
    obs, _ = benv.reset(seed=seed)
    while not benv.done:
        seat = benv.agent_selection
        k = 0
        answers = [policy(seat, ids[mask == 1].tolist()) for ids, mask in zip(obs["input_ids"], obs["attention_mask"])]
        while benv.agent_selection == seat:
            obs, rewards, *_ = benv.step(np.array([a[k] for a in answers]))
            k += 1
    return rewards["pioneer"]


def _relay(seat, ids):
    """The optimal policy: the pioneer names the first two query symbols, every later seat repeats what it read."""
    return ids[:2] if seat == "pioneer" else ids[1:3]  # ": a b ?" -> a b


@pytest.mark.parametrize("num_seats", [2, 3, 4])
def test_the_optimum_with_knowledge_transfer_is_n(num_seats):
    np.testing.assert_array_equal(_play(num_seats, True, _relay), float(num_seats))


def test_without_transfer_no_fixed_answer_beats_p_and_the_bound_is_reached():
    """Seat k >= 1 reads ': ?' whatever the query: its best answer is the two most frequent symbols, worth p = 1/4
    on the uniform 4-subsets (brute force over every fixed answer); the chain then scores 1 + (N - 1) p."""
    records = tiny_vocab_records()
    p = heldout_blind_value(records)
    assert p == pytest.approx(0.25)
    queries = [set(r["query"].split()) for r in records]
    best = max(np.mean([len(set(pair) & q) / 2 for q in queries])
               for pair in itertools.combinations_with_replacement(SYMBOLS, 2))
    assert best == pytest.approx(p)
    assert without_kt_optimum(3) == pytest.approx(1.5)
    heldout = make_task("chain_relay", EnvConfig(task="chain_relay", heldout_fraction=0.2, query_split="test"),
                        None).records
    assert without_kt_optimum(3, heldout_fraction=0.2) == pytest.approx(1 + 2 * heldout_blind_value(heldout))

    def blind(seat, ids):
        return ids[:2] if seat == "pioneer" else [VOCAB["a"], VOCAB["b"]]

    got = _play(3, False, blind, batch=1024).mean()
    assert got == pytest.approx(1.5, abs=0.05)  # 1 + 2 * (P(a in q) + P(b in q)) / 2 on 1024 drawn queries


def test_the_seats_of_a_chain_see_only_their_predecessor():
    tok = task_tokenizer("chain_relay")
    benv = BatchedCORYEnv(EnvConfig(task="chain_relay", context_len=12), tok, batch_size=1)
    benv.reset(seed=0)
    for token in ("a", "b", "c", "d", "e", "f"):
        benv.step(np.array([VOCAB[token]]))
    prompts = {s: tok.decode(t.prompt_ids[0]) for s, t in benv.transcript().seats.items()}
    assert prompts["observer_1"] == ": a b ?" and prompts["observer_2"] == ": c d ?"
    assert list(prompts) == list(seat_names(3))
