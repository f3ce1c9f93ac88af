"""The one rule for every file a command writes beside a run (``cory eval --out``, ``cory plot --out``, a run's
``eval.json``, the benchmarks' ``--out``): checked before the work that produces it, then written atomically.

`check_output_file`, called before any model loads or any episode runs, refuses:

* a folder, or a path under a file;
* a file a run owns (`run_owner`): a run directory's ``config.yaml``, ``metrics.jsonl``, ``samples.jsonl``,
  ``eval.json``, ``.cory-run`` and anything under its ``checkpoints/`` (rotation deletes old checkpoints) or
  ``tensorboard/``; a checkpoint folder's own files. Such a path is refused even before the run has written it;
* an existing file, unless the command was told to replace it (``--overwrite``, `replace`), or the path is the
  command's own default output (a rerun replaces what the same command wrote, and says so);
* a folder that cannot be written into.

`write_output` (and `atomic_output`, for writers that take a path, such as matplotlib's ``savefig``) writes into a
temporary file beside the target and renames it into place: on any failure the temporary file is removed and an
existing file is left as it was.

>>> import tempfile, pathlib
>>> run = pathlib.Path(tempfile.mkdtemp()); _ = (run / ".cory-run").write_text("")
>>> check_output_file(run / "config.yaml", option="--out")
Traceback (most recent call last):
...
ValueError: --out ...config.yaml is the run's config.yaml in ...: a run's own files are never replaced; ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterator

from cory_env.write_errors import write_errors
from trainers.loop import checkpoint as ckpt
from trainers.loop.run_dir import RUN_OWNED_FILES, RUN_OWNED_FOLDERS, is_run

logger = logging.getLogger(__name__)

__all__ = ["OVERWRITE_HELP", "RUN_OWNED_FILES", "RUN_OWNED_FOLDERS", "add_overwrite_option", "atomic_output",
           "check_output_file", "checked_out", "run_owner", "write_output"]


def run_owner(path: str | os.PathLike) -> str | None:
    """What owns `path` when a run does (a description for a message), else None: in a run directory the files
    `RUN_OWNED_FILES` and everything under `RUN_OWNED_FOLDERS`; in a checkpoint folder (also outside a run)
    `trainers.loop.checkpoint.CHECKPOINT_FILES` and everything in its subfolders. `path` need not exist."""
    target = Path(path).resolve()
    parent = target.parent
    if target.name in RUN_OWNED_FILES + RUN_OWNED_FOLDERS and is_run(parent):
        return f"the run's {target.name} in {parent}"
    for folder in target.parents:
        inner = target.relative_to(folder).parts
        if inner[0] in RUN_OWNED_FOLDERS and is_run(folder):
            return f"inside the run's {inner[0]}/ folder {folder / inner[0]}" + (
                ", whose old checkpoints are deleted as training goes on" if inner[0] == ckpt.CHECKPOINT_DIR else "")
        if (folder / ckpt.STATE_FILE).is_file() and (len(inner) > 1 or inner[0] in ckpt.CHECKPOINT_FILES):
            return f"a file of the checkpoint {folder}"
    return None


def check_output_file(path: str | os.PathLike, *, option: str, replace: bool = False, default: bool = False,
                      flag: str = "--overwrite") -> Path:
    """`path` as a `Path` once a command may write it (see the module docstring); call it before the work whose
    result it will hold.

    Args:
        path: the file to be written (its folder is created when written, `write_output`).
        option: the option that named it (``"--out"``), for the messages.
        replace: an existing file may be replaced (the command's `flag` was given).
        default: `path` is the command's own default output: an existing one is replaced (a rerun), with a log line.
        flag: the option that allows replacing, named in the message.

    Raises:
        IsADirectoryError: `path` is a folder. NotADirectoryError: a parent of it is a file.
        ValueError: a run owns it (`run_owner`), whatever `replace` says.
        FileExistsError: it exists and neither `replace` nor `default` is set; nothing was changed.
        PermissionError: its folder (or the nearest existing parent) cannot be written into.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{option} {path} is a folder; give the path of a file to write")
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(f"{option} {path}: {probe} is a file, not a folder; choose another path")
    owner = run_owner(path)
    if owner is not None:
        raise ValueError(f"{option} {path} is {owner}: a run's own files are never replaced; choose another path "
                         "(a new file beside the run's folder, or the command's default)")
    if path.exists() and not (replace or default):
        raise FileExistsError(f"{option} {path} already exists; nothing was changed. Pass {flag} to replace it, or "
                              "choose another path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"{option} {path}: cannot write into {probe} (permissions); choose another path")
    if path.exists() and default and not replace:
        logger.info("%s will be replaced (the same command's earlier output)", path)
    return path


#: The help of ``--overwrite`` where a command or script writes a file (``cory eval``, ``cory plot``, benchmarks).
OVERWRITE_HELP = ("Replace the output file(s) when they exist (the command's default output is replaced by a rerun "
                  "anyway; a run's own files never are).")


def add_overwrite_option(parser) -> None:
    """Add ``--overwrite`` (`OVERWRITE_HELP`) to an `argparse.ArgumentParser`."""
    parser.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)


def checked_out(parser, args, *, dest: str = "out", option: str = "--out", default: str | os.PathLike | None = None,
                also: tuple[str, ...] = ()) -> Path:
    """`check_output_file` of a script's ``--out`` (``args.<dest>``, or `default` when it is None) before its work:
    the default path (`default`, else the parser's) is the script's own output (a rerun replaces it), any other
    existing file needs ``--overwrite`` (``args.overwrite``, `add_overwrite_option`). `also`: suffixes of files
    written beside it (``"_tradeoff.png"`` -> ``<stem>_tradeoff.png``), checked the same way. Returns the path;
    a refused path ends the script through ``parser.error`` (its usage, the reason, exit status 2)."""
    default = default if default is not None else parser.get_default(dest)
    out = Path(getattr(args, dest) if getattr(args, dest) is not None else default)
    is_default = default is not None and out.resolve() == Path(default).resolve()
    for path in (out, *(out.with_name(out.stem + suffix) for suffix in also)):
        try:
            check_output_file(path, option=option if path == out else f"the file beside {option}",
                              replace=args.overwrite, default=is_default)
        except (ValueError, OSError) as err:
            parser.error(str(err))
    return out


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix, so writers that read the format from it still do); renamed onto
    `path` when the block ends without error, removed on any error (`path` is then unchanged). The folder is
    created; the file gets the permissions a plain ``open(path, "w")`` would give. A write failure in the block (a
    full disk, a file-size limit) is an `OSError` naming `path` (`cory_env.write_errors.write_errors`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with write_errors(path):
            yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_output(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `path` atomically (`atomic_output`); returns `path`."""
    with atomic_output(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)
