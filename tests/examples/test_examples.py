"""Each example runs as a subprocess with its smallest flags (CleanRL style), and the main job smoke test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IMDB_CSV, REPO_ROOT

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run(args, cwd=REPO_ROOT, timeout=600):
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=timeout)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.parametrize("script", ["imdb_cory.py", "imdb_ppo.py"])
def test_imdb_examples_tiny(script, tmp_path):
    proc = run([str(REPO_ROOT / "examples" / script), "--model", "tiny", "--num_iterations", "2",
                "--batch_size", "2", "--torch_threads", "1", "--output_dir", str(tmp_path / "run")])
    assert proc.stdout.count("iter ") == 2
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2
    has_observer = any(k.startswith("observer/") for k in json.loads(rows[0]))
    assert has_observer == (script == "imdb_cory.py")


@pytest.mark.slow
@pytest.mark.real_model
def test_main_job_imdb_quick_real_smollm2(tmp_path):
    """The README's main job, one short iteration of real SmolLM2 on the real IMDB file."""
    if not IMDB_CSV.exists():
        pytest.skip(f"{IMDB_CSV} not found")
    out = tmp_path / "quick"
    proc = run(["-m", "trainers.cli", "train", "--preset", "imdb-quick", "--data_path", str(IMDB_CSV),
                "--num_iterations", "1", "--batch_size", "4", "--mini_batch_size", "4", "--ppo_epochs", "1",
                "--min_new_tokens", "4", "--max_new_tokens", "6", "--eval_episodes", "4",
                "--output_dir", str(out), "--tensorboard", "false"], timeout=900)
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert abs(row["pioneer/kl"]) < 1e-3 and abs(row["observer/kl"]) < 1e-3  # nothing updated before the rollout
    assert -2.0 <= row["cory/collective_reward"] <= 2.0  # VADER: each seat in [-1, 1]
    sample = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert sample["query"] and "observer_response" in sample
    assert "imdb_reviews_1000.csv" in proc.stderr  # the log names the data source
    assert (out / "checkpoints" / "latest").exists()
    # it ends with the pioneer's held-out reward before and after training (README: the main job learns)
    assert "in the pioneer seat, held-out task reward on 4 episodes of" in proc.stdout
    result = json.loads((out / "eval.json").read_text())
    assert result["before"]["query_split"] == "test" and -1.0 <= result["after"]["reward"] <= 1.0
