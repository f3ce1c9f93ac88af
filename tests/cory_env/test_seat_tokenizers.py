"""Seats of different tokenizers (a model per slot, docs/seats.md): per-seat spaces, the text channel between seats,
moving tokenizers between episodes, per-seat lengths and stop strings, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test

from agents.tiny import tiny_tokenizer
from cory_env import BatchedCORYEnv, EnvConfig, env as make_env
from cory_env.episode import EpisodeBatch
from cory_env.prompts import PromptTemplate
from cory_env.tasks import make_task
from cory_env.tasks.tiny_vocab import RESPONSE_ONLY_TEMPLATE, VOCAB, seat_symbol_mask, tiny_vocab_tokenizer


@pytest.fixture(scope="module")
def word():
    """The relay task's own 20-token word-level tokenizer."""
    return tiny_vocab_tokenizer()


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE tokenizer (V = 384): another vocabulary for the same text."""
    return tiny_tokenizer()


def _play(env, seed=0, rng_seed=0):
    """Play one batch with random allowed actions; returns the transcript."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(rng_seed)
    while not env.done:
        allowed = np.flatnonzero(obs["action_mask"][0])
        obs, *_ = env.step(rng.choice(allowed, size=env.batch_size))
    return env.transcript()


def test_the_aec_env_passes_pettingzoo_api_test_with_a_space_per_seat(word, bpe):
    aec = make_env(task="relay", tokenizer={"pioneer": word, "observer": bpe}, context_len=12)
    api_test(aec, num_cycles=40)
    assert aec.action_space("pioneer").n == len(word) == 20
    assert aec.action_space("observer").n == len(bpe) == 384
    assert aec.observation_space("observer")["action_mask"].shape == (384,)
    assert aec.unwrapped.tokenizers == {"pioneer": word, "observer": bpe}


def test_the_observer_reads_the_pioneers_answer_as_text_in_its_own_tokens(word, bpe):
    env = BatchedCORYEnv(None, {"pioneer": word, "observer": bpe}, batch_size=6, task="relay", context_len=12)
    transcript = _play(env, seed=3)
    template = PromptTemplate(RESPONSE_ONLY_TEMPLATE, bpe, required=(), reads=("pioneer",))
    pioneer, observer = transcript.seats["pioneer"], transcript.seats["observer"]
    for i in range(6):
        answer = [t for t in pioneer.response_ids[i] if t != word.eos_token_id]
        text = word.decode(answer, skip_special_tokens=True)
        assert observer.prompt_ids[i] == template.build([], bpe.encode(text, add_special_tokens=False))
        assert all(0 <= t < len(bpe) for t in observer.response_ids[i])
        assert all(0 <= t < len(word) for t in pioneer.response_ids[i])
    assert observer.pad_id == bpe.pad_token_id
    assert observer.allowed.shape == (len(bpe),) and pioneer.allowed.shape == (len(word),)
    # rewards score each seat's text decoded by its own tokenizer
    assert observer.response_text == [bpe.decode(r, skip_special_tokens=True) for r in observer.response_ids]


def test_one_tokenizer_object_per_seat_plays_exactly_as_one_tokenizer(word):
    one = _play(BatchedCORYEnv(None, word, batch_size=4, task="relay", context_len=12), seed=5)
    mapped = _play(BatchedCORYEnv(None, {"pioneer": word, "observer": word}, batch_size=4, task="relay",
                                  context_len=12), seed=5)
    for seat in ("pioneer", "observer"):
        assert one.seats[seat].prompt_ids == mapped.seats[seat].prompt_ids
        assert one.seats[seat].response_ids == mapped.seats[seat].response_ids
        np.testing.assert_array_equal(one.seats[seat].reward, mapped.seats[seat].reward)


def test_set_tokenizers_moves_the_spaces_with_the_models_and_is_refused_mid_episode(word, bpe):
    env = BatchedCORYEnv(None, {"pioneer": word, "observer": bpe}, batch_size=2, task="relay", context_len=12)
    env.set_tokenizers({"pioneer": bpe, "observer": word})  # role exchange: the models swapped seats
    assert env.vocab_sizes == {"pioneer": 384, "observer": 20}
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"].shape == (2, 384)
    env.step(np.full(2, bpe.encode(" a")[0]))
    with pytest.raises(RuntimeError, match="during an episode"):
        env.set_tokenizers({"pioneer": word, "observer": bpe})
    with pytest.raises(ValueError, match="give one tokenizer per seat"):
        BatchedCORYEnv(None, {"pioneer": word}, batch_size=2, task="relay", context_len=12)


def test_each_tokenizer_gets_the_tasks_mask_for_it(word, bpe):
    env = BatchedCORYEnv(None, {"pioneer": word, "observer": bpe}, batch_size=2, task="relay", context_len=12)
    mask = env.action_masks["observer"][0]
    np.testing.assert_array_equal(mask, seat_symbol_mask(bpe))
    allowed = {bpe.convert_tokens_to_string([bpe.convert_ids_to_tokens(int(i))]).strip()
               for i in np.flatnonzero(mask)}
    assert allowed == set("abcdefghijklmnop") | {bpe.eos_token}  # the symbols (with and without a space), EOS
    assert env.action_masks["pioneer"][0].sum() == 17 and len(env.action_masks["pioneer"][0]) == len(VOCAB)


def test_a_task_mask_made_for_one_tokenizer_is_refused_for_seats_of_two(word, bpe):
    import dataclasses

    task = dataclasses.replace(make_task("relay", EnvConfig(task="relay"), word), action_mask_for=None)
    with pytest.raises(ValueError, match="give the Task an action_mask_for"):
        EpisodeBatch(task, {"pioneer": word, "observer": bpe}, context_len=12)


