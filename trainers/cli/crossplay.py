"""``cory crossplay``: every trained model with partners it trained with and partners it never met.

    cory crossplay runs/pair-s0 runs/pair-s1 runs/pop-s0 runs/pop-s1 --episodes 128 \\
        --groups pair=runs/pair-s0,runs/pair-s1 pop=runs/pop-s0,runs/pop-s1 --out crossplay.json

The line-ups, their numbers and the groups' statistics are `trainers.evaluation.crossplay`'s. Writes a JSON (the
matrix, every line-up with its models, the groups) and a heatmap PNG beside it; ``--marl_eval PATH`` also writes the
group comparison in the raw-data format of InstaDeep's ``marl-eval`` (environment ``cory_<task>``, task
``crossplay``, one algorithm per group, one run per seed; `trainers.evaluation.crossplay.to_marl_eval`). A model is
labelled by its run's path (relative to the runs' common folder) and its name.

Runs that played another game than the first (any env setting: task, reward, seating, data, held-out split,
lengths, context, per-seat settings; or sampling, or task options: `trainers.evaluation.crossplay.played`, recorded
in the JSON as ``played``) and one run given twice (a link, one of its checkpoint folders) are refused in one line
(exit 2), and so are outputs that exist (without ``--overwrite``) or that name one file twice, before any model loads.
Each seat samples with the runs' settings for that seat. A progress line reports the line-ups done and the time left;
the groups' numbers are printed with their intervals.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

from cory_env.checks import check_number
from trainers.loop.outputs import atomic_output, check_output_file, write_output

__all__ = ["output_paths", "run_crossplay"]


def output_paths(out: str, marl_eval: str | None, *, replace: bool) -> tuple[Path, Path, Path | None]:
    """(the JSON, the heatmap beside it, the marl-eval export or None), each checked before any model loads
    (`trainers.loop.outputs.check_output_file`: an existing file needs ``--overwrite``, a run's own files and folders
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


def group_lines(groups: dict) -> list[str]:
    """The groups' numbers as the lines the command prints: self-play, cross-play (and same-origin) as IQM [95 %
    CI] (n), the gap, and P(A > B) on cross-play with its interval; a note where an interval is only [min, max]."""
    from trainers.evaluation.crossplay import IMPROVEMENT

    def show(summary: dict | None) -> str:
        if summary is None:
            return "n/a"
        ci = f" [{summary['ci'][0]:.3f}, {summary['ci'][1]:.3f}]" if summary["ci"] else ""
        return f"{summary['iqm']:.3f}{ci} (n={summary['n']}{', [min, max]' if summary['n'] == 2 else ''})"

    lines = []
    for group, g in groups.items():
        if group == IMPROVEMENT:
            continue
        same = f"; same-origin {show(g['same_origin'])}" if g["same_origin"] else ""
        gap = f"; gap {g['gap']:.3f}" if g["gap"] is not None else ""
        lines.append(f"{group}: self-play {show(g['self_play'])}; cross-play {show(g['cross_play'])}{same}{gap}")
    for pair, p in groups[IMPROVEMENT].items():
        ci = f" [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]" if p["ci"] else " (one model: no interval)"
        lines.append(f"P({pair}) on cross-play: {p['p']:.2f}{ci}")
    return lines


def run_crossplay(argv: Sequence[str]) -> int:
    import logging
    import math
    import time
    from cory_env.generation import seat_sampling
    from trainers.evaluation import crossplay as cp
    from trainers.evaluation.evaluator import EVAL_SEED, Evaluator
    from trainers.loop import checkpoint as ckpt
    from trainers.loop.cast import load_cast
    from trainers.loop.progress import Progress
    logger = logging.getLogger("cory")
    parser = argparse.ArgumentParser(prog="cory crossplay", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (their latest checkpoints) or checkpoint folders")
    parser.add_argument("--episodes", type=int, default=64, help="held-out queries per line-up")
    parser.add_argument("--seed", type=int, default=EVAL_SEED, help="query and sampling seed (every line-up the same)")
    parser.add_argument("--groups", nargs="+", default=None,
                        help="NAME=RUN,RUN ...: groups of runs to compare (default: one group of all runs)")
    parser.add_argument("--out", default="crossplay.json", help="the JSON to write (a heatmap PNG beside it)")
    parser.add_argument("--marl_eval", default=None, metavar="PATH",
                        help="also write the groups in marl-eval's raw-data format (one run per seed in a group)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out, its heatmap and --marl_eval where they exist")
    parser.add_argument("--log_every_seconds", type=float, default=60.0,
                        help="off a terminal, the most seconds between two progress lines")
    args = parser.parse_args(list(argv))
    check_number(args.episodes, "--episodes", integer=True, low=2, fix="at least 2 (influence needs another query)")
    check_number(args.seed, "--seed", integer=True, low=0)
    groups = cp.parse_groups(args.groups, args.runs)
    out, png, marl = output_paths(args.out, args.marl_eval, replace=args.overwrite)
    found = {run: ckpt.find_checkpoint(run, name="run") for run in args.runs}
    states = {run: ckpt.read_trainer_state(path) for run, path in found.items()}
    cp.check_compatible(states)
    run_meta = {run: {"seed": state["seed"], "run_id": state["run_id"], "origin": cp.run_origin(state),
                      "iterations": int(state["iteration"]) + 1,  # queries trained on: every process's batch
                      "queries": (int(state["iteration"]) + 1) * state["config"]["batch_size"]
                      * int(state.get("num_processes", 1))}
                for run, state in states.items()}
    if marl:
        cp.check_marl_eval_groups(groups, {run: m["seed"] for run, m in run_meta.items()})
    for run, state in states.items():
        ckpt.warn_if_unfinished(run, state, use="played")
    models, refs, run_of, configs, canonical, query_tok = {}, {}, {}, None, {}, None
    labels = cp.run_labels(args.runs)
    for run, path in found.items():
        cast, run_configs, _, _ = load_cast(path)
        configs = configs or run_configs  # the first run's task and held-out split
        for name, member in cast.members.items():
            label = f"{labels[run]}:{name}"
            # one object per tokenizer across runs: their seats splice ids, no text channel
            member.agent.tokenizer = canonical.setdefault(cast.describe()[name]["tokenizer"], member.agent.tokenizer)
            models[label], refs[label], run_of[label] = member.agent, member.ref, run
            query_tok = query_tok or member.agent.tokenizer  # the first run's llm1's: the queries are cut in it
    env_cfg = configs.task_spec.resolve(configs.env) if configs.task_spec.resolve else configs.env
    split, not_held_out = configs.task_spec.heldout_split(env_cfg)
    if not_held_out:
        logger.warning("cross-play plays training queries, not held-out ones: %s", not_held_out)
    seats = cp.seat_names(env_cfg, query_tok, configs.task_options)
    evaluator = Evaluator(env_cfg, None, seat_sampling(configs.sampling, env_cfg.seat_generation, seats),
                          task_options=configs.task_options, query_tokenizer=query_tok, warn=False)
    progress = Progress(0, math.perm(len(models), len(seats)), "cross-play", enabled=True, unit="line-up",
                        every_s=args.log_every_seconds, shown={"collective_reward": "collective reward"})
    try:
        pairs = cp.crossplay(models, refs, evaluator, seats, episodes=args.episodes, seed=args.seed,
                             progress=progress.update)
    finally:
        progress.close()
    heldout = {key: getattr(env_cfg, key) for key in ("data_path", "heldout_fraction", "context_len")}
    heldout["query_split"] = split  # the split the line-ups played on
    origin_of = {run: m["origin"] for run, m in run_meta.items()}
    result = {"task": env_cfg.task, "heldout": heldout, "played": cp.played(states[args.runs[0]]), "runs": args.runs,
              "episodes": args.episodes, "seed": args.seed, "seats": list(seats), "models": list(models),
              "run_of": run_of, "run_meta": run_meta,
              "pairs": [{**p, "kind": cp.kind_of(p, run_of, origin_of)} for p in pairs],
              "matrix": cp.matrix(pairs, list(models)), "groups": cp.group_summary(pairs, run_of, groups, origin_of)}
    write_output(out, json.dumps(result, indent=2) + "\n")
    with atomic_output(png) as tmp:
        cp.heatmap(pairs, list(models), seats).savefig(tmp, dpi=120)
    if marl:
        write_output(marl, json.dumps(cp.to_marl_eval(result), indent=2) + "\n")
    print("\n".join(group_lines(result["groups"])))
    print(f"wrote {out} and {png}" + (f" and {marl}" if marl else "") + f" ({len(pairs)} line-ups of "
          f"{args.episodes} episodes, {time.monotonic() - progress.t0:.0f} s)", flush=True)
    return 0
