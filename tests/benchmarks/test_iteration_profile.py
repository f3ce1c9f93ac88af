"""The iteration profile's clock: exclusive phase time, iteration marks, and the phases of a real (tiny) run."""

from __future__ import annotations

import pytest

from benchmarks import iteration_profile as ip


class _FakeTime:
    """A process clock that advances only when told to."""

    def __init__(self):
        self.now = 0.0

    def process_time(self):
        return self.now


@pytest.fixture
def fake(monkeypatch):
    """The profile module's clock, replaced by one the test advances."""
    clock = _FakeTime()
    monkeypatch.setattr(ip, "time", clock)
    return clock


def test_nested_phases_count_exclusive_seconds_and_iterations_split_at_marks(fake):
    clock = ip.PhaseClock()

    class Work:
        def rollout(self):
            fake.now += 1.0
            self.reward()  # 0.5 s nested: not counted twice
            fake.now += 2.0

        def reward(self):
            fake.now += 0.5

    clock.wrap(Work, "rollout", "rollout (generation)", mark=True)
    clock.wrap(Work, "reward", "reward")
    work = Work()
    work.rollout()
    fake.now += 0.25  # outside every phase: bookkeeping
    work.rollout()
    clock.snapshot()
    rows = clock.iterations()
    assert len(rows) == 2
    assert rows[0]["rollout (generation)"] == 3.0 and rows[0]["reward"] == 0.5
    assert rows[0]["bookkeeping"] == 0.25 and rows[0]["total"] == 3.75
    assert rows[1]["total"] == 3.5 and rows[1]["bookkeeping"] == 0.0
    clock.restore()
    assert Work.rollout.__name__ == "rollout"  # the wrappers are gone


def test_a_wrapped_function_that_raises_still_closes_its_phase(fake):
    clock = ip.PhaseClock()

    class Work:
        def backward(self):
            fake.now += 1.0
            raise RuntimeError("boom")

    clock.wrap(Work, "backward", "backward")
    with pytest.raises(RuntimeError, match="boom"):
        Work().backward()
    assert clock.totals["backward"] == 1.0 and clock._stack == []
    clock.restore()


@pytest.mark.slow
def test_a_tiny_ppo_run_spends_time_in_every_phase_of_its_update(tmp_path):
    rows = ip.profile_own("ppo", 3, 0, str(tmp_path), rung="sanity")
    assert len(rows) == 3  # one per iteration
    for row in rows:
        assert sum(row[p] for p in ip.PHASES) == pytest.approx(row["total"], rel=1e-9)
        for phase in ("rollout (generation)", "reward", "reference forward", "update forward (loss)", "backward",
                      "optimizer"):
            assert row[phase] > 0, phase
        assert min(row[p] for p in ip.PHASES) >= 0


def test_too_few_iterations_is_refused(capsys):
    with pytest.raises(SystemExit):
        ip.main(["--iterations", "1"])
    assert "--iterations must be >= 2" in capsys.readouterr().err


@pytest.mark.parametrize("arm, precision", [("trl-grpo", "fp32"), ("trl-grpo-default", "trl-default")])
def test_each_trl_arm_profiles_trl_in_its_precision(monkeypatch, arm, precision):
    """`trl-grpo` is TRL on our precision (fp32), `trl-grpo-default` on TRL's own default (bf16); neither runs ours."""
    seen = []
    monkeypatch.setattr(ip, "profile_trl", lambda it, seed, run_dir, prec: seen.append(prec) or [{
        **{p: 1.0 for p in ip.PHASES}, "total": float(len(ip.PHASES))}] * it)
    monkeypatch.setattr(ip, "profile_own", lambda *a, **k: pytest.fail("profiled this project's learner"))
    out = ip.profile_arm(arm, 2, 0)
    assert seen == [precision] and out["measured_iterations"] == 1 and out["mean_cpu_s"]["total"] == len(ip.PHASES)


def _report(precision, totals, machine=None):
    machine = machine or {"cpu": "CPU (AVX512; one torch thread per run)", "native_bf16": True}
    return {"precision": precision, "machine": machine,
            "arms": {arm: {"mean_cpu_s": {"total": t}} for arm, t in totals.items()}}


def test_the_precision_table_pairs_each_arm_and_trl_with_its_own_default():
    fp32 = _report("fp32", {"ppo": 8.0, "trl-grpo": 10.0, "trl-grpo-default": 5.0})
    bf16 = _report("bf16-mixed", {"ppo": 4.0})
    assert ip.precision_table(fp32, bf16).splitlines()[2:] == [
        "| ppo | 8.00 | 4.00 | 0.50 |", "| trl-grpo (TRL's default: bf16) | 10.00 | 5.00 | 0.50 |"]


def test_the_precision_table_refuses_two_machines_or_a_second_fp32_profile():
    fp32 = _report("fp32", {"ppo": 8.0})
    with pytest.raises(ValueError, match="different machines"):
        ip.precision_table(fp32, _report("bf16-mixed", {"ppo": 4.0}, machine={"cpu": "AVX2", "native_bf16": False}))
    with pytest.raises(ValueError, match="not bf16-mixed"):
        ip.precision_table(fp32, _report("fp32", {"ppo": 4.0}))
