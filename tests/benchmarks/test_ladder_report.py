"""The ladder's reward–KL summaries on hand-computed trajectories (`benchmarks/ladder_report.py`), and the
equal-compute control arms (`-2x`) of `benchmarks/learning.py`."""

from __future__ import annotations

import json

import pytest

from benchmarks.ladder_report import (combined_rewards, combined_table, equal_kl, kl_table, plot_tradeoff,
                                      point_record, reward_at_kl, table)


def _point(episodes, reward, kl, cpu=None):
    out = {"episodes": episodes, "reward": reward, "kl_k1": kl, "kl": 2 * kl}
    if cpu is not None:
        out["train_cpu_s"] = cpu
    return out


def test_old_points_load_as_records():
    assert point_record([8, 0.5]) == {"episodes": 8, "reward": 0.5}
    assert point_record([8, 0.5, 3.0]) == {"episodes": 8, "reward": 0.5, "train_cpu_s": 3.0}
    record = _point(8, 0.5, 1.0)
    assert point_record(record) is record


def test_reward_at_kl_interpolates_the_first_crossing():
    curve = [_point(0, 0.1, 0.0), _point(100, 0.3, 2.0), _point(200, 0.5, 6.0), _point(300, 0.2, 3.0)]
    assert reward_at_kl(curve, 1.0) == pytest.approx(0.2)  # halfway from (0, 0.1) to (2, 0.3)
    assert reward_at_kl(curve, 2.0) == pytest.approx(0.3)  # exactly at a point
    assert reward_at_kl(curve, 4.0) == pytest.approx(0.4)  # the first crossing, not the way back down at 300
    assert reward_at_kl(curve, 6.5) is None  # never reached
    assert reward_at_kl(curve, 4.0, key="kl") == pytest.approx(0.3 + 0.2 * (4 - 4) / 8)  # the penalised estimator
    assert reward_at_kl([[0, 0.1], [100, 0.5]], 1.0) is None  # old points record no KL


def test_equal_kl_averages_the_seeds_that_reach_each_level():
    reach = [_point(0, 0.0, 0.0), _point(100, 0.4, 4.0)]  # reward 0.1 per nat
    short = [_point(0, 0.2, 0.0), _point(100, 0.3, 1.0)]  # never beyond 1 nat
    result = {"arms": {"a": {"seeds": [0, 1], "curves": [reach, short]}, "b": {"seeds": [0], "curves": [short]}}}
    out = equal_kl(result, levels=(1.0, 2.0))
    one, two = out["levels"]["1.0"], out["levels"]["2.0"]
    assert one["a"]["per_seed"] == pytest.approx([0.1, 0.3]) and one["a"]["mean"] == pytest.approx(0.2)
    assert one["b"] == {"mean": pytest.approx(0.3), "std": 0.0, "per_seed": [pytest.approx(0.3)], "seeds": [0],
                        "stats": {"iqm": pytest.approx(0.3), "ci": None, "n": 1, "mean": pytest.approx(0.3),
                                  "why": "one seed"}}
    assert one["a"]["stats"]["iqm"] == pytest.approx(0.2)
    assert one["a"]["stats"]["ci"] == [pytest.approx(0.1), pytest.approx(0.3)]  # 2 seeds: the 95 % interval spans them
    assert two["a"]["seeds"] == [0] and two["a"]["std"] == 0.0  # one seed: std 0
    assert "b" not in two  # no seed of b reaches 2 nats
    assert out["key"] == "kl_k1"
    assert equal_kl({"arms": {"a": {"seeds": [0], "curves": [[[0, 0.1], [8, 0.2]]]}}}) is None
    table = kl_table({"arms": result["arms"], "equal_kl": out})
    assert "| a | 0.200 [0.100, 0.300] (2) | 0.200 [n/a: one seed] (1) |" in table
    assert "| b | 0.300 [n/a: one seed] (1) | — |" in table
    # another field along the same trajectories: distinct-2 at equal KL (0.9 -> 0.5 over the first 4 nats)
    for c in (reach, short):
        c[0]["distinct_2"], c[1]["distinct_2"] = 0.9, 0.5
    div = equal_kl(result, levels=(1.0,), value="distinct_2")
    assert div["value"] == "distinct_2" and div["levels"]["1.0"]["a"]["per_seed"] == pytest.approx([0.8, 0.5])
    lines = kl_table({"arms": result["arms"], "d": div}, "d").splitlines()
    assert lines[0] == "| arm | distinct-2 at KL 1 |" and lines[2] == "| a | 0.650 [0.500, 0.800] (2) |"
    bare_a = {k: v for k, v in div["levels"]["1.0"]["a"].items() if k != "stats"}
    old = {"arms": result["arms"], "d": {**div, "levels": {"1.0": {"a": bare_a}}}}
    assert kl_table(old, "d").splitlines()[2] == lines[2]  # a summary written before "stats": computed
    bare = {"arms": {"a": {"seeds": [0], "curves": [[_point(0, 0.0, 0.0), _point(100, 0.4, 4.0)]]}}}
    assert equal_kl(bare, levels=(1.0,), value="distinct_2")["levels"]["1.0"] == {}  # points without the field


