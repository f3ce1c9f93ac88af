"""What a training run records about itself beside its weights, and how it resumes: the inputs' fingerprints, the
checkpoint's run state (`trainers.loop.checkpoint.FORMAT`), the checkpoint written when an iteration fails before any
model changed, and ``--resume``.

A checkpoint's ``trainer_state.json`` holds, beside the iteration and the role-exchange wrapper's state: the flat
config, the run's identity (``run_id``, drawn at its start, and its ``seed``: cross-play tells runs apart by it), its
models (``models``: base, dtype, layout, vocabulary size, tokenizer fingerprint and β per model), the inputs'
fingerprints (``inputs``), the model its held-out evaluations follow (``evaluated``: `cory eval`'s default), the
process count and where its plug-ins came from.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
from pathlib import Path
from typing import Any, Iterator

import psutil

from trainers.config import plugin_origins
from trainers.learning.update import NonFiniteLossError
from trainers.loop import checkpoint as ckpt
from trainers.loop.fingerprint import check_fingerprints, data_fingerprint, reward_fingerprint
from trainers.loop.metrics import METRICS_FILE, SAMPLES_FILE, truncate_jsonl
from trainers.loop.run_dir import RUN_ID_FILE, abandon_start, discard_replaced, recorded_config, start_output_dir

__all__ = ["STOP_SIGNALS", "describe_models", "inputs", "memory", "resume", "save", "save_before_failure", "start",
           "state", "stop_signals"]

logger = logging.getLogger(__name__)

#: Signals that stop training cleanly: finish the iteration, write a checkpoint, return (Ctrl-C; a scheduler's TERM).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def inputs(cast, task, reward: str) -> dict[str, str]:
    """The fingerprints a resume must match (`trainers.loop.fingerprint.INPUTS`): every model's weights and
    tokenizer (`trainers.loop.cast.Cast.inputs`), the task's queries and its reward."""
    return {**cast.inputs(), "data": data_fingerprint(task.records), "reward": reward_fingerprint(task.reward_fn, reward)}


def describe_models(cast) -> str:
    """One line of the run's models: ``llm1=smollm2-135m-instruct (LoRA r=16, float32, vocabulary 49152), ...``."""
    return ", ".join(f"{name}={m.config.model} ({f'LoRA r={m.config.lora_r}' if m.config.use_lora else 'full'}, "
                     f"{m.config.dtype}, vocabulary {len(m.tokenizer)})" for name, m in cast.members.items())


def run_id(output_dir: Path) -> str:
    """The run's identity, drawn once when the run starts (``.cory-run-id`` in its folder) and kept across resumes;
    a run folder written without one reads as its resolved path."""
    path = Path(output_dir) / RUN_ID_FILE
    return path.read_text(encoding="utf-8").strip() if path.is_file() else f"path:{Path(output_dir).resolve()}"


def state(trainer) -> dict[str, Any]:
    """What a checkpoint of `trainer` records beside the weights (the module docstring)."""
    models = {name: {**described, "kl_coef": float(trainer.exchange.bundles[name].learner.kl_coef)}
              for name, described in trainer.cast.describe().items()}
    return {"config": recorded_config(trainer.config_dict), "run_id": run_id(trainer.output_dir),
            "seed": trainer.config.seed, "models": models, "inputs": trainer.inputs,
            "evaluated": trainer.evaluated_model, "num_processes": trainer.dist.world_size,
            "plugins": plugin_origins(trainer.configs)}


def save(trainer, iteration: int) -> Path:
    """Write checkpoint `iteration` of `trainer` (the main process writes; the others wait until it is on disk, and
    with FSDP2 shards first gather the models with it); returns its path.

    Raises:
        OSError: the write failed (every process raises it); NonFiniteLossError: a model holds NaN/inf weights."""
    path, error = ckpt.checkpoint_path(trainer.output_dir, iteration), None
    states = ckpt.bundle_states(trainer.exchange.bundles, keep=trainer.dist.is_main)
    if trainer.dist.is_main:
        try:
            path = ckpt.save_checkpoint(trainer.output_dir, iteration, states=states,
                                        exchange_state=trainer.exchange.state_dict(), run_state=state(trainer),
                                        keep=trainer.config.keep_checkpoints)
        except (OSError, NonFiniteLossError) as err:  # every process must hear of it, or the others would wait
            error = err
        else:
            aside, trainer._replaced = trainer._replaced, None  # never put back once the run has a checkpoint
            discard_replaced(aside)  # (a stop while it is deleted leaves the rest of it hidden beside the run)
    elif trainer.config.sharded:
        for _ in states:  # every shard is gathered with the main process, which writes it
            pass
    if trainer.dist.any(error is not None):  # also the barrier: the checkpoint is on disk (or failed) for all
        raise error if error is not None else OSError(
            f"the main process failed to write checkpoint {path}; see its error above")
    return path


