"""`cory plot RUN_DIR...`: PNG figures from run directories: learning curves (per seat and per model identity) and
a Pareto scatter (`trainers.loop.plots`, which says how the PNGs are checked and written).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from trainers.loop.outputs import add_overwrite_option
from trainers.loop.plots import plot_runs


def run_plot(argv: Sequence[str]) -> int:
    """``cory plot RUN_DIR... [--out DIR]``: print the paths of the PNGs written."""
    parser = argparse.ArgumentParser(prog="cory plot", description="PNG curves and a Pareto scatter of runs.",
                                     allow_abbrev=False)
    parser.add_argument("run_dirs", nargs="+", help="Run directories (each with metrics.jsonl).")
    parser.add_argument("--out", default=None,
                        help="Output folder for curves.png and pareto.png (default: the first run directory, where a "
                             "rerun replaces them).")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    for path in plot_runs(args.run_dirs, args.out or args.run_dirs[0], replace=args.overwrite or args.out is None,
                          option="--out" if args.out else "output folder"):
        print(path)
    return 0
