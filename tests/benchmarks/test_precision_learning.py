"""fp32 vs bf16-mixed learning: runs labelled by their precision, refusals, P(bf16-mixed > fp32) per arm."""

from __future__ import annotations

import json

import pytest

from benchmarks import precision_learning as pl


def _point(episodes, reward, kl):
    return {"episodes": episodes, "reward": reward, "kl_k1": kl, "kl": kl, "distinct_1": 0.5, "distinct_2": 0.9,
            "response_len": 10.0}


def _run(arm, seed, final, flags=(), kl=3.0):
    curve = [_point(0, 0.1, 0.0), _point(400, final, kl)]
    return {"arm": arm, "seed": seed, "episodes": 400, "final": final, "before": 0.1, "cpu_s": 1.0, "curve": curve,
            "flags": list(flags), "metric": "pioneer", "final_eval": {"kl_k1": kl}}


def _file(tmp_path, name, runs, shared=()):
    path = tmp_path / name
    path.write_text(json.dumps({"rung": "imdb", "shared_flags": list(shared), "runs": runs}))
    return path


def test_runs_are_named_by_their_precision_and_other_arms_left_out(tmp_path):
    fp32 = _file(tmp_path, "a.json", [_run("grpo", 0, 0.5), _run("trl-grpo", 0, 0.4)])
    bf16 = _file(tmp_path, "b.json", [_run("grpo", 0, 0.6, flags=["--precision", "bf16-mixed"])])
    shared = _file(tmp_path, "c.json", [_run("cory-grpo", 1, 0.3)], shared=["--precision", "bf16-mixed"])
    runs = pl.labelled_runs([fp32, bf16, shared], ["grpo", "cory-grpo"])
    assert [(r["arm"], r["seed"]) for r in runs] == [("grpo [fp32]", 0), ("grpo [bf16-mixed]", 0),
                                                     ("cory-grpo [bf16-mixed]", 1)]


def test_a_machine_dependent_or_repeated_run_is_refused(tmp_path):
    auto = _file(tmp_path, "a.json", [_run("grpo", 0, 0.5, flags=["--precision", "auto"])])
    with pytest.raises(ValueError, match="--precision auto"):
        pl.labelled_runs([auto], ["grpo"])
    once = _file(tmp_path, "b.json", [_run("grpo", 0, 0.5)])
    with pytest.raises(ValueError, match=r"grpo \[fp32\] seed 0 is given twice"):
        pl.labelled_runs([once, once], ["grpo"])


def test_probability_that_bf16_learns_more_on_the_same_seeds(tmp_path):
    fp32 = [_run("grpo", s, r) for s, r in ((0, 0.40), (1, 0.50), (2, 0.60))]
    bf16 = [_run("grpo", s, r, flags=["--precision", "bf16-mixed"]) for s, r in ((0, 0.45), (1, 0.70), (2, 0.35))]
    out = tmp_path / "out.json"
    result = pl.main([str(_file(tmp_path, "a.json", fp32 + bf16)), "--arms", "grpo", "--out", str(out)])
    p = result["precision_improvement"]["grpo"]["end"]
    # P(X > Y) over all pairs: 0.45 beats 0.40; 0.70 beats all three; 0.35 beats none -> 4 of 9
    assert p["p"] == pytest.approx(4 / 9) and p["n"] == [3, 3]
    assert json.loads(out.read_text())["precision_improvement"]["grpo"]["end"]["p"] == pytest.approx(4 / 9)
    assert result["arms"]["grpo [bf16-mixed]"]["stats"]["final"]["iqm"] == pytest.approx(0.5)
    row = pl.improvement_table(result["precision_improvement"]).splitlines()[2]
    assert row.startswith("| grpo | 0.444 [")


def test_different_seed_sets_compare_as_independent_runs(tmp_path):
    runs = [_run("grpo", 0, 0.4), _run("grpo", 1, 0.5, flags=["--precision", "bf16-mixed"])]
    result = pl.main([str(_file(tmp_path, "a.json", runs)), "--arms", "grpo", "--out", str(tmp_path / "o.json")])
    end = result["precision_improvement"]["grpo"]["end"]
    assert end["p"] == 1.0 and end["seeds"] == [[1], [0]] and end["why"] == "one seed"  # 0.5 (seed 1) > 0.4 (seed 0)
    assert "| grpo | 1.000 [n/a: one seed] |" in pl.improvement_table(result["precision_improvement"])
