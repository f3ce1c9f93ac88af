"""The tiny-vocabulary task ``"tiny_vocab"``: split a set of symbols between the pioneer and the observer.

A 20-token world small enough for MLP policies (Tianshou), tiny LMs and hand-checked tests, whose collective
reward needs cooperation: the observer only scores well if it reads the pioneer's answer (knowledge transfer).

| | |
|---|---|
| Vocabulary | ``<eos>`` (0, also pad), ``<unk>`` (1), 16 symbols ``a`` … ``p`` (2-17), ``:`` (18), ``?`` (19) |
| Query q | 4 distinct symbols, e.g. ``"c f h k"`` (all 1820 4-subsets, each in a fixed shuffled order) |
| Pioneer prompt | ``"{query} ?"`` |
| Observer prompt | ``"{query} : {response} ?"`` (knowledge transfer: q, then the pioneer's answer a1) |
| Prompts of seats that do not see q | ``": {response} ?"`` (the answers it reads), ``": ?"`` (nothing): `cory_env.tasks.relay` |
| Response | exactly 2 tokens (EOS ends it earlier); with the task's tokenizer only symbols and EOS are allowed |
| Task reward r(q, a) | (distinct symbols of a's first 2 that are in q, not in the partner's answer) / 2 |

The pioneer has no partner, so r1 = |set(a1) ∩ q| / 2. The observer's partner is the pioneer: r2 =
|set(a2) ∩ q \\ set(a1)| / 2 (the env passes a1 as ``record["partner_response"]``). Rewards lie in [0, 1].

Optimum: the pioneer names any 2 query symbols (r1 = 1); the observer names the other 2 (r2 = 1); collective
reward r1 + r2 = 2. A uniformly random policy (17 allowed tokens) scores E[R] ≈ 0.42.

Knowledge transfer: six pioneer answers are optimal, so an observer that cannot see a1 can only be optimal if it
can predict a1 from q. Against a pioneer that samples its answer (uniformly among the optimal ones, say), an
observer without a1 earns E[r2] = 0.5, hence E[R] = 1.5. But both seats see q, so two *deterministic* policies can
agree on a convention (e.g. the pioneer names the first two symbols of q as shown, the observer the last two) and
reach 2 without knowledge transfer: the ablation (``knowledge_transfer=False``) is bounded by 1.5 only while the
pioneer's answer is not a function of q (measured: docs/results/learning.md).
Single-agent (PPO baseline, `cory_env.gym_env`): the optimum is r1 = 1.

Use the task's own tokenizer (`tiny_vocab_tokenizer`; ``cory train --task tiny_vocab --model tiny`` builds a tiny
LM over it) and a small context window (`CONTEXT_LEN` = 12 tokens fits both prompts and answers). Any other
tokenizer works too (rewards score whitespace-separated text), without the action mask.
"""

from __future__ import annotations

import itertools

import numpy as np

from cory_env.data import heldout_split
from cory_env.tasks.base import Task, TaskSpec

__all__ = ["SPEC", "ANSWER_LEN", "BLANK_TEMPLATE", "CONTEXT_LEN", "OBSERVER_TEMPLATE", "PIONEER_TEMPLATE", "QUERY_LEN",
           "RESPONSE_ONLY_TEMPLATE", "SYMBOLS", "VOCAB", "make_tiny_vocab_task", "seat_symbol_mask",
           "symbol_action_mask", "symbol_task", "tiny_vocab_records", "tiny_vocab_reward", "tiny_vocab_tokenizer"]

#: The 16 answer symbols.
SYMBOLS = tuple("abcdefghijklmnop")
#: Token -> id of the task's tokenizer (V = 20).
VOCAB = {"<eos>": 0, "<unk>": 1, **{s: i + 2 for i, s in enumerate(SYMBOLS)}, ":": 18, "?": 19}
#: Symbols per query.
QUERY_LEN = 4
#: Tokens per answer (both seats).
ANSWER_LEN = 2
#: A context window (tokens) that holds the observer's prompt and answer with the task's tokenizer.
CONTEXT_LEN = 12
PIONEER_TEMPLATE = "{query} ?"
OBSERVER_TEMPLATE = "{query} : {response} ?"
#: A seat that reads the earlier answers but not the query (a private query).
RESPONSE_ONLY_TEMPLATE = ": {response} ?"
#: A seat that sees neither (a private query without knowledge transfer).
BLANK_TEMPLATE = ": ?"


