"""The relay task ``"relay"``: only the pioneer sees the query; the observer must learn it from the pioneer's answer.

A toy in which **knowledge transfer is necessary**: the query is the pioneer's private information, so the observer
scores well only by reading the pioneer's answer a1 (its knowledge-transfer prompt holds a1 and not q), and the
pair scores well only when the pioneer answers in a way the observer can use. It is `tiny_vocab` with the query
hidden from the observer (same 20-token vocabulary, queries, held-out slice and action mask).

| | |
|---|---|
| Query q | 4 distinct symbols of ``a`` … ``p`` (the 1820 `tiny_vocab` queries) |
| Seating | CORY's two seats with a **private query** (`Task.private_query`): the observer never sees q |
| Pioneer prompt | ``"{query} ?"`` |
| Observer prompt, knowledge transfer | ``": {response} ?"`` (the pioneer's answer a1 only, never q: the task's `response_only_template`) |
| Observer prompt, w/o knowledge transfer | ``": ?"`` (nothing: the ablation removes the observer's only information; `blank_template`) |
| Response | exactly 2 tokens (EOS ends it earlier); only symbols and EOS are allowed |
| Task reward r(q, a) | pioneer: r1 = |set(a1) ∩ q| / 2; observer: r2 = |set(a2) ∩ set(a1) ∩ q| / 2 (repeat the pioneer's valid symbols) |

Optimum with knowledge transfer: the pioneer names 2 query symbols (r1 = 1) and the observer repeats them (r2 = 1):
collective reward 2. Without knowledge transfer the observer's prompt is the same for every query, so its answer cannot
depend on q: the best pair is a fixed observer answer (say ``a b``) and a pioneer that names ``a`` and ``b`` whenever q
holds them, giving E[r2] = (P(a ∈ q) + P(b ∈ q)) / 2 = 1/4 and a collective optimum of **1.25**. A uniformly random pair
scores ≈ 0.23. Unlike `tiny_vocab`, no convention on q can replace the transfer: the gap between CORY (→ 2) and CORY w/o
KT (≤ 1.25) is the value of knowledge transfer (`benchmarks/learning.py --rung relay`).
"""

from __future__ import annotations

from cory_env.tasks.base import Task, TaskSpec
from cory_env.tasks.tiny_vocab import ANSWER_LEN, tiny_vocab_tokenizer, symbol_task

__all__ = ["SPEC", "WITHOUT_KT_OPTIMUM", "make_relay_task", "relay_reward"]

#: The best collective reward without knowledge transfer (module docstring).
WITHOUT_KT_OPTIMUM = 1.25


def relay_reward(queries: list[str], responses: list[str], records: list[dict]) -> list[float]:
    """r(q, a) = #(distinct symbols of a's first `ANSWER_LEN` words ∩ q ∩ partner's words) / `ANSWER_LEN`, where a
    row without a partner (the pioneer) uses q alone.

    Args:
        queries: N query texts (symbols separated by spaces).
        responses: N response texts.
        records: N records; an observer row's record holds the pioneer's answer as ``"partner_response"``.

    Returns:
        N floats in [0, 1].

    >>> relay_reward(["a b c d"] * 3, ["a b", "b a", "b c"], [{}, {"partner_response": "a b"},
    ...                                                     {"partner_response": "a x"}])
    [1.0, 1.0, 0.0]
    """
    out = []
    for query, response, record in zip(queries, responses, records):
        valid = set(query.split())
        partner = (record or {}).get("partner_response")
        if partner is not None:
            valid &= set(partner.split()[:ANSWER_LEN])
        out.append(len(set(response.split()[:ANSWER_LEN]) & valid) / ANSWER_LEN)
    return out


def make_relay_task(config=None, tokenizer=None) -> Task:
    """The relay task (see the module docstring), ``Task(name="relay", private_query=True, ...)``; `config` and
    `tokenizer` as `cory_env.tasks.tiny_vocab.make_tiny_vocab_task`'s (the config's observer template is the prompt
    of a seat that sees q, which relay's own seating has not)."""
    return symbol_task("relay", relay_reward, config, tokenizer, private_query=True)


SPEC = TaskSpec(make_relay_task, tokenizer=tiny_vocab_tokenizer, reads=("heldout_fraction", "query_split"),
                summary="tiny_vocab with the query private to the pioneer: knowledge transfer is necessary")
