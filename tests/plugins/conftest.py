"""An out-of-tree plug-in package, written in a temporary folder from docs/extending.md's examples: a task with its
own option and reward, a reward function, a learner with its own options class; reachable by ``module:attr``
(``cory_demo_plugins.plugins:KEYWORD``) and by entry points (``demo-keyword``, ``demo-length``,
``demo-reinforce``) through a ``.dist-info`` folder beside it, as ``pip install`` would leave it; or (`bare_site`)
the same module alone on the path, declaring no entry points, reachable by ``module:attr`` only. Nothing of the
package under test is edited."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "extending.md"
PACKAGE = "cory_demo_plugins"
ENTRY_POINTS = {"cory.tasks": {"demo-keyword": "KEYWORD"}, "cory.learners": {"demo-reinforce": "REINFORCE"},
                "cory.rewards": {"demo-length": "length"}}


def plugin_source() -> str:
    """The guide's task, reward and learner blocks as one module, without their in-process ``register_*`` calls
    (a package reaches `cory` through entry points or ``module:attr``, not by being imported first)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)[:3]
    code = "\n".join(blocks)
    return re.sub(r"^register_\w+\(.*\)\n", "", code, flags=re.M)


def write_plugins(root: Path, *, name: str = "cory-demo-plugins", entry_points: dict | None = None,
                  installed: bool = True) -> Path:
    """Write the package and (`installed`) its ``.dist-info`` (entry points) under `root`; returns `root` (a sys.path
    folder)."""
    package = root / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "plugins.py").write_text(plugin_source())
    if not installed:
        return root
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    groups = ENTRY_POINTS if entry_points is None else entry_points
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{key} = {PACKAGE}.plugins:{attr}\n" for key, attr in names.items()) + "\n"
        for group, names in groups.items()))
    return root


@pytest.fixture()
def plugin_site(tmp_path_factory) -> Path:
    return write_plugins(tmp_path_factory.mktemp("site"))


@pytest.fixture()
def bare_site(tmp_path_factory) -> Path:
    """The plug-in package alone: no ``.dist-info``, no entry points (``module:attr`` names only)."""
    return write_plugins(tmp_path_factory.mktemp("bare"), installed=False)


def _on_path(site: Path, registries, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    for registry in registries:
        registry.refresh()
    yield site
    sys.modules.pop(f"{PACKAGE}.plugins", None)
    sys.modules.pop(PACKAGE, None)


@pytest.fixture()
def plugins_on_path(plugin_site, registries, monkeypatch):
    """The plug-in folder on sys.path of this process, the registries reading its entry points (and put back)."""
    yield from _on_path(plugin_site, registries, monkeypatch)


@pytest.fixture()
def bare_plugins_on_path(bare_site, registries, monkeypatch):
    """`bare_site` on sys.path of this process (no entry points: the registries know nothing of it)."""
    yield from _on_path(bare_site, registries, monkeypatch)


def plugin_env(site: Path | None) -> dict[str, str]:
    """The environment of a `cory` subprocess: the repository, and the plug-in folder when given."""
    paths = [str(site)] if site is not None else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(REPO)]), "OMP_NUM_THREADS": "1"}
