"""The run directory: what may be in it before a run starts, how a run starts in it, and what a resume may change.

A run directory holds the marker ``.cory-run`` (written first, when the run creates the folder), ``config.yaml``
(the flat config, `trainers.config.RunConfigs.to_flat`), ``metrics.jsonl``, ``samples.jsonl``, ``eval.json``,
TensorBoard events in ``tensorboard/`` and ``checkpoints/`` (`trainers.loop.checkpoint`); `RUN_FILES` lists every name
a run, `cory eval` and `cory plot` write there. A folder that holds a run is never changed without ``--resume``
(continue it) or ``--overwrite`` (replace it), and every check here runs before anything is written:

* only a folder that is a cory run (`is_run`: its marker, or the config and checkpoints of a run written before the
  marker existed) can be replaced, and only when it holds nothing but what the run wrote (`foreign_files`): a user's
  file beside the run, another tool's ``checkpoints/`` or ``config.yaml``, makes ``--overwrite`` refuse, naming them;
  the current folder and its parents, a symbolic link, and a folder whose parent cannot be written are refused as well;
* a new run starts only in a new or empty folder;
* ``--overwrite`` moves the old run aside (`start_output_dir`) and deletes it only once the new run has written its
  first checkpoint (`discard_replaced`); if the new run fails or is stopped before that, the old run is put back
  (`restore_replaced`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml

from cory_env.seating import seating_of
from trainers.config import CORYConfig, RunConfigs, flat_field_types
from trainers.loop import checkpoint as ckpt
from trainers.loop.metrics import METRICS_FILE, SAMPLES_FILE, TENSORBOARD_DIR

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
#: Written first into every folder a run creates: this folder is a cory run, and `--overwrite` may replace it.
RUN_MARKER = ".cory-run"
#: The run's identity, drawn when the run starts and kept across resumes (checkpoints record it: ``run_id``), so that
#: `cory crossplay` knows two paths of one run (a symbolic link, a checkpoint folder) as one run.
RUN_ID_FILE = ".cory-run-id"
#: The held-out evaluation `cory train --eval_episodes` writes at the end of a run.
EVAL_FILE = "eval.json"
#: The files a run writes at the top of its folder: no other command's output may replace them
#: (`trainers.loop.outputs.run_owner`).
RUN_OWNED_FILES = (CONFIG_FILE, METRICS_FILE, SAMPLES_FILE, EVAL_FILE, RUN_MARKER, RUN_ID_FILE)
#: Every name a run and the project's other commands (`cory eval` / `cory plot` / `cory bench` / the learning ladder)
#: write at the top of a run's folder (shell patterns): what ``--overwrite`` may remove; `checkpoints/` and
#: `tensorboard/` are checked entry by entry (`foreign_files`).
RUN_FILES = (*RUN_OWNED_FILES, f"{METRICS_FILE}.tmp", f"{SAMPLES_FILE}.tmp", "eval-*.json", "curves.png",
             "pareto.png", "bench_run.json", "ladder_progress.json", ".cory-write-test-*")
#: What `checkpoints/` holds: checkpoint folders, the `latest` pointer and the temporary names of their writes.
CHECKPOINT_ENTRIES = (ckpt.CHECKPOINT_NAME, ckpt.LATEST, f"{ckpt._TMP_PREFIX}*", f".{ckpt.LATEST}.tmp",
                      ".cory-write-test-*")
#: Folders of a run that it rewrites and deletes in: everything under them is the run's.
RUN_OWNED_FOLDERS = (ckpt.CHECKPOINT_DIR, TENSORBOARD_DIR)
#: Fields that describe one invocation, not the run: recorded as False so that ``--config run/config.yaml --resume``
#: works for a run that was started with ``--overwrite``.
INVOCATION_FIELDS = ("resume", "overwrite")
#: Fields that may change between a run and its resume (everything else must match the checkpoint's config).
RESUMABLE_CHANGES = {"resume", "overwrite", "num_iterations", "checkpoint_every", "checkpoint_every_minutes",
                     "keep_checkpoints", "log_samples", "tensorboard", "torch_threads", "heap_reuse", "output_dir", "device",
                     "eval_every", "log_every_seconds"}


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


#: Fields every ``config.yaml`` a run has written holds (it records the whole flat config): a YAML file of a few
#: option-like keys (``seed``, ``learning_rate``) is not a run's.
RECORDED_FIELDS = ("output_dir", "model", "seed", "num_iterations", "learning_rate", "batch_size", "task")


def _is_cory_config(path: Path) -> bool:
    """True when `path` is a YAML mapping written by a run (``config.yaml``): it holds every `RECORDED_FIELDS` key
    with its own folder as ``output_dir``, and only cory options."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(data, dict) or not set(RECORDED_FIELDS) <= set(data):
        return False
    if not isinstance(data["output_dir"], str) or Path(data["output_dir"]).name != path.parent.resolve().name:
        return False
    named = {kind: [data[key]] if isinstance(data.get(key), str) else []
             for kind, key in (("learners", "learner"), ("tasks", "task"))}
    try:
        return set(data) <= set(flat_field_types(**named))
    except ValueError:  # a learner or task that no longer imports: the file is still a run's config
        return set(data) <= set(flat_field_types()) | set(named) | {"learner", "task"}


