"""Memory and speed of FSDP2 sharding (``--sharding fsdp``) against replicated data parallelism, full fine-tuning.

Each arm is one ``cory train`` run of CORY on SmolLM2-135M-Instruct, full fine-tuning in fp32 with PPO learners
and the paper's learning rate (``--use_lora false --learner ppo --learning_rate 1.41e-5``, the
``imdb-quick`` preset otherwise), N processes with one torch thread each and the same per-process batch: one
with ``--sharding none`` (every process holds both policies, the reference model, a gradient and two Adam states
in full), one with ``--sharding fsdp``. Per arm, from ``metrics.jsonl`` (every number a mean over the processes):

* ``peak_rss_gb``: the processes' peak resident memory (``ru_maxrss``) at the end of the last iteration (the final
  checkpoint's gather on the main process comes after it and is not counted);
* ``rss_gb``: their resident memory at that moment;
* ``s_per_iteration``: ``time/rollout_s + time/update_s``, the first iteration (warm-up) left out; ``rollout_s``
  and ``update_s`` its two parts.

Beside them the model-state bytes per process, computed: weights of the two policies and the reference model,
one gradient (the learners update one model at a time and free its gradient after the step), two Adam moments per
policy, all fp32: 32 bytes per parameter replicated, 32/N sharded, plus, sharded, the one policy whose weights are
gathered whole while it generates (4 bytes per parameter; `trainers.loop.sharding.gathered_for_generation`).

``MALLOC_MMAP_THRESHOLD_`` is fixed at 1 MiB in both arms, so freed tensor memory goes back to the system and RSS
measures what is live (glibc's adaptive threshold otherwise keeps freed, gathered layers in its heap).

Run::

    python benchmarks/sharding_memory.py [--processes 2] [--iterations 3] [--batch 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/sharding_memory.py` from a clone
    sys.path.insert(0, str(REPO))
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import data_dir, recorded_command  # noqa: E402

IMDB_CSV = data_dir() / "imdb_reviews_1000.csv"  # the data folder, $CORY_SHARED_DATA (benchmarks/paths.py)
GIB = 2**30


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--batch", type=int, default=2, help="episodes per process and iteration")
    p.add_argument("--iterations", type=int, default=3, help="iterations per arm; the first is a warm-up")
    add_out_option(p, "sharding_memory.json")
    args = p.parse_args(argv)
    args.out = checked_out(p, args)  # before the runs
    return args


def run_arm(sharding: str, out_dir: Path, args: argparse.Namespace) -> dict:
    """One ``cory train`` run; its memory and speed from metrics.jsonl."""
    cmd = [sys.executable, "-m", "trainers.cli", "train", "--preset", "imdb-quick", "--model", args.model,
           "--use_lora", "false", "--learner", "ppo", "--learning_rate", "1.41e-5",
           "--batch_size", str(args.batch), "--mini_batch_size", str(args.batch),
           "--num_iterations", str(args.iterations), "--role_exchange_period", "0", "--eval_episodes", "0",
           "--torch_threads", "1", "--tensorboard", "false", "--log_samples", "0", "--output_dir", str(out_dir),
           "--num_processes", str(args.processes), "--sharding", sharding]
    if IMDB_CSV.exists():  # else the preset's data (the hub, or the built-in openings offline)
        cmd += ["--data_path", str(IMDB_CSV)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    timed = rows[1:] or rows
    return {"peak_rss_gb": rows[-1]["sys/peak_rss_gb"], "rss_gb": rows[-1]["sys/rss_gb"],
            "s_per_iteration": sum(r["time/rollout_s"] + r["time/update_s"] for r in timed) / len(timed),
            "rollout_s": sum(r["time/rollout_s"] for r in timed) / len(timed),
            "update_s": sum(r["time/update_s"] for r in timed) / len(timed)}


def parameter_count(model: str) -> int:
    from trainers.loop.loading import load_policy_model

    lm, _ = load_policy_model(model)
    return sum(p.numel() for p in lm.parameters())


def model_state_gb(params: int, processes: int) -> dict:
    """Bytes per process of weights (3 models), one gradient and two Adam states, fp32 (see the module docstring)."""
    full = 32 * params
    return {"replicated": full / GIB, "sharded": full / processes / GIB,
            "sharded_with_generation_gather": (full / processes + 4 * params) / GIB}


def main(argv=None) -> dict:
    args = parse_args(argv)
    params = parameter_count(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        arms = {s: run_arm(s, Path(tmp) / s, args) for s in ("none", "fsdp")}
    results = {"model": args.model, "parameters": params, "processes": args.processes, "batch_per_process":
               args.batch, "iterations": args.iterations, "cores": os.cpu_count(), "arms": arms,
               "model_state_gb_per_process": model_state_gb(params, args.processes),
               "peak_rss_ratio": arms["fsdp"]["peak_rss_gb"] / arms["none"]["peak_rss_gb"],
               "rss_ratio": arms["fsdp"]["rss_gb"] / arms["none"]["rss_gb"],
               "time_ratio": arms["fsdp"]["s_per_iteration"] / arms["none"]["s_per_iteration"],
               "command": recorded_command("benchmarks/sharding_memory.py", argv)}
    write_json(args.out, results, indent=2)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
