"""`CORYTrainer`: the CORY loop (docs/paper.md §1), for any seating (`EnvConfig.seating`): CORY's two seats, the
single-agent PPO baseline on the same env (``seating="ppo"``, ``--algo ppo``), a chain of N seats.

One iteration (files visited: `trainers.rollout` → `trainers.learning.joint` and the learners →
`trainers.loop.role_exchange` → `trainers.loop.metrics` / `trainers.loop.checkpoint`):

1. roll out B episodes through the batched env: the pioneer answers, the observer answers after seeing the
   pioneer's answer (knowledge transfer), and so on along the seating; every seat gets its reward (the collective
   reward);
2. the MARL algorithm updates every model from the seats' rollouts (per-seat learners: each seat's own prompt and
   response) against the one shared reference model;
3. log `scope/quantity` metrics for seats (`pioneer/`, `observer/`, ...) and model identities (`llm1/` … `llmN/`),
   with the model ↔ seat map (`cory/llm1_seat`, ...);
4. role exchange (rotation over the seats) every `role_exchange_period` iterations; checkpoint every
   `checkpoint_every`; a held-out evaluation every `eval_every` iterations when asked (`train`).

Same seed ⇒ same metrics on CPU: every source of randomness is derived from (seed, iteration), so a resumed run
continues exactly as an uninterrupted one. Ctrl-C finishes the current iteration, writes a checkpoint and returns.

Data-parallel (``accelerate launch --multi_gpu --num_processes N -m trainers.cli train ...`` or
``cory train --num_processes N``): every process rolls out its own ``batch_size`` episodes (rank r plays the rows
r·B .. (r+1)·B − 1 of a one-process run with batch N·B, same queries) and the learners keep the replicas equal
(`trainers.distributed`); only the main process writes config, logs and checkpoints.
"""

from __future__ import annotations

import logging
import resource
import signal
import time
from pathlib import Path
from typing import Any, Callable, Collection

import numpy as np
import psutil
import torch
import yaml
from tqdm.contrib.logging import logging_redirect_tqdm

from cory_env.checks import check_number
from cory_env.registry import PluginContractError
from cory_env.tasks import task_tokenizer
from trainers.config import RunConfigs, plugin_origins
from trainers.distributed import DataParallel
from trainers.heap import reuse_heap
from trainers.learning.joint import JointBatch
from trainers.learning.update import NonFiniteLossError
from trainers.loop import checkpoint as ckpt
from trainers.loop.build import (build_agents, build_exchange, build_slot_agents, check_model_context,
                                 load_run_model, load_run_tokenizer, seed_everything, tokenizers_by_model)
from trainers.loop.fingerprint import (check_fingerprints, data_fingerprint, model_fingerprint, models_fingerprint,
                                       reward_fingerprint, tokenizer_fingerprint)
from trainers.loop.guards import UpdateGuard
from trainers.loop.metrics import METRICS_FILE, SAMPLES_FILE, MetricsLogger, truncate_jsonl
from trainers.loop.plan import plan_run
from trainers.loop.progress import Progress
from trainers.loop.run_dir import (abandon_start, discard_replaced, recorded_config, restore_replaced,
                                   start_output_dir)
from trainers.loop.sharding import gathered_for_generation, shard_agents
from trainers.rollout import rollout_from_transcript, run_episodes

logger = logging.getLogger(__name__)

# signals that stop training cleanly: finish the iteration, write a checkpoint, return (Ctrl-C; a scheduler's TERM)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Query/sampling seed of the run's held-out evaluations (`CORYTrainer.heldout_evaluation`; `cory train
#: --eval_episodes`, `--eval_every`): training derives its streams from --seed (`derive_seed`), never this one.
EVAL_SEED = 2_000_003


def seated_tokenizer(agents: dict):
    """The tokenizer of seated agents (seat -> agent) as an env takes it: the one object when they share it, else
    seat -> tokenizer."""
    tokenizers = {seat: agent.tokenizer for seat, agent in agents.items()}
    first = next(iter(tokenizers.values()))
    return first if all(t is first for t in tokenizers.values()) else tokenizers


