"""A ladder run killed mid-way and continued with --resume ends with the numbers of one never interrupted."""

from __future__ import annotations

import signal

import pytest

from benchmarks import ladder_run, learning
from benchmarks.ladder_progress import PROGRESS_FILE, load_progress, save_progress
from trainers.loop.cory import CORYTrainer

# CORY on the tiny task, 12 iterations of 64 episodes: role exchange (T_REx 5) twice, evaluated after iterations
# 2, 3, 5, 6, 8, 9, 11 and 12
ARGS = ("tiny_vocab", "cory", 0, 64 * 12)
FLAGS = ("--batch_size", "64", "--mini_batch_size", "32", "--ppo_epochs", "2")


def _numbers(run: dict) -> dict:
    return {"curve": [(p["episodes"], p["reward"]) for p in run["curve"]], "train_reward": run["train_reward"],
            "final": run["final"], "before": run["before"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return ladder_run.run_own_arm(*ARGS, str(tmp_path_factory.mktemp("whole") / "cory-s0"), FLAGS)


def _interrupt_at(monkeypatch, iteration: int, how):
    original = CORYTrainer.iteration

    def iteration_(self, it):
        if it == iteration:
            how(self)
        return original(self, it)

    monkeypatch.setattr(CORYTrainer, "iteration", iteration_)


def _fail(_):
    raise RuntimeError("killed")


@pytest.mark.slow
def test_a_crashed_run_resumes_from_its_last_point_with_identical_numbers(tmp_path, monkeypatch, uninterrupted):
    run_dir = str(tmp_path / "cory-s0")
    _interrupt_at(monkeypatch, 7, _fail)  # after the point at iteration 6; the trainer saves iteration 6 too
    with pytest.raises(RuntimeError, match="killed"):
        ladder_run.run_own_arm(*ARGS, run_dir, FLAGS, keep=True)
    assert (tmp_path / "cory-s0" / PROGRESS_FILE).is_file()
    monkeypatch.undo()
    resumed = ladder_run.run_own_arm(*ARGS, run_dir, FLAGS, keep=True, resume=True)
    assert _numbers(resumed) == _numbers(uninterrupted)
    assert resumed["resumed_at"] == [64 * 6]  # rewound past the trainer's own checkpoint of iteration 6 (no point)


@pytest.mark.slow
def test_a_stop_signal_leaves_no_result_and_a_run_that_resumes_identically(tmp_path, monkeypatch, uninterrupted):
    run_dir = str(tmp_path / "cory-s0")
    _interrupt_at(monkeypatch, 9, lambda trainer: trainer._request_stop(signal.SIGTERM, None))
    with pytest.raises(ladder_run.RunInterrupted, match="stopped after 640 of 768 episodes.*--resume"):
        ladder_run.run_own_arm(*ARGS, run_dir, FLAGS, keep=True)  # the point after iteration 9 is the last one kept
    monkeypatch.undo()
    resumed = ladder_run.run_own_arm(*ARGS, run_dir, FLAGS, keep=True, resume=True)
    assert _numbers(resumed) == _numbers(uninterrupted)
    assert resumed["resumed_at"] == [640]


def test_a_folder_without_progress_starts_afresh_and_one_without_its_checkpoint_is_refused(tmp_path):
    assert load_progress(tmp_path) is None
    save_progress(tmp_path, 5, [{"episodes": 0, "reward": 0.1}], train_s=1.0, cpu_s=2.0, resumed_at=[])
    with pytest.raises(FileNotFoundError, match=r"iter-000005, which is not a complete checkpoint.*without --resume"):
        load_progress(tmp_path)


def test_resume_needs_a_run_dir(capsys):
    with pytest.raises(SystemExit):
        learning.main(["--rung", "sanity", "--resume"])
    assert "--resume continues the runs kept in --run_dir" in capsys.readouterr().err
