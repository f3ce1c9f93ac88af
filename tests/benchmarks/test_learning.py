"""The learning ladder's CI guard: training must make the held-out reward go up (`benchmarks/learning.py`).

Runs the real command on small budgets: the sanity rung (a one-token bandit through env → agent → PPO learner)
and a short tiny_vocab CORY run. A learner that stops learning (a sign error in the advantages, a detached
log-probability, rollouts scored under another distribution than they were sampled from) fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "benchmarks" / "learning.py"
TINY_VOCAB_RANDOM = 0.42  # collective reward of a uniformly random policy (cory_env.tasks.tiny_vocab)


def _ladder(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "ladder.json"
    subprocess.run([sys.executable, str(LADDER), *args, "--seeds", "0", "--out", str(out)], check=True,
                   cwd=ROOT, capture_output=True, text=True, timeout=300)
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_sanity_rung_learns_the_bandit(tmp_path):
    result = _ladder(tmp_path, "--rung", "sanity")
    ppo = result["arms"]["ppo"]
    assert ppo["before"] < 0.4  # random: 3 of 17 allowed tokens
    assert ppo["per_seed"][0] >= 0.9, ppo
    assert result["floors"]["ppo"]["met_on_every_seed"]
    assert ppo["cpu_s"] <= 60
    assert (tmp_path / "ladder.png").exists()


@pytest.mark.slow
def test_short_tiny_vocab_cory_run_beats_random(tmp_path):
    result = _ladder(tmp_path, "--rung", "tiny_vocab", "--arms", "cory", "--episodes", "6144")
    cory = result["arms"]["cory"]
    assert cory["metric"] == "collective" and cory["episodes"] == 6144
    assert cory["per_seed"][0] > TINY_VOCAB_RANDOM + 0.2, cory
    assert cory["per_seed"][0] > cory["before"] + 0.2, cory
