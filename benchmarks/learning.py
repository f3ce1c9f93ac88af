"""The learning ladder: does training make the reward go up? One command per rung, IQM [95 % CI] over seeds.

    python benchmarks/learning.py --rung sanity                         # ≈ 1 CPU minute: a bandit through the stack
    python benchmarks/learning.py --rung tiny_vocab --jobs 2            # this project's arms, 32,768 episodes each
    python benchmarks/learning.py --rung tiny_vocab --episodes 8192 --arms ppo cory tianshou sb3-maskable-ppo torchrl
    python benchmarks/learning.py --rung imdb --arms grpo --jobs 2      # SmolLM2-135M + LoRA on real IMDB reviews
    python benchmarks/learning.py --rung tiny_vocab --arms cory cory-wo-kt --seeds 0 --out /tmp/kt.json
    python benchmarks/learning.py --rung chain_relay --jobs 2          # 3 seats with and without knowledge transfer
    python benchmarks/learning.py --rung imdb --merge benchmarks/results/imdb_runs/cory-s{0,1,2}.json \
        benchmarks/results/imdb_runs/ppo-2x-s{0,1,2}.json --out /tmp/imdb.json \
        --marl_eval /tmp/imdb_marl_eval.json --marl_eval_arms cory ppo

Each rung fixes the task, the model, the settings every arm shares and the episode budget (the same for every arm;
an episode = one query answered by every seat of the arm). Each (arm, seed) trains in its own process (fresh
memory, one torch thread, its CPU seconds counted), is evaluated on **held-out queries** (a fixed slice of the
queries, by a hash of their text, that training never draws: `EnvConfig.heldout_fraction`) before training and at
`--eval_points` points during it, and its final reward is the last evaluation:

| rung | final reward | random / base | floors |
|---|---|---|---|
| sanity | pioneer reward of a one-token bandit: 1 when the first answer symbol is one of ``a b c`` | 3/17 ≈ 0.18 | ppo ≥ 0.9 within 60 CPU s |
| tiny_vocab | single-agent arms: pioneer reward (optimum 1); CORY arms: collective reward (optimum 2) | 0.23 / 0.42 | ppo ≥ 0.9, cory ≥ 1.8 |
| relay | collective reward (optimum 2); the query is private to the pioneer (`cory_env.tasks.relay`) | ≈ 0.23 | cory ≥ 1.8; cory-wo-kt ≤ 1.25 (its optimum) |
| chain_relay | collective reward of 3 seats (optimum 3); the query is private to the first seat, seat k reads seat k − 1 (`cory_env.tasks.chain_relay`) | ≈ 0.69 | chain3 ≥ 2.7 (0.9 × its optimum); chain3-wo-kt ≤ 1.546 (its optimum on the held-out slice) |
| imdb | the pioneer's held-out VADER reward (also KL to the reference and distinct-1/2) | the base model | ≥ base + 0.2 for ppo and cory |

The JSON (``--out``, default ``benchmarks/results/learning_<rung>.json``) holds ``{"rung", "command", "episodes",
"arms": {arm: {"per_seed", "mean", "std", "stats", "episodes", "cpu_s", "train_cpu_s", "curves", ...}}, "floors",
"ceilings", "equal_time", "equal_kl", "improvement", "distinct_2_at_kl", "combined_reward", "runs", "commits",
"stats_method"}``; a curve point is a record (episodes, training CPU
s with the evaluations' share left out, held-out reward, and on the pioneer-alone rungs KL to the reference with
the penalised and the k1 estimator, distinct-1/2, response length: `benchmarks.ladder_report`); figures of the
held-out reward against training episodes (``.png``) and against KL with the combined reward
(``_tradeoff.png``), mean ± std over seeds, are written beside it. Over seeds (`trainers.evaluation.stats`, Agarwal
et al. 2021): each arm's ``stats`` holds the interquartile mean and 95 % percentile-bootstrap interval of the final
reward (and of the gain over the base model on a rung whose floors are on gains), ``{"iqm", "ci", "n", "mean"}``;
each ``equal_kl`` level the same per arm; ``improvement`` (and ``equal_kl["improvement"]`` per level) P(A > B) with
its interval for every arm against ``ppo``, ``cory`` and ``chain3`` where present (`benchmarks.ladder_stats`).
``--marl_eval PATH`` also writes the result in marl-eval's JSON format (`benchmarks.marl_eval_json`), of the arms
``--marl_eval_arms`` names (default: every arm); arms whose seed sets or evaluation points differ are refused with
the reason (marl-eval compares algorithms over the same runs).

The IMDB rungs read ``imdb_reviews_1000.csv`` from the data folder, ``$CORY_SHARED_DATA`` (default: ``shared/data``
beside the clone; `benchmarks.paths`), and record it under that name; a result records every path relative to the
repository (``command``, flags), never the machine's.

``--merge`` summarises JSONs made apart and refuses (`benchmarks.ladder_merge`) files whose settings
(``shared_flags``, a run's ``flags``) or episodes differ, a run given twice, and runs that record different commits
(or some none: ``"unrecorded"``); ``--across_commits`` allows the last, for use only after checking that the seeded
numbers did not change between those commits. ``commits`` records every run's commit.

An arm ``NAME-Nx`` is arm NAME with N times the rung's episodes (N a whole number >= 1): ``ppo-2x`` is the
equal-compute control, ``ppo-4x`` / ``cory-4x`` the long-horizon arms. Its first part is arm NAME exactly (same seeds,
every stream derived from (seed, iteration); evaluations draw their own seeds), and it is evaluated at NAME's points
too, so the summary also reports NAME from it when NAME itself was not run on that seed. On the IMDB rung every curve
point keeps 4 samples and every held-out response text (``samples``, ``responses``), and every run records the
commit that produced it (``commit``) and the extra flags (``flags``).

Arms: this project's (`trainers.cli.bench.ARMS`: ``ppo``, ``grpo``, ``cory``, ``cory-wo-kt``, ``cory-wo-rex``,
``cory-grpo``, the joint learners ``mappo`` (against ``cory`` = IPPO) and ``magrpo`` (against ``cory-grpo``), and the
three-seat chains ``chain3`` / ``chain3-wo-kt``; ``magrpo-wo-kt``: ``magrpo`` with both seats answering the query
alone) and
other libraries on the same env and episode budget through a module's ``train_and_evaluate(seed, episodes,
eval_episodes)``: on ``tiny_vocab`` ``tianshou`` (one PPO per seat, collective reward), ``sb3-maskable-ppo`` (pioneer
seat) and ``torchrl`` (one PPO per seat); on ``imdb`` ``trl-grpo`` (TRL's `GRPOTrainer` with this project's model,
queries, reward and evaluation: `benchmarks/trl_grpo.py`; ``trl-grpo-default`` the same in TRL's own default
precision, bf16) and ``comlrl-magrpo`` (CoMLRL's `MAGRPOTrainer` on this project's model, queries, reward and
evaluation, against ``magrpo-wo-kt``: `benchmarks/comlrl_magrpo.py`); skipped with a note when not installed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import multiprocessing
import sys
import tempfile
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/learning.py` from a clone
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder_run import run_one  # noqa: E402
from benchmarks.ladder_summary import merge, report, summarise, tables  # noqa: E402
from benchmarks.marl_eval_json import export_marl_eval  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, result_path  # noqa: E402
from benchmarks.paths import recorded_flags, resolved_flags  # noqa: E402
from benchmarks.rungs import EXTERNAL_ARMS, RUNGS, arm_spec, unavailable_reason  # noqa: E402


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rung", required=True, choices=sorted(RUNGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=None, help="Arms to run (default: the rung's).")
    parser.add_argument("--episodes", type=int, default=None, help="Episode budget per arm (default: the rung's).")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[],
                        help="Last: extra `cory train` flags for every arm of ours, after the rung's (probes).")
    parser.add_argument("--jobs", type=int, default=1, help="Runs in parallel (processes, one torch thread each).")
    add_out_option(parser, help="JSON path (default benchmarks/results/learning_<rung>.json).")
    parser.add_argument("--run_dir", default=None, metavar="DIR",
                        help="Keep each run's folder in DIR/<arm>-s<seed> (default: a temporary folder), with a "
                             "checkpoint at every evaluation point, so a killed run can be continued with --resume.")
    parser.add_argument("--resume", action="store_true",
                        help="With --run_dir: continue each run from its last evaluation point (benchmarks."
                             "ladder_progress); a run with no progress there starts afresh.")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                        help="Instead of running: summarise these ladder JSONs of --rung together into --out (refused "
                             "when their settings, episodes or commits differ).")
    parser.add_argument("--across_commits", action="store_true",
                        help="With --merge: merge runs that record different commits (or none). Use it only after "
                             "checking that the seeded numbers did not change between those commits.")
    parser.add_argument("--tables", default=None, metavar="JSON",
                        help="Instead of running: print the markdown tables of a ladder JSON (what the results pages "
                             "show).")
    parser.add_argument("--marl_eval", default=None, metavar="PATH",
                        help="Also write the result in marl-eval's JSON format to PATH (benchmarks.marl_eval_json).")
    parser.add_argument("--marl_eval_arms", nargs="+", default=None, metavar="ARM",
                        help="With --marl_eval: the arms to write (default: every arm); they must share one seed set "
                             "and evaluation points (marl-eval compares algorithms over the same runs).")
    args = parser.parse_args(argv)
    if args.resume and not args.run_dir:
        parser.error("--resume continues the runs kept in --run_dir DIR; pass --run_dir too")
    if args.marl_eval_arms and not args.marl_eval:
        parser.error("--marl_eval_arms chooses the arms --marl_eval PATH writes; pass --marl_eval too")
    if args.tables:
        print(tables(json.loads(Path(args.tables).read_text(encoding="utf-8"))))
        return {}
    rung = RUNGS[args.rung]
    # before any run: the JSON and the figures beside it (`report`), and the marl-eval copy
    out = checked_out(parser, args, default=result_path(f"learning_{args.rung}.json"),
                      also=(".png", "_tradeoff.png"))
    if args.marl_eval:
        checked_out(parser, args, dest="marl_eval", option="--marl_eval")
    if args.merge:
        result = merge(args.merge, out, argv, across_commits=args.across_commits)
        return _export(result, args.marl_eval, args.marl_eval_arms)
    arms = args.arms or list(rung.arms)
    from trainers.cli.bench import arm_flags

    try:
        for arm in arms:
            if arm not in EXTERNAL_ARMS:
                arm_flags(arm_spec(arm)[0])  # this project's arm or a learner arm (learner=NAME), else refused
    except ValueError as err:
        parser.error(f"{err}; or another library's arm: {', '.join(sorted(EXTERNAL_ARMS))}")
    skipped = {}
    for arm in arms:
        if arm in EXTERNAL_ARMS:
            if args.rung != EXTERNAL_ARMS[arm].rung:
                skipped[arm] = f"only on the {EXTERNAL_ARMS[arm].rung} rung"
            elif (why := unavailable_reason(arm)) is not None:
                skipped[arm] = why
    arms = [a for a in arms if a not in skipped]
    try:
        resolved_flags(rung.flags)  # the rung's data is there, before any run starts
    except FileNotFoundError as err:
        parser.error(str(err))
    episodes = args.episodes or rung.episodes
    runs = []
    with tempfile.TemporaryDirectory(prefix="cory-ladder-") as tmp:
        root = Path(args.run_dir or tmp)
        jobs = [(args.rung, arm, seed, episodes * arm_spec(arm)[1], str(root / f"{arm}-s{seed}"), args.flags,
                 bool(args.run_dir), args.resume) for arm in arms for seed in args.seeds]
        with futures.ProcessPoolExecutor(max_workers=max(1, args.jobs),
                                         mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = {pool.submit(run_one, *job): job for job in jobs}
            for done in futures.as_completed(pending):
                run = done.result()
                runs.append(run)
                print(f"[ladder] {run['arm']} seed {run['seed']}: {run['before']:.3f} -> {run['final']:.3f} "
                      f"({run['episodes']} episodes, {run['cpu_s']:.0f} CPU s)", flush=True)
    result = summarise(args.rung, runs, skipped, argv)
    result["shared_flags"] += recorded_flags(args.flags)
    return _export(report(result, out), args.marl_eval, args.marl_eval_arms)


def _export(result: dict, marl_eval: str | None, arms: Sequence[str] | None = None) -> dict:
    """`result`, its `arms` (default: all) written in marl-eval's format to `marl_eval` too when given.

    Raises:
        SystemExit: marl-eval cannot read the arms as one task (`benchmarks.marl_eval_json.check_exportable`'s
            reason; the ladder JSON is written already: export it again with ``benchmarks/marl_eval_json.py``).
    """
    if marl_eval:
        try:
            print(f"wrote {export_marl_eval(result, Path(marl_eval), arms=arms)} (marl-eval format)")
        except ValueError as err:
            raise SystemExit(f"--marl_eval: {err} (choose them with --marl_eval_arms; the ladder JSON is written: "
                             "export it with python benchmarks/marl_eval_json.py LADDER.json --arms ...)") from None
    return result


if __name__ == "__main__":
    main()

