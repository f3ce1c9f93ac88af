"""A ladder result in the raw-data JSON format of InstaDeep's ``marl-eval`` (Gorsane et al., "Towards a Standardised
Performance Evaluation Protocol for Cooperative MARL", NeurIPS 2022, arXiv:2209.10485; the format BenchMARL
writes), so its aggregation and plots (IQM, probability of improvement, sample-efficiency curves) read the ladder::

    {environment: {task: {algorithm: {"seed_0": {"step_0": {"step_count": 0, "return": [0.15], "kl_k1": [0.0]},
                                                 ...,
                                                 "absolute_metrics": {"return": [0.44]}}}}}}

Here the environment is ``cory_<rung>`` and the task the rung, an algorithm is a ladder arm, a run is one seed
(``seed_<seed>``, as marl-eval's own ``JsonLogger`` names runs), and ``step_<k>`` is the k-th held-out evaluation of
the run's curve, ``step_count`` its training episodes (marl-eval's environment steps; here an episode is one query
answered by every seat). ``return`` is the ladder's held-out reward (the rung's metric: the collective or the
pioneer's reward); the KL, distinct-n and response-length fields the point records are written under their own
names. marl-eval lists one value per evaluation episode; the ladder keeps only each evaluation's mean, so every list
holds one value, which marl-eval accepts. ``absolute_metrics`` holds the run's final evaluation (marl-eval's
absolute metric is the best policy re-evaluated on 10x the episodes; the ladder has no such re-evaluation).

marl-eval's aggregation needs, within one task, the same runs and the same number of steps for every algorithm: a
``-Nx`` arm has more evaluation points than its base arm, so export the arms of one budget (`to_marl_eval`'s
``arms``) to aggregate them there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from benchmarks.ladder_report import POINT_KEYS, point_record

__all__ = ["export_marl_eval", "to_marl_eval"]


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
        "absolute_metrics": {"return": [float]}}}}}}``, every list one value long.

    Raises:
        ValueError: if an arm of `arms` is not in `result`.

    >>> result = {"rung": "imdb", "arms": {"cory": {"seeds": [0], "per_seed": [0.44],
    ...           "curves": [[{"episodes": 0, "reward": 0.15}, {"episodes": 400, "reward": 0.44}]]}}}
    >>> to_marl_eval(result)["cory_imdb"]["imdb"]["cory"]["seed_0"]
    {'step_0': {'step_count': 0, 'return': [0.15]}, 'step_1': {'step_count': 400, 'return': [0.44]}, \
'absolute_metrics': {'return': [0.44]}}
    """
    names = list(result["arms"]) if arms is None else list(arms)
    unknown = [a for a in names if a not in result["arms"]]
    if unknown:
        raise ValueError(f"arms {unknown} are not in the result; choose among {list(result['arms'])}")
    algorithms = {}
    for arm in names:
        e = result["arms"][arm]
        runs = {}
        for seed, curve, final in zip(e["seeds"], e["curves"], e["per_seed"]):
            run = {}
            for k, point in enumerate(map(point_record, curve)):
                run[f"step_{k}"] = {"step_count": int(point["episodes"]), "return": [float(point["reward"])],
                                    **{key: [float(point[key])] for key in POINT_KEYS if key in point}}
            run["absolute_metrics"] = {"return": [float(final)]}  # last: marl-eval reads a run's last entry
            runs[f"seed_{seed}"] = run
        algorithms[arm] = runs
    return {environment or f"cory_{result['rung']}": {task or result["rung"]: algorithms}}


def export_marl_eval(result: dict, path: Path | str, **kwargs) -> Path:
    """Write `to_marl_eval` of `result` (its keyword arguments pass through) to `path` as JSON (its folder made);
    returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_marl_eval(result, **kwargs), indent=1), encoding="utf-8")
    return path