def is_run(output_dir: str | os.PathLike) -> bool:
    """True when `output_dir` holds the marker ``.cory-run``, or (a run written before the marker existed) a
    ``config.yaml`` of cory options (`_is_cory_config`) or a cory checkpoint in ``checkpoints/``."""
    out = Path(output_dir)
    if not out.is_dir():
        return False
    if (out / RUN_MARKER).is_file():
        return True
    if (out / CONFIG_FILE).is_file() and _is_cory_config(out / CONFIG_FILE):
        return True
    return ckpt.latest_checkpoint(out) is not None


def foreign_files(output_dir: str | os.PathLike) -> list[str]:
    """The entries of `output_dir` (relative paths, sorted) that no cory run writes (`RUN_FILES`,
    `CHECKPOINT_ENTRIES`, TensorBoard event files): what ``--overwrite`` would otherwise delete of the user's."""
    out = Path(output_dir)
    foreign = []
    for entry in sorted(out.iterdir()):
        name = entry.name
        if name == ckpt.CHECKPOINT_DIR and entry.is_dir() and not entry.is_symlink():
            foreign += [f"{name}/{path}" for path in _foreign_in_checkpoints(entry)]
        elif name == TENSORBOARD_DIR and entry.is_dir() and not entry.is_symlink():
            foreign += [f"{name}/{sub.name}" for sub in sorted(entry.iterdir())
                        if not (sub.is_file() and sub.name.startswith("events.out.tfevents."))]
        elif not (_matches(name, RUN_FILES) and entry.is_file() and not entry.is_symlink()):
            foreign.append(name + ("/" if entry.is_dir() else ""))
    return foreign


def _foreign_in_checkpoints(root: Path) -> list[str]:
    """The paths under a run's ``checkpoints/`` (relative to it) that no checkpoint write produces."""
    foreign = []
    for sub in sorted(root.iterdir()):
        if sub.is_symlink() or not _matches(sub.name, CHECKPOINT_ENTRIES):
            foreign.append(sub.name)
        elif sub.name.startswith(ckpt._TMP_PREFIX):  # a write in progress (or killed): all of it is the run's
            continue
        elif sub.name in (ckpt.LATEST, f".{ckpt.LATEST}.tmp") or sub.name.startswith(".cory-write-test-"):
            if not sub.is_file():
                foreign.append(sub.name + "/")
        elif not sub.is_dir():
            foreign.append(sub.name)
        else:  # a checkpoint folder
            for item in sorted(sub.iterdir()):
                if item.is_symlink():
                    foreign.append(f"{sub.name}/{item.name}")
                elif item.is_dir():
                    foreign += [f"{sub.name}/{item.name}/{f.name}" for f in sorted(item.iterdir())
                                if f.name not in ckpt.MODEL_FILES or not f.is_file() or f.is_symlink()]
                elif item.name not in ckpt.CHECKPOINT_FILES:
                    foreign.append(f"{sub.name}/{item.name}")
    return foreign


