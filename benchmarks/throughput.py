"""Training iterations per minute (wall clock) of PPO, GRPO, CORY (this project) and TRL's `GRPOTrainer` on one
device, in fp32 and in bf16-mixed, on the IMDB rung's settings (SmolLM2-135M-Instruct + LoRA r 16, batch 16,
mini-batch 8, 2 epochs, 8–12 new tokens; `benchmarks.rungs.RUNGS`).

    python benchmarks/throughput.py --device cuda                  # every arm in both precisions, on a GPU
    python benchmarks/throughput.py --device cpu --arms grpo --precisions fp32 --iterations 3
    python benchmarks/throughput.py --device cuda --flags --model /tmp/smollm2 --data_path reviews.csv

An iteration is one rollout of 16 episodes and its update (a CORY iteration: both models'); TRL's is one generation
batch and its 4 optimiser steps (`benchmarks.trl_grpo`). Each (arm, precision) runs in its own process; the first
iteration is a warm-up (CUDA kernels, allocator) and is left out; the clock is `time.perf_counter` with the device
synchronised at both ends of an iteration. bf16-mixed is this project's ``--precision bf16-mixed`` (bf16 autocast,
fp32 master weights) and TRL's ``bf16=True`` (its default). `--flags` are `cory train` flags after the rung's (where
the hub model or the data folder, ``$CORY_SHARED_DATA``, are not reachable: ``--model DIR`` of a local checkpoint,
``--data_path``); a model of the same architecture with random weights times the same (every response is 8–12 tokens
either way).
Results: a table and `--out` (default `benchmarks/results/throughput.json`) with the device's name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.paths import recorded_command  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402

ARMS = ("ppo", "grpo", "cory", "trl-grpo")
PRECISIONS = ("fp32", "bf16-mixed")
TRL_PRECISION = {"fp32": "fp32", "bf16-mixed": "trl-default"}  # `benchmarks.trl_grpo.make_trl_trainer`'s names


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_own(arm: str, precision: str, device: str, iterations: int, seed: int, run_dir: str,
             flags: list[str], rung: str = "imdb") -> list[float]:
    """Wall seconds of each of `iterations` iterations of one of this project's arms (`CORYTrainer.iteration`) on a
    ladder rung's settings (`benchmarks.rungs.RUNGS`)."""
    from benchmarks.ladder_run import build_arm_trainer

    trainer, _ = build_arm_trainer(rung, arm, seed, 10**9, run_dir,
                                   [*flags, "--device", device, "--precision", precision])
    seconds = []
    for it in range(iterations):
        _synchronize(device)
        start = time.perf_counter()
        trainer.iteration(it)
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def time_trl(precision: str, device: str, iterations: int, seed: int, run_dir: str, flags: list[str]) -> list[float]:
    """Wall seconds of each of `iterations` generation batches (with their optimiser steps) of TRL's
    `GRPOTrainer` on the `grpo` arm's settings (`benchmarks.trl_grpo.make_trl_trainer`)."""
    from transformers import TrainerCallback

    from benchmarks.rungs import arm_configs
    from benchmarks.trl_grpo import make_trl_trainer

    batch = arm_configs("imdb", "grpo", seed, 0, run_dir, flags)[0].update.batch_size  # episodes per iteration
    run = make_trl_trainer(seed, iterations * batch, run_dir=run_dir, precision=TRL_PRECISION[precision],
                           device=device, flags=flags)
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ARG002 - transformers' signature
            _synchronize(device)
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ARG002 - transformers' signature
            if state.global_step % run.updates_per_iteration == 0:
                _synchronize(device)
                marks.append(time.perf_counter())

    run.trainer.add_callback(Clock())
    try:
        run.trainer.train()
    finally:
        run.tmp.cleanup()
    return [b - a for a, b in zip(marks, marks[1:])]


def time_arm(arm: str, precision: str, device: str, iterations: int, seed: int, flags: list[str],
             rung: str = "imdb") -> dict:
    """One (arm, precision) in this process: per-iteration wall seconds, and iterations per minute over the
    iterations after the first (TRL's arm: on the IMDB rung only)."""
    import logging

    import torch

    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="cory-throughput-") as run_dir:
        seconds = time_trl(precision, device, iterations, seed, run_dir, flags) if arm == "trl-grpo" else \
            time_own(arm, precision, device, iterations, seed, run_dir, flags, rung)
    kept = seconds[1:] or seconds
    return {"arm": arm, "precision": precision, "seconds": seconds,
            "iterations_per_minute": 60 * len(kept) / sum(kept)}


def device_name(device: str) -> str:
    """The GPU's name (``torch.cuda.get_device_name``), or the CPU's capability for a CPU run."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({torch.backends.cpu.get_cpu_capability()}; one torch thread per run)"


def table(results: list[dict]) -> str:
    """A markdown table: iterations per minute of each arm (rows) in each precision (columns), and bf16 ÷ fp32."""
    by = {(r["arm"], r["precision"]): r["iterations_per_minute"] for r in results}
    arms = list(dict.fromkeys(r["arm"] for r in results))
    precisions = list(dict.fromkeys(r["precision"] for r in results))
    both = set(PRECISIONS) <= set(precisions)
    head = [*(f"{p} it/min" for p in precisions), *(["bf16 ÷ fp32 speed"] if both else [])]
    lines = ["| arm | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for arm in arms:
        cells = [f"{by[arm, p]:.1f}" if (arm, p) in by else "—" for p in precisions]
        if both:
            cells.append(f"{by[arm, 'bf16-mixed'] / by[arm, 'fp32']:.2f}×"
                         if (arm, "bf16-mixed") in by and (arm, "fp32") in by else "—")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--iterations", type=int, default=6, help="per arm and precision; the first is a warm-up")
    parser.add_argument("--seed", type=int, default=0)
    add_out_option(parser, "throughput.json")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                        help="cory train flags after the rung's (last on the line)")
    parser.add_argument("--one", nargs=2, metavar=("ARM", "PRECISION"), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error(f"--iterations must be >= 2 (the first is a warm-up), got {args.iterations}")
    if args.one:
        print(json.dumps(time_arm(*args.one, args.device, args.iterations, args.seed, args.flags)))
        return {}
    out_path = checked_out(parser, args)
    from benchmarks.ladder_run import code_version

    results = []
    for arm in args.arms:
        for precision in args.precisions:  # one process each: no run inherits another's caches or allocator
            out = subprocess.run([sys.executable, __file__, "--one", arm, precision, "--device", args.device,
                                  "--iterations", str(args.iterations), "--seed", str(args.seed),
                                  "--flags", *args.flags], capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
            if out.returncode != 0:
                sys.exit(f"timing {arm} in {precision} failed:\n{out.stderr[-3000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"[throughput] {arm} {precision}: {results[-1]['iterations_per_minute']:.1f} iterations/min",
                  flush=True)
    report = {"command": recorded_command("benchmarks/throughput.py", argv or None),
              "commit": code_version(), "device": device_name(args.device), "iterations": args.iterations,
              "seed": args.seed, "results": results}
    write_json(out_path, report)
    print(f"device: {report['device']}\n{table(results)}")
    return report


if __name__ == "__main__":
    main()
