"""The ladder's export in marl-eval's raw-data JSON format (`benchmarks/marl_eval_json.py`): written, read back,
nested environment -> task -> algorithm -> run -> step -> metrics, with the ladder's values."""

from __future__ import annotations

import json

import pytest


def _run(arm: str, seed: int, rewards: list[float]) -> dict:
    curve = [{"episodes": 200 * i, "reward": r, "kl_k1": 2.0 * i, "train_cpu_s": 10.0 * i}
             for i, r in enumerate(rewards)]
    return {"arm": arm, "seed": seed, "final": rewards[-1], "before": rewards[0], "episodes": 400, "cpu_s": 30.0,
            "train_cpu_s": 20.0, "curve": curve, "metric": "pioneer"}


def test_export_writes_marl_evals_nesting_and_reads_back(tmp_path):
    from benchmarks.learning import summarise
    from benchmarks.marl_eval_json import export_marl_eval

    runs = [_run("cory", 0, [0.15, 0.3, 0.44]), _run("cory", 1, [0.12, 0.2, 0.31]), _run("ppo", 0, [0.15, 0.5, 0.6]),
            _run("ppo", 1, [0.12, 0.4, 0.58])]
    result = summarise("imdb", runs, {}, ["--rung", "imdb"])
    path = export_marl_eval(result, tmp_path / "deep" / "marl_eval.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == ["cory_imdb"] and list(data["cory_imdb"]) == ["imdb"]
    algorithms = data["cory_imdb"]["imdb"]
    assert list(algorithms) == ["cory", "ppo"] and list(algorithms["cory"]) == ["seed_0", "seed_1"]
    run = algorithms["cory"]["seed_0"]
    assert list(run) == ["step_0", "step_1", "step_2", "absolute_metrics"]  # marl-eval reads the last entry as absolute
    assert run["step_1"] == {"step_count": 200, "return": [0.3], "kl_k1": [2.0]}
    assert run["step_0"]["step_count"] == 0 and run["step_2"]["return"] == [0.44]
    assert run["absolute_metrics"] == {"return": [0.44]}
    assert algorithms["ppo"]["seed_1"]["absolute_metrics"] == {"return": [0.58]}
    for r in (r for alg in algorithms.values() for r in alg.values()):  # marl-eval: lists of per-episode values
        assert all(len(v) == 1 for step in r.values() for k, v in step.items() if k != "step_count")


def test_export_chooses_arms_and_names_and_refuses_unknown_arms(tmp_path):
    from benchmarks.learning import main, summarise
    from benchmarks.marl_eval_json import export_marl_eval, to_marl_eval

    result = summarise("imdb", [_run("cory", 0, [0.1, 0.4]), _run("ppo", 0, [0.1, 0.6])], {}, [])
    only = to_marl_eval(result, arms=["ppo"], environment="cory_env", task="imdb_sentiment")
    assert list(only["cory_env"]["imdb_sentiment"]) == ["ppo"]
    with pytest.raises(ValueError, match=r"arms \['grpo'\] are not in the result"):
        to_marl_eval(result, arms=["grpo"])
    part = tmp_path / "part.json"  # the command line: --marl_eval with --merge
    part.write_text(json.dumps(result), encoding="utf-8")
    main(["--rung", "imdb", "--merge", str(part), "--out", str(tmp_path / "m.json"),
          "--marl_eval", str(tmp_path / "me.json")])
    assert json.loads((tmp_path / "me.json").read_text()) == json.loads(
        export_marl_eval(result, tmp_path / "direct.json").read_text())
