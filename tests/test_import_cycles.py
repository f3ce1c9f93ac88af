"""No package of the project (the benchmarks included) imports itself in a circle: every import statement of every
module, the ones inside functions included (a lazy import hides a cycle from Python, not from a reader), read from the source.

Two graphs: modules (``cory_env.hub`` -> ``cory_env.tokenizer``), and for ``trainers`` its parts (``trainers.loop``,
``trainers.evaluation``, ... each subpackage one node) so that two subpackages cannot lean on each other either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cory_env", "agents", "trainers", "benchmarks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The project modules `name` imports (a ``from package import x`` counts as the module ``package.x`` when it
    is one, else as ``package``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__ aside
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _part(name: str) -> str:
    """``trainers.loop.cory`` -> ``trainers.loop``; a top-level module of ``trainers`` is its own part."""
    parts = name.split(".")
    return ".".join(parts[:2])


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_cycle_inside_a_package(package):
    graph = {name: {t for t in imports_of(name) if t.split(".")[0] == package}
             for name in MODULES if name.split(".")[0] == package and name != package}
    graph = {name: {t for t in targets if t != package} for name, targets in graph.items()}
    assert cycles(graph) == [], f"{package} imports itself in a circle: {cycles(graph)}"


def test_no_cycle_between_the_trainers_parts():
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        if name.startswith("trainers."):
            graph.setdefault(_part(name), set()).update(
                _part(t) for t in imports_of(name) if t.startswith("trainers.") and _part(t) != _part(name))
    assert cycles(graph) == [], f"trainers' parts import each other in a circle: {cycles(graph)}"


def test_the_check_finds_a_cycle_and_reads_imports_inside_functions(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "cory_env.hub" in imports_of("cory_env.episode")  # a module-level import
    assert "trainers.loop.job" in imports_of("trainers.cli.train")  # one inside a function


def test_no_command_imports_another_command():
    """A command module parses, calls the library and prints: what two commands share lives in the library."""
    from trainers.cli import COMMANDS

    commands = {spec.split(":")[0] for spec in COMMANDS.values()}
    for name in commands:
        shared = imports_of(name) & (commands - {name})
        assert not shared, f"{name} imports the command module(s) {sorted(shared)}; move what they share to the library"
