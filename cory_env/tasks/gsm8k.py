"""GSM8K: the objective-reward CORY task (grade-school maths, pass@k evaluation).

The pioneer solves a GSM8K problem; the observer solves the same problem after reading the pioneer's solution as a
reference (knowledge transfer). Each answer earns a correctness reward; both seats get the collective reward.

| piece | what |
|---|---|
| data | local JSONL (`question`, `answer`) or the hub (`openai/gsm8k`, config `main`) |
| record | `{"query": question, "answer": full answer field, "gold": normalised gold number}` |
| reward | `correct_reward` (1.0) if the extracted number equals the gold, else `wrong_reward` (0.0); + `format_reward` |
| prompts | pioneer: instruction + optional 1-shot + question; observer: question + pioneer's answer as reference |
| eval | `pass_at_k` (unbiased estimator), `pass_at_k_first` (paper's "any of the first k") |

Answer extraction follows the authors' evaluation script (PAPER.md §2): the prediction is the first number after
the last "The answer is" (any case), else the number after the last `####`, else the last number in the text.
Numbers compare by value with `decimal.Decimal` (commas, a leading `$`, a trailing `.`, `%`, units and `**` are
ignored; `3.50` equals `3.5`); nothing is ever evaluated as code.

Source: Cobbe et al. 2021 (arXiv:2110.14168) for the data and the `####` gold format; Chen et al. 2021
(arXiv:2107.03374, §2.1) for pass@k; Ma et al. 2024 (arXiv:2410.06101, §5.2) for the task.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from cory_env.tasks.base import Task

__all__ = [
    "answers_match", "build_observer_template", "build_pioneer_template", "extract_answer", "gsm8k_reward",
    "gsm8k_reward_fn", "has_answer_format", "load_gsm8k", "make_gsm8k_task", "normalize_number", "parse_gold",
    "pass_at_k", "pass_at_k_first", "pass_at_k_table", "score_completion",
]

logger = logging.getLogger(__name__)

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"

#: A number: optional `-` sign, optional `$`, comma-grouped or plain digits, optional decimals; or a bare `.5`.
#: A trailing sentence dot is never part of the number. A minus after an operand (`10 - 5`) is dropped later.
_NUMBER_RE = re.compile(
    r"(?P<sign>-)?\$?\s?"
    r"(?:(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?|(?<![\w.])(?P<bare>\.\d+))"
)
_ANSWER_MARKER_RE = re.compile(r"the answer is", re.IGNORECASE)
_GOLD_MARKER = "####"
_FORMAT_RE = re.compile(r"the answer is\W{0,6}\d", re.IGNORECASE)

DEFAULT_INSTRUCTION = (
    'Solve the math problem step by step. Finish with a line "The answer is N." where N is a number.'
)
DEFAULT_OBSERVER_INSTRUCTION = (
    "Solve the math problem step by step. A reference solution written by another student is given; it may contain "
    'mistakes, so check it and write your own solution. Finish with a line "The answer is N." where N is a number.'
)
#: Our own 1-shot example in the format of the authors' evaluation prompt (`Question: ... Answer: ...`).
ONE_SHOT_QUESTION = (
    "A baker makes 3 trays of 12 cookies each. He sells 20 cookies and gives 4 to a friend. "
    "How many cookies does he have left?"
)
ONE_SHOT_ANSWER = (
    "The baker makes 3 * 12 = 36 cookies. He sells 20 and gives away 4, so 20 + 4 = 24 cookies are gone. "
    "He has 36 - 24 = 12 cookies left. The answer is 12."
)

# Sentinels stand for the placeholders while a chat template renders (they contain no braces).
_QUERY_SENTINEL = "\x00CORY_QUERY\x00"
_RESPONSE_SENTINEL = "\x00CORY_RESPONSE\x00"


# ---------------------------------------------------------------------------------------------------- numbers


def normalize_number(text: str) -> str | None:
    """Canonical string of the first number in `text`, or None when there is none.

    Args:
        text: e.g. `"$1,000.00"`, `"**42**"`, `"-3.50%"`, `"42 apples."`.

    Returns:
        The value as a plain decimal string without grouping, exponent or trailing zeros (`"1000"`, `"42"`,
        `"-3.5"`), or None.

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
        value = Decimal(digits)
    except InvalidOperation:  # unreachable for regex-matched digits; kept as a guard
        return None
    if match.group("sign") and value != 0 and not _is_binary_minus(match.string, match.start()):
        value = -value
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


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
    """The predicted final number of a completion.

    Order: the first number after the last "The answer is" (any case) that has a number after it; else the number
    after the last `####`; else the last number in the text.

    Args:
        text: the decoded completion.

    Returns:
        The canonical number string (see `normalize_number`), or None when the text holds no number.

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
    """The gold number of a GSM8K answer field: the number after `####`, canonicalised.

    Args:
        answer: the dataset's full answer field, ending with `#### <number>`.

    Returns:
        The canonical number string, e.g. `"1080"` for `"... #### 1,080"`.

    Raises:
        TypeError: if `answer` is not a str.
        ValueError: if there is no `####` or no number after it.
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {type(answer).__name__}")
    at = answer.rfind(_GOLD_MARKER)
    if at < 0:
        raise ValueError(
            f"GSM8K answer has no '####' gold marker: {answer[-80:]!r}; the answer field must end with '#### <number>'"
        )
    gold = _first_number_after(answer, at + len(_GOLD_MARKER))
    if gold is None:
        raise ValueError(f"GSM8K answer has no number after '####': {answer[at:at + 80]!r}")
    return gold


