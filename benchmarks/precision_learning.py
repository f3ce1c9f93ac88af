"""Does learning change under ``--precision bf16-mixed``? The same arms and seeds on the IMDB rung in fp32 and in
bf16-mixed, compared the way the ladder compares arms: held-out reward at the end and at equal KL, IQM [95 % CI]
over seeds, and P(bf16-mixed > fp32) over all pairs of their runs (issue 39; meaningful on a CPU with native bf16, where
`--precision auto` picks bf16-mixed).

    python benchmarks/precision_learning.py benchmarks/results/time_to_reward/seed_{0,1,2}.json \\
        benchmarks/results/time_to_reward_bf16/seed_{0,1,2}.json \\
        benchmarks/results/imdb_runs/cory-grpo-s{0,1,2}.json \\
        benchmarks/results/imdb_runs/cory-grpo-bf16-s{0,1,2}.json \\
        --arms grpo cory-grpo --out benchmarks/results/precision_learning_imdb.json

Each input is a ladder JSON (`benchmarks/learning.py`); a run's precision is the last ``--precision`` in the file's
shared flags and the run's own flags (``fp32`` when none). Runs of other arms (e.g. TRL's, in the time-to-reward
files) are left out. Each (arm, precision) becomes one arm of a ladder result named ``ARM [PRECISION]``, summarised
by the ladder's own code (`benchmarks.ladder_summary.summarise` / `report`: the JSON, the curves figure, the tables),
with ``precision_improvement``: per arm, P(bf16-mixed > fp32) of the final reward and of the reward at each KL level
(`trainers.evaluation.stats.improvement_summary`, over independent runs: the seed sets may differ). Runs of one
precision made on different CPUs may be mixed: an fp32 run repeated on an AVX512/AMX CPU matched the AVX2 CPU's run
reward for reward (KL within 8e-6; docs/results/performance.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.outputs import add_out_option, checked_out  # noqa: E402
from benchmarks.paths import recorded_command  # noqa: E402
from trainers.evaluation.stats import improvement_summary  # noqa: E402

FP32, BF16 = "fp32", "bf16-mixed"


def precision_of(flags: Sequence[str]) -> str:
    """The last ``--precision`` value in `flags`, ``"fp32"`` when none.

    >>> precision_of(["--precision", "auto", "--seed", "1", "--precision", "bf16-mixed"])
    'bf16-mixed'
    >>> precision_of([])
    'fp32'
    """
    from benchmarks.ladder_merge import flag_settings

    return (flag_settings(flags).get("--precision") or (FP32,))[-1]


def label(arm: str, precision: str) -> str:
    """The result's arm name of one (arm, precision): ``"grpo [bf16-mixed]"``."""
    return f"{arm} [{precision}]"


def labelled_runs(paths: Sequence[str | Path], arms: Sequence[str]) -> list[dict]:
    """The runs of `arms` in the ladder JSONs at `paths`, each renamed ``ARM [PRECISION]``.

    Raises:
        ValueError: a precision other than fp32 / bf16-mixed (e.g. ``auto``, which depends on the machine), or
            the same (arm, precision, seed) twice.
    """
    runs, seen = [], set()
    for path in paths:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
        for run in result["runs"]:
            if run["arm"] not in arms:
                continue
            precision = precision_of([*result.get("shared_flags", []), *run.get("flags", [])])
            if precision not in (FP32, BF16):
                raise ValueError(f"{path}: run {run['arm']} seed {run['seed']} ran at --precision {precision}; "
                                 f"compare runs of an explicit {FP32} or {BF16}")
            key = (run["arm"], precision, run["seed"])
            if key in seen:
                raise ValueError(f"{path}: {run['arm']} [{precision}] seed {run['seed']} is given twice; pass each "
                                 "run once")
            seen.add(key)
            runs.append({**run, "arm": label(run["arm"], precision)})
    return runs


def precision_improvement(result: dict, arms: Sequence[str]) -> dict:
    """Per arm: P(bf16-mixed > fp32) of the final held-out reward (``"end"``) and at each KL level of the result's
    ``equal_kl``; ``{arm: {"end": summary, "kl": {level: summary}}}`` (`improvement_summary`)."""
    out = {}
    for arm in arms:
        fp32, bf16 = label(arm, FP32), label(arm, BF16)
        if fp32 not in result["arms"] or bf16 not in result["arms"]:
            continue

        def by_seed(entry: dict) -> dict:
            return dict(zip(entry["seeds"], entry["per_seed"]))

        entry = {"end": improvement_summary(by_seed(result["arms"][bf16]), by_seed(result["arms"][fp32]),
                                            names=(bf16, fp32)), "kl": {}}
        for level, row in ((result.get("equal_kl") or {}).get("levels") or {}).items():
            if fp32 in row and bf16 in row:
                entry["kl"][level] = improvement_summary(by_seed(row[bf16]), by_seed(row[fp32]), names=(bf16, fp32))
        out[arm] = entry
    return out


def improvement_table(improvement: dict) -> str:
    """Markdown: per arm, P(bf16-mixed > fp32) at the end and at each KL level."""
    from benchmarks.ladder_stats import format_interval

    levels = sorted({level for e in improvement.values() for level in e["kl"]}, key=float)
    head = ["arm", "P(bf16-mixed > fp32): end", *(f"at KL {lv}" for lv in levels)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for arm, e in improvement.items():
        cells = [format_interval(e["end"], "p"),
                 *(format_interval(e["kl"][lv], "p") if lv in e["kl"] else "—" for lv in levels)]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    from benchmarks.ladder_summary import report, summarise

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ladder JSONs holding fp32 and bf16-mixed runs of the arms")
    parser.add_argument("--arms", nargs="+", default=["grpo", "cory-grpo"])
    add_out_option(parser, "precision_learning_imdb.json")
    args = parser.parse_args(argv)
    out = checked_out(parser, args, also=(".png", "_tradeoff.png"))  # the JSON and `report`'s figures
    missing = [p for p in args.runs if not Path(p).is_file()]
    if missing:
        parser.error(f"no such ladder JSON {missing}")
    try:
        runs = labelled_runs(args.runs, args.arms)
    except ValueError as err:
        parser.error(str(err))
    if not runs:
        parser.error(f"no run of {args.arms} in the files given")
    argv = list(sys.argv[1:] if argv is None else argv)
    result = summarise("imdb", runs, {}, argv)
    result["command"] = recorded_command("benchmarks/precision_learning.py", argv)
    result = report(result, out,  # the ladder's JSON (with the precision comparison), figures and tables
                    extra=lambda summary: {"precision_improvement": precision_improvement(summary, args.arms)})
    print(improvement_table(result["precision_improvement"]))
    return result


if __name__ == "__main__":
    main()