def test_equal_kl_compares_arms_on_the_seeds_that_reach_each_level():
    from benchmarks.ladder_stats import improvement_table, improvements

    def run(slope):  # reward = 0.1 + slope * KL up to KL 4
        return [_point(0, 0.1, 0.0), _point(100, 0.1 + 4 * slope, 4.0)]

    short = [_point(0, 0.1, 0.0), _point(100, 0.2, 1.5)]  # never reaches KL 2
    result = {"arms": {"cory": {"seeds": [0, 1], "curves": [run(0.1), run(0.2)], "per_seed": [0.5, 0.9]},
                       "ppo": {"seeds": [0, 1], "curves": [run(0.05), short], "per_seed": [0.3, 0.9]}}}
    eq = equal_kl(result, levels=(1.0, 2.0))
    # KL 1: cory 0.2, 0.3; ppo 0.15, 0.167: every pair cory > ppo
    assert eq["improvement"]["1.0"]["cory>ppo"] == {"p": 1.0, "ci": [1.0, 1.0], "n": [2, 2], "seeds": [0, 1]}
    # KL 2: ppo's seed 1 never gets there: cory's two seeds against ppo's one (0.3, 0.5 vs 0.2), both sets named
    at2 = eq["improvement"]["2.0"]["cory>ppo"]
    assert at2 == {"p": 1.0, "ci": None, "n": [2, 1], "seeds": [[0, 1], [0]], "why": "one seed"}
    result["improvement"], result["equal_kl"] = improvements(result), eq
    assert result["improvement"]["cory>ppo"]["p"] == 0.625  # final: 0.5 > 0.3, 0.5 < 0.9, 0.9 > 0.3, 0.9 = 0.9
    lines = improvement_table(result).splitlines()
    assert lines[0] == "| P(A > B) | final reward | reward at KL 1 | reward at KL 2 |"
    assert lines[2].startswith("| cory > ppo | 0.625 [")
    assert lines[2].endswith("| 1.000 [1.000, 1.000] | 1.000 [n/a: one seed] |")
    assert improvement_table({"arms": {"grpo": {}}, "improvement": {}}) is None


def test_combined_reward_over_training():
    curves = [[_point(0, 0.0, 0.0), _point(10, 0.5, 2.0)], [_point(0, 0.2, 0.0), _point(10, 0.3, 4.0)]]
    out = combined_rewards({"arms": {"a": {"seeds": [0, 1], "curves": curves}}}, etas=(0.1,))
    row = out["etas"]["0.1"]["a"]
    assert row["episodes"] == [0, 10]
    assert row["mean"] == pytest.approx([0.1, (0.3 + (-0.1)) / 2])  # r − 0.1·KL per seed, then the mean
    assert row["std"][1] == pytest.approx(0.2828, abs=1e-4)
    rising = [[_point(0, 0.1, 0.0), _point(10, 0.5, 1.0), _point(20, 0.6, 4.0)]] * 2  # r − 0.1·KL: .1, .4, .2
    result = {"arms": {"a": {"seeds": [0, 1], "curves": rising}}}
    result["combined_reward"] = combined_rewards(result, etas=(0.1,))
    lines = combined_table(result).splitlines()
    assert lines[0] == "| arm | η = 0.1: last · best (episodes) |"
    assert lines[2] == "| a | 0.200 ± 0.000 · 0.400 (10) |"
    assert combined_table({"arms": {}, "combined_reward": None}) is None


def test_the_tradeoff_figure_is_written(tmp_path):
    curves = [[_point(0, 0.1, 0.0), _point(96, 0.2, 1.0), _point(192, 0.4, 3.0)]] * 2
    result = {"rung": "imdb", "arms": {"ppo": {"seeds": [0, 1], "curves": curves},
                                       "cory": {"seeds": [0, 1], "curves": curves}}}
    path = plot_tradeoff(result, tmp_path / "t.png")
    assert path.stat().st_size > 10_000
    assert plot_tradeoff({"rung": "x", "arms": {"a": {"seeds": [0], "curves": [[[0, 0.1]]]}}}, tmp_path / "n.png") \
        is None



def test_the_tradeoff_figure_zooms_on_the_budgets_kl_range_and_draws_a_derived_arm_once(tmp_path):
    import matplotlib.image

    from benchmarks.ladder_summary import summarise

    cory = {**_long_run("cory", 0), "episodes": 400, "curve": _long_run("cory", 0)["curve"][:3]}  # KL <= 4
    result = summarise("imdb", [_long_run("ppo-2x", 0), cory], {}, ["--rung", "imdb"])
    assert set(result["arms"]) == {"ppo", "ppo-2x", "cory"} and result["arms"]["ppo"]["derived_from"] == ["ppo-2x"]
    wide = matplotlib.image.imread(plot_tradeoff(result, tmp_path / "z.png"))  # ppo-2x runs to KL 8 > 1.6 x 4
    del result["arms"]["ppo-2x"], result["arms"]["ppo"]["derived_from"]
    narrow = matplotlib.image.imread(plot_tradeoff(result, tmp_path / "n.png"))  # every arm at the budget
    assert wide.shape[1] > 1.3 * narrow.shape[1]  # three panels (full, zoom, combined) against two


