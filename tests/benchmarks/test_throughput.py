"""The GPU throughput benchmark: iterations timed one by one, TRL's generation batches told apart, the table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import rungs
from benchmarks import throughput as tp


def test_the_table_gives_iterations_per_minute_and_bf16_over_fp32():
    results = [{"arm": "ppo", "precision": "fp32", "iterations_per_minute": 60.0},
               {"arm": "ppo", "precision": "bf16-mixed", "iterations_per_minute": 30.0},
               {"arm": "trl-grpo", "precision": "fp32", "iterations_per_minute": 45.0}]
    lines = tp.table(results).splitlines()
    assert lines[0] == "| arm | fp32 it/min | bf16-mixed it/min | bf16 ÷ fp32 speed |"
    assert lines[2] == "| ppo | 60.0 | 30.0 | 0.50× |"
    assert lines[3] == "| trl-grpo | 45.0 | — | — |"


def test_a_tiny_run_is_timed_iteration_by_iteration_and_the_warm_up_left_out():
    out = tp.time_arm("ppo", "fp32", "cpu", 3, 0, [], rung="sanity")
    seconds = out["seconds"]
    assert len(seconds) == 3 and min(seconds) > 0
    assert out["iterations_per_minute"] == pytest.approx(60 * 2 / sum(seconds[1:]))


@pytest.mark.parametrize("precision, trl_precision", [("fp32", "fp32"), ("bf16-mixed", "trl-default")])
def test_trl_is_timed_per_generation_batch_in_the_matching_precision(monkeypatch, precision, trl_precision):
    """TRL's iteration is a generation batch and its `updates_per_iteration` optimiser steps: 8 steps of 4 per
    batch are 2 iterations, each closed at its 4th step."""
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(tp.time, "perf_counter", lambda: next(clock))
    synchronized = []
    monkeypatch.setattr(tp, "_synchronize", synchronized.append)  # no CUDA here
    built = {}

    class FakeTrainer:
        def __init__(self):
            self.callbacks = []

        def add_callback(self, callback):
            self.callbacks.append(callback)

        def train(self):
            state = SimpleNamespace(global_step=0)
            for cb in self.callbacks:
                cb.on_train_begin(None, state, None)
            for step in range(1, 9):
                state.global_step = step
                for cb in self.callbacks:
                    cb.on_step_end(None, state, None)

    def make(seed, episodes, *, run_dir, precision, device, flags):
        built.update(episodes=episodes, precision=precision, device=device, flags=flags)
        return SimpleNamespace(trainer=FakeTrainer(), updates_per_iteration=4,
                               tmp=SimpleNamespace(cleanup=lambda: built.update(cleaned=True)))

    import benchmarks.trl_grpo

    monkeypatch.setattr(benchmarks.trl_grpo, "make_trl_trainer", make)
    monkeypatch.setattr(rungs, "arm_configs", lambda *a: (SimpleNamespace(update=SimpleNamespace(batch_size=16)), 1))
    seconds = tp.time_trl(precision, "cuda:0", 2, 0, "/tmp/unused", ["--model", "m"])
    assert seconds == [1.0, 1.0]  # one clock reading at the start and at steps 4 and 8, none at the other steps
    assert synchronized == ["cuda:0"] * 3  # the device is synchronised before each reading
    assert built == {"episodes": 32, "precision": trl_precision, "device": "cuda:0", "flags": ["--model", "m"],
                     "cleaned": True}


def test_too_few_iterations_is_refused(capsys):
    with pytest.raises(SystemExit):
        tp.main(["--iterations", "1"])
    assert "--iterations must be >= 2" in capsys.readouterr().err
