"""GSM8K: the objective-reward CORY task (grade-school maths): its data loader and task builder.

The pioneer solves a GSM8K problem; the observer solves the same problem after reading the pioneer's solution as a
reference (knowledge transfer). Each answer earns a correctness reward; both seats get the collective reward.

| piece | where |
|---|---|
| data | `load_gsm8k`: local JSONL (`question`, `answer`) or the hub (`openai/gsm8k`, config `main`) |
| record | `{"query": question, "answer": full answer field, "gold": normalised gold number}` |
| reward | `gsm8k_answers`: `correct_reward` (1.0) if the extracted number equals the gold, else `wrong_reward` |
| prompts | `gsm8k_prompts`: pioneer: instruction, optional 1-shot, question; observer: question, pioneer's answer |
| lengths | `EnvConfig.min_new_tokens` / `max_new_tokens` (paper evaluation: 256 new tokens; preset `gsm8k-quick`) |
| eval | `trainers.evaluation.passk` (pass@k estimators) and `cory eval --task gsm8k` |

`extract_answer`, `gsm8k_reward` and the other answer and prompt helpers are re-exported here.

Example:
    >>> extract_answer("3 + 4 = 7. The answer is: $1,000.")
    '1000'

Source: Cobbe et al. 2021 (arXiv:2110.14168) for the data; Ma et al. 2024 (arXiv:2410.06101, §5.2) for the task.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

from cory_env.checks import check_number, check_path
from cory_env.hub import hub_reachable
from cory_env.tasks.base import Task, TaskSpec
from cory_env.tasks.gsm8k_answers import (answers_match, extract_answer, gsm8k_reward, gsm8k_reward_fn,
                                          has_answer_format, normalize_number, parse_gold, score_completion)
from cory_env.tasks.gsm8k_prompts import (DEFAULT_INSTRUCTION, DEFAULT_OBSERVER_INSTRUCTION, ONE_SHOT_ANSWER,
                                          ONE_SHOT_QUESTION, build_observer_template, build_pioneer_template)

__all__ = ["SPEC", "DEFAULT_INSTRUCTION", "DEFAULT_OBSERVER_INSTRUCTION", "HUB_CONFIG", "HUB_DATASET",
           "ONE_SHOT_ANSWER", "ONE_SHOT_QUESTION", "answers_match", "build_observer_template",
           "build_pioneer_template", "extract_answer", "gsm8k_reward", "gsm8k_reward_fn", "has_answer_format",
           "load_gsm8k", "make_gsm8k_task", "normalize_number", "parse_gold", "score_completion"]

logger = logging.getLogger(__name__)

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"


def _record(question: Any, answer: Any, where: str) -> dict[str, str]:
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: missing or empty 'question' field; each GSM8K row needs 'question' and 'answer'")
    if not isinstance(answer, str):
        raise ValueError(f"{where}: missing 'answer' field (got {answer!r}); each GSM8K row needs 'question' and "
                         "'answer'")
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
        ConnectionError: for a hub split when the hub is unreachable (checked by a 3 s probe first, so an offline
            machine fails fast; the message names the local-file alternative).
        ValueError: if `limit` < 1, or a line is not JSON, lacks `question`/`answer`, or its answer has no `####`
            gold (the message names the file and the 1-based line number).
    """
    if limit is not None:
        check_number(limit, "limit", integer=True, low=1, fix="or None for every problem")
    source = os.fspath(path_or_split)
    if source.startswith("hub:"):
        return _load_hub(source[len("hub:"):], limit)
    path = check_path(source, "data_path (GSM8K file)", fix="pass a JSONL file, or 'hub:train' / 'hub:test'")
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
    if not records:
        raise ValueError(f"data_path {str(path)!r} has no rows or is not valid JSONL: expected one "
                         '{"question": ..., "answer": "... #### <number>"} object per line')
    logger.info("loaded %d GSM8K problems from %s", len(records), path)
    return records


