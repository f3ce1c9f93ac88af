"""A ladder result in the raw-data JSON format of InstaDeep's ``marl-eval`` (Gorsane et al., "Towards a Standardised
Performance Evaluation Protocol for Cooperative MARL", NeurIPS 2022, arXiv:2209.10485; the format BenchMARL
writes), so its aggregation and plots (IQM, probability of improvement, sample-efficiency curves) read the ladder::

    {environment: {task: {algorithm: {"seed_0": {"step_0": {"step_count": 0, "return": [0.15], "kl_k1": [0.0]},
                                                 ...,
                                                 "absolute_metrics": {"return": [0.44], "kl_k1": [6.1]}}}}}}

Here the environment is ``cory_<rung>`` and the task the rung, an algorithm is a ladder arm, a run is one seed
(``seed_<seed>``, as marl-eval's own ``JsonLogger`` names runs), and ``step_<k>`` is the k-th held-out evaluation of
the run's curve, ``step_count`` its training episodes (marl-eval's environment steps; here an episode is one query
answered by every seat). ``return`` is the ladder's held-out reward (the rung's metric: the collective or the
pioneer's reward); the KL, distinct-n and response-length fields the point records are written under their own
names, those that every point of the exported arms records. marl-eval lists one value per evaluation episode; the
ladder keeps only each evaluation's mean, so every list holds one value, which marl-eval accepts.
``absolute_metrics`` holds the run's final evaluation with every metric a step holds (marl-eval's ``DiagnoseData``
wants the same metrics in every entry). marl-eval's absolute metric is the best policy re-evaluated on 10x the
episodes; the ladder has no such re-evaluation.

marl-eval's checks and aggregation (``DiagnoseData``, ``data_process_pipeline``, ``create_matrices_for_rliable``)
need, within one task, every algorithm on the same runs and the same evaluation points: `check_exportable` refuses
arms whose seed sets or evaluation episodes differ (a ``-Nx`` arm has more points than its base arm), naming each
arm's and the groups of arms that do export together; choose the arms (`to_marl_eval`'s ``arms``, the command
line's ``--arms`` here or ``--marl_eval_arms`` of ``benchmarks/learning.py``)::

    python benchmarks/marl_eval_json.py benchmarks/results/learning_imdb.json --arms cory ppo --out /tmp/marl_eval.json

marl-eval itself (PyPI ``id-marl-eval``) pins ``pandas==1.4.4``, which does not build on Python 3.11: install what
its checks import with ``pip install -e ".[marl-eval]"`` (colorama; numpy is here already), then marl-eval with
``pip install --no-deps id-marl-eval==0.0.4`` (its plots also need rliable and seaborn). ``tests/benchmarks/test_marl_eval_json.py`` runs its checks on an
export when it is installed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/marl_eval_json.py` from a clone
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder_report import POINT_KEYS, point_record  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402

__all__ = ["check_exportable", "export_marl_eval", "main", "to_marl_eval"]


def _layout(entry: dict) -> tuple[tuple, tuple]:
    """(seeds, the evaluation episodes of every run) of one arm of a ladder result."""
    return (tuple(entry["seeds"]),
            tuple(tuple(point_record(p)["episodes"] for p in curve) for curve in entry["curves"]))


def check_exportable(result: dict, arms: Sequence[str]) -> None:
    """Refuse `arms` of `result` that marl-eval cannot read as one task (module docstring).

    Raises:
        ValueError: no arm; an arm not in `result`; an arm name with a comma (marl-eval refuses it); the arms'
            seed sets or evaluation episodes differ (the message names each arm's and the groups that export
            together); the runs of one arm are evaluated at different episodes; a value that is not finite.
    """
    if not arms:
        raise ValueError(f"no arm to export; choose among {list(result['arms'])}")
    unknown = [a for a in arms if a not in result["arms"]]
    if unknown:
        raise ValueError(f"arms {unknown} are not in the result; choose among {list(result['arms'])}")
    commas = [a for a in arms if "," in a]
    if commas:
        raise ValueError(f"arm names {commas} hold a comma, which marl-eval refuses in an algorithm name")
    layouts = {arm: _layout(result["arms"][arm]) for arm in arms}
    for arm, (_, points) in layouts.items():
        if len(set(points)) > 1:
            raise ValueError(f"the runs of {arm} are evaluated at different episodes ({sorted(set(points))}); "
                             "marl-eval needs every run on the same evaluation points")
    if len(set(layouts.values())) > 1:
        def shown(layout: tuple) -> str:
            seeds, points = layout
            first = points[0] if points else ()
            return f"seeds {list(seeds)}, {len(first)} evaluations to {first[-1] if first else 0} episodes"

        groups: dict[tuple, list[str]] = {}
        for arm, layout in layouts.items():
            groups.setdefault(layout, []).append(arm)
        raise ValueError("marl-eval compares arms over the same runs (seed_<s>) at the same evaluation points, and "
                         "these differ: " + "; ".join(f"{', '.join(g)}: {shown(layout)}"
                                                       for layout, g in groups.items())
                         + "; export the arms of one group")
    for arm in arms:
        e = result["arms"][arm]
        for seed, curve, final in zip(e["seeds"], e["curves"], e["per_seed"]):
            values = [final, *(v for p in map(point_record, curve) for k, v in p.items()
                               if k in ("reward", *POINT_KEYS))]
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                raise ValueError(f"{arm} seed {seed} holds a value that is not finite; marl-eval needs finite "
                                 "numbers: leave that arm out")


def to_marl_eval(result: dict, *, arms: Sequence[str] | None = None, environment: str | None = None,
                 task: str | None = None) -> dict:
    """A ladder result as marl-eval's nested dict (see the module docstring).

    Args:
        result: a ladder result (``"rung"``, ``"arms"`` with ``"seeds"``, ``"curves"``, ``"per_seed"``).
        arms: the arms to export (default: every arm of `result`, in its order).
        environment: the environment name (default ``cory_<rung>``).
        task: the task name (default the rung).

    Returns:
        ``{environment: {task: {arm: {"seed_<s>": {"step_<k>": {"step_count": int, "return": [float], ...},
        "absolute_metrics": {"return": [float], ...}}}}}}``, every list one value long, every entry of a run the
        same metrics.

    Raises:
        ValueError: `check_exportable` refuses the arms (the reason and the arms that export together).

    >>> result = {"rung": "imdb", "arms": {"cory": {"seeds": [0], "per_seed": [0.44],
    ...           "curves": [[{"episodes": 0, "reward": 0.15}, {"episodes": 400, "reward": 0.44}]]}}}
    >>> to_marl_eval(result)["cory_imdb"]["imdb"]["cory"]["seed_0"]
    {'step_0': {'step_count': 0, 'return': [0.15]}, 'step_1': {'step_count': 400, 'return': [0.44]}, \
'absolute_metrics': {'return': [0.44]}}
    """
    names = list(result["arms"]) if arms is None else list(arms)
    check_exportable(result, names)
    points = [point_record(p) for arm in names for curve in result["arms"][arm]["curves"] for p in curve]
    metrics = [key for key in POINT_KEYS if all(key in p for p in points)]  # those every entry can hold
    algorithms = {}
    for arm in names:
        e = result["arms"][arm]
        runs = {}
        for seed, curve, final in zip(e["seeds"], e["curves"], e["per_seed"]):
            run = {}
            for k, point in enumerate(map(point_record, curve)):
                run[f"step_{k}"] = {"step_count": int(point["episodes"]), "return": [float(point["reward"])],
                                    **{key: [float(point[key])] for key in metrics}}
            last = point_record(curve[-1]) if curve else {}
            # last: marl-eval reads a run's last entry; the same metrics as every step (DiagnoseData)
            run["absolute_metrics"] = {"return": [float(final)], **{key: [float(last[key])] for key in metrics}}
            runs[f"seed_{seed}"] = run
        algorithms[arm] = runs
    return {environment or f"cory_{result['rung']}": {task or result["rung"]: algorithms}}


def export_marl_eval(result: dict, path: Path | str, **kwargs) -> Path:
    """Write `to_marl_eval` of `result` (its keyword arguments pass through) to `path` as JSON (its folder made);
    returns the path."""
    return write_json(path, to_marl_eval(result, **kwargs))


def main(argv: Sequence[str] | None = None) -> Path:
    """``python benchmarks/marl_eval_json.py LADDER.json [--arms ARM ...] --out PATH``: export a ladder JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ladder", help="a ladder JSON (benchmarks/learning.py --out)")
    parser.add_argument("--arms", nargs="+", default=None, help="the arms to export (default: every arm)")
    add_out_option(parser, required=True, help="the marl-eval JSON to write")
    args = parser.parse_args(argv)
    checked_out(parser, args)
    source = Path(args.ladder)
    if not source.is_file():
        parser.error(f"no such ladder JSON {str(source)!r}; pass a file benchmarks/learning.py wrote")
    result = json.loads(source.read_text(encoding="utf-8"))
    try:
        path = export_marl_eval(result, args.out, arms=args.arms)
    except ValueError as err:
        parser.error(f"{err} (choose them with --arms)")
    print(f"wrote {path} (marl-eval format)")
    return path


if __name__ == "__main__":
    main()
