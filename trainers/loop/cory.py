"""`CORYTrainer`: the CORY loop (docs/paper.md §1), for any seating (`EnvConfig.seating`): CORY's two seats, the
single-agent PPO baseline on the same env (``seating="ppo"``), a chain of N seats, a population.

One iteration: (1) roll out B episodes through the batched env, each seat's model sampling with the seat's settings
(the pioneer answers, the observer answers after seeing it: knowledge transfer; every seat gets the collective
reward); (2) the MARL algorithm updates every learning model from the seats' rollouts against its frozen reference
model; (3) log ``scope/quantity`` metrics for seats and models (`trainers.loop.metrics.iteration_metrics`); (4) role
exchange by the run's matchmaking scheme; checkpoints and held-out evaluations when due (`train`).

Same seed ⇒ same metrics on CPU: every source of randomness is derived from (seed, iteration), so a resumed run
continues exactly as an uninterrupted one. Ctrl-C finishes the current iteration, writes a checkpoint and returns.
Data-parallel (``cory train --num_processes N``): every process rolls out its own ``batch_size`` episodes (rank r
plays the rows r·B .. (r+1)·B − 1 of a one-process run with batch N·B) and the learners keep the replicas equal
(`trainers.distributed`); only the main process writes config, logs and checkpoints.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Callable, Collection

import numpy as np
import torch
import yaml
from tqdm.contrib.logging import logging_redirect_tqdm

from trainers.config import RunConfigs
from trainers.distributed import DataParallel
from trainers.evaluation.evaluator import EVAL_SEED, Evaluator
from trainers.heap import reuse_heap
from trainers.learning.joint import JointBatch
from trainers.loop import run_state
from trainers.loop.run_state import STOP_SIGNALS
from trainers.loop.build import check_model_context, discard_snapshot, freeze_bundle, seed_everything
from trainers.loop.cast import build_cast
from trainers.loop.guards import UpdateGuard
from trainers.loop.loading import load_run_tokenizers
from trainers.loop.metrics import MetricsLogger, iteration_metrics, sample_rows
from trainers.loop.plan import plan_run
from trainers.loop.progress import Progress
from trainers.loop.role_exchange import Bundle, RoleExchange
from trainers.loop.run_dir import restore_replaced
from trainers.loop.sharding import gathered_for_generation, shard_agents
from trainers.rollout import rollout_from_transcript, run_episodes

__all__ = ["EVAL_SEED", "STOP_SIGNALS", "CORYTrainer", "derive_seed"]

logger = logging.getLogger(__name__)

def derive_seed(seed: int, iteration: int, stream: int, rank: int = 0) -> int:
    """A 32-bit seed for one (run seed, iteration, stream[, data-parallel rank > 0]) tuple (numpy SeedSequence)."""
    entropy = [seed, iteration, stream] + ([rank] if rank else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


class CORYTrainer:
    """Trains the models of a run's cast in the seats of its seating (CORY: two; the single-agent baseline: one) on a
    CORY env.

    Args:
        configs: the run (`trainers.config.RunConfigs`: run, model, sampling, env, the update, the task's and the
            learner's options), e.g. ``RunConfigs(run=CORYConfig(...), update=PPOConfig(...), env=EnvConfig(...))`` or
            `RunConfigs.from_flat`.
        model, tokenizer: an already loaded policy model and tokenizer for every slot (else loaded from
            ``configs.model.model``; a run with a model per slot loads its own).
        reward_fn: optional reward callable overriding ``configs.env.reward``; config.yaml records it as
            ``module:function`` when it is importable by that name (`cory_env.rewards.reward_name`).
        dist: the data-parallel group; default `DataParallel.from_launcher(configs.run.device)` (one process unless
            started by ``accelerate launch`` / ``torchrun``). ``configs.update.batch_size`` counts this process's
            episodes.

    Attributes:
        plan, seating, env: what `trainers.loop.plan.plan_run` checked and built, once, before the loop. cast: the
            models (`trainers.loop.cast.Cast`). algorithm: the run's joint learner (`LearnerSpec.build`). exchange:
            `trainers.loop.role_exchange.RoleExchange`. evaluator: `trainers.evaluation.evaluator.Evaluator`.

    Raises:
        TypeError: `configs` is not a `RunConfigs`.
        FileExistsError: if `output_dir` holds a run and neither `resume` nor `overwrite` is set.
        FileNotFoundError: `resume` without a checkpoint in `output_dir`.
        ValueError: what `plan_run` refuses (the learner, the task, the seating, a resume into a run whose config or
            process count differs); a resume whose inputs (model weights, tokenizer, query data, reward) changed by
            content (`trainers.loop.fingerprint`); `model` for a run with a model per slot.
    """

    def __init__(self, configs: RunConfigs, *, model=None, tokenizer=None, reward_fn=None,
                 dist: DataParallel | None = None) -> None:
        if not isinstance(configs, RunConfigs):
            raise TypeError(f"CORYTrainer takes one RunConfigs (trainers.config), got {type(configs).__name__}; "
                            "e.g. CORYTrainer(RunConfigs(run=..., update=..., env=...))")
        self.configs, self.config = configs, configs.run
        config = configs.run
        self.dist = DataParallel.from_launcher(config.device) if dist is None else dist
        if tokenizer is None:
            with self.dist.main_process_first():  # the first load may convert a GGUF file into the shared cache
                tokenizers = load_run_tokenizers(configs)
        else:
            tokenizers = {configs.model.model: tokenizer}
        self.plan = plan = plan_run(configs, tokenizers, num_processes=self.dist.world_size, reward_fn=reward_fn)
        self.seating, self.env, self.output_dir = plan.seating, plan.env, Path(config.output_dir)
        self.dist.barrier()  # every process has checked the folder before the main one changes it
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        if config.heap_reuse:
            reuse_heap()
        seed_everything(config.seed, config.deterministic)
        with self.dist.main_process_first():
            self.cast = build_cast(plan.slots, tokenizers, configs.sampling, seed=config.seed,
                                   device=self.dist.device, task_tok=plan.task_tokenizer, model=model)
        self.agents = self.cast.agents
        check_model_context(self.agents, plan.env.context_len)
        if config.sharded:  # before the learners build their optimizers over the (then sharded) parameters
            shard_agents(self.agents, next(iter(self.cast.refs.values())), self.dist)
        self.algorithm = configs.learner_spec.build(self.agents, self.cast.refs, configs.update, dist=self.dist)
        self.guard = UpdateGuard(self.algorithm, self.agents, learner=config.learner, dist=self.dist,
                                 output_dir=self.output_dir)  # no NaN/inf reaches the weights or a checkpoint
        self.exchange = RoleExchange([Bundle(n, a, self.algorithm.learners[n]) for n, a in self.agents.items()],
                                     self.seating.names, plan.scheme, name=config.matchmaking,
                                     rows=configs.update.batch_size * self.dist.world_size,
                                     reset_on_exchange=config.reset_on_exchange, freeze=freeze_bundle,
                                     discard=discard_snapshot, follow=plan.follow)
        self.evaluator = Evaluator(plan.env_config, self.seating, plan.seat_sampling, task_options=configs.task_options,
                                   reward_fn=reward_fn, kl_penalty=configs.learner_spec.kl_estimator(configs.update),
                                   eta=config.eta, query_tokenizer=plan.task_tokenizer, warn=self.dist.is_main)
        self._replaced: Path | None = None  # the run --overwrite moved aside, until this run's first checkpoint
        self.replaced_restored = False  # True once `restore_replaced` put it back
        self.start_iteration = 0
        self.config_dict = plan.flat
        self.inputs = run_state.inputs(self.cast, plan.task, self.config_dict["reward"])
        if self.dist.is_main:
            logger.info("seating: %s", self.seating.describe())
            logger.info("models: %s", run_state.describe_models(self.cast))
            for message in plan.warnings:
                logger.warning("%s", message)
        run_state.start(self)  # everything is checked: only now is the run folder changed (or resumed)
        self._stop_requested = False
        self._updating = False  # True once an iteration's learners may have changed the weights
        self.stopped_early = False  # set when a stop signal ended train() before num_iterations

    def close(self, *, wait: bool = False) -> None:
        """End this process's part of the run (`DataParallel.close`; `wait`: meet the others at a barrier first);
        ``with CORYTrainer(...)`` does it on leaving the block. With one process it does nothing."""
        self.dist.close(wait=wait)

    def __enter__(self) -> "CORYTrainer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.restore_replaced()  # a run that ends before its first checkpoint gives the replaced run back
        self.close(wait=exc_type is None)

    def restore_replaced(self) -> bool:
        """Put back the run that ``--overwrite`` moved aside, if this run has not written a checkpoint yet; True if
        a run was put back (`trainers.loop.run_dir.restore_replaced`)."""
        aside, self._replaced = self._replaced, None
        if aside is None:
            return False
        restore_replaced(self.output_dir, aside)
        self.replaced_restored = True
        return True

    def save_checkpoint(self, iteration: int) -> Path:
        """Write checkpoint `iteration` (`trainers.loop.run_state.save`); returns its path."""
        return run_state.save(self, iteration)

    # ------------------------------------------------------------------ one iteration
    def iteration(self, it: int) -> tuple[dict[str, float], list[dict]]:
        """Rollout, one update of every learning model (`JointBatch` to the algorithm), role exchange; returns
        (metrics, sample texts)."""
        seed, rank = self.config.seed, self.dist.rank
        torch.manual_seed(derive_seed(seed, it, 0, rank))  # dropout and anything else on the global RNG
        sampler = torch.Generator(device=self.dist.device).manual_seed(derive_seed(seed, it, 1, rank))
        seats, group, sampling = self.exchange.seats, self.env.group_size, self.plan.seat_sampling
        self.env.set_tokenizers({seat: bundle.agent.tokenizer for seat, bundle in seats.items()})
        t0 = time.perf_counter()
        # rank r plays rows r·B .. of a one-process batch of N·B (row i's query is drawn from stream i // group)
        acting: dict = {}  # each seat's acting log-probabilities and values: the learners' old scores when exact
        with gathered_for_generation({s: b.agent for s, b in seats.items()}) as acting_agents:  # FSDP2: see there
            transcript = run_episodes(self.env, acting_agents, seed=derive_seed(seed, it, 2), generator=sampler,
                                      stream_offset=rank * (self.configs.update.batch_size // group), acting=acting,
                                      sampling=sampling)
        t1 = time.perf_counter()
        self._updating = True  # from here on the weights may change: a failure can no longer keep iteration it - 1
        frozen = self.exchange.frozen_seats  # a frozen snapshot's seat: in the batch, never updated
        batch = JointBatch(
            rollouts={seat: rollout_from_transcript(transcript, seat, acting=acting.get(seat),
                                                    temperature=sampling[seat].temperature) for seat in seats},
            models={seat: bundle.name for seat, bundle in seats.items()},
            generators={seat: torch.Generator().manual_seed(derive_seed(seed, it, 3 + k))
                        for k, seat in enumerate(seats) if seat not in frozen},
            group_size=group, tokenizers={seat: b.agent.tokenizer for seat, b in seats.items()}, frozen=frozen)
        betas = {seat: seats[seat].learner.kl_coef for seat in batch.learning}  # this step's
        stats = self.guard.step(batch)  # algorithm.step, checked for NaN/inf
        t2 = time.perf_counter()
        metrics = iteration_metrics(stats, transcript, seats, frozen=frozen, betas=betas, eta=self.config.eta,
                                    learner=self.config.learner, models=self.agents, first=self.seating.first)
        metrics["cory/role_exchange"] = float(self.exchange.after_iteration(it))
        for name, episodes in self.exchange.episodes.items():  # episodes each model played, over every seat
            metrics[f"{name}/episodes"] = float(episodes)
        metrics["time/rollout_s"], metrics["time/update_s"] = t1 - t0, t2 - t1
        metrics.update(run_state.memory())
        return self.dist.mean_stats(metrics), sample_rows(transcript, self.config.log_samples, self.seating.first,
                                                          batch.models)

    # ------------------------------------------------------------------ held-out evaluation
    @property
    def evaluated_model(self) -> str:
        """The model the run's pioneer-alone held-out evaluations follow now (`RoleExchange.evaluated_model`: CORY's
        role exchange, the model in the pioneer seat; a population or a model per slot, ``llm1``)."""
        return self.exchange.evaluated_model()

    def evaluate(self, *, episodes: int, seed: int, collective: bool = False, model: str | None = None) -> dict:
        """Evaluate on held-out queries, each seat sampling with its settings (no update): `Evaluator.collective`
        of the models `RoleExchange.evaluation_seats` seats (`collective`), else `Evaluator.pioneer` of `model`
        (default `evaluated_model`) alone in the pioneer seat, whatever seat it trains in; `episodes` rounded up to
        whole batches of at most 64; `seed` one training never uses (its streams derive from `CORYConfig.seed`).

        Returns:
            dict: ``reward`` (the collective reward, or the pioneer's task reward), ``query_split``, ``num_queries``
            and, for the pioneer alone, kl (nats), combined_reward (η = `CORYConfig.eta`, else the model's KL
            coefficient), distinct_1, distinct_2, response_len, samples.

        Raises:
            ValueError: `episodes` < 1, `collective` with one seat, or `model` with `collective` or not a model.
        """
        bundles = self.exchange.bundles
        if model is not None and (collective or model not in bundles):
            raise ValueError(f"model={model!r}: name one of {sorted(bundles)}, with the pioneer alone "
                             "(collective=False)")
        if collective:
            with gathered_for_generation({s: b.agent for s, b in self.exchange.evaluation_seats().items()}) as seats:
                return self.evaluator.collective(seats, episodes=episodes, seed=seed)
        bundle = bundles[model or self.evaluated_model]
        ref = self.cast.refs.get(bundle.name, next(iter(self.cast.refs.values())))  # a snapshot: its source's base
        with gathered_for_generation({self.seating.first: bundle.agent}) as seats:  # FSDP2: every process the same
            return self.evaluator.pioneer(seats[self.seating.first], ref, episodes=episodes, seed=seed,
                                          beta=bundle.learner.kl_coef)

    def influence(self, *, episodes: int, seed: int) -> dict[str, float]:
        """`Evaluator.influence` of the models `RoleExchange.evaluation_seats` seats (empty with one seat)."""
        with gathered_for_generation({s: b.agent for s, b in self.exchange.evaluation_seats().items()}) as seats:
            return self.evaluator.influence(seats, episodes=episodes, seed=seed)

    def heldout_evaluation(self) -> dict:
        """The run's own held-out evaluation: the pioneer alone (`evaluated_model`) on `CORYConfig.eval_episodes`
        queries with the seed `EVAL_SEED` (the same every time); with `CORYConfig.eval_influence`, also `influence`."""
        out = self.evaluate(episodes=self.config.eval_episodes, seed=EVAL_SEED)
        if self.config.eval_influence:
            out.update(self.influence(episodes=self.config.eval_episodes, seed=EVAL_SEED))
        return out

    # ------------------------------------------------------------------ the loop
    def _request_stop(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        if self._stop_requested:
            raise KeyboardInterrupt
        self._stop_requested = True
        logger.warning("%s received: finishing this iteration, then writing a checkpoint "
                       "(press Ctrl-C again to abort without saving)", signal.Signals(signum).name)

    def _evaluate_now(self, done: int, eval_at: Collection[int],
                      evaluate: Callable[[CORYTrainer, int], dict] | None) -> dict | None:
        """The evaluation due after `done` finished iterations (`train`), or None when none is due here."""
        every = self.config.eval_every
        due = done in eval_at or (every > 0 and done % every == 0 and self.config.eval_episodes > 0)
        if not due or not (self.dist.is_main or self.config.sharded):  # sharded: every process takes part
            return None
        return evaluate(self, done) if evaluate is not None else self.heldout_evaluation()

    def train(self, *, eval_at: Collection[int] = (),
              evaluate: Callable[[CORYTrainer, int], dict] | None = None) -> list[dict[str, float]]:
        """Run iterations `start_iteration .. num_iterations-1`; returns their metrics.

        Checkpoints: every `checkpoint_every` iterations, after the first iteration that ends
        `checkpoint_every_minutes` after the last one, at a stop signal, at the end, and when an iteration fails before
        any model changed (`trainers.loop.run_state.save_before_failure`: the checkpoint of the iteration before).
        Evaluations: after iteration ``it`` (role exchange included), when ``it + 1`` is a multiple of
        `CORYConfig.eval_every` (with `CORYConfig.eval_episodes` > 0) or is in `eval_at`, ``evaluate(self, it + 1)``
        runs (default `heldout_evaluation`; the main process, or every process with FSDP2 shards); its dict is kept
        in that iteration's history row under ``"eval"`` and its numbers are logged as ``eval/<key>``.

        Raises:
            trainers.learning.update.NonFiniteLossError: a NaN/inf loss, gradient or weight, whoever wrote the
                learner (`trainers.loop.guards`); no checkpoint takes it, and the message names the last good
                one, which --resume continues from.
        """
        cfg, main = self.config, self.dist.is_main
        log = MetricsLogger(self.output_dir, tensorboard=cfg.tensorboard,
                            config_text=yaml.safe_dump(self.config_dict, sort_keys=False),
                            purge_step=self.start_iteration or None) if main else None
        history: list[dict[str, float]] = []
        last_saved, saved_at = self.start_iteration - 1, time.monotonic()
        progress = Progress(self.start_iteration, cfg.num_iterations, self.seating.label, seats=self.seating.names,
                            enabled=main, every_s=cfg.log_every_seconds)
        try:
            with run_state.stop_signals(self._request_stop), logging_redirect_tqdm():  # logs above the live bar
                for it in range(self.start_iteration, cfg.num_iterations):
                    self._updating = False
                    with run_state.save_before_failure(self, it, last_saved):
                        metrics, samples = self.iteration(it)
                    evaluation = self._evaluate_now(it + 1, eval_at, evaluate)
                    row = {"iteration": it, **metrics}
                    if evaluation is not None:
                        metrics = {**metrics, **{f"eval/{k}": float(v) for k, v in evaluation.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)}}
                        row = {"iteration": it, **metrics, "eval": evaluation}
                    if main:
                        log.log(it, metrics)
                        log.log_samples(it, samples)
                    history.append(row)
                    progress.update(it, metrics)
                    # read once (a signal after this line stops after the next iteration); any process's request
                    # stops all; the main process's clock decides the time-based checkpoints for all
                    overdue = bool(cfg.checkpoint_every_minutes) and main and \
                        time.monotonic() - saved_at >= 60 * cfg.checkpoint_every_minutes
                    flags = self.dist.mean_stats({"stop": float(self._stop_requested), "overdue": float(overdue)})
                    stop = flags["stop"] > 0
                    if it == cfg.num_iterations - 1 or stop or flags["overdue"] > 0 or \
                            (cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0):
                        self.save_checkpoint(it)
                        last_saved, saved_at = it, time.monotonic()
                    if stop:
                        self.stopped_early = True  # on every process, whichever one received the signal
                        logger.warning("stopped after iteration %d; resume with --resume", it)
                        break
        except BaseException:
            self.restore_replaced()  # failed before the first checkpoint: the replaced run comes back
            raise
        finally:
            progress.close()
            if log is not None:
                log.close()
        self.last_checkpoint_iteration = last_saved
        return history
