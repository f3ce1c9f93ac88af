"""Package docstrings say what is: a table of a package's modules lists exactly the modules the package has, and
every module a docstring names exists (`docs/architecture.md` is the map; a package that lists its modules keeps
that list true)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for p in ROOT.glob("*/**/__init__.py") if p.parts[len(ROOT.parts)] in
                  ("cory_env", "agents", "trainers"))


def _modules(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")} | \
        {p.parent.name for p in package.glob("*/__init__.py")}


def _table_modules(doc: str, dotted: str) -> set[str] | None:
    """The modules a docstring's table lists in its first column (`name`, `pkg.name` or ``cory x`` commands
    aside), or None when it has no such table."""
    names = set()
    for row in re.findall(r"^\| *`([A-Za-z_.0-9]+)` *\|", doc, flags=re.M):
        names.add(row[len(dotted) + 1:] if row.startswith(dotted + ".") else row)
    return names or None


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_table_lists_exactly_its_modules(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    dotted = ".".join(package.relative_to(ROOT).parts)
    listed = _table_modules(doc, dotted)
    if listed is not None:
        assert listed == _modules(package), f"{dotted}'s docstring table lists {sorted(listed)}, the package has " \
                                            f"{sorted(_modules(package))}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_a_package_docstring_names_exists(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    for name in re.findall(r"`((?:cory_env|agents|trainers)(?:\.[a-z_0-9]+)+)`", doc):
        parts = name.split(".")
        while parts and not ((ROOT.joinpath(*parts).with_suffix(".py")).exists() or
                             (ROOT.joinpath(*parts) / "__init__.py").exists()):
            parts.pop()  # `trainers.loop.cory.CORYTrainer`: an attribute of an existing module
        assert len(parts) >= 2 or name.count(".") == 0, f"{name} (in {package.name}/__init__.py) names no module"


def _architecture_tree() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("```\ncory_env/")
    return text[start + 4:text.index("```", start + 4)]


def test_the_architecture_map_names_every_module_and_only_modules_that_exist():
    tree = _architecture_tree()
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        match = re.match(r"^( *)(\S+\.py|\S+/)(?= |$)", line)
        if not match:
            continue
        depth, name = len(match.group(1)), match.group(2)
        stack = [(d, n) for d, n in stack if d < depth]
        path = ROOT.joinpath(*[n.rstrip("/") for _, n in stack], name.rstrip("/"))
        assert path.exists(), f"docs/architecture.md names {path.relative_to(ROOT)}, which does not exist"
        if name.endswith("/"):
            stack.append((depth, name))
    for package in ("cory_env", "agents", "trainers"):
        for path in (ROOT / package).rglob("*.py"):
            if path.stem not in ("__init__", "__main__"):
                assert re.search(rf"\b{re.escape(path.name)}\b", tree), \
                    f"docs/architecture.md's map lacks {path.relative_to(ROOT)}"
