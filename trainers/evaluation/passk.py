"""pass@k for objective-reward tasks (GSM8K): the estimators, and the sampling run that feeds them.

For each problem the pioneer alone (as CORY is deployed, docs/paper.md §1) draws n >= k answers; each is scored correct
or not against the gold number, and the per-problem correctness lists give

* `pass_at_k`: the unbiased estimator of Chen et al. 2021, 1 − C(n−c, k) / C(n, k) (c correct of n);
* `pass_at_k_first`: the authors' evaluation script, "any of the first k samples is correct" (docs/paper.md §2).

`evaluate_pass_at_k` batches the sampling: several problems × n samples are one `BatchedCORYEnv` batch, so one
KV-cached `act_batch` call advances every sample by one token.

Example:
    >>> round(pass_at_k(5, 2, 2), 6)
    0.7
    >>> pass_at_k_table([[True, False], [False, False]], ks=(1, 2), estimator="first")
    {1: 0.5, 2: 0.5}

Source: Chen et al. 2021, arXiv:2107.03374, §2.1 (estimator); Ma et al. 2024, arXiv:2410.06101, §5.2 (GSM8K
pass@1..5 with top_k 10, top_p 0.7, temperature 1.0, repetition penalty 1.1, 256 new tokens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agents.sampling import SamplingConfig
from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.checks import check_field, check_number
from cory_env.prompts import PromptTemplate
from cory_env.tokenizer import encode_text
from cory_env.tasks.gsm8k_answers import answers_match, extract_answer, has_answer_format
from trainers.evaluation.episodes import PIONEER_ALONE
from trainers.rollout import run_episodes, sampling_generator

__all__ = ["PAPER_EVAL_SAMPLING", "evaluate_pass_at_k", "pass_at_k", "pass_at_k_first", "pass_at_k_table"]

logger = logging.getLogger(__name__)

#: Sampling of the authors' GSM8K evaluation script (docs/paper.md §2).
PAPER_EVAL_SAMPLING = SamplingConfig(temperature=1.0, top_k=10, top_p=0.7, repetition_penalty=1.1)

ESTIMATORS = ("unbiased", "first")


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
        ValueError: if an argument is not an int, k > n, c > n, or any argument is out of range.

    Source: Chen et al. 2021, arXiv:2107.03374, §2.1 and Figure 3.
    """
    check_number(n, "n", integer=True, low=1)
    check_number(k, "k", integer=True, low=1, high=n, fix="draw at least k samples per problem")
    check_number(c, "c", integer=True, low=0, high=n, fix="the correct samples are among the n samples")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_first(correct: Sequence[bool], k: int) -> float:
    """The paper's pass@k: 1.0 if any of the first k samples of one problem (`correct`, in sampling order) is
    correct, else 0.0.

    Raises:
        ValueError: if k < 1 or k > len(correct).
    """
    check_number(k, "k", integer=True, low=1, high=len(correct), fix="at most the number of samples")
    return float(any(bool(x) for x in correct[:k]))


def pass_at_k_table(correctness: Sequence[Sequence[bool]], ks: Sequence[int] = (1, 2, 3, 4, 5), *,
                    estimator: str = "unbiased") -> dict[int, float]:
    """Mean pass@k over problems, for each k in `ks`.

    Args:
        correctness: one list of per-sample correctness per problem (lengths may differ, each >= max(ks)).
        ks: the budgets to report.
        estimator: "unbiased" (`pass_at_k`) or "first" (`pass_at_k_first`, the authors' script).

    Returns:
        `{k: mean pass@k}`; non-decreasing in k for either estimator.

    Raises:
        ValueError: if `correctness` is empty, `estimator` is unknown, or a problem has fewer than k samples.
    """
    if len(correctness) == 0:
        raise ValueError("correctness is empty: pass at least one problem's sample list")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be 'unbiased' or 'first', got {estimator!r}")
    table = {}
    for k in ks:
        if estimator == "unbiased":
            values = [pass_at_k(len(row), int(sum(bool(x) for x in row)), k) for row in correctness]
        else:
            values = [pass_at_k_first(row, k) for row in correctness]
        table[int(k)] = float(np.mean(values))
    return table


def _unscored(query_texts: list[str], response_texts: list[str]) -> list[float]:
    """Placeholder env reward: explicit-query records carry no gold, so answers are scored by the caller."""
    return [0.0] * len(response_texts)


def _context_len(task, tokenizer, records: Sequence[dict]) -> int:
    """Window L that holds the pioneer prompt of the longest question plus `task.max_new_tokens` (no truncation)."""
    template = PromptTemplate(task.pioneer_template, tokenizer, name="pioneer_template")
    longest = max(len(ids) for ids in encode_text(tokenizer, [r["query"] for r in records]))
    return template.prompt_len(longest) + task.max_new_tokens


def _check_args(records: Sequence[dict], num_samples: int, ks: Sequence[int], problems_per_batch: int) -> None:
    if len(records) == 0:
        raise ValueError("no GSM8K problems to evaluate; pass at least one record")
    missing = [i for i, r in enumerate(records) if "gold" not in r]
    if missing:
        raise ValueError(f"records {missing[:5]} have no 'gold' number; build them with cory_env.tasks.gsm8k."
                         "load_gsm8k (or make_gsm8k_task)")
    check_number(num_samples, "num_samples", integer=True, low=1)
    check_number(problems_per_batch, "problems_per_batch", integer=True, low=1)
    check_field(bool(ks) and min(ks) >= 1 and max(ks) <= num_samples, "ks", list(ks),
                f"use budgets in [1, num_samples={num_samples}]; draw num_samples >= max(ks) answers per problem")


