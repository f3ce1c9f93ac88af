"""The paper's collapse claim on the IMDB rung's long runs: "PPO collapses into repetitive positive text; CORY stays
fluent" (Ma et al. 2024, §3). Reads the ``-Nx`` runs' held-out responses at every evaluation point and measures
degeneration three ways, at equal episodes and at equal KL to the reference:

- **distinct-2**: distinct word bigrams over all bigrams of the point's responses (recorded by the run): falls
  when the responses repeat one another.
- **seq-rep-2**: within one response, the share of its word bigrams that repeat an earlier one, averaged over the
  responses (``1 − unique / total``; Welleck et al., "Neural Text Degeneration with Unlikelihood Training", ICLR
  2020, seq-rep-n): rises with "love love love".
- **top opening**: the share of responses that begin with the most common first three words: rises when the policy
  answers every query the same way.

    python benchmarks/collapse.py benchmarks/imdb_runs/{ppo,cory}-4x-s*.json --out benchmarks/collapse_imdb.json

Per arm (the ``-Nx`` suffix dropped) and cell, IQM [95 % CI] over seeds (`benchmarks.stats`); at equal KL each
seed's value is read where its (k1 KL) trajectory first reaches the level (`benchmarks.ladder_report.reward_at_kl`),
and a seed that never reaches it is left out (the count is in brackets). Also the first samples at the last point.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder_report import reward_at_kl  # noqa: E402
from benchmarks.stats import arm_summary  # noqa: E402

METRICS = ("distinct_2", "seq_rep_2", "top_opening")
EPISODES = (400, 800, 1200, 1600)
KL_LEVELS = (4.0, 8.0, 12.0, 16.0)


def seq_rep(text: str, n: int = 2) -> float:
    """Share of the word n-grams of `text` that repeat an earlier one (0 with fewer than two n-grams).

    >>> round(seq_rep("love love love it"), 3), seq_rep("a fine film")
    (0.333, 0.0)
    """
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if len(grams) > 1 else 0.0


def top_opening(responses: Sequence[str], words: int = 3) -> float:
    """Share of `responses` that begin with the most common first `words` words (empty responses count as one
    opening).

    >>> top_opening(["I love it", "I love it so", "A bad film"])
    0.6666666666666666
    """
    counts = Counter(tuple(r.split()[:words]) for r in responses)
    return counts.most_common(1)[0][1] / len(responses)


def degeneration(point: dict) -> dict:
    """A curve point with ``seq_rep_2`` and ``top_opening`` added, computed from its ``responses``.

    Raises:
        ValueError: the point keeps no response texts (only the IMDB rung's runs do).
    """
    responses = point.get("responses")
    if not responses:
        raise ValueError(f"the point at {point.get('episodes')} episodes keeps no response texts; only the IMDB "
                         f"rung's runs (keep_texts) can be read for collapse")
    return {**point, "seq_rep_2": sum(map(seq_rep, responses)) / len(responses),
            "top_opening": top_opening(responses)}


def _cell(values: list[float]) -> dict | None:
    return arm_summary(values) if values else None


def summarise(runs: Sequence[dict], episodes: Sequence[int] = EPISODES, levels: Sequence[float] = KL_LEVELS) -> dict:
    """Per arm: the seeds, each metric at each of `episodes` and each KL level, and the last point's samples."""
    from benchmarks.learning import arm_spec

    by_arm: dict[str, list[dict]] = {}
    for run in runs:
        by_arm.setdefault(arm_spec(run["arm"])[0], []).append(run)
    out = {}
    for arm, arm_runs in sorted(by_arm.items()):
        curves = [[degeneration(p) for p in run["curve"] if p.get("responses")] for run in arm_runs]
        entry = {"seeds": [run["seed"] for run in arm_runs], "at_episodes": {}, "at_kl": {},
                 "samples": {run["seed"]: run["curve"][-1].get("samples", [])[:4] for run in arm_runs}}
        for metric in ("reward", "kl_k1", *METRICS):
            entry["at_episodes"][metric] = {
                str(e): _cell([p[metric] for c in curves for p in c if p["episodes"] == e and metric in p])
                for e in episodes}
        for metric in ("reward", *METRICS):
            entry["at_kl"][metric] = {
                str(level): _cell([v for c in curves if (v := reward_at_kl(c, level, value=metric)) is not None])
                for level in levels}
        out[arm] = entry
    return out


def table(summary: dict, where: str = "at_episodes") -> str:
    """Markdown: one row per (arm, metric), one column per episodes count (or KL level); IQM (seeds)."""
    columns = list(next(iter(summary.values()))[where]["reward"])
    label = "episodes" if where == "at_episodes" else "KL"
    lines = ["| arm | metric | " + " | ".join(f"{label} {c}" for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for arm, entry in summary.items():
        for metric, cells in entry[where].items():
            shown = [f"{c['iqm']:.3f} ({c['n']})" if c else "—" for c in cells.values()]
            lines.append(f"| {arm} | {metric} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ladder JSONs of the long (-Nx) runs")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "collapse_imdb.json"))
    args = parser.parse_args(argv)
    runs = [run for path in args.runs for run in json.loads(Path(path).read_text(encoding="utf-8"))["runs"]]
    summary = {"command": "python benchmarks/collapse.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "arms": summarise(runs)}
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(table(summary["arms"]))
    print(table(summary["arms"], "at_kl"))
    print(f"wrote {args.out}")
    return summary


if __name__ == "__main__":
    main()
