"""AEC env: PettingZoo API and seeding, a scripted episode checked by hand, ablation and reward-coefficient rules."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from cory_env import EnvConfig, Task, env, raw_env
from cory_env.tasks.imdb import OBSERVER_TEMPLATE as IMDB_OBSERVER_TEMPLATE

from .conftest import char_count_reward

pytestmark = pytest.mark.filterwarnings("ignore:We recommend agents to be named:UserWarning")


def test_api(tiny_env_kwargs):
    api_test(env(**tiny_env_kwargs), num_cycles=200)


def test_seed(tiny_env_kwargs):
    seed_test(lambda: env(**tiny_env_kwargs), num_cycles=200)


def test_api_with_action_mask_and_no_knowledge_transfer(tiny_tok):
    mask = np.ones(len(tiny_tok), dtype=np.int8)
    mask[1:100] = 0
    task = Task(name="masked", records=[{"query": "A film"}], reward_fn=char_count_reward,
                observer_template=IMDB_OBSERVER_TEMPLATE, action_mask=mask)
    api_test(env(tokenizer=tiny_tok, task=task, knowledge_transfer=False), num_cycles=200)


def test_spaces_and_observation_contract(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, context_len=64)
    aec.reset(seed=3)
    V = len(tiny_tok)
    for seat in aec.possible_agents:
        assert aec.observation_space(seat) is aec.observation_space(seat)
        assert aec.action_space(seat) is aec.action_space(seat) and aec.action_space(seat).n == V
    obs = aec.observe("pioneer")
    assert {k: (v.shape, v.dtype) for k, v in obs.items()} == {
        "input_ids": ((64,), np.int64), "attention_mask": ((64,), np.int64), "action_mask": ((V,), np.int8)}
    assert not obs["input_ids"].flags.writeable and not obs["action_mask"].flags.writeable
    aec.step(5)
    assert aec.observe("pioneer")["action_mask"] is obs["action_mask"]  # one shared array, no per-step copy
    # the observer's window is empty until its turn
    assert aec.observe("observer")["attention_mask"].sum() == 0


def _ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_scripted_episode_by_hand(tiny_tok):
    eos, pad = tiny_tok.eos_token_id, tiny_tok.pad_token_id
    x, a, b, c = (tiny_tok.convert_tokens_to_ids(t) for t in "xabc")
    query = _ids(tiny_tok, "The movie")
    aec = raw_env(tokenizer=tiny_tok, reward_fn=char_count_reward, min_new_tokens=3, max_new_tokens=3,
                  context_len=48)
    aec.reset(seed=0, options={"query": query})
    L, Q = 48, len(query)

    obs, reward, term, trunc, info = aec.last()
    assert aec.agent_selection == "pioneer" and (reward, term, trunc, info) == (0.0, False, False, {})
    assert obs["input_ids"][-Q:].tolist() == query and (obs["input_ids"][:-Q] == pad).all()
    assert obs["attention_mask"].tolist() == [0] * (L - Q) + [1] * Q

    aec.step(x)  # the window shifts left by one column
    obs = aec.observe("pioneer")
    assert obs["input_ids"][-Q - 1:].tolist() == query + [x] and obs["attention_mask"].sum() == Q + 1
    assert aec.agent_selection == "pioneer" and aec.rewards == {"pioneer": 0.0, "observer": 0.0}
    aec.step(eos)  # EOS ends the pioneer's response after 2 of its 3 tokens
    assert aec.agent_selection == "observer"

    prompt = (_ids(tiny_tok, 'I can make this sentence "') + query + [x]
              + _ids(tiny_tok, '" more positive: ') + query)  # a1 spliced without its EOS
    obs = aec.observe("observer")
    assert obs["input_ids"][-len(prompt):].tolist() == prompt and obs["attention_mask"].sum() == len(prompt)
    assert aec.observe("pioneer")["input_ids"][-Q - 2:].tolist() == query + [x, eos]

    aec.step(a)
    aec.step(b)
    assert not any(aec.terminations.values())
    aec.step(c)  # the observer reaches max_new_tokens = 3: the episode ends
    # r1 = len("x") = 1, r2 = len("abc") = 3; both seats get r1 + r2 = 4
    assert aec.terminations == {"pioneer": True, "observer": True}
    assert aec.rewards == {"pioneer": 4.0, "observer": 4.0}
    assert aec.infos["pioneer"] == {"task_reward": 1.0, "response_text": "x", "response_len": 2}
    assert aec.infos["observer"] == {"task_reward": 3.0, "response_text": "abc", "response_len": 3}
    assert aec.render() is None  # no render_mode

    seen = []
    for agent in aec.agent_iter():  # each finished seat is dead-stepped with None
        _, reward, term, _, _ = aec.last()
        seen.append((agent, reward, term))
        aec.step(None)
    assert seen == [("pioneer", 4.0, True), ("observer", 4.0, True)] and aec.agents == []

    transcript = aec.transcript()
    assert transcript.seats["observer"].prompt_ids[0] == prompt
    assert transcript.seats["pioneer"].response_ids[0] == [x, eos]
    assert transcript.query_text == ["The movie"]


@pytest.mark.parametrize(("coef", "expected"), [(1.0, (4.0, 4.0)), (-1.0, (-2.0, 2.0)), (0.0, (1.0, 3.0))])
def test_partner_reward_coef(tiny_tok, coef, expected):
    x, a, b, c = (tiny_tok.convert_tokens_to_ids(t) for t in "xabc")
    aec = raw_env(tokenizer=tiny_tok, reward_fn=char_count_reward, min_new_tokens=3, max_new_tokens=3,
                  partner_reward_coef=coef)
    aec.reset(seed=0, options={"query": "Good"})
    for action in (x, tiny_tok.eos_token_id, a, b, c):
        aec.step(action)
    assert (aec.rewards["pioneer"], aec.rewards["observer"]) == expected
    assert (aec.infos["pioneer"]["task_reward"], aec.infos["observer"]["task_reward"]) == (1.0, 3.0)


def test_without_knowledge_transfer_observer_sees_the_query_alone(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, knowledge_transfer=False, min_new_tokens=2, max_new_tokens=2)
    aec.reset(seed=1)
    pioneer_prompt = aec.observe("pioneer")["input_ids"].copy()
    aec.step(7)
    aec.step(8)
    assert aec.agent_selection == "observer"
    np.testing.assert_array_equal(aec.observe("observer")["input_ids"], pioneer_prompt)
    transcript_prompt = aec._episode.prompt_ids
    assert transcript_prompt["observer"] == transcript_prompt["pioneer"]


def test_reset_draws_imdb_style_queries(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, render_mode="ansi")
    lengths = set()
    for seed in range(30):
        aec.reset(seed=seed)
        n = len(aec._episode.query_ids[0])
        assert 2 <= n <= 7
        assert aec.observe("pioneer")["attention_mask"].sum() == n
        lengths.add(n)
    assert len(lengths) > 2  # query length drawn per episode
    text = aec.render()
    assert text.startswith("query: ") and "pioneer: ''" in text


def test_response_length_drawn_per_episode_and_shared(tiny_tok):
    aec = raw_env(tokenizer=tiny_tok, min_new_tokens=4, max_new_tokens=15)
    observed = set()
    for seed in range(25):
        aec.reset(seed=seed)
        counts = {"pioneer": 0, "observer": 0}
        while not aec.terminations["observer"]:
            counts[aec.agent_selection] += 1
            aec.step(5)  # never EOS: each response runs to the episode's length
        assert counts["pioneer"] == counts["observer"]
        observed.add(counts["pioneer"])
    assert min(observed) >= 4 and max(observed) <= 15 and len(observed) > 3


def test_config_object_and_keyword_override(tiny_tok):
    aec = raw_env(EnvConfig(max_new_tokens=9), tokenizer=tiny_tok, context_len=64)
    assert (aec.config.max_new_tokens, aec.config.context_len) == (9, 64)
    assert aec.observation_space("pioneer")["input_ids"].shape == (64,)


def test_query_cuts_never_split_a_character(tiny_tok):
    """The first-k-tokens query and the left-truncated query end (and start) on character boundaries:
    no U+FFFD in the query text the reward and samples.jsonl see, for any drawn k."""
    from cory_env.episode import EpisodeBatch

    text = "😀é naïve film 😀😀 très bien"
    assert "\ufffd" in tiny_tok.decode(tiny_tok.encode(text, add_special_tokens=False)[:2])  # the trap is real
    task = Task(name="t", records=[{"query": text}], reward_fn=char_count_reward,
                observer_template=IMDB_OBSERVER_TEMPLATE, query_tokens=(1, 12), min_new_tokens=1, max_new_tokens=2)
    batch = EpisodeBatch(task, tiny_tok, batch_size=16, context_len=128)
    for seed in range(5):
        batch.reset(seed=seed * 16)
        for q in batch.query_text:
            assert "\ufffd" not in q and q and text.startswith(q), q
    small = EpisodeBatch(task, tiny_tok, batch_size=2, context_len=62)  # room for a few query tokens only
    small.reset(queries=[text, "ab 😀é😀é😀é😀é😀é"])
    for q, full in zip(small.query_text, [text, "ab 😀é😀é😀é😀é😀é"]):
        assert "\ufffd" not in q and q and full.endswith(q), q


@pytest.mark.parametrize("kind", ["alias", "folder"])
def test_env_takes_the_project_model_names_as_tokenizer_offline(monkeypatch, tmp_path, tiny_tok, kind):
    """The env resolves a tokenizer name like every other entry point (alias, folder, .gguf, hub id),
    offline: the alias's converted copy in the cache is used, the hub is never asked."""
    from cory_env.hub import DEFAULT_MODEL

    folder = tmp_path / DEFAULT_MODEL
    tiny_tok.save_pretrained(folder)
    (folder / "config.json").write_text("{}")  # a converted alias folder holds the model's config too
    monkeypatch.setenv("CORY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    e = env(task="imdb", tokenizer=DEFAULT_MODEL if kind == "alias" else str(folder))
    e.reset(seed=0)
    assert e.action_space("pioneer").n == len(tiny_tok)
