"""Where the benchmarks' results go and how they are written (`benchmarks/outputs.py`): every result in
``benchmarks/results/``, every script's default ``--out`` there, nothing that points at a result elsewhere, and one
way of writing the JSON and the figures."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.trainers.test_outputs import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
#: A path into benchmarks/ as a page or a script names it: ``benchmarks/NAME`` or ``"benchmarks" / "NAME"``.
POINTER = re.compile(r"""(?<![\w/.-])benchmarks(?:/|["']\s*/\s*["'])([\w.-]+)""")


def test_the_benchmarks_folder_holds_scripts_and_its_results_folder_only():
    """A result (JSON, figure, per-run folder) lives in benchmarks/results/, not among the scripts."""
    stray = sorted(p.name for p in (ROOT / "benchmarks").iterdir()
                   if not (p.name.startswith((".", "__")) or p.suffix == ".py" or p.name in ("README.md", "results")))
    assert not stray, f"results outside benchmarks/results/: {stray}"
    assert any(RESULTS.glob("*.json")) and (RESULTS / "imdb_runs").is_dir()


def _pointers_outside_results(path: Path) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in POINTER.finditer(line):
            name = match[1]
            if Path(name).suffix in (".json", ".png") or ("." not in name and name != "results"):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match[0]}")
    return found


def test_no_page_script_or_test_points_at_a_result_outside_the_results_folder():
    """The README, the docs pages, the benchmarks' scripts and README, the examples and the tests name a result as
    ``benchmarks/results/NAME``; ``benchmarks/NAME.json`` (or a per-run folder beside the scripts) is a stale
    pointer."""
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "examples").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    found = [hit for path in files if path != Path(__file__).resolve() for hit in _pointers_outside_results(path)]
    assert not found, "name results as benchmarks/results/NAME:\n" + "\n".join(found)


@pytest.mark.parametrize("name", sorted(set(BENCHMARKS) - {"marl_eval_json"}))  # marl_eval_json: --out required
def test_every_benchmark_writes_into_the_results_folder_by_default(name, monkeypatch):
    """Without --out a benchmark's output is a file in benchmarks/results/ (the path it checks before its work)."""
    import trainers.loop.outputs

    seen = []

    def record(parser, args, *, default=None, **options):
        seen.append(Path(default if default is not None else parser.get_default("out")))
        raise SystemExit(0)  # stop before the work

    monkeypatch.setattr(trainers.loop.outputs, "checked_out", record)
    argv = list(BENCHMARKS[name])
    monkeypatch.setattr("sys.argv", [f"{name}.py", *argv])
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit):
        module.main(argv) if name not in ("env_step", "rollout") else module.main()
    assert seen and seen[0].parent == RESULTS, (name, seen)


def test_write_json_writes_the_indented_json_and_a_final_newline(tmp_path):
    from benchmarks.outputs import write_json

    assert write_json(tmp_path / "a" / "one.json", {"x": [1]}) == tmp_path / "a" / "one.json"
    assert (tmp_path / "a" / "one.json").read_text(encoding="utf-8") == '{\n "x": [\n  1\n ]\n}\n'
    write_json(tmp_path / "two.json", {"x": 1}, indent=2)
    assert (tmp_path / "two.json").read_text(encoding="utf-8") == '{\n  "x": 1\n}\n'
    with pytest.raises(TypeError):  # not JSON: the existing file is left as it was, no temporary file
        write_json(tmp_path / "two.json", {"x": object()})
    assert json.loads((tmp_path / "two.json").read_text(encoding="utf-8")) == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "two.json"]


def test_write_figure_saves_the_png_and_closes_the_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.outputs import write_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert write_figure(fig, tmp_path / "f.png") == tmp_path / "f.png"
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and fig.number not in plt.get_fignums()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]

