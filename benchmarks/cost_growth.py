"""How cost grows with the work: CPU seconds and peak memory of one CORY iteration on the IMDB rung's settings while
one factor moves from a base point.

    python benchmarks/cost_growth.py                                    # every factor, 3 measured iterations a point
    python benchmarks/cost_growth.py --factors seats batch --iterations 2 --out /tmp/cost.json
    python benchmarks/cost_growth.py --model tiny --points 2 --iterations 1 --out /tmp/cost_tiny.json

The base point is the ``cory`` arm on the IMDB rung (`benchmarks.rungs.RUNGS`: SmolLM2-135M-Instruct + LoRA r 16,
mini-batch 8, 2 epochs) with `BASE`'s values: 2 seats (``--seating chain:2``), 8 new tokens per response
(``--min_new_tokens`` = ``--max_new_tokens``: the rung's 8–12 made fixed, so every point's length is known) and
batch 16, in a window of `CONTEXT_LEN` tokens that every point fits in. Each factor moves alone:

==========  ======================================  ===========  =========================================
factor      values                                  unit         flags
==========  ======================================  ===========  =========================================
seats       1, 2, 3, 4                              seat         ``--seating chain:N`` (seat k reads every
                                                                 earlier seat: the prompts grow too)
new_tokens  8, 16, 32, 64                           new token    ``--min_new_tokens T --max_new_tokens T``
batch       8, 16, 32, 64                           row          ``--batch_size B``
models      2, 3, 4                                 model        ``--population N --matchmaking uniform``
                                                                 (N LoRA adapters on one base; 2 = the
                                                                 base point, CORY's pair; two play a turn)
bases       1, 2                                    base model   2: ``--models llm2.disable_dropout=false
                                                                 llm2.value_head_dropout=0`` (slot llm2 on
                                                                 its own copy of the base) or, with
                                                                 ``--second_model M``, ``--models llm2=M``
==========  ======================================  ===========  =========================================

``models`` and ``bases`` leave the processed tokens where they are (two seats play every iteration), so their CPU
fit is per unit (``cpu_s_per_unit``: CPU s per extra model or base), not per token. ``bases`` = 2 loads the same
SmolLM2 weights again as llm2's own base (offline it is the only real model; a layout that differs only in dropout
settings that are no-ops here, every dropout probability being 0, keeps the two bases apart: ``trainers.loop.cast.build_cast``),
so the point isolates what a second base model of that size costs; ``--second_model gpt2`` puts another model there
(with the hub).

Each point (a factor's points share the base point) runs in its own process (`benchmarks.memory.peak_rss_gib`: one
torch thread, its peak RSS from ``os.wait4``, so the peak is the point's own), through
`benchmarks.iteration_profile.profile_own` (exclusive CPU seconds by phase); its first iteration is a warm-up and is
left out. A point reports the mean over its measured iterations of the CPU seconds (in total and by phase) and of
the **processed tokens** of an iteration: prompt + response tokens of every seat and row, counted from the
rollout's transcript.

Per factor: the ordinary least-squares slope of CPU seconds against processed tokens (``cpu_s_per_token``; against the
factor's value, ``cpu_s_per_unit``, for every factor), the
slope of peak RSS against the factor's value (``peak_rss_mib_per_unit``: MiB per extra seat, new token or row), and
``per_token_ratio``, the CPU seconds per processed token at the factor's largest value over those at its smallest
(linear cost gives ≈ 1, a fixed overhead per iteration less); a factor whose ratio exceeds `GROWTH_FLAG` is flagged
(``grows``, and listed under ``flagged``). The JSON (``--out``, default ``benchmarks/results/cost_growth.json``)
holds the points and fits; the figure beside it (``.png``) has one panel per factor: CPU seconds against processed
tokens with the fit, and peak RSS on the right axis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/cost_growth.py` from a clone
    sys.path.insert(0, str(ROOT))

from benchmarks.memory import peak_rss_gib  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_figure, write_json  # noqa: E402
from benchmarks.paths import recorded_command, recorded_flags, recorded_path  # noqa: E402

RUNG = "imdb"
ARM = "cory"
#: Per-token cost at a factor's largest value over its smallest above which the factor is flagged.
GROWTH_FLAG = 1.3


@dataclass(frozen=True)
class Factor:
    """One factor: the values it takes (smallest first), the unit its memory slope is per, its value at the base
    point, and whether it moves the processed tokens (else its CPU is fitted per unit only)."""

    values: tuple[int, ...]
    unit: str
    base: int
    moves_tokens: bool = True


#: The base point: every factor but the moving one keeps this value (``models`` 2 and ``bases`` 1 are implied).
BASE = {"seats": 2, "new_tokens": 8, "batch": 16}
FACTORS: dict[str, Factor] = {
    "seats": Factor((1, 2, 3, 4), "seat", BASE["seats"]),
    "new_tokens": Factor((8, 16, 32, 64), "new token", BASE["new_tokens"]),
    "batch": Factor((8, 16, 32, 64), "row", BASE["batch"]),
    "models": Factor((2, 3, 4), "model", 2, moves_tokens=False),
    "bases": Factor((1, 2), "base model", 1, moves_tokens=False),
}
#: The window of every point (``--context_len``; the rung's 96 cannot hold 2 seats' prompts and 64 new tokens). A
#: wider window costs nothing: the sampler skips all-padding columns and the learners pad to the longest row.
CONTEXT_LEN = 256


def point_flags(settings: dict[str, int], model: str | None = None, second_model: str | None = None) -> tuple[str, ...]:
    """The ``cory train`` flags of a point (after the rung's and the arm's): its seats, new tokens and batch, the
    window `CONTEXT_LEN`, `model` when given, a population (``models``) and a second base (``bases``: `second_model`,
    else the run's model loaded again as llm2's own base).

    >>> point_flags({"seats": 3, "new_tokens": 16, "batch": 8})
    ('--seating', 'chain:3', '--min_new_tokens', '16', '--max_new_tokens', '16', '--batch_size', '8', '--context_len', '256')
    >>> point_flags({**BASE, "models": 3})[-4:]
    ('--population', '3', '--matchmaking', 'uniform')
    """
    flags = ("--seating", f"chain:{settings['seats']}", "--min_new_tokens", str(settings["new_tokens"]),
             "--max_new_tokens", str(settings["new_tokens"]), "--batch_size", str(settings["batch"]),
             "--context_len", str(CONTEXT_LEN))
    flags += ("--model", model) if model else ()
    if settings.get("models", FACTORS["models"].base) != FACTORS["models"].base:
        flags += ("--population", str(settings["models"]), "--matchmaking", "uniform")
    if settings.get("bases", 1) == 2:
        flags += ("--models", *((f"llm2={second_model}",) if second_model else
                                ("llm2.disable_dropout=false", "llm2.value_head_dropout=0")))
    return flags


def factor_points(factor: str, points: int | None = None) -> list[dict[str, int]]:
    """The settings of `factor`'s points: `BASE` with the factor at each of its first `points` values (all: None);
    at the factor's base value, `BASE` itself (measured once for every factor)."""
    spec = FACTORS[factor]
    return [dict(BASE) if v == spec.base else {**BASE, factor: v} for v in spec.values[:points]]


