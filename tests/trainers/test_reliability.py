"""Reliability: bad inputs across layers, Ctrl-C, kills and full disks during checkpoints, exact resume, a soak run.

Every rejected input here is listed in docs/errors.md with the test that backs it.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import yaml

from agents import LLMAgent
from agents.tiny import tiny_causal_lm, tiny_tokenizer
from cory_env import BatchedCORYEnv, raw_env
from cory_env.rewards import RewardFunctionError
from cory_env.tasks.base import Task
from trainers.cli import main
from trainers.config.parser import load_yaml_config, parse_train_args
from trainers.loop import checkpoint as ckpt
from trainers.loop.checkpoint import CheckpointError, latest_checkpoint
from trainers.loop.cory import CORYTrainer
from trainers.loop.metrics import METRICS_FILE, read_jsonl

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
TINY = ["--preset", "tiny", "--torch_threads", "1"]
SMALL = ["--batch_size", "2", "--mini_batch_size", "2", "--ppo_epochs", "1", "--min_new_tokens", "2",
         "--max_new_tokens", "3"]  # the cheapest iteration: these tests are about stopping and resuming


def _strip(rows):
    """Metrics without wall-clock and process-size keys (those differ between identical runs)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows]


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the training subprocess exited early ({proc.returncode}):\n"
                                 f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the training subprocess")
        time.sleep(0.05)


def _metric_lines(run: Path) -> int:
    path = run / METRICS_FILE
    return len(path.read_text().splitlines()) if path.exists() else 0


# ---------------------------------------------------------------------------------------------- bad input gaps
def _finish_episode(benv: BatchedCORYEnv):
    benv.reset(seed=0)
    while not benv.done:
        _, rewards, *_ = benv.step(np.full(benv.batch_size, 5, dtype=np.int64))
    return rewards


def test_reward_ints_and_bools_are_accepted_as_floats(tiny_tok):
    rewards = _finish_episode(BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, min_new_tokens=1, max_new_tokens=1,
                                             reward_fn=lambda q, r: [True] + [1] * (len(r) - 1)))
    assert rewards["pioneer"].dtype == np.float64 and rewards["pioneer"].tolist() == [2.0, 2.0]


@pytest.mark.parametrize(("returned", "match"), [
    (lambda n: torch.ones(n, device="meta"), r"returned a tensor on device meta; return CPU numbers \(call \.cpu\(\)"),
    (lambda n: ["good"] * n, r"returned list \['good'.*not a sequence of numbers"),
    (lambda n: None, r"returned NoneType None, not a sequence of numbers"),
    (lambda n: 1.0, r"returned float 1.0, not a sequence of numbers"),
])
def test_reward_that_is_not_cpu_numbers_is_refused(tiny_tok, returned, match):
    benv = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, min_new_tokens=1, max_new_tokens=1,
                          reward_fn=lambda q, r: returned(len(r)))
    with pytest.raises(RewardFunctionError, match=match):
        _finish_episode(benv)


def test_reward_cpu_tensor_is_accepted(tiny_tok):
    rewards = _finish_episode(BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2, min_new_tokens=1, max_new_tokens=1,
                                             reward_fn=lambda q, r: torch.full((len(r),), 0.5)))
    assert rewards["observer"].tolist() == [1.0, 1.0]


def test_query_that_is_not_valid_unicode(tiny_tok):
    env = BatchedCORYEnv(tokenizer=tiny_tok, batch_size=2)
    with pytest.raises(ValueError, match=r"query text is not valid Unicode \(surrogates not allowed at character 2: "
                                         r"'\\ud800'\)"):
        env.reset(options={"queries": ["fine", "ab\ud800c"]})


@pytest.mark.parametrize(("name", "content"), [
    ("empty.jsonl", ""), ("blank.jsonl", "\n\n"), ("torn.jsonl", '{"question": "1+1?", "ans'),
    ("empty.csv", ""), ("header_only.csv", "question,answer\n"),
])
def test_data_file_without_usable_rows(tmp_path, name, content):
    from cory_env.tasks.imdb_data import load_imdb_records
    from cory_env.tasks.gsm8k import load_gsm8k

    path = tmp_path / name
    path.write_text(content)
    for loader in (load_gsm8k, load_imdb_records):
        with pytest.raises(ValueError, match=rf"{name}.*(has no rows or is not valid|not valid JSON)"):
            loader(path)


def test_task_without_records():
    with pytest.raises(ValueError, match="task 'none' has no records"):
        Task(name="none", records=[], reward_fn=lambda q, r: [0.0] * len(r), observer_template="{query}{response}")