@contextlib.contextmanager
def save_before_failure(trainer, iteration: int, last_saved: int) -> Iterator[None]:
    """Around iteration `iteration`: when it fails before any model changed (in its rollout, or in an update that
    had not stepped any weight yet, `trainers.loop.guards.UpdateGuard.unchanged`), write the checkpoint of
    ``iteration - 1`` so the run resumes there, then re-raise; one process only (with several, the others may be
    waiting in a collective)."""
    try:
        yield
    except Exception:
        unchanged = not trainer._updating or trainer.guard.unchanged
        if unchanged and last_saved < iteration - 1 and not trainer.dist.enabled:
            try:
                path = save(trainer, iteration - 1)
            except (OSError, NonFiniteLossError) as err:  # never a rescue checkpoint of NaN/inf weights
                logger.error("iteration %d failed, and saving the checkpoint of iteration %d failed too: %s",
                             iteration, iteration - 1, err)
            else:
                logger.error("iteration %d failed before any model changed; saved %s (resume with --resume once the "
                             "cause is fixed)", iteration, path)
        raise


def resume(trainer) -> int:
    """Load the latest checkpoint of `trainer`'s run into it (weights, learner states, seats, RNG; the config and
    process count were checked with the folder by `plan_run`), truncate its logs to it, and return the first
    iteration to train; 0 (with a warning) for a run stopped before its first checkpoint.

    Raises:
        CheckpointError: another checkpoint format, other models (vocabulary sizes) or changed inputs.
    """
    out, main = trainer.output_dir, trainer.dist.is_main
    path = ckpt.latest_checkpoint(out)
    if path is None:  # stopped before its first checkpoint: its config was checked against config.yaml
        if main:
            for name in (METRICS_FILE, SAMPLES_FILE):
                truncate_jsonl(out / name, -1)
        logger.warning("--resume: %s has no checkpoint yet (it stopped before the first one): starting from the "
                       "beginning", out)
        return 0
    saved = ckpt.read_trainer_state(path)
    sizes = {name: m["vocab_size"] for name, m in saved["models"].items()}
    current = {name: m["vocab_size"] for name, m in trainer.cast.describe().items()}
    if sizes != current:
        raise ckpt.CheckpointError(f"{path} was written for the vocabulary sizes {sizes}, this run's models have "
                                   f"{current}")
    check_fingerprints(saved["inputs"], trainer.inputs, str(path))
    ckpt.load_checkpoint(path, bundles=trainer.exchange.bundles, exchange=trainer.exchange)
    start = int(saved["iteration"]) + 1
    if main:
        for name in (METRICS_FILE, SAMPLES_FILE):
            truncate_jsonl(out / name, int(saved["iteration"]))
    logger.info("resumed %s at iteration %d", path, start)
    if start >= trainer.config.num_iterations and main:
        logger.warning("nothing to train: %s already holds %d iteration(s) and num_iterations=%d; raise "
                       "--num_iterations to continue it", out, start, trainer.config.num_iterations)
    return start


@contextlib.contextmanager
def stop_signals(handler) -> Iterator[None]:
    """While the block runs, `STOP_SIGNALS` call `handler`; the previous handlers come back after. Off the main
    thread (where Python takes no signal handler) nothing changes."""
    previous = {}
    for signum in STOP_SIGNALS:
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread: no Ctrl-C handling
            break
    try:
        yield
    finally:
        for signum, old in previous.items():
            if old is not None:  # None: a handler not installed from Python, nothing to restore
                signal.signal(signum, old)


def start(trainer) -> None:
    """Start `trainer`'s run in its folder: resume it (`resume`: ``trainer.start_iteration``) or create the folder
    with its marker and config (``--overwrite`` keeps the old run aside until the first checkpoint,
    `trainers.loop.run_dir.start_output_dir`), then give every process the same weights; a stop during this start
    leaves the folder as it was."""
    config, main = trainer.config, trainer.dist.is_main
    if config.resume:
        trainer.start_iteration = resume(trainer)
    elif main:
        trainer._replaced = start_output_dir(trainer.output_dir, trainer.config_dict, replace=trainer.plan.has_run)
    try:
        trainer.dist.barrier()
        for bundle in trainer.exchange.bundles.values():  # identical replicas from the first step on (a
            trainer.dist.broadcast_parameters(bundle.agent.trainable_parameters())  # collective: also a barrier)
    except BaseException:  # stopped during start-up: nothing of this run began
        if main and not config.resume:
            aside, trainer._replaced = trainer._replaced, None
            abandon_start(trainer.output_dir, aside)
        raise


def memory() -> dict[str, float]:
    """``sys/rss_gb`` (this process's resident memory now) and ``sys/peak_rss_gb`` (its peak), GiB."""
    return {"sys/rss_gb": psutil.Process().memory_info().rss / 2**30,
            "sys/peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # KiB on Linux
