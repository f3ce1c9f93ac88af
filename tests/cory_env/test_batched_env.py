"""Batched env: equivalence with B AEC envs, lock-step windows, returned arrays."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cory_env import BatchedCORYEnv, EnvConfig, raw_env
from cory_env.seating import SEATS, Seating, seat_names

from .conftest import char_count_reward

B, SEED = 8, 11


def _action_tables(vocab: int, eos: int, max_new: int, seats=SEATS) -> dict[str, np.ndarray]:
    """Per seat an int (B, max_new) table: row i's k-th token; about 1 in 6 is EOS."""
    rng = np.random.default_rng(123)
    tables = {}
    for seat in seats:
        table = rng.integers(1, vocab, size=(B, max_new))
        table[rng.random((B, max_new)) < 0.17] = eos
        tables[seat] = table
    return tables


@pytest.mark.parametrize(("reward", "seats"), [("vader", 2), ("chars", 2), ("chars", 1), ("chars", 3), ("chars", 4)])
def test_batched_equals_aec_envs(tiny_tok, reward, seats):
    """Row i of a B-row batch = an AEC env reset with stream_offset i, for seatings of 1 to 4 seats."""
    reward_fn = char_count_reward if reward == "chars" else None
    config = EnvConfig(max_new_tokens=9, min_new_tokens=2, seating=f"chain:{seats}", partner_reward_coef=0.5)
    names = seat_names(seats)
    tables = _action_tables(len(tiny_tok), tiny_tok.eos_token_id, config.max_new_tokens, names)

    benv = BatchedCORYEnv(config, tiny_tok, batch_size=B, reward_fn=reward_fn)
    assert benv.possible_agents == list(names)
    obs, info = benv.reset(seed=SEED)
    first_obs = {}
    for seat in names:
        assert benv.agent_selection == seat
        first_obs[seat] = {k: v.copy() for k, v in obs.items()}
        step = 0
        while benv.agent_selection == seat:
            obs, rewards, terminations, truncations, infos = benv.step(tables[seat][:, step])
            step += 1
    assert benv.done
    batched = benv.transcript()
    assert all(terminations[s].all() for s in names) and not any(truncations[s].any() for s in names)

    for i in range(B):
        aec = raw_env(config, tokenizer=tiny_tok, reward_fn=reward_fn)
        aec.reset(seed=SEED, options={"stream_offset": i})
        counts = dict.fromkeys(names, 0)
        for seat in names:
            assert aec.agent_selection == seat
            seat_obs = aec.observe(seat)
            for key in ("input_ids", "attention_mask"):
                np.testing.assert_array_equal(seat_obs[key], first_obs[seat][key][i])
            while aec.agent_selection == seat and not aec.terminations[seat]:
                aec.step(int(tables[seat][i, counts[seat]]))
                counts[seat] += 1
        single = aec.transcript()
        assert single.query_ids[0] == batched.query_ids[i]
        assert single.query_text[0] == batched.query_text[i]
        for seat in names:
            got, want = single.seats[seat], batched.seats[seat]
            assert got.prompt_ids[0] == want.prompt_ids[i]
            assert got.response_ids[0] == want.response_ids[i]
            assert got.response_text[0] == want.response_text[i]
            assert got.task_reward[0] == want.task_reward[i]
            assert aec.rewards[seat] == rewards[seat][i] == want.reward[i]
            assert aec.infos[seat]["response_len"] == infos[seat]["response_len"][i]


def _rows(transcript) -> list[tuple]:
    """Each row's (query ids, response-length budget proxy: its record) as a hashable key."""
    return [(tuple(q), r["query"]) for q, r in zip(transcript.query_ids, transcript.records)]


def test_neighbouring_seeds_draw_independent_query_streams(tiny_tok, imdb_csv):
    # With `seed + row` seeding, row i of seed s was row i + 1 of seed s - 1 (63 of 64 shared)
    config = EnvConfig(data_path=str(imdb_csv), min_new_tokens=1, max_new_tokens=1)
    env = BatchedCORYEnv(config, tiny_tok, batch_size=64, seating="ppo")
    played = []
    for seed in (10_000, 10_001):
        env.reset(seed=seed)
        while not env.done:
            env.step(np.zeros(64, dtype=np.int64))
        played.append(env.transcript())
    a, b = (set(_rows(t)) for t in played)
    shifted = sum(x == y for x, y in zip(_rows(played[0])[1:], _rows(played[1])[:-1]))
    # independent draws of 64 from ~800 reviews x 6 query lengths share a handful of rows at most
    assert len(a & b) <= 4 and shifted <= 2