def processed_tokens(transcript) -> int:
    """Prompt + response tokens of every seat and row of a `cory_env.episode.EpisodeTranscript` (no padding)."""
    return sum(len(p) + len(r) for seat in transcript.seats.values()
               for p, r in zip(seat.prompt_ids, seat.response_ids))


def measure_point(settings: dict[str, int], iterations: int, model: str | None = None, seed: int = 0,
                  second_model: str | None = None) -> dict:
    """One point in this process: one warm-up and `iterations` measured iterations of the `ARM` arm on `RUNG` with
    `point_flags`; the mean CPU seconds (``cpu_s``; by phase under ``phases``) and processed tokens (``tokens``) of
    the measured iterations, and each iteration's under ``per_iteration``."""
    import logging

    import trainers.loop.cory
    from benchmarks.iteration_profile import PHASES, profile_own

    logging.disable(logging.WARNING)
    tokens: list[int] = []
    play = trainers.loop.cory.run_episodes

    def counted(*args, **kwargs):
        transcript = play(*args, **kwargs)
        tokens.append(processed_tokens(transcript))
        return transcript

    trainers.loop.cory.run_episodes = counted  # profile_own times it as the rollout (counting takes microseconds)
    try:
        with tempfile.TemporaryDirectory(prefix="cory-cost-") as run_dir:
            rows = profile_own(ARM, iterations + 1, seed, run_dir, rung=RUNG,
                              flags=point_flags(settings, model, second_model))
    finally:
        trainers.loop.cory.run_episodes = play
    kept = [{"cpu_s": row["total"], "tokens": n, "phases": {p: row[p] for p in PHASES}}
            for row, n in zip(rows[1:], tokens[1:])]
    return {"settings": settings, "cpu_s": sum(r["cpu_s"] for r in kept) / len(kept),
            "tokens": sum(r["tokens"] for r in kept) / len(kept),
            "phases": {p: sum(r["phases"][p] for r in kept) / len(kept) for p in PHASES}, "per_iteration": kept}


