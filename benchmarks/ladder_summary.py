"""A rung's result, from the runs of one ladder command (`summarise`) or from ladder JSONs made apart (`merge`, after
`benchmarks.ladder_merge`'s checks): per arm the per-seed final rewards, mean ± std and IQM [95 % CI], the floors and
ceilings, every run with its commit; a ``-Nx`` run also stands for its base arm where that did not run on its seed
(`with_base_arms`). `report` adds the equal-time, equal-KL, P(A > B) and combined-reward summaries
(`benchmarks.ladder_report`, `benchmarks.ladder_stats`), writes the JSON and its figures and prints the tables
(`tables`, also ``benchmarks/learning.py --tables JSON``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.ladder_merge import UNRECORDED, check_mergeable
from benchmarks.ladder_report import (POINT_KEYS, combined_rewards, combined_table, equal_kl, equal_time,
                                      first_reach, kl_table, mean_std, plot, plot_tradeoff, point_record, table)
from benchmarks.ladder_stats import format_interval, improvement_table, improvements
from benchmarks.outputs import write_json
from benchmarks.paths import recorded_command
from benchmarks.rungs import EXTERNAL_ARMS, RUNGS, arm_spec
from trainers.evaluation.stats import METHOD, arm_summary

__all__ = ["merge", "report", "run_budget", "runs_from_summary", "summarise", "tables", "truncated_run",
           "with_base_arms"]


def truncated_run(run: dict, episodes: int) -> dict | None:
    """A ``-2x`` run read as its base arm's run of `episodes` episodes: its curve up to `episodes`, whose last point
    is the evaluation there (every source of randomness derives from (seed, iteration), so the first `episodes`
    of the longer run are the shorter run exactly). None when the curve has no point at `episodes` or lacks the
    records (KL, distinct-n) of a final evaluation."""
    curve = [point_record(p) for p in run["curve"]]
    kept = [p for p in curve if p["episodes"] <= episodes]
    if not kept or kept[-1]["episodes"] != episodes:
        return None
    last = kept[-1]
    final_eval = {k: last[k] for k in POINT_KEYS if k in last} | {"reward": last["reward"]}
    train_reward = run.get("train_reward", [])  # one value per iteration
    return {**run, "arm": arm_spec(run["arm"])[0], "episodes": episodes, "curve": kept, "final": last["reward"],
            "final_eval": final_eval, "train_cpu_s": last.get("train_cpu_s"),
            "cpu_s": last.get("train_cpu_s", run["cpu_s"]), "derived_from": run["arm"],
            "train_reward": train_reward[: len(train_reward) * episodes // run["episodes"]]}


def with_base_arms(runs: list[dict], episodes: int) -> list[dict]:
    """`runs` plus, for each ``-Nx`` run whose base arm was not run on that seed, the base arm's run read from it
    (`truncated_run`)."""
    have = {(r["arm"], r["seed"]) for r in runs}
    derived = []
    for run in sorted(runs, key=lambda r: arm_spec(r["arm"])[1]):  # the shortest longer run first
        base, factor = arm_spec(run["arm"])
        if factor > 1 and (base, run["seed"]) not in have:
            short = truncated_run(run, episodes)
            if short is not None:
                derived.append(short)
                have.add((base, run["seed"]))
    return runs + derived


def summarise(rung_name: str, runs: list[dict], skipped: dict[str, str], argv: Sequence[str]) -> dict:
    rung = RUNGS[rung_name]
    arms: dict[str, dict] = {}
    runs = with_base_arms(runs, rung.episodes)
    for run in sorted(runs, key=lambda r: (r["arm"], r["seed"])):
        arms.setdefault(run["arm"], {"runs": []})["runs"].append(run)
    for arm, entry in arms.items():
        rs = entry.pop("runs")
        mean, std = mean_std(r["final"] for r in rs)
        before, before_std = mean_std(r["before"] for r in rs)
        gains = [r["final"] - r["before"] for r in rs]
        entry.update(per_seed=[r["final"] for r in rs], mean=mean, std=std, seeds=[r["seed"] for r in rs],
                     before=before, before_std=before_std, gain_per_seed=gains,
                     episodes=rs[0]["episodes"], cpu_s=mean_std(r["cpu_s"] for r in rs)[0], metric=rs[0]["metric"],
                     curves=[r["curve"] for r in rs])
        entry["stats"] = {"final": arm_summary(entry["per_seed"])}  # IQM [95 % CI] over seeds (evaluation.stats)
        if rung.floor_on_gain:
            entry["stats"]["gain"] = arm_summary(gains)
        if all(r.get("train_cpu_s") is not None for r in rs):
            entry["train_cpu_s"] = mean_std(r["train_cpu_s"] for r in rs)[0]
        if any("derived_from" in r for r in rs):  # read from a longer run: its total CPU s is not this arm's
            entry["derived_from"] = sorted({r["derived_from"] for r in rs if "derived_from" in r})
        if rung.floor_on_gain and rung.floors:  # when each seed first gained the (smallest) floor over its base
            floor = min(rung.floors.values())
            entry["to_floor"] = {"gain": floor, "per_seed": [first_reach(r["curve"], r["before"] + floor) for r in rs]}
        extra = [r["final_eval"] for r in rs if "final_eval" in r]
        for key in ("kl", "kl_k1", "distinct_1", "distinct_2", "response_len", "pioneer_task_reward",
                    "observer_task_reward"):
            values = [e[key] for e in extra if key in e]
            if values:
                entry[key] = mean_std(values)[0]
    floors = {}
    for arm, floor in rung.floors.items():
        if arm not in arms:
            continue
        gain = rung.floor_on_gain
        values = arms[arm]["gain_per_seed"] if gain else arms[arm]["per_seed"]
        met = all(v >= floor for v in values)
        if "cpu_s" in rung.extra_floor:
            met = met and arms[arm]["cpu_s"] <= rung.extra_floor["cpu_s"]
        floors[arm] = {"floor": floor, "on": "gain over the base model" if gain else "final reward",
                       "per_seed": values, "met_on_every_seed": met}
    ceilings = {arm: {"ceiling": ceiling, "on": "final reward", "per_seed": arms[arm]["per_seed"],
                      "met_on_every_seed": all(v <= ceiling for v in arms[arm]["per_seed"])}
                for arm, ceiling in rung.ceilings.items() if arm in arms}
    kept = [{**run, "final_eval": {k: v for k, v in run["final_eval"].items() if k != "rewards"}}
            if "final_eval" in run else run for run in runs if "derived_from" not in run]
    return {"rung": rung_name, "help": rung.help, "command": recorded_command("benchmarks/learning.py", argv),
            "runs": kept, "commits": {f"{r['arm']}-s{r['seed']}": r.get("commit") or UNRECORDED for r in kept},
            "episodes": rung.episodes, "arms": arms, "floors": floors, "ceilings": ceilings, "skipped": skipped,
            "shared_flags": list(rung.flags), "stats_method": METHOD}


def run_budget(run: dict) -> tuple[str, int]:
    """(group, episodes) of a run for `check_mergeable`: this project's arms share the rung's budget (a ``-Nx`` arm's
    episodes divided by N); another library's arm counts episodes its own way and is compared with itself."""
    if run["arm"] in EXTERNAL_ARMS:
        return run["arm"], run["episodes"]
    return "this project's arms", run["episodes"] // arm_spec(run["arm"])[1]


