"""docs/extending.md runs as written: a task with its own option and reward, a reward, a learner with its own
options, trained together through the registries (then the joint learner block), in one namespace, in order; and
each block is whole on its own (it imports what it uses: a reader copies one block)."""

from __future__ import annotations

import ast
import builtins
import logging
import re

import pytest

from tests.conftest import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "extending.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)


def test_the_guide_runs_and_trains_its_plugins(registries, tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the training block writes runs/keyword-reinforce
    blocks = _blocks()
    namespace: dict = {}
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
    assert "not read by learner" not in caplog.text  # no ignore list: the learner reads its whole config
    beta = namespace["configs"].update.init_kl_coef  # REINFORCE reads the shared β: combined = r - β · KL
    for row in history:
        assert row["pioneer/combined_reward"] == pytest.approx(row["pioneer/task_reward"] - beta * row["pioneer/kl"])
    from trainers.matchmaking import SCHEMES

    assert "main-vs-league" in SCHEMES.names()  # the matchmaking block: llm1 always the pioneer, the league in turn
    league = namespace["league_history"]
    assert [row["cory/llm1_seat"] for row in league] == [0.0, 0.0]
    assert [row["cory/llm2_seat"] for row in league] == [1.0, -1.0]
    assert namespace["league"].evaluated_model == "llm1"
    config = (tmp_path / "runs" / "keyword-reinforce" / "config.yaml").read_text()
    assert "keyword: the" in config and "baseline_decay: 0.5" in config


def _unbound_names(code: str) -> set[str]:
    """The names `code` reads that it never binds (an import, a def, a class, an assignment, an argument, a loop or
    comprehension target) and that are no builtins: what running it alone would raise NameError for."""
    tree = ast.parse(code)
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_every_block_imports_what_it_uses(index):
    """The REINFORCE block used `dataclass` and `field` from the task block: copied alone, NameError."""
    assert _unbound_names(_blocks()[index]) == set(), _blocks()[index][:200]
