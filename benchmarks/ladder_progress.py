"""A ladder run that outlives its process: its progress at each evaluation point, kept beside the run's
checkpoints, so ``benchmarks/learning.py --run_dir DIR --resume`` continues a killed run from its last point.

A run folder (``DIR/<arm>-s<seed>``) holds the trainer's own run (``checkpoints/iter-NNNNNN``, ``metrics.jsonl``:
`trainers.loop.checkpoint`) and `PROGRESS_FILE`: the curve so far (every point's record, its whole evaluation
included), the training and total CPU seconds at the last point, and the episodes at which the run was resumed
before. It is written after the checkpoint of that point's iteration, atomically, so it never names a checkpoint that
is not on disk. Resuming rewinds the run to that checkpoint (a later one, written by a stop signal, is dropped: the
point's clock is the last one known) and continues; every training stream derives from (seed, iteration) and the
checkpoint holds the weights, the optimiser, the role-exchange state and torch's RNG, so the resumed run's numbers
are those of an uninterrupted one (`tests/benchmarks/test_ladder_progress.py` checks it), except its CPU seconds,
which count loading the model once more per resume.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from trainers.loop import checkpoint as ckpt

PROGRESS_FILE = "ladder_progress.json"


def save_progress(run_dir: str | os.PathLike, iteration: int, curve: list[dict], *, train_s: float, cpu_s: float,
                  resumed_at: list[int]) -> Path:
    """Write the progress of a run whose checkpoint `iteration` (0-based, done) is on disk; returns its path.

    Args:
        curve: the point records so far (`benchmarks.ladder_run.TrainingClock.point`, ``"eval"`` included).
        train_s, cpu_s: training and total CPU seconds of the run at this point (all its processes).
        resumed_at: episodes at which the run was resumed so far.
    """
    path = Path(run_dir) / PROGRESS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"iteration": iteration, "train_s": train_s, "cpu_s": cpu_s, "resumed_at": resumed_at,
                               "curve": curve}), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_progress(run_dir: str | os.PathLike) -> dict | None:
    """The progress of the run in `run_dir`, with the run rewound to its checkpoint (`rewind`); None when the folder
    holds no progress (a fresh run).

    Raises:
        FileNotFoundError: the progress names a checkpoint that is not in the folder (the folder was altered).
    """
    path = Path(run_dir) / PROGRESS_FILE
    if not path.is_file():
        return None
    progress = json.loads(path.read_text(encoding="utf-8"))
    rewind(run_dir, progress["iteration"])
    return progress


def rewind(run_dir: str | os.PathLike, iteration: int) -> None:
    """Make checkpoint `iteration` the run's latest: later checkpoints are removed and ``latest`` points at it.

    Raises:
        FileNotFoundError: checkpoint `iteration` is not complete in `run_dir`.
    """
    target = ckpt.checkpoint_path(run_dir, iteration)
    if not (target / ckpt.STATE_FILE).is_file():
        raise FileNotFoundError(f"{Path(run_dir) / PROGRESS_FILE} continues from {target}, which is not a complete "
                                f"checkpoint; run this arm and seed again without --resume")
    for later in ckpt.checkpoint_folders(target.parent):
        if later.name > target.name:
            shutil.rmtree(later)
    (target.parent / ckpt.LATEST).write_text(target.name, encoding="utf-8")