def runs_from_summary(result: dict) -> list[dict]:
    """Per-seed runs rebuilt from a result written before the JSON kept its runs: final, before (final − gain),
    curve, episodes and metric per seed; CPU seconds, KL and distinct-n are the arm's means."""
    runs = []
    for arm, e in result["arms"].items():
        extra = {key: e[key] for key in ("kl", "distinct_1", "distinct_2", "pioneer_task_reward",
                                         "observer_task_reward") if key in e}
        for i, seed in enumerate(e["seeds"]):
            curve = e["curves"][i]
            run = {"arm": arm, "seed": seed, "final": e["per_seed"][i],
                   "before": e["per_seed"][i] - e["gain_per_seed"][i], "episodes": e["episodes"], "cpu_s": e["cpu_s"],
                   "curve": curve, "metric": e["metric"], "final_eval": dict(extra)}
            if curve and "train_cpu_s" in point_record(curve[-1]):
                run["train_cpu_s"] = point_record(curve[-1])["train_cpu_s"]
            runs.append(run)
    return runs


def merge(paths: Sequence[str], out: Path, argv: Sequence[str], *, across_commits: bool = False) -> dict:
    """One result from several ladder JSONs of the same rung (runs made apart, e.g. one arm at a time): their runs
    are summarised together; each arm keeps the command that produced it (``commands``), every run its commit
    (``commits``: ``"arm-sSEED"`` -> commit or ``"unrecorded"``).

    Raises:
        SystemExit: a file is missing; the files are of different rungs; or `benchmarks.ladder_merge.check_mergeable`
            refuses them (settings, episodes, a run twice, or commits that differ without `across_commits`).
    """
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise SystemExit(f"--merge: no such ladder JSON {missing}; pass the files a ladder run wrote with --out")
    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    rungs = {part["rung"] for part in parts}
    if len(rungs) != 1:
        raise SystemExit(f"--merge needs JSONs of one rung, got rungs {sorted(rungs)}")
    part_runs = [part["runs"] if "runs" in part else runs_from_summary(part) for part in parts]
    shared_flags = check_mergeable(list(zip(paths, parts, part_runs)), budget=run_budget,
                                   across_commits=across_commits)
    runs = [run for runs in part_runs for run in runs]
    skipped = {arm: why for part in parts for arm, why in part["skipped"].items()}
    result = summarise(rungs.pop(), runs, skipped, argv)
    result["shared_flags"] = shared_flags
    result["commands"] = {arm: part["command"] for part in parts for arm in part["arms"]}
    if across_commits:
        result["across_commits"] = True
    return report(result, out)


