"""Is CORY's observer lazy? Influence and copy-rate curves over training, from ladder runs that measured them.

The ladder measures each later seat's influence and copy rate at every evaluation point when asked
(`trainers.evaluation.influence`; ``--flags --eval_influence true``), e.g. on relay (the observer must use the
pioneer's answer) and IMDB (the existing 400-episode setting):

    python benchmarks/learning.py --rung relay --arms cory cory-wo-kt --seeds 0 1 2 3 4 \\
        --out benchmarks/results/influence_relay_runs.json --flags --eval_influence true
    python benchmarks/influence.py benchmarks/results/influence_relay_runs.json \\
        --out benchmarks/results/influence_relay.json

This script reads those runs and, per arm and evaluation point (episodes), gives the observer's influence
(reward given the real pioneer answer − given another query's), influence given none, and copy rate, as IQM [95 %
CI] over seeds (`trainers.evaluation.stats.arm_summary`). Whether influence **falls** as training goes on: per seed the
drop from its peak to its last point (``peak − last``, ≥ 0), and the share of seeds whose last point is below their
peak by more than `FALL` (the verdict "falls" needs a majority and an interval of the drop above `FALL`).
``cory-wo-kt`` is the floor (influence 0 by construction: its observer reads nothing). A figure beside the JSON:
influence and copy rate against episodes, one line per arm with its interval.
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

from benchmarks.outputs import add_out_option, checked_out, write_figure, write_json  # noqa: E402
from benchmarks.paths import recorded_command, recorded_path  # noqa: E402
from trainers.evaluation.stats import arm_summary  # noqa: E402

#: The quantities read from each point, for the seat `SEAT`.
QUANTITIES = ("influence", "influence_empty", "copy_rate")
SEAT = "observer"
#: A drop from the peak larger than this (reward units) counts as a fall.
FALL = 0.05


def curves(runs: Sequence[dict], seat: str = SEAT) -> dict[str, dict[int, dict[str, list[float]]]]:
    """arm -> episodes -> quantity -> per-seed values, from ladder run records whose curve points hold
    ``influence/<seat>`` (`benchmarks.ladder_report.SEAT_POINT_PREFIXES`; points without it are skipped)."""
    out: dict = {}
    for run in runs:
        for point in run.get("curve", []):
            if f"influence/{seat}" not in point:
                continue
            cell = out.setdefault(run["arm"], {}).setdefault(int(point["episodes"]), {q: [] for q in QUANTITIES})
            for q in QUANTITIES:
                cell[q].append(float(point[f"{q}/{seat}"]))
    return out


def falls(runs: Sequence[dict], arm: str, seat: str = SEAT, fall: float = FALL) -> dict | None:
    """Per seed of `arm`: peak influence, last influence and ``drop = peak − last``; their IQM [CI] and the share
    of seeds whose drop exceeds `fall`; ``falls``: a majority of seeds fell and the drop's interval lies above
    `fall` (None: fewer than two points with influence)."""
    drops, peaks, lasts = [], [], []
    for run in runs:
        if run["arm"] != arm:
            continue
        values = [p[f"influence/{seat}"] for p in run.get("curve", []) if f"influence/{seat}" in p]
        if len(values) < 2:
            continue
        peaks.append(max(values))
        lasts.append(values[-1])
        drops.append(max(values) - values[-1])
    if not drops:
        return None
    drop = arm_summary(drops)
    share = sum(d > fall for d in drops) / len(drops)
    low = drop["ci"][0] if drop["ci"] else drop["iqm"]
    return {"peak": arm_summary(peaks), "last": arm_summary(lasts), "drop": drop, "share_fell": share,
            "falls": share > 0.5 and low > fall, "seeds": len(drops)}


def summarise(runs: Sequence[dict], seat: str = SEAT) -> dict:
    """Per arm: the curve (episodes -> quantity -> IQM [CI]) and `falls`."""
    out = {}
    for arm, points in curves(runs, seat).items():
        out[arm] = {"curve": {ep: {q: arm_summary(v) for q, v in cell.items()} for ep, cell in sorted(points.items())},
                    "falls": falls(runs, arm, seat)}
    return out


def _shown(cell: dict) -> str:
    ci = cell["ci"]
    return f"{cell['iqm']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{cell['iqm']:.3f} [n/a: one seed]"


def table(summary: dict) -> str:
    """Markdown: per arm, the first, middle and last points' influence and copy rate; then the fall verdicts."""
    lines = ["| arm | episodes | influence | influence given none | copy rate |", "|---|---|---|---|---|"]
    for arm, s in summary.items():
        eps = list(s["curve"])
        for ep in dict.fromkeys([eps[0], eps[len(eps) // 2], eps[-1]]):
            cell = s["curve"][ep]
            lines.append(f"| {arm} | {ep} | {_shown(cell['influence'])} | {_shown(cell['influence_empty'])} | "
                         f"{_shown(cell['copy_rate'])} |")
    lines += ["", "| arm | peak influence | last influence | drop (peak − last) | seeds that fell | falls? |",
              "|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        f = s["falls"]
        if f:
            lines.append(f"| {arm} | {_shown(f['peak'])} | {_shown(f['last'])} | {_shown(f['drop'])} | "
                         f"{round(f['share_fell'] * f['seeds'])} of {f['seeds']} | {'yes' if f['falls'] else 'no'} |")
    return "\n".join(lines)


def plot(summary: dict, path: Path, title: str = "") -> Path:
    """Influence (left) and copy rate (right) against episodes: IQM per arm with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, q, label in ((axes[0], "influence", "influence (reward: real − other answer)"),
                         (axes[1], "copy_rate", "copy rate (bigrams of the pioneer's)")):
        for k, (arm, s) in enumerate(summary.items()):
            eps = list(s["curve"])
            mid = [s["curve"][e][q]["iqm"] for e in eps]
            ax.plot(eps, mid, "-o", ms=3, color=f"C{k}", label=arm)
            cis = [s["curve"][e][q]["ci"] for e in eps]
            if all(cis):
                ax.fill_between(eps, [c[0] for c in cis], [c[1] for c in cis], color=f"C{k}", alpha=0.2)
        ax.set_xlabel("training episodes")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ladder JSONs whose runs measured influence")
    parser.add_argument("--seat", default=SEAT, help="the seat read (default: observer)")
    add_out_option(parser, "influence.json")
    args = parser.parse_args(argv)
    out = checked_out(parser, args, also=(".png",))
    runs = [run for path in args.runs for run in json.loads(Path(path).read_text(encoding="utf-8"))["runs"]]
    summary = summarise(runs, args.seat)
    if not summary:
        parser.error(f"no run in {args.runs} measured influence/{args.seat}; run the ladder with --flags "
                     "--eval_influence true")
    result = {"command": recorded_command("benchmarks/influence.py", argv),
              "inputs": [recorded_path(p) for p in args.runs], "seat": args.seat, "fall": FALL, "arms": summary}
    write_json(out, result)
    plot(summary, out.with_suffix(".png"), title=f"{args.seat}: influence and copy rate over training")
    print(table(summary))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
