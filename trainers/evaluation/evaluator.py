"""`Evaluator`: the held-out evaluations of a run's models, one object for the trainer, ``cory eval`` and
``cory crossplay``.

It holds what every evaluation of a run shares — the env config (its data source resolved once), the seating, each
seat's sampling settings, the task options, the reward and the KL estimator — and builds each held-out env once per
size, seating and tokenizers. Three evaluations, all on the held-out slice when the run has one (else fresh-seed draws
of the training queries, said once):

* `pioneer`: one model alone in the first seat, as CORY is deployed: task reward, KL to its reference, combined
  reward, distinct-n (`trainers.evaluation.episodes.evaluate_pioneer`);
* `collective`: models in every seat (knowledge transfer included): the collective reward and each seat's task
  reward (`evaluate_collective`);
* `influence`: how much each later seat reads the earlier ones, and whether it copies (`trainers.evaluation.
  influence`).

Each seat samples with its own settings (`cory_env.generation.seat_sampling`), passed to the rollout: the agents keep
no seat's settings. `pair` plays one line-up of models and scores each seat against its own model's reference (the
cross-play matrix's cell, `trainers.evaluation.crossplay`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from cory_env.checks import check_number
from trainers.evaluation.episodes import (evaluate_collective, evaluate_pioneer, evaluation_batches, heldout_env,
                                          heldout_sem_warning, sequence_kls)
from trainers.evaluation.influence import influence
from trainers.rollout import rollout_from_transcript

__all__ = ["EVAL_SEED", "Evaluator", "seated_tokenizer"]

logger = logging.getLogger(__name__)

#: Query/sampling seed of a run's held-out evaluations (`trainers.loop.cory.CORYTrainer.heldout_evaluation`, `cory
#: eval`, `cory crossplay`): training derives its streams from --seed (`trainers.loop.cory.derive_seed`), never this.
EVAL_SEED = 2_000_003


def seated_tokenizer(agents: Mapping[str, Any]):
    """The tokenizer of seated agents (seat -> agent) as an env takes it: the one object when they share it, else
    seat -> tokenizer."""
    tokenizers = {seat: agent.tokenizer for seat, agent in agents.items()}
    first = next(iter(tokenizers.values()))
    return first if all(t is first for t in tokenizers.values()) else tokenizers


class Evaluator:
    """The held-out evaluations of one run (see the module docstring).

    Args:
        env_config: the run's `EnvConfig`, its data source resolved (`trainers.loop.plan.RunPlan.env_config`).
        seating: the run's `Seating` (the collective evaluations play it; None: the config's seating spec).
        seat_sampling: seat -> the `SamplingConfig` the model there samples with (a seat not named: the agent's
            default sampling).
        task_options: the run's task options; reward_fn: the run's reward callable (None: the config's reward).
        kl_penalty: the KL estimator reported as ``kl`` (the one the run penalised).
        eta: η of the combined reward; None: the evaluated model's KL coefficient, `pioneer`'s `beta`.
        query_tokenizer: the tokenizer the queries are drawn and cut in (the run's first model's,
            `trainers.loop.plan.RunPlan.task_tokenizer`), so every model is evaluated on the same queries; None: the
            evaluated seat's.
        warn: say once, per size, when a pioneer evaluation's gain can have no standard error (the main process).
    """

    def __init__(self, env_config, seating=None, seat_sampling: Mapping[str, Any] | None = None, *,
                 task_options=None, reward_fn=None, kl_penalty: str = "kl", eta: float | None = None,
                 query_tokenizer=None, warn: bool = True) -> None:
        self.env_config, self.seating, self.seat_sampling = env_config, seating, dict(seat_sampling or {})
        self.query_tokenizer, self.warn = query_tokenizer, warn
        self.task_options, self.reward_fn, self.kl_penalty, self.eta = task_options, reward_fn, kl_penalty, eta
        self._envs: dict[tuple, Any] = {}

    def env(self, episodes: int, collective: bool, tokenizer):
        """The held-out env of `episodes` (batches of at most 64), the whole seating (`collective`) or the pioneer
        alone, for `tokenizer` (one, or seat -> tokenizer): built once (`trainers.evaluation.episodes.heldout_env`).

        Raises:
            ValueError: `episodes` < 1.
        """
        check_number(episodes, "episodes", integer=True, low=1)
        key = (episodes, collective, id(tokenizer) if not isinstance(tokenizer, Mapping)
               else tuple(id(t) for t in tokenizer.values()))
        if key not in self._envs:
            self._envs[key] = heldout_env(self.env_config, tokenizer, episodes=episodes, collective=collective,
                                          reward_fn=self.reward_fn, task_options=self.task_options,
                                          seating=self.seating if collective else None,
                                          query_tokenizer=self.query_tokenizer)
            no_sem = None if collective else heldout_sem_warning(self._envs[key], episodes)
            if no_sem and self.warn:  # said once, at the first evaluation of this size
                logger.warning("%s", no_sem)
        return self._envs[key]

    def pioneer(self, agent, ref_model, *, episodes: int, seed: int, beta: float = 0.0, env=None) -> dict:
        """`agent` alone in the first seat, sampling with that seat's settings, on `episodes` held-out queries
        (rounded up to whole batches): `evaluate_pioneer`'s numbers (``reward`` = its task reward, kl in nats,
        combined_reward with η = `eta` or `beta`, distinct-n, samples), ``query_split``. `env`: another held-out env
        of the pioneer alone (``cory eval --data_path``).

        Raises:
            ValueError: `episodes` < 1.
        """
        env = env if env is not None else self.env(episodes, False, agent.tokenizer)
        check_number(episodes, "episodes", integer=True, low=1)
        first = env.possible_agents[0]
        out = evaluate_pioneer(agent, ref_model, env, num_batches=-(-episodes // env.batch_size), seed=seed,
                               eta=self.eta if self.eta is not None else beta, kl_penalty=self.kl_penalty,
                               sampling=self.seat_sampling.get(first))
        return {**out, "reward": out["task_reward"], "query_split": env.config.query_split}

    def collective(self, seats: Mapping[str, Any], *, episodes: int, seed: int) -> dict:
        """Agents in every seat (seat -> agent), knowledge transfer included: the collective reward (``reward``: the
        first seat's R = (M · r)_0), each seat's task reward, ``query_split``, ``num_queries`` (`evaluate_collective`).

        Raises:
            ValueError: `episodes` < 1, a single seat, or an agent missing for a seat.
        """
        if len(seats) < 2:
            raise ValueError(f"a collective evaluation needs two or more seats, got {sorted(seats)} (a single-seat "
                             "seating); use collective=False")
        env = self.env(episodes, True, seated_tokenizer(seats))
        if set(seats) != set(env.possible_agents):
            raise ValueError(f"a collective evaluation needs an agent for every seat {env.possible_agents}, got "
                             f"{sorted(seats)}")
        out = evaluate_collective(dict(seats), env, num_batches=-(-episodes // env.batch_size), seed=seed,
                                  sampling=self.seat_sampling)
        return {**out, "reward": out["collective_reward"], "query_split": env.config.query_split}

    def influence(self, seats: Mapping[str, Any], *, episodes: int, seed: int) -> dict[str, float]:
        """Influence and copy rate of every seat after the first (`trainers.evaluation.influence`), agents in every
        seat, on `episodes` held-out queries (rounded up to whole batches): flat ``{"influence/<seat>",
        "influence_empty/<seat>", "copy_rate/<seat>", "reward_real/<seat>", "reward_other/<seat>",
        "reward_empty/<seat>"}``; empty with a single seat or `episodes` < 2.

        Raises:
            ValueError: `episodes` < 1.
        """
        check_number(episodes, "episodes", integer=True, low=1)
        if episodes < 2 or len(seats) < 2:
            return {}
        env = self.env(episodes, True, seated_tokenizer(seats))
        out = influence(env, seats, num_batches=-(-episodes // env.batch_size), seed=seed,
                        sampling=self.seat_sampling)
        return {f"{key}/{seat}": value for seat, values in out.items() if isinstance(values, dict)
                for key, value in values.items()}

    def pair(self, seats: Mapping[str, Any], refs: Mapping[str, Any], *, episodes: int, seed: int) -> dict[str, float]:
        """One line-up of models (seat -> agent; refs: seat -> that model's own reference) on `episodes` held-out
        queries: the collective reward, each seat's task reward and k1 KL to its own reference (nats per response),
        each later seat's influence and copy rate (when the batch holds two episodes or more), num_queries."""
        env = self.env(episodes, True, seated_tokenizer(seats))
        batches = -(-episodes // env.batch_size)
        names = list(env.possible_agents)
        collective, task, kl = [], {s: [] for s in names}, {s: [] for s in names}
        for transcript in evaluation_batches(env, seats, num_batches=batches, seed=seed, sampling=self.seat_sampling):
            collective.extend(np.asarray(transcript.seats[names[0]].reward, dtype=float).tolist())
            for seat in names:
                task[seat].extend(np.asarray(transcript.seats[seat].task_reward, dtype=float).tolist())
                rollout = rollout_from_transcript(transcript, seat, temperature=self.seat_sampling[seat].temperature)
                kl[seat].extend(sequence_kls(seats[seat], refs[seat], rollout, "kl")[1].tolist())
        moved = influence(env, seats, num_batches=batches, seed=seed, sampling=self.seat_sampling) \
            if env.batch_size > 1 else {}
        out = {"collective_reward": float(np.mean(collective)),
               **{f"{s}_task_reward": float(np.mean(v)) for s, v in task.items()},
               **{f"{s}_kl": float(np.mean(v)) for s, v in kl.items()}}
        for seat in names[1:]:
            out.update({f"{key}/{seat}" if len(names) > 2 else key: moved[seat][key]
                        for key in ("influence", "copy_rate") if seat in moved})
        return {**out, "num_queries": len(collective)}
