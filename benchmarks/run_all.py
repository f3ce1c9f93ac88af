"""Run every benchmark, print one table of ratios, write ``benchmarks/results/results.json``.

Benchmarks (each a subprocess writing its own detailed JSON next to this file):

=================  ==============  ===========================================================================
benchmark          file            flat keys in results.json
=================  ==============  ===========================================================================
env_step.py        env_step.json   ``aec_step_us`` (wrapped AEC env, µs per live step, no model)
rollout.py         rollout.json    ``rollout_vs_generate`` (batched env + act_batch ÷ generate, B = 16),
                                   ``aec_vs_generate_b1`` (AEC env + act ÷ generate, B = 1)
ppo_step.py        ppo_step.json   ``ppo_update_vs_trl`` (our PPO update ÷ TRL 0.11.4, null without
                                   ``--with-trl``), ``cory_vs_ppo_iteration``
memory.py          memory.json     ``rss_cory_vs_ppo_full``, ``rss_cory_vs_ppo_lora``, ``rss_cory_vs_ppo_lora_gc`` (peak RSS ratios)
ddp_scaling.py     ddp_scaling.json ``ddp_speedup_2proc`` (CORY seconds per iteration, 1 process ÷ 2 processes)
sharding_memory.py sharding_memory.json ``rss_fsdp_vs_replicated`` (peak RSS per process), ``s_fsdp_vs_replicated``
                                   (seconds per iteration): ``--sharding fsdp`` ÷ replicated, 2 processes, full fine-tune
=================  ==============  ===========================================================================

A value is ``null`` when it was not measured. ``machine`` records the CPU model, cores, torch version, the torch
threads the benchmarks used and the 1-minute load average at the start (a busy machine slows every number).
``--only`` runs a subset and takes the others from their existing JSON files (if any).

Run::

    python benchmarks/run_all.py [--with-trl] [--quick] [--only ppo_step,memory]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # `python benchmarks/run_all.py` from a clone
    sys.path.insert(0, str(REPO))

from benchmarks.outputs import add_out_option, checked_out, result_path, write_json  # noqa: E402

BENCHMARKS = ("env_step", "rollout", "ppo_step", "memory", "ddp_scaling", "sharding_memory")
# key: (target, "min" when larger is better / "max" when smaller is better)
TARGETS = {
    "rollout_vs_generate": (0.95, "min"),
    "aec_vs_generate_b1": (0.8, "min"),
    "aec_step_us": (30.0, "max"),
    "ppo_update_vs_trl": (1.0, "max"),
    "cory_vs_ppo_iteration": (2.1, "max"),
    "rss_cory_vs_ppo_full": (1.75, "max"),
    "rss_cory_vs_ppo_lora": (1.15, "max"),
    "rss_cory_vs_ppo_lora_gc": (1.15, "max"),
    "ddp_speedup_2proc": (None, "min"),
    "rss_fsdp_vs_replicated": (None, "max"),
    "s_fsdp_vs_replicated": (None, "max"),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--with-trl", action="store_true", help="time TRL 0.11.4 (creates benchmarks/.trl-venv)")
    p.add_argument("--quick", action="store_true", help="fewer repeats and iterations (a rough check)")
    p.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {BENCHMARKS}")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the model benchmarks")
    add_out_option(p, "results.json")
    args = p.parse_args(argv)
    args.out = checked_out(p, args)  # before the benchmarks
    return args


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    """One command line per benchmark."""
    py, t = sys.executable, ["--threads", str(args.threads)]
    quick = args.quick
    return {
        "env_step": [py, str(HERE / "env_step.py"), *(["--episodes", "30", "--batches", "5"] if quick else [])],
        "rollout": [py, str(HERE / "rollout.py"), *t, "--repeats", "1" if quick else "2"],
        "ppo_step": [py, str(HERE / "ppo_step.py"), *t, "--repeats", "1" if quick else "2",
                     *(["--with-trl"] if args.with_trl else [])],
        "memory": [py, str(HERE / "memory.py"), "--threads", str(args.threads),
                   "--iterations", "1" if quick else "2"],
        "ddp_scaling": [py, str(HERE / "ddp_scaling.py"), "--iterations", "2" if quick else "3"],
        "sharding_memory": [py, str(HERE / "sharding_memory.py"), "--iterations", "2" if quick else "3"],
    }


def machine_info(threads: int) -> dict:
    import torch

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "threads": threads,
            "python": platform.python_version(), "load_avg_1min_at_start": round(os.getloadavg()[0], 2)}


def read_json(name: str) -> dict | None:
    path = result_path(f"{name}.json")
    return json.loads(path.read_text()) if path.exists() else None


def flatten(details: dict[str, dict | None]) -> dict[str, float | None]:
    """The flat ratio keys from the benchmarks' own JSON files (None where missing)."""
    env_step, rollout = details.get("env_step") or {}, details.get("rollout") or {}
    ppo, memory = details.get("ppo_step") or {}, details.get("memory") or {}
    ddp, sharding = details.get("ddp_scaling") or {}, details.get("sharding_memory") or {}
    return {
        "rollout_vs_generate": (rollout.get("batched") or {}).get("ratio"),
        "aec_vs_generate_b1": (rollout.get("aec") or {}).get("ratio"),
        "aec_step_us": None if env_step.get("aec_wrapped_step_us") is None
        else round(env_step["aec_wrapped_step_us"], 2),
        "ppo_update_vs_trl": ppo.get("ppo_update_vs_trl"),
        "cory_vs_ppo_iteration": (ppo.get("cory_vs_ppo") or {}).get("ratio"),
        "rss_cory_vs_ppo_full": memory.get("rss_cory_vs_ppo_full"),
        "rss_cory_vs_ppo_lora": memory.get("rss_cory_vs_ppo_lora"),
        "rss_cory_vs_ppo_lora_gc": memory.get("rss_cory_vs_ppo_lora_gc"),
        "ddp_speedup_2proc": ddp.get("ddp_speedup") if ddp.get("processes") == 2 else None,
        "rss_fsdp_vs_replicated": sharding.get("peak_rss_ratio"),
        "s_fsdp_vs_replicated": sharding.get("time_ratio"),
    }


def table(flat: dict[str, float | None]) -> str:
    rows = ["| metric | value | target | met |", "|---|---|---|---|"]
    for key, value in flat.items():
        target, kind = TARGETS[key]
        shown = "not measured" if value is None else f"{value:g}"
        if target is None:
            rows.append(f"| {key} | {shown} | - | - |")
            continue
        met = "-" if value is None else ("yes" if (value >= target if kind == "min" else value <= target) else "no")
        rows.append(f"| {key} | {shown} | {'>=' if kind == 'min' else '<='} {target:g} | {met} |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    args = parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(BENCHMARKS))
    if unknown:
        raise ValueError(f"--only: unknown benchmark(s) {unknown}; choose from {BENCHMARKS}")
    machine = machine_info(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    for name, cmd in commands(args).items():
        if name in only:
            print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
            subprocess.run(cmd, check=True, cwd=REPO, env=env)
    details = {name: read_json(name) for name in BENCHMARKS}
    flat = flatten(details)
    results = {**flat, "machine": machine, "targets": {k: t for k, (t, _) in TARGETS.items()}}
    write_json(args.out, results, indent=2)
    print(table(flat))
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
