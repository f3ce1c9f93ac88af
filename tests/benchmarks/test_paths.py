"""Results that name no machine (`benchmarks/paths.py`): committed files hold no absolute path, the writers record
paths relative to the repository, and the data is found through one setting, ``CORY_SHARED_DATA``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: An absolute path as a token: at the start of a string or after a space or ``=`` (``--out=/x``), two parts at least.
ABSOLUTE = re.compile(r"(?:^|[\s=])(/[^\s/\"',;]+){2,}|(?:^|[\s=])[A-Za-z]:\\")


def _committed(*patterns: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", *patterns], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is None or out.returncode != 0:
        pytest.skip("not a git checkout: the committed files cannot be listed")
    return out.stdout.split()


#: Keys whose strings are model outputs (held-out responses and samples), not paths.
TEXTS = {"responses", "samples"}


def _strings(value, where: str = ""):
    """Every (place, string) of a JSON value but the model's texts (`TEXTS`)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k, f"{where}.{k} (key)")
            if k not in TEXTS:
                yield from _strings(v, f"{where}.{k}")


def test_no_committed_result_holds_an_absolute_path():
    """Every committed JSON (the results under benchmarks/ and any other) records paths relative to the repository
    (``command``, ``commands``, ``shared_flags``, a run's ``flags``, ...): an absolute path names the machine that
    wrote it and is nobody else's."""
    found = []
    for name in _committed("*.json"):
        data = json.loads((ROOT / name).read_text(encoding="utf-8"))
        found += [f"{name}{where}: {m.group(0).strip()!r}" for where, text in _strings(data)
                  for m in [ABSOLUTE.search(text)] if m]
    assert not found, f"{len(found)} absolute paths in committed results, e.g. {found[:5]}"


def test_no_committed_file_names_this_checkout_or_a_home_folder():
    """No committed text file holds this checkout's own path or a home folder (docs may show example paths such
    as ``/tmp/x.json`` for a user to type, never the machine's own)."""
    roots = {str(ROOT), str(Path.home()) + "/", "/" + "home/", "/" + "Users/", "/" + "work/"} - {"/", "//"}
    found = []
    for name in _committed():
        path = ROOT / name
        if path.suffix in (".png", ".jpg", ".gguf", ".pt", ".bin", ".safetensors") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}: {root}" for root in roots if root in text]
    assert not found, found


def test_recorded_paths_are_relative_to_the_repository_or_the_data_folder(monkeypatch, tmp_path):
    from benchmarks import paths

    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    assert paths.recorded_path(str(ROOT / "benchmarks" / "results" / "imdb_runs" / "cory-s0.json")) == \
        "benchmarks/results/imdb_runs/cory-s0.json"
    assert paths.recorded_path(str(tmp_path / "data" / "imdb_reviews_1000.csv")) == \
        "$CORY_SHARED_DATA/imdb_reviews_1000.csv"
    assert paths.recorded_path(str(tmp_path / "runs" / "cory-s0")) == "<outside>/cory-s0"
    assert paths.recorded_path(f"--out={ROOT / 'x.json'}") == "--out=x.json"
    assert paths.recorded_path("0.05") == "0.05" and paths.recorded_path("runs/x") == "runs/x"
    command = paths.recorded_command("benchmarks/learning.py", ["--rung", "imdb", "--out", str(tmp_path / "o.json"),
                                                                "--flags", "--model", "/opt/models/m.gguf"])
    assert command == "python benchmarks/learning.py --rung imdb --out <outside>/o.json --flags --model <outside>/m.gguf"


def test_a_ladder_result_records_its_command_and_flags_without_the_machine(tmp_path):
    from benchmarks.ladder_summary import summarise

    out = ROOT / "benchmarks" / "results" / "learning_imdb.json"
    result = summarise("imdb", [], {}, ["--rung", "imdb", "--out", str(out), "--run_dir", str(tmp_path / "runs")])
    assert result["command"] == ("python benchmarks/learning.py --rung imdb --out benchmarks/results/learning_imdb.json"
                                 " --run_dir <outside>/runs")
    assert "$CORY_SHARED_DATA/imdb_reviews_1000.csv" in result["shared_flags"]
    assert not any(ABSOLUTE.search(f) for f in result["shared_flags"])


def test_the_imdb_rung_reads_its_data_through_the_setting(monkeypatch, tmp_path):
    from benchmarks import paths
    from benchmarks.rungs import arm_configs

    (tmp_path / "imdb_reviews_1000.csv").write_text("text\na fine film\n", encoding="utf-8")
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    configs, _ = arm_configs("imdb", "ppo", 0, 16, str(tmp_path / "run"))
    assert Path(configs.env.data_path) == tmp_path / "imdb_reviews_1000.csv"
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"imdb_reviews_1000.csv' not found in .*absent "
                                                r"\(CORY_SHARED_DATA=.*\); set CORY_SHARED_DATA"):
        arm_configs("imdb", "ppo", 0, 16, str(tmp_path / "run"))


def test_the_ladder_stops_before_any_run_when_the_data_is_missing(monkeypatch, tmp_path, capsys):
    from benchmarks import paths
    from benchmarks.learning import main

    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        main(["--rung", "imdb", "--arms", "ppo", "--seeds", "0", "--out", str(tmp_path / "o.json")])
    assert stop.value.code == 2 and "set CORY_SHARED_DATA" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_the_data_folder_defaults_to_shared_data_beside_the_clone(monkeypatch):
    from benchmarks import paths

    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    assert paths.data_dir() == ROOT.parent / "shared" / "data"
    with pytest.raises(FileNotFoundError, match="CORY_SHARED_DATA unset: the default"):
        paths.data_file("no-such-file.csv")