def answers_match(prediction: str | None, gold: str) -> bool:
    """Whether two number strings are equal by value (`"3.50"` equals `"3.5"`, `"1,000"` equals `"1000"`).

    Args:
        prediction: a number string or None (no prediction: never a match).
        gold: a number string.

    Returns:
        True when both parse to the same `Decimal` value.
    """
    if prediction is None:
        return False
    pred, ref = normalize_number(prediction), normalize_number(gold)
    return pred is not None and pred == ref


def has_answer_format(completion: str) -> bool:
    """Whether `completion` states its result as "The answer is <number>" (any case, optional `:`, `$`, `**`)."""
    return _FORMAT_RE.search(completion) is not None


def gsm8k_reward(
    completion: str,
    answer: str,
    *,
    correct_reward: float = 1.0,
    wrong_reward: float = 0.0,
    format_reward: float = 0.0,
) -> float:
    """Task reward of one completion against a GSM8K answer field.

    Args:
        completion: the decoded response text.
        answer: the dataset's full answer field (gold after `####`).
        correct_reward: reward when the extracted number equals the gold by value.
        wrong_reward: reward otherwise (also when no number is found).
        format_reward: added when the completion contains "The answer is <number>"; 0 disables.

    Returns:
        The reward, a float.

    Raises:
        ValueError: if `answer` has no `####` gold.
    """
    return score_completion(
        completion, parse_gold(answer),
        correct_reward=correct_reward, wrong_reward=wrong_reward, format_reward=format_reward,
    )


def score_completion(
    completion: str,
    gold: str,
    *,
    correct_reward: float = 1.0,
    wrong_reward: float = 0.0,
    format_reward: float = 0.0,
) -> float:
    """Like `gsm8k_reward` but against an already parsed gold number string (a record's `"gold"`)."""
    correct = answers_match(extract_answer(completion), gold)
    reward = correct_reward if correct else wrong_reward
    if format_reward and has_answer_format(completion):
        reward += format_reward
    return float(reward)


