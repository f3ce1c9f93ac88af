"""The first-symbol bandit ``"first_symbol"``: the quickest task on which a learner shows that it learns.

The `tiny_vocab` queries, vocabulary, held-out slice and action mask, with a reward any policy-gradient learner
climbs within a minute on a CPU (``cory train --preset learner-check``, docs/extending.md): 1 when the answer's first
symbol is one of `TARGETS`, else 0; the query is ignored. A uniformly random first token (16 symbols and EOS) scores
3/17 ≈ 0.18, the optimum is 1. The learning ladder's ``sanity`` rung is this reward (`benchmarks/learning.py`).

| | |
|---|---|
| Query q | 4 distinct symbols of ``a`` … ``p`` (the 1820 `tiny_vocab` queries) |
| Response | exactly 2 tokens (EOS ends it earlier); only symbols and EOS are allowed |
| Task reward r(q, a) | 1 if a's first symbol is ``a``, ``b`` or ``c``, else 0 |
"""

from __future__ import annotations

from cory_env.tasks.base import Task, TaskSpec
from cory_env.tasks.tiny_vocab import symbol_task, tiny_vocab_tokenizer

__all__ = ["SPEC", "TARGETS", "first_symbol_reward", "make_first_symbol_task"]

#: The rewarded first symbols.
TARGETS = ("a", "b", "c")


def first_symbol_reward(queries: list[str], responses: list[str]) -> list[float]:
    """1.0 when the response's first word is one of `TARGETS`, else 0.0 (the query is ignored).

    >>> first_symbol_reward(["c d e f", "c d e f", "c d e f"], ["a k", "k a", ""])
    [1.0, 0.0, 0.0]
    """
    return [float(r.split()[:1] != [] and r.split()[0] in TARGETS) for r in responses]


def make_first_symbol_task(config=None, tokenizer=None) -> Task:
    """The first-symbol bandit (see the module docstring), ``Task(name="first_symbol", ...)``; `config` and
    `tokenizer` as `tiny_vocab`'s."""
    return symbol_task("first_symbol", first_symbol_reward, config, tokenizer)


SPEC = TaskSpec(make_first_symbol_task, tokenizer=tiny_vocab_tokenizer, reads=("heldout_fraction", "query_split"),
                summary="bandit on the tiny_vocab queries: reward 1 for a first symbol in {a, b, c} (learns in a "
                        "minute)")
