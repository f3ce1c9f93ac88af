"""Where the benchmarks find their data, and how their results name files: a result never names the machine that
made it.

**Data.** The real data the benchmarks read (1000 IMDB reviews, GSM8K train/test) lives outside the repository, in
the folder the environment variable ``CORY_SHARED_DATA`` names; unset, the ``shared/data`` folder beside the clone
(``../shared/data`` from the repository root). `data_file` finds a file there or says which setting to fix. A rung's
flags name such a file as ``$CORY_SHARED_DATA/NAME`` (what its results record, on every machine alike);
`resolved_flags` turns that into the file's path just before a run.

**Recorded paths.** A result's ``command`` and recorded flags keep each absolute path as `recorded_path` writes it:
inside the repository relative to its root (``benchmarks/results/learning_imdb.json``), inside the data folder as
``$CORY_SHARED_DATA/NAME``, anywhere else as ``<outside>/NAME`` (the file's name only: a temporary folder or
another machine's is nobody else's path).

>>> recorded_path(str(ROOT / "benchmarks" / "results" / "learning_imdb.json"))
'benchmarks/results/learning_imdb.json'
>>> recorded_path("/tmp/exp/imdb_trl.json"), recorded_path("runs/x"), recorded_path("0.2")
('<outside>/imdb_trl.json', 'runs/x', '0.2')
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

__all__ = ["DATA_ENV", "DATA_MARK", "OUTSIDE", "ROOT", "data_dir", "data_file", "recorded_command", "recorded_flags",
           "recorded_path", "resolved_flags"]

#: The repository root.
ROOT = Path(__file__).resolve().parents[1]
#: The environment variable that names the data folder.
DATA_ENV = "CORY_SHARED_DATA"
#: How a result (or a rung's flags) names the data folder.
DATA_MARK = f"${DATA_ENV}"
#: How a result names a folder outside the repository and the data folder.
OUTSIDE = "<outside>"


def data_dir() -> Path:
    """The data folder: ``$CORY_SHARED_DATA``, else ``shared/data`` beside the repository."""
    return Path(os.environ.get(DATA_ENV) or ROOT.parent / "shared" / "data")


def data_file(name: str) -> Path:
    """The path of the data file `name` (e.g. ``"imdb_reviews_1000.csv"``) in `data_dir`.

    Raises:
        FileNotFoundError: the data folder does not hold `name`: the message names the folder looked in and the
            setting, ``CORY_SHARED_DATA``.
    """
    folder = data_dir()
    path = folder / name
    if not path.is_file():
        where = f"{DATA_ENV}={os.environ[DATA_ENV]}" if os.environ.get(DATA_ENV) else f"{DATA_ENV} unset: the default"
        raise FileNotFoundError(f"data file {name!r} not found in {folder} ({where}); set {DATA_ENV} to the folder "
                                f"that holds it (docs/getting-started.md)")
    return path


def resolved_flags(flags: Sequence[str]) -> list[str]:
    """`flags` with each ``$CORY_SHARED_DATA/NAME`` replaced by `data_file` ``(NAME)`` (FileNotFoundError naming
    the setting when it is missing)."""
    prefix = DATA_MARK + "/"
    return [str(data_file(f[len(prefix):])) if f.startswith(prefix) else f for f in flags]


def _relative(path: Path, folder: Path) -> str | None:
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return None


def recorded_path(token: str) -> str:
    """`token` as a result records it (module docstring): an absolute path made relative to the repository or the
    data folder, or ``<outside>/NAME``; ``--flag=PATH`` the same after the ``=``; anything else unchanged."""
    if token.startswith("--") and "=" in token:
        flag, value = token.split("=", 1)
        return f"{flag}={recorded_path(value)}"
    if not os.path.isabs(token):
        return token
    path = Path(os.path.normpath(token))
    inside_data = _relative(path, Path(os.path.normpath(data_dir().absolute())))
    if inside_data is not None:
        return f"{DATA_MARK}/{inside_data}" if inside_data != "." else DATA_MARK
    inside_repo = _relative(path, ROOT)
    if inside_repo is not None:
        return inside_repo
    return f"{OUTSIDE}/{path.name}"


def recorded_flags(flags: Sequence[str]) -> list[str]:
    """Each of `flags` as `recorded_path` writes it."""
    return [recorded_path(f) for f in flags]


def recorded_command(script: str, argv: Sequence[str] | None) -> str:
    """The ``command`` a result records: ``python SCRIPT ARGS`` with `argv` (``sys.argv[1:]`` when None) through
    `recorded_path`.

    >>> recorded_command("benchmarks/collapse.py", ["a.json", "--out", str(ROOT / "out.json")])
    'python benchmarks/collapse.py a.json --out out.json'
    """
    import sys

    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", script, *recorded_flags(args)])
