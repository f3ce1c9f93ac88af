"""Time-to-reward against TRL: training CPU seconds until the held-out reward is +0.2 over the base model, this
project's GRPO ÷ TRL's `GRPOTrainer`, on the IMDB rung's settings (`benchmarks/trl_grpo.py` lists what is shared
and what differs), side by side per seed.

    pip install -e ".[trl]"
    python benchmarks/time_to_reward.py                       # seeds 0 1 2: both arms of a seed run side by side
    python benchmarks/time_to_reward.py --seeds 0 1 2 3 4
    python benchmarks/time_to_reward.py --report_only         # re-read the per-seed ladder JSONs, write the report
    python benchmarks/time_to_reward.py --precision bf16      # a CPU with native bf16: ours bf16-mixed vs TRL's default
    python benchmarks/time_to_reward.py --against comlrl      # ours magrpo-wo-kt vs CoMLRL's MAGRPOTrainer

For each seed, `benchmarks/learning.py --rung imdb --arms grpo trl-grpo --seeds S --jobs 2` runs the two arms at the
same time in two processes (one torch thread each), so both see the same machine load; its JSON is kept per seed
(`benchmarks/results/time_to_reward/seed_S.json`, a stopped run loses only the seed it was on). The report
(`benchmarks/results/time_to_reward.json`) reads each run's curve: the training CPU seconds (model loading included,
held-out evaluations excluded: `benchmarks.ladder_run.TrainingClock`) where the held-out pioneer reward first reaches
the run's own base-model reward + `--gain`, linearly interpolated between evaluation points
(`benchmarks.ladder_report.first_reach`). A run that never reaches it within the budget counts as its whole
training time, marked as a lower bound (``"reached": false``).

Precision (`PRECISIONS`): ``fp32`` runs both arms in fp32 (TRL told ``bf16=False``); ``bf16`` runs ours with
``--precision bf16-mixed`` beside TRL in its own default precision (``trl-grpo-default``: ``bf16=True``), each arm's
fast setting on a CPU with native bf16 (AVX512-BF16/AMX), into ``benchmarks/results/time_to_reward_bf16/`` and
``benchmarks/results/time_to_reward_bf16.json``.

Against CoMLRL (``--against comlrl``, fp32; `AGAINST`): this project's MAGRPO on the seating CoMLRL can play
(``magrpo-wo-kt``: both seats answer the query alone) beside CoMLRL's `MAGRPOTrainer` (``comlrl-magrpo``:
`benchmarks/comlrl_magrpo.py` lists what is shared and what differs), into
``benchmarks/results/time_to_reward_comlrl/`` and ``benchmarks/results/time_to_reward_comlrl.json``.

Statistics over seeds: the interquartile mean (IQM) with a 95 % bootstrap interval (`trainers.evaluation.stats`), and
the ratio ours ÷ TRL per seed and of the IQMs. Targets (issue 39): floor ≤ 1.0, target ≤ 0.8, moonshot ≤ 0.5.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder_report import first_reach, point_record  # noqa: E402
from benchmarks.rungs import arm_configs  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, result_path, write_json  # noqa: E402
from benchmarks.paths import recorded_command  # noqa: E402
from trainers.evaluation.stats import arm_summary  # noqa: E402

OURS, TRL, COMLRL = "grpo", "trl-grpo", "comlrl-magrpo"
#: The other side's arm -> (library, trainer) as the table names them.
LIBRARIES = {TRL: ("TRL", "`GRPOTrainer`"), COMLRL: ("CoMLRL", "`MAGRPOTrainer`")}
RUNS_DIR = result_path("time_to_reward")


@dataclass(frozen=True)
class Precision:
    """One side-by-side setting: the other library's arm (`trl_arm`), our arm's extra `cory train` flags, where the
    runs and report go; `ours` is our arm and `other` the other library's key in the report (`LIBRARIES`)."""

    trl_arm: str
    flags: tuple[str, ...]
    runs_dir: Path
    out: Path
    ours: str = OURS
    other: str = TRL


