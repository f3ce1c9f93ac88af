"""Cross-play: every trained model of some runs with partners it trained with and partners it never met (what ``cory
crossplay`` calls; the command's page: docs/partners.md).

Every model of every run (its latest checkpoint; ``llm1`` … ``llmN``, a population's included) is seated with every
other: every line-up of distinct models in the seating's seats (two seats: every ordered pair). The episodes are the
first run's task on its held-out split, the same queries and sampling seeds for every line-up, each seat sampling
with the runs' per-seat settings (`trainers.evaluation.evaluator.Evaluator.pair`). Per line-up: the collective
reward, each seat's task reward and KL to its own model's reference, and each later seat's influence and copy rate.

Runs are told apart by what they are (`run_origin`), not by the path given: two paths of one run (a symbolic link, one
of its checkpoint folders) are one run (its ``run_id``), refused given twice; runs that started from the same weights
and saw the same queries (one seed, one base model, one model layout) share an **origin**. So a line-up is
**self-play** (its models trained together in one run), **same-origin** (different runs of one origin: they never met,
but are alike without any partner skill) or **cross-play** (different origins: Melting Pot's held-out co-players).
Per group of runs: self-play (each run's mean over its self-play line-ups; IQM [95 % CI] over runs), cross-play (each
model's mean over its cross-play line-ups; IQM [CI] over models), same-origin apart, the gap self − cross, and
P(A > B) between groups on cross-play, with its interval (`trainers.evaluation.stats`). Runs that played another game
(`played`: the env, sampling and task options differ) are refused. `to_marl_eval` writes the group comparison in
InstaDeep marl-eval's raw-data format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
from typing import Sequence

import numpy as np

__all__ = ["IMPROVEMENT", "check_compatible", "check_marl_eval_groups", "crossplay", "group_summary", "heatmap",
           "kind_of", "matrix", "parse_groups", "played", "run_labels", "run_origin", "seat_names", "to_marl_eval"]

IMPROVEMENT = "p_improvement_cross_play"


def played(state: dict) -> dict:
    """What a run played, from its checkpoint's trainer state: every field of its env config (the task, the data and
    held-out split, the reward, the seating, the lengths and per-seat settings, the context), its sampling config and
    its task's own options, as one flat dict; two runs whose models are played together must agree on all of it."""
    from trainers.config import RunConfigs
    configs = RunConfigs.from_flat(state["config"])
    sections = [configs.env, configs.sampling] + ([configs.task_options] if configs.task_options is not None else [])
    return {k: v for section in sections for k, v in dataclasses.asdict(section).items() if k != "query_split"}


