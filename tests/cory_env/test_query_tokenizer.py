"""The queries are drawn and cut in one reference tokenizer (`EpisodeBatch.query_tokenizer`: the task's, a run's first
model's), so the task a run trains and evaluates on does not change with the model that sits in the pioneer seat:
with a nearly byte-level model there, an IMDB query is still 2-7 tokens of the reference tokenizer, not 2-7 bytes."""

from __future__ import annotations

import numpy as np
import pytest

from agents.tiny import tiny_tokenizer
from cory_env import BatchedCORYEnv, EnvConfig


@pytest.fixture(scope="module")
def near_bytes():
    """A byte-level BPE with only 43 merges (V = 300): most text is one token per character."""
    return tiny_tokenizer(vocab_size=300)


def _finish(env: BatchedCORYEnv) -> None:
    """End the batch: every seat answers EOS at once."""
    while not env.done:
        env.step(np.full(env.batch_size, env.tokenizers[env.agent_selection].eos_token_id))


def _queries_both_ways(config: EnvConfig, reference, other, *, seed: int = 3, batch_size: int = 8):
    """The query texts of one seeded reset with `reference`'s model in the pioneer seat, then (role exchange:
    `set_tokenizers`) with `other`'s there, the queries' tokenizer being `reference` throughout."""
    env = BatchedCORYEnv(config, {"pioneer": reference, "observer": other}, batch_size=batch_size,
                         task_tokenizer=reference)
    _, first = env.reset(seed=seed)
    _finish(env)
    env.set_tokenizers({"pioneer": other, "observer": reference})
    _, exchanged = env.reset(seed=seed)
    return env, first["query_text"], exchanged["query_text"]


def _check_same_queries_within_the_range(env, reference, first, exchanged):
    low, high = env.task.query_tokens
    assert exchanged == first, "the queries changed with the model in the pioneer seat"
    lengths = [len(reference(text, add_special_tokens=False)["input_ids"]) for text in exchanged]
    assert all(low <= n <= high for n in lengths), (lengths, exchanged)


@pytest.mark.parametrize("reference_is", ["tiny_bpe", "near_bytes"])
def test_imdb_queries_do_not_depend_on_the_pioneers_tokenizer(reference_is, tiny_tok, near_bytes, imdb_csv):
    reference, other = (tiny_tok, near_bytes) if reference_is == "tiny_bpe" else (near_bytes, tiny_tok)
    env, first, exchanged = _queries_both_ways(EnvConfig(task="imdb", data_path=str(imdb_csv)), reference, other)
    _check_same_queries_within_the_range(env, reference, first, exchanged)


def test_built_in_openings_do_not_depend_on_the_pioneers_tokenizer(tiny_tok, near_bytes):
    """Without a data file the IMDB task plays its built-in review openings: the same rule holds."""
    env, first, exchanged = _queries_both_ways(EnvConfig(task="imdb"), tiny_tok, near_bytes)
    _check_same_queries_within_the_range(env, tiny_tok, first, exchanged)


def test_a_byte_level_pioneer_reads_the_reference_query_in_its_own_tokens(tiny_tok, near_bytes, imdb_csv):
    """After the exchange the byte-level pioneer's prompt is its template around the query the reference tokenizer
    cut before the exchange (re-encoded as text), not a query of 2-7 of its own tokens."""
    env, first, _ = _queries_both_ways(EnvConfig(task="imdb", data_path=str(imdb_csv)), tiny_tok, near_bytes)
    prompts = env._episode.prompt_ids["pioneer"]
    template = env.task.pioneer_template
    for text, prompt in zip(first, prompts):
        assert near_bytes.decode(prompt, skip_special_tokens=True) == template.replace("{query}", text)


@pytest.mark.slow
@pytest.mark.real_model
def test_imdb_queries_cut_in_smollm2_stay_with_a_byte_level_pioneer(smollm2_tokenizer, near_bytes, imdb_csv):
    env, first, exchanged = _queries_both_ways(EnvConfig(task="imdb", data_path=str(imdb_csv)), smollm2_tokenizer,
                                               near_bytes)
    _check_same_queries_within_the_range(env, smollm2_tokenizer, first, exchanged)
