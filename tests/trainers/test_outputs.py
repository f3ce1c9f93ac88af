"""One rule for every file a command writes (`trainers.loop.outputs`): never a file a run owns, never a folder, an
existing file only when told to replace it, checked before the work; written atomically, no temporary file left.
`cory plot --out` follows it."""

from __future__ import annotations

import json

import pytest

from trainers.cli import main as cory_main
from trainers.loop.metrics import MetricsLogger


def _run_dir(path):
    """A run folder as a run leaves it (marker, config, metrics, a checkpoint folder, TensorBoard)."""
    (path / "checkpoints" / "iter-000000").mkdir(parents=True)
    (path / "checkpoints" / "iter-000000" / "trainer_state.json").write_text("{}")
    (path / "tensorboard").mkdir()
    (path / ".cory-run").write_text("")
    (path / "config.yaml").write_text("seed: 0\n")
    MetricsLogger(path, tensorboard=False).log(0, {"pioneer/task_reward": 0.5, "pioneer/kl": 0.1,
                                                  "pioneer/combined_reward": 0.4})
    return path


def test_a_run_owns_its_files_even_before_it_writes_them(tmp_path):
    from trainers.loop.outputs import run_owner

    run = _run_dir(tmp_path / "run")
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "eval.json", ".cory-run", "checkpoints",
                 "tensorboard", "checkpoints/x.json", "checkpoints/iter-000000/trainer_state.json",
                 "tensorboard/events.out", "checkpoints/iter-000000/llm1/learner.json"):
        assert run_owner(run / name) is not None, name
    for name in ("eval-llm1-iter-000000.json", "curves.png", "notes/config.yaml"):
        assert run_owner(run / name) is None, name
    assert run_owner(tmp_path / "config.yaml") is None  # not a run folder
    copy = tmp_path / "copied-checkpoint"  # a checkpoint folder outside any run
    (copy / "llm1").mkdir(parents=True)
    (copy / "trainer_state.json").write_text("{}")
    assert run_owner(copy / "trainer_state.json") and run_owner(copy / "rng.pt") and run_owner(copy / "llm1" / "x")
    assert run_owner(copy / "eval-llm1.json") is None  # where cory eval writes beside such a copy


