"""The checks before ladder JSONs are merged (`benchmarks/ladder_merge.py`): a run whose reward is not a finite
number is refused with the run and the file named, before any statistic is taken over it."""

from __future__ import annotations

import json

import pytest


def _run(arm: str, seed: int, final: float, before: float = 0.2) -> dict:
    return {"arm": arm, "seed": seed, "final": final, "before": before, "episodes": 64, "cpu_s": 1.0,
            "train_cpu_s": 0.5, "curve": [[0, before, 0.1], [64, final, 0.5]], "metric": "collective"}


@pytest.mark.parametrize("field, value", [("final", float("nan")), ("before", float("inf")), ("final", None)])
def test_merge_refuses_a_run_whose_reward_is_not_a_finite_number(tmp_path, field, value):
    from benchmarks.ladder_summary import merge, summarise

    good = summarise("relay", [_run("cory", 0, 1.9), _run("cory", 1, 1.7)], {}, ["--rung", "relay"])
    bad = summarise("relay", [_run("cory-wo-kt", 0, 1.0), _run("cory-wo-kt", 1, 1.2)], {}, ["--rung", "relay"])
    bad["runs"][1][field] = value
    paths = [tmp_path / "good.json", tmp_path / "bad.json"]
    for path, part in zip(paths, (good, bad)):
        path.write_text(json.dumps(part), encoding="utf-8")  # NaN and Infinity as Python's json writes them
    with pytest.raises(SystemExit, match=rf"--merge: cory-wo-kt seed 1 \(.*bad.json\) has {field} reward "
                                         rf"{value!r}, not a finite number; leave that run out"):
        merge([str(p) for p in paths], tmp_path / "m.json", [])
    assert not (tmp_path / "m.json").exists()