def _long_run(arm: str, seed: int) -> dict:
    curve = [{**_point(e, 0.1 + e / 1000, e / 100, cpu=e / 10), "distinct_2": 0.9} for e in (0, 200, 400, 600, 800)]
    return {"arm": arm, "seed": seed, "final": curve[-1]["reward"], "before": 0.1, "episodes": 800, "cpu_s": 99.0,
            "train_cpu_s": 80.0, "curve": curve, "metric": "pioneer", "train_reward": list(range(50)),
            "final_eval": {"reward": curve[-1]["reward"], "kl_k1": 8.0}}


def test_a_2x_control_run_also_gives_its_base_arm_at_the_rung_budget():
    from benchmarks.ladder_run import eval_points
    from benchmarks.ladder_summary import summarise
    from benchmarks.rungs import RUNGS, arm_spec

    assert arm_spec("ppo-2x") == ("ppo", 2) and arm_spec("cory") == ("cory", 1)
    rung = RUNGS["imdb"]
    short, long = eval_points(rung, 25), eval_points(rung, 50, 2)
    assert set(short) <= set(long) and long[-1] == 50  # the base arm's points are the control's too
    result = summarise("imdb", [_long_run("ppo-2x", 0), _long_run("ppo-2x", 1)], {}, ["--rung", "imdb"])
    base, control = result["arms"]["ppo"], result["arms"]["ppo-2x"]
    assert rung.episodes == 400 and base["episodes"] == 400 and control["episodes"] == 800
    assert base["per_seed"] == pytest.approx([0.5, 0.5]) and control["per_seed"] == pytest.approx([0.9, 0.9])
    assert [point_record(p)["episodes"] for p in base["curves"][0]] == [0, 200, 400]
    assert base["kl_k1"] == pytest.approx(4.0) and base["distinct_2"] == pytest.approx(0.9)
    assert base["train_cpu_s"] == pytest.approx(40.0)
    assert base["derived_from"] == ["ppo-2x"] and "derived_from" not in control
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table(result).splitlines()[2:]}
    assert rows["ppo"][-2:] == ["—", "40 |"]  # no total CPU of its own; its training CPU s at 400 episodes
    assert rows["ppo-2x"][-2:] == ["99", "80 |"]
    assert all(r["arm"] == "ppo-2x" for r in result["runs"])  # the derived runs are not stored twice
    json.dumps(result)  # serialisable
    # a seed on which the base arm ran itself keeps its own run
    own = {**_long_run("ppo", 0), "episodes": 400, "final": 0.33}
    again = summarise("imdb", [_long_run("ppo-2x", 0), own], {}, ["--rung", "imdb"])
    assert again["arms"]["ppo"]["per_seed"] == [0.33]


def test_an_nx_arm_names_any_whole_factor_and_refuses_the_rest():
    from benchmarks.learning import main
    from benchmarks.rungs import arm_spec

    assert arm_spec("cory-4x") == ("cory", 4) and arm_spec("cory-wo-kt-12x") == ("cory-wo-kt", 12)
    assert arm_spec("cory-wo-kt") == ("cory-wo-kt", 1) and arm_spec("ppo-1x") == ("ppo", 1)
    assert arm_spec("cory-wo-rex") == ("cory-wo-rex", 1)  # a name ending in x is not a factor
    for bad in ("ppo-0x", "ppo-1.5x", "ppo-00x", "ppo-1e3x"):
        with pytest.raises(ValueError, match="whole number >= 1"):
            arm_spec(bad)
    with pytest.raises(SystemExit):  # the ladder's command line: one line, exit 2
        main(["--rung", "sanity", "--arms", "ppo-0x"])


def test_a_4x_arm_is_evaluated_at_its_base_arms_points_and_gives_the_base_and_no_duplicate():
    from benchmarks.ladder_run import eval_points
    from benchmarks.ladder_summary import summarise
    from benchmarks.rungs import RUNGS

    rung = RUNGS["imdb"]
    base, long = eval_points(rung, 25), eval_points(rung, 100, 4)
    assert set(base) <= set(long) and long[-1] == 100 and len(long) >= 12
    assert eval_points(rung, 50, 2) == sorted({round(50 * k / 16) for k in range(1, 17)})  # -2x as it always was
    four = {**_long_run("ppo-4x", 0), "episodes": 1600,
            "curve": [{**_point(e, 0.1 + e / 10000, e / 100, cpu=e / 10)} for e in (0, 200, 400, 800, 1600)]}
    result = summarise("imdb", [four, _long_run("ppo-2x", 0)], {}, ["--rung", "imdb"])
    assert result["arms"]["ppo"]["seeds"] == [0]  # derived once, from the shorter of the two longer runs
    assert result["arms"]["ppo"]["derived_from"] == ["ppo-2x"]
    alone = summarise("imdb", [four], {}, ["--rung", "imdb"])
    assert alone["arms"]["ppo"]["derived_from"] == ["ppo-4x"] and alone["arms"]["ppo"]["episodes"] == 400
