"""The learning ladder: does training make the reward go up? One command per rung, mean ± std over seeds.

    python benchmarks/learning.py --rung sanity                         # ≈ 1 CPU minute: a bandit through the stack
    python benchmarks/learning.py --rung tiny_vocab --jobs 2            # this project's arms, 32,768 episodes each
    python benchmarks/learning.py --rung tiny_vocab --episodes 8192 --arms ppo cory tianshou sb3-maskable-ppo torchrl
    python benchmarks/learning.py --rung imdb --arms grpo --jobs 2      # SmolLM2-135M + LoRA on real IMDB reviews
    python benchmarks/learning.py --rung tiny_vocab --arms cory cory-wo-kt --seeds 0 --out /tmp/kt.json

Each rung fixes the task, the model, the settings every arm shares and the episode budget (the same for every arm;
an episode = one query answered by every seat of the arm). Each (arm, seed) trains in its own process (fresh
memory, one torch thread, its CPU seconds counted), is evaluated on **held-out queries** (a fixed slice of the
queries, by a hash of their text, that training never draws: `EnvConfig.heldout_fraction`) before training and at
`--eval_points` points during it, and its final reward is the last evaluation:

| rung | final reward | random / base | floors (from issue #14) |
|---|---|---|---|
| sanity | pioneer reward of a one-token bandit: 1 when the first answer symbol is one of ``a b c`` | 3/17 ≈ 0.18 | ppo ≥ 0.9 within 60 CPU s |
| tiny_vocab | single-agent arms: pioneer reward (optimum 1); CORY arms: collective reward (optimum 2) | 0.23 / 0.42 | ppo ≥ 0.9, cory ≥ 1.8 |
| imdb | the pioneer's held-out VADER reward (also KL to the reference and distinct-1/2) | the base model | ≥ base + 0.2 for ppo and cory |

The JSON (``--out``, default ``benchmarks/learning_<rung>.json``) holds ``{"rung", "command", "episodes",
"arms": {arm: {"per_seed", "mean", "std", "episodes", "cpu_s", "curves", ...}}, "floors"}``; a figure of the
held-out reward against training episodes (mean ± std over seeds) is written beside it (``.png``).

Arms: this project's (`trainers.cli.bench.ARMS`: ``ppo``, ``grpo``, ``cory``, ``cory-wo-kt``, ``cory-wo-rex``,
``cory-grpo``) and, on ``tiny_vocab``, other libraries on the same env and episode budget through their examples'
``train_and_evaluate(seed, episodes, eval_episodes)``: ``tianshou`` (one PPO per seat, collective reward),
``sb3-maskable-ppo`` (pioneer seat) and ``torchrl`` (one PPO per seat), skipped with a note when not installed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import importlib
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/learning.py` from a clone
    sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
#: The bandit's rewarded first symbols (sanity rung).
BANDIT_TARGETS = ("a", "b", "c")


def bandit_reward(queries: list[str], responses: list[str]) -> list[float]:
    """Sanity rung: 1.0 when the response's first word is one of `BANDIT_TARGETS`, else 0.0 (the query is ignored).

    >>> bandit_reward(["c d e f", "c d e f"], ["a k", "k a"])
    [1.0, 0.0]
    """
    return [float(r.split()[:1] != [] and r.split()[0] in BANDIT_TARGETS) for r in responses]


@dataclass(frozen=True)
class Rung:
    """One rung: shared `cory train` flags, the episode budget per arm, the default arms and the floors."""

    flags: tuple[str, ...]
    episodes: int
    arms: tuple[str, ...]
    floors: dict[str, float]
    eval_episodes: int = 512
    eval_points: int = 8
    reward_fn: Callable | None = None
    collective: bool = True  # CORY arms report the collective reward (False: the pioneer's task reward)
    floor_on_gain: bool = False  # floors bound the gain over the untrained model (True) or the final reward
    help: str = ""
    extra_floor: dict = field(default_factory=dict)


# Settings every tiny-model arm shares (chosen by the factor table in README "Does it learn?"): large batches
# (the tiny model's step costs the same for 32 or 256 rows), an entropy bonus against early collapse, a small
# fixed KL coefficient, value-head dropout off, T_REx 5 as in the official code.
TINY = ("--model", "tiny", "--task", "tiny_vocab", "--context_len", "12", "--heldout_fraction", "0.2",
        "--batch_size", "256", "--mini_batch_size", "64", "--ppo_epochs", "4", "--learning_rate", "1e-3",
        "--ent_coef", "0.01", "--adap_kl_ctrl", "false", "--init_kl_coef", "0.01", "--value_head_dropout", "0",
        "--role_exchange_period", "5")

RUNGS: dict[str, Rung] = {
    "sanity": Rung(
        flags=TINY + ("--batch_size", "64", "--mini_batch_size", "16"), episodes=64 * 40, arms=("ppo",),
        floors={"ppo": 0.9}, extra_floor={"cpu_s": 60.0}, reward_fn=bandit_reward, collective=False,
        eval_episodes=256, eval_points=4,
        help="tiny model, tiny_vocab queries, reward 1 for a first symbol in {a, b, c}",
    ),
    "tiny_vocab": Rung(
        flags=TINY, episodes=256 * 128,
        arms=("ppo", "grpo", "cory", "cory-wo-kt", "cory-wo-rex", "cory-grpo"),
        floors={"ppo": 0.9, "cory": 1.8},
        help="tiny model on the 20-token cooperative task",
    ),
    "imdb": Rung(
        flags=("--model", "smollm2-135m-instruct", "--task", "imdb",
               "--data_path", str(DATA / "imdb_reviews_1000.csv"), "--heldout_fraction", "0.2",
               "--use_lora", "true", "--lora_r", "16", "--lora_alpha", "32", "--batch_size", "16",
               "--mini_batch_size", "8", "--ppo_epochs", "2", "--learning_rate", "5e-4", "--ent_coef", "0.0",
               "--adap_kl_ctrl", "false", "--init_kl_coef", "0.05", "--value_head_dropout", "0",
               "--min_new_tokens", "8", "--max_new_tokens", "12", "--context_len", "96", "--role_exchange_period", "5"),
        episodes=400, arms=("grpo", "cory-grpo", "ppo", "cory"),
        floors={"ppo": 0.2, "cory": 0.2, "grpo": 0.2, "cory-grpo": 0.2}, eval_episodes=128,
        eval_points=4, collective=False, floor_on_gain=True,
        help="SmolLM2-135M-Instruct + LoRA, VADER, real IMDB reviews; floors are gains over the base model",
    ),
}

#: Other libraries' arms: module with `train_and_evaluate(seed, episodes, eval_episodes) -> dict`.
EXTERNAL_ARMS = {"tianshou": "examples.tianshou_marl", "sb3-maskable-ppo": "examples.sb3_baseline",
                 "torchrl": "examples.torchrl_marl"}
#: What each external arm's reward is (the single-agent SB3 arm plays the pioneer seat alone).
EXTERNAL_METRIC = {"tianshou": "collective", "sb3-maskable-ppo": "pioneer", "torchrl": "collective"}


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = list(values)
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


# ---------------------------------------------------------------------------------------------------- one run
def run_own_arm(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = ()) -> dict:
    """Train one of this project's arms on one seed and evaluate it on held-out queries (in this process)."""
    import torch

    from trainers.cli.bench import ARMS
    from trainers.cli.train import parse_train_args
    from trainers.loop.cory import CORYTrainer

    torch.set_num_threads(1)
    rung = RUNGS[rung_name]
    configs = parse_train_args(
        [*rung.flags, *ARMS[arm], *flags, "--seed", str(seed), "--output_dir", run_dir, "--overwrite", "true",
         "--tensorboard", "false", "--log_samples", "0", "--torch_threads", "1", "--num_iterations", "1"])
    ppo_config = configs.ppo
    iterations = max(1, episodes // ppo_config.batch_size)
    config = replace(configs.run, num_iterations=iterations)
    start = time.process_time()
    trainer = CORYTrainer(*configs._replace(run=config), reward_fn=rung.reward_fn)
    collective = rung.collective and config.algo == "cory"
    points = sorted({round(iterations * k / rung.eval_points) for k in range(1, rung.eval_points + 1)})
    eval_seed = 10_000 + seed  # never a training seed's query stream
    evaluate = lambda: trainer.evaluate(episodes=rung.eval_episodes, seed=eval_seed, collective=collective)  # noqa: E731
    curves = [[0, evaluate()]]
    train_reward = []
    for it in range(iterations):
        metrics, _ = trainer.iteration(it)
        train_reward.append(metrics["cory/collective_reward" if collective else "pioneer/task_reward"])
        if it + 1 in points:
            curves.append([(it + 1) * ppo_config.batch_size, evaluate()])
            print(f"[ladder] {arm} seed {seed}: {curves[-1][0]} episodes, held-out reward "
                  f"{curves[-1][1]['reward']:.3f} ({time.process_time() - start:.0f} CPU s)", flush=True)
    final = {k: v for k, v in curves[-1][1].items() if k != "samples"}
    return {"arm": arm, "seed": seed, "final": final["reward"], "before": curves[0][1]["reward"],
            "episodes": iterations * ppo_config.batch_size, "cpu_s": time.process_time() - start,
            "curve": [[n, e["reward"]] for n, e in curves], "final_eval": final,
            "train_reward": train_reward, "metric": "collective" if collective else "pioneer"}


def run_external_arm(arm: str, seed: int, episodes: int, eval_episodes: int) -> dict:
    """Train another library's arm through its example's `train_and_evaluate`."""
    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(EXTERNAL_ARMS[arm])
    start = time.process_time()
    out = module.train_and_evaluate(seed=seed, episodes=episodes, eval_episodes=eval_episodes)
    return {"arm": arm, "seed": seed, "final": out["after"], "before": out["before"], "episodes": out["episodes"],
            "cpu_s": time.process_time() - start, "curve": out.get("curve", []),
            "metric": EXTERNAL_METRIC[arm]}


def _external_available(arm: str) -> str | None:
    """None when the arm can run, else why not."""
    try:
        importlib.import_module(EXTERNAL_ARMS[arm])
    except ImportError as err:
        return f"not installed ({err}); pip install -e \".[baselines]\""
    return None


def run_one(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = ()) -> dict:
    logging.disable(logging.WARNING)  # the ladder reports; per-iteration warnings would drown it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if arm in EXTERNAL_ARMS:
        return run_external_arm(arm, seed, episodes, RUNGS[rung_name].eval_episodes)
    return run_own_arm(rung_name, arm, seed, episodes, run_dir, flags)


# ---------------------------------------------------------------------------------------------------- report
def summarise(rung_name: str, runs: list[dict], skipped: dict[str, str], argv: Sequence[str]) -> dict:
    rung = RUNGS[rung_name]
    arms: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: (r["arm"], r["seed"])):
        arms.setdefault(run["arm"], {"runs": []})["runs"].append(run)
    for arm, entry in arms.items():
        rs = entry.pop("runs")
        mean, std = _mean_std(r["final"] for r in rs)
        before, before_std = _mean_std(r["before"] for r in rs)
        gains = [r["final"] - r["before"] for r in rs]
        entry.update(per_seed=[r["final"] for r in rs], mean=mean, std=std, seeds=[r["seed"] for r in rs],
                     before=before, before_std=before_std, gain_per_seed=gains,
                     episodes=rs[0]["episodes"], cpu_s=_mean_std(r["cpu_s"] for r in rs)[0], metric=rs[0]["metric"],
                     curves=[r["curve"] for r in rs])
        extra = [r["final_eval"] for r in rs if "final_eval" in r]
        for key in ("kl", "distinct_1", "distinct_2", "pioneer_task_reward", "observer_task_reward"):
            values = [e[key] for e in extra if key in e]
            if values:
                entry[key] = _mean_std(values)[0]
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
    return {"rung": rung_name, "help": rung.help, "command": "python benchmarks/learning.py " + " ".join(argv),
            "episodes": rung.episodes, "arms": arms, "floors": floors, "skipped": skipped,
            "shared_flags": list(rung.flags)}


