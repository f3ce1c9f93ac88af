"""`cory bench`: arms × seeds with identical settings, one table (mean ± std) and an overlay plot.

    cory bench --arms cory ppo cory-wo-kt:1 cory-wo-rex:1 --seeds 0 1 2 --output_dir runs/bench -- \
        --preset imdb-quick --num_iterations 30 --eta 0.2
    cory bench --arms cory ppo cory-grpo grpo --seeds 0 1 --output_dir runs/bench-tiny -- \
        --preset tiny --task tiny_vocab --context_len 12 --batch_size 16 --num_iterations 30

Everything after `--` is passed to every `cory train` run; each arm adds its own overrides (`ARMS`). An arm
written `name:n` runs only the first n seeds. Runs go to `<output_dir>/<arm>-s<seed>`, each in its own
subprocess (fresh memory, peak RSS recorded); a finished run is skipped and an unfinished one with a checkpoint is
resumed, so an interrupted bench continues and a larger `--num_iterations` extends earlier runs.
The final point of a run is the mean of its last `--last` iterations; the table aggregates seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from cory_env.seating import PIONEER
from trainers.loop.plots import MODEL_SCOPE, QUANTITIES, plot_arm_means, plot_runs, scopes_of
from trainers.loop.checkpoint import latest_checkpoint
from trainers.loop.metrics import METRICS_FILE, read_jsonl

# arm name -> `cory train` flags that define it (on top of the shared flags)
ARMS: dict[str, list[str]] = {
    "cory": ["--seating", "cory"],
    "ppo": ["--seating", "ppo"],
    "cory-wo-kt": ["--seating", "cory", "--knowledge_transfer", "false"],
    "cory-wo-rex": ["--seating", "cory", "--role_exchange_period", "0"],
    "cory-competitive": ["--seating", "cory", "--partner_reward_coef", "-1"],
    # critic-free GRPO learners (4 samples per query; batch_size must be a multiple of 4)
    "cory-grpo": ["--seating", "cory", "--learner", "grpo", "--group_size", "4"],
    "grpo": ["--seating", "ppo", "--learner", "grpo", "--group_size", "4"],
    # joint learners (trainers.learning.joint): a centralized critic (MAPPO) against IPPO = "cory"; the joint
    # reward's shared group advantage in MAGRPO's centred form (its eq. 1) against "cory-grpo"
    "mappo": ["--seating", "cory", "--learner", "mappo"],
    "magrpo": ["--seating", "cory", "--learner", "magrpo", "--group_size", "4", "--scale_rewards", "false"],
    # MAGRPO with both seats answering the query alone (CoMLRL's one-turn MAGRPO: benchmarks/comlrl_magrpo.py)
    "magrpo-wo-kt": ["--seating", "cory", "--learner", "magrpo", "--group_size", "4", "--scale_rewards", "false",
                     "--knowledge_transfer", "false"],
    # a chain of three seats (seat k reads the earlier seats as the task declares) with and without transfer, and
    # the joint learners on it (against "chain3" = IPPO and "chain3-grpo")
    "chain3": ["--seating", "chain:3"],
    "chain3-wo-kt": ["--seating", "chain:3", "--knowledge_transfer", "false"],
    "chain3-mappo": ["--seating", "chain:3", "--learner", "mappo"],
    "chain3-grpo": ["--seating", "chain:3", "--learner", "grpo", "--group_size", "4"],
    "chain3-magrpo": ["--seating", "chain:3", "--learner", "magrpo", "--group_size", "4", "--scale_rewards", "false"],
    # a model per slot (docs/seats.md): llm2 another architecture (GPT-2 beside the rung's Llama) over another
    # tokenizer (the tiny byte-level BPE beside the task's 20 tokens), or another architecture alone
    "cory-hetero": ["--seating", "cory", "--models", "llm2=tiny-gpt2-bpe"],
    "cory-hetero-arch": ["--seating", "cory", "--models", "llm2=tiny-gpt2"],
    "chain3-hetero": ["--seating", "chain:3", "--models", "llm2=tiny-gpt2-bpe"],
    # a partner population (docs/partners.md): 3 models on CORY's two seats, a uniform random pairing each iteration
    # (give it 1.5x a pair's episodes for as many episodes per model)
    "pop3": ["--seating", "cory", "--population", "3", "--matchmaking", "uniform"],
}


#: Arms that name a learner, e.g. a plug-in's (its registered or entry-point name, or ``module:attr``): prefix ->
#: the seating it trains on. ``learner=NAME`` is one seat (beside ``ppo`` and ``grpo``), ``cory-learner=NAME``
#: CORY's two seats (beside ``cory`` and ``cory-grpo``).
LEARNER_ARMS: dict[str, list[str]] = {"learner=": ["--seating", "ppo"], "cory-learner=": ["--seating", "cory"]}


def arm_flags(name: str) -> list[str]:
    """The `cory train` flags of arm `name`: an `ARMS` entry, or a `LEARNER_ARMS` prefix and a learner.

    Raises:
        ValueError: an unknown arm, or a learner arm whose learner is not found (the registry's reason).
    """
    if name in ARMS:
        return list(ARMS[name])
    for prefix, seating in LEARNER_ARMS.items():
        if name.startswith(prefix) and name != prefix:
            from trainers.learning.registry import learner_spec
            learner_spec(name[len(prefix):])  # found, or refused naming it
            return [*seating, "--learner", name[len(prefix):]]
    raise ValueError(f"unknown arm {name!r}; valid arms: {', '.join(ARMS)}, or a learner as "
                     f"{' / '.join(p + 'NAME' for p in LEARNER_ARMS)} (a registered name, an entry point or "
                     "module:attr)")


def parse_arm(spec: str, seeds: Sequence[int]) -> tuple[str, list[int]]:
    """`name` or `name:n` (the first n seeds) -> (name, seeds to run); a learner arm's ``module:attr`` keeps its colon.

    Raises:
        ValueError: an unknown arm (`arm_flags`).
    """
    name, _, count = spec.rpartition(":")
    if not (name and count.isdigit()):
        name, count = spec, ""
    arm_flags(name)
    return name, list(seeds[: int(count)] if count else seeds)


def final_metrics(records: list[dict], last: int) -> dict[str, float]:
    """Mean of the last `last` iterations of the pioneer's and the models' (llm1, llm2, ...) quantities present in
    `records`."""
    tail = records[-last:]
    out = {}
    for scope in [PIONEER] + [s for s in scopes_of({"run": records}) if s.startswith(MODEL_SCOPE)]:
        for qty in QUANTITIES:
            key = f"{scope}/{qty}"
            values = [r[key] for r in tail if key in r]
            if values:
                out[key] = sum(values) / len(values)
    return out


def _mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def summary_table(results: dict[str, list[dict]]) -> str:
    """Markdown table: arm, seeds, then mean ± std over seeds of the pioneer's final quantities."""
    lines = ["| arm | seeds | task reward | KL (nats) | combined reward | iter time (s) | peak RSS (GB) |",
             "|---|---|---|---|---|---|---|"]
    for arm, runs in results.items():
        cells = [_mean_std([r["final"][f"{PIONEER}/{q}"] for r in runs if f"{PIONEER}/{q}" in r["final"]])
                 for q in QUANTITIES]
        it_time = _mean_std([r["iteration_s"] for r in runs])
        rss = _mean_std([r["peak_rss_gb"] for r in runs if r.get("peak_rss_gb") is not None])
        lines.append(f"| {arm} | {len(runs)} | {' | '.join(cells)} | {it_time} | {rss} |")
    return "\n".join(lines)


def _run_complete(run_dir: Path, num_iterations: int | None) -> bool:
    path = run_dir / METRICS_FILE
    return path.exists() and num_iterations is not None and len(read_jsonl(path)) >= num_iterations


def run_bench(argv: Sequence[str]) -> int:
    cut = list(argv).index("--") if "--" in argv else len(argv)
    own, shared = list(argv[:cut]), list(argv[cut + 1:])
    parser = argparse.ArgumentParser(prog="cory bench", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--arms", nargs="+", default=["cory", "ppo"], help=f"Arms ({', '.join(ARMS)}); name:n = first n seeds.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="Seeds for every arm.")
    parser.add_argument("--output_dir", default="runs/bench", help="Folder for the runs, table and plots.")
    parser.add_argument("--num_iterations", type=int, default=None,
                        help="Iterations per run (else the preset's); used to skip finished runs.")
    parser.add_argument("--last", type=int, default=3, help="Iterations averaged for a run's final point.")
    args = parser.parse_args(own)
    plan = [parse_arm(spec, args.seeds) for spec in args.arms]
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = ["--num_iterations", str(args.num_iterations)] if args.num_iterations else []
    results: dict[str, list[dict]] = {}
    run_dirs = []
    for arm, seeds in plan:
        for seed in seeds:
            run_dir = out / f"{arm}-s{seed}"
            run_dirs.append(run_dir)
            info_path = run_dir / "bench_run.json"
            if not (_run_complete(run_dir, args.num_iterations) and info_path.exists()):
                # an unfinished run with a checkpoint (interrupted, or a longer --num_iterations) is resumed
                mode = "--resume" if latest_checkpoint(run_dir) is not None else "--overwrite"
                cmd = [sys.executable, "-m", "trainers.cli", "train", *shared, *arm_flags(arm), *extra,
                       "--seed", str(seed), "--output_dir", str(run_dir), mode]
                print(f"[bench] {arm} seed {seed}: {' '.join(cmd[3:])}", flush=True)
                start = time.time()
                subprocess.run(cmd, check=True)
                records = read_jsonl(run_dir / METRICS_FILE)
                info = {"wall_s": time.time() - start,
                        "iteration_s": statistics.mean(r["time/rollout_s"] + r["time/update_s"] for r in records),
                        "peak_rss_gb": max(r.get("sys/peak_rss_gb", 0.0) for r in records) or None}
                info_path.write_text(json.dumps(info), encoding="utf-8")
            info = json.loads(info_path.read_text(encoding="utf-8"))
            records = read_jsonl(run_dir / METRICS_FILE)
            results.setdefault(arm, []).append({"seed": seed, "final": final_metrics(records, args.last), **info})
    table = summary_table(results)
    (out / "results.md").write_text(table + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot_runs(run_dirs, out)
    plot_arm_means({arm: [read_jsonl(out / f"{arm}-s{r['seed']}" / METRICS_FILE) for r in runs]
                    for arm, runs in results.items()}, out / "arms.png")
    print(table)
    return 0
