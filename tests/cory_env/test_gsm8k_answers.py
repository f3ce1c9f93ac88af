"""GSM8K answers: number extraction, gold parsing, the correctness reward and its batched form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cory_env.tasks.gsm8k_answers import (
    answers_match,
    extract_answer,
    gsm8k_reward,
    gsm8k_reward_fn,
    parse_gold,
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


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("The answer is 3/4", "0.75"),
        ("The answer is 3/4.", "0.75"),
        ("The answer is 2/3", "2/3"),
        ("The answer is −5", "-5"),  # U+2212 minus sign
        ("The answer is −3/4", "-0.75"),
        ("It is −0.5 degrees", "-0.5"),
        ("10 − 5 = 5", "5"),  # binary U+2212 minus is an operator, not a sign
        ("The answer is 1,000/4", "250"),
    ],
)
def test_number_forms_compare_by_value(completion, expected):
    """Fractions, the Unicode minus, decimals and separators all read by value."""
    assert extract_answer(completion) == expected


def test_gold_fractions_and_unparseable_golds():
    """`#### 1/2` is one half (not 1), and a gold that is not one number is a clear error."""
    assert parse_gold("#### 1/2") == "0.5"
    assert gsm8k_reward("The answer is 1", "#### 1/2") == 0.0
    assert gsm8k_reward("The answer is 0.5", "#### 1/2") == 1.0
    assert gsm8k_reward("The answer is 2/4", "#### 1/2") == 1.0
    assert gsm8k_reward("The answer is −5", "#### -5") == 1.0
    assert parse_gold("#### −1,250") == "-1250" and parse_gold("#### 18.") == "18"
    assert answers_match("4/6", "2/3") and not answers_match("0.667", "2/3")
    for bad in ("#### 5 or 6", "#### 3 apples and 4 pears", "#### 1/0", "#### 2^3"):
        with pytest.raises(ValueError, match="not a single number"):
            parse_gold(bad)
