"""Off a terminal a run says how far it is, once per `log_every_seconds` and after its first and last iteration:
under tee / nohup / Slurm nothing appeared between the start and checkpoints minutes apart."""

from __future__ import annotations

import logging

import pytest

from trainers.loop import progress as progress_module
from trainers.loop.cory import CORYTrainer
from trainers.loop.progress import Progress


def test_the_line_says_iteration_elapsed_eta_and_the_metrics_with_readable_labels(monkeypatch):
    clock = iter([100.0, 230.0])
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: next(clock))
    progress = Progress(0, 24, "cory", seats=("pioneer", "observer"), enabled=True, every_s=30)
    metrics = {"pioneer/task_reward": 0.2312, "pioneer/kl": 1.2, "cory/collective_reward": 0.418, "other": 9.0}
    assert progress.line(4, metrics) == ("iteration 5/24 (20%), 2m10s elapsed, ETA 8m14s: pioneer reward 0.231, "
                                         "pioneer KL 1.200, collective reward 0.418")
    progress.close()


@pytest.mark.parametrize(("every", "expected"), [(0.0, [1, 2, 3]), (3600.0, [1, 3])])
def test_a_run_off_a_terminal_logs_progress_lines(tiny_run, caplog, every, expected):
    with caplog.at_level(logging.INFO, logger="trainers.loop.progress"):
        CORYTrainer(tiny_run("p", num_iterations=3, log_every_seconds=every)).train()
    lines = [r.getMessage() for r in caplog.records if r.name == "trainers.loop.progress"]
    assert [int(line.split()[1].split("/")[0]) for line in lines] == expected, lines
    assert all("/3 (" in line and "ETA" in line and "pioneer reward" in line and "collective reward" in line
               for line in lines)


def test_a_chain_shows_every_seats_reward_by_its_own_name():
    """The seats come from the seating, so a chain's later seats are shown too (not only 'observer')."""
    progress = Progress(0, 2, "chain:3", seats=("pioneer", "observer_1", "observer_2"), enabled=True, every_s=30)
    metrics = {"pioneer/task_reward": 0.1, "observer_1/task_reward": 0.2, "observer_2/task_reward": 0.3,
               "pioneer/kl": 0.5}
    assert "observer_1 reward 0.200, observer_2 reward 0.300, pioneer KL 0.500" in progress.line(0, metrics)
    progress.close()
