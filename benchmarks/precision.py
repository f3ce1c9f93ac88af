"""Iteration time and peak memory per precision: fp32 vs bf16-mixed, and the learner's old-score forward on vs off.

For PPO, GRPO and CORY (with PPO learners) on the IMDB ladder rung's settings (SmolLM2-135M-Instruct, memory-shared
LoRA r 16, batch 16, 2 epochs of mini-batch 8, 8-12 new tokens; `benchmarks/learning.py`), one process per
configuration (fresh memory; its peak RSS is read from the OS), one torch thread:

* ``fp32-recompute``: fp32, the learner recomputes old log-probabilities and values with a forward of its own
  (the code before the rollout's scores were reused; forced here by treating them as inexact);
* ``fp32``: fp32, the rollout's exact log-probabilities and values replace that forward (the default);
* ``bf16-mixed``: ``--precision bf16-mixed`` (the learner recomputes: KV-cached and full forwards round differently
  in bf16).

Each configuration runs ``--warmup`` iterations, then ``--iterations`` timed ones (process CPU seconds, the mean);
ratios are taken side by side from one run of this script. On a CPU without AVX512-BF16/AMX, bf16 is emulated and
much slower than fp32 (`agents.precision`); ``machine.native_bf16`` says which this was.

Run::

    python benchmarks/precision.py [--arms ppo grpo cory] [--precisions fp32-recompute fp32 bf16-mixed]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.paths import recorded_command  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402

VARIANTS = ("fp32-recompute", "fp32", "bf16-mixed")


def measure(arm: str, variant: str, iterations: int, warmup: int) -> dict:
    """Time `iterations` training iterations of `arm` in `variant` (in this process)."""
    import torch

    from agents import LLMAgent
    from agents.precision import native_bf16
    from benchmarks.ladder_run import build_arm_trainer

    flags = ["--precision", "bf16-mixed"] if variant == "bf16-mixed" else ["--precision", "fp32"]
    if variant == "fp32-recompute":
        LLMAgent.acting_scores_exact = property(lambda self: False)  # the old path: a forward of the learner's own
    with tempfile.TemporaryDirectory() as tmp:
        trainer, _ = build_arm_trainer("imdb", arm, 0, 16 * (warmup + iterations), f"{tmp}/run", flags)
        seconds, rollout_s, update_s = [], [], []
        for it in range(warmup + iterations):
            t0 = time.process_time()
            metrics, _ = trainer.iteration(it)
            if it >= warmup:
                seconds.append(time.process_time() - t0)
                rollout_s.append(metrics["time/rollout_s"])
                update_s.append(metrics["time/update_s"])
    return {"arm": arm, "variant": variant, "iteration_cpu_s": sum(seconds) / len(seconds),
            "rollout_wall_s": sum(rollout_s) / len(rollout_s), "update_wall_s": sum(update_s) / len(update_s),
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "native_bf16": native_bf16("cpu"), "torch": torch.__version__}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=["ppo", "grpo", "cory"])
    parser.add_argument("--precisions", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    add_out_option(parser, "precision.json")
    parser.add_argument("--one", nargs=2, metavar=("ARM", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        import logging

        logging.disable(logging.WARNING)
        print(json.dumps(measure(*args.one, args.iterations, args.warmup)))
        return {}
    out = checked_out(parser, args)
    rows = []
    for variant in args.precisions:
        for arm in args.arms:
            proc = subprocess.run([sys.executable, __file__, "--one", arm, variant, "--iterations",
                                   str(args.iterations), "--warmup", str(args.warmup)], capture_output=True, text=True,
                                  check=True, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                   "HF_HUB_OFFLINE": "1"})
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"{arm:5s} {variant:15s} {rows[-1]['iteration_cpu_s']:8.2f} CPU s / iteration, peak RSS "
                  f"{rows[-1]['peak_rss_gib']:.2f} GiB", flush=True)
    by = {(r["arm"], r["variant"]): r for r in rows}
    ratios = {}
    for arm in args.arms:
        base = by.get((arm, "fp32"))
        for variant in ("fp32-recompute", "bf16-mixed"):
            if base and (arm, variant) in by:
                ratios[f"{arm}_{variant}_over_fp32"] = by[(arm, variant)]["iteration_cpu_s"] / base["iteration_cpu_s"]
    for variant in args.precisions:
        if ("cory", variant) in by and ("ppo", variant) in by:
            ratios[f"cory_over_ppo_{variant}"] = by[("cory", variant)]["iteration_cpu_s"] / \
                by[("ppo", variant)]["iteration_cpu_s"]
            ratios[f"rss_cory_over_ppo_{variant}"] = by[("cory", variant)]["peak_rss_gib"] / \
                by[("ppo", variant)]["peak_rss_gib"]
    result = {"rows": rows, "ratios": ratios,
              "machine": {"cpu": platform.processor() or platform.machine(), "native_bf16": rows[0]["native_bf16"]
                          if rows else None, "torch": rows[0]["torch"] if rows else None, "threads": 1},
              "command": recorded_command("benchmarks/precision.py", argv or None)}
    write_json(out, result)
    for key, value in ratios.items():
        print(f"{key}: {value:.3f}")
    return result


if __name__ == "__main__":
    main()
