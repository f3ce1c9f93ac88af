"""Influence and laziness: how much knowledge transfer moves each later seat, and whether it copies.

A sequential partner can turn *lazy* (Dr. MAMR, ICLR 2026): contribute trivially, or copy the earlier answer. For
every seat k after the first (CORY's observer; each later seat of a chain), on the same queries and with
the same sampling noise for seat k, the earlier seats' answers are **given** (`cory_env.EpisodeBatch.reset`'s
``responses``) in three conditions:

* ``real``: the answers the earlier seats wrote to this query;
* ``other``: the answers they wrote to **another** row of the batch (row i gets row i + 1's; another query unless
  the two rows drew the same record);
* ``empty``: no answer at all (every earlier response empty).

Seat k's answer in each condition is scored with the task reward against the **real** episode (the real partner
answers in its record, `cory_env.episode.partner_records`), so a seat that ignores what it reads scores the same
in all three. Then

* ``influence`` = r_k(real) − r_k(other): what reading the right answer is worth (0: the seat ignores it; by
  construction 0 without knowledge transfer);
* ``influence_empty`` = r_k(real) − r_k(empty);
* ``copy_rate``: the share of seat k's word n-grams (n = `COPY_N`; unigrams for answers shorter than n) that occur
  in the answer of the seat just before it, in the real condition (1: it copies; a hand-made copier scores 1).

Means over the evaluated episodes, per seat.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from cory_env.episode import partner_records
from cory_env.rewards import score_texts
from trainers.rollout import run_episodes, sampling_generator

__all__ = ["COPY_N", "CONDITIONS", "copy_rate", "influence"]

#: n of the copy rate's word n-grams.
COPY_N = 2
#: The conditions of the earlier seats' answers, in order.
CONDITIONS = ("real", "other", "empty")


def _ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    n = n if len(words) >= n else 1
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def copy_rate(responses: list[str], partners: list[str], n: int = COPY_N) -> np.ndarray:
    """Per row, the share of the response's word n-grams that occur among the partner answer's n-grams (of the same
    n); unigrams when the response has fewer than n words; 0 for an empty response.

    Args:
        responses, partners: B texts each (whitespace-split into words).
        n: n-gram order (>= 1).

    Returns:
        float64 (B,) in [0, 1].

    >>> copy_rate(["a b", "c d", "a x y"], ["a b c", "d c", "a x z"]).tolist()
    [1.0, 0.0, 0.5]
    """
    out = np.zeros(len(responses))
    for i, (response, partner) in enumerate(zip(responses, partners)):
        grams = _ngrams(response.split(), n)
        if grams:
            order = len(grams[0])
            known = set(_ngrams(partner.split(), order)) if len(partner.split()) >= order else set()
            out[i] = sum(g in known for g in grams) / len(grams)
    return out


def influence(env, seats: Mapping[str, object], *, num_batches: int, seed: int, n: int = COPY_N,
              sampling: Mapping[str, object] | None = None) -> dict:
    """Influence and copy rate of every seat that reads earlier seats (see the module docstring).

    Args:
        env: a `BatchedCORYEnv` of the run's seating (the held-out split, `trainers.evaluation.episodes.heldout_env`
            with ``collective=True``); B >= 2 (the ``other`` condition takes another row's answers).
        seats: seat -> agent, every seat of the env.
        num_batches: batches of B episodes; seed: query and sampling seed (batch b as `evaluation_batches`).
        n: the copy rate's n-gram order.
        sampling: seat -> the `SamplingConfig` its agent samples with (the seat's own settings); None: defaults.

    Returns:
        ``{seat: {"reward_real", "reward_other", "reward_empty", "influence", "influence_empty", "copy_rate"}}``
        for each seat after the first (none for a single seat), with ``num_queries``.

    Raises:
        ValueError: B < 2, or an agent missing for a seat.
    """
    B = env.batch_size
    if B < 2:
        raise ValueError(f"influence needs batches of at least 2 episodes (another query's answer), got B={B}")
    missing = sorted(set(env.possible_agents) - set(seats))
    if missing:
        raise ValueError(f"influence needs an agent for every seat; missing {missing}")
    names = list(env.possible_agents)
    readers = list(env.seating.seats)[1:]  # every later seat: one that reads nothing scores influence 0 (the floor)
    rewards = {s.name: {c: [] for c in CONDITIONS} for s in readers}
    copies = {s.name: [] for s in readers}
    task = env.task
    for b in range(num_batches):
        offset = b * B
        real = run_episodes(env, seats, seed=seed, generator=sampling_generator(seed + 7919 * b, seats[names[0]]),
                            stream_offset=offset, sampling=sampling)
        for seat in readers:
            k = names.index(seat.name)
            earlier = names[:k]
            given = {"real": {s: real.seats[s].response_ids for s in earlier},
                     "other": {s: real.seats[s].response_ids[1:] + real.seats[s].response_ids[:1] for s in earlier},
                     "empty": {s: [[] for _ in range(B)] for s in earlier}}
            records = partner_records(real.records, [real.seats[s].response_text for s in earlier])
            for condition, responses in given.items():
                gen = sampling_generator(seed + 7919 * b + 104729 * (k + 1), seats[seat.name])  # same noise in all
                later = {s: seats[s] for s in names[k:]}
                played = run_episodes(env, later, seed=seed, generator=gen, stream_offset=offset,
                                      responses=responses, sampling=sampling)
                texts = played.seats[seat.name].response_text
                scores = score_texts(task.reward_fn, task.name, real.query_text, texts, records)
                rewards[seat.name][condition].extend(np.asarray(scores, dtype=float).tolist())
                if condition == "real":
                    copies[seat.name].extend(copy_rate(texts, real.seats[earlier[-1]].response_text, n).tolist())
    out: dict = {}
    for seat, by_condition in rewards.items():
        means = {c: float(np.mean(v)) for c, v in by_condition.items()}
        out[seat] = {**{f"reward_{c}": m for c, m in means.items()},
                     "influence": means["real"] - means["other"], "influence_empty": means["real"] - means["empty"],
                     "copy_rate": float(np.mean(copies[seat]))}
    out["num_queries"] = num_batches * B
    return out
