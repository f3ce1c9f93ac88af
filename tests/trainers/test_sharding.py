"""FSDP2-sharded training (``--sharding fsdp``, trainers.loop.sharding) on CPU with gloo, 2 processes, tiny model.

The sharded run must be the replicated data-parallel run: after every update the full (gathered) parameters equal
the replicated run's within 1e-5 (the two differ only in how a gradient is averaged, a reduce-scatter instead of
an all-reduce of the same two numbers; measured on gloo: 0.0), every logged metric within the data-parallel tests'
tolerance, checkpoints in one format (``cory export`` / ``from_pretrained`` read them), exact resume, and a
SIGKILL mid-run leaves the last checkpoint loadable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from trainers.cli import main as cory_main
from trainers.config import CORYConfig
from trainers.learning.registry import learner_spec, register_learner
from trainers.loop.checkpoint import latest_checkpoint
from trainers.loop.metrics import read_jsonl
from trainers.loop.sharding import check_sharding, full_state, shard_like, sharded_optimizer_state

from tests.trainers.test_distributed import COMMON, _assert_same_metrics, _compared_keys, _run, _worker

GATHER_WORKER = Path(__file__).with_name("fsdp_gather_worker.py")
PARAM_TOL = 1e-5


def _env() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    return env


# ------------------------------------------------------------------------------------------------ refused settings
@pytest.mark.parametrize("kwargs, message", [
    ({"sharding": "fsdp", "world_size": 1, "use_lora": False}, "needs at least 2"),
    ({"sharding": "fsdp", "world_size": 2, "use_lora": True}, "--use_lora true with --sharding none"),
    ({"sharding": "zero3", "world_size": 2, "use_lora": False}, "sharding must be one of"),
])
def test_unsupported_shardings_are_refused_with_the_fix(kwargs, message):
    sharding = kwargs.pop("sharding")
    with pytest.raises(ValueError, match=message):
        check_sharding(sharding, **kwargs)


def test_supported_shardings_pass():
    check_sharding("none", world_size=1, use_lora=True)
    check_sharding("fsdp", world_size=2, use_lora=False)


def test_config_names_an_unknown_sharding():
    with pytest.raises(ValueError, match="sharding"):
        CORYConfig(sharding="zero3")


def test_a_learner_without_sharding_support_is_refused_only_when_sharded(registries):
    def factory(agent, ref_model, config, dist=None):  # pragma: no cover - never built
        raise AssertionError

    def check(name, sharded):
        spec = learner_spec(name)
        spec.check_run(spec.args(), name=name, sharded=sharded)

    register_learner("no_shard_test", factory)
    check("no_shard_test", sharded=False)  # replicated: fine
    with pytest.raises(ValueError, match="supports_sharding=True"):
        check("no_shard_test", sharded=True)
    register_learner("no_shard_test", factory, supports_sharding=True, overwrite=True)
    check("no_shard_test", sharded=True)
    for name in ("ppo", "grpo", "mappo", "magrpo"):
        check(name, sharded=True)


@pytest.mark.parametrize("extra, message", [
    ([], "needs at least 2"),
    (["--num_processes", "2", "--use_lora", "true"], "--use_lora true with --sharding none"),
])
def test_cli_refuses_before_any_model_loads_or_process_starts(tmp_path, capsys, extra, message):
    code = cory_main(["train", "--preset", "tiny", "--sharding", "fsdp", "--output_dir", str(tmp_path / "r"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------ helpers, no shards
def test_full_state_and_shard_like_leave_plain_tensors_alone():
    t = torch.arange(6.0).reshape(2, 3)
    nested = {"a": [t, (t, 3)], "b": {"c": t}, "d": "x"}
    out = full_state(nested)
    assert out["a"][0] is t and out["a"][1][0] is t and out["b"]["c"] is t and out["d"] == "x"
    assert shard_like(t, torch.zeros(2, 3)) is t


def test_sharded_optimizer_state_is_the_identity_for_plain_parameters():
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 2))]
    opt = torch.optim.Adam(params, lr=0.1)
    sum(p.sum() for p in params).backward()
    opt.step()
    state = opt.state_dict()
    out = sharded_optimizer_state(state, opt)
    assert out["param_groups"] == state["param_groups"]
    assert all(out["state"][k][n] is v for k in state["state"] for n, v in state["state"][k].items())
    fewer = torch.optim.Adam(params[:1], lr=0.1)
    with pytest.raises(ValueError, match="holds 2 parameters, this optimizer 1"):
        sharded_optimizer_state(state, fewer)


def test_a_sharded_model_casts_at_every_product_again(tiny_model, monkeypatch):
    """`shard_model` turns `CastOnceLinear` layers back into plain ``nn.Linear``: a sharded weight is whole only
    during its layer's forward, and a kept bf16 copy of it would hold it whole for the run."""
    import torch.distributed.fsdp

    from agents.precision import CastOnceLinear, cast_frozen_weights_once
    from trainers.loop.sharding import shard_model

    wrapped = []
    monkeypatch.setattr(torch.distributed.fsdp, "fully_shard", lambda module, **_: wrapped.append(module))
    assert cast_frozen_weights_once(tiny_model) > 0
    shard_model(tiny_model, mesh=None)
    assert wrapped[-1] is tiny_model
    assert not any(isinstance(m, CastOnceLinear) for m in tiny_model.modules())
    assert any(type(m) is torch.nn.Linear for m in tiny_model.modules())


