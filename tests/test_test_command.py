"""The README's test command, ``python -m pytest -q``, uses every CPU: pyproject's addopts start one pytest-xdist worker
per CPU (the dev extra installs the plug-in) and each worker runs torch on one thread (tests/conftest.py). In one
process it took 21 min 50 s on 2 cores (issue 50)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO_ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_test_command_runs_a_worker_per_cpu_with_the_plugin_the_dev_extra_installs():
    addopts = PYPROJECT["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert "-n" in addopts and addopts[addopts.index("-n") + 1] == "logical" and "worksteal" in addopts, addopts
    assert any(dep.startswith("pytest-xdist") for dep in PYPROJECT["project"]["optional-dependencies"]["dev"])
    # mutmut records which tests call a mutated function by tracing its own pytest process: no workers there
    mutmut = PYPROJECT["tool"]["mutmut"]["pytest_add_cli_args"]
    assert "-n" in mutmut and mutmut[mutmut.index("-n") + 1] == "0", mutmut


def test_a_worker_runs_torch_and_the_processes_it_starts_on_one_thread():
    """Two workers of torch's default thread per core each spin-wait for the other's cores (`-n 2` measured slower
    than one process before)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("one process (-n 0): torch keeps its default threads")
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
