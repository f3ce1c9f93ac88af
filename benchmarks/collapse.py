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

None of the three sees a run that leaves language for strings of unrelated tokens (random tokens do not repeat), so
each run is also read for **divergence**: ``gain_kept`` is the share of its best held-out reward gain so far that a
point keeps, ``(r − r₀) / (max r − r₀)`` over the points up to it (r₀ the untrained model's, episode 0; undefined
until the best gain reaches ``MIN_GAIN``), and a run has *diverged* at its first point that keeps less than
``KEPT`` of that gain (reward back near the base model's after having learnt), with the KL jump into that point.

    python benchmarks/collapse.py benchmarks/results/imdb_runs/{ppo,cory}-4x-s*.json \
        --out benchmarks/results/collapse_imdb.json

Per arm (the ``-Nx`` suffix dropped) and cell, IQM [95 % CI] over seeds (`trainers.evaluation.stats`); at equal KL each
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
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402
from benchmarks.paths import recorded_command  # noqa: E402
from trainers.evaluation.stats import arm_summary  # noqa: E402

METRICS = ("distinct_2", "seq_rep_2", "top_opening")
MIN_GAIN = 0.1  # held-out reward (VADER compound, in [-1, 1]) a run must have gained before it can diverge
KEPT = 0.25  # a point keeping less than this share of the best gain so far marks divergence
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


def gain_kept(curve: Sequence[dict], min_gain: float = MIN_GAIN) -> list[float | None]:
    """Per point of `curve` (episode order, first point the untrained model), the share of the best reward gain so
    far that it keeps: ``(r_i − r_0) / (max_{j≤i} r_j − r_0)``; ``None`` while that best gain is below `min_gain`.

    >>> gain_kept([{"reward": 0.1}, {"reward": 0.5}, {"reward": 0.9}, {"reward": 0.1}])
    [None, 1.0, 1.0, 0.0]
    """
    base, best, kept = curve[0]["reward"], curve[0]["reward"], []
    for point in curve:
        best = max(best, point["reward"])
        kept.append((point["reward"] - base) / (best - base) if best - base >= min_gain else None)
    return kept


def divergence(curve: Sequence[dict], kept: float = KEPT, min_gain: float = MIN_GAIN) -> dict | None:
    """The first point of `curve` that keeps less than `kept` of its best gain so far (`gain_kept`), as
    ``{"episodes", "reward", "peak_reward", "kl_k1", "kl_k1_before"}`` (the KL of the point before it beside its
    own: the jump), or ``None`` if the run never diverged.

    >>> divergence([{"episodes": 0, "reward": 0.1, "kl_k1": 0.0}, {"episodes": 8, "reward": 0.9, "kl_k1": 9.0},
    ...             {"episodes": 16, "reward": 0.1, "kl_k1": 70.0}])["episodes"]
    16
    """
    for i, share in enumerate(gain_kept(curve, min_gain)):
        if share is not None and share < kept:
            return {"episodes": curve[i]["episodes"], "reward": curve[i]["reward"],
                    "peak_reward": max(p["reward"] for p in curve[:i + 1]), "kl_k1": curve[i]["kl_k1"],
                    "kl_k1_before": curve[i - 1]["kl_k1"]}
    return None


def _cell(per_seed: dict) -> dict | None:
    """IQM [95 % CI] of one cell's per-seed values (`trainers.evaluation.stats.arm_summary`), the values kept by
    seed."""
    return {**arm_summary(list(per_seed.values())), "per_seed": per_seed} if per_seed else None


def summarise(runs: Sequence[dict], episodes: Sequence[int] = EPISODES, levels: Sequence[float] = KL_LEVELS) -> dict:
    """Per arm: the seeds, each metric at each of `episodes` and each KL level (IQM [CI] and the value of each seed
    that has one), where each run diverged, and the last point's samples.

    Raises:
        ValueError: two runs of one arm (the ``-Nx`` suffix dropped) and seed, e.g. a file given twice or
            ``ppo-2x`` and ``ppo-4x`` of seed 0; a run none of whose points keeps response texts.
    """
    from benchmarks.rungs import arm_spec

    by_arm: dict[str, list[dict]] = {}
    seen: dict[tuple[str, int], str] = {}
    for run in runs:
        arm = arm_spec(run["arm"])[0]
        if (arm, run["seed"]) in seen:
            raise ValueError(f"{arm} seed {run['seed']} is given twice ({seen[arm, run['seed']]} and {run['arm']}); "
                             "pass one run per arm and seed")
        seen[arm, run["seed"]] = run["arm"]
        if not any(p.get("responses") for p in run["curve"]):
            raise ValueError(f"{run['arm']} seed {run['seed']} keeps no response texts at any point; only the IMDB "
                             "rung's runs (keep_texts) can be read for collapse")
        by_arm.setdefault(arm, []).append(run)
    out = {}
    for arm, arm_runs in sorted(by_arm.items()):
        curves = {run["seed"]: [{**degeneration(p), "gain_kept": k} for p, k in
                                zip(run["curve"], gain_kept(run["curve"])) if p.get("responses")] for run in arm_runs}
        entry = {"seeds": [run["seed"] for run in arm_runs], "at_episodes": {}, "at_kl": {},
                 "diverged": {run["seed"]: divergence(run["curve"]) for run in arm_runs},
                 "samples": {run["seed"]: run["curve"][-1].get("samples", [])[:4] for run in arm_runs}}
        for metric in ("reward", "kl_k1", "gain_kept", *METRICS):
            entry["at_episodes"][metric] = {
                str(e): _cell({seed: p[metric] for seed, c in curves.items() for p in c
                               if p["episodes"] == e and p.get(metric) is not None})
                for e in episodes}
        for metric in ("reward", *METRICS):
            entry["at_kl"][metric] = {
                str(level): _cell({seed: v for seed, c in curves.items()
                                   if (v := reward_at_kl(c, level, value=metric)) is not None})
                for level in levels}
        out[arm] = entry
    return out


def improvements(summary: dict, a: str = "cory", b: str = "ppo", metric: str = "distinct_2") -> dict:
    """P(arm `a`'s `metric` > arm `b`'s) with its bootstrap interval
    (`trainers.evaluation.stats.improvement_summary`) in
    every cell of `summary` (at each episodes count and each KL level), over each arm's seeds there: independent
    runs, so the seed sets may differ (a seed that never reached the KL level is left out of its arm); a cell where
    an arm has no seed is an n/a with the reason."""
    from trainers.evaluation.stats import improvement_summary

    out = {}
    for where in ("at_episodes", "at_kl"):
        cells_a, cells_b = summary[a][where][metric], summary[b][where][metric]
        out[where] = {col: improvement_summary({int(k): v for k, v in cells_a[col]["per_seed"].items()},
                                               {int(k): v for k, v in cells_b[col]["per_seed"].items()},
                                               names=(a, b))
                      if cells_a[col] and cells_b[col] else {"p": None, "ci": None, "why": "no seed there"}
                      for col in cells_a}
    return out


def _shown(cell: dict | None) -> str:
    """A cell as the tables print it: ``IQM [low, high] (seeds)``, the interval left out for one seed."""
    if not cell:
        return "—"
    interval = f" [{cell['ci'][0]:.3f}, {cell['ci'][1]:.3f}]" if cell["ci"] else ""
    return f"{cell['iqm']:.3f}{interval} ({cell['n']})"


def improvement_table(summary: dict, a: str = "cory", b: str = "ppo",
                      metrics: Sequence[str] = ("distinct_2", "reward")) -> str:
    """Markdown: P(`a` > `b`) [95 % CI] of each of `metrics` at each episodes count and KL level (`improvements`);
    "n/a" where either arm has no seed."""
    per_metric = {metric: improvements(summary, a, b, metric) for metric in metrics}
    lines = []
    for where, label in (("at_episodes", "episodes"), ("at_kl", "KL")):
        columns = list(summary[a][where]["reward"])
        lines += [f"| P({a} > {b}) | " + " | ".join(f"{label} {c}" for c in columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for metric in metrics:
            cells = per_metric[metric][where]
            lines.append(f"| {metric} | " + " | ".join(
                "n/a" if c["p"] is None else f"{c['p']:.2f}" + (f" [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]" if c["ci"]
                                                                else "") for c in cells.values()) + " |")
        lines.append("")
    return "\n".join(lines).rstrip()


def table(summary: dict, where: str = "at_episodes") -> str:
    """Markdown: one row per (arm, metric), one column per episodes count (or KL level); IQM (seeds)."""
    columns = list(next(iter(summary.values()))[where]["reward"])
    label = "episodes" if where == "at_episodes" else "KL"
    lines = ["| arm | metric | " + " | ".join(f"{label} {c}" for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for arm, entry in summary.items():
        for metric, cells in entry[where].items():
            shown = [_shown(c) for c in cells.values()]
            lines.append(f"| {arm} | {metric} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def divergence_table(summary: dict) -> str:
    """Markdown: one row per (arm, seed): where the run diverged (`divergence`), or that it did not."""
    lines = ["| arm | seed | diverged at (episodes) | reward: best → then | KL (k1): before → then |",
             "|---|---|---|---|---|"]
    for arm, entry in summary.items():
        for seed, where in entry["diverged"].items():
            lines.append(f"| {arm} | {seed} | " + (" | ".join(
                (str(where["episodes"]), f"{where['peak_reward']:.3f} → {where['reward']:.3f}",
                 f"{where['kl_k1_before']:.1f} → {where['kl_k1']:.1f}")) if where else "no | — | —") + " |")
    return "\n".join(lines)


def report(summary: dict) -> str:
    """What `main` prints (and the results page shows): the tables at equal episodes, at equal KL, and of
    divergence, and P(CORY > PPO) of distinct-2 and reward where both arms are there, from a summary's ``arms``."""
    parts = [table(summary), table(summary, "at_kl")]
    if {"cory", "ppo"} <= set(summary):
        parts.append(improvement_table(summary))
    return "\n\n".join((*parts, divergence_table(summary)))


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="ladder JSONs of the long (-Nx) runs")
    add_out_option(parser, "collapse_imdb.json")
    args = parser.parse_args(argv)
    out = checked_out(parser, args)
    runs = [run for path in args.runs for run in json.loads(Path(path).read_text(encoding="utf-8"))["runs"]]
    try:
        arms = summarise(runs)
    except ValueError as err:
        parser.error(str(err))
    summary = {"command": recorded_command("benchmarks/collapse.py", argv), "arms": arms}
    write_json(out, summary)
    print(report(summary["arms"]))
    print(f"wrote {args.out}")
    return summary


if __name__ == "__main__":
    main()