def evaluate_pass_at_k(agent, task, *, records: Sequence[dict] | None = None, num_samples: int = 5,
                       ks: Sequence[int] = (1, 2, 3, 4, 5), problems_per_batch: int = 8, seed: int = 0,
                       num_examples: int = 3, callback: Callable[[dict[str, Any]], None] | None = None,
                       sampling: SamplingConfig | None = None) -> dict[str, Any]:
    """Sample `num_samples` pioneer answers per problem, of up to `task.max_new_tokens` tokens (EOS ends one early),
    and report pass@k (both estimators).

    Args:
        agent: an `agents.LLMAgent` (or anything with `act_batch(obs, generator=)` and `reset_cache()`).
        task: the GSM8K `Task` (`cory_env.tasks.gsm8k.make_gsm8k_task`): pioneer template, `max_new_tokens`,
            and the records when `records` is None.
        records: the problems, each with `"query"` and `"gold"`; None = `task.records`.
        num_samples: n, answers per problem (>= max(ks)).
        problems_per_batch: problems per env batch; one batch holds `problems_per_batch * num_samples` answers.
        seed: sampling seed; batch b samples from a generator seeded ``seed + b`` on the agent's device
            (`trainers.rollout.sampling_generator`).
        num_examples: answers (query, response, prediction, gold) kept verbatim in the result.
        callback: called after every batch with the partial result (same keys; `finished` False), e.g. to save
            progress of a long CPU run.
        sampling: the `SamplingConfig` the pioneer samples with (`PAPER_EVAL_SAMPLING` for the paper's evaluation);
            None: the agent's default.

    Returns:
        dict: `pass_at_k` and `pass_at_k_first` (`{k: mean over problems}`), `accuracy` (fraction of correct
        answers, = unbiased pass@1), `format_rate` (answers stating "The answer is N"), `response_len` (mean
        tokens), `num_problems`, `num_samples`, `max_new_tokens`, `generated_tokens`, `seconds`, `tokens_per_s`,
        `correct` (per problem, per sample, bool), `predictions` (extracted numbers or None), `golds`,
        `examples`, `finished` (True).

    Raises:
        ValueError: for no records, records without `"gold"`, ks outside [1, num_samples], or non-positive counts.
    """
    records = list(task.records if records is None else records)
    _check_args(records, num_samples, ks, problems_per_batch)
    tokenizer = agent.tokenizer
    env_config = EnvConfig(context_len=_context_len(task, tokenizer, records), truncate_query=False)
    envs: dict[int, BatchedCORYEnv] = {}
    correct: list[list[bool]] = []
    predictions: list[list[str | None]] = []
    examples: list[dict[str, Any]] = []
    lengths: list[int] = []
    formatted = 0
    start = time.perf_counter()
    result: dict[str, Any] = {}
    for b, first in enumerate(range(0, len(records), problems_per_batch)):
        batch = records[first:first + problems_per_batch]
        rows = len(batch) * num_samples
        if rows not in envs:
            envs[rows] = BatchedCORYEnv(env_config, tokenizer, batch_size=rows, task=task, reward_fn=_unscored,
                                        seating=PIONEER_ALONE)
        queries = [record["query"] for record in batch for _ in range(num_samples)]
        (pioneer,) = envs[rows].possible_agents
        transcript = run_episodes(envs[rows], {pioneer: agent}, seed=seed + b,
                                  generator=sampling_generator(seed + b, agent), queries=queries,
                                  sampling=None if sampling is None else {pioneer: sampling})
        seat = transcript.seats[pioneer]
        for p, record in enumerate(batch):
            texts = seat.response_text[p * num_samples:(p + 1) * num_samples]
            preds = [extract_answer(text) for text in texts]
            correct.append([answers_match(pred, record["gold"]) for pred in preds])
            predictions.append(preds)
            formatted += sum(has_answer_format(text) for text in texts)
            for text, pred in zip(texts, preds):
                if len(examples) < num_examples:
                    examples.append({"query": record["query"], "response": text, "prediction": pred,
                                     "gold": record["gold"]})
        lengths.extend(len(ids) for ids in seat.response_ids)
        result = _summary(correct, predictions, records, ks, lengths, formatted, examples, num_samples,
                          task.max_new_tokens, time.perf_counter() - start, finished=False)
        logger.info("pass@k: %d/%d problems, pass@1 %.3f, pass@%d %.3f, %.1f tokens/s", len(correct),
                    len(records), result["pass_at_k"][min(ks)], max(ks), result["pass_at_k"][max(ks)],
                    result["tokens_per_s"])
        if callback is not None:
            callback(result)
    result["finished"] = True
    return result


def _summary(correct, predictions, records, ks, lengths, formatted, examples, num_samples, max_new_tokens,
             seconds, *, finished: bool) -> dict[str, Any]:
    return {
        "pass_at_k": pass_at_k_table(correct, ks), "pass_at_k_first": pass_at_k_table(correct, ks, estimator="first"),
        "accuracy": float(np.mean([x for row in correct for x in row])), "format_rate": formatted / len(lengths),
        "response_len": float(np.mean(lengths)), "num_problems": len(correct), "num_samples": num_samples,
        "max_new_tokens": max_new_tokens, "generated_tokens": int(sum(lengths)), "seconds": round(seconds, 2),
        "tokens_per_s": sum(lengths) / seconds if seconds > 0 else 0.0, "correct": correct,
        "predictions": predictions, "golds": [r["gold"] for r in records[:len(correct)]], "examples": examples,
        "finished": finished,
    }
