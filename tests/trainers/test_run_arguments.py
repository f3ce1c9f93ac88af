"""What a command is given as a run, or as a slot's model, is said for what it is, in one line with exit 2 before
anything is written: a file (a run's config.yaml) is a file, not "a run that does not exist"; a run folder without a
checkpoint yet says when a run writes one; a run whose latest checkpoint holds fewer iterations than it was started
with is played as it is, and named unfinished; ``--models llm2=`` names the slot it leaves without a model."""

from __future__ import annotations

import logging
import shutil

from trainers.cli import main
from trainers.loop.cory import CORYTrainer


def _one_line(capsys, argv) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    return err


def test_a_file_or_a_folder_without_checkpoints_given_as_a_run_is_named_as_such(tmp_path, capsys):
    """Before: `cory crossplay runs/x/config.yaml` said the run "does not exist"."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: tiny\n")  # a run that started: its config, no checkpoint yet
    out = tmp_path / "cp" / "x.json"
    for argv in (["crossplay", str(run / "config.yaml"), "--out", str(out)],
                 ["export", str(run / "config.yaml"), "--out", str(tmp_path / "exported")]):
        err = _one_line(capsys, argv)
        assert f"{str(run / 'config.yaml')!r} is a file, not a folder; give a run directory" in err, err
    for argv in (["crossplay", str(run), "--out", str(out)], ["eval", str(run)]):
        err = _one_line(capsys, argv)
        assert "is neither a checkpoint folder nor a run directory with checkpoints" in err, err
        assert "a run writes its first checkpoint after checkpoint_every iterations, or at its end" in err, err
    assert not (tmp_path / "cp").exists() and not (tmp_path / "exported").exists()
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]


def test_crossplay_names_an_unfinished_run_and_plays_its_latest_checkpoint(tiny_run, tmp_path, capsys, caplog):
    """A run stopped (or still training) after 1 of its 2 iterations: its models are played as they are, and the
    log says so; before, nothing told them from a finished run's."""
    trainer = CORYTrainer(tiny_run("half", task="relay", context_len=12, num_iterations=2, checkpoint_every=1,
                                   heldout_fraction=0.5))
    trainer.train()
    shutil.rmtree(trainer.output_dir / "checkpoints" / "iter-000001")  # what a run still training holds
    with caplog.at_level(logging.WARNING):
        assert main(["crossplay", str(trainer.output_dir), "--episodes", "2", "--out",
                     str(tmp_path / "cp.json")]) == 0
    capsys.readouterr()
    said = [r.getMessage() for r in caplog.records if "unfinished" in r.getMessage()]
    assert said == [f"run {trainer.output_dir} is unfinished: its latest checkpoint holds 1 of 2 iterations (still "
                    "training, or stopped); its models are played as they are there"]


def test_eval_and_export_name_an_unfinished_run(tiny_run, tmp_path, capsys, caplog):
    """`cory eval RUN` / `cory export RUN` of a run stopped after 1 of its 2 iterations say so, as cross-play does; a
    checkpoint folder given on purpose is not called unfinished."""
    trainer = CORYTrainer(tiny_run("half", num_iterations=2, checkpoint_every=1))
    trainer.train()
    shutil.rmtree(trainer.output_dir / "checkpoints" / "iter-000001")
    with caplog.at_level(logging.WARNING):
        assert main(["eval", str(trainer.output_dir), "--episodes", "2", "--out", str(tmp_path / "e.json")]) == 0
        assert main(["export", str(trainer.output_dir), "--out", str(tmp_path / "exported")]) == 0
        assert main(["eval", str(trainer.output_dir / "checkpoints" / "iter-000000"), "--episodes", "2",
                     "--out", str(tmp_path / "e0.json")]) == 0
    capsys.readouterr()
    said = [r.getMessage() for r in caplog.records if "unfinished" in r.getMessage()]
    assert said == [f"run {trainer.output_dir} is unfinished: its latest checkpoint holds 1 of 2 iterations (still "
                    f"training, or stopped); its models are {use} as they are there" for use in ("evaluated", "exported")]


def test_an_empty_model_for_a_slot_is_one_line_naming_the_slot(tmp_path, capsys):
    """Before: ``--models llm2=`` went on to load a tokenizer named '' and failed with transformers' five-line
    message, which named neither the option nor the slot."""
    run = tmp_path / "run"
    err = _one_line(capsys, ["train", "--preset", "tiny", "--output_dir", str(run), "--models", "llm2="])
    assert err.startswith("cory train: error: models llm2.model='' is invalid") and "Traceback" not in err
    assert not run.exists()
