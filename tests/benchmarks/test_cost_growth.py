"""How cost grows with the work: the points each factor moves, the least-squares fits and flags, and a tiny run of the
whole benchmark (fresh processes, JSON and figure)."""

from __future__ import annotations

import json

import pytest

from benchmarks import cost_growth as cg
from benchmarks.paths import DATA_ENV


def _point(factor, value, tokens, cpu_s, rss_gib=1.0):
    return {"settings": {**cg.BASE, factor: value}, "tokens": tokens, "cpu_s": cpu_s, "peak_rss_gib": rss_gib}


def test_each_factor_moves_alone_from_the_base_point_and_the_base_point_is_shared():
    for factor, spec in cg.FACTORS.items():
        points = cg.factor_points(factor)
        assert [p.get(factor, spec.base) for p in points] == list(spec.values)
        assert all({k: v for k, v in p.items() if k != factor} == {k: v for k, v in cg.BASE.items() if k != factor}
                   for p in points)
        assert cg.BASE in points  # measured once for every factor
    assert cg.point_flags({"seats": 4, "new_tokens": 32, "batch": 64}, "tiny") == (
        "--seating", "chain:4", "--min_new_tokens", "32", "--max_new_tokens", "32", "--batch_size", "64",
        "--context_len", str(cg.CONTEXT_LEN), "--model", "tiny")
    base = cg.point_flags(cg.BASE)
    assert cg.point_flags({**cg.BASE, "models": 4}) == (*base, "--population", "4", "--matchmaking", "uniform")
    assert cg.point_flags({**cg.BASE, "bases": 2}) == (*base, "--models", "llm2.disable_dropout=false",
                                                         "llm2.value_head_dropout=0")
    assert cg.point_flags({**cg.BASE, "bases": 2}, second_model="gpt2") == (*base, "--models", "llm2=gpt2")


def test_linear_cost_fits_its_slope_and_is_not_flagged():
    # 2 ms per token plus 1 s per iteration; RSS 1 GiB + 64 MiB per row
    points = [_point("batch", b, 100 * b, 1.0 + 0.002 * 100 * b, 1.0 + b / 16) for b in (64, 8, 16, 32)]
    report = cg.factor_report("batch", points)
    assert [p["value"] for p in report["points"]] == [8, 16, 32, 64]  # smallest first
    assert report["fit"]["cpu_s_per_token"] == pytest.approx(0.002)
    assert report["fit"]["cpu_s_at_zero_tokens"] == pytest.approx(1.0)
    assert report["fit"]["peak_rss_mib_per_unit"] == pytest.approx(64.0)
    # per token: (1 + 12.8) / 6400 at 64 rows over (1 + 1.6) / 800 at 8: the fixed second weighs less
    assert report["per_token_ratio"] == pytest.approx((13.8 / 6400) / (2.6 / 800)) and report["grows"] is False


def test_a_factor_whose_cost_per_token_grows_past_the_threshold_is_flagged():
    # quadratic in the tokens: per-token cost doubles with the tokens
    points = [_point("new_tokens", t, 100 * t, 1e-4 * (100 * t) ** 2) for t in (8, 16)]
    report = cg.factor_report("new_tokens", points)
    assert report["per_token_ratio"] == pytest.approx(2.0) and report["grows"] is True
    just_below = [_point("new_tokens", t, 100 * t, 1e-4 * 100 * t * (1.0 if t == 8 else 1.29)) for t in (8, 16)]
    assert cg.factor_report("new_tokens", just_below)["grows"] is False  # 1.29 times: within the threshold


def test_a_factor_that_leaves_the_tokens_is_fitted_per_unit_only():
    # 3 models on one base: the same tokens, +0.5 CPU s and +16 MiB per extra model
    points = [{"settings": {**cg.BASE, "models": n} if n != 2 else dict(cg.BASE), "tokens": 800, "cpu_s": 10 + 0.5 * n,
               "peak_rss_gib": 1.0 + n / 64} for n in (4, 2, 3)]
    report = cg.factor_report("models", points)
    assert [p["value"] for p in report["points"]] == [2, 3, 4]  # the base point reads as 2 models
    assert report["fit"]["cpu_s_per_token"] is None and report["fit"]["cpu_s_per_unit"] == pytest.approx(0.5)
    assert report["fit"]["peak_rss_mib_per_unit"] == pytest.approx(16.0)
    assert report["per_token_ratio"] == pytest.approx(12 / 11) and not report["grows"]
    assert "| models | n/a | +0.50 per model | 16.0 per model | 1.09 |" in cg.table({"models": report})


