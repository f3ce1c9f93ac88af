"""GSM8K answers: number extraction, gold parsing and the correctness reward.

Answer extraction follows the authors' evaluation script (docs/paper.md §2): the prediction is the first number after
the last "The answer is" (any case), else the number after the last `####`, else the last number in the text. Numbers
compare by value (exact fractions: commas, a leading `$`, a trailing `.`, `%`, units and `**` are ignored; `3.50` equals
`3.5`, `3/4` equals `0.75`, `-5` equals `−5` with the Unicode minus); nothing is ever evaluated as code.

| function | what |
|---|---|
| `extract_answer(text)` | the predicted final number of a completion (canonical string) or None |
| `parse_gold(answer)` | the gold number after `####` of a dataset answer field (exactly one number) |
| `answers_match(pred, gold)` | equality by value |
| `gsm8k_reward(completion, answer)` | `correct_reward` / `wrong_reward` (+ optional `format_reward`) |
| `gsm8k_reward_fn(queries, responses, records)` | the batched form, `Task.reward_fn` signature |

Source: Cobbe et al. 2021 (arXiv:2110.14168) for the `####` gold format; Ma et al. 2024 (arXiv:2410.06101, §5.2)
for the task and its evaluation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

__all__ = ["answers_match", "extract_answer", "gsm8k_reward", "gsm8k_reward_fn", "has_answer_format",
           "normalize_number", "parse_gold", "score_completion"]

#: A number: optional sign (`-` or the Unicode minus U+2212), optional `$`, comma-grouped or plain digits, then
#: optional decimals or a `/denominator` (a fraction such as `3/4`); or a bare `.5`. A trailing sentence dot is
#: never part of the number. A minus after an operand (`10 - 5`) is dropped later.
_NUMBER_RE = re.compile(r"(?P<sign>[-\u2212])?\$?\s?"
                        r"(?:(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:(?P<frac>\.\d+)|/(?P<den>\d+)(?![\d.]\d))?"
                        r"|(?<![\w.])(?P<bare>\.\d+))")
_ANSWER_MARKER_RE = re.compile(r"the answer is", re.IGNORECASE)
_GOLD_MARKER = "####"
_FORMAT_RE = re.compile(r"the answer is\W{0,6}\d", re.IGNORECASE)


def normalize_number(text: str) -> str | None:
    """Canonical string of the first number in `text`, or None when there is none.

    Args:
        text: e.g. `"$1,000.00"`, `"**42**"`, `"-3.50%"`, `"42 apples."`.

    Returns:
        The value as a plain decimal string without grouping, exponent or trailing zeros (`"1000"`, `"42"`,
        `"-3.5"`, `"0.75"` for `3/4`), `"p/q"` for a fraction without a finite decimal form (`"2/3"`), or None.

    Examples:
        >>> normalize_number("$1,000.00")
        '1000'
        >>> normalize_number("no digits") is None
        True
    """
    match = _NUMBER_RE.search(text)
    return None if match is None else _canonical(match)


def _canonical(match: re.Match[str]) -> str | None:
    digits = match.group("bare") or (match.group("int").replace(",", "") + (match.group("frac") or ""))
    try:
        value = Fraction(Decimal(digits))
    except InvalidOperation:  # unreachable for regex-matched digits; kept as a guard
        return None
    if match.group("den") is not None:
        if int(match.group("den")) == 0:
            return None  # `n/0` is not a number
        value /= int(match.group("den"))
    if match.group("sign") and value != 0 and not _is_binary_minus(match.string, match.start()):
        value = -value
    return _value_string(value)


def _value_string(value: Fraction) -> str:
    """A plain decimal string when `value` has a finite decimal expansion (`"0.75"`, `"-5"`), else `"p/q"` in
    lowest terms (`"2/3"`): equal values give equal strings."""
    if value == 0:
        return "0"
    den = value.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    exact = Decimal(value.numerator) / Decimal(value.denominator)  # exact: the denominator is 2^a 5^b
    return format(exact.normalize(), "f")


def _is_binary_minus(text: str, minus_at: int) -> bool:
    """Whether the `-` at `minus_at` follows an operand (`10 - 5`, `x-1`, `(a) - b`) rather than a word (`is -5`)."""
    if minus_at > 0 and (text[minus_at - 1].isalnum() or text[minus_at - 1] in ")]"):
        return True
    before = text[:minus_at].rstrip()
    return bool(before) and (before[-1].isdigit() or before[-1] in ")]%")


def _first_number_after(text: str, start: int) -> str | None:
    match = _NUMBER_RE.search(text, start)
    return None if match is None else _canonical(match)


def extract_answer(text: str) -> str | None:
    """The predicted final number of the decoded completion `text`, in the module docstring's order: the canonical
    number string (see `normalize_number`), or None when the text holds no number.

    Raises:
        TypeError: if `text` is not a str.

    Examples:
        >>> extract_answer("3 + 4 = 7. The answer is: $1,000.")
        '1000'
        >>> extract_answer("So 2 * 3 = 6 apples")
        '6'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    for marker in reversed(list(_ANSWER_MARKER_RE.finditer(text))):
        found = _first_number_after(text, marker.end())
        if found is not None:
            return found
    gold_at = text.rfind(_GOLD_MARKER)
    if gold_at >= 0:
        found = _first_number_after(text, gold_at + len(_GOLD_MARKER))
        if found is not None:
            return found
    matches = list(_NUMBER_RE.finditer(text))
    return _canonical(matches[-1]) if matches else None


