"""GSM8K task: answer extraction, reward, pass@k, the loader, the prompt builders and the task."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cory_env.tasks import gsm8k
from cory_env.tasks.gsm8k import (
    answers_match,
    build_observer_template,
    build_pioneer_template,
    extract_answer,
    gsm8k_reward,
    gsm8k_reward_fn,
    load_gsm8k,
    parse_gold,
    pass_at_k,
    pass_at_k_first,
    pass_at_k_table,
)

# (completion, expected extracted number); None = no number.
EXTRACTION_CASES = [
    ("The answer is 42", "42"),
    ("the answer is 42.", "42"),
    ("The answer is: 7", "7"),
    ("THE ANSWER IS 9", "9"),
    ("The answer is $1,000.00.", "1000"),
    ("The answer is **42**", "42"),
    ("**42**", "42"),
    ("The answer is 42%", "42"),
    ("She has 42 apples.", "42"),
    ("The answer is 3.50", "3.5"),
    ("The answer is 0.5", "0.5"),
    ("It costs .75 dollars", "0.75"),
    ("The answer is -5", "-5"),
    ("The temperature is -12 degrees", "-12"),
    ("The answer is -$5", "-5"),
    ("10 - 5 = 5", "5"),
    ("10-5", "5"),
    ("So 3 + 4 = 7 and 7 * 2 = 14", "14"),
    ("1,2,3", "3"),
    ("The total is 1,234,567", "1234567"),
    ("no number here", None),
    ("", None),
    ("#### 18", "18"),
    ("3 * 6 = 18\n#### 18\nsome trailing 5", "18"),
    ("The answer is 5. Wait, the answer is 6 apples.", "6"),
    ("The answer is 5. So the answer is wrong.", "5"),
    ("The answer is 3 and then 4, 5", "3"),
    ("The answer is 12 #### 13", "12"),
    ("He earns $2,125 in total", "2125"),
    ("The answer is 20 - 5 = 15", "20"),
    ("It is -0.0", "0"),
    ("The answer is 1,000.5 meters.", "1000.5"),
]


@pytest.mark.parametrize(("completion", "expected"), EXTRACTION_CASES)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


@settings(max_examples=200, deadline=None)
@given(
    value=st.decimals(min_value=-10**7, max_value=10**7, places=2, allow_nan=False, allow_infinity=False),
    style=st.sampled_from(["The answer is {}.", "The answer is: **{}**", "#### {}", "so we get {} apples"]),
)
def test_extraction_round_trips_formatted_values(value, style):
    # format with thousands separators and a dollar sign where positive; the extracted value must be equal
    text = f"${value:,.2f}" if value > 0 else f"{value:.2f}"
    assert answers_match(extract_answer("Step 1: 2 + 3 = 5. " + style.format(text)), str(value))


def test_extract_answer_rejects_non_str():
    with pytest.raises(TypeError, match="text must be a str"):
        extract_answer(42)


@pytest.mark.parametrize(
    ("prediction", "gold", "same"),
    [
        ("3.50", "3.5", True),
        ("1,000", "1000", True),
        ("$1,000.00", "1000", True),
        ("-7", "7", False),
        ("7", "-7", False),
        ("0.1", "0.10", True),
        ("41.99", "42", False),
        (None, "42", False),
    ],
)
def test_answers_match_by_value(prediction, gold, same):
    assert answers_match(prediction, gold) is same


def test_parse_gold():
    assert parse_gold("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n#### 1,080") == "1080"
    assert parse_gold("#### -3") == "-3"


@pytest.mark.parametrize(("answer", "match"), [("She has 18 eggs.", "no '####'"), ("#### none", "no number after")])
def test_parse_gold_errors(answer, match):
    with pytest.raises(ValueError, match=match):
        parse_gold(answer)


def test_gsm8k_reward_values():
    answer = "2 + 2 = <<2+2=4>>4\n#### 4"
    assert gsm8k_reward("2 plus 2 is 4. The answer is 4.", answer) == 1.0
    assert gsm8k_reward("The answer is 5.", answer) == 0.0
    assert gsm8k_reward("I do not know", answer) == 0.0
    assert gsm8k_reward("The answer is 5.", answer, correct_reward=2.0, wrong_reward=-1.0) == -1.0
    assert gsm8k_reward("The answer is 4.", answer, correct_reward=2.0, wrong_reward=-1.0) == 2.0


def test_format_reward_is_off_by_default_and_added_when_on():
    answer = "#### 4"
    assert gsm8k_reward("so 4", answer) == 1.0
    assert gsm8k_reward("so 4", answer, format_reward=0.1) == 1.0  # right number, no "The answer is"
    assert gsm8k_reward("The answer is: **4**", answer, format_reward=0.1) == pytest.approx(1.1)
    assert gsm8k_reward("The answer is 5", answer, format_reward=0.1) == pytest.approx(0.1)


def test_reward_fn_batches_and_checks_lengths():
    records = [{"query": "q", "answer": "#### 3", "gold": "3"}, {"query": "q", "answer": "#### 1,000"}]
    assert gsm8k_reward_fn(["q", "q"], ["The answer is 3", "The answer is 1,000"], records) == [1.0, 1.0]
    assert gsm8k_reward_fn(["q"], ["The answer is 4"], records[:1], wrong_reward=-0.5) == [-0.5]
    with pytest.raises(ValueError, match="same length"):
        gsm8k_reward_fn(["q"], ["a", "b"], records)
    with pytest.raises(ValueError, match="neither 'gold' nor 'answer'"):
        gsm8k_reward_fn(["q"], ["a"], [{"query": "q"}])


# ---------------------------------------------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 1, 1, 0.2),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),  # 0.7
        (5, 2, 1, 0.4),
        (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),
        (5, 5, 3, 1.0),
        (5, 0, 5, 0.0),
        (4, 0, 1, 0.0),
        (5, 4, 2, 1.0),  # n - c < k: every k-subset holds a correct sample
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_form_for_large_n():
    n, c, k = 200, 13, 10
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-10)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [(3, 1, 4, "k=4 exceeds"), (3, 4, 1, "c=4 correct samples exceeds"), (3, 1, 0, "k >= 1"), (3, -1, 1, "c >= 0")],
)
def test_pass_at_k_bad_inputs(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_first():
    assert pass_at_k_first([False, True, False], 1) == 0.0
    assert pass_at_k_first([False, True, False], 2) == 1.0
    assert pass_at_k_first([False, False, False], 3) == 0.0
    with pytest.raises(ValueError, match="k must be in"):
        pass_at_k_first([True], 2)


def test_pass_at_k_table():
    rows = [[True, False, False, False, False], [False] * 5, [False, False, True, True, False]]
    first = pass_at_k_table(rows, estimator="first")
    assert first == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 2 / 3, 4: 2 / 3, 5: 2 / 3})
    unbiased = pass_at_k_table(rows)
    assert list(unbiased) == [1, 2, 3, 4, 5]
    assert unbiased[1] == pytest.approx((0.2 + 0.0 + 0.4) / 3)
    assert unbiased[5] == pytest.approx(2 / 3)
    assert all(unbiased[k] <= unbiased[k + 1] for k in range(1, 5))
    with pytest.raises(ValueError, match="empty"):
        pass_at_k_table([])
    with pytest.raises(ValueError, match="estimator"):
        pass_at_k_table(rows, estimator="max")
    with pytest.raises(ValueError, match="exceeds"):
        pass_at_k_table([[True, False]], ks=(3,))


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
    with pytest.raises(FileNotFoundError, match="GSM8K file not found"):
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


# ---------------------------------------------------------------------------------------------------- prompts

SIMPLE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# A template emitting literal braces, e.g. a JSON-ish system header.
BRACE_CHAT_TEMPLATE = "{{ '{\"system\": 1}' }}\n" + SIMPLE_CHAT_TEMPLATE


@pytest.fixture()
def chat_tok(tiny_tok):
    tok = copy.deepcopy(tiny_tok)
    tok.chat_template = SIMPLE_CHAT_TEMPLATE
    return tok


def test_plain_pioneer_template(tiny_tok):
    template = build_pioneer_template(tiny_tok)
    text = template.format(query="How many?")
    assert text.endswith("Question: How many?\nAnswer:")
    assert gsm8k.ONE_SHOT_QUESTION in text and "The answer is 12." in text
    assert template.count("{query}") == 1
    zero_shot = build_pioneer_template(tiny_tok, one_shot=False).format(query="How many?")
    assert gsm8k.ONE_SHOT_QUESTION not in zero_shot and zero_shot.startswith(gsm8k.DEFAULT_INSTRUCTION)


def test_plain_observer_template(tiny_tok):
    template = build_observer_template(tiny_tok)
    text = template.format(query="How many?", response="3 + 4 = 7. The answer is 7.")
    assert text.index("Question: How many?") < text.index("Reference solution: 3 + 4 = 7.") < text.index("Answer:")
    assert text.endswith("Answer:")


def test_chat_templates_use_the_tokenizer_template(chat_tok):
    pioneer = build_pioneer_template(chat_tok).format(query="How many?")
    assert pioneer.startswith("<|user|>") and pioneer.endswith("<|user|>Question: How many?<|end|>\n<|assistant|>")
    assert f"<|assistant|>{gsm8k.ONE_SHOT_ANSWER}<|end|>" in pioneer
    observer = build_observer_template(chat_tok).format(query="Q?", response="R.")
    assert observer.endswith("Question: Q?\n\nReference solution: R.<|end|>\n<|assistant|>")


def test_literal_braces_survive_format(tiny_tok, chat_tok):
    brace_tok = copy.deepcopy(chat_tok)
    brace_tok.chat_template = BRACE_CHAT_TEMPLATE
    text = build_pioneer_template(brace_tok, instruction="Use {curly} braces.").format(query="Q?")
    assert text.startswith('{"system": 1}') and "Use {curly} braces." in text
    observer = build_observer_template(tiny_tok, instruction="a {b}").format(query="Q?", response="{x}")
    assert observer.startswith("a {b}") and "Reference solution: {x}" in observer


def test_use_chat_template_flags(tiny_tok, chat_tok):
    with pytest.raises(ValueError, match="no chat_template"):
        build_pioneer_template(tiny_tok, use_chat_template=True)
    plain = build_pioneer_template(chat_tok, use_chat_template=False)
    assert plain == build_pioneer_template(tiny_tok)


# ---------------------------------------------------------------------------------------------------- task


def test_make_gsm8k_task(tmp_path, tiny_tok):
    from cory_env.config import EnvConfig
    from cory_env.tasks import make_task
    from cory_env.tasks.gsm8k import make_gsm8k_task

    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": "Q1?", "answer": "#### 2"}, {"question": "Q2?",
                                                                                        "answer": "#### 7"}])
    config = EnvConfig(task="gsm8k", data_path=str(path))
    task = make_gsm8k_task(config, tiny_tok, response_length=64, wrong_reward=-1.0)
    assert task.name == "gsm8k" and [r["gold"] for r in task.records] == ["2", "7"]
    assert (task.query_tokens, task.min_new_tokens, task.max_new_tokens, task.action_mask) == (None, 64, 64, None)
    assert task.pioneer_template == build_pioneer_template(tiny_tok)
    assert task.reward_fn(["Q1?", "Q2?"], ["The answer is 2", "8"], list(task.records)) == [1.0, -1.0]
    assert make_gsm8k_task(config, tiny_tok, min_response_length=1).min_new_tokens == 1
    # the registry builds it from the config alone; config templates replace the built-in ones
    custom = EnvConfig(task="gsm8k", data_path=str(path), pioneer_template="Q: {query}\nA:")
    registered = make_task("gsm8k", custom, tiny_tok)
    assert registered.pioneer_template == "Q: {query}\nA:" and registered.max_new_tokens == 256
    with pytest.raises(ValueError, match="min_response_length"):
        make_gsm8k_task(config, tiny_tok, response_length=8, min_response_length=9)
    with pytest.raises(ValueError, match="split"):
        make_gsm8k_task(config, tiny_tok, split="dev")


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
    from dataclasses import replace

    from cory_env.batched_env import BatchedCORYEnv
    from cory_env.config import EnvConfig
    from cory_env.tasks.gsm8k import make_gsm8k_task

    _, test_path = gsm8k_paths
    config = EnvConfig(task="gsm8k", data_path=str(test_path), context_len=1024)
    # one problem (Janet's ducks, gold 18) so every row plays it; format reward on
    task = make_gsm8k_task(config, tiny_tok, one_shot=False, response_length=32, limit=1, format_reward=0.1)
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
    assert load_gsm8k("hub:test", limit=5) == [{"query": "Q?", "answer": "#### 1,000", "gold": "1000"}]
    load_gsm8k("hub:train")
    assert calls == [("openai/gsm8k", "main", "test[:5]"), ("openai/gsm8k", "main", "train")]


def test_chat_templates_are_valid_env_templates(chat_tok):
    from cory_env.prompts import PromptTemplate

    brace_tok = copy.deepcopy(chat_tok)
    brace_tok.chat_template = BRACE_CHAT_TEMPLATE
    for tok in (chat_tok, brace_tok):
        pioneer = PromptTemplate(build_pioneer_template(tok), tok)
        observer = PromptTemplate(build_observer_template(tok), tok, required=("query", "response"))
        query, response = tok.encode("Q?"), tok.encode("R.")
        assert tok.decode(pioneer.build(query)) == build_pioneer_template(tok).format(query="Q?")
        assert tok.decode(observer.build(query, response)) == build_observer_template(tok).format(
            query="Q?", response="R.")


@pytest.mark.slow
@pytest.mark.real_model
def test_smollm2_chat_prompts_fit_the_env(gsm8k_paths, smollm2_tokenizer):
    from cory_env.batched_env import BatchedCORYEnv
    from cory_env.config import EnvConfig
    from cory_env.prompts import PromptTemplate
    from cory_env.tasks.gsm8k import make_gsm8k_task

    tok = smollm2_tokenizer
    # longest test question: 188 SmolLM2 tokens; observer literal text ~89 tokens + 2 * 256 response tokens
    config = EnvConfig(task="gsm8k", data_path=str(gsm8k_paths[1]), context_len=800, truncate_query=False)
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
