"""The ladder's export in marl-eval's raw-data JSON format (`benchmarks/marl_eval_json.py`): written, read back,
nested environment -> task -> algorithm -> run -> step -> metrics, with the ladder's values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


def _run(arm: str, seed: int, rewards: list[float]) -> dict:
    curve = [{"episodes": 200 * i, "reward": r, "kl_k1": 2.0 * i, "train_cpu_s": 10.0 * i}
             for i, r in enumerate(rewards)]
    return {"arm": arm, "seed": seed, "final": rewards[-1], "before": rewards[0], "episodes": 400, "cpu_s": 30.0,
            "train_cpu_s": 20.0, "curve": curve, "metric": "pioneer"}


def test_export_writes_marl_evals_nesting_and_reads_back(tmp_path):
    from benchmarks.ladder_summary import summarise
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
    assert run["absolute_metrics"] == {"return": [0.44], "kl_k1": [4.0]}  # the metrics every step holds
    assert algorithms["ppo"]["seed_1"]["absolute_metrics"] == {"return": [0.58], "kl_k1": [4.0]}
    for r in (r for alg in algorithms.values() for r in alg.values()):  # marl-eval: lists of per-episode values
        assert all(len(v) == 1 for step in r.values() for k, v in step.items() if k != "step_count")


def test_export_chooses_arms_and_names_and_refuses_unknown_arms(tmp_path):
    from benchmarks.ladder_summary import summarise
    from benchmarks.learning import main
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


def _points(arm: str, seed: int, rewards: list[float], step: int = 200) -> dict:
    """A run whose points record every field of a pioneer-alone rung (KL, distinct-n, response length)."""
    run = _run(arm, seed, rewards)
    run["curve"] = [{"episodes": step * i, "reward": r, "kl": 1.5 * i, "kl_k1": 2.0 * i, "distinct_1": 0.6,
                     "distinct_2": 0.9 - 0.01 * i, "response_len": 10.0 + i, "train_cpu_s": 10.0 * i}
                    for i, r in enumerate(rewards)]
    run["episodes"] = step * (len(rewards) - 1)
    return run


def _two_arms() -> dict:
    from benchmarks.ladder_summary import summarise

    return summarise("imdb", [_points("cory", 0, [0.15, 0.3, 0.44]), _points("cory", 1, [0.12, 0.2, 0.31]),
                              _points("ppo", 0, [0.15, 0.5, 0.6]), _points("ppo", 1, [0.12, 0.4, 0.58])], {}, [])


def test_every_entry_of_a_run_holds_the_same_metrics():
    """marl-eval's `DiagnoseData.check_metric` wants the same metrics in every step and in ``absolute_metrics``."""
    from benchmarks.marl_eval_json import to_marl_eval

    algorithms = to_marl_eval(_two_arms())["cory_imdb"]["imdb"]
    for arm, runs in algorithms.items():
        for seed, run in runs.items():
            metrics = {name: sorted(set(entry) - {"step_count"}) for name, entry in run.items()}
            assert len({tuple(m) for m in metrics.values()}) == 1, (arm, seed, metrics)
            assert metrics["absolute_metrics"] == ["distinct_1", "distinct_2", "kl", "kl_k1", "response_len",
                                                   "return"]
    assert algorithms["ppo"]["seed_1"]["absolute_metrics"]["kl_k1"] == [4.0]  # the last point's


def test_marl_evals_own_checks_accept_the_export_for_every_metric():
    """Read by marl-eval itself (``pip install --no-deps id-marl-eval==0.0.4``: its pandas pin does not build on
    Python 3.11; the checks need numpy and colorama): `DiagnoseData`, `data_process_pipeline` and
    `create_matrices_for_rliable`, as its own quickstart runs them."""
    pytest.importorskip("colorama")
    pytest.importorskip("marl_eval")
    import copy

    from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
    from marl_eval.utils.diagnose_data_errors import DiagnoseData

    from benchmarks.marl_eval_json import to_marl_eval

    raw = to_marl_eval(_two_arms())
    checks = DiagnoseData(copy.deepcopy(raw)).check_data()["cory_imdb"]
    assert checks == {"valid_algorithms": True, "valid_algorithm_names": True, "valid_runs": True,
                      "valid_steps": True, "valid_metrics": True}
    processed = data_process_pipeline(copy.deepcopy(raw), metrics_to_normalize=["return"])
    assert "extra" in processed, "data_process_pipeline fell back to the raw data (it prints why)"
    matrices, curves = create_matrices_for_rliable(processed, "cory_imdb", ["return"])
    assert set(matrices) == {"mean_norm_return", "mean_kl", "mean_kl_k1", "mean_distinct_1", "mean_distinct_2",
                             "mean_response_len"}
    assert matrices["mean_kl_k1"]["cory"].tolist() == [[4.0], [4.0]]  # (runs, tasks): each seed's final KL
    assert curves["mean_kl_k1"]["ppo"].shape == (2, 1, 3)  # (runs, tasks, evaluation points)


