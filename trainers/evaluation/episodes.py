"""Inference-time evaluation: the pioneer answers alone (no observer), as CORY is deployed (docs/paper.md §1).

Reports task reward, KL to the reference model, combined reward, distinct-1/2 (diversity; PPO's distribution
collapse shows as low distinct-n, docs/paper.md §3) and response length.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np
import torch

from cory_env import BatchedCORYEnv, EnvConfig
from cory_env.checks import check_number
from cory_env.seating import PIONEER, Seating
from cory_env.tasks import task_spec
from trainers.learning import ppo_math
from trainers.rollout import rollout_from_transcript, run_episodes, sampling_generator
from trainers.learning.experience import score_rollout

#: The seating of a pioneer-alone evaluation (`cory_env.seating.SEATING_SPECS`: the first seat, its own reward).
PIONEER_ALONE = "ppo"


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct-n (Li et al. 2016, arXiv:1510.03055): unique n-grams / all n-grams over whitespace tokens (0.0 when
    the texts hold none).

    Raises:
        ValueError: if n < 1.
    """
    check_number(n, "n", integer=True, low=1)
    grams = [tuple(words[i:i + n]) for words in (t.split() for t in texts) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def query_key(record: dict) -> str:
    """A short, stable name of a query record: the first 12 hex digits of the SHA-256 of its ``"query"`` text."""
    return hashlib.sha256(str(record["query"]).encode("utf-8")).hexdigest()[:12]


def clustered_sem(values: Sequence[float], clusters: Sequence[str]) -> float:
    """Standard error of the mean of `values` when the values of one cluster are not independent (episodes that drew
    the same query): the cluster-robust (CR1) variance G/(G-1) · Σ_g (Σ_{i∈g} (x_i − x̄))² / N², G clusters, N
    values. With one value per cluster it is the usual s/√N.

    Source: Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust Inference", eq. 11 with the G/(G-1)
    small-sample factor.

    >>> round(clustered_sem([1.0, 1.0, 3.0, 3.0], ["a", "a", "b", "b"]), 3)
    1.0
    >>> round(clustered_sem([1.0, 1.0, 3.0, 3.0], ["a", "b", "c", "d"]), 3)  # s / sqrt(N)
    0.577

    Raises:
        ValueError: fewer than two clusters (no spread to estimate), or `values` and `clusters` of other lengths.
    """
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values and {len(clusters)} cluster labels: give one label per value")
    groups = sorted(set(clusters))
    if len(groups) < 2:
        raise ValueError(f"a clustered standard error needs at least 2 clusters, got {len(groups)}")
    x = np.asarray(values, dtype=float)
    residual = x - x.mean()
    sums = np.array([residual[[c == g for c in clusters]].sum() for g in groups])
    n, g = len(x), len(groups)
    return float(np.sqrt(g / (g - 1) * (sums ** 2).sum() / n ** 2))


def gain_summary(before: dict, after: dict) -> dict:
    """The held-out gain of one model over another on the same episodes (`evaluate_pioneer` results): the mean
    per-episode difference of the task reward, its standard error clustered by query (`clustered_sem`), the
    episodes, the distinct queries, and the combined reward before and after. With fewer than two distinct queries
    ``gain_sem`` is None and ``gain_sem_note`` says why (`sem_unavailable_note`); otherwise the note is None.

    Raises:
        ValueError: results of different episodes (other queries or counts).
    """
    if before["query_keys"] != after["query_keys"]:
        raise ValueError("the two evaluations played other queries; evaluate both with the same env and seed")
    diffs = [a - b for a, b in zip(after["rewards"], before["rewards"])]
    keys = after["query_keys"]
    distinct = len(set(keys))
    note = None if distinct >= 2 else sem_unavailable_note(len(diffs), distinct)
    return {"gain": float(np.mean(diffs)), "gain_sem": None if note else clustered_sem(diffs, keys),
            "gain_sem_note": note, "episodes": len(diffs), "distinct_queries": distinct,
            "combined_before": before["combined_reward"], "combined_after": after["combined_reward"]}


def sem_unavailable_note(episodes: int, distinct_queries: int) -> str | None:
    """Why a gain over `episodes` episodes of `distinct_queries` distinct queries has no standard error clustered by
    query (it needs two queries or more), or None when it can have one.

    >>> sem_unavailable_note(1, 1)
    '1 episode of 1 distinct query; a standard error clustered by query needs at least 2 distinct queries'
    >>> sem_unavailable_note(8, 5) is None
    True
    """
    if distinct_queries >= 2:
        return None
    return (f"{episodes} episode{'s' * (episodes != 1)} of {distinct_queries} distinct "
            f"quer{'y' if distinct_queries == 1 else 'ies'}; a standard error clustered by query needs at least 2 "
            "distinct queries")


def heldout_sem_warning(env, episodes: int) -> str | None:
    """Said before a held-out evaluation starts: why the gain of `episodes` episodes on `env` (from `heldout_env`)
    cannot have a standard error (one episode, or a query source of one record), with the fix; None when it can."""
    records = len(env.task.records)
    note = sem_unavailable_note(episodes, min(episodes, records))
    if note is None:
        return None
    fix = ("raise --eval_episodes (cory eval: --episodes) to 2 or more" if episodes < 2 else
           f"the {env.config.query_split} side of the queries holds {records} record; use more data or a larger "
           "--heldout_fraction")
    return f"the held-out gain will have no standard error ({note}); {fix}"


def sequence_kl(agent, ref_model, rollout, kind: str = "kl") -> torch.Tensor:
    """float32 (B,): sum over response tokens of the `kind` estimate of KL(π‖π_ref) (`ppo_math.kl_penalty`;
    "kl" = k1 = logp − ref_logp), nats, both policies scored as they sample (`score_rollout`)."""
    return sequence_kls(agent, ref_model, rollout, kind)[0]


def sequence_kls(agent, ref_model, rollout, kind: str = "kl") -> tuple[torch.Tensor, torch.Tensor]:
    """(`kind` estimate, k1 estimate) of the sequence KL(π‖π_ref), each float32 (B,) in nats, from one scoring
    of the rollout (`sequence_kl`), on the agent's device (an evaluation transcript's rollout is built on the CPU)."""
    full = kind == "full"
    rollout = rollout.to(agent.device)
    old, ref = score_rollout(agent, ref_model, rollout, return_logits=full, need_values=False)
    kl = ppo_math.kl_penalty(old.logprobs, ref.logprobs, kind, logits=old.logits if full else None,
                             ref_logits=ref.logits if full else None, mask=rollout.response_mask)
    k1 = ppo_math.masked_delta(old.logprobs, ref.logprobs, rollout.response_mask)
    return kl.sum(dim=-1), k1.sum(dim=-1)


def evaluation_batches(env, seats: dict, *, num_batches: int, seed: int, acting: dict | None = None,
                       sampling: Mapping | None = None):
    """Yield the `EpisodeTranscript` of each of `num_batches` evaluation batches: batch b plays the query streams
    ``(seed, b·B + i)`` (rows b·B .. of one long batch) and samples with a generator seeded ``seed + 7919·b``, so the
    same seed gives the same queries and sampling streams to every model evaluated (the generator on the device the
    first seat's agent samples on: `trainers.rollout.sampling_generator`). `acting` (a dict) receives each
    batch's `trainers.rollout.ActingScores` (`run_episodes`); `sampling`: seat -> its `SamplingConfig`."""
    for b in range(num_batches):
        gen = sampling_generator(seed + 7919 * b, next(iter(seats.values())))
        yield run_episodes(env, seats, seed=seed, generator=gen, stream_offset=b * env.batch_size, acting=acting,
                           sampling=sampling)


def evaluate_collective(seats: dict, env, *, num_batches: int, seed: int, sampling: Mapping | None = None) -> dict:
    """Run every seat (pioneer, then observer with knowledge transfer, ...) on `num_batches` batches of the env.

    Args:
        seats: seat id -> agent (``{"pioneer": ..., "observer": ...}``, e.g. `RoleExchange.seats` agents).
        env: a `BatchedCORYEnv` of those seats (e.g. on the held-out query split).
        num_batches: batches of `env.batch_size` queries; seed: query/sampling seed.
        sampling: seat -> the `SamplingConfig` its agent samples with (the seat's own settings); None: each agent's
            default.

    Returns:
        dict: collective_reward (mean of the first seat's reward R = (M · r)_0: r(q, a1) + c·r(q, a2) for CORY),
        ``<seat>_task_reward`` for every seat (pioneer_task_reward, observer_task_reward, ...), num_queries.
    """
    first = env.possible_agents[0]
    collective, task = [], {seat: [] for seat in env.possible_agents}
    for transcript in evaluation_batches(env, seats, num_batches=num_batches, seed=seed, sampling=sampling):
        collective.extend(np.asarray(transcript.seats[first].reward, dtype=float).tolist())
        for seat, rewards in task.items():
            rewards.extend(np.asarray(transcript.seats[seat].task_reward, dtype=float).tolist())
    return {"collective_reward": float(np.mean(collective)),
            **{f"{seat}_task_reward": float(np.mean(r)) for seat, r in task.items()}, "num_queries": len(collective)}


def evaluate_pioneer(agent, ref_model, env, *, num_batches: int, seed: int, eta: float,
                     num_samples: int = 5, kl_penalty: str = "kl", sampling=None) -> dict:
    """Run the pioneer alone on `num_batches` batches of the (single-agent) env.

    Args:
        agent, ref_model: the model to evaluate, seated as pioneer, and its reference model (for KL).
        env: a single-seat `BatchedCORYEnv` (``seating="ppo"``).
        num_batches, seed: as in `evaluate_collective` (a seed the training run did not use).
        eta: coefficient of the combined reward = task_reward − eta · KL.
        num_samples: texts to include.
        kl_penalty: KL estimator summed into `kl` (the one that shaped the run's reward, as its training `kl`).
        sampling: the `SamplingConfig` the pioneer samples with; None: the agent's default.

    Returns:
        dict: task_reward, kl (the `kl_penalty` estimator), kl_k1 (the k1 estimate logp − ref_logp, comparable
        across runs that penalise different estimators), combined_reward (means; nats for the KLs), rewards (the
        per-episode task rewards, in order), responses (every response text, in the same order), query_keys (each
        episode's query record, as a short hash of its text, in the same order: episodes that drew the same record
        share it, which the standard error of a gain must account for, `gain_summary`), distinct_queries,
        distinct_1, distinct_2, response_len, num_queries (episodes), samples.
    """
    rewards, kls, k1s, lengths, texts, samples, keys = [], [], [], [], [], [], []
    acting: dict = {}
    (first,) = env.possible_agents
    own = {first: sampling} if sampling is not None else None
    temperature = sampling.temperature if sampling is not None else None
    for transcript in evaluation_batches(env, {first: agent}, num_batches=num_batches, seed=seed, acting=acting,
                                         sampling=own):
        rollout = rollout_from_transcript(transcript, first, env.pad_token_id, acting=acting.get(first),
                                          temperature=temperature)
        seat = transcript.seats[first]
        rewards.extend(np.asarray(seat.task_reward, dtype=float).tolist())
        kl, k1 = sequence_kls(agent, ref_model, rollout, kl_penalty)
        kls.extend(kl.tolist())
        k1s.extend(k1.tolist())
        lengths.extend(rollout.response_mask.sum(dim=-1).tolist())
        texts.extend(seat.response_text)
        keys.extend(query_key(record) for record in transcript.records)
        for q, r, s in zip(transcript.query_text, seat.response_text, seat.task_reward):
            if len(samples) < num_samples:
                samples.append({"query": q, "response": r, "task_reward": float(s)})
    task_reward, kl = float(np.mean(rewards)), float(np.mean(kls))
    return {
        "task_reward": task_reward, "kl": kl, "kl_k1": float(np.mean(k1s)), "combined_reward": task_reward - eta * kl,
        "rewards": rewards, "responses": texts, "query_keys": keys, "distinct_queries": len(set(keys)),
        "distinct_1": distinct_n(texts, 1), "distinct_2": distinct_n(texts, 2),
        "response_len": float(np.mean(lengths)), "num_queries": len(rewards), "samples": samples,
    }


def heldout_env(env_config: EnvConfig, tokenizer, *, episodes: int, collective: bool = False,
                reward_fn=None, task_options=None, seating: Seating | None = None,
                query_tokenizer=None) -> BatchedCORYEnv:
    """The env a held-out evaluation plays (`trainers.evaluation.evaluator.Evaluator`): the held-out query split
    (``query_split="test"``) when the task has one and `env_config` sets `heldout_fraction` > 0
    (`cory_env.tasks.TaskSpec.heldout_split`), else the training queries; batches of min(`episodes`, 64) rows; the
    run's seating when `collective` (`seating`, the run's `Seating` object, else the config's spec), else the pioneer
    alone (``seating="ppo"``, with the pioneer seat's own generation settings). `task_options`: the run's task options
    (`RunConfigs.task_options`). `tokenizer`: one, or seat -> tokenizer (the models' own, docs/seats.md);
    `query_tokenizer`: the one the queries are drawn and cut in (the run's first model's: the same queries whichever
    model is evaluated; None: the first seat's). Build it once and pass it to every evaluation of a run."""
    split, _ = task_spec(env_config.task).heldout_split(env_config)
    size = {"batch_size": min(episodes, 64), "reward_fn": reward_fn, "task_options": task_options,
            "task_tokenizer": query_tokenizer}
    if collective and seating is not None:
        return BatchedCORYEnv(replace(env_config, query_split=split), tokenizer, seating=seating, **size)
    spec = env_config.seating if collective else PIONEER_ALONE
    own = env_config.seat_generation
    if not collective and own:  # the pioneer alone samples with the pioneer seat's own settings
        own = {seat: settings for seat, settings in own.items() if seat == PIONEER} or None
    if not collective and isinstance(tokenizer, Mapping):
        tokenizer = tokenizer[PIONEER]
    return BatchedCORYEnv(replace(env_config, query_split=split, seating=spec, seat_generation=own), tokenizer, **size)