# ---------------------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples of which c are correct.

    pass@k = 1 − C(n−c, k) / C(n, k), computed in the numerically stable product form
    1 − prod_{i=n−c+1}^{n} (1 − k / i).

    Args:
        n: samples drawn for the problem, >= 1.
        c: correct samples, 0 <= c <= n.
        k: budget, 1 <= k <= n.

    Returns:
        A probability in [0, 1].

    Raises:
        ValueError: if k > n, c > n, or any argument is out of range.

    Source: Chen et al. 2021, arXiv:2107.03374, §2.1 and Figure 3.

    Examples:
        >>> round(pass_at_k(5, 2, 2), 6)
        0.7
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if n < 1 or k < 1 or c < 0:
        raise ValueError(f"need n >= 1, k >= 1, c >= 0; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}; draw at least k samples per problem")
    if c > n:
        raise ValueError(f"c={c} correct samples exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_first(correct: Sequence[bool], k: int) -> float:
    """The paper's pass@k: 1.0 if any of the first k samples is correct, else 0.0.

    Args:
        correct: per-sample correctness of one problem, in sampling order.
        k: budget, 1 <= k <= len(correct).

    Returns:
        1.0 or 0.0.

    Raises:
        ValueError: if k < 1 or k > len(correct).
    """
    if k < 1 or k > len(correct):
        raise ValueError(f"k must be in [1, {len(correct)}] (the number of samples), got {k}")
    return float(any(bool(x) for x in correct[:k]))


def pass_at_k_table(
    correctness: Sequence[Sequence[bool]],
    ks: Sequence[int] = (1, 2, 3, 4, 5),
    *,
    estimator: str = "unbiased",
) -> dict[int, float]:
    """Mean pass@k over problems, for each k in `ks`.

    Args:
        correctness: one list of per-sample correctness per problem (lengths may differ, each >= max(ks)).
        ks: the budgets to report.
        estimator: "unbiased" (`pass_at_k`) or "first" (`pass_at_k_first`, the authors' script).

    Returns:
        `{k: mean pass@k}`.

    Raises:
        ValueError: if `correctness` is empty, `estimator` is unknown, or a problem has fewer than k samples.
    """
    if len(correctness) == 0:
        raise ValueError("correctness is empty: pass at least one problem's sample list")
    if estimator not in ("unbiased", "first"):
        raise ValueError(f"estimator must be 'unbiased' or 'first', got {estimator!r}")
    table = {}
    for k in ks:
        if estimator == "unbiased":
            values = [pass_at_k(len(row), int(sum(bool(x) for x in row)), k) for row in correctness]
        else:
            values = [pass_at_k_first(row, k) for row in correctness]
        table[int(k)] = float(np.mean(values))
    return table


# ---------------------------------------------------------------------------------------------------- data


def _record(question: Any, answer: Any, where: str) -> dict[str, str]:
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: missing or empty 'question' field; each GSM8K row needs 'question' and 'answer'")
    if not isinstance(answer, str):
        raise ValueError(
            f"{where}: missing 'answer' field (got {answer!r}); each GSM8K row needs 'question' and 'answer'"
        )
    try:
        gold = parse_gold(answer)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return {"query": question, "answer": answer, "gold": gold}


def load_gsm8k(path_or_split: str | os.PathLike[str], *, limit: int | None = None) -> list[dict[str, str]]:
    """Load GSM8K problems as task records.

    Args:
        path_or_split: a local JSONL file with `question` and `answer` fields per line (blank lines skipped), or
            `"hub:train"` / `"hub:test"` for `datasets.load_dataset("openai/gsm8k", "main", split=...)`.
        limit: keep only the first `limit` rows; None keeps all.

    Returns:
        Records `{"query": question, "answer": full answer, "gold": canonical gold number}`, in file order.

    Raises:
        FileNotFoundError: if the local file does not exist.
        ValueError: if `limit` < 1, or a line is not JSON, lacks `question`/`answer`, or its answer has no `####`
            gold (the message names the file and the 1-based line number).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
    source = os.fspath(path_or_split)
    if source.startswith("hub:"):
        return _load_hub(source[len("hub:"):], limit)
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K file not found: {path}; pass a JSONL path or 'hub:train' / 'hub:test'")
    records: list[dict[str, str]] = []
    with path.open(encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if limit is not None and len(records) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path}, line {line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            records.append(_record(row.get("question"), row.get("answer"), where))
    logger.info("loaded %d GSM8K problems from %s", len(records), path)
    return records


def _load_hub(split: str, limit: int | None) -> list[dict[str, str]]:
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K hub split must be 'train' or 'test', got {split!r} (use 'hub:train' or 'hub:test')")
    from datasets import load_dataset

    hub_split = split if limit is None else f"{split}[:{limit}]"
    dataset = load_dataset(HUB_DATASET, HUB_CONFIG, split=hub_split)
    records = [
        _record(row["question"], row["answer"], f"{HUB_DATASET} ({HUB_CONFIG}) split {split!r}, row {i}")
        for i, row in enumerate(dataset)
    ]
    logger.info("loaded %d GSM8K problems from %s split %s", len(records), HUB_DATASET, split)
    return records


# ---------------------------------------------------------------------------------------------------- prompts


def _escape(text: str) -> str:
    """Double literal braces so `str.format`-style placeholders survive."""
    return text.replace("{", "{{").replace("}", "}}")


def _finish(rendered: str) -> str:
    return _escape(rendered).replace(_QUERY_SENTINEL, "{query}").replace(_RESPONSE_SENTINEL, "{response}")


def _render(tokenizer: Any, messages: list[dict[str, str]], plain: str, use_chat_template: bool | None) -> str:
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if use_chat_template is None:
        use_chat_template = has_template
    if use_chat_template and not has_template:
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template; pass None or False")
    if not use_chat_template:
        return _finish(plain)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    for sentinel in (_QUERY_SENTINEL, _RESPONSE_SENTINEL):
        if any(sentinel in m["content"] for m in messages) and rendered.count(sentinel) != 1:
            raise ValueError(f"the chat template dropped or repeated the {sentinel.strip(chr(0))} placeholder")
    return _finish(rendered)


def build_pioneer_template(
    tokenizer: Any,
    *,
    one_shot: bool = True,
    instruction: str = DEFAULT_INSTRUCTION,
    use_chat_template: bool | None = None,
) -> str:
    """The pioneer's prompt template, with a `{query}` placeholder for the question.

    Plain text (no chat template): the instruction, the optional 1-shot `Question: ... Answer: ...` example, then
    `Question: {query}` and `Answer:`. With a chat template: the same as user/assistant turns, rendered with
    `add_generation_prompt=True`. Literal braces elsewhere are doubled, so `template.format(query=...)` is safe.

    Args:
        tokenizer: a Hugging Face tokenizer; its `chat_template` (if any) is used.
        one_shot: include the 1-shot worked example (as in the authors' evaluation prompt).
        instruction: the task instruction placed first.
        use_chat_template: None = use it when the tokenizer has one; True = require it; False = plain text.

    Returns:
        The template string.

    Raises:
        ValueError: if `use_chat_template` is True and the tokenizer has no chat template.
    """
    question = f"Question: {_QUERY_SENTINEL}"
    if one_shot:
        example_q = f"Question: {ONE_SHOT_QUESTION}"
        plain = f"{instruction}\n\n{example_q}\nAnswer: {ONE_SHOT_ANSWER}\n\n{question}\nAnswer:"
        messages = [
            {"role": "user", "content": f"{instruction}\n\n{example_q}"},
            {"role": "assistant", "content": ONE_SHOT_ANSWER},
            {"role": "user", "content": question},
        ]
    else:
        plain = f"{instruction}\n\n{question}\nAnswer:"
        messages = [{"role": "user", "content": f"{instruction}\n\n{question}"}]
    return _render(tokenizer, messages, plain, use_chat_template)


def build_observer_template(
    tokenizer: Any,
    *,
    instruction: str = DEFAULT_OBSERVER_INSTRUCTION,
    use_chat_template: bool | None = None,
) -> str:
    """The observer's knowledge-transfer template, with `{query}` and `{response}` (the pioneer's answer).

    Our own wording (the paper does not publish its GSM8K template): the instruction, the question, the pioneer's
    solution as a reference that may be wrong, then `Answer:`. No 1-shot example (the reference shows the format and
    keeps the prompt short). Braces are escaped as in `build_pioneer_template`.

    Args:
        tokenizer: a Hugging Face tokenizer; its `chat_template` (if any) is used.
        instruction: the task instruction placed first.
        use_chat_template: None = use it when the tokenizer has one; True = require it; False = plain text.

    Returns:
        The template string.

    Raises:
        ValueError: if `use_chat_template` is True and the tokenizer has no chat template.
    """
    body = f"{instruction}\n\nQuestion: {_QUERY_SENTINEL}\n\nReference solution: {_RESPONSE_SENTINEL}"
    plain = f"{body}\n\nAnswer:"
    messages = [{"role": "user", "content": body}]
    return _render(tokenizer, messages, plain, use_chat_template)


# ---------------------------------------------------------------------------------------------------- task


def gsm8k_reward_fn(
    query_texts: Sequence[str],
    response_texts: Sequence[str],
    records: Sequence[dict[str, Any]],
    *,
    correct_reward: float = 1.0,
    wrong_reward: float = 0.0,
    format_reward: float = 0.0,
) -> list[float]:
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
        raise ValueError(
            f"query_texts, response_texts and records must have the same length, got "
            f"{len(query_texts)}, {len(response_texts)}, {len(records)}"
        )
    rewards = []
    for i, (response, record) in enumerate(zip(response_texts, records)):
        if "gold" in record:
            gold = record["gold"]
        elif "answer" in record:
            gold = parse_gold(record["answer"])
        else:
            raise ValueError(
                f"record {i} has neither 'gold' nor 'answer' (keys {sorted(record)}); GSM8K rewards need records "
                "from load_gsm8k, not bare queries (e.g. explicit reset queries carry no gold)"
            )
        rewards.append(score_completion(
            response, gold, correct_reward=correct_reward, wrong_reward=wrong_reward, format_reward=format_reward,
        ))
    return rewards


def make_gsm8k_task(
    config: Any,
    tokenizer: Any,
    *,
    split: str = "train",
    one_shot: bool = True,
    response_length: int = 256,
    min_response_length: int | None = None,
    correct_reward: float = 1.0,
    wrong_reward: float = 0.0,
    format_reward: float = 0.0,
    limit: int | None = None,
    use_chat_template: bool | None = None,
) -> Task:
    """The GSM8K CORY task: records, correctness reward and the pioneer / observer templates.

    Args:
        config: an `EnvConfig`. `config.data_path`: a local GSM8K JSONL, or None / "hub" for the hub split;
            `config.pioneer_template` / `config.observer_template`, when set, replace the built-in templates.
        tokenizer: the agents' tokenizer (its chat template, if any, renders the prompts).
        split: "train" or "test"; selects the hub split when `config.data_path` is unset.
        one_shot: include the 1-shot example in the pioneer prompt.
        response_length: `max_new_tokens` of each response, in tokens (paper eval: 256).
        min_response_length: `min_new_tokens`, the low end of the env's per-episode budget draw; None =
            `response_length` (a fixed budget: a maths answer cut at a random length is wasted).
        correct_reward, wrong_reward, format_reward: see `gsm8k_reward`.
        limit: keep only the first `limit` problems; None keeps all.
        use_chat_template: see `build_pioneer_template`.

    Returns:
        A `Task` named "gsm8k" with the whole question as the query (`query_tokens=None`), the token budget
        `[min_response_length, response_length]` (EOS still ends a response early) and no action mask.

    Raises:
        ValueError: if `split` is unknown, the lengths are not 1 <= min_response_length <= response_length, or the
            data is malformed (see `load_gsm8k`).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if isinstance(response_length, bool) or not isinstance(response_length, int) or response_length < 1:
        raise ValueError(f"response_length must be a positive int (new tokens), got {response_length!r}")
    min_new = response_length if min_response_length is None else min_response_length
    if isinstance(min_new, bool) or not isinstance(min_new, int) or not 1 <= min_new <= response_length:
        raise ValueError(
            f"min_response_length must be an int in [1, response_length={response_length}], got {min_new!r}; "
            "or None for a fixed budget"
        )
    data_path = config.data_path
    source = f"hub:{split}" if data_path in (None, "hub") else data_path
    records = load_gsm8k(source, limit=limit)
    pioneer_template = config.pioneer_template or build_pioneer_template(
        tokenizer, one_shot=one_shot, use_chat_template=use_chat_template,
    )
    observer_template = config.observer_template or build_observer_template(
        tokenizer, use_chat_template=use_chat_template,
    )
    reward_fn = functools.partial(
        gsm8k_reward_fn, correct_reward=correct_reward, wrong_reward=wrong_reward, format_reward=format_reward,
    )
    return Task(
        name="gsm8k",
        records=records,
        reward_fn=reward_fn,
        pioneer_template=pioneer_template,
        observer_template=observer_template,
        query_tokens=None,
        min_new_tokens=min_new,
        max_new_tokens=response_length,
        action_mask=None,
    )
