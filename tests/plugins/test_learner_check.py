"""A plug-in learner's author sees it learn quickly: the ``learner-check`` preset (the first-symbol bandit, no option
of a particular learner) and the learning ladder with the plug-in as an arm (``learner=module:attr``) beside the
project's arms, on the same seeds and statistics. The plug-in is the guide's own REINFORCE (docs/extending.md)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def guide_learner_module(folder) -> str:
    """Write the guide's REINFORCE block as ``guide_reinforce.py`` in `folder`; its ``module:attr``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "docs" / "extending.md").read_text(encoding="utf-8"),
                        flags=re.S)
    block = next(b for b in blocks if "REINFORCE = LearnerSpec(" in b)
    (folder / "guide_reinforce.py").write_text(block, encoding="utf-8")
    return "guide_reinforce:REINFORCE"


def test_the_learner_check_preset_shows_a_plugin_learning_and_warns_of_nothing(registries, tmp_path, monkeypatch,
                                                                               caplog, capsys):
    """Before: on --preset tiny a new learner showed reward, KL and loss 0.000 and gain +0.000 ± 0.000, and the
    preset's options printed "does nothing" warnings for any plug-in."""
    from trainers.cli import main as cory_main

    monkeypatch.syspath_prepend(str(tmp_path))
    learner = guide_learner_module(tmp_path)
    with caplog.at_level(logging.WARNING):
        status = cory_main(["train", "--preset", "learner-check", "--learner", learner, "--output_dir",
                            str(tmp_path / "run")])
    assert status == 0
    assert not [r.getMessage() for r in caplog.records if "does nothing" in r.getMessage()]
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert result["before"]["reward"] < 0.4 and result["after"]["reward"] > result["before"]["reward"] + 0.3, result


@pytest.mark.slow
def test_a_plugin_learner_is_an_arm_of_the_ladder(tmp_path):
    """Before: the ladder took only this project's arm names."""
    learner = guide_learner_module(tmp_path)
    out = tmp_path / "ladder.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "learning.py"), "--rung", "sanity",
                           "--arms", "ppo", f"learner={learner}", "--seeds", "0", "1", "--episodes", "640",
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    arms = json.loads(out.read_text())["arms"]
    plugin = arms[f"learner={learner}"]
    assert set(arms) == {"ppo", f"learner={learner}"}
    assert len(plugin["per_seed"]) == len(arms["ppo"]["per_seed"]) == 2
    assert plugin["per_seed"] and all(r > plugin["before"] for r in plugin["per_seed"])