def test_stream_offset_plays_the_rows_of_a_larger_batch(tiny_tok):
    config = EnvConfig(min_new_tokens=1, max_new_tokens=1)
    big = BatchedCORYEnv(config, tiny_tok, batch_size=8, seating="ppo", group_size=2)
    part = BatchedCORYEnv(config, tiny_tok, batch_size=4, seating="ppo", group_size=2)
    transcripts = []
    for env, options in ((big, {}), (part, {"stream_offset": 2})):
        env.reset(seed=3, options=options)
        while not env.done:
            env.step(np.zeros(env.batch_size, dtype=np.int64))
        transcripts.append(env.transcript())
    assert transcripts[1].query_ids == transcripts[0].query_ids[4:]
    with pytest.raises(ValueError, match="group_size=3; pass a group_size that divides batch_size"):
        BatchedCORYEnv(config, tiny_tok, batch_size=4, seating="ppo", group_size=3)  # the group size at construction
    with pytest.raises(ValueError, match="stream_offset=-1 is invalid: use an integer >= 0"):
        part.reset(seed=3, options={"stream_offset": -1})
    with pytest.raises(ValueError, match="seed=-3 is invalid: use an integer >= 0"):
        part.reset(seed=-3)


def test_lock_step_windows_and_padding(tiny_tok):
    eos, pad = tiny_tok.eos_token_id, tiny_tok.pad_token_id
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, min_new_tokens=4, max_new_tokens=4, context_len=40)
    obs, _ = benv.reset(seed=0, options={"queries": ["Good", "A bad film"]})
    assert obs["input_ids"].shape == (2, 40) and obs["action_mask"].shape == (2, len(tiny_tok))
    prev = obs["input_ids"].copy()
    obs, rewards, terminations, _, infos = benv.step(np.array([eos, 9]))  # row 0 ends at once
    assert benv.active.tolist() == [False, True] and benv.agent_selection == "pioneer"
    np.testing.assert_array_equal(obs["input_ids"][:, :-1], prev[:, 1:])  # KV-cache contract
    assert obs["input_ids"][:, -1].tolist() == [eos, 9]
    assert rewards["pioneer"].tolist() == [0.0, 0.0] and not terminations["observer"].any() and infos["pioneer"] == {}
    obs, *_ = benv.step(np.array([9, 10]))  # row 0's action is ignored: pad, mask 0
    assert obs["input_ids"][0, -1] == pad and obs["attention_mask"][0, -1] == 0
    assert obs["input_ids"][1, -1] == 10 and obs["attention_mask"][1, -1] == 1
    for _ in range(2):
        obs, *_ = benv.step(np.array([-5, 11]))  # out-of-range ids are fine in finished rows
    assert benv.agent_selection == "observer" and benv.active.all()
    transcript_p = benv._episode.response_ids("pioneer")
    assert transcript_p == [[eos], [9, 10, 11, 11]]


def test_returned_arrays_are_read_only_and_stable(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=3, reward_fn=char_count_reward)
    obs, _ = benv.reset(seed=5)
    kept = obs["input_ids"]
    snapshot = kept.copy()
    with pytest.raises(ValueError):
        kept[0, 0] = 1
    while not benv.done:
        obs, rewards, *_ = benv.step(np.full(3, 7))
    np.testing.assert_array_equal(kept, snapshot)  # write-once buffers: old views stay valid
    with pytest.raises(ValueError):
        rewards["pioneer"][0] = 1.0
    benv.reset(seed=5)
    np.testing.assert_array_equal(kept, snapshot)  # a reset allocates new buffers


def test_seeding_continues_without_seed(tiny_tok):
    a = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=4)
    b = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=4)
    a.reset(seed=1)
    b.reset(seed=1)
    first = a._episode.query_ids
    a_obs, _ = a.reset()
    b_obs, _ = b.reset()
    np.testing.assert_array_equal(a_obs["input_ids"], b_obs["input_ids"])
    assert a._episode.query_ids != first  # the generators moved on


