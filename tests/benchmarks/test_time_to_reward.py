"""Time-to-reward: the crossing read from a run's curve, the per-seed report and its refusals."""

from __future__ import annotations

import pytest

from benchmarks.time_to_reward import OURS, TRL, main, report, time_to_gain


def _run(arm, seed, rewards, cpu, before=0.1, episodes=48):
    curve = [{"episodes": i * 16, "reward": r, "train_cpu_s": c} for i, (r, c) in enumerate(zip(rewards, cpu))]
    return {"arm": arm, "seed": seed, "before": before, "final": rewards[-1], "episodes": episodes,
            "train_cpu_s": cpu[-1], "curve": curve}


def test_the_crossing_is_interpolated_in_cpu_seconds_and_episodes():
    # target 0.1 + 0.2 = 0.3: reached between (16 ep., 20 s, 0.2) and (32 ep., 40 s, 0.4), halfway
    got = time_to_gain(_run(OURS, 0, [0.1, 0.2, 0.4, 0.5], [0, 20, 40, 60]), 0.2)
    assert got == {"reached": True, "episodes": pytest.approx(24.0), "train_cpu_s": pytest.approx(30.0),
                   "target": pytest.approx(0.3)}


def test_a_run_that_never_reaches_the_gain_is_a_lower_bound():
    got = time_to_gain(_run(TRL, 0, [0.1, 0.15, 0.2, 0.25], [0, 20, 40, 60]), 0.2)
    assert got["reached"] is False and got["train_cpu_s"] == 60 and got["episodes"] == 48


def test_a_curve_without_cpu_seconds_is_refused():
    run = _run(OURS, 0, [0.1, 0.5], [0, 10])
    del run["curve"][1]["train_cpu_s"]
    with pytest.raises(ValueError, match="no train_cpu_s; rerun it"):
        time_to_gain(run, 0.2)


def test_report_gives_per_seed_ratios_and_the_ratio_of_iqms(imdb_csv):  # the IMDB rung's settings resolve its data file
    # each run reaches +0.2 (0.3) exactly at its last point: 0.1 -> 0.5 over 20 of its 40 s is at 20 s
    runs = [_run(OURS, 0, [0.1, 0.5], [0, 20]), _run(TRL, 0, [0.1, 0.5], [0, 40]),   # 10 s vs 20 s
            _run(OURS, 1, [0.1, 0.5], [0, 60]), _run(TRL, 1, [0.1, 0.5], [0, 80])]   # 30 s vs 40 s
    result = report(runs, 0.2)
    assert result["per_seed"][0]["ratio"] == pytest.approx(0.5) and result["per_seed"][1]["ratio"] == pytest.approx(0.75)
    # fewer than 4 seeds: the IQM is the mean (20 s vs 30 s)
    assert result["train_cpu_s"][OURS]["iqm"] == pytest.approx(20.0)
    assert result["ratio_of_iqms"] == pytest.approx(20.0 / 30.0)
    assert result["all_reached"] is True and result["seeds"] == [0, 1]
    # 16 episodes per iteration on the rung: 20 s over 48 episodes is 20/3 s per iteration
    assert result["per_seed"][0]["train_cpu_s_per_iteration"][OURS] == pytest.approx(20 / 3)


def test_report_refuses_a_seed_with_one_arm_only():
    with pytest.raises(ValueError, match=r"no run for \['trl-grpo seed 0'\]"):
        report([_run(OURS, 0, [0.1, 0.3], [0, 10])], 0.2)


def test_report_only_without_runs_names_the_seed(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--report_only", "--seeds", "7", "--runs_dir", str(tmp_path)])
    assert "no runs for seed 7" in capsys.readouterr().err


def test_the_bf16_report_pairs_ours_with_trl_in_its_default_precision(imdb_csv):  # the IMDB rung's settings resolve its data file
    """`--precision bf16` compares against `trl-grpo-default`: an fp32 TRL run beside it is not its partner."""
    runs = [_run(OURS, 0, [0.1, 0.5], [0, 20]), _run("trl-grpo-default", 0, [0.1, 0.5], [0, 80]),
            _run(TRL, 0, [0.1, 0.5], [0, 40])]
    result = report(runs, 0.2, trl_arm="trl-grpo-default")
    assert result["per_seed"][0]["ratio"] == pytest.approx(0.25) and result["trl_arm"] == "trl-grpo-default"
    with pytest.raises(ValueError, match=r"no run for \['trl-grpo-default seed 0'\]"):
        report(runs[:1] + runs[2:], 0.2, trl_arm="trl-grpo-default")


def test_the_bf16_precision_runs_our_arm_in_bf16_mixed_beside_trl_default(tmp_path, monkeypatch):
    """The side-by-side command of `--precision bf16`: our arm gets ``--precision bf16-mixed``, TRL its own arm."""
    import benchmarks.time_to_reward as ttr

    calls = []
    monkeypatch.setattr(ttr.subprocess, "run", lambda cmd, check: calls.append(cmd))
    ttr.run_seed(3, tmp_path / "seed_3.json", ttr.PRECISIONS["bf16"])
    cmd = calls[0]
    assert cmd[cmd.index("--arms") + 1:cmd.index("--arms") + 3] == [OURS, "trl-grpo-default"]
    assert cmd[cmd.index("--flags"):] == ["--flags", "--precision", "bf16-mixed"]
    ttr.run_seed(3, tmp_path / "seed_3.json")
    assert "--flags" not in calls[1] and TRL in calls[1]


def test_the_bf16_table_names_each_side_s_precision(imdb_csv):  # the IMDB rung's settings resolve its data file
    from benchmarks.time_to_reward import table

    runs = [_run(OURS, 0, [0.1, 0.5], [0, 20]), _run("trl-grpo-default", 0, [0.1, 0.5], [0, 40])]
    result = {**report(runs, 0.2, trl_arm="trl-grpo-default"), "precision": "bf16"}
    assert table(result).splitlines()[0] == ("| seed | ours (`grpo`, bf16-mixed) to +0.2 | TRL `GRPOTrainer` "
                                             "(its default, bf16) to +0.2 | ours ÷ TRL |")
    assert table({**result, "precision": "fp32"}).splitlines()[0].startswith("| seed | ours (`grpo`) to +0.2 | TRL")