def test_check_output_file_refuses_a_folder_a_runs_file_and_an_existing_file(tmp_path):
    from trainers.loop.outputs import check_output_file

    run = _run_dir(tmp_path / "run")
    with pytest.raises(IsADirectoryError, match="--out .* is a folder"):
        check_output_file(run, option="--out")
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "checkpoints/iter-000000/eval.json"):
        with pytest.raises(ValueError, match="a run's own files are never replaced"):
            check_output_file(run / name, option="--out", replace=True)  # not even with --overwrite
    other = tmp_path / "result.json"
    other.write_text("keep")
    with pytest.raises(FileExistsError, match="result.json already exists; nothing was changed. Pass --overwrite"):
        check_output_file(other, option="--out")
    assert check_output_file(other, option="--out", replace=True) == other
    assert check_output_file(other, option="--out", default=True) == other
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_output_file(other / "x.json", option="--out")
    assert check_output_file(tmp_path / "new" / "deep" / "x.json", option="--out")  # its folder is made on write
    assert other.read_text() == "keep"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    from trainers.loop.outputs import atomic_output, write_output

    path = tmp_path / "out.json"
    write_output(path, json.dumps({"a": 1}))
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_output(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    write_output(tmp_path / "sub" / "b.txt", b"bytes")
    assert (tmp_path / "sub" / "b.txt").read_bytes() == b"bytes"


def test_cory_plot_out_follows_the_rule(tmp_path, capsys):
    """`cory plot --out` into a run's checkpoints/ or onto a file is refused before drawing; PNGs already in an
    explicit --out are replaced only with --overwrite; the default (the run folder) is replaced by a rerun."""
    run = _run_dir(tmp_path / "run")
    for out in (run / "checkpoints", run / "metrics.jsonl"):
        before = sorted(p.name for p in out.iterdir()) if out.is_dir() else out.read_bytes()
        assert cory_main(["plot", str(run), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("cory plot: error: ") and err.count("\n") == 1
        assert (sorted(p.name for p in out.iterdir()) if out.is_dir() else out.read_bytes()) == before
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "curves.png").write_text("mine")
    assert cory_main(["plot", str(run), "--out", str(plots)]) == 2
    assert "curves.png already exists" in capsys.readouterr().err and (plots / "curves.png").read_text() == "mine"
    assert not (plots / "pareto.png").exists()
    assert cory_main(["plot", str(run), "--out", str(plots), "--overwrite"]) == 0
    assert (plots / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert cory_main(["plot", str(run)]) == 0 and cory_main(["plot", str(run)]) == 0  # its own default, twice
    assert sorted(p.name for p in plots.iterdir()) == ["curves.png", "pareto.png"]  # no temporary file left


#: Every benchmark script that writes --out, with the arguments it needs besides --out (inputs that do not exist:
#: the check must come before the script reads or runs anything).
BENCHMARKS = {"collapse": ["missing.json"], "cost_growth": [], "ddp_scaling": [], "env_step": [], "iteration_profile": [],
              "learning": ["--rung", "relay"], "main_job_seeds": [],
              "marl_eval_json": ["missing.json"],
              "memory": [], "pareto": ["missing.json"], "ppo_step": [], "precision": [],
              "precision_learning": ["missing.json"], "rollout": [], "run_all": [], "sharding_memory": [],
              "throughput": [], "time_to_reward": ["--report_only", "--runs_dir", "missing"]}


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_checks_its_out_before_its_work(name, tmp_path, monkeypatch, capsys):
    """A benchmark's --out onto a run's file, a folder or an existing file is refused (exit 2, naming it) before
    the benchmark reads its inputs or runs anything; nothing is written."""
    import importlib

    module = importlib.import_module(f"benchmarks.{name}")
    run = _run_dir(tmp_path / "run")
    mine = tmp_path / "mine.json"
    mine.write_text("mine")
    for out, message in ((run / "config.yaml", "a run's own files are never replaced"), (tmp_path, "is a folder"),
                         (mine, "mine.json already exists; nothing was changed. Pass --overwrite")):
        argv = [*BENCHMARKS[name], "--out", str(out)]
        monkeypatch.setattr("sys.argv", [f"{name}.py", *argv])
        with pytest.raises(SystemExit) as exit_info:
            module.main(argv) if name not in ("env_step", "rollout") else module.main()
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, (name, out)
    assert mine.read_text() == "mine" and (run / "config.yaml").read_text() == "seed: 0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "run"]


def test_cory_export_out_is_never_a_path_a_run_owns(tmp_path, capsys):
    """Beside checkpoints/ (refused before), an export folder may not be a run's tensorboard/ or a name the run
    writes later (samples.jsonl): refused before any model loads, nothing created."""
    run = _run_dir(tmp_path / "run")
    (run / "samples.jsonl").unlink()  # a run with --log_samples 0 so far
    for out in (run / "tensorboard" / "exported", run / "samples.jsonl", run / "eval.json"):
        assert cory_main(["export", str(run), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "a run's own files are never replaced" in err and err.count("\n") == 1, err
        assert not out.exists()


def test_cory_export_names_a_file_out_as_a_file_before_any_work(tmp_path, capsys):
    """Found by trying: an empty file as --out was called "not empty"; a path under a file failed with a bare
    [Errno 20] after the checkpoint loaded."""
    from trainers.cli import main as cory_main

    (tmp_path / "emptyf").touch()
    for out, message in ((tmp_path / "emptyf", "is a file; give a new or empty folder"),
                         (tmp_path / "emptyf" / "sub", "emptyf is a file, not a folder")):
        assert cory_main(["export", str(tmp_path / "no-run"), "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