@pytest.mark.parametrize(("text", "match"), [
    ("learning_rate: fast\n", r"option learning_rate must be float, got 'fast' \(str\)"),
    ("use_lora: 'yes'\n", r"option use_lora must be bool, got 'yes' \(str\)"),
    ("batch_size: 2.5\n", r"option batch_size must be int, got 2.5 \(float\)"),
    ("- batch_size: 4\n", r"expected a mapping of option: value, got list"),
])
def test_config_yaml_wrong_type(tmp_path, text, match):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_yaml_config(bad)


def test_cli_reports_bad_yaml_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: fast\n")
    assert main(["train", "--config", str(bad), "--output_dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "learning_rate" in err and "Traceback" not in err and not (tmp_path / "r").exists()


def test_resume_with_changed_config_names_old_and_new_values(tiny_run):
    CORYTrainer(tiny_run("y", num_iterations=1)).train()
    with pytest.raises(ValueError, match=r"learning_rate: 0\.001 -> 0\.5.*--config"):
        CORYTrainer(tiny_run("y", num_iterations=2, resume=True, learning_rate=0.5))


@pytest.fixture(scope="module")
def tok400():
    """A tiny tokenizer with another vocabulary (V = 400)."""
    return tiny_tokenizer(vocab_size=400)


def test_resume_with_another_vocabulary_is_refused(tiny_run, tok400):
    CORYTrainer(tiny_run("v", num_iterations=1)).train()
    with pytest.raises(CheckpointError, match=r"was written for the vocabulary sizes \{'llm1': 384, 'llm2': 384\}, this "
                                              r"run's models have \{'llm1': 400, 'llm2': 400\}"):
        CORYTrainer(tiny_run("v", num_iterations=2, resume=True), model=tiny_causal_lm(tok400), tokenizer=tok400)


def test_act_refuses_observations_it_cannot_have_come_from_its_env(tiny_tok, tiny_model, tok400):
    agent = LLMAgent(tiny_model, tiny_tok)
    foreign = raw_env(tokenizer=tok400)
    foreign.reset(seed=0)
    with pytest.raises(ValueError, match=r"vocabulary mismatch: the env's action space has 400 tokens but the model "
                                         r"outputs 384 logits"):
        agent.act(foreign.observe("pioneer"))
    own = raw_env(tokenizer=tiny_tok)
    own.reset(seed=0)
    obs = own.observe("pioneer")
    shifted = {**obs, "input_ids": obs["input_ids"] + 390}  # right shapes, ids of a bigger vocabulary
    with pytest.raises(ValueError, match=r"input_ids hold token ids in \[390, \d+\], outside the model's vocabulary "
                                         r"\[0, 384\); was the observation made with another tokenizer\?"):
        agent.act(shifted)
    with pytest.raises(TypeError, match="input_ids must hold integer token ids, got dtype float64"):
        agent.act({**obs, "input_ids": obs["input_ids"].astype(np.float64)})
    with pytest.raises(ValueError, match=r"must both be \(B, L\), got \(1, 1, 128\)"):
        agent.act({k: v[None] for k, v in obs.items()})  # a batched observation given to the AEC act
    with pytest.raises(KeyError, match="attention_mask"):
        agent.act({"input_ids": obs["input_ids"], "action_mask": obs["action_mask"]})
    assert 0 <= agent.act(obs) < 384  # the agent still works after refusing


def test_checkpoint_of_another_model_is_refused_before_any_weight_changes(tiny_run):
    configs = tiny_run("m", num_iterations=1)
    CORYTrainer(configs).train()
    path = latest_checkpoint(configs.run.output_dir)
    tok = tiny_tokenizer()
    other = CORYTrainer(tiny_run("other", num_iterations=1), model=tiny_causal_lm(tok, hidden_size=48),
                        tokenizer=tok)
    bundle = other.exchange.bundles["llm1"]
    before = {n: p.clone() for n, p in bundle.agent.named_parameters()}
    with pytest.raises(CheckpointError, match=r"has shape .* in the checkpoint but .* in the model"):
        ckpt.load_bundle(path, bundle)
    assert all(torch.equal(before[n], p) for n, p in bundle.agent.named_parameters())


@pytest.mark.parametrize("damage", ["torn_state", "torn_weights", "missing_learner", "not_a_checkpoint"])
def test_damaged_checkpoint_raises_checkpoint_error(tiny_run, damage):
    configs = tiny_run("d", num_iterations=1)
    CORYTrainer(configs).train()
    path = latest_checkpoint(configs.run.output_dir)
    if damage == "torn_state":
        text = (path / "trainer_state.json").read_text()
        (path / "trainer_state.json").write_text(text[: len(text) // 2])
        match = "is not valid JSON"
    elif damage == "torn_weights":
        data = (path / "llm2" / "trainable.safetensors").read_bytes()
        (path / "llm2" / "trainable.safetensors").write_bytes(data[: len(data) // 2])
        match = "not a readable safetensors file"
    elif damage == "missing_learner":
        (path / "llm1" / "learner.pt").unlink()
        match = "learner.pt is missing"
    else:
        (path / "trainer_state.json").write_text(json.dumps({"hello": 1}))
        match = "not a cory checkpoint"
    with pytest.raises(CheckpointError, match=match):
        CORYTrainer(tiny_run("d", num_iterations=2, resume=True))


def test_broken_latest_pointer_falls_back_to_newest_complete_checkpoint(tiny_run, tmp_path):
    configs = tiny_run("p", num_iterations=3, checkpoint_every=1, keep_checkpoints=3)
    CORYTrainer(configs).train()
    root = tmp_path / "p" / "checkpoints"
    (root / "latest").write_text("iter-000099")
    assert latest_checkpoint(tmp_path / "p") == root / "iter-000002"
    (root / "latest").unlink()
    (root / "iter-000002" / "trainer_state.json").unlink()  # an incomplete folder is never chosen
    assert latest_checkpoint(tmp_path / "p") == root / "iter-000001"


# ---------------------------------------------------------------------------------------------- crash safety
@pytest.mark.parametrize("where", ["weights", "optimizer", "rename"])
def test_disk_full_keeps_previous_checkpoint_and_leaves_no_temp(tiny_run, tmp_path, monkeypatch, where):
    configs = tiny_run("full", num_iterations=3, checkpoint_every=1)
    trainer = CORYTrainer(configs)
    calls = {"n": 0}
    target = {"weights": (ckpt, "save_file"), "optimizer": (ckpt.torch, "save"), "rename": (ckpt.os, "replace")}
    module, name = target[where]
    real = getattr(module, name)
    per_checkpoint = {"weights": 2, "optimizer": 3, "rename": 2}[where]  # calls made by the first checkpoint

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > per_checkpoint:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, failing)
    with pytest.raises(OSError, match=r"writing checkpoint .*iter-000001 failed: No space left on device \(disk "
                                      r"full.*the last good checkpoint is .*iter-000000") as info:
        trainer.train()
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(module, name, real)
    root = tmp_path / "full" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["iter-000000", "latest"]
    resumed = CORYTrainer(tiny_run("full", num_iterations=2, checkpoint_every=1, resume=True))
    assert resumed.start_iteration == 1 and len(resumed.train()) == 1


def test_cli_disk_full_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt, "save_file", full)
    assert main(["train", *TINY, "--output_dir", str(tmp_path / "r"), "--num_iterations", "1",
                 "--tensorboard", "false"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device (disk full" in err and "Traceback" not in err
    assert not list((tmp_path / "r" / "checkpoints").glob(".tmp-*"))


def _cory_under_a_file_size_limit(args, kib):
    """`cory ARGS` in a subprocess whose files may not grow past `kib` KiB (``ulimit -f``, RLIMIT_FSIZE): a write
    past it fails with EFBIG, as a full disk fails with ENOSPC, in every library that writes."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "trainers.cli", *args], env=ENV, cwd=REPO_ROOT, text=True,
                          capture_output=True, timeout=600, preexec_fn=limit)


@pytest.mark.slow
def test_every_write_that_fails_on_a_file_size_limit_is_one_line_naming_the_file(tmp_path):
    """A real write failure (not a mocked OSError): safetensors and torch.save lose the errno and would print two
    tracebacks; every writer (checkpoint, metrics, samples, eval, export) ends in one line naming what failed."""
    run = ["train", *TINY, *SMALL, "--tensorboard", "false", "--num_iterations", "3"]
    cases = {  # what is written past the limit first -> the words of the one line
        "checkpoint": (run + ["--output_dir", str(tmp_path / "ck")], 16,
                       "writing checkpoint .*iter-000002 failed: File too large \\(a file-size limit"),
        "metrics": (run + ["--output_dir", str(tmp_path / "me"), "--log_samples", "0", "--checkpoint_every", "0"], 2,
                    "File too large \\(a file-size limit, `ulimit -f`: raise it\\): '.*metrics.jsonl'"),
        "samples": (run + ["--output_dir", str(tmp_path / "sa"), "--batch_size", "64", "--mini_batch_size", "16",
                           "--log_samples", "64", "--checkpoint_every", "0"],  # 64 rows: ~11 KiB, metrics ~4 KiB
                    8, "File too large .*: '.*samples.jsonl'")}
    for kind, (args, kib, message) in cases.items():
        out = _cory_under_a_file_size_limit(args, kib)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (kind, out.stderr[-3000:])
        assert re.search(message, out.stderr.strip().splitlines()[-1]), (kind, out.stderr[-1000:])
    assert not list((tmp_path / "ck" / "checkpoints").glob(".tmp-*"))
    trained = tmp_path / "trained"
    assert main([*run, "--output_dir", str(trained), "--num_iterations", "1"]) == 0
    for kind, args, kib, written in (("eval", ["eval", str(trained), "--out", str(tmp_path / "e.json")], 1,
                                      tmp_path / "e.json"),
                                     ("export", ["export", str(trained), "--out", str(tmp_path / "x")], 16,
                                      tmp_path / "x")):
        out = _cory_under_a_file_size_limit(args, kib)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (kind, out.stderr[-3000:])
        assert out.stderr.strip().splitlines()[-1].endswith(f"(a file-size limit, `ulimit -f`: raise it): "
                                                            f"'{written}'"), (kind, out.stderr[-1000:])
        assert not written.exists()  # nothing half-written is left


KILL_WRAPPER = '''
import os, sys, time
import trainers.loop.checkpoint as ckpt
real, calls = ckpt.save_file, [0]

def slow_save_file(tensors, path, *args, **kwargs):
    calls[0] += 1
    real(tensors, path, *args, **kwargs)
    if calls[0] > int(os.environ["SLOW_AFTER"]):  # mid-checkpoint: one bundle written, the next not
        open(os.environ["MARKER"], "w").close()
        time.sleep(600)

ckpt.save_file = slow_save_file
from trainers.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "writing"
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(KILL_WRAPPER)
    proc = subprocess.Popen(
        [sys.executable, str(wrapper), "train", *TINY, *SMALL, "--output_dir", str(run), "--num_iterations", "6",
         "--checkpoint_every", "2", "--tensorboard", "false"],
        env={**ENV, "SLOW_AFTER": "2", "MARKER": str(marker)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        _wait_for(marker.exists, proc)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    root = run / "checkpoints"
    assert (root / "latest").read_text() == "iter-000001"
    assert [p.name for p in root.glob(".tmp-iter-000003-*")], "the killed write left its temporary folder"
    assert latest_checkpoint(run) == root / "iter-000001"
    # the previous checkpoint loads and resumes exactly: same metrics as a run never interrupted
    resumed = CORYTrainer(parse_train_args(["--config", str(run / "config.yaml"), "--resume",
                                             "--num_iterations", "4"]))
    assert resumed.start_iteration == 2
    rest = resumed.train()
    assert not list(root.glob(".tmp-*")), "the next save removes the killed write's temporary folder"
    full = CORYTrainer(parse_train_args(["--config", str(run / "config.yaml"), "--num_iterations", "4",
                                          "--output_dir", str(tmp_path / "full")])).train()
    assert _strip(rest) == _strip(full[2:])
    assert [r["iteration"] for r in read_jsonl(run / METRICS_FILE)] == [0, 1, 2, 3]


@pytest.mark.slow
def test_ctrl_c_saves_exits_130_and_resumes_exactly(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "trainers.cli", "train", *TINY, *SMALL, "--output_dir", str(run),
                             "--num_iterations", "500"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _metric_lines(run) >= 2, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "SIGINT received" in err and "resume with --resume" in err and "Traceback" not in err
    last = json.loads(out)["last_iteration"]
    assert 1 <= last < 499
    assert latest_checkpoint(run).name == f"iter-{last:06d}"
    assert [r["iteration"] for r in read_jsonl(run / METRICS_FILE)] == list(range(last + 1))
    # resume (as `cory train --config RUN/config.yaml --resume` does) and compare with a run never interrupted
    total = last + 3
    CORYTrainer(parse_train_args(["--config", str(run / "config.yaml"), "--resume",
                                   "--num_iterations", str(total)])).train()
    CORYTrainer(parse_train_args(["--config", str(run / "config.yaml"), "--num_iterations",
                                   str(total), "--output_dir", str(tmp_path / "full")])).train()
    assert _strip(read_jsonl(run / METRICS_FILE)) == _strip(read_jsonl(tmp_path / "full" / METRICS_FILE))


class _SignalsItself(CORYTrainer):
    """Sends `signum` to its own process during iteration 1 (as a scheduler or Ctrl-C would)."""

    signum = signal.SIGTERM

    def iteration(self, it):
        if it == 1:
            os.kill(os.getpid(), self.signum)
        return super().iteration(it)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_in_process_checkpoints_and_restores_handlers(tiny_run, tmp_path, signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    trainer = _SignalsItself(tiny_run("sig", num_iterations=50))
    trainer.signum = signum
    rows = trainer.train()
    assert [r["iteration"] for r in rows] == [0, 1] and trainer.last_checkpoint_iteration == 1
    assert latest_checkpoint(tmp_path / "sig").name == "iter-000001"
    assert {s: signal.getsignal(s) for s in before} == before
    resumed = CORYTrainer(tiny_run("sig", num_iterations=3, resume=True))
    assert resumed.start_iteration == 2 and len(resumed.train()) == 1


# ---------------------------------------------------------------------------------------------- soak
class _Probe(CORYTrainer):
    """Records the process's file descriptors and threads after every iteration."""

    def iteration(self, it):
        metrics, samples = super().iteration(it)
        proc = psutil.Process()
        self.probe.append((proc.num_fds(), proc.num_threads()))
        return metrics, samples


@pytest.mark.slow
def test_soak_200_iterations_no_growth(tiny_run, tmp_path):
    configs = tiny_run("soak", num_iterations=200, role_exchange_period=5, checkpoint_every=25,
                       tensorboard=True, log_samples=1, batch_size=2, mini_batch_size=2, ppo_epochs=1,
                       min_new_tokens=2, max_new_tokens=3)
    proc = psutil.Process()
    fds_before = proc.num_fds()
    trainer = _Probe(configs)
    trainer.probe = []
    start = time.perf_counter()
    rows = trainer.train()
    wall = time.perf_counter() - start
    warm = 20
    rss = [r["sys/rss_gb"] for r in rows]
    fds, threads = zip(*trainer.probe)
    logger.info("soak: %d iterations in %.1f s; RSS %.1f MiB after warm-up, %.1f MiB max after, %.1f MiB at the "
                "end; fds %d..%d; threads %d..%d", len(rows), wall, rss[warm] * 1024, max(rss[warm:]) * 1024,
                rss[-1] * 1024, min(fds[warm:]), max(fds[warm:]), min(threads[warm:]), max(threads[warm:]))
    assert len(rows) == 200
    assert max(rss[warm:]) <= 1.10 * rss[warm], f"RSS grew from {rss[warm]:.4f} GiB to {max(rss[warm:]):.4f} GiB"
    assert max(fds[warm:]) <= fds[warm], f"file descriptors grew: {fds[warm]} -> {max(fds[warm:])}"
    assert max(threads[warm:]) <= threads[warm], f"threads grew: {threads[warm]} -> {max(threads[warm:])}"
    # the logger and the TensorBoard writer are closed; libraries may keep one lazily started helper thread
    # (e.g. tqdm's monitor), so threads compare with the steady state, not with the count before training
    assert proc.num_fds() <= fds_before and proc.num_threads() <= threads[warm]
    for row in rows:
        bad = {k: v for k, v in row.items() if not (isinstance(v, (int, float)) and math.isfinite(v))}
        assert not bad, f"non-finite metrics at iteration {row['iteration']}: {bad}"
    written = read_jsonl(tmp_path / "soak" / METRICS_FILE)
    assert [r["iteration"] for r in written] == list(range(200))
    kept = sorted(p.name for p in (tmp_path / "soak" / "checkpoints").iterdir())
    assert kept == ["iter-000174", "iter-000199", "latest"]
    assert yaml.safe_load((tmp_path / "soak" / "config.yaml").read_text())["num_iterations"] == 200


# ---------------------------------------------------------------------------------------------- run logs
def test_resume_purges_tensorboard_steps_after_the_checkpoint(tiny_run, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    configs = tiny_run("tb", num_iterations=3, checkpoint_every=2, keep_checkpoints=2, tensorboard=True)
    CORYTrainer(configs).train()
    root = tmp_path / "tb" / "checkpoints"
    (root / "latest").write_text("iter-000001")  # as if killed after logging iteration 2, before its checkpoint
    resumed = CORYTrainer(tiny_run("tb", num_iterations=3, checkpoint_every=2, tensorboard=True, resume=True))
    assert resumed.start_iteration == 2
    resumed.train()
    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("pioneer/task_reward")] == [0, 1, 2]
    assert [r["iteration"] for r in read_jsonl(tmp_path / "tb" / METRICS_FILE)] == [0, 1, 2]


def test_metrics_logger_survives_odd_text_and_double_close(tmp_path):
    from trainers.loop.metrics import SAMPLES_FILE, MetricsLogger

    with MetricsLogger(tmp_path, tensorboard=False) as log:
        log.log(0, {"a/b": float("nan"), "c/d": 1.0})
        log.log_samples(0, [{"query": "lone surrogate \ud800 and emoji \U0001F600", "reward": 1.0}])
    log.close()  # idempotent
    assert read_jsonl(tmp_path / METRICS_FILE) == [{"iteration": 0, "a/b": "nan", "c/d": 1.0}]
    sample = read_jsonl(tmp_path / SAMPLES_FILE)[0]
    assert sample["query"] == "lone surrogate \ud800 and emoji \U0001F600"


def test_a_run_that_cannot_write_its_checkpoints_stops_before_training(tiny_run, monkeypatch):
    """A --resume into a read-only checkpoints/ trained 2 iterations, then failed to write."""
    import tempfile

    from trainers.loop import run_dir

    CORYTrainer(tiny_run("ro", num_iterations=1)).train()
    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's keyword
        if Path(dir).name == ckpt.CHECKPOINT_DIR:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(run_dir.tempfile, "mkstemp", read_only)
    with pytest.raises(OSError, match=r"cannot write into .*checkpoints \(Permission denied\): the run could not "
                                      r"save its checkpoints"):
        CORYTrainer(tiny_run("ro", num_iterations=3, resume=True))
    assert [r["iteration"] for r in read_jsonl(Path(tiny_run("ro").run.output_dir) / METRICS_FILE)] == [0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_run_folder_is_refused_before_training(tiny_run):
    configs = tiny_run("chmod", num_iterations=1)
    CORYTrainer(configs).train()
    folder = Path(configs.run.output_dir) / ckpt.CHECKPOINT_DIR
    folder.chmod(0o555)
    try:
        with pytest.raises(OSError, match="cannot write into"):
            CORYTrainer(tiny_run("chmod", num_iterations=2, resume=True))
    finally:
        folder.chmod(0o755)


def test_time_based_checkpoints(tiny_run):
    configs = tiny_run("timed", num_iterations=3, checkpoint_every_minutes=1e-9, keep_checkpoints=5)
    CORYTrainer(configs).train()
    root = Path(configs.run.output_dir) / ckpt.CHECKPOINT_DIR
    assert sorted(p.name for p in root.glob("iter-*")) == ["iter-000000", "iter-000001", "iter-000002"]
    off = tiny_run("untimed", num_iterations=3, checkpoint_every_minutes=0, keep_checkpoints=5)
    CORYTrainer(off).train()
    assert [p.name for p in (Path(off.run.output_dir) / ckpt.CHECKPOINT_DIR).glob("iter-*")] == ["iter-000002"]


class _FlakyReward:
    """Counts its calls; raises on call `fail_at` (1-based), else scores response lengths."""

    def __init__(self, fail_at=None):
        self.calls, self.fail_at = 0, fail_at

    def __call__(self, queries, responses):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("reward server went away")
        return [float(len(r)) for r in responses]


def test_a_failure_in_the_rollout_keeps_the_iteration_before(tiny_run):
    """With the default checkpoint_every 0 a late failure lost every iteration; a rollout failure (reward, data) now
    saves the last finished iteration first, and the resume continues exactly."""
    full = CORYTrainer(tiny_run("whole", num_iterations=4, checkpoint_every_minutes=0),
                       reward_fn=_FlakyReward()).train()
    flaky = _FlakyReward(fail_at=3)  # the third iteration's rewards
    with pytest.raises(RewardFunctionError, match="reward server went away"):
        CORYTrainer(tiny_run("flaky", num_iterations=4, checkpoint_every_minutes=0), reward_fn=flaky).train()
    resumed = CORYTrainer(tiny_run("flaky", num_iterations=4, checkpoint_every_minutes=0, resume=True),
                          reward_fn=_FlakyReward())
    assert resumed.start_iteration == 2
    rows = resumed.train()
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "sys/"))} for r in rows]  # noqa: E731
    assert strip(rows) == strip(full[2:])