def table(result: dict) -> str:
    """Markdown table of a ladder result (KL and distinct-n columns when the rung reports them)."""
    extra = [k for k in ("kl", "distinct_1", "distinct_2") if any(k in e for e in result["arms"].values())]
    head = ["arm", "held-out reward", "per seed", "before", *extra, "episodes", "CPU s / run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, e in result["arms"].items():
        seeds = ", ".join(f"{v:.3f}" for v in e["per_seed"])
        cells = [arm, f"{e['mean']:.3f} ± {e['std']:.3f} ({e['metric']})", seeds,
                 f"{e['before']:.3f} ± {e['before_std']:.3f}", *(f"{e[k]:.3f}" if k in e else "—" for k in extra),
                 str(e["episodes"]), f"{e['cpu_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for arm, why in result["skipped"].items():
        lines.append(f"| {arm} | skipped: {why} |" + " |" * (len(head) - 2))
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # a file, no screen
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, e in result["arms"].items():
        curves = [c for c in e["curves"] if c]
        if not curves:
            continue
        xs = [n for n, _ in curves[0]]
        ys = np.array([[v for _, v in c] for c in curves if len(c) == len(xs)])
        mean, std = ys.mean(axis=0), ys.std(axis=0)
        ax.plot(xs, mean, marker="o", ms=3, label=f"{arm} ({e['metric']})")
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("training episodes")
    ax.set_ylabel("held-out reward (mean ± std over seeds)")
    ax.set_title(f"learning ladder: {result['rung']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/learning_<rung>.json).")
    args = parser.parse_args(argv)
    rung = RUNGS[args.rung]
    arms = args.arms or list(rung.arms)
    from trainers.cli.bench import ARMS

    unknown = [a for a in arms if a not in ARMS and a not in EXTERNAL_ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; valid: {sorted(ARMS) + sorted(EXTERNAL_ARMS)}")
    skipped = {}
    for arm in arms:
        if arm in EXTERNAL_ARMS:
            if args.rung != "tiny_vocab":
                skipped[arm] = "only on the tiny_vocab rung"
            elif (why := _external_available(arm)) is not None:
                skipped[arm] = why
    arms = [a for a in arms if a not in skipped]
    episodes = args.episodes or rung.episodes
    out = Path(args.out) if args.out else ROOT / "benchmarks" / f"learning_{args.rung}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="cory-ladder-") as tmp:
        jobs = [(args.rung, arm, seed, episodes, str(Path(tmp) / f"{arm}-s{seed}"), args.flags) for arm in arms
                for seed in args.seeds]
        with futures.ProcessPoolExecutor(max_workers=max(1, args.jobs),
                                         mp_context=multiprocessing.get_context("spawn")) as pool:
            pending = {pool.submit(run_one, *job): job for job in jobs}
            for done in futures.as_completed(pending):
                run = done.result()
                runs.append(run)
                print(f"[ladder] {run['arm']} seed {run['seed']}: {run['before']:.3f} -> {run['final']:.3f} "
                      f"({run['episodes']} episodes, {run['cpu_s']:.0f} CPU s)", flush=True)
    result = summarise(args.rung, runs, skipped, argv)
    result["shared_flags"] += list(args.flags)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    plot(result, out.with_suffix(".png"))
    print(table(result))
    for arm, f in result["floors"].items():
        print(f"floor {arm}: {f['on']} >= {f['floor']} on every seed: {'met' if f['met_on_every_seed'] else 'MISSED'} "
              f"({', '.join(f'{v:.2f}' for v in f['per_seed'])})")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return result


if __name__ == "__main__":
    main()