def _listed(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_not_inside_a_run(output_dir: str | os.PathLike) -> None:
    """Refuse a run folder inside another run's ``checkpoints/`` or ``tensorboard/`` (rotation and ``--overwrite`` of
    that run would delete it).

    Raises:
        ValueError: naming the run, the folder and the fix.
    """
    target = Path(output_dir).resolve()
    for folder in target.parents:
        inner = target.relative_to(folder).parts
        if inner[0] in RUN_OWNED_FOLDERS and is_run(folder):
            raise ValueError(f"--output_dir {output_dir} is inside the run {folder}'s {inner[0]}/ folder, which that "
                             "run rewrites and deletes; choose a folder outside it")


def replaced_runs(output_dir: str | os.PathLike) -> list[Path]:
    """The runs an interrupted ``--overwrite`` of `output_dir` left moved aside (hidden siblings
    ``.<name>.replaced-*``, `replaced_path`)."""
    out = Path(output_dir).resolve()
    if not out.parent.is_dir():
        return []
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.replaced-"))


def check_replaceable(output_dir: str | os.PathLike) -> None:
    """Raise unless ``--overwrite`` may replace the run in `output_dir` (the module docstring's first point).

    Raises:
        ValueError: naming the folder, what is wrong and the fix; nothing is changed.
        OSError: the parent folder cannot be written.
    """
    given = Path(output_dir)
    if given.is_symlink():
        raise ValueError(f"--overwrite: {given} is a symbolic link to {given.resolve()}; nothing was changed. Pass "
                         f"--output_dir {given.resolve()} to replace the run there")
    out = given.resolve()
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        what = "the current folder" if out == cwd else "a parent of the current folder"
        raise ValueError(f"--overwrite: {given} is {what} ({out}); nothing was changed. Replace a run from outside "
                         "it, or choose another --output_dir")
    if not is_run(out):
        raise ValueError(f"--overwrite: {given} is not a cory run (no {RUN_MARKER} marker, config.yaml or "
                         "checkpoint of one); nothing was changed. cory only replaces folders it created: choose "
                         "another --output_dir")
    foreign = foreign_files(out)
    if foreign:
        raise ValueError(f"--overwrite: {given} holds files the run did not write ({_listed(foreign)}); nothing was "
                         "changed. Move them out of the folder, or choose another --output_dir")
    parent = out.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"--overwrite: cannot write into {parent} (permissions), where the old run is kept "
                              "until the new one has its first checkpoint; nothing was changed. Make it writable or "
                              "choose another --output_dir")


def check_process_count(state: dict[str, Any], num_processes: int, output_dir: Path) -> None:
    """Raise `ValueError` unless a checkpoint's `trainer_state` was written by a run of `num_processes` processes."""
    saved = int(state.get("num_processes", 1))
    if saved != num_processes:
        raise ValueError(f"cannot resume {output_dir} with {num_processes} process(es): it was trained with {saved} "
                         f"(batch_size counts one process's episodes, so the global batch would change). "
                         f"Resume with --num_processes {saved}")