def ols(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the ordinary least-squares line through the points (xs, ys).

    Raises:
        ValueError: fewer than two distinct xs (no line is determined).

    >>> ols([1, 2, 3], [3, 5, 7])
    (2.0, 1.0)
    """
    if len(set(xs)) < 2:
        raise ValueError(f"a least-squares line needs two distinct x values, got {list(xs)}; measure two points or "
                         "more per factor")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def factor_report(factor: str, points: list[dict]) -> dict:
    """A factor's points (each a `measure_point` result with ``peak_rss_gib``), smallest value first, with its fits:
    ``cpu_s_per_token`` and ``cpu_s_at_zero_tokens`` (CPU s against processed tokens; None for a factor that does
    not move them), ``cpu_s_per_unit`` and ``peak_rss_mib_per_unit`` (CPU s and peak RSS against the factor's value), ``per_token_ratio`` (CPU s per token at the largest value ÷ at the
    smallest) and ``grows`` (the ratio exceeds `GROWTH_FLAG`).

    Raises:
        ValueError: from `ols` (fewer than two values).
    """
    spec = FACTORS[factor]
    points = sorted(({**p, "value": p["settings"].get(factor, spec.base), "cpu_s_per_token": p["cpu_s"] / p["tokens"]}
                     for p in points), key=lambda p: p["value"])
    values, cpu = [p["value"] for p in points], [p["cpu_s"] for p in points]
    slope, intercept = ols([p["tokens"] for p in points], cpu) if spec.moves_tokens else (None, None)
    rss_slope, _ = ols(values, [p["peak_rss_gib"] * 1024 for p in points])
    ratio = points[-1]["cpu_s_per_token"] / points[0]["cpu_s_per_token"]
    return {"unit": spec.unit, "points": points,
            "fit": {"cpu_s_per_token": slope, "cpu_s_at_zero_tokens": intercept, "cpu_s_per_unit": ols(values, cpu)[0],
                    "peak_rss_mib_per_unit": rss_slope},
            "per_token_ratio": ratio, "grows": ratio > GROWTH_FLAG}


def table(factors: dict[str, dict]) -> str:
    """A markdown table: each factor's points (CPU s, processed tokens, CPU ms per 1k tokens, peak RSS) and fits."""
    lines = ["| factor | value | CPU s / iteration | processed tokens | CPU s per 1k tokens | peak RSS GiB |",
             "|---|---|---|---|---|---|"]
    for name, f in factors.items():
        for p in f["points"]:
            lines.append(f"| {name} | {p['value']} | {p['cpu_s']:.2f} | {p['tokens']:.0f} | "
                         f"{1000 * p['cpu_s_per_token']:.3f} | {p['peak_rss_gib']:.3f} |")
    lines += ["", "| factor | CPU s per 1k tokens (fit) | CPU s per unit | peak RSS MiB per unit | "
                  "per-token ratio (max ÷ min) |", "|---|---|---|---|---|"]
    for name, f in factors.items():
        flag = " **grows**" if f["grows"] else ""
        per_token = f["fit"]["cpu_s_per_token"]
        lines.append(f"| {name} | {'n/a' if per_token is None else f'{1000 * per_token:.3f}'} | "
                     f"{f['fit']['cpu_s_per_unit']:+.2f} per {f['unit']} | "
                     f"{f['fit']['peak_rss_mib_per_unit']:.1f} per {f['unit']} | {f['per_token_ratio']:.2f}{flag} |")
    return "\n".join(lines)


def plot(factors: dict[str, dict], path: Path) -> Path:
    """One panel per factor: CPU s per iteration against processed tokens with the least-squares line (left axis),
    peak RSS (right axis); each point labelled with the factor's value."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no screen
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(factors), figsize=(4.2 * len(factors), 3.6), squeeze=False)
    for ax, (name, f) in zip(axes[0], factors.items()):
        by_tokens = f["fit"]["cpu_s_per_token"] is not None
        xs = [p["tokens"] if by_tokens else p["value"] for p in f["points"]]
        ax.plot(xs, [p["cpu_s"] for p in f["points"]], "o", color="C0", label="CPU s")
        if by_tokens:
            line = [f["fit"]["cpu_s_at_zero_tokens"] + f["fit"]["cpu_s_per_token"] * x for x in (min(xs), max(xs))]
            ax.plot((min(xs), max(xs)), line, "-", color="C0", lw=1,
                    label=f"fit: {1000 * f['fit']['cpu_s_per_token']:.3f} s per 1k tokens")
        for p, x in zip(f["points"], xs):
            ax.annotate(str(p["value"]), (x, p["cpu_s"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
        ax.margins(0.12)  # room for the labels
        ax.set_xlabel("processed tokens per iteration" if by_tokens else f"{f['unit']}s (processed tokens unchanged)")
        ax.set_ylabel("CPU s per iteration")
        ax.set_title(f"{name} (ratio {f['per_token_ratio']:.2f}{', grows' if f['grows'] else ''})", fontsize=9)
        rss = ax.twinx()
        rss.plot(xs, [p["peak_rss_gib"] for p in f["points"]], "s--", color="C1", ms=4, lw=1, label="peak RSS")
        rss.set_ylabel("peak RSS (GiB)", color="C1")
        handles = ax.get_legend_handles_labels()[0] + rss.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return write_figure(fig, path)


def _flag(flags: Sequence[str], name: str) -> str:
    """The value of flag `name` in `flags` (the last one given)."""
    return flags[len(flags) - 1 - flags[::-1].index(name) + 1]


def run_point(settings: dict[str, int], iterations: int, model: str | None, folder: Path,
              second_model: str | None = None) -> dict:
    """`measure_point` in a fresh process (one torch thread); its result with ``peak_rss_gib`` and ``wall_s``.

    Raises:
        RuntimeError: the process failed (the message ends with its log's tail).
    """
    key = "-".join(f"{k}{v}" for k, v in settings.items())
    out, log = folder / f"{key}.json", folder / f"{key}.log"
    cmd = [sys.executable, __file__, "--point", json.dumps(settings), "--point_out", str(out),
           "--iterations", str(iterations), *(["--model", model] if model else []),
           *(["--second_model", second_model] if second_model else [])]
    start = time.perf_counter()
    try:
        rss = peak_rss_gib(cmd, log)
    except RuntimeError as err:
        raise RuntimeError(f"{err}:\n{log.read_text(errors='replace')[-3000:]}") from None
    return {**json.loads(out.read_text()), "peak_rss_gib": rss, "wall_s": time.perf_counter() - start}


def parse_args(argv: Sequence[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factors", nargs="+", default=list(FACTORS), choices=list(FACTORS),
                        help="the factors to move")
    parser.add_argument("--iterations", type=int, default=3, help="measured iterations per point, after one warm-up")
    parser.add_argument("--points", type=int, default=None,
                        help="measure only the first N values of each factor (>= 2; default: all)")
    parser.add_argument("--model", default=None,
                        help="a model other than the rung's SmolLM2-135M-Instruct (`tiny`: the tests' random model)")
    parser.add_argument("--second_model", default=None,
                        help="the bases factor's second base model in slot llm2 (default: the run's model, loaded "
                             "again as its own base)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="points measured at once (1 for timings you report: points side by side share caches)")
    add_out_option(parser, "cost_growth.json")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # internal: measure this point in this process
    parser.add_argument("--point_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error(f"--iterations must be >= 1 (measured iterations, after the warm-up), got {args.iterations}")
    if args.points is not None and args.points < 2:
        parser.error(f"--points must be >= 2 (a slope needs two points), got {args.points}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.point:
        return args, None
    return args, checked_out(parser, args, also=(".png",))


def main(argv: Sequence[str] | None = None) -> dict:
    args, out = parse_args(argv)
    if args.point:
        result = measure_point(json.loads(args.point), args.iterations, args.model, second_model=args.second_model)
        write_json(args.point_out, result, indent=None)
        return result
    from benchmarks.ladder_run import code_version
    from benchmarks.rungs import RUNGS
    from benchmarks.throughput import device_name

    measured = list(dict.fromkeys(args.factors))
    settings = list({json.dumps(s, sort_keys=True): s for f in measured for s in factor_points(f, args.points)}
                    .values())  # a point shared by factors (the base point) runs once
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cory-cost-growth-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        try:
            results = list(pool.map(lambda s: run_point(s, args.iterations, args.model, Path(tmp), args.second_model),
                                    settings))
        except RuntimeError as err:
            sys.exit(f"a point failed: {err}")
    by_settings = {json.dumps(r["settings"], sort_keys=True): r for r in results}
    for r in results:
        print(f"[cost] {r['settings']}: {r['cpu_s']:.2f} CPU s per iteration, {r['tokens']:.0f} tokens, "
              f"peak RSS {r['peak_rss_gib']:.2f} GiB ({r['wall_s']:.0f} s)", flush=True)
    factors = {f: factor_report(f, [by_settings[json.dumps(s, sort_keys=True)] for s in factor_points(f, args.points)])
               for f in measured}
    report = {"command": recorded_command("benchmarks/cost_growth.py", argv), "commit": code_version(),
              "rung": RUNG, "arm": ARM, "model": recorded_path(args.model or _flag(RUNGS[RUNG].flags, "--model")),
              "second_model": recorded_path(args.second_model) if args.second_model else None,
              "machine": {"cpu": device_name("cpu")}, "iterations": args.iterations, "warmup_iterations": 1,
              "base": BASE, "base_flags": recorded_flags(point_flags(BASE, args.model)), "growth_flag": GROWTH_FLAG,
              "flagged": [f for f in measured if factors[f]["grows"]], "factors": factors,
              "wall_s": time.perf_counter() - start}
    write_json(out, report)
    print(table(factors))
    print(f"wrote {out} and {plot(factors, out.with_name(out.stem + '.png'))}")
    return report


if __name__ == "__main__":
    main()