def tables(result: dict) -> str:
    """The markdown tables of a summarised result (`report`'s, also ``--tables JSON``): per arm, reward at equal
    KL, P(A > B), distinct-2 at equal KL, combined reward (those the result has)."""
    parts = (table(result), kl_table(result), improvement_table(result), kl_table(result, "distinct_2_at_kl"),
             combined_table(result))
    return "\n".join(part for part in parts if part)


def report(result: dict, out: Path, extra: Callable[[dict], dict] | None = None) -> dict:
    """Add the equal-time, equal-KL, P(A > B) and combined-reward summaries (and what `extra` computes from the
    result so far, for a benchmark that builds on them), write the JSON once and the figures (reward against
    episodes; reward against KL with the combined reward, when the points record KL), print the tables, floors and
    ceilings."""
    result["equal_time"] = equal_time(result)
    result["improvement"] = improvements(result)
    result["equal_kl"] = equal_kl(result)
    result["distinct_2_at_kl"] = equal_kl(result, value="distinct_2")
    result["combined_reward"] = combined_rewards(result)
    if extra is not None:
        result.update(extra(result))
    write_json(out, result)
    plot(result, out.with_suffix(".png"))
    tradeoff = plot_tradeoff(result, out.with_name(out.stem + "_tradeoff.png"))
    print(tables(result))
    for arm, f in result["floors"].items():
        print(f"floor {arm}: {f['on']} >= {f['floor']} on every seed: {'met' if f['met_on_every_seed'] else 'MISSED'} "
              f"({', '.join(f'{v:.2f}' for v in f['per_seed'])})")
    if result["equal_time"]:
        same = result["equal_time"]
        print(f"at equal training time ({same['train_cpu_s']:.0f} CPU s, the shortest arm's): " + ", ".join(
            f"{arm} {e['mean']:.3f} ± {e['std']:.3f}, IQM {format_interval(e['stats'])}"
            for arm, e in same["arms"].items()))
    for arm, c in result["ceilings"].items():
        print(f"ceiling {arm}: {c['on']} <= {c['ceiling']} on every seed: "
              f"{'met' if c['met_on_every_seed'] else 'MISSED'} ({', '.join(f'{v:.2f}' for v in c['per_seed'])})")
    print(f"wrote {out} and {out.with_suffix('.png')}" + (f" and {tradeoff}" if tradeoff else ""))
    return result
