"""GSM8K task: answer extraction, reward, pass@k, the loader, the prompt builders and the task."""

from __future__ import annotations

import copy
import json
import math

import pytest

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
