"""Data-parallel training (accelerate, gloo on CPU): identical replicas, the same numbers as one process, main-only IO.

The multi-process tests launch real processes with `accelerate launch` (trainers.cli.launch.launch_command) on a tiny
model and the 20-token `tiny_vocab` task, with greedy sampling (``top_k 1``) so that rollouts do not depend on how
the batch is split. Tolerance for "the same metrics": |a - b| <= 1e-4 + 1e-4 |a| (float32 round-off of the
all-reduce; measured differences are ~2e-7).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from trainers.cli.launch import launch_command, preflight
from trainers.config.parser import parse_train_args
from trainers.learning import ppo_math
from trainers.learning.registry import make_learner, register_learner, LEARNERS
from trainers.learning.score_scaling import RunningMoments
from trainers.loop.checkpoint import latest_checkpoint
from trainers.loop.cory import CORYTrainer
from trainers.distributed import DataParallel, launched_world_size
from trainers.loop.metrics import read_jsonl

WORKER = Path(__file__).with_name("ddp_worker.py")
COMMON = ["--preset", "tiny", "--task", "tiny_vocab", "--num_iterations", "3", "--top_k", "1",
          "--tensorboard", "false", "--checkpoint_every", "2", "--torch_threads", "1"]
TOL = 1e-4


def _run(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`cmd` to its end (exit 0 asserted), with ``tmp_path / "systmp"`` as the processes' temp directory."""
    (tmp_path / "systmp").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TMPDIR": str(tmp_path / "systmp")}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # never inherit a launch
        env.pop(key, None)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    # a process group left at exit can abort a finished process (gloo threads outliving the interpreter)
    assert "terminate called" not in proc.stderr, proc.stderr[-5000:]
    return proc


def _worker(tmp_path: Path, name: str, processes: int, extra: list[str], worker_args: tuple[str, ...] = ()) -> dict:
    """Run ddp_worker.py (`worker_args` are its own options, e.g. ``--dump_params FILE``) and return its report."""
    report = tmp_path / f"{name}.json"
    program = [str(WORKER), "--report", str(report), *worker_args, "--", *COMMON, "--output_dir", str(tmp_path / name),
               *extra]
    cmd = launch_command(processes, program) if processes > 1 else [sys.executable, *program]
    _run(cmd, tmp_path)
    return json.loads(report.read_text())


def _compared_keys(row: dict) -> list[str]:
    return [k for k in row if k.split("/")[0] in ("pioneer", "observer", "llm1", "llm2", "cory")]


def _assert_same_metrics(history_a: list[dict], history_b: list[dict], *, min_keys: int) -> None:
    """Every logged seat/model metric of two runs, iteration by iteration: equal within TOL (NaN where NaN), the same
    keys in both, more than `min_keys` of them."""
    for a, b in zip(history_a, history_b, strict=True):
        keys = _compared_keys(a)
        assert len(keys) > min_keys and set(keys) == set(_compared_keys(b))
        for key in keys:
            if math.isnan(a[key]):
                assert math.isnan(b[key]), key
                continue
            assert abs(a[key] - b[key]) <= TOL + TOL * abs(a[key]), (a["iteration"], key, a[key], b[key])


# ---------------------------------------------------------------------------------------------------- one process
def test_single_process_group_is_the_identity():
    dist = DataParallel()
    x = torch.tensor([1.0, 2.0])
    assert dist.world_size == 1 and dist.rank == 0 and dist.is_main and not dist.enabled
    assert dist.sum(x) is x
    assert dist.pool_token_means({"a": 1.5}, torch.ones(2, 3, dtype=torch.bool)) == ({"a": 1.5}, 1.0)
    assert dist.mean_stats({"a": 1.5}) == {"a": 1.5}
    assert dist.any(True) and not dist.any(False)
    assert dist.max_abs_param_difference([torch.nn.Parameter(x)]) == 0.0


class _LaunchedState:
    """Stand-in for accelerate's PartialState of process 0 of 2: records barriers and destroy_process_group calls."""

    num_processes, process_index, device = 2, 0, "cpu"

    def __init__(self):
        self.destroyed = 0
        self.calls: list[str] = []

    def destroy_process_group(self):
        self.destroyed += 1
        self.calls.append("destroy")

    def wait_for_everyone(self):
        self.calls.append("barrier")


