"""GSM8K task: the loader (local JSONL, hub), the task builder (config-driven lengths), rewards through the env."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cory_env.config import EnvConfig
from cory_env.tasks import gsm8k, make_task
from cory_env.tasks.gsm8k import (
    answers_match,
    build_pioneer_template,
    gsm8k_reward,
    load_gsm8k,
    make_gsm8k_task,
    parse_gold,
)


# ---------------------------------------------------------------------------------------------------- data


def _write_jsonl(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_loader_records_and_limit(tmp_path):
    path = _write_jsonl(tmp_path / "g.jsonl", [
        {"question": "Q1?", "answer": "1 + 1 = 2\n#### 2"},
        "",
        {"question": "Q2?", "answer": "#### 1,500"},
        {"question": "Q3?", "answer": "#### 3"},
    ])
    records = load_gsm8k(path)
    assert records[1] == {"query": "Q2?", "answer": "#### 1,500", "gold": "1500"}
    assert [r["gold"] for r in records] == ["2", "1500", "3"]
    assert len(load_gsm8k(str(path), limit=2)) == 2
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k(path, limit=0)


@pytest.mark.parametrize(
    ("bad_row", "match"),
    [
        ({"question": "Q?"}, "line 2: missing 'answer'"),
        ({"question": "Q?", "answer": "It is 4."}, "line 2: GSM8K answer has no '####'"),
        ({"answer": "#### 4"}, "line 2: missing or empty 'question'"),
        ("{not json", "line 2: not valid JSON"),
    ],
)
def test_loader_names_file_and_line(tmp_path, bad_row, match):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "ok?", "answer": "#### 1"}, bad_row])
    with pytest.raises(ValueError, match=match) as info:
        load_gsm8k(path)
    assert "bad.jsonl" in str(info.value)


def test_loader_missing_file_and_bad_hub_split(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match="data_path \\(GSM8K file\\) .*nope.jsonl' does not exist; pass a JSONL file"):
        load_gsm8k(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="'train' or 'test'"):
        load_gsm8k("hub:validation")


def test_loader_on_real_files(gsm8k_paths):
    train_path, test_path = gsm8k_paths
    train, test = load_gsm8k(train_path), load_gsm8k(test_path)
    assert (len(train), len(test)) == (7473, 1319)
    assert test[0]["gold"] == "18" and test[0]["query"].startswith("Janet")
    for record in train + test:
        assert record["gold"] == parse_gold(record["answer"])
        assert answers_match(record["gold"], record["answer"].rsplit("####", 1)[1])
        # the dataset's own solution scores as correct
        assert gsm8k_reward(record["answer"], record["answer"]) == 1.0


# ---------------------------------------------------------------------------------------------------- task


def test_issue_names_stay_importable():
    from cory_env.tasks.gsm8k import extract_answer, gsm8k_reward  # noqa: F401  (named by the issue)

    assert gsm8k.extract_answer("The answer is 7.") == "7"


def test_make_gsm8k_task(tmp_path, tiny_tok):
    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": "Q1?", "answer": "#### 2"}, {"question": "Q2?",
                                                                                        "answer": "#### 7"}])
    config = EnvConfig(task="gsm8k", data_path=str(path), min_new_tokens=64, max_new_tokens=64)
    task = make_gsm8k_task(config, tiny_tok, wrong_reward=-1.0)
    assert task.name == "gsm8k" and [r["gold"] for r in task.records] == ["2", "7"]
    assert (task.query_tokens, task.min_new_tokens, task.max_new_tokens, task.action_mask) == (None, 64, 64, None)
    assert task.pioneer_template == build_pioneer_template(tiny_tok)
    assert task.reward_fn(["Q1?", "Q2?"], ["The answer is 2", "8"], list(task.records)) == [1.0, -1.0]
    assert make_gsm8k_task(config, tiny_tok, min_new_tokens=1).min_new_tokens == 1  # keyword beats config
    assert make_gsm8k_task(config, tiny_tok, max_new_tokens=128).max_new_tokens == 128
    with pytest.raises(ValueError, match=r"^min_new_tokens=9 is invalid: use an integer in \[1, 8\]; at most "
                                         "max_new_tokens"):
        make_gsm8k_task(config, tiny_tok, max_new_tokens=8, min_new_tokens=9)
    with pytest.raises(ValueError, match="split"):
        make_gsm8k_task(config, tiny_tok, split="dev")



def test_registry_task_lengths_come_from_the_config(tmp_path, tiny_tok):
    from cory_env.batched_env import BatchedCORYEnv

    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": "Q1?", "answer": "#### 2"}])
    config = EnvConfig(task="gsm8k", data_path=str(path), min_new_tokens=100, max_new_tokens=200, context_len=800,
                       pioneer_template="Q: {query}\nA:")
    task = make_task("gsm8k", config, tiny_tok)
    assert (task.min_new_tokens, task.max_new_tokens) == (100, 200)
    assert task.pioneer_template == "Q: {query}\nA:"  # config templates replace the built-in ones
    env = BatchedCORYEnv(config, tiny_tok, batch_size=1)  # task by name, built through the registry
    assert env.task.max_new_tokens == 200


def test_gsm8k_quick_preset_drives_the_task(tmp_path, tiny_tok):
    from trainers.config.presets import preset

    settings = preset("gsm8k-quick")
    env_fields = {k: v for k, v in settings.items() if k in EnvConfig.__dataclass_fields__}
    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": "Q1?", "answer": "#### 2"}])
    task = make_task("gsm8k", EnvConfig(**{**env_fields, "data_path": str(path)}), tiny_tok)
    assert settings["task"] == "gsm8k" and (task.min_new_tokens, task.max_new_tokens) == (256, 256)


def test_hub_split_fails_fast_offline(monkeypatch, tiny_tok):
    import datasets

    def must_not_run(*args, **kwargs):
        raise AssertionError("load_dataset called although the hub is unreachable")

    monkeypatch.setattr(datasets, "load_dataset", must_not_run)
    monkeypatch.setattr(gsm8k, "hub_reachable", lambda **_: False)
    with pytest.raises(ConnectionError, match=r"--data_path \$CORY_SHARED_DATA/gsm8k_test.jsonl"):
        load_gsm8k("hub:test")
    with pytest.raises(ConnectionError, match=r"gsm8k_train.jsonl"):
        make_task("gsm8k", EnvConfig(task="gsm8k", data_path=None), tiny_tok)

def _play(env, scripts):
    """Drive one phase: row i emits the token ids of scripts[i] then EOS (later actions are ignored)."""
    seat, eos = env.agent_selection, env.tokenizer.eos_token_id
    ids = [env.tokenizer.encode(text, add_special_tokens=False) + [eos] for text in scripts]
    t = 0
    while env.agent_selection == seat:
        actions = np.array([row[t] if t < len(row) else eos for row in ids], dtype=np.int64)
        out = env.step(actions)
        t += 1
    return out


def test_reward_through_the_env(gsm8k_paths, tiny_tok):
    from cory_env.batched_env import BatchedCORYEnv

    _, test_path = gsm8k_paths
    config = EnvConfig(task="gsm8k", data_path=str(test_path), context_len=1024, min_new_tokens=32,
                       max_new_tokens=32)
    # one problem (Janet's ducks, gold 18) so every row plays it; format reward on
    task = make_gsm8k_task(config, tiny_tok, one_shot=False, limit=1, format_reward=0.1)
    env = BatchedCORYEnv(config, tiny_tok, batch_size=3, task=task)
    obs, info = env.reset(seed=0)
    assert info["query_text"][0].startswith("Janet")
    assert tiny_tok.decode(obs["input_ids"][0][obs["attention_mask"][0] == 1]).endswith("market?\nAnswer:")
    _play(env, [" 9 * 2 = 18. The answer is 18.", " I think 5", " The answer is $1,8"])
    _, rewards, terminations, _, infos = _play(env, [" The answer is 17", " #### 18", " 18 dollars"])
    transcript = env.transcript()
    observer_prompt = tiny_tok.decode(transcript.seats["observer"].prompt_ids[1])
    assert "Reference solution:  I think 5\n\nAnswer:" in observer_prompt  # knowledge transfer, EOS stripped
    np.testing.assert_allclose(infos["pioneer"]["task_reward"], [1.1, 0.0, 0.1])
    np.testing.assert_allclose(infos["observer"]["task_reward"], [0.1, 1.0, 1.0])
    np.testing.assert_allclose(rewards["pioneer"], [1.2, 1.0, 1.1])
    np.testing.assert_allclose(rewards["observer"], rewards["pioneer"])
    assert all(terminations["observer"]) and transcript.records[0]["gold"] == "18"


def test_hub_loader_calls_datasets(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"question": "Q?", "answer": "#### 1,000"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(gsm8k, "hub_reachable", lambda **_: True)
    assert load_gsm8k("hub:test", limit=5) == [{"query": "Q?", "answer": "#### 1,000", "gold": "1000"}]
    load_gsm8k("hub:train")
    assert calls == [("openai/gsm8k", "main", "test[:5]"), ("openai/gsm8k", "main", "train")]


@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_chat_prompts_fit_the_env(gsm8k_paths, smollm2_tokenizer):
    from cory_env.batched_env import BatchedCORYEnv
    from cory_env.prompts import PromptTemplate

    tok = smollm2_tokenizer
    # longest test question: 188 SmolLM2 tokens; observer literal text ~89 tokens + 2 * 256 response tokens
    config = EnvConfig(task="gsm8k", data_path=str(gsm8k_paths[1]), context_len=800, truncate_query=False,
                       min_new_tokens=256, max_new_tokens=256)
    task = make_gsm8k_task(config, tok, split="test")
    assert task.pioneer_template.startswith("<|im_start|>") and task.pioneer_template.endswith("assistant\n")
    longest = max(len(tok.encode(r["query"], add_special_tokens=False)) for r in task.records)
    observer = PromptTemplate(task.observer_template, tok, required=("query", "response"))
    assert longest == 188 and observer.prompt_len(longest, 256) + 256 <= 800  # every test question fits
    env = BatchedCORYEnv(config, tok, batch_size=2, task=task)
    obs, _ = env.reset(seed=0)
    prompt = tok.decode(obs["input_ids"][0][obs["attention_mask"][0] == 1])
    assert prompt.endswith("<|im_start|>assistant\n") and "The answer is 12." in prompt
    eos = np.full(2, tok.eos_token_id, dtype=np.int64)
    while not env.done:
        _, rewards, *_ = env.step(eos)
    np.testing.assert_array_equal(rewards["pioneer"], [0.0, 0.0])  # empty answers earn nothing
