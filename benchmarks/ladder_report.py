"""The learning ladder's summaries and figures: reward at equal episodes, equal training CPU time and equal KL, the
combined reward, the tables and the PNGs (`benchmarks/learning.py` runs the arms; this module reads their results).

A run's curve is a list of **point records**, one per held-out evaluation::

    {"episodes": 304, "train_cpu_s": 181.2, "reward": 0.41, "kl": 5.2, "kl_k1": 4.9,
     "distinct_1": 0.55, "distinct_2": 0.93, "response_len": 10.4}

``kl`` is the estimator the arm penalises (k3 for GRPO with the KL in the loss, ``--kl_penalty`` for PPO), ``kl_k1``
the k1 estimate logp − ref_logp that every arm shares: sequence sums, batch means, nats, on the held-out queries with
the pioneer alone. Ladders written before these records (points ``[episodes, reward(, training CPU s)]``) still load
(`point_record`).

Reward–KL trade-off (docs/paper.md §3): `reward_at_kl` interpolates one seed's held-out reward along its (KL, reward)
trajectory at a KL level (first crossing; None where the trajectory never reaches it); `equal_kl` gives the mean ±
std over the seeds that reach each level; `combined_rewards` gives r − η·KL over training for several η.

Robust statistics over seeds (`trainers.evaluation.stats`, Agarwal et al. 2021): every per-arm summary (``equal_time``,
each ``equal_kl`` level) carries ``"stats"``: ``{"iqm", "ci": [low, high], "n", "mean"}`` (``"ci": None`` with a
``"why"`` for one seed), printed as ``IQM [low, high]``; `equal_kl` also gives P(A > B) with its interval at each KL
level (``"improvement"``) for the pairs of `benchmarks.ladder_stats.comparison_pairs`, which also holds the comparison
at equal episodes and its table.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.ladder_stats import arm_stats, format_interval, improvements_of
from benchmarks.outputs import write_figure
from trainers.evaluation.stats import arm_summary

__all__ = ["COMBINED_ETAS", "KL_LEVELS", "combined_rewards", "combined_table", "equal_kl", "equal_time", "first_reach",
           "kl_table", "mean_std", "plot", "plot_tradeoff", "point_record", "reward_at_cpu", "reward_at_kl", "table"]

#: KL levels (nats, k1, sequence sum) at which `equal_kl` compares arms.
KL_LEVELS = (1.0, 2.0, 4.0, 6.0)
#: η of the combined reward r − η·KL: 0.05 the IMDB rung's β; 0.1; 0.4 the official code's initial KL coefficient of
#: CORY on IMDB (docs/paper.md §2; the paper does not publish the η of its combined-reward figure).
COMBINED_ETAS = (0.05, 0.1, 0.4)
#: Evaluation fields a point record keeps.
POINT_KEYS = ("kl", "kl_k1", "distinct_1", "distinct_2", "response_len")
#: Prefixes of the per-seat keys a point keeps too when the run measured them (``influence/observer``, ...:
#: `trainers.evaluation.influence`, ``--flags --eval_influence true``).
SEAT_POINT_PREFIXES = ("influence/", "influence_empty/", "copy_rate/", "reward_real/", "reward_other/",
                       "reward_empty/")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample std; 0 for one value)."""
    values = list(values)
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def point_record(point) -> dict:
    """A curve point as a record (see the module docstring); an old ``[episodes, reward(, CPU s)]`` list too."""
    if isinstance(point, dict):
        return point
    out = {"episodes": point[0], "reward": point[1]}
    if len(point) > 2:
        out["train_cpu_s"] = point[2]
    return out


