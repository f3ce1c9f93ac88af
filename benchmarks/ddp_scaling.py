"""Data-parallel scaling on one machine: seconds per CORY iteration with N processes vs one, same global batch.

Each arm is one ``cory train`` run of SmolLM2-135M-Instruct with memory-shared LoRA (the ``imdb-quick`` preset), one
torch thread per process: one process with ``--batch_size G``, then ``--num_processes N`` with ``--batch_size G/N``
each (the same global batch and queries). An iteration's seconds are ``time/rollout_s + time/update_s`` from
``metrics.jsonl`` (averaged over processes), the first iteration (warm-up) left out, the mean of the rest counted.
On a CPU the processes share the machine's cores, so the speed-up is bounded by the cores and memory bandwidth.

Run::

    python benchmarks/ddp_scaling.py [--processes 2] [--global-batch 8] [--iterations 3]
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
if str(REPO) not in sys.path:  # `python benchmarks/ddp_scaling.py` from a clone
    sys.path.insert(0, str(REPO))
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import data_dir  # noqa: E402

IMDB_CSV = data_dir() / "imdb_reviews_1000.csv"  # the data folder, $CORY_SHARED_DATA (benchmarks/paths.py)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--iterations", type=int, default=3, help="iterations per arm; the first is a warm-up")
    add_out_option(p, "ddp_scaling.json")
    args = p.parse_args(argv)
    args.out = checked_out(p, args)  # before the runs
    return args


def seconds_per_iteration(num_processes: int, batch: int, out_dir: Path, args: argparse.Namespace) -> float:
    """Mean rollout + update seconds of the iterations after the first, from the run's metrics.jsonl."""
    cmd = [sys.executable, "-m", "trainers.cli", "train", "--preset", "imdb-quick", "--model", args.model,
           "--batch_size", str(batch), "--mini_batch_size", str(batch), "--num_iterations", str(args.iterations),
           "--role_exchange_period", "0", "--torch_threads", "1", "--tensorboard", "false", "--log_samples", "0",
           "--output_dir", str(out_dir), "--num_processes", str(num_processes)]
    if IMDB_CSV.exists():  # else the preset's data (the hub, or the built-in openings offline)
        cmd += ["--data_path", str(IMDB_CSV)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()][1:]
    return sum(r["time/rollout_s"] + r["time/update_s"] for r in rows) / len(rows)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.global_batch % args.processes:
        raise ValueError(f"--global-batch {args.global_batch} is not divisible by --processes {args.processes}")
    with tempfile.TemporaryDirectory() as tmp:
        one = seconds_per_iteration(1, args.global_batch, Path(tmp) / "one", args)
        many = seconds_per_iteration(args.processes, args.global_batch // args.processes, Path(tmp) / "many", args)
    results = {"model": args.model, "global_batch": args.global_batch, "processes": args.processes,
               "iterations": args.iterations, "cores": os.cpu_count(),
               "one_process_s_per_iteration": round(one, 3), "n_processes_s_per_iteration": round(many, 3),
               "ddp_speedup": round(one / many, 3)}
    print(f"1 process: {one:.2f} s/iteration; {args.processes} processes: {many:.2f} s/iteration; "
          f"speed-up {one / many:.2f}x")
    write_json(args.out, results, indent=2)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