def parse_gold(answer: str) -> str:
    """The gold number of a GSM8K answer field (the dataset's full field, ending with `#### <number>`): the number
    after `####` as a canonical string, e.g. `"1080"` for `"... #### 1,080"`.

    Raises:
        TypeError: if `answer` is not a str.
        ValueError: if there is no `####`, or what follows it is not exactly one number (`#### 5 or 6`, `#### 1/0`).
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {type(answer).__name__}")
    at = answer.rfind(_GOLD_MARKER)
    if at < 0:
        raise ValueError(f"GSM8K answer has no '####' gold marker: {answer[-80:]!r}; the answer field must end with "
                         "'#### <number>'")
    rest = answer[at + len(_GOLD_MARKER):].strip()
    match = _NUMBER_RE.search(rest)
    if match is None:
        raise ValueError(f"GSM8K answer has no number after '####': {answer[at:at + 80]!r}")
    gold = _canonical(match)
    if gold is None or match.start() != 0 or rest[match.end():] not in ("", "."):
        raise ValueError(f"GSM8K gold {rest[:80]!r} after '####' is not a single number; write it as an integer, "
                         "decimal or fraction such as '#### 1,080', '#### -3.5' or '#### 1/2'")
    return gold


def answers_match(prediction: str | None, gold: str) -> bool:
    """Whether two number strings are equal by value (`"3.50"` equals `"3.5"`, `"1,000"` equals `"1000"`); a
    `prediction` of None (no prediction) never matches."""
    if prediction is None:
        return False
    pred, ref = normalize_number(prediction), normalize_number(gold)
    return pred is not None and pred == ref


def has_answer_format(completion: str) -> bool:
    """Whether `completion` states its result as "The answer is <number>" (any case, optional `:`, `$`, `**`)."""
    return _FORMAT_RE.search(completion) is not None


def gsm8k_reward(completion: str, answer: str, *, correct_reward: float = 1.0, wrong_reward: float = 0.0,
                 format_reward: float = 0.0) -> float:
    """Task reward of one completion against a GSM8K answer field.

    Args:
        completion: the decoded response text.
        answer: the dataset's full answer field (gold after `####`).
        correct_reward: reward when the extracted number equals the gold by value.
        wrong_reward: reward otherwise (also when no number is found).
        format_reward: added when the completion contains "The answer is <number>"; 0 disables.

    Raises:
        ValueError: if `answer` has no `####` gold.
    """
    return score_completion(completion, parse_gold(answer),
                            correct_reward=correct_reward, wrong_reward=wrong_reward, format_reward=format_reward)


def score_completion(completion: str, gold: str, *, correct_reward: float = 1.0, wrong_reward: float = 0.0,
                     format_reward: float = 0.0) -> float:
    """Like `gsm8k_reward` but against an already parsed gold number string (a record's `"gold"`)."""
    correct = answers_match(extract_answer(completion), gold)
    reward = correct_reward if correct else wrong_reward
    if format_reward and has_answer_format(completion):
        reward += format_reward
    return float(reward)


def gsm8k_reward_fn(query_texts: Sequence[str], response_texts: Sequence[str], records: Sequence[dict[str, Any]], *,
                    correct_reward: float = 1.0, wrong_reward: float = 0.0, format_reward: float = 0.0) -> list[float]:
    """Batched task reward in the `Task.reward_fn` signature: `score_completion` of each response vs its record.

    Args:
        query_texts: the B question texts (unused: the gold lives in the records).
        response_texts: the B decoded responses.
        records: the B data records, each with a `"gold"` number string (or an `"answer"` field to parse).
        correct_reward, wrong_reward, format_reward: see `gsm8k_reward`.

    Returns:
        B floats.

    Raises:
        ValueError: if the three lists differ in length or a record has neither `"gold"` nor `"answer"`.
    """
    if not len(query_texts) == len(response_texts) == len(records):
        raise ValueError(f"query_texts, response_texts and records must have the same length, got "
                         f"{len(query_texts)}, {len(response_texts)}, {len(records)}")
    rewards = []
    for i, (response, record) in enumerate(zip(response_texts, records)):
        if "gold" in record:
            gold = record["gold"]
        elif "answer" in record:
            gold = parse_gold(record["answer"])
        else:
            raise ValueError(f"record {i} has neither 'gold' nor 'answer' (keys {sorted(record)}); GSM8K rewards need "
                             "records from load_gsm8k, not bare queries (e.g. explicit reset queries carry no gold)")
        rewards.append(score_completion(response, gold, correct_reward=correct_reward, wrong_reward=wrong_reward,
                                        format_reward=format_reward))
    return rewards