def check_writable(output_dir: Path) -> None:
    """Raise `OSError` (naming the folder and the fix) unless a run can write into `output_dir` and its
    ``checkpoints/``: a file is created and removed in each that exists, else in the nearest existing parent (so a
    run does not learn it at its first checkpoint, after the work it was meant to keep)."""
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
            (`check_resumable`), or the run's ``config.yaml`` when it has no checkpoint yet. None skips that check.
        task: the run's `Task`, on which a resume's seating is compared as built seatings (`check_resumable`).

    Raises:
        FileExistsError: it holds a run and neither `resume` nor `overwrite` is set; or it is a non-empty folder that
            holds no run (a new run starts only in a new or empty folder).
        FileNotFoundError: `resume` without a run.
        NotADirectoryError: it is a file.
        ValueError: `resume` of a run trained with another number of processes, or with another config;
            `overwrite` of a folder that cannot be replaced (`check_replaceable`).
        OSError: the folder (or its ``checkpoints/``) is not writable (`check_writable`).
    """
    out = Path(config.output_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output_dir {out} is a file, not a folder; choose another --output_dir")
    check_not_inside_a_run(out)
    for path in replaced_runs(out):
        logger.warning("%s holds a run that an interrupted --overwrite of %s moved aside; it is kept: to put it "
                       "back, move %s out of the way first, then rename %s to %s", path, out, out, path, out)
    has_run = is_run(out)
    if has_run and not config.resume and not config.overwrite:
        raise FileExistsError(f"{out} already holds a run (config.yaml / metrics.jsonl / checkpoints); nothing was "
                              "changed. Pass --resume to continue it, --overwrite to replace it, or choose another "
                              "--output_dir")
    if config.resume and not has_run:
        raise FileNotFoundError(f"--resume: {out} holds no run to resume; drop --resume to start one")
    if not has_run and out.is_dir() and any(out.iterdir()):
        if config.overwrite:
            check_replaceable(out)  # refuses: cory replaces only folders it created
        names = [entry.name for entry in sorted(out.iterdir())]
        raise FileExistsError(f"{out} is not empty and holds no cory run ({_listed(names)}); nothing was changed. A "
                              "run starts in a new or empty folder: choose another --output_dir")
    if has_run and config.overwrite:
        check_replaceable(out)
    if config.resume:
        latest = ckpt.latest_checkpoint(out)
        if latest is not None:
            state = ckpt.read_trainer_state(latest)
            check_process_count(state, num_processes, out)
            saved = state.get("config", {})
        else:  # stopped before its first checkpoint: the resume starts from the beginning with the same config
            saved = _read_config(out)
        if flat_config is not None and saved is not None:
            check_resumable(saved, flat_config, out, task=task)
    check_writable(out)
    return has_run


def _read_config(output_dir: Path) -> dict[str, Any] | None:
    """The run's ``config.yaml`` as a dict, or None when it has none (or an unreadable one)."""
    try:
        data = yaml.safe_load((output_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


#: The flat fields that describe a run's seating together; a resume compares the seating they build, not their
#: spellings (``cory`` and ``chain:2``, the default and ``cory`` on a two-seat task, are one seating).
SEATING_FIELDS = ("seating", "knowledge_transfer", "partner_reward_coef")


def check_resumable(saved: dict[str, Any], current: dict[str, Any], output_dir: Path, *, task=None) -> None:
    """Raise `ValueError` naming every field (other than `RESUMABLE_CHANGES`) where the flat config of a resume
    differs from the checkpoint's; a field added after the run started reads as its default, another learner's or
    task's options are left out, and both sides read as this version records them (`RunConfigs`). With `task`, the
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


def recorded_config(flat_config: dict[str, Any]) -> dict[str, Any]:
    """`flat_config` as a run records it (``config.yaml``, checkpoints): the `INVOCATION_FIELDS` set to False."""
    return {**flat_config, **{name: False for name in INVOCATION_FIELDS if name in flat_config}}


def replaced_path(output_dir: Path) -> Path:
    """Where ``--overwrite`` keeps the old run of `output_dir` until the new one has a checkpoint: a new hidden
    sibling ``.<name>.replaced-<pid>`` (``-2``, ``-3``, ... after it when a folder of that name is left)."""
    out = Path(output_dir).resolve()
    base = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def start_output_dir(output_dir: Path, flat_config: dict[str, Any], *, replace: bool) -> Path | None:
    """Create the run folder with its marker and config.yaml; returns where the replaced run was moved, or None.
    With `replace` the old run is moved aside (`replaced_path`, the module docstring's last point), and put back at
    once if creating the new folder fails."""
    out = Path(output_dir).resolve() if replace else Path(output_dir)
    aside = replaced_path(out) if replace else None
    if aside is not None:
        os.rename(out, aside)
        logger.info("--overwrite: the old run is kept in %s until this run writes its first checkpoint", aside)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_MARKER).write_text("a cory run: cory may replace this folder (--overwrite)\n", encoding="utf-8")
        (out / RUN_ID_FILE).write_text(uuid.uuid4().hex + "\n", encoding="utf-8")
        (out / CONFIG_FILE).write_text(yaml.safe_dump(recorded_config(flat_config), sort_keys=False))
    except BaseException:
        if aside is not None:
            restore_replaced(out, aside)
        raise
    return aside


def discard_replaced(aside: Path | None) -> None:
    """Delete the run that ``--overwrite`` moved aside (`start_output_dir`)."""
    if aside is not None and aside.exists():
        shutil.rmtree(aside)
        logger.info("--overwrite: removed the replaced run (%s) now that this run has a checkpoint", aside)


def restore_replaced(output_dir: Path, aside: Path | None) -> None:
    """Put the run that ``--overwrite`` moved aside back into `output_dir`, removing the new run's folder (every
    file in it was written by the new run: `start_output_dir` created it)."""
    if aside is None or not aside.exists():
        return
    out = Path(output_dir).resolve()
    if out.exists():
        shutil.rmtree(out)
    os.rename(aside, out)
    logger.warning("--overwrite: this run stopped before its first checkpoint; the replaced run is back in %s, "
                   "unchanged", out)


def abandon_start(output_dir: Path, aside: Path | None) -> None:
    """Undo `start_output_dir` when the run stops before it began (during the rest of its start-up): the replaced
    run comes back (`restore_replaced`), or the new folder's marker and config.yaml go, and the folder with them when
    nothing else is in it."""
    if aside is not None:
        restore_replaced(output_dir, aside)
        return
    out = Path(output_dir)
    for name in (CONFIG_FILE, RUN_MARKER, RUN_ID_FILE):
        (out / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        out.rmdir()  # only when empty