def test_arms_on_other_seeds_or_budgets_are_refused_with_the_reason(tmp_path):
    from benchmarks.ladder_summary import summarise
    from benchmarks.learning import main
    from benchmarks.marl_eval_json import check_exportable, to_marl_eval

    result = summarise("imdb", [_points("cory", 0, [0.1, 0.4, 0.5]), _points("cory", 1, [0.1, 0.3, 0.4]),
                                _points("ppo", 0, [0.1, 0.5, 0.6]),
                                _points("ppo-2x", 0, [0.1, 0.5, 0.6, 0.7, 0.8]),
                                _points("ppo-2x", 1, [0.1, 0.4, 0.5, 0.6, 0.6])], {}, [])
    # ppo: seed 0 run; seed 1 read from ppo-2x's first half (the same evaluation points as cory)
    assert result["arms"]["ppo"]["seeds"] == [0, 1]
    with pytest.raises(ValueError, match=r"same runs \(seed_<s>\) at the same evaluation points.*cory, ppo: seeds "
                                         r"\[0, 1\], 3 evaluations to 400 episodes; ppo-2x: seeds \[0, 1\], 5 "
                                         r"evaluations to 800 episodes; export the arms of one group"):
        to_marl_eval(result)
    other_seeds = summarise("imdb", [_points("cory", 0, [0.1, 0.4]), _points("cory", 1, [0.1, 0.3]),
                                     _points("grpo", 2, [0.1, 0.5])], {}, [])
    with pytest.raises(ValueError, match=r"cory: seeds \[0, 1\], .*; grpo: seeds \[2\]"):
        check_exportable(other_seeds, ["cory", "grpo"])
    with pytest.raises(ValueError, match="hold a comma"):
        check_exportable({"arms": {"a,b": result["arms"]["cory"]}}, ["a,b"])
    assert list(to_marl_eval(result, arms=["cory", "ppo"])["cory_imdb"]["imdb"]) == ["cory", "ppo"]
    part = tmp_path / "part.json"
    part.write_text(json.dumps(result), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--marl_eval: .*ppo-2x: seeds .*--marl_eval_arms"):
        main(["--rung", "imdb", "--merge", str(part), "--out", str(tmp_path / "m.json"),
              "--marl_eval", str(tmp_path / "me.json")])
    assert not (tmp_path / "me.json").exists()
    main(["--rung", "imdb", "--merge", str(part), "--out", str(tmp_path / "m2.json"),
          "--marl_eval", str(tmp_path / "me.json"), "--marl_eval_arms", "ppo-2x"])
    assert list(json.loads((tmp_path / "me.json").read_text())["cory_imdb"]["imdb"]) == ["ppo-2x"]


def _expanded(tokens: list[str]) -> list[str]:
    """Shell brace expansion of ``a-s{0,1}.json`` tokens."""
    out = []
    for token in tokens:
        m = re.search(r"\{([^{}]+)\}", token)
        out += [token[:m.start()] + part + token[m.end():] for part in m.group(1).split(",")] if m else [token]
    return out


def test_the_docstring_merge_command_exports_what_marl_eval_accepts(tmp_path, monkeypatch):
    """`benchmarks/learning.py`'s own example of ``--merge`` with ``--marl_eval``, on the committed IMDB runs."""
    from benchmarks import learning

    command = re.search(r"(python benchmarks/learning.py --rung imdb --merge .*?)\n\n", learning.__doc__, re.S)
    argv = _expanded(command.group(1).replace("\\\n", " ").split()[2:])
    argv = [a.replace("/tmp/", f"{tmp_path}/") for a in argv]
    monkeypatch.chdir(learning.ROOT)  # the example's paths are relative to the repository
    learning.main(argv)
    raw = json.loads((tmp_path / "imdb_marl_eval.json").read_text(encoding="utf-8"))
    algorithms = raw["cory_imdb"]["imdb"]
    assert list(algorithms) == ["cory", "ppo"] and list(algorithms["ppo"]) == ["seed_0", "seed_1", "seed_2"]
    try:
        from marl_eval.utils.diagnose_data_errors import DiagnoseData
    except ImportError:
        return
    assert all(DiagnoseData(raw).check_data()["cory_imdb"].values())


def test_the_command_line_exports_a_written_ladder_json(tmp_path, capsys):
    from benchmarks.marl_eval_json import main

    ladder = str(Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "learning_imdb.json")
    with pytest.raises(SystemExit):
        main([ladder, "--out", str(tmp_path / "all.json")])
    assert "cory, ppo: seeds [0, 1, 2, 3, 4]" in capsys.readouterr().err and not (tmp_path / "all.json").exists()
    main([ladder, "--arms", "cory", "ppo", "--out", str(tmp_path / "two.json")])
    runs = json.loads((tmp_path / "two.json").read_text())["cory_imdb"]["imdb"]["ppo"]
    assert list(runs) == [f"seed_{s}" for s in range(5)] and len(runs["seed_0"]) == 10  # 9 points + absolute
