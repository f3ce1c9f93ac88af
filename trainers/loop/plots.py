"""PNG figures from run directories (``cory plot``, ``cory bench``): learning curves (per seat and per model
identity), a Pareto scatter, and the arm means of a bench.

Figures are `matplotlib.figure.Figure` objects saved straight to PNG (Agg), without pyplot: no display is needed and
matplotlib's global backend is never changed.

Each PNG is checked before anything is drawn and written atomically (`trainers.loop.outputs`): ``--out`` must be a
folder (or a new path), never a run's ``checkpoints/`` or ``tensorboard/``; PNGs already there are replaced only
with ``--overwrite`` (the default folder, the first run directory, is this command's own: a rerun replaces them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from cory_env.seating import PIONEER
from cory_env.checks import check_path
from trainers.loop.outputs import atomic_output, check_output_file
from trainers.loop.metrics import METRICS_FILE, read_jsonl

QUANTITIES = ("task_reward", "kl", "combined_reward")
#: Metric-scope prefix of the model identities (``llm1`` … ``llmN``); the other scopes with a task reward are seats.
MODEL_SCOPE = "llm"


def scopes_of(runs: dict[str, list[dict]]) -> list[str]:
    """The scopes with a task reward in `runs`: the seats in acting order (``pioneer``, ``observer``, ...), then the
    models (``llm1``, ``llm2``, ...)."""
    seen: dict[str, None] = {}
    for records in runs.values():
        for record in records:
            for key in record:
                scope, _, qty = key.partition("/")
                if qty == "task_reward":
                    seen.setdefault(scope)
    models = sorted((s for s in seen if s.startswith(MODEL_SCOPE) and s[len(MODEL_SCOPE):].isdigit()),
                    key=lambda s: int(s[len(MODEL_SCOPE):]))
    return [s for s in seen if s not in models] + models


def load_runs(run_dirs: Sequence[str | Path]) -> dict[str, list[dict]]:
    """Run label (folder name) -> its metrics records.

    Raises:
        FileNotFoundError: if a folder has no metrics.jsonl.
    """
    runs = {}
    for run in run_dirs:
        check_path(run, "run directory", kind="folder", fix="give a cory run directory (holding metrics.jsonl)")
        path = check_path(Path(run) / METRICS_FILE, "metrics file", fix=f"is {run} a cory run directory?")
        label = Path(run).name
        while label in runs:
            label += "'"
        runs[label] = read_jsonl(path)
    return runs


def final_point(records: list[dict], scope: str = PIONEER, last: int = 3) -> tuple[float, float] | None:
    """(task_reward, kl) averaged over the last `last` iterations for `scope`, or None if absent."""
    rows = [r for r in records if f"{scope}/task_reward" in r][-last:]
    return tuple(sum(r[f"{scope}/{q}"] for r in rows) / len(rows) for q in ("task_reward", "kl")) if rows else None


def _run_colors(runs: dict[str, list[dict]]) -> dict[str, tuple]:
    """One fixed colour per run, so a run has the same colour in every panel (even where it has no data)."""
    cmap = matplotlib.colormaps["tab10" if len(runs) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(runs)}


def smoothed(values: Sequence[float], window: int | None = None) -> list[float]:
    """The centred moving average of `values` over `window` points (default: a tenth of them, at least 1), the
    window shrinking at both ends so every point has a value.

    >>> smoothed([0.0, 3.0, 0.0, 3.0, 0.0], window=3)
    [1.5, 1.0, 2.0, 1.0, 1.5]
    """
    n = len(values)
    window = max(1, round(n / 10)) if window is None else window
    half = window // 2
    out = []
    for i in range(n):
        part = values[max(0, i - half):min(n, i + window - half)]
        out.append(sum(part) / len(part))
    return out


def role_exchanges(records: list[dict]) -> list[float]:
    """Where the models changed seats: between iteration i and i + 1 for each i whose ``cory/role_exchange`` is 1."""
    return [r["iteration"] + 0.5 for r in records if r.get("cory/role_exchange") == 1.0]


def plot_curves(runs: dict[str, list[dict]], out: Path) -> Path:
    """A grid: rows = task_reward, kl, combined_reward; columns = the seats (pioneer, observer, ...), then the models
    (llm1, llm2, ...). Each run: its per-iteration values (one training batch each, noisy) as faint points, a centred
    moving average over a tenth of the iterations as its line (`smoothed`), and dotted vertical lines where its
    models changed seats (`role_exchanges`)."""
    scopes = scopes_of(runs) or [PIONEER]
    fig = Figure(figsize=(4 * len(scopes), 2.8 * len(QUANTITIES)))
    axes = fig.subplots(len(QUANTITIES), len(scopes), squeeze=False, sharex=True)
    colors = _run_colors(runs)
    for i, qty in enumerate(QUANTITIES):
        for j, scope in enumerate(scopes):
            ax = axes[i][j]
            key = f"{scope}/{qty}"
            for label, records in runs.items():
                xs = [r["iteration"] for r in records if key in r]
                ys = [r[key] for r in records if key in r]
                if xs:
                    ax.plot(xs, ys, ls="", marker=".", ms=3, alpha=0.3, color=colors[label])
                    ax.plot(xs, smoothed(ys), label=label, linewidth=1.5, color=colors[label])
                for x in role_exchanges(records):
                    ax.axvline(x, color=colors[label], ls=":", lw=0.8, alpha=0.6)
            ax.set_title(key, fontsize=9)
            ax.grid(alpha=0.3)
            if i == len(QUANTITIES) - 1:
                ax.set_xlabel("iteration")
    handles = [Line2D([], [], color=colors[label], label=label) for label in runs]
    if any(role_exchanges(records) for records in runs.values()):
        handles.append(Line2D([], [], color="grey", ls=":", label="role exchange"))
    handles.append(Line2D([], [], color="grey", ls="", marker=".", alpha=0.5, label="one iteration (raw)"))
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=70)
    return out


#: Markers of the Pareto view (its own legend; colours are runs): the pioneer seat, then each model in turn.
PIONEER_MARKER, MODEL_MARKERS = "o", "^v<>sDph"


def pareto_markers(runs: dict[str, list[dict]]) -> dict[str, str]:
    """Scope -> marker: the pioneer seat, and every model identity (llm1, llm2, ...) found in `runs`."""
    models = [s for s in scopes_of(runs) if s.startswith(MODEL_SCOPE) and s[len(MODEL_SCOPE):].isdigit()]
    return {PIONEER: PIONEER_MARKER, **{m: MODEL_MARKERS[k % len(MODEL_MARKERS)] for k, m in enumerate(models)}}


def plot_pareto(runs: dict[str, list[dict]], out: Path) -> Path:
    """Final task reward vs KL per run (pioneer seat; each model llm1, llm2, ... too where the run has several):
    colour = run, marker = scope, both explained by legends beside the axes."""
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    colors = _run_colors(runs)
    markers = pareto_markers(runs)
    shown_runs, shown_scopes = [], []
    for label, records in runs.items():
        several = final_point(records, f"{MODEL_SCOPE}2") is not None  # a single-agent run's llm1 is its pioneer
        for scope, marker in markers.items():
            point = final_point(records, scope) if several or scope == PIONEER else None
            if point is not None:  # the pioneer seat filled and large, the models hollow on top: a model sitting
                pioneer = scope == PIONEER  # in the pioneer seat shows both instead of one hiding the other
                ax.scatter(point[1], point[0], marker=marker, s=110 if pioneer else 50, zorder=2 if pioneer else 3,
                           facecolors=colors[label] if pioneer else "none",
                           edgecolors="black" if pioneer else colors[label], linewidths=0.5 if pioneer else 1.6,
                           alpha=0.85)
                shown_runs += [label] if label not in shown_runs else []
                shown_scopes += [scope] if scope not in shown_scopes else []
    ax.set_xlabel("KL to reference (nats, last 3 iterations)")
    ax.set_ylabel("task reward")
    ax.set_title("Pareto view: higher reward at lower KL is better", fontsize=9)
    ax.grid(alpha=0.3)
    ax.margins(0.12)
    legends = []
    run_handles = [Line2D([], [], ls="", marker="s", ms=7, color=colors[label], label=label) for label in shown_runs]
    scope_handles = [Line2D([], [], ls="", marker=markers[scope], ms=9 if scope == PIONEER else 7,
                            markerfacecolor="grey" if scope == PIONEER else "none",
                            markeredgecolor="black" if scope == PIONEER else "grey", label=scope)
                     for scope in shown_scopes]
    if run_handles:
        first = ax.legend(handles=run_handles, title="run", fontsize=7, title_fontsize=8, loc="upper left",
                          bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        ax.add_artist(first)
        legends = [first, ax.legend(handles=scope_handles, title="model / seat", fontsize=7, title_fontsize=8,
                                    loc="lower left", bbox_to_anchor=(1.02, 0.0), borderaxespad=0.0)]
    fig.tight_layout()
    with atomic_output(out) as tmp:  # the legends beside stay whole
        fig.savefig(tmp, dpi=90, bbox_inches="tight", bbox_extra_artists=legends)
    return out


def plot_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, *, replace: bool = True,
              option: str = "output folder") -> list[Path]:
    """Write `curves.png` and `pareto.png` for `run_dirs` into `out_dir`; returns the paths. Everything is checked
    before anything is created (the module docstring). `replace`: PNGs already in `out_dir` may be replaced;
    `option`: what named `out_dir`, for the messages.

    Raises:
        FileNotFoundError: a run directory without metrics.jsonl. FileExistsError: a PNG exists and not `replace`.
        NotADirectoryError: `out_dir` is a file. ValueError: `out_dir` is inside a run's checkpoints/ or tensorboard/.
    """
    runs = load_runs(run_dirs)
    curves, pareto = (check_output_file(Path(out_dir) / name, option=option, replace=replace)
                      for name in ("curves.png", "pareto.png"))
    return [plot_curves(runs, curves), plot_pareto(runs, pareto)]


def plot_arm_means(arms: dict[str, list[list[dict]]], out: Path, *, scope: str = PIONEER, window: int = 3) -> Path:
    """Per arm, the mean over its seeds of `scope`'s task reward, KL and combined reward per iteration, smoothed
    with a trailing moving average of `window` iterations (shaded: ± one std over seeds, same smoothing)."""
    import numpy as np
    fig = Figure(figsize=(4.2 * len(QUANTITIES), 3.0))
    axes = fig.subplots(1, len(QUANTITIES), squeeze=False)
    cmap = matplotlib.colormaps["tab10"]
    kernel = np.ones(window) / window
    for i, (arm, runs) in enumerate(arms.items()):
        for ax, qty in zip(axes[0], QUANTITIES):
            key = f"{scope}/{qty}"
            series = [[r[key] for r in records if key in r] for records in runs]
            length = min((len(s) for s in series), default=0)
            if length < window:
                continue
            data = np.array([s[:length] for s in series])
            smooth = np.array([np.convolve(row, kernel, mode="valid") for row in data])
            xs = np.arange(window - 1, length)
            mean, std = smooth.mean(axis=0), smooth.std(axis=0)
            ax.plot(xs, mean, color=cmap(i), label=f"{arm} (n={len(runs)})", linewidth=1.5)
            if len(runs) > 1:
                ax.fill_between(xs, mean - std, mean + std, color=cmap(i), alpha=0.15)
    for ax, qty in zip(axes[0], QUANTITIES):
        ax.set_title(f"{scope}/{qty} ({window}-iter mean)", fontsize=9)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=80)
    return out