def test_transcript_before_done_raises(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2)
    benv.reset(seed=0)
    with pytest.raises(RuntimeError, match="finished episode"):
        benv.transcript()


def test_single_agent_mode_ends_after_the_pioneer(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, reward_fn=char_count_reward, seating="ppo",
                          min_new_tokens=2, max_new_tokens=2, partner_reward_coef=-1.0)
    assert benv.possible_agents == ["pioneer"] and benv.pad_token_id == tiny_tok.pad_token_id
    x = tiny_tok.convert_tokens_to_ids("x")
    benv.reset(seed=0)
    benv.step(np.array([x, tiny_tok.eos_token_id]))
    obs, rewards, terminations, _, infos = benv.step(np.array([x, x]))
    assert benv.done and benv.agent_selection is None and list(rewards) == ["pioneer"]
    np.testing.assert_array_equal(rewards["pioneer"], [2.0, 0.0])  # own task reward, no partner term
    assert terminations["pioneer"].all() and infos["pioneer"]["response_text"] == ["xx", ""]
    transcript = benv.transcript()
    assert list(transcript.seats) == ["pioneer"]
    assert transcript.seats["pioneer"].response_ids == [[x, x], [tiny_tok.eos_token_id]]


def _bos_tokenizer():
    """The tiny tokenizer with a post-processor that puts EOS (id 0) before every encoded text, as Llama-style
    tokenizers put BOS: queries must be encoded without it."""
    from tokenizers.processors import TemplateProcessing

    from agents.tiny import TINY_EOS, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.backend_tokenizer.post_processor = TemplateProcessing(single=f"{TINY_EOS} $A",
                                                              special_tokens=[(TINY_EOS, 0)])
    assert tok.encode("Hi")[0] == 0 and tok.encode("Hi", add_special_tokens=False)[0] != 0
    return tok


@pytest.mark.parametrize("query_tokens", [(1, 1), (3, 3), (100, 100)])
def test_record_queries_keep_the_first_k_tokens_without_special_tokens(query_tokens):
    from cory_env import Task

    tok = _bos_tokenizer()
    text = "Hello world, a fine film."
    plain = tok.encode(text, add_special_tokens=False)  # all ASCII: every cut is on a character boundary
    task = Task(name="t", records=[{"query": text}], reward_fn=char_count_reward,
                observer_template="{query}{response}", query_tokens=query_tokens)
    benv = BatchedCORYEnv(tokenizer=tok, batch_size=1, task=task, context_len=160)
    benv.reset(seed=0)
    k = min(query_tokens[0], len(plain))  # (100, 100) is longer than the text: all of it
    assert benv._episode.query_ids[0] == plain[:k]


def test_explicit_text_queries_carry_no_special_tokens():
    tok = _bos_tokenizer()
    benv = BatchedCORYEnv(tokenizer=tok, batch_size=1)
    benv.reset(seed=0, options={"queries": ["Hi there"]})
    assert benv._episode.query_ids[0] == tok.encode("Hi there", add_special_tokens=False)


def test_a_record_query_cut_inside_a_character_takes_the_whole_character(tiny_tok):
    from cory_env import Task

    text = "\u00e9t\u00e9 is nice"  # é is 2 byte-level tokens: a 1-token cut would split it
    ids = tiny_tok.encode(text, add_special_tokens=False)
    assert tiny_tok.decode(ids[:1]).endswith("\ufffd")
    task = Task(name="t", records=[{"query": text}], reward_fn=char_count_reward,
                observer_template="{query}{response}", query_tokens=(1, 1))
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1, task=task, context_len=160)
    benv.reset(seed=0)
    # no clean cut at or below 1 token: the smallest clean cut above it, the whole first character
    assert benv._episode.query_ids[0] == ids[:2] and benv._episode.query_text[0] == "\u00e9"