def tiny_vocab_tokenizer():
    """The task's word-level tokenizer: `VOCAB` (V = 20), whitespace split, EOS = pad = ``<eos>`` (id 0).

    Returns:
        A `transformers.PreTrainedTokenizerFast` with left padding.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(dict(VOCAB), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", unk_token="<unk>")
    fast.padding_side = "left"
    return fast


def symbol_action_mask(tokenizer) -> np.ndarray | None:
    """int8 (V,) mask allowing the 16 symbols and EOS when `tokenizer` is the task's own (`tiny_vocab_tokenizer`),
    else None (every token allowed; rewards score whitespace-separated text)."""
    if tokenizer is None or dict(tokenizer.get_vocab()) != VOCAB:
        return None
    mask = np.zeros(len(VOCAB), dtype=np.int8)
    mask[[VOCAB[s] for s in SYMBOLS]] = 1
    mask[VOCAB["<eos>"]] = 1
    return mask


def seat_symbol_mask(tokenizer) -> np.ndarray | None:
    """The symbol mask of a seat whose model brings another tokenizer than the task's (`Task.action_mask_for`,
    docs/seats.md): the task's own tokenizer's ids (`symbol_action_mask`), else every token whose text, stripped of
    spaces, is one symbol (``"a"`` and ``" a"`` of a byte-level BPE) plus EOS, when every symbol has such a token;
    else None (every token allowed).

    Returns:
        int8 (V,) with V = ``len(tokenizer)``, or None.
    """
    own = symbol_action_mask(tokenizer)
    if own is not None:
        return own
    mask = np.zeros(len(tokenizer), dtype=np.int8)
    covered = set()
    for token, index in tokenizer.get_vocab().items():
        text = tokenizer.convert_tokens_to_string([token]).strip()
        if text in SYMBOLS and index < len(mask):
            mask[index] = 1
            covered.add(text)
    if covered != set(SYMBOLS):
        return None
    mask[tokenizer.eos_token_id] = 1
    return mask


def tiny_vocab_records(seed: int = 0) -> list[dict]:
    """All C(16, 4) = 1820 queries, each ``{"query": "c f h k"}`` with its symbols in a seeded shuffled order."""
    rng = np.random.default_rng(seed)
    records = []
    for combo in itertools.combinations(SYMBOLS, QUERY_LEN):
        order = rng.permutation(QUERY_LEN)
        records.append({"query": " ".join(combo[i] for i in order)})
    return records


def tiny_vocab_reward(queries: list[str], responses: list[str], records: list[dict]) -> list[float]:
    """r(q, a) = #(distinct symbols in a's first `ANSWER_LEN` words ∩ q − partner's words) / `ANSWER_LEN`.

    Args:
        queries: N query texts (symbols separated by spaces).
        responses: N response texts.
        records: N records; an observer row's record holds the pioneer's answer as ``"partner_response"``.

    Returns:
        N floats in [0, 1].

    >>> tiny_vocab_reward(["a b c d"] * 2, ["a b", "b c"], [{}, {"partner_response": "a b"}])
    [1.0, 0.5]
    """
    out = []
    for query, response, record in zip(queries, responses, records):
        allowed = set(query.split()) - set((record or {}).get("partner_response", "").split())
        named = set(response.split()[:ANSWER_LEN])
        out.append(len(named & allowed) / ANSWER_LEN)
    return out


def make_tiny_vocab_task(config=None, tokenizer=None) -> Task:
    """The tiny-vocabulary task (see the module docstring).

    Args:
        config: `EnvConfig`; ``heldout_fraction`` / ``query_split`` pick a side of a fixed held-out slice of the
            1820 queries (`cory_env.data.heldout_split`, by a hash of the query text); the config's templates
            replace the task's when the task is built through its spec (`cory_env.tasks.base.with_templates`). The
            response length is the task's (`ANSWER_LEN`), not ``min/max_new_tokens``.
        tokenizer: with the task's own tokenizer, the action mask allows only the 16 symbols and EOS.
    """
    return symbol_task("tiny_vocab", tiny_vocab_reward, config, tokenizer)


def symbol_task(name: str, reward_fn, config, tokenizer, *, private_query: bool = False, num_seats: int = 2,
                seat_reads: str = "all") -> Task:
    """A task over the 1820 symbol queries (`tiny_vocab_records`) with `ANSWER_LEN`-token answers and this module's
    four templates: `tiny_vocab`, `relay` and `chain_relay` differ only in their name, reward and default seating.

    Args:
        name, reward_fn: the task's.
        config: `EnvConfig` or None: ``heldout_fraction`` / ``query_split`` pick a side of the fixed held-out slice
            (`cory_env.data.heldout_split`, by a hash of the query text).
        tokenizer: with the task's own tokenizer, the action mask allows only the 16 symbols and EOS.
        private_query, num_seats, seat_reads: the task's default seating (`Task`).
    """
    records = tiny_vocab_records() if config is None else heldout_split(tiny_vocab_records(), config.query_split,
                                                                         config.heldout_fraction)
    return Task(name=name, records=records, reward_fn=reward_fn, observer_template=OBSERVER_TEMPLATE,
                pioneer_template=PIONEER_TEMPLATE, response_only_template=RESPONSE_ONLY_TEMPLATE,
                blank_template=BLANK_TEMPLATE, num_seats=num_seats, private_query=private_query, seat_reads=seat_reads,
                query_tokens=None, min_new_tokens=ANSWER_LEN, max_new_tokens=ANSWER_LEN,
                action_mask=symbol_action_mask(tokenizer), action_mask_for=seat_symbol_mask)


SPEC = TaskSpec(make_tiny_vocab_task, tokenizer=tiny_vocab_tokenizer, reads=("heldout_fraction", "query_split"),
                summary="20-token cooperative toy: split 4 query symbols with the partner (optimum 2)")
