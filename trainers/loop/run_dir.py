"""The run directory: what may be in it before a run starts, how a run starts in it, and what a resume may change.

A run directory holds ``config.yaml`` (the flat config, `trainers.config.RunConfigs.to_flat`), ``metrics.jsonl``,
``samples.jsonl``, TensorBoard events and ``checkpoints/`` (`trainers.loop.checkpoint`). A folder that holds a run
is never changed without ``--resume`` (continue it) or ``--overwrite`` (replace it); every check here runs before
anything is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from cory_env.seating import seating_of
from trainers.config import CORYConfig, RunConfigs
from trainers.loop import checkpoint as ckpt
from trainers.loop.metrics import METRICS_FILE

CONFIG_FILE = "config.yaml"
#: Fields that may change between a run and its resume (everything else must match the checkpoint's config).
RESUMABLE_CHANGES = {"resume", "overwrite", "num_iterations", "checkpoint_every", "checkpoint_every_minutes",
                     "keep_checkpoints", "log_samples", "tensorboard", "torch_threads", "output_dir", "device",
                     "eval_every", "log_every_seconds"}


def latest_checkpoint_or_raise(output_dir: Path) -> Path:
    """The run's newest checkpoint; FileNotFoundError (naming the fix) when it has none."""
    path = ckpt.latest_checkpoint(output_dir)
    if path is None:
        raise FileNotFoundError(f"--resume: {output_dir} has no checkpoint; drop --resume or --overwrite")
    return path


def check_process_count(state: dict[str, Any], num_processes: int, output_dir: Path) -> None:
    """Raise `ValueError` unless a checkpoint's `trainer_state` was written by a run of `num_processes` processes."""
    saved = int(state.get("num_processes", 1))
    if saved != num_processes:
        raise ValueError(
            f"cannot resume {output_dir} with {num_processes} process(es): it was trained with {saved} "
            f"(batch_size counts one process's episodes, so the global batch would change). "
            f"Resume with --num_processes {saved}"
        )


def check_writable(output_dir: Path) -> None:
    """Raise `OSError` (naming the folder and the fix) unless a run can write into `output_dir` and its
    ``checkpoints/``: a file is created and removed in each that exists, else in the nearest existing parent.

    A run that cannot write learns it at its first checkpoint, after the work it was meant to keep (unchecked,
    a ``--resume`` into a read-only ``checkpoints/`` trains two iterations, then fails).
    """
    out = Path(output_dir)
    for folder in (out, out / ckpt.CHECKPOINT_DIR):
        probe = folder
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a folder: the run cannot write {folder} there; choose another "
                                     "--output_dir")
        try:
            fd, name = tempfile.mkstemp(prefix=".cory-write-test-", dir=probe)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write into {probe} ({exc.strerror or exc}): the run could not save its "
                                     "checkpoints; make it writable or choose another --output_dir") from exc


def check_output_dir(config: CORYConfig, num_processes: int = 1, flat_config: dict[str, Any] | None = None, *,
                     task=None) -> bool:
    """Check `config.output_dir` against `resume` / `overwrite` without changing anything; True if it holds a run.

    Args:
        flat_config: the run's flat config (`RunConfigs.to_flat`); with `resume` it must match the checkpoint's
            (`check_resumable`). None skips that check.
        task: the run's `Task`, on which a resume's seating is compared as built seatings (`check_resumable`).

    Raises:
        FileExistsError: it holds a run and neither `resume` nor `overwrite` is set.
        FileNotFoundError: `resume` without a run or without a checkpoint.
        ValueError: `resume` of a run trained with another number of processes, or with another config.
        OSError: the folder (or its ``checkpoints/``) is not writable (`check_writable`).
    """
    out = Path(config.output_dir)
    has_run = out.exists() and any((out / f).exists() for f in (CONFIG_FILE, METRICS_FILE, ckpt.CHECKPOINT_DIR))
    if has_run and not config.resume and not config.overwrite:
        raise FileExistsError(
            f"{out} already holds a run (config.yaml / metrics.jsonl / checkpoints); nothing was changed. "
            "Pass --resume to continue it, --overwrite to replace it, or choose another --output_dir"
        )
    if config.resume and not has_run:
        raise FileNotFoundError(f"--resume: {out} holds no run to resume; drop --resume to start one")
    if config.resume:
        state = ckpt.read_trainer_state(latest_checkpoint_or_raise(out))
        check_process_count(state, num_processes, out)
        if flat_config is not None:
            check_resumable(state.get("config", {}), flat_config, out, task=task)
    check_writable(out)
    return has_run


#: The flat fields that describe a run's seating together; a resume compares the seating they build, not their
#: spellings (``cory`` and ``chain:2``, the default and ``cory`` on a two-seat task, are one seating).
SEATING_FIELDS = ("seating", "knowledge_transfer", "partner_reward_coef")


def check_resumable(saved: dict[str, Any], current: dict[str, Any], output_dir: Path, *, task=None) -> None:
    """Raise `ValueError` naming every field (other than `RESUMABLE_CHANGES`) where the flat config of a resume
    differs from the checkpoint's; a field added after the run started reads as its default, a field of another
    learner's or task's options (recorded by an earlier version for every run) is left out. With `task`, the
    seating fields are compared as the seatings they build on it (`SEATING_FIELDS`)."""
    saved = RunConfigs.from_flat(saved).to_flat()
    skip = set(RESUMABLE_CHANGES) | (set(SEATING_FIELDS) if task is not None else set())
    diff = sorted(k for k in set(saved) | set(current) if k not in skip and saved.get(k) != current.get(k))
    details = [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in diff]
    if task is not None:
        before, after = (seating_of(flat.get("seating"), task=task,
                                    knowledge_transfer=flat.get("knowledge_transfer", True),
                                    partner_reward_coef=flat.get("partner_reward_coef", 1.0))
                         for flat in (saved, current))
        if before != after:
            details.append(f"seating: {before.describe()} -> {after.describe()}")
    if details:
        raise ValueError(f"cannot resume {output_dir}: the config differs in {', '.join(details)}. "
                         "Resume with the run's config.yaml (--config), or start a new --output_dir")


def start_output_dir(output_dir: Path, flat_config: dict[str, Any], *, replace: bool) -> None:
    """Create the run folder with its config.yaml. With `replace` (``--overwrite`` of a run) the old run is moved
    aside first and deleted only once the new folder is written; if writing fails, the old run is put back."""
    out = Path(output_dir)
    aside = out.with_name(f".{out.name}.replaced-{os.getpid()}") if replace else None
    if aside is not None:
        os.rename(out, aside)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG_FILE).write_text(yaml.safe_dump(flat_config, sort_keys=False))
    except BaseException:
        if aside is not None:
            shutil.rmtree(out, ignore_errors=True)
            os.rename(aside, out)
        raise
    if aside is not None:
        shutil.rmtree(aside)