PRECISIONS = {
    "fp32": Precision(TRL, (), RUNS_DIR, result_path("time_to_reward.json")),
    "bf16": Precision("trl-grpo-default", ("--precision", "bf16-mixed"), result_path("time_to_reward_bf16"),
                      result_path("time_to_reward_bf16.json")),
}
#: Other libraries than TRL (``--against``).
AGAINST = {
    "comlrl": Precision(COMLRL, (), result_path("time_to_reward_comlrl"), result_path("time_to_reward_comlrl.json"),
                        ours="magrpo-wo-kt", other=COMLRL),
}


def time_to_gain(run: dict, gain: float) -> dict:
    """Where one ladder run first reaches its base-model held-out reward + `gain`.

    Args:
        run: a ladder run (`benchmarks.ladder_run.run_one`): ``before``, ``curve`` of point records with
            ``episodes``, ``reward``, ``train_cpu_s``.
        gain: the reward gain to reach (VADER units).

    Returns:
        ``{"reached": bool, "train_cpu_s": float, "episodes": float, "target": float}``; when not reached, the
        run's last point (a lower bound).

    Raises:
        ValueError: the curve records no training CPU seconds (a run from before they were kept).
    """
    curve = [point_record(p) for p in run["curve"]]
    if not curve or any("train_cpu_s" not in p for p in curve):
        raise ValueError(f"run {run.get('arm')} seed {run.get('seed')}: its curve has no train_cpu_s; rerun it with "
                         "the current benchmarks/learning.py")
    target = run["before"] + gain
    hit = first_reach(curve, target)
    if hit is None:
        return {"reached": False, "train_cpu_s": curve[-1]["train_cpu_s"], "episodes": curve[-1]["episodes"],
                "target": target}
    return {"reached": True, **hit, "target": target}


def report(runs: list[dict], gain: float, trl_arm: str = TRL, *, ours: str = OURS, other: str = TRL) -> dict:
    """Per-seed times of both arms (`ours` and `trl_arm`), their IQM [95 % CI] and the ratios ours ÷ theirs; the
    result's per-seed and ``train_cpu_s`` entries are keyed `ours` and `other` (``"grpo"`` and ``"trl-grpo"`` against
    TRL whatever the precision).

    Raises:
        ValueError: an arm is missing for a seed (the comparison is per seed, on the same seeds).
    """
    label = {ours: ours, trl_arm: other}  # a run's arm -> its key in the result
    by = {(label[r["arm"]], r["seed"]): r for r in runs if r["arm"] in label}
    seeds = sorted({r["seed"] for r in runs})
    missing = [f"{arm} seed {s}" for s in seeds for arm in label if (label[arm], s) not in by]
    if missing:
        raise ValueError(f"no run for {missing}; run `python benchmarks/time_to_reward.py --seeds ...` for them")
    with tempfile.TemporaryDirectory() as tmp:  # our arm's episodes per iteration, from its own configs
        batch = arm_configs("imdb", ours, 0, 0, tmp)[0].update.batch_size
    per_seed = {}
    both = (ours, other)
    for s in seeds:
        mine, theirs = time_to_gain(by[ours, s], gain), time_to_gain(by[other, s], gain)
        per_seed[s] = {ours: mine, other: theirs, "ratio": mine["train_cpu_s"] / theirs["train_cpu_s"],
                       "ratio_is_bound": not (mine["reached"] and theirs["reached"]),
                       "train_cpu_s_per_iteration": {arm: by[arm, s]["train_cpu_s"] * batch / by[arm, s]["episodes"]
                                                     for arm in both},
                       "final_reward": {arm: by[arm, s]["final"] for arm in both},
                       "before": {arm: by[arm, s]["before"] for arm in both},
                       "commit": {arm: by[arm, s].get("commit") for arm in both}}
    stats = {arm: arm_summary([per_seed[s][arm]["train_cpu_s"] for s in seeds]) for arm in both}
    ratios = [per_seed[s]["ratio"] for s in seeds]
    return {"gain": gain, "trl_arm": trl_arm, "ours": ours, "other": other, "seeds": seeds, "per_seed": per_seed,
            "train_cpu_s": stats, "ratio_of_iqms": stats[ours]["iqm"] / stats[other]["iqm"],
            "ratio_per_seed": arm_summary(ratios),
            "all_reached": all(per_seed[s][arm]["reached"] for s in seeds for arm in both)}


