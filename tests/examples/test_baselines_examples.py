"""examples/sb3_baseline.py and examples/torchrl_marl.py run as subprocesses with their smallest flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}


def _run(script: str, *flags: str) -> tuple[str, dict]:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / script), *flags], capture_output=True,
                          text=True, env=ENV, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sb3_example_smallest_flags():
    pytest.importorskip("sb3_contrib")
    stdout, result = _run("sb3_baseline.py", "--episodes", "64", "--eval_episodes", "8", "--num_evals", "1",
                          "--num_envs", "2", "--n_steps", "16", "--batch_size", "16", "--n_epochs", "1")
    assert 0 < result["episodes"] <= 64 and 0.0 <= result["before"] <= 1.0 and 0.0 <= result["after"] <= 1.0
    assert "mean pioneer reward" in stdout and "before" in stdout


@pytest.mark.slow
def test_torchrl_example_smallest_flags():
    pytest.importorskip("torchrl")
    stdout, result = _run("torchrl_marl.py", "--episodes", "16", "--eval_episodes", "4", "--num_evals", "1",
                          "--episodes_per_update", "8", "--num_envs", "2", "--epochs", "1")
    assert result["episodes"] == 16 and 0.0 <= result["before"] <= 2.0 and 0.0 <= result["after"] <= 2.0
    assert "mean collective reward" in stdout and "before" in stdout
