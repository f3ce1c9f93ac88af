"""examples/tianshou_marl.py runs as a subprocess with its smallest flags and reports returns per epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("tianshou")


@pytest.mark.slow
@pytest.mark.parametrize(("task", "optimum"), [("tiny_vocab", 2.0), ("chain_relay", 3.0)])
def test_tianshou_example_smallest_flags(task, optimum):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "tianshou_marl.py"), "--epochs", "1", "--episodes",
         "25", "--episodes_per_update", "8", "--test_episodes", "8", "--num_envs", "2", "--task", task],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["returns"]) == 2 and 0.0 <= result["first"] <= optimum and 0.0 <= result["last"] <= optimum
    assert "epoch 1: mean collective reward" in proc.stdout