def table(result: dict) -> str:
    """Markdown: one row per seed, then the IQMs and their ratio."""
    def cell(t: dict) -> str:
        return f"{'' if t['reached'] else '≥ '}{t['train_cpu_s']:.0f} s ({t['episodes']:.0f} ep.)"

    mine, other = result.get("ours", OURS), result.get("other", TRL)  # a report from before --against: TRL's
    library, trainer = LIBRARIES[other]
    bf16 = result.get("precision") == "bf16"
    ours, trl = (f"`{mine}`, bf16-mixed", " (its default, bf16)") if bf16 else (f"`{mine}`", "")
    gain = result["gain"]
    lines = [f"| seed | ours ({ours}) to +{gain} | {library} {trainer}{trl} to +{gain} | ours ÷ {library} |",
             "|---|---|---|---|"]
    for s, row in result["per_seed"].items():
        bound = " (bound)" if row["ratio_is_bound"] else ""
        lines.append(f"| {s} | {cell(row[mine])} | {cell(row[other])} | {row['ratio']:.2f}{bound} |")
    st = result["train_cpu_s"]

    def iqm(arm):
        ci = st[arm]["ci"]
        return f"{st[arm]['iqm']:.0f} s" + (f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else "")

    lines.append(f"| IQM [95 % CI] | {iqm(mine)} | {iqm(other)} | **{result['ratio_of_iqms']:.2f}** |")
    return "\n".join(lines)


def run_seed(seed: int, out: Path, precision: Precision = PRECISIONS["fp32"]) -> None:
    """Both arms of one seed side by side (the ladder, two processes), into `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "learning.py"), "--rung", "imdb", "--arms", precision.ours,
           precision.trl_arm, "--seeds", str(seed), "--jobs", "2", "--out", str(out)]
    if precision.flags:
        cmd += ["--flags", *precision.flags]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--gain", type=float, default=0.2, help="held-out reward gain over the base model")
    parser.add_argument("--precision", default="fp32", choices=sorted(PRECISIONS),
                        help="fp32: both arms in fp32; bf16: ours bf16-mixed beside TRL's default (module docstring)")
    parser.add_argument("--against", default="trl", choices=["trl", *sorted(AGAINST)],
                        help="the other library: trl (TRL's GRPOTrainer beside our grpo) or comlrl (CoMLRL's "
                             "MAGRPOTrainer beside our magrpo-wo-kt; fp32 only)")
    parser.add_argument("--runs_dir", help="where the per-seed ladder JSONs are kept (default: the precision's)")
    parser.add_argument("--report_only", action="store_true", help="do not run; report the JSONs in --runs_dir")
    add_out_option(parser, help="the report (default: the precision's)")
    args = parser.parse_args(argv)
    if not args.gain > 0:
        parser.error(f"--gain must be > 0, got {args.gain}")
    if args.against != "trl" and args.precision != "fp32":
        parser.error(f"--against {args.against} runs fp32 only (the library has no mixed precision), got "
                     f"--precision {args.precision}")
    precision = PRECISIONS[args.precision] if args.against == "trl" else AGAINST[args.against]
    out = checked_out(parser, args, default=precision.out)  # before any run
    runs_dir = Path(args.runs_dir or precision.runs_dir)
    for seed in args.seeds:
        path = runs_dir / f"seed_{seed}.json"
        if not args.report_only and not path.is_file():
            run_seed(seed, path, precision)
        if not path.is_file():
            parser.error(f"no runs for seed {seed} in {runs_dir}; run without --report_only")
    runs = [run for seed in args.seeds
            for run in json.loads((runs_dir / f"seed_{seed}.json").read_text(encoding="utf-8"))["runs"]]
    result = report(runs, args.gain, precision.trl_arm, ours=precision.ours, other=precision.other)
    result["precision"], result["against"] = args.precision, args.against
    result["command"] = recorded_command("benchmarks/time_to_reward.py", argv)
    write_json(out, result)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