# ------------------------------------------------------------------------------------------------ two processes
def test_agents_acting_different_step_counts_do_not_wait_on_each_other(tmp_path):
    proc = _run(["torchrun", "--nproc_per_node", "2", "--master_port", str(_port()), str(GATHER_WORKER)], tmp_path)
    rows = sorted((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])
    assert [r["steps"] for r in rows] == [[2, 1], [5, 3]]
    assert all(r["same"] and r["resharded"] for r in rows)


def _port() -> int:
    from trainers.cli.launch import free_port

    return free_port()


ARMS = {
    "cory-ppo-reset-on-exchange": ["--role_exchange_period", "2", "--reset_on_exchange", "true"],
    "cory-ppo-checkpointing-bf16": ["--role_exchange_period", "2", "--gradient_checkpointing", "true", "--dtype",
                                    "bfloat16"],
    "ppo": ["--algo", "ppo"],
    "ppo-accumulation-adaptive-kl": ["--algo", "ppo", "--mini_batch_size", "1", "--gradient_accumulation_steps", "2",
                                     "--ppo_epochs", "2", "--adap_kl_ctrl", "true"],
    # top_k 0 (plain sampling): with COMMON's greedy top_k 1 a group's two samples are one answer, its advantages 0
    # and the weights would not move (found on a second machine, where nothing else broke the tie)
    "ppo-grpo": ["--algo", "ppo", "--learner", "grpo", "--group_size", "2", "--top_k", "0"],
}


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_sharded_run_equals_the_replicated_run_after_every_update(tmp_path, arm):
    extra = ["--batch_size", "2", "--mini_batch_size", "2", *ARMS[arm]]
    replicated = _worker(tmp_path, "replicated", 2, [*extra, "--sharding", "none"],
                         ("--dump_params", str(tmp_path / "replicated.pt")))
    sharded = _worker(tmp_path, "sharded", 2, [*extra, "--sharding", "fsdp"],
                      ("--dump_params", str(tmp_path / "sharded.pt")))
    assert replicated["local_param_fraction"] == 1.0
    assert 0.45 < sharded["local_param_fraction"] < 0.55  # each process holds half of every model
    a, b = torch.load(tmp_path / "replicated.pt"), torch.load(tmp_path / "sharded.pt")
    updates = 3 * (2 if arm.startswith("cory") else 1)  # the worker records after each learner step
    assert len(a) == len(b) == updates
    moved = max(float((x - a[0]).abs().max()) for x in a[1:]) if len(a) > 1 else 1.0
    assert moved > 1e-4  # the weights changed, so equal weights are not two copies of the start
    for x, y in zip(a, b):
        assert x.shape == y.shape and float((x - y).abs().max()) <= PARAM_TOL
    _assert_same_metrics(replicated["history"], sharded["history"], min_keys=20)
    # one checkpoint format: whole tensors, the same names, the same values
    for name in ("llm1", "llm2") if arm.startswith("cory") else ("llm1",):
        ck_r = load_file(str(latest_checkpoint(tmp_path / "replicated") / name / "trainable.safetensors"))
        ck_s = load_file(str(latest_checkpoint(tmp_path / "sharded") / name / "trainable.safetensors"))
        assert ck_r.keys() == ck_s.keys()
        assert max(float((ck_r[k] - ck_s[k]).abs().max()) for k in ck_r) <= PARAM_TOL
        opt_r = torch.load(latest_checkpoint(tmp_path / "replicated") / name / "learner.pt")
        opt_s = torch.load(latest_checkpoint(tmp_path / "sharded") / name / "learner.pt")
        assert opt_r["param_groups"] == opt_s["param_groups"]
        for key, moments in opt_r["state"].items():
            if key not in opt_s["state"]:  # a parameter without a gradient (GRPO's unused value head): the replicated
                assert all(not v.any() for f, v in moments.items() if f != "step")  # mode steps zeros, FSDP2 skips
                continue
            for field, value in moments.items():
                assert value.shape == opt_s["state"][key][field].shape
                assert float((value.float() - opt_s["state"][key][field].float()).abs().max()) <= PARAM_TOL