def test_close_destroys_the_process_group_once():
    state = _LaunchedState()
    dist = DataParallel(state)
    assert dist.enabled and not dist.closed
    dist.close()
    dist.close()
    assert state.destroyed == 1 and dist.closed and state.calls == ["destroy"]  # after an error: no barrier
    clean = _LaunchedState()
    DataParallel(clean).close(wait=True)
    assert clean.calls == ["barrier", "destroy"]  # a clean end meets the others first
    alone = DataParallel()
    alone.close()  # nothing to destroy
    assert not alone.closed


def test_leaving_the_trainer_block_closes_its_group_also_after_an_error(tiny_run):
    class Recording(DataParallel):
        def __init__(self):
            super().__init__()
            self.waits: list[bool] = []

        def close(self, *, wait=False):
            self.waits.append(wait)

    dist = Recording()
    with pytest.raises(RuntimeError, match="boom"):
        with CORYTrainer(tiny_run(num_iterations=1), dist=dist):
            raise RuntimeError("boom")
    assert dist.waits == [False]  # after an error the others may never reach a barrier
    clean = Recording()
    with CORYTrainer(tiny_run("clean", num_iterations=1), dist=clean):
        pass
    assert clean.waits == [True]


def test_launched_world_size_reads_the_launcher(monkeypatch):
    for key in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert launched_world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_world_size() == 4


def test_bad_device_for_a_multi_process_launch_is_refused_before_any_process_group(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="would put all 2 processes on one device"):
        DataParallel.from_launcher("cuda:1" if torch.cuda.is_available() else "cpu:1")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs CUDA"):
            DataParallel.from_launcher("cuda")
        monkeypatch.delenv("WORLD_SIZE")
        with pytest.raises(ValueError, match="needs CUDA.*--device cpu"):  # one process too
            DataParallel.from_launcher("cuda")


def test_accelerate_launch_without_multi_gpu_is_refused(monkeypatch):
    """accelerate's simple launcher sets MASTER_PORT for --num_processes 2 but starts one process: say so."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "False")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(ValueError, match="add --multi_gpu"):
        DataParallel.from_launcher("auto")


def test_global_whitening_and_score_moments_reduce_to_the_local_ones():
    """With a sum over one process, the pooled (two-pass) statistics equal TRL's local ones."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=gen)
    mask = torch.rand(5, 7, generator=gen) > 0.3
    pooled = ppo_math.masked_whiten(x, mask, reduce_sum=lambda t: t)
    torch.testing.assert_close(pooled, ppo_math.masked_whiten(x, mask), rtol=1e-5, atol=1e-6)
    kept = ppo_math.masked_whiten(x, mask, shift_mean=False, reduce_sum=lambda t: t)
    torch.testing.assert_close(kept, ppo_math.masked_whiten(x, mask, shift_mean=False), rtol=1e-5, atol=1e-6)
    local, pooled_m = RunningMoments(), RunningMoments()
    for _ in range(3):
        scores = torch.randn(6, generator=gen) * 3 + 1
        assert local.update(scores) == pytest.approx(pooled_m.update(scores, reduce_sum=lambda t: t), rel=1e-9)
    assert (pooled_m.mean, pooled_m.std, pooled_m.count) == pytest.approx((local.mean, local.std, local.count))