def test_left_truncation_never_starts_inside_a_character(tiny_tok, caplog):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1, context_len=64, min_new_tokens=2, max_new_tokens=2)
    budget = benv._episode.query_budget
    # é is 2 byte-level tokens: one of these two texts puts the plain cut (the last `budget` tokens) on its 2nd byte
    for text in ("\u00e9" * budget, "a" + "\u00e9" * budget):
        ids = tiny_tok.encode(text, add_special_tokens=False)
        if tiny_tok.decode(ids[len(ids) - budget:]).startswith("\ufffd"):
            break
    else:
        pytest.fail("no text with a cut inside a character")
    benv.reset(seed=0, options={"queries": [text]})
    kept = benv._episode.query_ids[0]
    # one token fewer than the budget: the lone continuation byte is dropped, the rest are whole characters
    assert kept == ids[len(ids) - budget + 1:]
    assert benv._episode.query_text[0] == "\u00e9" * ((budget - 1) // 2)


def test_explicit_queries_become_their_records(tiny_tok):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, context_len=48, min_new_tokens=2, max_new_tokens=2)
    long_text = "word " * 60  # longer than the context allows: the query is cut, the record keeps the text
    ids = tiny_tok.encode("Hi there", add_special_tokens=False)
    benv.reset(seed=0, options={"queries": [long_text, ids]})
    records = benv._episode.records
    assert records[0] == {"query": long_text} and benv._episode.query_text[0] != long_text
    assert records[1] == {"query": "Hi there"}  # token ids: the record holds their text


def test_a_bool_action_mask_is_stored_as_int8(tiny_tok):
    from cory_env import Task

    allowed = np.ones(len(tiny_tok), dtype=bool)
    allowed[5] = False
    task = Task(name="t", records=[{"query": "Hi"}], reward_fn=char_count_reward,
                observer_template="{query}{response}", action_mask=allowed)
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1, task=task)
    mask = benv._episode.action_mask
    assert mask.dtype == np.int8 and mask.shape == (len(tiny_tok),) and mask[5] == 0 and mask.sum() == len(tiny_tok) - 1


def test_a_task_object_takes_the_config_templates_and_a_mask_must_match_the_vocabulary(tiny_tok):
    from cory_env import Task
    from cory_env.episode import EpisodeBatch

    task = Task(name="t", records=[{"query": "Hi"}], reward_fn=char_count_reward, observer_template="{query}{response}")
    config = EnvConfig(pioneer_template="Review: {query}", observer_template="Q {query} A {response} B")
    batch = EpisodeBatch.from_config(config, tiny_tok, task=task)
    assert batch.prompts["pioneer"].template == "Review: {query}"
    assert batch.prompts["observer"].template == "Q {query} A {response} B"
    kept = EpisodeBatch.from_config(EnvConfig(), tiny_tok, task=task)  # no config templates: the task's own
    assert kept.prompts["observer"].template == "{query}{response}"
    wide = Task(name="w", records=[{"query": "Hi"}], reward_fn=char_count_reward,
                observer_template="{query}{response}", action_mask=np.ones(len(tiny_tok) + 1, dtype=np.int8))
    with pytest.raises(ValueError, match=r"^task 'w': action_mask has shape \(385,\), expected \(V,\) = \(384,\) "
                                         r"for this tokenizer$"):
        EpisodeBatch.from_config(EnvConfig(), tiny_tok, task=wide)
    with pytest.raises(TypeError, match=r"^task must be a task name or a Task, got int$"):
        EpisodeBatch.from_config(EnvConfig(), tiny_tok, task=3)


def _task(**fields):
    from cory_env import Task

    return Task(**{"name": "t", "records": [{"query": "Hi"}], "reward_fn": char_count_reward,
                   "observer_template": "{query}{response}", **fields})


def test_episode_batch_defaults(tiny_tok):
    from cory_env.episode import EpisodeBatch

    task = _task(observer_template="Q {query} A {response} B")
    batch = EpisodeBatch(task, tiny_tok)
    assert (batch.batch_size, batch.context_len) == (1, 128) and batch.seating == Seating.cory()
    assert batch.seats == ("pioneer", "observer") and batch.truncate_query is True
    assert batch.prompts["observer"].template == "Q {query} A {response} B"  # knowledge transfer on
    assert EpisodeBatch.from_config(EnvConfig(), tiny_tok, task=task).batch_size == 1


