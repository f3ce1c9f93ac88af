"""``cory crossplay``: every trained model with partners it trained with and partners it never met.

    cory crossplay runs/pair-s0 runs/pair-s1 runs/pop-s0 runs/pop-s1 --episodes 128 \\
        --groups pair=runs/pair-s0,runs/pair-s1 pop=runs/pop-s0,runs/pop-s1 --out crossplay.json

Every model of every run (its latest checkpoint; ``llm1`` … ``llmN``, a population's included) sits in the pioneer
seat with every other model in the observer seat: every ordered pair of distinct models, on two-seat seatings. The
episodes are the first run's task on its held-out split (`trainers.evaluation.episodes.heldout_env`), the same
queries and sampling seeds for every pair; both models sample with the run's shared sampling settings and lengths
(per-seat generation settings are not applied here). Per pair: the collective reward, each seat's task reward and
KL to its own model's reference (k1, nats per response), and the observer's influence and copy rate
(`trainers.evaluation.influence`).

A pair is **self-play** when both models come from one run (they trained together), **cross-play** otherwise
(Melting Pot's held-out co-players). Per group of runs (``--groups NAME=RUN,RUN``; default: one group of all runs):
self-play (each run's mean over its self-play pairs; IQM [95 % CI] over runs), cross-play (each model's mean over
its pairs, either seat, with a partner from another run; IQM [CI] over models), the gap self − cross, and P(A > B)
between groups on cross-play (`trainers.evaluation.stats`). Writes a JSON (the matrix, the pairs with their
partner, the groups) and a heatmap PNG beside it. A model is labelled by its run's path (relative to the runs'
common folder) and its name.

``--marl_eval PATH`` also writes the group comparison in the raw-data format of InstaDeep's ``marl-eval`` (the format
the ladder's learning curves export to, `benchmarks/marl_eval_json.py`), so its IQM and probability of improvement
read it (`to_marl_eval`): environment ``cory_<task>``, task ``crossplay``, one algorithm per group, one run per
seed. marl-eval has no partner axis (a run is one algorithm's seed), so the matrix itself stays in the JSON above,
where every pair names its partner; the export's values keep that order.

Runs of another task, seating, knowledge transfer, data or held-out split than the first are refused in one line
(exit 2), and so are outputs that exist (without ``--overwrite``) or that name one file twice, before any model loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from cory_env.checks import check_number
from trainers.cli.outputs import atomic_output, check_output_file, write_output
from trainers.loop import checkpoint as ckpt

__all__ = ["crossplay", "group_summary", "run_crossplay", "to_marl_eval"]

#: The key of the groups' P(A > B) in `group_summary`'s result (beside the groups).
IMPROVEMENT = "p_improvement_cross_play"
#: The config fields two runs must share to be played together (the game, and the data and split its held-out
#: queries come from: a model must not be scored on queries another run trained on).
SAME = ("task", "seating", "knowledge_transfer", "partner_reward_coef", "observer_template", "pioneer_template",
        "data_path", "heldout_fraction", "query_split")


def _models(run: Path) -> tuple[Path, dict, list[str]]:
    """(latest checkpoint, its trainer state, the run's model names).

    Raises:
        FileNotFoundError: `run` does not exist or holds no checkpoint.
    """
    if not run.is_dir():
        raise FileNotFoundError(f"run {run} does not exist; give a run directory (or a checkpoint folder)")
    path = ckpt.latest_checkpoint(run) if not (run / "trainer_state.json").exists() else run
    if path is None:
        raise FileNotFoundError(f"{run} holds no checkpoint; give a run directory that trained (or a checkpoint)")
    state = ckpt.read_trainer_state(path)
    return path, state, sorted(state["kl_coef"])


def check_compatible(states: dict[str, dict]) -> None:
    """Refuse runs that differ from the first in what the game is (`SAME`), or that have more than two seats.

    Raises:
        ValueError: naming both runs, the field and both values.
    """
    first_run, first = next(iter(states.items()))
    for run, state in states.items():
        for key in SAME:
            a, b = first["config"].get(key), state["config"].get(key)
            if a != b:
                raise ValueError(f"{run} is another game than {first_run}: {key}={b!r} there, {a!r} here; cross-play "
                                 "plays models of one task and seating")
        if len(state["exchange"]["seats"]) != 2:
            raise ValueError(f"{run} has {len(state['exchange']['seats'])} seats; cross-play plays two-seat seatings "
                             "(pioneer and observer)")


def seat_kl(agent, ref_model, transcript, seat: str) -> np.ndarray:
    """float (B,): the k1 KL (Σ_t log π − log π_ref over the response, nats) of `seat`'s responses in `transcript`
    under the agent that wrote them and its own reference."""
    from trainers.learning.experience import score_rollout
    from trainers.rollout import rollout_from_transcript

    rollout = rollout_from_transcript(transcript, seat)
    with torch.no_grad():
        old, ref = score_rollout(agent, ref_model, rollout, need_values=False)
    mask = rollout.response_mask.float()
    return ((old.logprobs - ref.logprobs) * mask).sum(dim=-1).numpy()


def crossplay(models: dict[str, object], refs: dict[str, object], env_for, *, episodes: int, seed: int) -> list[dict]:
    """Play every ordered pair of distinct models.

    Args:
        models: label -> agent; refs: label -> its reference model.
        env_for: ``(pioneer agent, observer agent) -> BatchedCORYEnv`` (their tokenizers).
        episodes, seed: per pair (the same queries and sampling seeds for every pair).

    Returns:
        One record per pair: ``pioneer``, ``observer`` (labels), collective_reward, pioneer/observer task reward and
        KL, influence and copy_rate of the observer, num_queries.
    """
    from trainers.evaluation.episodes import evaluation_batches
    from trainers.evaluation.influence import influence

    out = []
    for a, b in ((a, b) for a in models for b in models if a != b):
        seats = {"pioneer": models[a], "observer": models[b]}
        env = env_for(models[a], models[b])
        batches = -(-episodes // env.batch_size)
        collective, task, kl = [], {"pioneer": [], "observer": []}, {"pioneer": [], "observer": []}
        for transcript in evaluation_batches(env, seats, num_batches=batches, seed=seed):
            collective.extend(np.asarray(transcript.seats["pioneer"].reward, dtype=float).tolist())
            for seat, label in (("pioneer", a), ("observer", b)):
                task[seat].extend(np.asarray(transcript.seats[seat].task_reward, dtype=float).tolist())
                kl[seat].extend(seat_kl(seats[seat], refs[label], transcript, seat).tolist())
        moved = influence(env, seats, num_batches=batches, seed=seed)["observer"] if env.batch_size > 1 else {}
        out.append({"pioneer": a, "observer": b, "collective_reward": float(np.mean(collective)),
                    **{f"{s}_task_reward": float(np.mean(v)) for s, v in task.items()},
                    **{f"{s}_kl": float(np.mean(v)) for s, v in kl.items()},
                    **{k: moved[k] for k in ("influence", "copy_rate") if k in moved},
                    "num_queries": len(collective)})
    return out


def group_summary(pairs: list[dict], run_of: dict[str, str], groups: dict[str, list[str]]) -> dict:
    """Per group: self-play (per run: the mean collective reward of its self-play pairs), cross-play (per model of
    the group: the mean over its pairs, either seat, with a partner from another run), each as IQM [CI] with the
    values, and the gap; then P(A > B) between groups on the cross-play values.

    Args:
        pairs: `crossplay`'s records; run_of: model label -> its run; groups: group -> its runs.
    """
    from trainers.evaluation.stats import arm_summary, probability_of_improvement

    out: dict = {}
    for group, runs in groups.items():
        self_play = [float(np.mean([p["collective_reward"] for p in pairs
                                    if run_of[p["pioneer"]] == run == run_of[p["observer"]]])) for run in runs]
        members = [m for m, r in run_of.items() if r in runs]
        cross = [float(np.mean([p["collective_reward"] for p in pairs if m in (p["pioneer"], p["observer"])
                                and run_of[p["pioneer"]] != run_of[p["observer"]]]))
                 for m in members if any(run_of[x] != run_of[m] for x in run_of)]
        s, c = arm_summary(self_play), arm_summary(cross) if cross else None
        out[group] = {"runs": runs, "self_play": {**s, "values": self_play},
                      "cross_play": {**c, "values": cross} if c else None,
                      "gap": s["iqm"] - c["iqm"] if c else None}
    names = list(out)
    out[IMPROVEMENT] = {
        f"{a} > {b}": probability_of_improvement(out[a]["cross_play"]["values"], out[b]["cross_play"]["values"])
        for a in names for b in names if a != b and out[a]["cross_play"] and out[b]["cross_play"]}
    return out


def to_marl_eval(result: dict) -> dict:
    """A `cory crossplay` result in marl-eval's raw-data format (module docstring)::

        {"cory_<task>": {"crossplay": {group: {"seed_<s>": {"step_0": M, "absolute_metrics": M}}}}}

    where ``M`` = ``{"step_count": trained queries, "return": [...], "self_play_return": [...]}``: ``return`` lists
    the collective reward of every cross-play pair (a partner from another run) that a model of the run plays, in
    either seat, in the order of ``result["pairs"]`` (which names both models of each); ``self_play_return`` the
    run's self-play pairs. marl-eval means each list per run, as it means evaluation episodes.

    Raises:
        ValueError: two runs of one group with one seed, or groups on different seeds (marl-eval compares
            algorithms on the same runs): naming each group's seeds.
    """
    run_of, pairs, meta = result["run_of"], result["pairs"], result["run_meta"]
    groups = {g: v["runs"] for g, v in result["groups"].items() if g != IMPROVEMENT}
    check_marl_eval_groups(groups, {run: m["seed"] for run, m in meta.items()})
    out: dict = {}
    for group, runs in groups.items():
        out[group] = {}
        for run in runs:
            played = [p for p in pairs if run in (run_of[p["pioneer"]], run_of[p["observer"]])]
            metrics = {"step_count": meta[run]["queries"],
                       "return": [p["collective_reward"] for p in played
                                  if run_of[p["pioneer"]] != run_of[p["observer"]]],
                       "self_play_return": [p["collective_reward"] for p in played
                                            if run_of[p["pioneer"]] == run_of[p["observer"]]]}
            out[group][f"seed_{meta[run]['seed']}"] = {"step_0": metrics, "absolute_metrics": dict(metrics)}
    return {f"cory_{result['task']}": {"crossplay": out}}


def check_marl_eval_groups(groups: dict[str, list[str]], seed_of: dict[str, int]) -> None:
    """Refuse groups that marl-eval cannot compare: it compares algorithms on the same runs, so every group must
    hold one run per seed, on the same seeds.

    Raises:
        ValueError: a single run (no cross-play); groups on different seeds or with two runs of one seed, naming
            each group's seeds and the fix.
    """
    if len(seed_of) < 2:
        raise ValueError("--marl_eval compares cross-play, which needs models of two runs or more; give more runs "
                         "or drop --marl_eval")
    seeds = {g: sorted(seed_of[run] for run in runs) for g, runs in groups.items()}
    if any(len(set(s)) != len(s) for s in seeds.values()) or len({tuple(s) for s in seeds.values()}) > 1:
        raise ValueError(f"--marl_eval needs every group on the same seeds, one run per seed (marl-eval compares "
                         f"algorithms on the same runs); the groups have {seeds}: give each group one run per seed")


def heatmap(pairs: list[dict], labels: list[str], path: Path) -> Path:
    """The matrix of collective reward (rows: pioneer, columns: observer) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = np.full((len(labels), len(labels)), np.nan)
    for p in pairs:
        matrix[labels.index(p["pioneer"]), labels.index(p["observer"])] = p["collective_reward"]
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(labels), 1.0 + 0.6 * len(labels)))
    im = ax.imshow(matrix, cmap="viridis")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel("observer")
    ax.set_ylabel("pioneer")
    for i in range(len(labels)):
        for j in range(len(labels)):
            if np.isfinite(matrix[i, j]):
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
    fig.colorbar(im, ax=ax, label="collective reward")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def run_labels(runs: Sequence[str]) -> dict[str, str]:
    """Run -> its label: its path relative to the runs' common folder (``pair/s0``, ``pop/s0``).

    Raises:
        ValueError: two runs of one path.
    """
    import os

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
        members = [m for m in members.split(",") if m]
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