def run_origin(state: dict) -> str:
    """The origin of a run (a short hash): its seed, the fingerprint of its base models and its model options. Two
    runs of one origin started from the same weights on the same query stream."""
    from trainers.config import ModelConfig
    config = state["config"]
    model = {f.name: config.get(f.name) for f in dataclasses.fields(ModelConfig)}
    key = json.dumps([state["seed"], state["inputs"]["model"], model], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def check_compatible(states: dict[str, dict]) -> None:
    """Refuse runs that are one run given twice (one ``run_id``: a link, a checkpoint folder of it), and runs that
    played another game than the first (`played`: the numbers would not compare).

    Raises:
        ValueError: naming both runs, and the field with both values or the shared run id.
    """
    seen: dict[str, str] = {}
    for run, state in states.items():
        if state["run_id"] in seen:
            raise ValueError(f"{run} and {seen[state['run_id']]} are one run (run id {state['run_id']}: a link to it, "
                             "or one of its checkpoint folders); give each run once")
        seen[state["run_id"]] = run
    first_run, first = next(iter(states.items()))
    reference = played(first)
    for run, state in list(states.items())[1:]:
        theirs = played(state)
        for key in sorted(set(reference) | set(theirs)):
            if reference.get(key) != theirs.get(key):
                raise ValueError(f"{run} played another game than {first_run}: {key}={theirs.get(key)!r} there, "
                                 f"{reference.get(key)!r} here; cross-play plays models of one task, reward, "
                                 "seating and generation settings (their numbers would not compare)")


def seat_names(env_config, tokenizer, task_options=None) -> tuple[str, ...]:
    """The seats of the seating `env_config` plays (its spec on its task, built with `tokenizer`), in acting order."""
    from cory_env.seating import config_seating
    from cory_env.tasks import make_task
    return config_seating(env_config, make_task(env_config.task, env_config, tokenizer, task_options)).names


def crossplay(models: dict[str, object], refs: dict[str, object], evaluator, seats, *, episodes: int, seed: int,
              progress=None) -> list[dict]:
    """Play every line-up of distinct models in the seating's seats (two seats: every ordered pair).

    Args:
        models: label -> agent; refs: label -> its reference model.
        evaluator: the `trainers.evaluation.evaluator.Evaluator` of the first run (its held-out split, seating and
            per-seat sampling); seats: its seating's seats, in acting order (`seat_names`).
        episodes, seed: per line-up (the same queries and sampling seeds for every line-up).
        progress: ``progress(done, record)`` after each line-up (`trainers.loop.progress.Progress.update`).

    Returns:
        One record per line-up: each seat's model label (keyed by the seat), ``line_up`` (the labels in seat order),
        then `Evaluator.pair`'s numbers.
    """
    out = []
    for line_up in itertools.permutations(models, len(seats)):
        seated = dict(zip(seats, line_up))
        record = evaluator.pair({s: models[m] for s, m in seated.items()}, {s: refs[m] for s, m in seated.items()},
                                episodes=episodes, seed=seed)
        out.append({**seated, "line_up": list(line_up), **record})
        if progress is not None:
            progress(len(out) - 1, record)
    return out


def kind_of(pair: dict, run_of: dict[str, str], origin_of: dict[str, str]) -> str:
    """``"self"`` when every model of the line-up comes from one run, ``"same_origin"`` when they come from runs of
    one origin (`run_origin`), else ``"cross"``."""
    runs = {run_of[m] for m in pair["line_up"]}
    return "self" if len(runs) == 1 else "same_origin" if len({origin_of[r] for r in runs}) == 1 else "cross"


def _summary(values: list[float]) -> dict | None:
    from trainers.evaluation.stats import arm_summary
    if not values:
        return None
    out = {**arm_summary(values), "values": values}
    if out["n"] == 2:
        out["why"] = "two values: the 95 % interval is their range [min, max]"
    return out


def group_summary(pairs: list[dict], run_of: dict[str, str], groups: dict[str, list[str]],
                  origin_of: dict[str, str] | None = None) -> dict:
    """Per group: self-play (per run: the mean collective reward of its self-play line-ups), cross-play (per model
    of the group: the mean over its cross-play line-ups, any seat), same-origin apart (per model, its line-ups with
    models of other runs of its origin), each as IQM [CI] with the values, and the gap self − cross; then P(A > B)
    between groups on the cross-play values, with its interval (``p``, ``ci``).

    Args:
        pairs: `crossplay`'s records; run_of: model label -> its run; groups: group -> its runs; origin_of: run ->
            its origin (`run_origin`; None: every run its own).
    """
    from trainers.evaluation.stats import probability_of_improvement, probability_of_improvement_ci
    origin_of = origin_of or {run: run for run in set(run_of.values())}
    kinds = [kind_of(p, run_of, origin_of) for p in pairs]
    out: dict = {}
    for group, runs in groups.items():
        self_play = [float(np.mean(v)) for v in ([p["collective_reward"] for p, k in zip(pairs, kinds)
                                                  if k == "self" and run_of[p["line_up"][0]] == run] for run in runs)
                     if v]
        members = [m for m, r in run_of.items() if r in runs]
        by_kind = {kind: [float(np.mean(v)) for v in ([p["collective_reward"] for p, k in zip(pairs, kinds)
                                                         if k == kind and m in p["line_up"]] for m in members) if v]
                   for kind in ("cross", "same_origin")}
        s, c = _summary(self_play), _summary(by_kind["cross"])
        out[group] = {"runs": runs, "self_play": s, "cross_play": c, "same_origin": _summary(by_kind["same_origin"]),
                      "gap": s["iqm"] - c["iqm"] if s and c else None}
    names = [g for g in out if out[g]["cross_play"]]
    out[IMPROVEMENT] = {}
    for a, b in itertools.permutations(names, 2):
        x, y = out[a]["cross_play"]["values"], out[b]["cross_play"]["values"]
        ci = list(probability_of_improvement_ci(x, y)) if min(len(x), len(y)) >= 2 else None
        out[IMPROVEMENT][f"{a} > {b}"] = {"p": probability_of_improvement(x, y), "ci": ci}
    return out


def to_marl_eval(result: dict) -> dict:
    """A `cory crossplay` result in marl-eval's raw-data format::

        {"cory_<task>": {"crossplay": {group: {"seed_<k>": {"step_0": M, "absolute_metrics": M}}}}}

    where ``M`` = ``{"step_count": trained queries, "return": [...], "self_play_return": [...]}``: ``return`` lists
    the collective reward of every cross-play line-up (partners of another origin) that a model of the run plays, in
    any seat, in the order of ``result["pairs"]`` (which names the models of each); ``self_play_return`` the run's
    self-play line-ups; same-origin line-ups are in neither. marl-eval means each list per run, as it means
    evaluation episodes. ``seed_<k>`` is the group's k-th run in the order of its seeds (their seeds and paths are
    in ``result["run_meta"]``): marl-eval looks every group's runs up by the first group's keys, so seed-disjoint
    groups (each one run per seed) share the keys ``seed_0`` ... ``seed_<n-1>``; its statistics treat the runs of
    two groups as independent, which seed-disjoint runs are.

    Raises:
        ValueError: see `check_marl_eval_groups`.
    """
    run_of, pairs, meta = result["run_of"], result["pairs"], result["run_meta"]
    origin_of = {run: m["origin"] for run, m in meta.items()}
    groups = {g: v["runs"] for g, v in result["groups"].items() if g != IMPROVEMENT}
    check_marl_eval_groups(groups, {run: m["seed"] for run, m in meta.items()})
    out: dict = {}
    for group, runs in groups.items():
        out[group] = {}
        for k, run in enumerate(sorted(runs, key=lambda r: meta[r]["seed"])):
            played_ = [p for p in pairs if run in {run_of[m] for m in p["line_up"]}]
            kinds = [kind_of(p, run_of, origin_of) for p in played_]
            metrics = {"step_count": meta[run]["queries"],
                       "return": [p["collective_reward"] for p, k in zip(played_, kinds) if k == "cross"],
                       "self_play_return": [p["collective_reward"] for p, k in zip(played_, kinds) if k == "self"]}
            out[group][f"seed_{k}"] = {"step_0": metrics, "absolute_metrics": dict(metrics)}
    return {f"cory_{result['task']}": {"crossplay": out}}


def check_marl_eval_groups(groups: dict[str, list[str]], seed_of: dict[str, int]) -> None:
    """Refuse groups that marl-eval cannot read: a group holds one run per seed (its runs are ``seed_0`` ... in the
    order of their seeds), and marl-eval compares groups of as many runs. Groups may use different seeds (seed-disjoint groups:
    no run of one group shares its initial weights and query stream with a run of another).

    Raises:
        ValueError: a single run (no cross-play); a group with two runs of one seed, or groups of different sizes,
            naming each group's seeds and the fix.
    """
    if len(seed_of) < 2:
        raise ValueError("--marl_eval compares cross-play, which needs models of two runs or more; give more runs "
                         "or drop --marl_eval")
    seeds = {g: sorted(seed_of[run] for run in runs) for g, runs in groups.items()}
    if any(len(set(s)) != len(s) for s in seeds.values()):
        raise ValueError(f"--marl_eval needs one run per seed in each group (two runs of one seed started alike: "
                         f"marl-eval would count them as independent); the groups have {seeds}: give each run of a "
                         "group its own seed")
    if len({len(s) for s in seeds.values()}) > 1:
        raise ValueError(f"--marl_eval needs groups of as many runs (marl-eval compares groups of equal size); the "
                         f"groups have {seeds}: give each group as many runs")


def matrix(pairs: list[dict], labels: list[str]) -> list[list[float | None]]:
    """The cross-play matrix: row i, column j the collective reward of model i in the first seat with model j in
    the second (with more seats, the mean over the line-ups that seat them so); None on the diagonal (a model never
    plays itself)."""
    cells: dict[tuple[int, int], list[float]] = {}
    for p in pairs:
        a, b = p["line_up"][:2]
        cells.setdefault((labels.index(a), labels.index(b)), []).append(p["collective_reward"])
    return [[float(np.mean(cells[i, j])) if (i, j) in cells else None for j in range(len(labels))]
            for i in range(len(labels))]


def heatmap(pairs: list[dict], labels: list[str], seats: Sequence[str] = ("pioneer", "observer")):
    """The `matrix` of collective reward (rows: the first seat's model, columns: the second's) as a matplotlib
    ``Figure`` (the command writes it)."""
    from matplotlib.figure import Figure
    matrix_ = np.array([[np.nan if v is None else v for v in row] for row in matrix(pairs, labels)])
    fig = Figure(figsize=(1.2 + 0.6 * len(labels), 1.0 + 0.6 * len(labels)))
    ax = fig.subplots()
    im = ax.imshow(matrix_, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel(seats[1])
    ax.set_ylabel(seats[0])
    for i in range(len(labels)):
        for j in range(len(labels)):
            if np.isfinite(matrix_[i, j]):
                ax.text(j, i, f"{matrix_[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
    fig.colorbar(im, ax=ax, label="collective reward")
    fig.tight_layout()
    return fig


def run_labels(runs: Sequence[str]) -> dict[str, str]:
    """Run -> its label: its path relative to the runs' common folder (``pair/s0``, ``pop/s0``).

    Raises:
        ValueError: two runs of one path.
    """
    paths = [os.path.abspath(r) for r in runs]
    if len(set(paths)) != len(paths):
        raise ValueError(f"a run is given twice in {list(runs)}; give each run once")
    common = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    return {run: os.path.relpath(path, common) for run, path in zip(runs, paths)}


def parse_groups(items: Sequence[str] | None, runs: list[str]) -> dict[str, list[str]]:
    """``NAME=RUN,RUN`` items -> group -> runs (default: one group ``all``).

    Raises:
        ValueError: an item without ``=``, a name or run list that is empty, a name given twice, a run not given as
            a positional run, a run in two groups.
    """
    if not items:
        return {"all": list(runs)}
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for item in items:
        if "=" not in item:
            raise ValueError(f"--groups entry {item!r} is invalid: write NAME=RUN,RUN")
        name, members = item.split("=", 1)
        members = members.split(",") if members else []
        if "" in members:
            raise ValueError(f"--groups entry {item!r} is invalid: it holds an empty run (two commas, or one at an "
                             "end), which would be dropped; write NAME=RUN,RUN")
        if not name or not members:
            raise ValueError(f"--groups entry {item!r} is invalid: a group needs a name and at least one run "
                             "(NAME=RUN,RUN)")
        if "," in name or name == IMPROVEMENT:
            raise ValueError(f"--groups name {name!r} is invalid: a group's name holds no comma (marl-eval splits "
                             f"on them) and is not {IMPROVEMENT!r} (the summary's key); choose another name")
        if name in out:
            raise ValueError(f"--groups names {name!r} twice; give each group once, its runs comma-separated "
                             f"({name}=RUN,RUN)")
        for m in members:
            if m not in runs:
                raise ValueError(f"--groups {name}: {m!r} is not one of the runs given {runs}")
            if m in seen:
                raise ValueError(f"--groups: {m!r} is in two groups; give each run one group")
            seen.add(m)
        out[name] = members
    return out
