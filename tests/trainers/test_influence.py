"""Influence and copy rate (trainers.evaluation.influence) on hand-made observers: one that ignores the pioneer
scores influence 0, one that copies it scores copy rate 1 and influence > 0 on relay; the counterfactual episodes
(given responses) the measure rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_env import BatchedCORYEnv
from cory_env.tasks.tiny_vocab import SYMBOLS, VOCAB, tiny_vocab_tokenizer
from trainers.evaluation.influence import copy_rate, influence

EOS, COLON, QUESTION = VOCAB["<eos>"], VOCAB[":"], VOCAB["?"]
SYMBOL_IDS = np.array([VOCAB[s] for s in SYMBOLS])


class Stub:
    """An agent with `act_batch` and `reset_cache` only: `policy(obs, generator) -> (B,) ids`."""

    def __init__(self, policy):
        self.policy = policy

    def act_batch(self, obs, generator=None):
        return self.policy(obs, generator)

    def reset_cache(self):
        pass


def _random(obs, generator):
    """Ignores what it reads: uniform symbols from its own sampling generator."""
    draw = torch.randint(len(SYMBOL_IDS), (obs["input_ids"].shape[0],), generator=generator).numpy()
    return SYMBOL_IDS[draw]


def _copier(obs, generator):
    """Repeats what sits between ':' and '?' of its window, token by token, then EOS."""
    out = []
    for row in obs["input_ids"]:
        row = row.tolist()
        start, end = len(row) - 1 - row[::-1].index(COLON), len(row) - 1 - row[::-1].index(QUESTION)
        read, written = row[start + 1:end], len(row) - 1 - end
        out.append(read[written] if written < len(read) else EOS)
    return np.array(out)


@pytest.fixture()
def relay_env():
    return BatchedCORYEnv(None, tiny_vocab_tokenizer(), batch_size=8, task="relay", context_len=12)


def test_an_observer_that_ignores_the_pioneer_scores_influence_zero(relay_env):
    agents = {"pioneer": Stub(_random), "observer": Stub(_random)}
    out = influence(relay_env, agents, num_batches=2, seed=0)
    assert out["observer"]["influence"] == 0.0 and out["observer"]["influence_empty"] == 0.0
    assert out["num_queries"] == 16 and "pioneer" not in out


def test_an_observer_that_copies_scores_copy_rate_one_and_positive_influence(relay_env):
    agents = {"pioneer": Stub(_random), "observer": Stub(_copier)}
    out = influence(relay_env, agents, num_batches=2, seed=0)["observer"]
    assert out["copy_rate"] == 1.0
    assert out["reward_real"] > out["reward_other"] and out["influence"] > 0
    assert out["reward_empty"] == 0.0  # nothing to copy: no symbol, no reward


def test_given_responses_replace_a_seat_and_the_next_reads_them(relay_env):
    tok = relay_env.tokenizer
    given = [tok.encode("a b") for _ in range(8)]
    obs, _ = relay_env.reset(seed=0, options={"responses": {"pioneer": given}})
    assert relay_env.agent_selection == "observer"
    assert tok.decode(obs["input_ids"][0][obs["attention_mask"][0].astype(bool)]) == ": a b ?"
    with pytest.raises(ValueError, match="outside its vocabulary"):
        relay_env.reset(seed=0, options={"responses": {"pioneer": [[99]] * 8}})
    with pytest.raises(ValueError, match="one per row"):
        relay_env.reset(seed=0, options={"responses": {"pioneer": given[:3]}})


def test_copy_rate_counts_word_ngrams_found_in_the_partners_answer():
    assert copy_rate(["the film was good", ""], ["the film was bad", "x"]).tolist() == [2 / 3, 0.0]
    assert copy_rate(["a"], ["b a"]).tolist() == [1.0]  # shorter than n: unigrams


def test_another_rows_answer_is_given_whole_not_cut_to_the_receiving_rows_length():
    tok = tiny_vocab_tokenizer()
    env = BatchedCORYEnv(None, tok, batch_size=4, task="imdb", context_len=64, min_new_tokens=1, max_new_tokens=6)
    given = [tok.encode("a b c d e f")] * 4  # six tokens each, longer than rows that drew shorter lengths
    env.reset(seed=0, options={"responses": {"pioneer": given}})
    assert [len(r) for r in env._episode.response_ids("pioneer")] == [6, 6, 6, 6]
