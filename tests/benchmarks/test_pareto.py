"""The Pareto summary: β read from the flags, a -Nx run read at the rung's budget, gaps to the frontier."""

from __future__ import annotations

import json

import pytest

from benchmarks import pareto


def _run(arm, seed, curve, flags=()):
    final = curve[-1]
    return {"arm": arm, "seed": seed, "episodes": final["episodes"], "final": final["reward"], "before": 0.1,
            "cpu_s": 1.0, "curve": curve, "flags": list(flags), "final_eval": {"kl_k1": final["kl_k1"]}}


def _point(episodes, reward, kl):
    return {"episodes": episodes, "reward": reward, "kl_k1": kl, "kl": kl, "distinct_1": 0.5, "distinct_2": 0.9,
            "response_len": 10.0}


def test_a_run_is_placed_at_its_final_kl_and_reward_with_its_own_beta(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"shared_flags": ["--init_kl_coef", "0.05"], "runs": [
        _run("ppo-2x", 0, [_point(0, 0.1, 0.0), _point(400, 0.5, 3.0), _point(800, 0.9, 9.0)]),  # read at 400
        _run("cory", 1, [_point(0, 0.1, 0.0), _point(400, 0.3, 2.0)], flags=["--init_kl_coef", "0.2"])]}))
    assert pareto.points_of(path) == [
        {"arm": "ppo", "beta": 0.05, "seed": 0, "kl": 3.0, "reward": 0.5},
        {"arm": "cory", "beta": 0.2, "seed": 1, "kl": 2.0, "reward": 0.3}]


def test_a_run_without_kl_is_refused(tmp_path):
    path = tmp_path / "runs.json"
    run = _run("cory", 0, [_point(0, 0.1, 0.0), _point(400, 0.3, 2.0)])
    run["final_eval"] = {}
    path.write_text(json.dumps({"shared_flags": ["--init_kl_coef", "0.05"], "runs": [run]}))
    with pytest.raises(ValueError, match="records no k1 KL"):
        pareto.points_of(path)


def test_gaps_frontier_and_which_arm_lies_nearer():
    points = [{"arm": "cory", "beta": b, "seed": 0, "kl": kl, "reward": r}
              for b, kl, r in ((0.05, 1.0, 0.30), (0.2, 2.0, 0.40))] + \
             [{"arm": "ppo", "beta": b, "seed": 0, "kl": kl, "reward": r}
              for b, kl, r in ((0.05, 1.5, 0.20), (0.2, 3.0, 0.35))]
    summary = pareto.summarise(points)
    assert [round(p["gap"], 6) for p in summary["points"]] == [0.0, 0.0, 0.1, 0.05]  # ppo below cory at its KL
    assert [(p["arm"], p["kl"]) for p in summary["frontier"]] == [("cory", 1.0), ("cory", 2.0)]
    nearer = summary["nearer_than_ppo"]["cory"]
    assert nearer["p"] == 1.0 and nearer["n"] == [2, 2]  # both cory gaps (0) below both ppo gaps
    assert summary["per_beta"]["ppo"]["0.2"]["kl"]["iqm"] == 3.0
    row = pareto.table(summary).splitlines()[2]
    assert row.startswith("| cory | 1.00 · 0.300 (1) | 2.00 · 0.400 (1) | 0.000 [0.000, 0.000] | 1.00")


def test_arms_on_other_seeds_compare_over_one_beta_sweep_and_other_sweeps_do_not():
    def points(arm, betas, seeds, reward):
        return [{"arm": arm, "beta": b, "seed": s, "kl": 1.0 + b, "reward": reward} for b in betas for s in seeds]

    same_sweep = pareto.summarise(points("cory", (0.05, 0.2), (0, 1), 0.4) + points("ppo", (0.05, 0.2), (2,), 0.3))
    nearer = same_sweep["nearer_than_ppo"]["cory"]  # independent runs: seeds 0-1 against seed 2, all 4 x 2 pairs
    assert nearer["p"] == 1.0 and nearer["n"] == [4, 2] and len(nearer["seeds"]) == 2
    other_sweep = pareto.summarise(points("cory", (0.05,), (0,), 0.4) + points("ppo", (0.05, 0.2), (0,), 0.3))
    assert other_sweep["nearer_than_ppo"]["cory"]["p"] is None
    assert pareto.table(other_sweep).splitlines()[2].endswith("| n/a: β sweeps differ: cory [0.05], ppo [0.05, 0.2] |")