def _interpolate(points: list[tuple[float, float]], x: float) -> float | None:
    """y at the first segment of the ``(x, y)`` polyline that reaches `x` (None when none does)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if min(x0, x1) <= x <= max(x0, x1):
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def reward_at_cpu(curve: Sequence, cpu_s: float) -> float | None:
    """The held-out reward of one run's curve after `cpu_s` training CPU seconds, linearly interpolated between
    evaluation points (None: the curve has no CPU times, or ends before `cpu_s`)."""
    points = [(p["train_cpu_s"], p["reward"]) for p in map(point_record, curve) if "train_cpu_s" in p]
    return _interpolate(points, cpu_s)


def reward_at_kl(curve: Sequence, level: float, key: str = "kl_k1", value: str = "reward") -> float | None:
    """The held-out reward (or another point field, `value`: e.g. ``"distinct_2"``) where one run's (KL, reward)
    trajectory first reaches KL `level` (nats), linearly interpolated between the two evaluation points around the
    crossing; None when the run never reaches it (or its points record no `key` / `value`).

    >>> reward_at_kl([{"kl_k1": 0.0, "reward": 0.1}, {"kl_k1": 2.0, "reward": 0.3}, {"kl_k1": 6.0, "reward": 0.5}], 4)
    0.4
    """
    points = [(p[key], p[value]) for p in map(point_record, curve) if key in p and value in p]
    for (k0, r0), (k1, r1) in zip(points, points[1:]):
        if k0 < level <= k1:
            return r0 + (r1 - r0) * (level - k0) / (k1 - k0)
    return None


def first_reach(curve: Sequence, target: float) -> dict | None:
    """Where a run's curve first reaches the reward `target`, linearly interpolated between evaluation points:
    ``{"episodes", "train_cpu_s"}`` (CPU None when the curve has no CPU times); None when it never does."""
    points = [point_record(p) for p in curve]
    for a, b in zip(points, points[1:]):
        if b["reward"] >= target:
            f = 1.0 if b["reward"] == a["reward"] else max(0.0, (target - a["reward"]) / (b["reward"] - a["reward"]))
            cpu = (a["train_cpu_s"] + f * (b["train_cpu_s"] - a["train_cpu_s"])
                   if "train_cpu_s" in a and "train_cpu_s" in b else None)
            return {"episodes": a["episodes"] + f * (b["episodes"] - a["episodes"]), "train_cpu_s": cpu}
    return None


def equal_time(result: dict) -> dict | None:
    """Every arm's held-out reward at the same training CPU time: the shortest arm's (mean over seeds of each
    seed's interpolated curve; None when fewer than two arms have CPU times on their curves)."""
    arms = {arm: e for arm, e in result["arms"].items() if e.get("train_cpu_s")}
    if len(arms) < 2:
        return None
    budget = min(min(point_record(c[-1])["train_cpu_s"] for c in e["curves"]) for e in arms.values())
    out = {}
    for arm, e in arms.items():
        values = [v for v in (reward_at_cpu(c, budget) for c in e["curves"]) if v is not None]
        if values:
            out[arm] = {"mean": mean_std(values)[0], "std": mean_std(values)[1], "per_seed": values,
                        "stats": arm_summary(values)}
    return {"train_cpu_s": budget, "arms": out}


def equal_kl(result: dict, levels: Sequence[float] = KL_LEVELS, key: str = "kl_k1",
             value: str = "reward") -> dict | None:
    """Each arm's held-out reward (or `value`, e.g. ``"distinct_2"``: is the text as diverse at the same KL?) at
    each KL level (`reward_at_kl` per seed) over the seeds that reach the level, and P(A > B) there for the pairs
    of `benchmarks.ladder_stats.comparison_pairs` (over the seeds of each arm that reach the level: independent
    runs, so the two arms' reaching seeds may differ).

    Args:
        result: a ladder result (``result["arms"][arm]`` with ``"seeds"`` and ``"curves"``).
        levels: KL levels, nats (`key`'s unit).
        key: the KL field of the point records.
        value: the field compared at each level.

    Returns:
        ``{"key", "value", "levels": {level: {arm: {"mean", "std", "per_seed", "seeds", "stats"}}}, "improvement":
        {level: {"A>B": {"p", "ci", "n", "seeds"}}}}`` (an arm none of whose seeds reaches a level is left out of
        it); None when no curve records `key`.
    """
    if not any(key in point_record(p) for e in result["arms"].values() for c in e["curves"] for p in c):
        return None
    out: dict = {}
    better: dict = {}
    for level in levels:
        row = {}
        for arm, e in result["arms"].items():
            values = [(seed, reward_at_kl(c, level, key, value)) for seed, c in zip(e["seeds"], e["curves"])]
            values = [(seed, v) for seed, v in values if v is not None]
            if values:
                m, s = mean_std(v for _, v in values)
                row[arm] = {"mean": m, "std": s, "per_seed": [v for _, v in values], "seeds": [s_ for s_, _ in values],
                            "stats": arm_summary([v for _, v in values])}
        out[str(level)] = row
        better[str(level)] = improvements_of(row)
    return {"key": key, "value": value, "levels": out, "improvement": better}


def combined_rewards(result: dict, etas: Sequence[float] = COMBINED_ETAS, key: str = "kl_k1") -> dict | None:
    """The combined reward r − η·KL (`key`, nats) of each arm at each evaluation point and η: ``{"key", "etas":
    {η: {arm: {"episodes": [...], "mean": [...], "std": [...]}}}}`` over seeds (points at the same episodes);
    None when no curve records `key`."""
    if not any(key in point_record(p) for e in result["arms"].values() for c in e["curves"] for p in c):
        return None
    out: dict = {}
    for eta in etas:
        row = {}
        for arm, e in result["arms"].items():
            curves = [[point_record(p) for p in c if key in point_record(p)] for c in e["curves"]]
            curves = [c for c in curves if c]
            if not curves:
                continue
            length = min(len(c) for c in curves)
            series = [[c[i]["reward"] - eta * c[i][key] for c in curves] for i in range(length)]
            row[arm] = {"episodes": [curves[0][i]["episodes"] for i in range(length)],
                        "mean": [mean_std(v)[0] for v in series], "std": [mean_std(v)[1] for v in series]}
        out[str(eta)] = row
    return {"key": key, "etas": out}


# ---------------------------------------------------------------------------------------------------- tables
def table(result: dict) -> str:
    """Markdown table of a ladder result (KL and distinct-n columns when the rung reports them). "IQM [95 % CI]" is
    the interquartile mean of the final held-out reward over seeds and its bootstrap interval
    (`trainers.evaluation.stats`),
    "gain IQM" the same of the gain over the base model where the rung's floors are on gains. "CPU s / run" counts
    training and the evaluations of one run (— for an arm read from a longer run, ``derived_from``); "training CPU
    s", where the runs record it, counts training alone."""
    extra = [k for k in ("kl", "kl_k1", "distinct_1", "distinct_2") if any(k in e for e in result["arms"].values())]
    train = any("train_cpu_s" in e for e in result["arms"].values())
    gain = any("gain" in e.get("stats", {}) for e in result["arms"].values())
    head = ["arm", "held-out reward", "IQM [95 % CI]", *(["gain IQM [95 % CI]"] if gain else []), "per seed",
            "before", *extra, "episodes", "CPU s / run", *(["training CPU s"] if train else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, e in result["arms"].items():
        seeds = ", ".join(f"{v:.3f}" for v in e["per_seed"])
        final = e["stats"]["final"] if "stats" in e else arm_summary(e["per_seed"])  # older results: computed
        gains = [format_interval(e["stats"]["gain"]) if "gain" in e.get("stats", {}) else "—"] if gain else []
        cells = [arm, f"{e['mean']:.3f} ± {e['std']:.3f} ({e['metric']})", format_interval(final), *gains, seeds,
                 f"{e['before']:.3f} ± {e['before_std']:.3f}", *(f"{e[k]:.3f}" if k in e else "—" for k in extra),
                 str(e["episodes"]), "—" if "derived_from" in e else f"{e['cpu_s']:.0f}",
                 *([f"{e['train_cpu_s']:.0f}" if "train_cpu_s" in e else "—"] if train else [])]
        lines.append("| " + " | ".join(cells) + " |")
    for arm, why in result["skipped"].items():
        lines.append(f"| {arm} | skipped: {why} |" + " |" * (len(head) - 2))
    return "\n".join(lines)


def _arm_by_column_table(result: dict, columns: dict[str, str], cell: Callable[[str, str], str | None]) -> str:
    """Markdown table with one row per arm of `result` and one column per key of `columns` (its header text);
    `cell(arm, key)` gives the text, None for —."""
    lines = ["| arm | " + " | ".join(columns.values()) + " |", "|---|" + "---|" * len(columns)]
    for arm in result["arms"]:
        lines.append(f"| {arm} | " + " | ".join(cell(arm, key) or "—" for key in columns) + " |")
    return "\n".join(lines)


def kl_table(result: dict, which: str = "equal_kl") -> str | None:
    """Markdown table of the reward (or the field the summary holds) at equal KL (`result[which]`, an `equal_kl`
    summary): one row per arm, one column per level, ``IQM [95 % CI] (n seeds)`` over the seeds that reach the
    level; — where none does."""
    eq = result.get(which)
    if not eq:
        return None

    def cell(arm: str, level: str) -> str | None:
        e = eq["levels"][level].get(arm)
        return None if e is None else f"{format_interval(arm_stats(e))} ({len(e['per_seed'])})"

    name = eq.get("value", "reward").replace("_", "-")
    return _arm_by_column_table(result, {lv: f"{name} at KL {float(lv):g}" for lv in eq["levels"]}, cell)


def combined_table(result: dict) -> str | None:
    """Markdown table of the combined reward r − η·KL (`result["combined_reward"]`): per arm and η, the value at
    the arm's last evaluation point and the best over its points (mean over seeds, ± std at that point); None when
    the points record no KL."""
    comb = result.get("combined_reward")
    if not comb:
        return None

    def cell(arm: str, eta: str) -> str | None:
        e = comb["etas"][eta].get(arm)
        if e is None:
            return None
        best = max(range(len(e["mean"])), key=e["mean"].__getitem__)
        return f"{e['mean'][-1]:.3f} ± {e['std'][-1]:.3f} · {e['mean'][best]:.3f} ({e['episodes'][best]})"

    return _arm_by_column_table(result, {eta: f"η = {float(eta):g}: last · best (episodes)" for eta in comb["etas"]},
                                cell)


# ---------------------------------------------------------------------------------------------------- figures
def plot(result: dict, path: Path) -> Path:
    """Held-out reward against training episodes, mean ± std over seeds, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no screen
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, e in _shown_arms(result).items():
        curves = [[point_record(p) for p in c] for c in e["curves"] if c]
        if not curves:
            continue
        xs = [p["episodes"] for p in curves[0]]
        ys = np.array([[p["reward"] for p in c] for c in curves if len(c) == len(xs)])
        mean, std = ys.mean(axis=0), ys.std(axis=0)
        ax.plot(xs, mean, marker="o", ms=3, label=f"{_legend_name(result, arm)} ({e['metric']})")
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("training episodes")
    ax.set_ylabel("held-out reward (mean ± std over seeds)")
    ax.set_title(f"learning ladder: {result['rung']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return write_figure(fig, path)


def _place_labels(ax, labels: list[tuple[float, float, str, tuple]], min_px: float = 26.0) -> None:
    """Write each ``(x, y, text, colour)`` label beside its point unless it would land within `min_px` display
    pixels of a label already written (greedy, in order): labels never overlap, some points stay unlabelled."""
    import numpy as np

    ax.autoscale_view()
    kept: list[np.ndarray] = []
    for x, y, text, color in labels:
        where = ax.transData.transform((x, y)) + np.array([5.0, -9.0])
        if all(np.hypot(*(where - other)) >= min_px for other in kept):
            kept.append(where)
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, -9), fontsize=6.5, color=color)


def _shown_arms(result: dict) -> dict:
    """The arms a figure draws: all but those read from a longer ``-2x`` run (``derived_from``), whose curve is the
    first half of that run's, drawn with it."""
    return {arm: e for arm, e in result["arms"].items() if "derived_from" not in e}


def _legend_name(result: dict, arm: str) -> str:
    """`arm`, and the arm read from its first half where there is one (``ppo-2x (= ppo up to 400)``)."""
    base = [a for a, e in result["arms"].items() if arm in e.get("derived_from", ())]
    return f"{arm} (= {base[0]} up to {result['arms'][base[0]]['episodes']})" if base else arm


def _draw_tradeoff(ax, trajectories: list[dict], xmax: float | None = None) -> None:
    """Reward-against-KL lines (mean over seeds, band = std), points labelled by episodes where labels fit;
    `xmax` zooms the x axis (labels only for points inside)."""
    import numpy as np

    finals, labels = [], []
    for t in trajectories:
        xs, ys, band = t["kl"], t["reward"], t["band"]
        ax.plot(xs, ys, marker="o", ms=4, color=t["color"], label=t["label"])
        order = np.argsort(xs)
        ax.fill_between(xs[order], (ys - band)[order], (ys + band)[order], color=t["color"], alpha=0.12)
        inside = [j for j in range(len(xs)) if xmax is None or xs[j] <= xmax]
        if inside:  # each arm's last visible point is labelled first
            finals.append((xs[inside[-1]], ys[inside[-1]], f"{t['episodes'][inside[-1]]}", t["color"]))
            labels += [(xs[j], ys[j], f"{t['episodes'][j]}", t["color"]) for j in inside[1:-1]]
    if xmax is not None:
        visible = [y for t in trajectories for x, y in zip(t["kl"], t["reward"]) if x <= xmax]
        ax.set_xlim(-0.02 * xmax, xmax)
        ax.set_ylim(min(visible) - 0.05, max(visible) + 0.05)
    _place_labels(ax, finals + labels)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def plot_tradeoff(result: dict, path: Path, *, key: str = "kl_k1", eta: float = 0.1) -> Path | None:
    """The paper's view (docs/paper.md §3): held-out reward against KL to the reference (mean over seeds at each
    evaluation point, band = reward std; points labelled by their training episodes wherever a label does not
    overlap another: `_place_labels`), the same zoomed to the KL range of the arms at the rung's budget when the
    ``-2x`` controls run far beyond it, and the combined reward r − η·KL against episodes. Arms read from a longer
    run are drawn as its first half (`_shown_arms`). None when no curve records `key`."""
    combined = combined_rewards(result, (eta,), key)
    if combined is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colors = plt.get_cmap("tab10")
    trajectories = []
    for i, (arm, e) in enumerate(_shown_arms(result).items()):
        curves = [[point_record(p) for p in c if key in point_record(p)] for c in e["curves"]]
        curves = [c for c in curves if c]
        if not curves:
            continue
        length = min(len(c) for c in curves)
        kl = np.array([[c[j][key] for j in range(length)] for c in curves])
        reward = np.array([[c[j]["reward"] for j in range(length)] for c in curves])
        trajectories.append({"arm": arm, "kl": kl.mean(axis=0), "reward": reward.mean(axis=0),
                             "band": reward.std(axis=0), "episodes": [curves[0][j]["episodes"] for j in range(length)],
                             "color": colors(i % 10), "label": f"{_legend_name(result, arm)} ({len(curves)} seeds)"})
    # the zoom: the KL range of the arms trained on the rung's own budget (not the -2x controls)
    budget = min((e["episodes"] for e in result["arms"].values() if "episodes" in e), default=None)
    at_budget = [float(t["kl"].max()) for t in trajectories if result["arms"][t["arm"]].get("episodes") == budget]
    reach = max(at_budget, default=0.0)
    zoom = reach > 0 and max(float(t["kl"].max()) for t in trajectories) > 1.6 * reach
    fig, axes = plt.subplots(1, 3 if zoom else 2, figsize=(17 if zoom else 12, 4.6))
    _draw_tradeoff(axes[0], trajectories)
    axes[0].set_title("reward against KL (numbers: training episodes)", fontsize=9)
    if zoom:
        _draw_tradeoff(axes[1], trajectories, xmax=1.15 * reach)
        axes[1].set_title(f"the same, KL ≤ {1.15 * reach:.1f} (the range of the arms trained {budget} episodes)",
                          fontsize=9)
    for ax in axes[:-1]:
        ax.set_xlabel(f"KL to the reference ({'k1, ' if key == 'kl_k1' else ''}nats, held-out, mean over seeds)")
    axes[0].set_ylabel("held-out task reward (band: std over seeds)")
    right = axes[-1]
    for t in trajectories:
        row = combined["etas"][str(eta)][t["arm"]]
        mean, std = np.array(row["mean"]), np.array(row["std"])
        right.plot(row["episodes"], mean, marker="o", ms=3, color=t["color"], label=_legend_name(result, t["arm"]))
        right.fill_between(row["episodes"], mean - std, mean + std, color=t["color"], alpha=0.12)
    right.set_xlabel("training episodes")
    right.set_ylabel(f"combined reward r − {eta:g}·KL")
    right.set_title("combined reward (mean ± std over seeds)", fontsize=9)
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(f"learning ladder: {result['rung']}, reward–KL trade-off", fontsize=10)
    fig.tight_layout()
    return write_figure(fig, path)
