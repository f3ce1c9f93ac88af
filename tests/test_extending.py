"""docs/extending.md runs as written: a task with its own option and reward, a reward, a learner with its own
options, trained together through the registries (then the joint learner block), in one namespace, in order."""

from __future__ import annotations

import logging
import re

from tests.conftest import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "extending.md"


def test_the_guide_runs_and_trains_its_plugins(registries, tmp_path, caplog):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    namespace: dict = {"workdir": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="trainers.loop.cory"):
        for block in blocks:
            exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - our own documentation
    learners, tasks, rewards = registries
    assert {"keyword"} <= set(tasks.names()) and "length" in rewards.names()
    assert {"reinforce", "team-reinforce"} <= set(learners.names())
    history = namespace["history"]
    assert [row["iteration"] for row in history] == [0, 1]
    assert all(row["pioneer/task_reward"] in (0.0, 0.25, 0.5, 0.75, 1.0) for row in history)  # the keyword reward
    assert "reward='length' does nothing: not read by task='keyword'" in caplog.text
    config = (tmp_path / "keyword-reinforce" / "config.yaml").read_text()
    assert "keyword: the" in config and "baseline_decay: 0.5" in config
