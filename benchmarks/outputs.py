"""Where a benchmark's result goes and how it is written, the same for every script: its JSON (and any figure or
per-run folder beside it) defaults to ``benchmarks/results/`` (`RESULTS`); `add_out_option` adds ``--out`` and
``--overwrite``; `checked_out` checks the path before the work (`trainers.loop.outputs.checked_out`: a run's own
files, a folder or an existing file that is not the script's own default are refused); `write_json` writes the
result atomically, indented, with a final newline, and `write_figure` a figure beside it.

    parser = argparse.ArgumentParser()
    add_out_option(parser, "pareto_imdb.json")  # --out (default benchmarks/results/pareto_imdb.json), --overwrite
    args = parser.parse_args(argv)
    out = checked_out(parser, args)  # before the script reads its inputs or runs anything
    ...
    write_json(out, result)

`trainers.loop.outputs` imports torch, so it is imported when a function here is called, not with this module.

>>> result_path("pareto_imdb.json").relative_to(ROOT).as_posix()
'benchmarks/results/pareto_imdb.json'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.paths import ROOT

__all__ = ["RESULTS", "add_out_option", "checked_out", "result_path", "write_figure", "write_json"]

#: The folder of every committed result (JSONs, figures, per-run folders such as ``imdb_runs/``).
RESULTS = ROOT / "benchmarks" / "results"


def result_path(name: str) -> Path:
    """The default path of the result `name` (a file such as ``"pareto_imdb.json"``, or a folder of per-run files)
    in `RESULTS`."""
    return RESULTS / name


def add_out_option(parser, name: str | None = None, *, required: bool = False, help: str | None = None) -> None:
    """Add ``--out`` and ``--overwrite`` to an `argparse.ArgumentParser`.

    Args:
        name: the default output's name in `RESULTS` (`result_path`); None: no default on the parser (`required`,
            or the script passes its own to `checked_out`, e.g. one per rung).
        required: ``--out`` must be given.
        help: the help of ``--out`` (default: the JSON to write and its default path).
    """
    from trainers.loop.outputs import add_overwrite_option

    default = None if name is None else str(result_path(name))
    shown = f" (default: benchmarks/results/{name})" if name is not None else ""
    parser.add_argument("--out", default=default, required=required, help=help or f"the JSON to write{shown}")
    add_overwrite_option(parser)


def checked_out(parser, args, **options) -> Path:
    """`trainers.loop.outputs.checked_out` of ``args.out`` (`options`: its ``default``, ``also``, ``dest``,
    ``option``): the path, checked before the work; a refused path ends the script (``parser.error``, exit 2)."""
    from trainers.loop.outputs import checked_out as check

    return check(parser, args, **options)


def write_json(path: str | os.PathLike, result: Any, *, indent: int | None = 1) -> Path:
    """Write `result` to `path` as JSON (``json.dumps(result, indent=indent)`` and a newline), atomically
    (`trainers.loop.outputs.write_output`: an existing file is left as it was on any failure); returns `path`."""
    from trainers.loop.outputs import write_output

    return write_output(path, json.dumps(result, indent=indent) + "\n")


def write_figure(fig, path: str | os.PathLike, *, dpi: int = 110) -> Path:
    """Save the matplotlib figure `fig` to `path` atomically (`trainers.loop.outputs.atomic_output`: no half-written
    figure, no temporary file left on a failure) and close it; returns `path`."""
    import matplotlib.pyplot as plt

    from trainers.loop.outputs import atomic_output

    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    return Path(path)
