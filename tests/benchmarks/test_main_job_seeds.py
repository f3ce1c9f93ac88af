"""benchmarks/main_job_seeds.py reads each run's eval.json into the seed table: the clustered and the unclustered
standard error, the distinct queries and the combined reward (tiny model, two iterations)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("main_job_seeds", REPO / "benchmarks" / "main_job_seeds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def length_reward(queries, responses):
    """A reward that varies from episode to episode with the tiny model: the response's length in characters."""
    return [float(len(r)) for r in responses]


def test_the_seed_table_records_the_clustered_error_and_the_combined_reward(tmp_path):
    from trainers.evaluation.episodes import clustered_sem

    out = tmp_path / "seeds.json"
    keep = tmp_path / "runs"
    result = _module().main(["--seeds", "3", "--out", str(out), "--keep", str(keep), "--",
                             "--model", "tiny", "--num_iterations", "2", "--learning_rate", "0.05", "--batch_size", "4", "--group_size", "2",
                             "--mini_batch_size", "2", "--eval_episodes", "24", "--torch_threads", "1",
                             "--reward", "tests.benchmarks.test_main_job_seeds:length_reward"])
    assert json.loads(out.read_text()) == result and "--model tiny" in result["command"]
    row, = result["runs"]
    ran = json.loads((keep / "seed3" / "eval.json").read_text())
    diffs = np.subtract(ran["after"]["rewards"], ran["before"]["rewards"])
    assert row["seed"] == 3 and row["gain"] == pytest.approx(diffs.mean())
    assert row["se"] == pytest.approx(clustered_sem(list(diffs), ran["after"]["query_keys"]))
    assert row["se"] > 0 and row["se"] != pytest.approx(row["se_unclustered"])
    assert row["se_unclustered"] == pytest.approx(diffs.std(ddof=1) / np.sqrt(24))
    assert row["distinct_queries"] == len(set(ran["after"]["query_keys"])) < 24  # episodes share queries
    assert (row["combined_before"], row["combined_after"]) == (ran["before"]["combined_reward"],
                                                               ran["after"]["combined_reward"])


def test_an_interrupted_table_keeps_the_seeds_that_finished(tmp_path):
    module = _module()
    one = json.loads(json.dumps({"gain": 0.3, "gain_sem": 0.1, "distinct_queries": 2, "combined_before": 0.0,
                                 "combined_after": 0.2,
                                 "before": {"reward": 0.1, "rewards": [0.0, 0.2], "distinct_2": 0.9},
                                 "after": {"reward": 0.4, "rewards": [0.2, 0.6], "kl": 2.0, "distinct_2": 0.8,
                                           "num_queries": 2}}))

    def fake_run(seed, flags, folder):
        if seed == 7:
            raise KeyboardInterrupt
        return module.seed_record(seed, one, cpu_s=1.0, wall_s=1.0)

    module.run_seed = fake_run
    out = tmp_path / "seeds.json"
    with pytest.raises(KeyboardInterrupt):
        module.main(["--seeds", "5", "7", "--out", str(out)])
    kept = json.loads(out.read_text())
    assert [r["seed"] for r in kept["runs"]] == [5] and kept["every_seed_gain_at_least_2_se"] is True
    assert kept["runs"][0]["se_unclustered"] == pytest.approx(np.std([0.2, 0.4], ddof=1) / np.sqrt(2))