def test_global_whitening_pools_two_shards():
    """Two shards whose reduce_sum adds the other shard's partial sums whiten like the concatenated batch."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 5, generator=gen)
    mask = torch.rand(6, 5, generator=gen) > 0.2
    whole = ppo_math.masked_whiten(x, mask)
    shards = [(x[:2], mask[:2]), (x[2:], mask[2:])]
    # replay the two collectives of a 2-process run: first (sum, count), then the squared deviations
    sums = torch.stack([torch.stack([(s * m).sum(), m.sum().float()]) for s, m in shards]).sum(0)
    mean = sums[0] / sums[1]
    squares = sum(((s - mean) ** 2 * m).sum() for s, m in shards).reshape(1)
    replies = iter([sums, squares])
    first = ppo_math.masked_whiten(shards[0][0], shards[0][1], reduce_sum=lambda t: next(replies))
    torch.testing.assert_close(first, whole[:2], rtol=1e-5, atol=1e-6)


def test_a_learner_without_dist_is_refused_in_a_multi_process_run(tiny_run, registries):
    dist = DataParallel()
    dist.world_size = 2  # pretend: the check happens before any collective

    def old_style(agent, ref_model, config):
        return LEARNERS["ppo"].factory(agent, ref_model, config)

    register_learner("old-style", old_style, overwrite=True)
    with pytest.raises(ValueError, match="cannot train data-parallel.*dist"):
        make_learner("old-style", None, None, None, dist=dist)
    with pytest.raises(ValueError, match="cannot train data-parallel.*dist"):  # the launcher's check, before any process
        preflight(tiny_run("never", learner="old-style"), 2)


def test_resume_with_another_process_count_is_refused(tiny_run):
    configs = tiny_run(num_iterations=1)
    CORYTrainer(configs).train()
    state_path = next((Path(configs.run.output_dir) / "checkpoints").glob("iter-*")) / "trainer_state.json"
    state = json.loads(state_path.read_text())
    assert state["num_processes"] == 1
    state["num_processes"] = 2
    state_path.write_text(json.dumps(state))
    import dataclasses

    with pytest.raises(ValueError, match="trained with 2.*--num_processes 2"):
        CORYTrainer(dataclasses.replace(configs, run=dataclasses.replace(configs.run, resume=True, num_iterations=2)))


# ---------------------------------------------------------------------------------------------------- two processes
LAYOUTS = {"full": [], "lora": ["--use_lora", "true", "--lora_target_modules", "q_proj,v_proj"],
           # joint learners: MAPPO's centralized critic, MAGRPO's shared group advantage (one group of 2
           # per process: groups never span processes)
           "mappo": ["--learner", "mappo"], "magrpo": ["--learner", "magrpo", "--group_size", "2"]}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_two_processes_match_one_process_with_the_whole_batch(tmp_path, layout):
    extra = LAYOUTS[layout]
    one = _worker(tmp_path, "one", 1, [*extra, "--batch_size", "4", "--mini_batch_size", "4"])
    two = _worker(tmp_path, "two", 2, [*extra, "--batch_size", "2", "--mini_batch_size", "2"])
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert two["process_group_left"] is False  # the trainer's block destroyed it
    # identical replicas after every update of every model (2 models x 3 iterations)
    assert len(two["max_replica_diff"]) == 6
    assert max(two["max_replica_diff"]) == 0.0
    assert [r["iteration"] for r in two["history"]] == [0, 1, 2]
    _assert_same_metrics(one["history"], two["history"], min_keys=40)
    # the run learned something: the policies moved away from the reference model (not MAGRPO: with top_k 1 a
    # group's samples are one answer, so its advantages are 0; its equality above is the check)
    if layout != "magrpo":
        assert any(abs(r["pioneer/kl"]) > 1e-3 for r in two["history"])
    # only the main process wrote: one line per iteration, one config, checkpoints at 2 and at the end
    run = tmp_path / "two"
    assert [r["iteration"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2]
    assert sorted(p.name for p in (run / "checkpoints").glob("iter-*")) == ["iter-000001", "iter-000002"]
    assert (run / "config.yaml").is_file()


def test_cli_num_processes_trains_and_resumes_with_the_same_count(tmp_path, capsys):
    run = tmp_path / "cli"
    base = [sys.executable, "-m", "trainers.cli", "train", *COMMON, "--batch_size", "2", "--mini_batch_size", "1",
            "--output_dir", str(run), "--num_processes", "2"]
    out = _run(base, tmp_path)
    assert json.loads(out.stdout[out.stdout.index("{"):])["last_iteration"] == 2  # printed once, by the main process
    assert out.stdout.count('"output_dir"') == 1
    assert not list((tmp_path / "systmp").glob("torchelastic_*"))  # torch's launcher logged in the launcher's folder
    _run([*base, "--resume", "--num_iterations", "4"], tmp_path)
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    state = json.loads((run / "checkpoints" / "iter-000003" / "trainer_state.json").read_text())
    assert state["num_processes"] == 2
    # the resumed iteration equals an uninterrupted 2-process run's (same derived seeds, restored learner state)
    whole = tmp_path / "whole"
    _run([*base[:-4], "--output_dir", str(whole), "--num_processes", "2", "--num_iterations", "4"], tmp_path)
    resumed_row, whole_row = rows[3], read_jsonl(whole / "metrics.jsonl")[3]
    keys = _compared_keys(whole_row)
    assert len(keys) > 40
    for key in keys:
        assert resumed_row[key] == pytest.approx(whole_row[key], rel=1e-5, abs=1e-6, nan_ok=True), key
    # a one-process resume of this run is refused with the fix in the message
    from trainers.cli import main

    assert main(["train", *COMMON, "--batch_size", "2", "--mini_batch_size", "1", "--output_dir", str(run), "--resume",
                 "--num_iterations", "5"]) == 2
    assert "--num_processes 2" in capsys.readouterr().err


def test_a_nan_loss_on_one_process_stops_every_process_and_keeps_the_checkpoint(tmp_path):
    """No process is left waiting in a collective: both stop with NonFiniteLossError, iteration 0's checkpoint stays."""
    report = tmp_path / "nan.json"
    program = [str(WORKER), "--report", str(report), "--nan_rank", "1", "--", *COMMON, "--output_dir",
               str(tmp_path / "nan"), "--batch_size", "2", "--mini_batch_size", "2", "--checkpoint_every", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    proc = subprocess.run(launch_command(2, program), cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.count("NonFiniteLossError: PPO loss is not finite") >= 2  # both ranks raised
    assert not report.exists()
    assert sorted(p.name for p in (tmp_path / "nan" / "checkpoints").glob("iter-*")) == ["iter-000000"]


@pytest.mark.parametrize("extra, message", [
    (["--learner", "grpo", "--group_size", "1"], "GRPO needs at least 2 samples per query"),
    (["--learner", "nosuch"], "unknown learner 'nosuch'"),
    (["--device", "cuda:1"], "would put all 2 processes on one device|needs CUDA"),
    (["--learner", "mappo", "--seating", "ppo"], "learner 'mappo' needs at least two seats"),
    (["--task", "tiny_vocab", "--seating", "chain:3", "--context_len", "9", "--truncate_query", "false"],
     "context_len=9 is too small"),
])
def test_launcher_mistakes_are_one_line_before_any_process_starts(tmp_path, capfd, extra, message):
    from trainers.cli import main

    # in this process; a process it launched would write into the file descriptors capfd reads
    status = main(["train", "--preset", "tiny", "--num_processes", "2", "--output_dir", str(tmp_path / "r"), *extra])
    err = capfd.readouterr().err
    assert status == 2 and "Traceback" not in err, err[-2000:]
    assert re.search(message, err)
    assert "accelerate" not in err.lower()  # nothing was launched
    assert not (tmp_path / "r").exists()


@pytest.mark.real_model
def test_the_launcher_checks_the_configs_that_run(tmp_path):
    """The launcher's preflight is the run's own check (`plan_run`) on the same parsed configs: the README's preset
    (GRPO, group_size 4 from the preset) and a GRPO run with --group_size pass it; it used to refuse every GRPO run
    ("GRPO needs group_size >= 2 ... got 1": the check never saw the GRPO options)."""
    preflight(parse_train_args(["--preset", "imdb-quick", "--output_dir", str(tmp_path / "a")]), 2)
    preflight(parse_train_args(["--preset", "tiny", "--learner", "grpo", "--group_size", "2",
                                "--output_dir", str(tmp_path / "b")]), 2)
    assert not any(tmp_path.iterdir())  # checked, nothing written


@pytest.mark.slow
def test_a_grpo_run_trains_through_the_launcher(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainers.cli", "train", "--preset", "tiny", "--num_processes", "2",
                           "--learner", "grpo", "--group_size", "2", "--num_iterations", "1",
                           "--output_dir", str(tmp_path / "g")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((tmp_path / "g" / "metrics.jsonl").read_text().splitlines()) == 1


def test_existing_run_is_refused_before_launching(tmp_path, capfd):
    from trainers.cli import main

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".cory-run").write_text("")  # a run's marker: a bare config.yaml is no run of cory's
    (tmp_path / "r" / "config.yaml").write_text("seed: 0\n")
    status = main(["train", "--preset", "tiny", "--num_processes", "2", "--output_dir", str(tmp_path / "r")])
    err = capfd.readouterr().err
    assert status == 2 and "already holds a run" in err and "Traceback" not in err


def test_sigint_to_the_cory_process_stops_every_worker_with_a_checkpoint(tmp_path):
    run = tmp_path / "sig"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    proc = subprocess.Popen([sys.executable, "-m", "trainers.cli", "train", *COMMON, "--num_iterations", "500",
                             "--batch_size", "2", "--mini_batch_size", "2", "--output_dir", str(run),
                             "--num_processes", "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (run / "metrics.jsonl").exists():
            time.sleep(0.5)
        assert (run / "metrics.jsonl").exists(), "training did not start"
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len([w for w in workers if "trainers.cli" in " ".join(w.cmdline())]) >= 2
        proc.send_signal(signal.SIGINT)  # the cory process only, as `kill -INT <pid>` does
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]  # nothing orphaned
    done = [r["iteration"] for r in read_jsonl(run / "metrics.jsonl")]
    assert 0 < len(done) < 500
    latest = json.loads((latest_checkpoint(run) / "trainer_state.json").read_text())
    assert latest["iteration"] == done[-1]  # the stop wrote a checkpoint of the last finished iteration