def test_sharded_resume_continues_exactly_and_exports_for_from_pretrained(tmp_path, capsys):
    base = [sys.executable, "-m", "trainers.cli", "train", *COMMON, "--batch_size", "2", "--mini_batch_size", "2",
            "--role_exchange_period", "3", "--num_processes", "2", "--sharding", "fsdp"]
    _run([*base, "--output_dir", str(tmp_path / "part"), "--num_iterations", "2"], tmp_path)
    # a resume that changes the sharding is one line before any process starts (the launcher's preflight)
    assert cory_main([*base[3:], "--output_dir", str(tmp_path / "part"), "--num_iterations", "4", "--resume",
                      "--sharding", "none"]) == 2
    err = capsys.readouterr().err
    assert "sharding: 'fsdp' -> 'none'" in err and "Traceback" not in err and err.count("cannot resume") == 1
    _run([*base, "--output_dir", str(tmp_path / "part"), "--num_iterations", "4", "--resume"], tmp_path)
    out = _run([*base, "--output_dir", str(tmp_path / "whole"), "--num_iterations", "4", "--eval_episodes", "4"],
               tmp_path)
    # the before/after evaluation runs on every process (sharded forwards), the main one reports it once
    assert (tmp_path / "whole" / "eval.json").is_file() and out.stdout.count('"output_dir"') == 1
    part, whole = read_jsonl(tmp_path / "part" / "metrics.jsonl"), read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    assert [r["iteration"] for r in part] == [r["iteration"] for r in whole] == [0, 1, 2, 3]
    for resumed, uninterrupted in zip(part[2:], whole[2:]):
        for key in _compared_keys(uninterrupted):
            assert resumed[key] == pytest.approx(uninterrupted[key], rel=1e-5, abs=1e-6, nan_ok=True), key
    last_part, last_whole = latest_checkpoint(tmp_path / "part"), latest_checkpoint(tmp_path / "whole")
    for name in ("llm1", "llm2"):
        p = load_file(str(last_part / name / "trainable.safetensors"))
        w = load_file(str(last_whole / name / "trainable.safetensors"))
        assert max(float((p[k] - w[k]).abs().max()) for k in w) <= PARAM_TOL
    # the trained pioneer as a plain transformers folder
    from transformers import AutoModelForCausalLM

    out = tmp_path / "exported"
    assert cory_main(["export", str(tmp_path / "whole"), "--model_name", "llm2", "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    saved = load_file(str(last_whole / "llm2" / "trainable.safetensors"))
    state = model.state_dict()
    lm = {k[len("model."):]: v for k, v in saved.items() if k.startswith("model.")}
    assert lm and all(torch.equal(state[k], v) for k, v in lm.items())
    assert cory_main(["export", str(tmp_path / "whole"), "--out", str(out)]) == 2  # never overwrites


def test_sigkill_mid_run_leaves_the_last_checkpoint_loadable(tmp_path):
    run = tmp_path / "killed"
    cmd = [sys.executable, "-m", "trainers.cli", "train", *COMMON, "--num_iterations", "500", "--checkpoint_every",
           "1", "--batch_size", "2", "--mini_batch_size", "2", "--output_dir", str(run), "--num_processes", "2",
           "--sharding", "fsdp"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list((run / "checkpoints").glob("iter-*"))) < 2:
            time.sleep(0.2)
        assert len(list((run / "checkpoints").glob("iter-*"))) >= 2, "no checkpoints were written"
        # the launcher and every training process (torchrun starts them in sessions of their own), mid-iteration
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len([p for p in family if "trainers.cli" in " ".join(p.cmdline())]) >= 3
        for member in family:
            member.kill()
        psutil.wait_procs(family, timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = latest_checkpoint(run)
    assert last is not None
    done = json.loads((last / "trainer_state.json").read_text())["iteration"]
    assert cory_main(["export", str(run), "--out", str(tmp_path / "exported")]) == 0  # loads whole
    _run([*cmd, "--num_iterations", str(done + 2), "--resume"], tmp_path)  # the last --num_iterations counts
    assert [r["iteration"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(done + 2))
