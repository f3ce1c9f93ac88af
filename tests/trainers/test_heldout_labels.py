"""What a held-out evaluation evaluates on is said from what the task provides (`TaskSpec.heldout_split`)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from cory_env.tasks import TaskSpec
from cory_env.tasks.tiny_vocab import SPEC as TINY_VOCAB
from trainers.evaluation.report import before_after_line
from trainers.loop.cory import CORYTrainer

#: The tiny_vocab task without a held-out split: it does not read heldout_fraction (as gsm8k's pioneer evaluation).
NOSPLIT = replace(TINY_VOCAB, reads=())
NOSPLIT_NAME = f"{__name__}:NOSPLIT"


def test_a_task_without_a_split_is_warned_about_at_the_start_and_named_in_the_result(tiny_run, caplog):
    """Before: with --heldout_fraction 0.25 (which the task does not read) training and `cory eval` reported
    "test-split queries" that were training queries, without a word."""
    with caplog.at_level(logging.WARNING):
        trainer = CORYTrainer(tiny_run("nosplit", task=NOSPLIT_NAME, heldout_fraction=0.25, eval_episodes=4,
                                       context_len=12))
    said = [r.getMessage() for r in caplog.records if "not held out" in r.getMessage()]
    assert len(said) == 1 and "has no held-out split" in said[0]
    result = trainer.heldout_evaluation()
    assert result["query_split"] == "train"
    gain = {"episodes": 4, "distinct_queries": 4, "gain": 0.0, "gain_sem": 0.01, "combined_before": 0.0,
            "combined_after": 0.0}
    line = before_after_line("llm1", result, result, gain)
    assert "train-split queries (not held out)" in line and "held-out task reward" not in line


def test_a_split_task_reports_its_test_side(tiny_run, caplog):
    with caplog.at_level(logging.WARNING):
        trainer = CORYTrainer(tiny_run("split", task="tiny_vocab", heldout_fraction=0.25, eval_episodes=4,
                                       context_len=12))
    assert not [r for r in caplog.records if "not held out" in r.getMessage()]
    assert trainer.heldout_evaluation()["query_split"] == "test"
    assert TINY_VOCAB.heldout_split(trainer.configs.env) == ("test", None)


def test_heldout_fraction_zero_says_so(tiny_run):
    split, why = TINY_VOCAB.heldout_split(tiny_run("zero", task="tiny_vocab", heldout_fraction=0.0).env)
    assert split == "train" and "heldout_fraction=0" in why and "--heldout_fraction" in why


def test_an_empty_test_side_is_refused_before_any_folder(tiny_run, tmp_path):
    """Before: refused only at the first evaluation, after the run folder existed."""
    with pytest.raises(ValueError, match="'test' side of heldout_fraction"):
        CORYTrainer(tiny_run("empty", task="tiny_vocab", heldout_fraction=1e-9, eval_episodes=4, context_len=12))
    assert not (tmp_path / "empty").exists()


def test_spec_without_reads_has_no_split():
    from cory_env import EnvConfig

    assert isinstance(NOSPLIT, TaskSpec)
    assert NOSPLIT.heldout_split(EnvConfig(task="tiny_vocab", heldout_fraction=0.5))[0] == "train"


@pytest.mark.parametrize("split", [False, True], ids=["no-split", "held-out"])
def test_cory_train_progress_lines_say_held_out_only_for_held_out_queries(tmp_path, capsys, caplog, split):
    """Before: `cory train --eval_episodes N` logged "evaluating the pioneer on N held-out queries" and "held-out
    reward before training" for a run without a held-out slice (the tiny preset: heldout_fraction 0), whose evaluation
    draws training queries; a run with one still says held-out."""
    from trainers.cli import main

    argv = ["train", "--preset", "tiny", "--output_dir", str(tmp_path / "run"), "--num_iterations", "1",
            "--eval_episodes", "2", "--torch_threads", "1", "--tensorboard", "false"]
    with caplog.at_level(logging.INFO):
        assert main(argv + (["--heldout_fraction", "0.2"] if split else [])) == 0
    capsys.readouterr()
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("evaluating ") or " reward before training" in r.getMessage()
             or " reward after training" in r.getMessage()]
    assert len(lines) == 4, lines  # what each evaluation starts on, and its reward
    if split:
        assert "on 2 held-out queries (before training)" in lines[0]
        assert lines[1].startswith("held-out reward before training")
    else:
        assert all("held-out" not in line.replace("not held-out", "") for line in lines), lines
        assert "on 2 training (not held-out) queries (before training)" in lines[0]
        assert lines[1].startswith("evaluation reward before training")


def test_crossplay_of_a_task_without_a_split_says_it_plays_training_queries(tiny_run, tmp_path, capsys, caplog):
    """As `cory eval` does: before, cross-play of such runs played training queries without a word (its JSON said
    heldout_fraction 0.25)."""
    import json

    from trainers.cli import main

    trainer = CORYTrainer(tiny_run("nosplit", task=NOSPLIT_NAME, heldout_fraction=0.25, context_len=12,
                                   num_iterations=1))
    trainer.train()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["crossplay", str(trainer.output_dir), "--episodes", "2", "--out", str(tmp_path / "cp.json")]) == 0
    capsys.readouterr()
    said = [r.getMessage() for r in caplog.records if "held-out" in r.getMessage() or "held out" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("cross-play plays training queries, not held-out ones: task ")
    assert "has no held-out split" in said[0]
    assert json.loads((tmp_path / "cp.json").read_text())["heldout"]["query_split"] == "train"