def output_paths(out: str, marl_eval: str | None, *, replace: bool) -> tuple[Path, Path, Path | None]:
    """(the JSON, the heatmap beside it, the marl-eval export or None), each checked before any model loads
    (`trainers.cli.outputs.check_output_file`: an existing file needs ``--overwrite``, a run's own files and folders
    are refused) and all three distinct.

    Raises:
        ValueError: two outputs on one path; a path a run owns. FileExistsError / IsADirectoryError /
            NotADirectoryError: from `check_output_file`.
    """
    if not out or not Path(out).name:
        raise ValueError(f"--out {out!r} names no file; give the JSON to write, e.g. --out crossplay.json")
    paths = {"--out": Path(out), "the heatmap beside --out": Path(out).with_suffix(".png")}
    if marl_eval:
        paths["--marl_eval"] = Path(marl_eval)
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path.resolve() in seen:
            raise ValueError(f"{option} {path} is also {seen[path.resolve()]}; give --out a .json name and "
                             "--marl_eval another file")
        seen[path.resolve()] = option
        check_output_file(path, option=option, replace=replace)
    return paths["--out"], paths["the heatmap beside --out"], paths.get("--marl_eval")


def run_crossplay(argv: Sequence[str]) -> int:
    from trainers.cli.eval import load_checkpoint_agent
    from trainers.evaluation.episodes import heldout_env
    from trainers.loop.cory import EVAL_SEED, seated_tokenizer
    from trainers.loop.fingerprint import tokenizer_fingerprint

    parser = argparse.ArgumentParser(prog="cory crossplay", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (their latest checkpoints) or checkpoint folders")
    parser.add_argument("--episodes", type=int, default=64, help="held-out queries per pair")
    parser.add_argument("--seed", type=int, default=EVAL_SEED, help="query and sampling seed (every pair the same)")
    parser.add_argument("--groups", nargs="+", default=None, help="NAME=RUN,RUN ...: groups of runs to compare")
    parser.add_argument("--out", default="crossplay.json", help="the JSON to write (a heatmap PNG beside it)")
    parser.add_argument("--marl_eval", default=None, metavar="PATH",
                        help="also write the groups in marl-eval's raw-data format (one run per seed)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out, its heatmap and --marl_eval where they exist")
    args = parser.parse_args(list(argv))
    check_number(args.episodes, "--episodes", integer=True, low=2, fix="at least 2 (influence needs another query)")
    check_number(args.seed, "--seed", integer=True, low=0)
    groups = parse_groups(args.groups, args.runs)
    out, png, marl = output_paths(args.out, args.marl_eval, replace=args.overwrite)
    found = {run: _models(Path(run)) for run in args.runs}
    check_compatible({run: state for run, (_, state, _) in found.items()})
    run_meta = {run: {"seed": state["config"]["seed"],  # queries trained on: every process's batch
                      "queries": (int(state["iteration"]) + 1) * state["config"]["batch_size"]
                      * int(state.get("num_processes", 1))}
                for run, (_, state, _) in found.items()}
    if marl:
        check_marl_eval_groups(groups, {run: m["seed"] for run, m in run_meta.items()})
    models, refs, run_of, configs, canonical = {}, {}, {}, None, {}
    labels = run_labels(args.runs)
    for run, (path, _, names) in found.items():
        for name in names:
            target = load_checkpoint_agent(path, name)
            label = f"{labels[run]}:{name}"
            fingerprint = tokenizer_fingerprint(target.agent.tokenizer)  # one object per tokenizer: ids spliced
            target.agent.tokenizer = canonical.setdefault(fingerprint, target.agent.tokenizer)
            models[label], refs[label], run_of[label] = target.agent, target.ref_model, run
            configs = configs or target.configs  # the first run's task and held-out split
    env_cfg = configs.task_spec.resolve(configs.env) if configs.task_spec.resolve else configs.env
    envs: dict = {}

    def env_for(pioneer, observer):
        key = (id(pioneer.tokenizer), id(observer.tokenizer))
        if key not in envs:
            tokenizer = seated_tokenizer({"pioneer": pioneer, "observer": observer})
            envs[key] = heldout_env(dataclasses.replace(env_cfg, seat_generation=None), tokenizer,
                                    episodes=args.episodes, collective=True, task_options=configs.task_options)
        return envs[key]

    pairs = crossplay(models, refs, env_for, episodes=args.episodes, seed=args.seed)
    heldout = {key: getattr(env_cfg, key) for key in ("data_path", "heldout_fraction", "context_len")}
    heldout["query_split"] = configs.task_spec.heldout_split(env_cfg)[0]  # the split the pairs played on
    result = {"task": env_cfg.task, "heldout": heldout, "runs": args.runs, "episodes": args.episodes,
              "seed": args.seed, "models": list(models), "run_of": run_of, "run_meta": run_meta, "pairs": pairs,
              "groups": group_summary(pairs, run_of, groups)}
    write_output(out, json.dumps(result, indent=2) + "\n")
    heatmap(pairs, list(models), png)
    if marl:
        write_output(marl, json.dumps(to_marl_eval(result), indent=2) + "\n")
    for group, g in result["groups"].items():
        if group != IMPROVEMENT:
            cross = f"{g['cross_play']['iqm']:.3f}" if g["cross_play"] else "n/a"
            print(f"{group}: self-play {g['self_play']['iqm']:.3f}, cross-play {cross}")
    print(f"wrote {out} and {png}" + (f" and {marl}" if marl else ""), flush=True)
    return 0
