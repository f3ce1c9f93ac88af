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
