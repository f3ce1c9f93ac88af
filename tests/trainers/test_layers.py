"""Imports point one way (docs/architecture.md): `trainers.learning` never imports `trainers.loop`, `trainers.cli`,
`trainers.evaluation` or `trainers.config` (the learners' contract lives with the learners), read from
every import statement of its files, the ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPPER = ("trainers.loop", "trainers.cli", "trainers.evaluation", "trainers.config")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("path", sorted((ROOT / "trainers" / "learning").glob("*.py")), ids=lambda p: p.name)
def test_learning_imports_nothing_above_it(path):
    upward = [m for m in _imports(path) if m.startswith(UPPER)]
    assert not upward, f"{path.name} imports {upward}: trainers.learning must not depend on the loop or the CLI"


def test_the_check_reads_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from trainers.rollout import run_episodes\n")
    assert _imports(probe) == ["trainers.rollout"]


@pytest.mark.parametrize("path", sorted((ROOT / "trainers" / "adapters").glob("*.py")), ids=lambda p: p.name)
def test_the_adapters_import_only_the_env_and_their_library(path):
    """The adapters to other RL libraries sit on the env alone (any seating, sized by
    `trainers.adapters.window`), not on this project's trainer, learners, agents or CLI."""
    ours = [m for m in _imports(path) if m.split(".")[0] in ("trainers", "agents", "benchmarks", "examples")
            and not m.startswith("trainers.adapters")]
    assert not ours, f"{path.name} imports {ours}: trainers.adapters may import cory_env and its library only"


@pytest.mark.parametrize("path", sorted((ROOT / "cory_env").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_env_imports_nothing_above_it(path):
    """data -> env -> agents -> trainers: cory_env never imports the agents, the trainers or the examples."""
    upward = [m for m in _imports(path) if m.split(".")[0] in ("agents", "trainers", "benchmarks", "examples")]
    assert not upward, f"{path} imports {upward}"
