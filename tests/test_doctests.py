"""Every docstring example in the packages runs and prints what it shows (the examples are documentation a reader
copies; a stale one is a bug)."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("cory_env", "agents", "trainers", "benchmarks")


def _modules_with_examples() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                out.append(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
    return out


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_run(name):
    if name == "trainers.adapters.tianshou":
        pytest.importorskip("tianshou")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"