def test_a_fit_needs_two_distinct_points():
    with pytest.raises(ValueError, match="two distinct x values"):
        cg.ols([3.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("argv, message", [
    (["--points", "1"], "--points must be >= 2"),
    (["--iterations", "0"], "--iterations must be >= 1"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--factors", "layers"], "invalid choice: 'layers'"),
])
def test_bad_options_are_refused_before_any_point_runs(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        cg.main([*argv, "--out", str(tmp_path / "cost.json")])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_point_whose_process_fails_stops_the_run_with_its_log_and_writes_nothing(tmp_path, monkeypatch):
    def failing(cmd, log_file):
        log_file.write_text("Traceback ...\nValueError: boom in the point\n")
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code 1; see {log_file}")

    monkeypatch.setattr(cg, "peak_rss_gib", failing)
    with pytest.raises(SystemExit, match=r"(?s)a point failed: .*--point .*exit code 1.*boom in the point"):
        cg.main(["--factors", "seats", "--points", "2", "--out", str(tmp_path / "cost.json")])
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_tiny_run_measures_every_factor_in_fresh_processes(tmp_path, monkeypatch):
    """The tiny model on the IMDB rung's settings (a small CSV of reviews), 2 points per factor, 1 measured
    iteration: processed tokens grow with every factor that moves them and stay with those that do not (a third model
    of a population, a second base); the fits' slopes are positive."""
    data = tmp_path / "data"
    data.mkdir()
    reviews = [f"review {i}: the film was {'good' if i % 2 else 'dull'} and the cast {'shone' if i % 3 else 'froze'}. "
               * 6 for i in range(60)]  # the task keeps reviews of 200 characters or more
    (data / "imdb_reviews_1000.csv").write_text("review,sentiment\n" + "".join(f"{r},x\n" for r in reviews),
                                                encoding="utf-8")
    monkeypatch.setenv(DATA_ENV, str(data))
    out = tmp_path / "cost.json"
    report = cg.main(["--model", "tiny", "--points", "2", "--iterations", "1", "--jobs", "2", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert out.with_suffix(".png").stat().st_size > 0
    assert report["command"].endswith("--out <outside>/cost.json") and report["model"] == "tiny"
    assert set(report["factors"]) == set(cg.FACTORS)
    for name, factor in report["factors"].items():
        points = factor["points"]
        assert [p["value"] for p in points] == list(cg.FACTORS[name].values[:2])
        if cg.FACTORS[name].moves_tokens:
            assert points[1]["tokens"] > points[0]["tokens"], name  # chain:2 > chain:1, 16 > 8 new tokens and rows
            assert factor["fit"]["cpu_s_per_token"] > 0, name
        else:  # two seats play either way; a model that does not play costs memory, not work
            assert points[1]["tokens"] == pytest.approx(points[0]["tokens"], rel=0.2), name
            assert factor["fit"]["cpu_s_per_token"] is None, name
        for p in points:
            assert len(p["per_iteration"]) == 1 and p["peak_rss_gib"] > 0.1  # a process with torch loaded
            assert sum(p["phases"].values()) == pytest.approx(p["cpu_s"])
            assert p["phases"]["rollout (generation)"] > 0 and p["phases"]["backward"] > 0
        assert factor["grows"] == (factor["per_token_ratio"] > cg.GROWTH_FLAG)
    # the base point was measured once and shared: the same numbers under every factor
    base = [p for f in report["factors"].values() for p in f["points"] if p["settings"] == cg.BASE]
    assert len(base) == len(cg.FACTORS) and len({p["cpu_s"] for p in base}) == 1
    # seats: one per-seat prompt + response (13 tokens a row at 8 new tokens), so 16 rows make more than 16 · 8
    seats = report["factors"]["seats"]["points"]
    assert seats[0]["tokens"] > 16 * 8 and seats[1]["tokens"] > 2 * seats[0]["tokens"]  # the observer reads the pioneer
    new = report["factors"]["new_tokens"]["points"]
    assert new[1]["tokens"] - new[0]["tokens"] >= 2 * 16 * 8  # 8 more tokens in each of 2 seats' 16 responses
    assert report["flagged"] == [f for f, v in report["factors"].items() if v["grows"]]
