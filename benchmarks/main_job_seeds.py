"""The README's main job on several seeds: is its printed gain robust, or one lucky run?

Runs the README's first command's training run, ``cory train --preset imdb-quick`` (offline: the built-in review
openings), once per seed, each in its own process with the preset's threads, and reads each run's ``eval.json``
(the pioneer's held-out reward before and after training on the same queries and sampling seeds, the standard
error of the per-episode difference clustered by query, the distinct queries and the combined reward). Seeded CPU runs drift between machines and thread counts (PLATFORM.md), so the
seeds stand in for other machines: the job is robust when every seed's gain is at least 2 standard errors.

Run::

    python benchmarks/main_job_seeds.py [--seeds 0 1 2 3 4] [--out benchmarks/results/main_job_seeds.json] [--keep DIR]
        [-- FLAGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/main_job_seeds.py` from a clone
    sys.path.insert(0, str(ROOT))

from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402


def run_seed(seed: int, flags: list[str], folder: Path) -> dict:
    """One main-job run; its `seed_record` with CPU seconds (children's user + system) and wall seconds."""
    out = folder / f"seed{seed}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "trainers.cli", "train", "--preset", "imdb-quick", "--seed", str(seed),
                    "--output_dir", str(out), "--tensorboard", "false", *flags], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    return seed_record(seed, result, cpu_s=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                       wall_s=time.time() - t0)


def seed_record(seed: int, result: dict, *, cpu_s: float | None, wall_s: float | None) -> dict:
    """One row of the seed table from a run's ``eval.json`` (`trainers.cli.train.report_before_after`)."""
    gain, se = result["gain"], result["gain_sem"]
    diffs = np.subtract(result["after"]["rewards"], result["before"]["rewards"])
    return {"seed": seed, "before": result["before"]["reward"], "after": result["after"]["reward"], "gain": gain,
            "se": se, "gain_over_se": gain / se if se else None,
            # the standard error as if the episodes were independent (what the line printed before clustering)
            "se_unclustered": float(diffs.std(ddof=1) / np.sqrt(len(diffs))),
            "distinct_queries": result["distinct_queries"], "combined_before": result["combined_before"],
            "combined_after": result["combined_after"], "kl": result["after"]["kl"],
            "kl_k1": result["after"].get("kl_k1"), "distinct_2_before": result["before"]["distinct_2"],
            "distinct_2_after": result["after"]["distinct_2"], "num_queries": result["after"]["num_queries"],
            "cpu_s": cpu_s, "wall_s": wall_s}


def summary(runs: list[dict], flags: list[str]) -> dict:
    """The seed table and whether every seed gained at least two standard errors."""
    from benchmarks.paths import recorded_flags

    return {"command": " ".join(["cory train --preset imdb-quick", *recorded_flags(flags)]),
            "runs": runs,  # a seed without a standard error (one distinct query: gain_sem null) does not count
            "every_seed_gain_at_least_2_se": all(r["se"] is not None and r["gain"] >= 2 * r["se"] for r in runs),
            "gain_range": [min(r["gain"] for r in runs), max(r["gain"] for r in runs)],
            "after_range": [min(r["after"] for r in runs), max(r["after"] for r in runs)]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    add_out_option(parser, "main_job_seeds.json")
    parser.add_argument("--keep", default=None, help="keep each seed's run folder under this folder (default: a "
                                                      "temporary folder, deleted)")
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="after --: extra `cory train` flags")
    args = parser.parse_args(argv)
    out = checked_out(parser, args)
    flags = [f for f in args.flags if f != "--"]
    runs = []
    with tempfile.TemporaryDirectory(prefix="cory-main-job-") as tmp:
        for seed in args.seeds:
            runs.append(run_seed(seed, flags, Path(args.keep or tmp)))
            r = runs[-1]
            se = "n/a" if r["se"] is None else f"{r['se']:.3f}"
            print(f"seed {seed}: before {r['before']:.3f} -> after {r['after']:.3f} (gain {r['gain']:+.3f} ± "
                  f"{se} s.e. clustered by {r['distinct_queries']} queries, {r['gain_over_se'] or 0:.1f} "
                  f"s.e.; combined {r['combined_before']:.3f} -> {r['combined_after']:.3f}; KL {r['kl']:.2f}; "
                  f"{r['cpu_s']:.0f} CPU s)", flush=True)
            result = summary(runs, flags)  # written after every seed: an interrupted run keeps the seeds it finished
            write_json(out, result)
    print(f"every seed's gain >= 2 s.e.: {result['every_seed_gain_at_least_2_se']}; gains "
          f"{result['gain_range'][0]:+.3f} .. {result['gain_range'][1]:+.3f}")
    return result


if __name__ == "__main__":
    main()