def derive_seed(seed: int, iteration: int, stream: int, rank: int = 0) -> int:
    """A 32-bit seed for one (run seed, iteration, stream[, data-parallel rank > 0]) tuple (numpy SeedSequence)."""
    entropy = [seed, iteration, stream] + ([rank] if rank else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


class CORYTrainer:
    """Trains one LLM agent per seat of the run's seating (CORY: two; the single-agent baseline: one) on a CORY env.

    Args:
        configs: the run (`trainers.config.RunConfigs`: run, model, sampling, env, the update, the task's and the
            learner's options), e.g. ``RunConfigs(run=CORYConfig(...), update=PPOConfig(...), env=EnvConfig(...))`` or
            `RunConfigs.from_flat`.
        model, tokenizer: an already loaded policy model and tokenizer (else loaded from ``configs.model.model``).
        reward_fn: optional reward callable overriding ``configs.env.reward``; config.yaml records it as
            ``module:function`` when it is importable by that name (`cory_env.rewards.reward_name`).
        dist: the data-parallel group; default `DataParallel.from_launcher(configs.run.device)` (one process unless
            started by ``accelerate launch`` / ``torchrun``). ``configs.update.batch_size`` counts this process's
            episodes.

    Everything is checked before any model loads, by the checks every path that starts a run shares
    (`trainers.loop.plan.plan_run`); the task and the seating are built there once and handed to the env.

    Raises:
        TypeError: `configs` is not a `RunConfigs`.
        FileExistsError: if `output_dir` holds a run and neither `resume` nor `overwrite` is set.
        FileNotFoundError: `resume` without a checkpoint in `output_dir`.
        ValueError: what `plan_run` refuses (the learner, the task, the seating, a resume into a run whose config or
            process count differs); a resume whose inputs (model weights, tokenizer, query data, reward) changed by
            content (`trainers.loop.fingerprint`).
    """

    def __init__(self, configs: RunConfigs, *, model=None, tokenizer=None, reward_fn=None,
                 dist: DataParallel | None = None) -> None:
        if not isinstance(configs, RunConfigs):
            raise TypeError(f"CORYTrainer takes one RunConfigs (trainers.config), got {type(configs).__name__}; "
                            "e.g. CORYTrainer(RunConfigs(run=..., update=..., env=...))")
        self.configs = configs
        config = configs.run
        self.config = config
        self.dist = DataParallel.from_launcher(config.device) if dist is None else dist
        if tokenizer is None:
            with self.dist.main_process_first():  # the first load may convert a GGUF file into the shared cache
                tokenizer = load_run_tokenizer(configs)  # model name -> tokenizer with a model per slot
        plan = plan_run(configs, tokenizer, num_processes=self.dist.world_size, reward_fn=reward_fn)
        self.seating = plan.seating
        self._env_source = plan.env_config  # every env of the run (training, evaluations) reads the same source
        self.output_dir = Path(config.output_dir)
        self.dist.barrier()  # every process has checked the folder before the main one changes it
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        if config.heap_reuse:
            reuse_heap()
        seed_everything(config.seed, config.deterministic)
        #: Model name -> its `ModelConfig` (`trainers.loop.build.slot_configs`); one config for all by default.
        self.slots = plan.slots
        #: Seat -> the `SamplingConfig` of whichever model sits there (`plan_run`: the seat's own settings).
        self.seat_sampling = plan.seat_sampling
        #: True when the slots hold different models (docs/seats.md).
        self.heterogeneous = plan.heterogeneous
        if plan.heterogeneous:  # a model per slot: each its own base, tokenizer and frozen reference
            if model is not None:
                raise ValueError("CORYTrainer(model=...) gives one model for every slot, but this run names a model "
                                 "per slot (ModelConfig.models); leave model=None (each slot loads its own)")
            with self.dist.main_process_first():
                built = build_slot_agents(self.slots, tokenizers_by_model(configs, tokenizer), configs.sampling,
                                          seed=config.seed,
                                          device=self.dist.device, task_tok=task_tokenizer(configs.task_spec))
            self.agents, self.refs, self.tokenizers = built.agents, built.refs, built.tokenizers
            self.tokenizer, self.ref_model = next(iter(self.tokenizers.values())), self.refs
            self._model_fingerprint = models_fingerprint(built.fingerprints)
            self.vocab_size = {name: len(tok) for name, tok in self.tokenizers.items()}
        else:
            if model is None:
                with self.dist.main_process_first():
                    model, tokenizer = load_run_model(configs, tokenizer)
            model.to(self.dist.device)
            self._model_fingerprint = model_fingerprint(model)  # as loaded: the reference model is built from it
            self.tokenizer = tokenizer
            self.vocab_size = len(tokenizer)
            self.agents, self.ref_model = build_agents(model, tokenizer, configs.model, configs.sampling,
                                                       num_models=len(self.slots))
            self.refs = dict.fromkeys(self.agents, self.ref_model)
            self.tokenizers = dict.fromkeys(self.agents, tokenizer)
        check_model_context(self.agents, plan.env.context_len)
        if config.sharded:  # before the learners build their optimizers over the (then sharded) parameters
            shard_agents(self.agents, self.ref_model, self.dist)
        self.algorithm = configs.learner_spec.build(self.agents, self.ref_model, configs.update, dist=self.dist)
        self.guard = UpdateGuard(self.algorithm, self.agents, learner=config.learner, dist=self.dist,
                                 output_dir=self.output_dir)  # no NaN/inf reaches the weights or a checkpoint
        self.exchange = build_exchange(self.agents, self.algorithm, config, self.seating, plan.scheme,
                                       rows=configs.update.batch_size * self.dist.world_size)
        self.population = plan.scheme is not None  # a matchmaking scheme seats the models (docs/partners.md)
        self.env = plan.env
        self._heldout_envs: dict[tuple, Any] = {}  # (episodes, collective, tokenizers) -> env, built once
        self._reward_fn = reward_fn
        self._replaced: Path | None = None  # the run --overwrite moved aside, until this run's first checkpoint
        self.replaced_restored = False  # True once `restore_replaced` put it back
        self.start_iteration = 0
        self.config_dict = plan.flat
        task = self.env.task
        once = {id(tok): tokenizer_fingerprint(tok) for tok in self.tokenizers.values()}  # each tokenizer once
        self._tokenizer_prints = {name: once[id(tok)] for name, tok in self.tokenizers.items()}
        self.inputs = {"model": self._model_fingerprint, "tokenizer": models_fingerprint(self._tokenizer_prints),
                       "data": data_fingerprint(task.records),
                       "reward": reward_fingerprint(task.reward_fn, self.config_dict["reward"])}
        if self.dist.is_main:
            logger.info("seating: %s", self.seating.describe())
            if plan.heterogeneous:
                logger.info("models: %s", ", ".join(
                    f"{name}={c.model} ({f'LoRA r={c.lora_r}' if c.use_lora else 'full'}, {c.dtype}, vocabulary "
                    f"{len(self.tokenizers[name])})" for name, c in self.slots.items()))
            for message in plan.warnings:
                logger.warning("%s", message)
        # model, tokenizer, data, reward and configs are all checked: only now is the run folder changed
        if config.resume:
            self._resume()
            if self.start_iteration >= config.num_iterations and self.dist.is_main:
                logger.warning("nothing to train: %s already holds %d iteration(s) and num_iterations=%d; raise "
                               "--num_iterations to continue it", self.output_dir, self.start_iteration,
                               config.num_iterations)
        elif self.dist.is_main:  # with --overwrite the old run is kept aside until this run's first checkpoint
            self._replaced = start_output_dir(self.output_dir, self.config_dict, replace=plan.has_run)
        started = self.dist.is_main and not config.resume
        try:
            self.dist.barrier()
            for bundle in self.exchange.bundles.values():  # identical replicas from the first step on (a
                self.dist.broadcast_parameters(bundle.agent.trainable_parameters())  # collective: also a barrier)
        except BaseException:  # stopped during start-up: nothing of this run began
            if started:
                aside, self._replaced = self._replaced, None
                abandon_start(self.output_dir, aside)
            raise
        self._stop_requested = False
        self._updating = False  # True once an iteration's learners may have changed the weights
        self.stopped_early = False  # set when a stop signal ended train() before num_iterations

    def close(self, *, wait: bool = False) -> None:
        """End this process's part of the run: destroy the data-parallel process group (`DataParallel.close`;
        `wait`: meet the other processes at a barrier first, for a clean end).

        Call it once training and evaluation are over, in every process of an ``accelerate launch`` / ``torchrun``
        script (``with CORYTrainer(...) as trainer:`` does it on leaving the block: waiting for the others when the
        block ended normally, not after an error). With one process it does nothing; the models stay usable either
        way.
        """
        self.dist.close(wait=wait)

    def __enter__(self) -> "CORYTrainer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.restore_replaced()  # a run that ends before its first checkpoint gives the replaced run back
        self.close(wait=exc_type is None)

    def restore_replaced(self) -> bool:
        """Put back the run that ``--overwrite`` moved aside, if this run has not written a checkpoint yet (it failed
        or was stopped before its first one); True if a run was put back. Called on leaving ``with CORYTrainer(...)``
        and when `train` fails; after the first checkpoint the old run is gone and this does nothing."""
        aside, self._replaced = self._replaced, None
        if aside is None:
            return False
        restore_replaced(self.output_dir, aside)
        self.replaced_restored = True
        return True

    # ------------------------------------------------------------------ run directory
    def _run_state(self) -> dict[str, Any]:
        """What a checkpoint records beside the weights: the config, the inputs' fingerprints, each model's β (the
        default η of `cory eval`) and where the learner, the task and the reward came from (a plug-in's
        ``module:attr`` or entry point: what ``--resume`` and `cory eval` must import again)."""
        first = next(iter(self.slots.values()))  # llm1's: with a model per slot each is under "models"
        state = {"config": recorded_config(self.config_dict), "model": first.model, "inputs": self.inputs,
                 "vocab_size": self.vocab_size,
                 "reference": {"model": first.model, "layout": "lora-shared" if first.use_lora else "copy"}}
        if self.heterogeneous:  # a model per slot: each named, with its tokenizer
            state["models"] = {name: {"model": c.model, "dtype": c.dtype, "use_lora": c.use_lora,
                                      "vocab_size": len(self.tokenizers[name]),
                                      "tokenizer": self._tokenizer_prints[name]}
                               for name, c in self.slots.items()}
        return {**state,
                "num_processes": self.dist.world_size,
                "kl_coef": {name: float(b.learner.kl_coef) for name, b in self.exchange.bundles.items()
                            if b.learner is not None},
                "plugins": plugin_origins(self.configs)}

    def _resume(self) -> None:
        path = ckpt.latest_checkpoint(self.output_dir)  # its process count was checked with the folder
        if path is None:  # stopped before its first checkpoint: its config was checked against config.yaml
            if self.dist.is_main:
                for name in (METRICS_FILE, SAMPLES_FILE):
                    truncate_jsonl(self.output_dir / name, -1)
            logger.warning("--resume: %s has no checkpoint yet (it stopped before the first one): starting from "
                           "the beginning", self.output_dir)
            return
        state = ckpt.read_trainer_state(path)  # its config was checked with the folder (`plan_run`)
        if state.get("vocab_size") != self.vocab_size:
            raise ckpt.CheckpointError(
                f"{path} was written for vocabulary size {state.get('vocab_size')}, this model has {self.vocab_size}")
        check_fingerprints(state["inputs"], self.inputs, str(path))
        ckpt.load_checkpoint(path, bundles=self.exchange.bundles, exchange=self.exchange)
        self.start_iteration = int(state["iteration"]) + 1
        if self.dist.is_main:
            for name in (METRICS_FILE, SAMPLES_FILE):
                truncate_jsonl(self.output_dir / name, int(state["iteration"]))
        logger.info("resumed %s at iteration %d", path, self.start_iteration)

    def save_checkpoint(self, iteration: int) -> Path:
        """Write checkpoint `iteration` (the main process writes; the others wait until it is on disk, and with
        FSDP2 shards first gather the models with it); returns its path."""
        path, error = ckpt.checkpoint_path(self.output_dir, iteration), None
        states = ckpt.bundle_states(self.exchange.bundles, keep=self.dist.is_main)
        if self.dist.is_main:
            try:
                path = ckpt.save_checkpoint(self.output_dir, iteration, states=states,
                                            exchange_state=self.exchange.state_dict(), run_state=self._run_state(),
                                            keep=self.config.keep_checkpoints)
            except (OSError, NonFiniteLossError) as err:  # every process must hear of it, or the others would wait
                error = err
            else:
                aside, self._replaced = self._replaced, None  # never put back once the new run has a checkpoint
                discard_replaced(aside)  # (a stop while it is deleted leaves the rest of it hidden beside the run)
        elif self.config.sharded:
            for _ in states:  # every shard is gathered with the main process, which writes it
                pass
        if self.dist.any(error is not None):  # also the barrier: the checkpoint is on disk (or failed) for all
            raise error if error is not None else OSError(
                f"the main process failed to write checkpoint {path}; see its error above")
        return path

    # ------------------------------------------------------------------ one iteration
    def iteration(self, it: int) -> tuple[dict[str, float], list[dict]]:
        """Rollout, one update of every model (`JointBatch` to the algorithm), role exchange; returns (metrics,
        sample texts)."""
        seed, rank = self.config.seed, self.dist.rank
        torch.manual_seed(derive_seed(seed, it, 0, rank))  # dropout and anything else on the global RNG
        sampler = torch.Generator(device=self.dist.device).manual_seed(derive_seed(seed, it, 1, rank))
        seats = self.exchange.seats
        group = self.env.group_size  # responses per query
        self._seat_models(seats)
        t0 = time.perf_counter()
        # rank r plays rows r·B .. of a one-process batch of N·B (row i's query is drawn from stream i // group)
        acting: dict = {}  # each seat's acting log-probabilities and values: the learners' old scores when exact
        with gathered_for_generation({s: b.agent for s, b in seats.items()}) as acting_agents:  # FSDP2: see there
            transcript = run_episodes(self.env, acting_agents, seed=derive_seed(seed, it, 2), generator=sampler,
                                      stream_offset=rank * (self.configs.update.batch_size // group), acting=acting)
        t1 = time.perf_counter()
        metrics: dict[str, float] = {}
        self._updating = True  # from here on the weights may change: a failure can no longer keep iteration it - 1
        learning = {seat: b for seat, b in seats.items() if b.learner is not None}  # a frozen snapshot never learns
        batch = JointBatch(
            rollouts={seat: rollout_from_transcript(transcript, seat, acting=acting.get(seat)) for seat in learning},
            models={seat: bundle.name for seat, bundle in learning.items()},
            generators={seat: torch.Generator().manual_seed(derive_seed(seed, it, 3 + k))
                        for k, seat in enumerate(seats) if seat in learning},
            group_size=group,
            tokenizers={seat: b.agent.tokenizer for seat, b in learning.items()} if self.env.heterogeneous else {})
        betas = {seat: self.algorithm.learners[bundle.name].kl_coef for seat, bundle in learning.items()}  # this step's
        for seat, stats in self.guard.step(batch).items():  # algorithm.step, checked for NaN/inf
            bundle = seats[seat]
            missing = [key for key in ("task_reward", "kl") if key not in stats]
            if missing:  # the Learner protocol's stats (docs/extending.md); the checkpoint before stays the latest
                raise PluginContractError(f"learner {self.config.learner!r} returned stats without {missing} for "
                                          f"{bundle.name} in seat {seat} (it returned {sorted(stats)}); a learner's "
                                          "step returns at least task_reward and kl (docs/extending.md)")
            eta = self.config.eta if self.config.eta is not None else betas[seat]
            stats["combined_reward"] = stats["task_reward"] - eta * stats["kl"]
            for key, value in stats.items():
                metrics[f"{seat}/{key}"] = value
                metrics[f"{bundle.name}/{key}"] = value
        for seat in seats.keys() - learning.keys():  # a snapshot's seat: its task reward, and that it is frozen
            metrics[f"{seat}/task_reward"] = float(np.mean(transcript.seats[seat].task_reward))
            metrics[f"cory/{seat}_frozen"] = 1.0
        t2 = time.perf_counter()
        first = self.seating.first
        metrics["cory/collective_reward"] = float(np.mean(transcript.seats[first].reward))
        metrics["cory/pioneer_is_llm1"] = float(seats[first].name == "llm1")  # during this iteration
        for k, bundle in enumerate(seats.values()):  # the model <-> seat map of this iteration (seat index)
            if bundle.learner is not None:
                metrics[f"cory/{bundle.name}_seat"] = float(k)
        for name in self.agents.keys() - {b.name for b in seats.values()}:  # a population's idle models
            metrics[f"cory/{name}_seat"] = -1.0
        metrics["cory/role_exchange"] = float(self.exchange.after_iteration(it))
        for name, episodes in getattr(self.exchange, "episodes", {}).items():  # a population: episodes per model
            metrics[f"{name}/episodes"] = float(episodes)
        metrics["time/rollout_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics["sys/rss_gb"] = psutil.Process().memory_info().rss / 2**30
        metrics["sys/peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
        return self.dist.mean_stats(metrics), self._samples(transcript)

    def _seat_models(self, seats) -> None:
        """Before a rollout: every model samples with the settings of the seat it sits in (`seat_sampling`), and
        the env's seats use the tokenizers of the models sitting there (role exchange moved them)."""
        for seat, bundle in seats.items():
            if bundle.agent.sampling != self.seat_sampling[seat]:
                bundle.agent.sampling = self.seat_sampling[seat]
        if len({id(t) for t in self.tokenizers.values()}) > 1:
            self.env.set_tokenizers({seat: bundle.agent.tokenizer for seat, bundle in seats.items()})

    def evaluation_seats(self) -> dict:
        """Seat -> the model bundle a held-out evaluation seats there. In a population (a matchmaking scheme seats
        the models, `population`): always ``llm1``, ``llm2``, … in seat order, so every point of a curve evaluates
        the same models whoever trained in which seat that iteration; else the models in their current seats (CORY:
        the pioneer seat's curve, as the paper's)."""
        if not self.population:
            return self.exchange.seats
        names = list(self.agents)  # llm1 ... llmN: the learning models, in order
        return {seat: self.exchange.bundles[names[k]] for k, seat in enumerate(self.seating.names)}

    def evaluate(self, *, episodes: int, seed: int, collective: bool = False, model: str | None = None) -> dict:
        """Evaluate the models in their seats (`evaluation_seats`) on held-out queries, sampling as in training (no
        update).

        The queries come from the held-out slice (`EnvConfig.query_split="test"`) when the run has one
        (`heldout_fraction` > 0), else from fresh-seed draws of the training queries (the result says which).

        Args:
            episodes: queries to answer (rounded up to whole batches of at most 64).
            seed: query and sampling seed; use one training never uses (its query streams derive from
                `CORYConfig.seed` through `derive_seed`).
            collective: every seat (knowledge transfer included) and the collective reward (needs two or more
                seats); False: the pioneer alone, as at inference.
            model: with the pioneer alone, evaluate this model (``"llm1"``, ``"llm2"``) in the pioneer seat
                whatever seat it trains in now (a fixed identity across role exchanges, as the paper's per-model
                curves); None: the model in the pioneer seat.

        Returns:
            dict: ``reward`` (the collective reward, or the pioneer's task reward) and, for the pioneer alone,
            kl (to the reference, the estimator of `PPOConfig.kl_penalty`, nats), combined_reward (task reward − η·kl
            with η = `CORYConfig.eta`, else the pioneer's current KL coefficient, as `cory eval`), distinct_1,
            distinct_2, response_len, samples; ``query_split``, ``num_queries``.

        Raises:
            ValueError: `episodes` < 1, `collective` without an observer seat, or `model` with `collective` or
                not one of the run's models.
        """
        from trainers.evaluation.episodes import evaluate_heldout

        seated = self.evaluation_seats()
        self._seat_models(seated)  # each seated model samples with its seat's settings
        seats = {seat: bundle.agent for seat, bundle in seated.items()}
        first = self.seating.first
        evaluated = seated[first]  # whose KL controller prices the combined reward
        if model is not None:
            if collective or model not in self.exchange.bundles:
                raise ValueError(f"model={model!r}: name one of {sorted(self.exchange.bundles)}, with the pioneer "
                                 "alone (collective=False)")
            evaluated = self.exchange.bundles[model]
            seats = {first: evaluated.agent}
        if collective:
            tokenizer = seated_tokenizer(seats)
        else:
            tokenizer = evaluated.agent.tokenizer  # the evaluated model's own
            if evaluated.agent.sampling != self.seat_sampling[first]:  # sampling as in the pioneer seat
                evaluated.agent.sampling = self.seat_sampling[first]
        key = self._heldout_env(episodes, collective, tokenizer)
        eta = self.config.eta if self.config.eta is not None else evaluated.learner.kl_coef
        with gathered_for_generation(seats) as seats:  # FSDP2: every process evaluates the same episodes
            return evaluate_heldout(seats, self.refs[evaluated.name], self._env_source, tokenizer,
                                    reward_fn=self._reward_fn, task_options=self.configs.task_options,
                                    kl_penalty=self.configs.learner_spec.kl_estimator(self.configs.update),
                                    episodes=episodes,
                                    seed=seed, collective=collective, eta=eta, env=self._heldout_envs.get(key))

    def _heldout_env(self, episodes: int, collective: bool, tokenizer) -> tuple:
        """The key of the held-out env of this size, seating and tokenizers in `_heldout_envs`, built there once."""
        from trainers.evaluation.episodes import heldout_env, heldout_sem_warning

        key = (episodes, collective, id(tokenizer) if not isinstance(tokenizer, dict)
               else tuple(id(t) for t in tokenizer.values()))
        if key not in self._heldout_envs and episodes >= 1:
            self._heldout_envs[key] = heldout_env(self._env_source, tokenizer, episodes=episodes,
                                                  collective=collective, reward_fn=self._reward_fn,
                                                  task_options=self.configs.task_options,
                                                  seating=self.seating if collective else None)
            no_sem = None if collective else heldout_sem_warning(self._heldout_envs[key], episodes)
            if no_sem and self.dist.is_main:  # said once, at the first evaluation of this size
                logger.warning("%s", no_sem)
        return key

    def influence(self, *, episodes: int, seed: int) -> dict[str, float]:
        """Influence and copy rate of every seat after the first (`trainers.evaluation.influence`: 0 for a seat that
        reads nothing), the models in their seats (`evaluation_seats`), on `episodes` held-out queries (rounded up to whole
        batches): flat ``{"influence/<seat>", "influence_empty/<seat>", "copy_rate/<seat>", "reward_real/<seat>",
        "reward_other/<seat>", "reward_empty/<seat>"}``; empty with a single seat or `episodes` < 2.

        Raises:
            ValueError: `episodes` < 1.
        """
        from trainers.evaluation.influence import influence

        check_number(episodes, "episodes", integer=True, low=1)
        seated = self.evaluation_seats()
        seats = {seat: bundle.agent for seat, bundle in seated.items()}
        if episodes < 2 or self.seating.num_seats < 2:
            return {}
        self._seat_models(seated)
        tokenizer = seated_tokenizer(seats)
        env = self._heldout_envs[self._heldout_env(episodes, True, tokenizer)]
        with gathered_for_generation(seats) as seats:
            out = influence(env, seats, num_batches=-(-episodes // env.batch_size), seed=seed)
        return {f"{key}/{seat}": value for seat, values in out.items() if isinstance(values, dict)
                for key, value in values.items()}

    def _samples(self, transcript) -> list[dict]:
        out = []
        for i in range(min(self.config.log_samples, len(transcript.query_text))):
            sample: dict[str, Any] = {"query": transcript.query_text[i]}
            for seat, seat_t in transcript.seats.items():
                sample[f"{seat}_response"] = seat_t.response_text[i]
                sample[f"{seat}_task_reward"] = float(seat_t.task_reward[i])
            sample["reward"] = float(transcript.seats[self.seating.first].reward[i])
            out.append(sample)
        return out

    # ------------------------------------------------------------------ the loop
    def _request_stop(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        if self._stop_requested:
            raise KeyboardInterrupt
        self._stop_requested = True
        logger.warning("%s received: finishing this iteration, then writing a checkpoint "
                       "(press Ctrl-C again to abort without saving)", signal.Signals(signum).name)

    def _save_before_failure(self, iteration: int, last_saved: int) -> int:
        """After a failure in the rollout of iteration `iteration` + 1 (no weight changed yet), write the checkpoint
        of `iteration` so the run resumes there; one process only (with several, the others may be waiting in a
        collective). Returns the last iteration saved."""
        if self.dist.enabled:
            return last_saved
        try:
            path = self.save_checkpoint(iteration)
        except (OSError, NonFiniteLossError) as err:  # never a rescue checkpoint of NaN/inf weights
            logger.error("iteration %d failed, and saving the checkpoint of iteration %d failed too: %s",
                         iteration + 1, iteration, err)
            return last_saved
        logger.error("iteration %d failed before any update; saved %s (resume with --resume once the cause is "
                     "fixed)", iteration + 1, path)
        return iteration

    @property
    def evaluated_model(self) -> str | None:
        """The model the run's held-out evaluations put in the pioneer seat: with a model per slot or in a population,
        always the first slot's (``llm1``: before and after training, and every point of a curve, evaluate one model,
        not whichever sits there); else None, the model in the pioneer seat (the models share a base)."""
        return next(iter(self.agents)) if self.heterogeneous or self.population else None

    def heldout_evaluation(self) -> dict:
        """The run's own held-out evaluation: the pioneer alone (`evaluated_model`) on `CORYConfig.eval_episodes`
        queries with the seed `EVAL_SEED` (the same queries and sampling streams every time, so two points differ only
        by training); with
        `CORYConfig.eval_influence`, each later seat's influence and copy rate on the same queries (`influence`)."""
        out = self.evaluate(episodes=self.config.eval_episodes, seed=EVAL_SEED, model=self.evaluated_model)
        if self.config.eval_influence:
            out.update(self.influence(episodes=self.config.eval_episodes, seed=EVAL_SEED))
        return out

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
        `checkpoint_every_minutes` after the last checkpoint, at a stop signal, at the end, and when an iteration
        fails in its rollout (a reward or data error: the weights are still those of the iteration before).

        Evaluation hook: after iteration ``it`` (role exchange included), when ``it + 1`` is a multiple of
        `CORYConfig.eval_every` (with `CORYConfig.eval_episodes` > 0) or is in `eval_at`, ``evaluate(self, it + 1)``
        runs (default `heldout_evaluation`); its dict is kept in that iteration's history row under ``"eval"`` and its
        numeric top-level values are logged with the iteration's metrics as ``eval/<key>`` (``eval/reward``,
        ``eval/kl``, ...). The main process evaluates (every process with FSDP2 shards).

        Args:
            eval_at: 1-based counts of finished iterations after which to evaluate too (e.g. a learning curve's
                points).
            evaluate: ``(trainer, finished iterations) -> dict`` run at those points (e.g. several models on held-out
                queries, with the training clock read there).

        Raises:
            trainers.learning.update.NonFiniteLossError: a NaN/inf loss, gradient or weight, whoever wrote the
                learner (`trainers.loop.guards`); no checkpoint takes it, and the message names the last good
                one, which --resume continues from.
        """
        cfg = self.config
        main = self.dist.is_main
        logger_ = MetricsLogger(self.output_dir, tensorboard=cfg.tensorboard,
                                config_text=yaml.safe_dump(self.config_dict, sort_keys=False),
                                purge_step=self.start_iteration or None) if main else None
        history: list[dict[str, float]] = []
        previous = {}
        for signum in STOP_SIGNALS:
            try:
                previous[signum] = signal.signal(signum, self._request_stop)
            except ValueError:  # not the main thread: no Ctrl-C handling
                break
        last_saved = self.start_iteration - 1
        saved_at = time.monotonic()
        progress = Progress(self.start_iteration, cfg.num_iterations, self.seating.label, seats=self.seating.names,
                            enabled=main, every_s=cfg.log_every_seconds)
        try:
            with logging_redirect_tqdm():  # log lines above the live bar, not glued onto it
                for it in range(self.start_iteration, cfg.num_iterations):
                    self._updating = False
                    try:
                        metrics, samples = self.iteration(it)
                    except Exception:
                        if not self._updating and last_saved < it - 1:
                            last_saved = self._save_before_failure(it - 1, last_saved)
                        raise
                    evaluation = self._evaluate_now(it + 1, eval_at, evaluate)
                    row = {"iteration": it, **metrics}
                    if evaluation is not None:
                        metrics = {**metrics, **{f"eval/{k}": float(v) for k, v in evaluation.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)}}
                        row = {"iteration": it, **metrics, "eval": evaluation}
                    if main:
                        logger_.log(it, metrics)
                        logger_.log_samples(it, samples)
                    history.append(row)
                    progress.update(it, metrics)
                    last = it == cfg.num_iterations - 1
                    # read once (a signal after this line stops after the next iteration); any process's request
                    # stops all; the main process's clock decides the time-based checkpoints for all
                    overdue = bool(cfg.checkpoint_every_minutes) and main and \
                        time.monotonic() - saved_at >= 60 * cfg.checkpoint_every_minutes
                    flags = self.dist.mean_stats({"stop": float(self._stop_requested), "overdue": float(overdue)})
                    stop = flags["stop"] > 0
                    if last or stop or flags["overdue"] > 0 or \
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
            if logger_ is not None:
                logger_.close()
            for signum, handler in previous.items():
                if handler is not None:  # None: a handler not installed from Python, nothing to restore
                    signal.signal(signum, handler)
        self.last_checkpoint_iteration = last_saved
        return history