def test_a_seats_own_length_range_leaves_the_other_seats_draws_unchanged(tiny_tok):
    cfg = dict(task="imdb", context_len=64, min_new_tokens=2, max_new_tokens=6)
    base = _play(BatchedCORYEnv(EnvConfig(**cfg), tiny_tok, batch_size=8), seed=1)
    own = _play(BatchedCORYEnv(EnvConfig(**cfg, seat_generation=["observer.min_new_tokens=9",
                                                                 "observer.max_new_tokens=10"]),
                               tiny_tok, batch_size=8), seed=1)
    assert own.seats["pioneer"].response_ids == base.seats["pioneer"].response_ids
    lengths = [len(r) for r in own.seats["observer"].response_ids]
    ended = [r[-1] == tiny_tok.eos_token_id for r in own.seats["observer"].response_ids]
    assert all(9 <= n <= 10 or e for n, e in zip(lengths, ended))
    assert max(lengths) > 6  # longer than the task's range allows


def test_stop_strings_end_a_seats_response_at_the_token_that_completes_one(word):
    stop = "c"
    env = BatchedCORYEnv(EnvConfig(task="tiny_vocab", context_len=12, seat_generation=[f"pioneer.stop_strings={stop}"]),
                         word, batch_size=1)
    env.reset(seed=0)
    env.step(np.array([VOCAB["c"]]))  # "c" completes the stop string: the pioneer's response ends here
    assert env.agent_selection == "observer"
    assert env._episode.response_ids("pioneer") == [[VOCAB["c"]]]
    env.step(np.array([VOCAB["c"]]))  # the observer has no stop string: it goes on to its length
    assert env.agent_selection == "observer"


def test_seat_generation_for_a_seat_the_seating_lacks_is_refused(tiny_tok):
    with pytest.raises(ValueError, match=r"names the seat\(s\) \['referee'\]"):
        BatchedCORYEnv(EnvConfig(task="imdb", seat_generation={"referee": {"max_new_tokens": 8}}), tiny_tok)


def test_a_prompt_too_long_in_the_seats_own_tokens_is_refused_naming_the_seat(word, bpe):
    # L = 8 fits every prompt counted in the first seat's tokens; "k p" (2 word tokens) is 3 BPE tokens
    env = BatchedCORYEnv(None, {"pioneer": word, "observer": bpe}, batch_size=1, task="relay", context_len=8)
    env.reset(seed=0)
    env.step(np.array([VOCAB["k"]]))
    with pytest.raises(ValueError, match=r"seat 'observer': its prompt, .* has 7 tokens, .* raise context_len to >= 9"):
        env.step(np.array([VOCAB["p"]]))


def test_a_query_longer_in_a_readers_own_tokens_is_cut_from_the_left_with_a_warning(word, bpe, caplog):
    # "i j k p": 4 word tokens, 8 byte-level ones; L = 12 fits it in the first seat's tokens, not in the observer's
    env = BatchedCORYEnv(None, {"pioneer": word, "observer": bpe}, batch_size=1, task="tiny_vocab", context_len=12)
    env.reset(seed=0, options={"queries": ["i j k p"]})
    with caplog.at_level("WARNING"):
        env.step(np.array([VOCAB["a"]]))
        env.step(np.array([VOCAB["b"]]))
    prompt = env._episode.prompt_ids["observer"][0]
    assert len(prompt) + 2 <= 12 and bpe.decode(prompt).endswith("p : a b ?")  # the query's last tokens kept
    assert "1 of 1 queries, encoded by its own tokenizer, cut from the left" in caplog.text


def _task_settings(name, imdb_csv, gsm8k_paths):
    """Env settings that build task `name` offline (its data from the shared files)."""
    return {"imdb": {"data_path": str(imdb_csv), "context_len": 64},
            "gsm8k": {"data_path": str(gsm8k_paths[1]), "context_len": 1024, "min_new_tokens": 2,
                      "max_new_tokens": 4}}.get(name, {"context_len": 16})


@pytest.mark.parametrize("name", ["chain_relay", "first_symbol", "gsm8k", "imdb", "relay", "tiny_vocab"])
def test_every_built_in_task_plays_with_a_tokenizer_per_seat(name, bpe, imdb_csv, gsm8k_paths):
    """A {seat: tokenizer} mapping on every built-in task (a population or a chain with a model of another
    tokenizer): each seat acts in its own vocabulary, under the task's mask for its tokenizer."""
    from cory_env.tasks import TASKS, task_tokenizer

    assert name in TASKS.names()
    own = task_tokenizer(name) or tiny_tokenizer(vocab_size=320)
    other = bpe if own is not bpe else tiny_tokenizer()
    seating = "chain:3" if name == "chain_relay" else "cory"
    config = EnvConfig(task=name, seating=seating, **_task_settings(name, imdb_csv, gsm8k_paths))
    seats = ("pioneer", "observer") if seating == "cory" else ("pioneer", "observer_1", "observer_2")
    tokenizers = dict(zip(seats, [own, other, own]))
    env = BatchedCORYEnv(config, tokenizers, batch_size=2)
    assert env.vocab_sizes == {s: len(t) for s, t in tokenizers.items()}
    task = env.task
    for seat, tok in tokenizers.items():
        mask = env.action_masks[seat][0]
        assert mask.shape == (len(tok),)
        if task.action_mask is not None and tok is other:
            np.testing.assert_array_equal(mask, task.action_mask_for(tok))
    transcript = _play(env)
    for seat, tok in tokenizers.items():
        assert all(0 <= t < len(tok) for r in transcript.seats[seat].response_ids for t in r)
