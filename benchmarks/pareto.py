"""The paper's Pareto claim on the IMDB rung: sweeping the KL coefficient β, do CORY's (KL, reward) points lie nearer
the reward–KL frontier than PPO's? (Ma et al. 2024, §3: "sweeping η, CORY's (task reward, KL) points lie closer to
the frontier than PPO's".)

    python benchmarks/pareto.py benchmarks/results/imdb_runs/{cory,ppo-2x}-s{0,1,2}.json \
        benchmarks/results/imdb_runs/{cory,ppo}-beta{0.01,0.2}-s{0,1,2}.json --out benchmarks/results/pareto_imdb.json

Each run file is a ladder JSON of one (arm, seed) (`benchmarks/learning.py`); its β is the last
``--init_kl_coef`` of the rung's flags and the run's own (``--flags --init_kl_coef 0.2``). A ``-Nx`` run counts as
its base arm read at the rung's budget (`benchmarks.ladder_summary.truncated_run`). A run's point is its final held-out
(k1 KL to the reference in nats, pioneer reward). The **frontier** is the set of points that no other point beats
on both (a lower or equal KL with a higher reward), over every arm, β and seed. A point's **gap** is how much reward
it lacks at its KL: the best reward among points with KL at most its own, minus its reward (0 on the frontier; a
vertical distance, in reward units). Per arm: the IQM [95 % CI] of the gaps over (β, seed) and P(CORY's gap < PPO's)
over all pairs of their runs (`trainers.evaluation.stats`; both arms swept over the same β values, else n/a), and per
(arm, β) the IQM of KL and reward. Writes ``--out`` (JSON) and a figure beside it (``.png``).
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
from benchmarks.paths import recorded_command  # noqa: E402
from trainers.evaluation.stats import arm_summary, improvement_summary  # noqa: E402


def beta_of(flags: Sequence[str], default: float | None = None) -> float | None:
    """The last ``--init_kl_coef`` value in `flags`, else `default`.

    >>> beta_of(["--init_kl_coef", "0.05", "--lr", "1", "--init_kl_coef", "0.2"])
    0.2
    """
    from benchmarks.ladder_merge import flag_settings

    values = flag_settings(flags).get("--init_kl_coef")
    return float(values[-1]) if values else default


def points_of(path: str | Path) -> list[dict]:
    """The (arm, β, seed, KL, reward) points of one ladder run file: ``-Nx`` runs read at the rung's budget.

    Raises:
        ValueError: a run whose final evaluation has no k1 KL (a rung without KL) or with no β in any flags.
    """
    from benchmarks.ladder_summary import truncated_run
    from benchmarks.rungs import arm_spec

    result = json.loads(Path(path).read_text(encoding="utf-8"))
    points = []
    for run in result["runs"]:
        base, factor = arm_spec(run["arm"])
        if factor > 1:
            run = truncated_run(run, run["episodes"] // factor)
        beta = beta_of(run.get("flags", []), beta_of(result.get("shared_flags", [])))
        kl = (run.get("final_eval") or {}).get("kl_k1")
        if beta is None or kl is None:
            raise ValueError(f"{path}: run {run['arm']} seed {run['seed']} records no "
                             f"{'β (--init_kl_coef)' if beta is None else 'k1 KL'}; it cannot be placed on the plane")
        points.append({"arm": base, "beta": beta, "seed": run["seed"], "kl": float(kl), "reward": float(run["final"])})
    return points


def gaps(points: Sequence[dict]) -> list[float]:
    """Each point's reward gap to the frontier of all `points`: max reward over points with KL ≤ its KL, minus its
    reward (≥ 0; 0 on the frontier).

    >>> gaps([{"kl": 1.0, "reward": 0.2}, {"kl": 2.0, "reward": 0.1}, {"kl": 3.0, "reward": 0.5}])
    [0.0, 0.1, 0.0]
    """
    return [max(q["reward"] for q in points if q["kl"] <= p["kl"]) - p["reward"] for p in points]


def frontier(points: Sequence[dict]) -> list[dict]:
    """The points on the frontier (gap 0), by increasing KL."""
    return sorted((p for p, g in zip(points, gaps(points)) if g == 0), key=lambda p: (p["kl"], -p["reward"]))


def summarise(points: list[dict]) -> dict:
    """Gaps per point, per arm the IQM [CI] of its gaps, P(arm's gap < another's) for every arm against ``ppo``,
    and per (arm, β) the IQM of KL and reward."""
    for p, g in zip(points, gaps(points)):
        p["gap"] = g
    arms = sorted({p["arm"] for p in points})
    by_arm = {arm: [p for p in points if p["arm"] == arm] for arm in arms}
    out = {"points": points, "frontier": frontier(points),
           "gap": {arm: arm_summary([p["gap"] for p in ps]) for arm, ps in by_arm.items()},
           "per_beta": {arm: {str(b): {"n": len(pb), "kl": arm_summary([p["kl"] for p in pb]),
                                       "reward": arm_summary([p["reward"] for p in pb])}
                              for b in sorted({p["beta"] for p in ps})
                              for pb in [[p for p in ps if p["beta"] == b]]}
                        for arm, ps in by_arm.items()}}
    if "ppo" in by_arm:  # lower gap is better: P(A's gap < B's) = P(−gap_A > −gap_B) over all pairs of runs
        def keyed(ps):
            return {(p["beta"], p["seed"]): -p["gap"] for p in ps}

        def versus(arm: str, ps: list[dict]) -> dict:
            """Both arms swept over the same β values, else n/a (pairs across other sweeps compare the sweeps)."""
            betas = sorted({p["beta"] for p in ps}), sorted({p["beta"] for p in by_arm["ppo"]})
            if betas[0] != betas[1]:
                return {"p": None, "ci": None, "why": f"β sweeps differ: {arm} {betas[0]}, ppo {betas[1]}"}
            return improvement_summary(keyed(ps), keyed(by_arm["ppo"]), names=(arm, "ppo"))

        out["nearer_than_ppo"] = {arm: versus(arm, ps) for arm, ps in by_arm.items() if arm != "ppo"}
    return out


def table(summary: dict) -> str:
    """Markdown: per arm and β the IQM KL and reward; per arm the gap IQM [CI] and P(nearer than PPO)."""
    def cell(s: dict) -> str:
        return f"{s['iqm']:.3f}" + (f" [{s['ci'][0]:.3f}, {s['ci'][1]:.3f}]" if s.get("ci") else "")

    betas = sorted({b for per in summary["per_beta"].values() for b in per}, key=float)
    head = ["arm", *(f"β {b}: KL · reward" for b in betas), "gap to the frontier", "P(gap < PPO's)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for arm, per in summary["per_beta"].items():
        cells = [f"{per[b]['kl']['iqm']:.2f} · {per[b]['reward']['iqm']:.3f} ({per[b]['n']})" if b in per else "—"
                 for b in betas]
        p = summary.get("nearer_than_ppo", {}).get(arm)
        if p is None:
            versus = "—"
        elif p["p"] is None:
            versus = f"n/a: {p['why']}"
        else:
            versus = f"{p['p']:.2f}" + (f" [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]" if p.get("ci") else "")
        cells += [cell(summary["gap"][arm]), versus]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> Path:
    """KL against reward: one colour per arm, one marker per β, the frontier as a step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    markers = dict(zip(sorted({p["beta"] for p in summary["points"]}), "o^sDv"))
    for i, arm in enumerate(sorted(summary["per_beta"])):
        for beta, marker in markers.items():
            ps = [p for p in summary["points"] if p["arm"] == arm and p["beta"] == beta]
            if ps:
                ax.scatter([p["kl"] for p in ps], [p["reward"] for p in ps], color=f"C{i}", marker=marker,
                           label=f"{arm}, β {beta}")
    f = summary["frontier"]
    ax.step([p["kl"] for p in f], [p["reward"] for p in f], where="post", color="grey", lw=1, label="frontier")
    ax.set_xlabel("KL to the reference at the end (k1, nats)")
    ax.set_ylabel("held-out reward (pioneer)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return write_figure(fig, path, dpi=120)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ladder JSONs of single (arm, seed) runs")
    add_out_option(parser, "pareto_imdb.json")
    args = parser.parse_args(argv)
    out = checked_out(parser, args, also=(".png",))
    points = [p for path in args.runs for p in points_of(path)]
    summary = {"command": recorded_command("benchmarks/pareto.py", argv),
               **summarise(points)}
    write_json(out, summary)
    print(table(summary))
    print(f"wrote {out} and {plot(summary, out.with_suffix('.png'))}")
    return summary


if __name__ == "__main__":
    main()
