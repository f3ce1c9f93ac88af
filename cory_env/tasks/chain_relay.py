"""The chain-relay task ``"chain_relay"``: N seats pass the query down a chain in which only the first seat sees it.

A toy in which the **number of seats matters** and knowledge transfer is necessary at every link: the query is
private to the pioneer, seat k sees only seat k − 1's answer, and every seat is paid for naming query symbols. So
seat k scores only if every seat before it passed query symbols along. Same 20-token vocabulary, queries, held-out
slice and action mask as `tiny_vocab`.

| | |
|---|---|
| Query q | 4 distinct symbols of ``a`` … ``p`` (the 1820 `tiny_vocab` queries) |
| Seating (default) | a chain of 3 seats (``pioneer``, ``observer_1``, ``observer_2``; ``--seating chain:N`` for N) in which seat k reads only seat k − 1 (`Task.seat_reads` ``"previous"``) and only the pioneer sees q (`Task.private_query`) |
| Prompts | pioneer ``"{query} ?"``; seat k ≥ 1 ``": {response} ?"`` (seat k − 1's answer); without knowledge transfer ``": ?"`` |
| Response | exactly 2 tokens (EOS ends it earlier); only symbols and EOS are allowed |
| Task reward r(q, a) | |distinct symbols among a's first 2 words ∩ q| / 2, the same rule for every seat, in [0, 1] |
| Seat reward | the collective reward: R_i = Σ_k r_k (`EnvConfig.partner_reward_coef` 1) |

**Optimum with knowledge transfer: N** (3 for the default chain). Each r_k ≤ 1, so R_i = Σ_k r_k ≤ N; the policy in
which the pioneer names 2 distinct symbols of q and every later seat repeats the 2 symbols it reads earns r_k = 1 in
every seat, hence N.

**Optimum without knowledge transfer: 1 + (N − 1)·p**, where p = max over two distinct symbols (s, t) of
(P(s ∈ q) + P(t ∈ q)) / 2 under the query distribution: p = 1/4 when q is a uniform 4-subset of 16 symbols (each
symbol is in q with probability 4/16), giving **1.5** for N = 3. Proof: without knowledge transfer seat k ≥ 1 reads
nothing and does not see q, so its prompt (``": ?"``) is the same for every query and its answer A_k is independent
of q. For any fixed answer, E[r_k] = E[|set(A_k) ∩ q|] / 2 = Σ_{s ∈ set(A_k)} P(s ∈ q) / 2 ≤ p (at most two distinct
symbols count); a random answer is a mixture of fixed ones, so E[r_k] ≤ p too. The pioneer sees q and earns at most
1. Summing, E[R] ≤ 1 + (N − 1)·p, reached by a pioneer that names two query symbols and later seats that always name
the two most frequent symbols. On the held-out fifth used by the learning ladder p is `heldout_blind_value` (0.273 for
``heldout_fraction=0.2``: that slice of 364 queries is not exactly uniform), so its ceiling there is 1.546.

A uniformly random policy scores ≈ 0.23 per seat (≈ 0.69 collective for N = 3). The learning ladder's ``chain_relay``
rung trains the chain with and without knowledge transfer (`benchmarks/learning.py --rung chain_relay`).
"""

from __future__ import annotations

import itertools

from cory_env.data import heldout_split
from cory_env.tasks.base import Task, TaskSpec
from cory_env.tasks.tiny_vocab import ANSWER_LEN, tiny_vocab_tokenizer, SYMBOLS, symbol_task, tiny_vocab_records

__all__ = ["SPEC", "NUM_SEATS", "chain_relay_reward", "heldout_blind_value", "make_chain_relay_task",
           "without_kt_optimum"]

#: Seats of the task's default chain.
NUM_SEATS = 3


def chain_relay_reward(queries: list[str], responses: list[str], records: list[dict]) -> list[float]:
    """r(q, a) = #(distinct symbols of a's first `ANSWER_LEN` words ∩ q) / `ANSWER_LEN` (every seat alike; the records
    are not read).

    >>> chain_relay_reward(["a b c d"] * 3, ["a b", "a a", "x y"], [{}, {}, {}])
    [1.0, 0.5, 0.0]
    """
    return [len(set(response.split()[:ANSWER_LEN]) & set(query.split())) / ANSWER_LEN
            for query, response in zip(queries, responses)]


def heldout_blind_value(records: list[dict]) -> float:
    """p of the module docstring on `records`: the best E[r] of a seat that answers without seeing q, i.e. the
    largest (f_s + f_t) / 2 over two distinct symbols, f_s = the fraction of queries holding s."""
    freq = {s: sum(s in r["query"].split() for r in records) / len(records) for s in SYMBOLS}
    return max((freq[s] + freq[t]) / ANSWER_LEN for s, t in itertools.combinations(SYMBOLS, 2))


def without_kt_optimum(num_seats: int = NUM_SEATS, heldout_fraction: float = 0.0) -> float:
    """1 + (N − 1)·p: the best collective reward without knowledge transfer on the query split a ladder evaluates
    (the held-out slice when `heldout_fraction` > 0, else all queries, where p = 1/4)."""
    records = tiny_vocab_records()
    if heldout_fraction > 0:
        records = heldout_split(records, "test", heldout_fraction)
    return 1.0 + (num_seats - 1) * heldout_blind_value(records)


def make_chain_relay_task(config=None, tokenizer=None) -> Task:
    """The chain-relay task (see the module docstring), ``Task(name="chain_relay", num_seats=3, private_query=True,
    seat_reads="previous", ...)``; `config` and `tokenizer` as `cory_env.tasks.tiny_vocab.make_tiny_vocab_task`'s."""
    return symbol_task("chain_relay", chain_relay_reward, config, tokenizer, private_query=True,
                       num_seats=NUM_SEATS, seat_reads="previous")


SPEC = TaskSpec(make_chain_relay_task, tokenizer=tiny_vocab_tokenizer, reads=("heldout_fraction", "query_split"),
                summary="3 seats pass a private query along a chain, seat k reads seat k-1 (optimum 3)")