def _load_hub(split: str, limit: int | None) -> list[dict[str, str]]:
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K hub split must be 'train' or 'test', got {split!r} (use 'hub:train' or 'hub:test')")
    if not hub_reachable(datasets=True):
        raise ConnectionError(f"GSM8K: the Hugging Face hub is unreachable (offline, HF_HUB_OFFLINE set, or the "
                              f"connection probe failed), so {HUB_DATASET!r} split {split!r} cannot be loaded; pass a "
                              f"local JSONL instead, e.g. --data_path $CORY_SHARED_DATA/gsm8k_{split}.jsonl (the data "
                              "folder: docs/getting-started.md)")
    from datasets import load_dataset
    hub_split = split if limit is None else f"{split}[:{limit}]"
    dataset = load_dataset(HUB_DATASET, HUB_CONFIG, split=hub_split)
    records = [_record(row["question"], row["answer"], f"{HUB_DATASET} ({HUB_CONFIG}) split {split!r}, row {i}")
               for i, row in enumerate(dataset)]
    logger.info("loaded %d GSM8K problems from %s split %s", len(records), HUB_DATASET, split)
    return records


def make_gsm8k_task(config: Any, tokenizer: Any, *, split: str = "train", one_shot: bool = True,
                    max_new_tokens: int | None = None, min_new_tokens: int | None = None, correct_reward: float = 1.0,
                    wrong_reward: float = 0.0, format_reward: float = 0.0, limit: int | None = None,
                    use_chat_template: bool | None = None) -> Task:
    """The GSM8K CORY task: records, correctness reward and the pioneer / observer templates.

    Args:
        config: an `EnvConfig`. `config.data_path`: a local GSM8K JSONL, or None / "hub" for the hub split;
            `config.max_new_tokens` / `config.min_new_tokens`: the response token budget (the `gsm8k-quick`
            preset sets 256 / 256, the paper's evaluation length); the config's templates replace the built-in
            ones when the task is built through its spec (`cory_env.tasks.base.with_templates`).
        tokenizer: the agents' tokenizer (its chat template, if any, renders the prompts).
        split: "train" or "test"; selects the hub split when `config.data_path` is unset.
        one_shot: include the 1-shot example in the pioneer prompt.
        max_new_tokens: overrides `config.max_new_tokens` (tokens); None keeps the config's.
        min_new_tokens: overrides `config.min_new_tokens`, the low end of the env's per-episode budget draw; None
            keeps the config's. Equal ends give a fixed budget (a maths answer cut at a random length is wasted).
        correct_reward, wrong_reward, format_reward: see `gsm8k_reward`.
        limit: keep only the first `limit` problems; None keeps all.
        use_chat_template: see `build_pioneer_template`.

    Returns:
        A `Task` named "gsm8k" with the whole question as the query (`query_tokens=None`), the token budget
        `[min_new_tokens, max_new_tokens]` (EOS still ends a response early) and no action mask.

    Raises:
        ValueError: if `split` is unknown, the lengths are not 1 <= min_new_tokens <= max_new_tokens, or the data
            is malformed (see `load_gsm8k`).
        FileNotFoundError, ConnectionError: from `load_gsm8k` (missing file; hub unreachable).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    max_new = config.max_new_tokens if max_new_tokens is None else max_new_tokens
    min_new = config.min_new_tokens if min_new_tokens is None else min_new_tokens
    check_number(max_new, "max_new_tokens", integer=True, low=1)
    check_number(min_new, "min_new_tokens", integer=True, low=1, high=max_new,
                 fix="at most max_new_tokens; set both equal for a fixed budget")
    if max_new < 64:
        logger.warning("GSM8K with max_new_tokens=%d: step-by-step answers usually need 150-256 tokens (paper "
                       "evaluation: 256); use --preset gsm8k-quick or --max_new_tokens 256", max_new)
    records = load_gsm8k(f"hub:{split}" if config.data_path in (None, "hub") else config.data_path, limit=limit)
    pioneer_template = build_pioneer_template(tokenizer, one_shot=one_shot, use_chat_template=use_chat_template)
    observer_template = build_observer_template(tokenizer, use_chat_template=use_chat_template)
    reward_fn = functools.partial(gsm8k_reward_fn, correct_reward=correct_reward, wrong_reward=wrong_reward,
                                  format_reward=format_reward)
    return Task(name="gsm8k", records=records, reward_fn=reward_fn, pioneer_template=pioneer_template,
                observer_template=observer_template, query_tokens=None, min_new_tokens=min_new, max_new_tokens=max_new,
                action_mask=None)


SPEC = TaskSpec(make_gsm8k_task, evaluation="pass@k", reads=("data_path", "min_new_tokens", "max_new_tokens"),
                summary="GSM8K grade-school maths (paper §5.2): exact-answer reward, pass@k")