@pytest.mark.parametrize("batch_size", [0, -2, "2", 2.5, True])
def test_batch_size_must_be_a_positive_int(tiny_tok, batch_size):
    from cory_env.episode import EpisodeBatch

    with pytest.raises(ValueError, match=f"^batch_size={re.escape(repr(batch_size))} is invalid: use "):
        EpisodeBatch(_task(), tiny_tok, batch_size=batch_size)


@pytest.mark.parametrize(("query_tokens", "truncate"), [(None, False), (None, True), ((3, 5), True)])
def test_the_context_must_hold_the_shortest_query(tiny_tok, query_tokens, truncate):
    """Templates "{query}" / "{query}{response}", T = 2: a query of q tokens needs q + 2 + 2 tokens (the observer's
    prompt holds the query and the pioneer's response, then its own response). The shortest query: query_tokens'
    minimum; with whole queries and truncate_query=False the shortest record's (no query could be used: refused at
    construction, not at the first reset); with truncation one token (a long query is cut, with a warning)."""
    from cory_env.episode import EpisodeBatch

    queries = ["Hello there, friend", "Hi"]
    shortest = query_tokens[0] if query_tokens else 1 if truncate else min(
        len(tiny_tok.encode(q, add_special_tokens=False)) for q in queries)
    assert shortest > 1 or truncate
    task = _task(pioneer_template="{query}", query_tokens=query_tokens, min_new_tokens=2, max_new_tokens=2,
                 records=[{"query": q} for q in queries])
    assert EpisodeBatch(task, tiny_tok, context_len=shortest + 4, truncate_query=truncate).query_budget == shortest
    with pytest.raises(ValueError, match=f"^context_len={shortest + 3} is too small: the longest prompt \\(template "
                                         f"\\+ {shortest}-token query \\+ the responses it reads\\) plus "
                                         f"max_new_tokens=2 needs {shortest + 4} tokens"):
        EpisodeBatch(task, tiny_tok, context_len=shortest + 3, truncate_query=truncate)


def test_a_prompt_without_the_query_only_has_to_fit_itself(tiny_tok):
    """The relay layout: the observer sees the pioneer's response, not the query (a private query: the task's
    response_only_template "{response}", T = 2: 2 + 2 tokens). Its prompt puts no bound on the query; the pioneer's
    ("{query}": q + 2) does."""
    from cory_env.episode import EpisodeBatch

    task = _task(pioneer_template="{query}", response_only_template="{response}", private_query=True,
                 min_new_tokens=2, max_new_tokens=2)
    assert EpisodeBatch(task, tiny_tok, context_len=4).query_budget == 2  # observer: exactly enough
    with pytest.raises(ValueError, match="^context_len=3 is too small"):
        EpisodeBatch(task, tiny_tok, context_len=3)  # observer: one token short (the pioneer's budget would be 1)


def test_query_text_leaves_out_special_tokens(tiny_tok):
    hi, yo = (tiny_tok.encode(t, add_special_tokens=False) for t in ("Hi", " yo"))
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=1)
    benv.reset(seed=0, options={"queries": [[*hi, tiny_tok.eos_token_id, *yo]]})
    assert benv._episode.query_text == ["Hi yo"] and benv._episode.records == [{"query": "Hi yo"}]


@pytest.mark.parametrize(("budget", "text"), [(1, "a\u00e9"), (2, "a\u20ac")])
def test_left_truncation_keeps_at_least_one_token(tiny_tok, budget, text):
    """When no suffix of `budget` tokens or fewer starts on a character boundary (é is 2 byte tokens, € is 3), the
    cut moves right up to the last token and keeps it: a query is never empty. Templates "{query}" and
    "{query}{response}" with T = 2 give a budget of context_len - 4 tokens."""
    from cory_env.episode import EpisodeBatch

    ids = tiny_tok.encode(text, add_special_tokens=False)
    assert len(tiny_tok.encode("a", add_special_tokens=False)) == 1  # the task's own query fits the budget whole
    task = _task(pioneer_template="{query}", min_new_tokens=2, max_new_tokens=2, records=[{"query": "a"}])
    batch = EpisodeBatch(task, tiny_tok, context_len=budget + 4)
    assert batch.query_budget == budget
    batch.reset(seed=0, queries=[text])
    assert batch.query_ids == [ids[-1:]]
