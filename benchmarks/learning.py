"""The learning ladder: does training make the reward go up? One command per rung, IQM [95 % CI] over seeds.

    python benchmarks/learning.py --rung sanity                         # ≈ 1 CPU minute: a bandit through the stack
    python benchmarks/learning.py --rung tiny_vocab --jobs 2            # this project's arms, 32,768 episodes each
    python benchmarks/learning.py --rung tiny_vocab --episodes 8192 --arms ppo cory tianshou sb3-maskable-ppo torchrl
    python benchmarks/learning.py --rung imdb --arms grpo --jobs 2      # SmolLM2-135M + LoRA on real IMDB reviews
    python benchmarks/learning.py --rung tiny_vocab --arms cory cory-wo-kt --seeds 0 --out /tmp/kt.json
    python benchmarks/learning.py --rung chain_relay --jobs 2          # 3 seats with and without knowledge transfer
    python benchmarks/learning.py --rung imdb --merge benchmarks/imdb_runs/cory-s{0,1,2}.json \
        benchmarks/imdb_runs/ppo-2x-s{0,1,2}.json --out /tmp/imdb.json \
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

The JSON (``--out``, default ``benchmarks/learning_<rung>.json``) holds ``{"rung", "command", "episodes",
"arms": {arm: {"per_seed", "mean", "std", "stats", "episodes", "cpu_s", "train_cpu_s", "curves", ...}}, "floors",
"ceilings", "equal_time", "equal_kl", "improvement", "distinct_2_at_kl", "combined_reward", "runs", "commits",
"stats_method"}``; a curve point is a record (episodes, training CPU
s with the evaluations' share left out, held-out reward, and on the pioneer-alone rungs KL to the reference with
the penalised and the k1 estimator, distinct-1/2, response length: `benchmarks.ladder_report`); figures of the
held-out reward against training episodes (``.png``) and against KL with the combined reward
(``_tradeoff.png``), mean ± std over seeds, are written beside it. Over seeds (`benchmarks.stats`, Agarwal et al.
2021): each arm's ``stats`` holds the interquartile mean and 95 % percentile-bootstrap interval of the final
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
three-seat chains ``chain3`` / ``chain3-wo-kt``) and
other libraries on the same env and episode budget through a module's ``train_and_evaluate(seed, episodes,
eval_episodes)``: on ``tiny_vocab`` ``tianshou`` (one PPO per seat, collective reward), ``sb3-maskable-ppo`` (pioneer
seat) and ``torchrl`` (one PPO per seat); on ``imdb`` ``trl-grpo`` (TRL's `GRPOTrainer` with this project's model,
queries, reward and evaluation: `benchmarks/trl_grpo.py`; ``trl-grpo-default`` the same in TRL's own default
precision, bf16); skipped with a note when not installed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import importlib
import json
import logging
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/learning.py` from a clone
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder_merge import UNRECORDED, check_mergeable  # noqa: E402
from benchmarks.ladder_report import (POINT_KEYS, combined_rewards, combined_table, equal_kl,  # noqa: E402
                                      equal_time, first_reach, kl_table, mean_std, plot, plot_tradeoff,
                                      point_record, table)
from benchmarks.ladder_stats import format_interval, improvement_table, improvements  # noqa: E402
from benchmarks.marl_eval_json import export_marl_eval  # noqa: E402
from benchmarks.paths import DATA_MARK, recorded_command, recorded_flags, resolved_flags  # noqa: E402
from benchmarks.stats import METHOD, arm_summary  # noqa: E402
from cory_env.tasks.chain_relay import without_kt_optimum  # noqa: E402
from cory_env.tasks.first_symbol import first_symbol_reward  # noqa: E402


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
    ceilings: dict[str, float] = field(default_factory=dict)  # arm -> the final reward it must not exceed
    keep_texts: bool = False  # every curve point keeps a few samples and every response text (collapse is read there)


# Settings every tiny-model arm shares (chosen by the factor table, docs/results/learning_factors.md): large
# batches (the tiny model's step costs about the same for 32 or 512 rows), an entropy bonus against early collapse,
# a value-loss weight of 0.5 (TRL's 0.1 left CORY's value heads behind), a small fixed KL coefficient, T_REx 5 as in
# the official code (dropout is off by default: `--disable_dropout`).
TINY = ("--model", "tiny", "--task", "tiny_vocab", "--context_len", "12", "--heldout_fraction", "0.2",
        "--batch_size", "512", "--mini_batch_size", "128", "--ppo_epochs", "4", "--learning_rate", "1e-3",
        "--ent_coef", "0.01", "--vf_coef", "0.5", "--adap_kl_ctrl", "false", "--init_kl_coef", "0.01",
        "--role_exchange_period", "5")

# The IMDB rung: the paper's task on the offline default model, reward and data.
IMDB = Rung(
    flags=("--model", "smollm2-135m-instruct", "--task", "imdb",
           "--data_path", f"{DATA_MARK}/imdb_reviews_1000.csv", "--heldout_fraction", "0.2",
           "--use_lora", "true", "--lora_r", "16", "--lora_alpha", "32", "--batch_size", "16",
           "--mini_batch_size", "8", "--ppo_epochs", "2", "--learning_rate", "1e-3", "--ent_coef", "0.0",
           "--adap_kl_ctrl", "false", "--init_kl_coef", "0.05",
           # PPO learners only (GRPO normalises within groups and ignores them), and lr 1e-3 for every arm:
           # the factor table of docs/results/learning_factors.md (single-agent PPO gained +0.08 on average at
           # lr 5e-4 without them, +0.45 at lr 1e-3 with them)
           "--use_score_scaling", "true", "--use_score_norm", "true", "--whiten_rewards", "true",
           "--min_new_tokens", "8", "--max_new_tokens", "12", "--context_len", "96", "--role_exchange_period", "5"),
    episodes=400, arms=("ppo-2x", "cory", "grpo-2x", "cory-grpo"),
    floors={"ppo": 0.2, "cory": 0.2, "grpo": 0.2, "cory-grpo": 0.2}, eval_episodes=128,
    eval_points=8, collective=False, floor_on_gain=True, keep_texts=True,
    help="SmolLM2-135M-Instruct + LoRA, VADER, real IMDB reviews; floors are gains over the base model; "
         "ppo-2x / grpo-2x: the single-agent arms with twice the episodes (equal compute with CORY's two models)",
)

RUNGS: dict[str, Rung] = {
    "sanity": Rung(
        flags=TINY + ("--batch_size", "64", "--mini_batch_size", "16"), episodes=64 * 40, arms=("ppo",),
        floors={"ppo": 0.9}, extra_floor={"cpu_s": 60.0}, reward_fn=first_symbol_reward, collective=False,
        eval_episodes=256, eval_points=4,
        help="tiny model, tiny_vocab queries, reward 1 for a first symbol in {a, b, c}",
    ),
    "tiny_vocab": Rung(
        flags=TINY, episodes=512 * 128,
        arms=("ppo", "grpo", "cory", "cory-wo-kt", "cory-wo-rex", "cory-grpo"),
        floors={"ppo": 0.9, "cory": 1.8},
        help="tiny model on the 20-token cooperative task",
    ),
    "relay": Rung(
        flags=tuple("relay" if f == "tiny_vocab" else f for f in TINY), episodes=512 * 128,
        arms=("cory", "cory-wo-kt", "mappo", "cory-grpo", "magrpo"), floors={"cory": 1.8},
        ceilings={"cory-wo-kt": 1.25},
        help="tiny model on the relay task: the query is private to the pioneer, so knowledge transfer is necessary "
             "(w/o KT optimum 1.25)",
    ),
    "chain_relay": Rung(
        flags=tuple("chain_relay" if f == "tiny_vocab" else f for f in TINY), episodes=512 * 256,
        arms=("chain3", "chain3-wo-kt", "chain3-mappo", "chain3-grpo", "chain3-magrpo"), floors={"chain3": 2.7},
        ceilings={"chain3-wo-kt": round(without_kt_optimum(3, heldout_fraction=0.2), 3)},
        help="tiny model on the chain-relay task: 3 seats, the query private to the first, seat k reads seat k-1 "
             "only (optimum 3; without knowledge transfer 1 + 2p = 1.546 on the held-out slice: "
             "cory_env.tasks.chain_relay)",
    ),
    "imdb": IMDB,
    "imdb_batch256": replace(
        IMDB, flags=IMDB.flags + ("--batch_size", "256", "--mini_batch_size", "256", "--ppo_epochs", "4",
                                  "--gradient_checkpointing", "true"),
        episodes=256 * 24, arms=("ppo", "cory"),
        help="the imdb rung at the paper's batch (docs/paper.md §2: 256 queries per iteration, one mini-batch of "
             "256, 4 PPO epochs; activation checkpointing), 24 iterations (the paper ran about 102); for a GPU: "
             "--jobs 6 --flags --device cuda (benchmarks/README.md)"),
}

@dataclass(frozen=True)
class ExternalArm:
    """Another library's arm: `module` has ``train_and_evaluate(seed, episodes, eval_episodes, **options) -> dict``;
    it runs on `rung`, reports `metric` ("collective", or "pioneer" for a single-agent arm), and its library comes
    from the project's extra `extra`; `requires` are modules it imports only when it runs (checked before running);
    `options` are (keyword, value) pairs passed to ``train_and_evaluate`` (e.g. TRL's own precision)."""

    module: str
    metric: str
    rung: str
    extra: str
    requires: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()


#: Other libraries' arms.
EXTERNAL_ARMS = {
    "tianshou": ExternalArm("trainers.adapters.tianshou", "collective", "tiny_vocab", "dev"),
    "sb3-maskable-ppo": ExternalArm("trainers.adapters.sb3", "pioneer", "tiny_vocab", "baselines"),
    "torchrl": ExternalArm("trainers.adapters.torchrl", "collective", "tiny_vocab", "baselines"),
    "trl-grpo": ExternalArm("benchmarks.trl_grpo", "pioneer", "imdb", "trl", requires=("trl",)),
    # TRL in its own default precision (bf16 autocast): for a CPU with native bf16 (AVX512-BF16/AMX); emulated elsewhere
    "trl-grpo-default": ExternalArm("benchmarks.trl_grpo", "pioneer", "imdb", "trl", requires=("trl",),
                                    options=(("precision", "trl-default"),)),
}


# ---------------------------------------------------------------------------------------------------- one run
#: Held-out evaluation seed of training seed s: EVAL_SEED_BASE + s (never a training seed's query stream).
EVAL_SEED_BASE = 10_000


class TrainingClock:
    """CPU seconds of one run (this process), with the held-out evaluations' share kept apart, so curves can be
    compared at equal *training* CPU time (evaluation cost is the same for every arm and is not training)."""

    def __init__(self, train_s: float = 0.0, cpu_s: float = 0.0) -> None:
        """A clock that starts at `train_s` training and `cpu_s` total CPU seconds (a resumed run's, at its last
        point: `benchmarks.ladder_progress`)."""
        self.start = time.process_time() - cpu_s
        self.eval_s = cpu_s - train_s

    def excluded(self, evaluate: Callable[[], dict]) -> Callable[[], dict]:
        """`evaluate`, with its CPU seconds not counted as training."""
        def timed() -> dict:
            t0 = time.process_time()
            try:
                return evaluate()
            finally:
                self.eval_s += time.process_time() - t0
        return timed

    @property
    def train_s(self) -> float:
        return time.process_time() - self.start - self.eval_s

    @property
    def cpu_s(self) -> float:
        return time.process_time() - self.start

    def point(self, arm: str, seed: int, episodes: int, evaluation: dict, keep_texts: bool = False) -> dict:
        """A curve point record (`benchmarks.ladder_report`: episodes, training CPU s, reward, KL, distinct-n,
        response length; with `keep_texts` 4 samples and every response text) of the evaluation that ran just
        before, printed; ``"eval"`` keeps the whole evaluation until `summary`."""
        texts = {k: evaluation[k][:4] if k == "samples" else evaluation[k]
                 for k in ("samples", "responses") if keep_texts and k in evaluation}
        out = {"episodes": episodes, "train_cpu_s": round(self.train_s, 2), "reward": evaluation["reward"],
               **{k: evaluation[k] for k in POINT_KEYS if k in evaluation},
               **({"models": evaluation["models"]} if "models" in evaluation else {}), **texts, "eval": evaluation}
        if episodes:
            kl = f", KL {evaluation['kl_k1']:.2f}" if "kl_k1" in evaluation else ""
            print(f"[ladder] {arm} seed {seed}: {episodes} episodes, held-out reward {evaluation['reward']:.3f}{kl} "
                  f"({out['train_cpu_s']:.0f} training CPU s)", flush=True)
        return out

    def summary(self, curve: list[dict]) -> dict:
        """The run's result fields: final/before reward, final evaluation (a few text samples included), CPU s
        (all; training only), the curve of point records."""
        final = {k: v for k, v in curve[-1]["eval"].items() if k not in ("samples", "responses")}
        final["samples"] = curve[-1]["eval"].get("samples", [])[:4]
        return {"final": final["reward"], "before": curve[0]["reward"], "final_eval": final,
                "cpu_s": self.cpu_s, "train_cpu_s": self.train_s,
                "curve": [{k: v for k, v in p.items() if k != "eval"} for p in curve]}


# An arm ``NAME-Nx`` is arm NAME with N times the rung's episodes: ``-2x`` is the equal-compute control (a CORY run
# trains two models on one episode budget; the paper's control is a 2x-size model, which offline we lack), longer
# factors are the long-horizon arms (distribution collapse).


def arm_spec(arm: str) -> tuple[str, int]:
    """(base arm, episode factor) of an arm name: ``"ppo-2x"`` is ``("ppo", 2)``, ``"cory-4x"`` is ``("cory", 4)``,
    ``"ppo"`` and ``"cory-wo-rex"`` are themselves with factor 1 (a suffix is a factor when it is a number followed
    by ``x``).

    Raises:
        ValueError: a ``-Nx`` suffix whose N is not a whole number >= 1 (``ppo-0x``, ``ppo-1.5x``).

    >>> arm_spec("cory-wo-kt-4x"), arm_spec("cory-wo-rex")
    (('cory-wo-kt', 4), ('cory-wo-rex', 1))
    """
    base, dash, suffix = arm.rpartition("-")
    factor = suffix[:-1]
    if not dash or not suffix.endswith("x") or not re.fullmatch(r"[0-9.eE+-]+", factor):
        return arm, 1
    if not (factor.isascii() and factor.isdigit()) or int(factor) < 1:
        raise ValueError(f"arm {arm!r}: the episode factor of a -Nx arm must be a whole number >= 1, got "
                         f"{factor!r}; write e.g. {base}-4x")
    return base, int(factor)


def arm_configs(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = (), *,
                resume: bool = False):
    """(`RunConfigs`, iterations) of one of this project's arms on a rung: the rung's flags, then the arm's (a
    ``-2x`` arm's base arm's), then `flags`; one torch thread; ``iterations = episodes // batch_size`` (at least 1;
    `episodes` is this arm's own budget); `run_dir` replaced (or, with `resume`, continued from its latest
    checkpoint); the rung's ``$CORY_SHARED_DATA/NAME`` is the data file's path (`benchmarks.paths.resolved_flags`:
    FileNotFoundError naming the setting when it is missing)."""
    from trainers.cli.bench import arm_flags
    from trainers.cli.train import parse_train_args

    flags = resolved_flags([*RUNGS[rung_name].flags, *arm_flags(arm_spec(arm)[0]), *flags])
    configs = parse_train_args(
        [*flags, "--seed", str(seed), "--output_dir", run_dir,
         "--resume" if resume else "--overwrite", "true", "--tensorboard", "false", "--log_samples", "0",
         "--torch_threads", "1", "--checkpoint_every_minutes", "0", "--num_iterations", "1"])
    iterations = max(1, episodes // configs.ppo.batch_size)
    return replace(configs, run=replace(configs.run, num_iterations=iterations)), iterations


def build_arm_trainer(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = (), *,
                      resume: bool = False):
    """(`CORYTrainer`, iterations) for one of this project's arms on a rung (`arm_configs`), on one torch thread."""
    import torch

    from trainers.loop.cory import CORYTrainer

    torch.set_num_threads(1)
    configs, iterations = arm_configs(rung_name, arm, seed, episodes, run_dir, flags, resume=resume)
    return CORYTrainer(configs, reward_fn=RUNGS[rung_name].reward_fn), iterations


def eval_points(rung: Rung, iterations: int, factor: int = 1) -> list[int]:
    """The iterations (1-based) after which a run is evaluated: `rung.eval_points` evenly spaced over the base arm's
    iterations (``iterations // factor``), so a ``-Nx`` arm is evaluated at its base arm's points too, and
    ``rung.eval_points · min(factor, 2)`` evenly spaced over the whole run, the last one last.

    >>> eval_points(RUNGS["imdb"], 25)
    [3, 6, 9, 12, 16, 19, 22, 25]
    >>> eval_points(RUNGS["imdb"], 100, factor=4)[:9], len(eval_points(RUNGS["imdb"], 100, factor=4))
    ([3, 6, 9, 12, 16, 19, 22, 25, 31], 20)
    """
    base, n = iterations // factor, rung.eval_points * min(factor, 2)
    points = {round(base * k / rung.eval_points) for k in range(1, rung.eval_points + 1)} if base else set()
    return sorted(points | {round(iterations * k / n) for k in range(1, n + 1)})


class RunInterrupted(RuntimeError):
    """A stop signal ended a ladder run before its budget: no result is written (its checkpoint is kept)."""


def run_own_arm(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = (), *,
                keep: bool = False, resume: bool = False) -> dict:
    """Train one of this project's arms on one seed and evaluate it on held-out queries (in this process).

    Args:
        keep: `run_dir` outlives the run: a checkpoint and the progress (`benchmarks.ladder_progress`) are written at
            every evaluation point before the last.
        resume: continue from the progress in `run_dir` when it holds some (else start afresh).

    Raises:
        RunInterrupted: a stop signal (SIGINT, SIGTERM) ended training early; with `keep` the run can be resumed.
    """
    from benchmarks.ladder_progress import load_progress, save_progress
    from trainers.loop.metrics import METRICS_FILE, read_jsonl

    progress = load_progress(run_dir) if resume else None
    clock = TrainingClock(progress["train_s"], progress["cpu_s"]) if progress else TrainingClock()
    trainer, iterations = build_arm_trainer(rung_name, arm, seed, episodes, run_dir, flags, resume=bool(progress))
    rung, ppo_config = RUNGS[rung_name], trainer.ppo_config
    collective = rung.collective and trainer.seating.num_seats > 1
    points = eval_points(rung, iterations, arm_spec(arm)[1])
    def evaluate_models() -> dict:
        """The held-out evaluation of this point: for a multi-seat arm scored by its pioneer alone, `llm1` in the
        pioneer seat (one model across role exchanges, so a curve is one model's trajectory) with the other models'
        evaluations kept under ``models``; else the arm's own pioneer (or every seat, `collective`)."""
        kwargs = {"episodes": rung.eval_episodes, "seed": EVAL_SEED_BASE + seed, "collective": collective}
        if trainer.seating.num_seats == 1 or collective:
            return trainer.evaluate(**kwargs)
        first, *others = trainer.agents  # llm1 … llmN
        out = trainer.evaluate(**kwargs, model=first)
        out["models"] = {}
        for name in others:
            other = trainer.evaluate(**kwargs, model=name)
            out["models"][name] = {k: other[k] for k in ("reward", *POINT_KEYS) if k in other}
        return out

    evaluate = clock.excluded(evaluate_models)
    resumed_at = [*progress["resumed_at"], progress["curve"][-1]["episodes"]] if progress else []
    curve = progress["curve"] if progress else [clock.point(arm, seed, 0, evaluate(), rung.keep_texts)]

    def at_point(_, done: int) -> dict:  # the training loop's evaluation hook (`CORYTrainer.train`)
        evaluation = evaluate()
        curve.append(clock.point(arm, seed, done * ppo_config.batch_size, evaluation, rung.keep_texts))
        if keep and done < iterations:
            trainer.save_checkpoint(done - 1)
            save_progress(run_dir, done - 1, curve, train_s=clock.train_s, cpu_s=clock.cpu_s, resumed_at=resumed_at)
        return evaluation

    key = "cory/collective_reward" if collective else "pioneer/task_reward"
    history = trainer.train(eval_at=points, evaluate=at_point)
    if trainer.stopped_early:
        raise RunInterrupted(f"{arm} seed {seed} was stopped after {curve[-1]['episodes']} of "
                             f"{iterations * ppo_config.batch_size} episodes; " +
                             (f"continue it with --run_dir {Path(run_dir).parent} --resume" if keep else
                              "run it again (with --run_dir DIR to make it resumable)"))
    earlier = [row[key] for row in read_jsonl(Path(run_dir) / METRICS_FILE)][:trainer.start_iteration] \
        if progress else []  # the iterations before this process's, from the run's own metrics log
    return {"arm": arm, "seed": seed, "episodes": iterations * ppo_config.batch_size, **clock.summary(curve),
            "train_reward": earlier + [row[key] for row in history], "metric": "collective" if collective else "pioneer",
            **({"resumed_at": resumed_at} if resumed_at else {})}


def run_external_arm(arm: str, seed: int, episodes: int, eval_episodes: int) -> dict:
    """Train another library's arm through its example's `train_and_evaluate`."""
    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(EXTERNAL_ARMS[arm].module)
    start = time.process_time()
    out = module.train_and_evaluate(seed=seed, episodes=episodes, eval_episodes=eval_episodes,
                                    **dict(EXTERNAL_ARMS[arm].options))
    run = {"arm": arm, "seed": seed, "final": out["after"], "before": out["before"], "episodes": out["episodes"],
           "cpu_s": time.process_time() - start, "curve": out.get("curve", []), "metric": EXTERNAL_ARMS[arm].metric}
    run.update({key: out[key] for key in ("final_eval", "train_cpu_s") if key in out})
    return run


def _external_available(arm: str) -> str | None:
    """None when the arm can run, else why not."""
    try:
        for module in (EXTERNAL_ARMS[arm].module, *EXTERNAL_ARMS[arm].requires):
            importlib.import_module(module)
    except ImportError as err:
        return f"not installed ({err}); pip install -e \".[{EXTERNAL_ARMS[arm].extra}]\""
    return None


def code_version(root: Path = ROOT) -> str | None:
    """The commit of the code a run ran (``git describe --always --dirty``: ``-dirty`` when tracked files had
    uncommitted changes), None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_one(rung_name: str, arm: str, seed: int, episodes: int, run_dir: str, flags: Sequence[str] = (),
            keep: bool = False, resume: bool = False) -> dict:
    logging.disable(logging.WARNING)  # the ladder reports; per-iteration warnings would drown it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if arm in EXTERNAL_ARMS:
        run = run_external_arm(arm, seed, episodes, RUNGS[rung_name].eval_episodes)
    else:
        run = run_own_arm(rung_name, arm, seed, episodes, run_dir, flags, keep=keep, resume=resume)
    return {**run, "commit": code_version(), "flags": recorded_flags(flags)}


# ---------------------------------------------------------------------------------------------------- report
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
        entry["stats"] = {"final": arm_summary(entry["per_seed"])}  # IQM [95 % CI] over seeds (benchmarks.stats)
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


def main(argv: Sequence[str] | None = None) -> dict:
    from trainers.cli.outputs import add_overwrite_option, checked_out

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
    add_overwrite_option(parser)
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
    out = checked_out(parser, args, default=ROOT / "benchmarks" / f"learning_{args.rung}.json",
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
            elif (why := _external_available(arm)) is not None:
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
    from trainers.cli.outputs import write_output

    result["equal_time"] = equal_time(result)
    result["improvement"] = improvements(result)
    result["equal_kl"] = equal_kl(result)
    result["distinct_2_at_kl"] = equal_kl(result, value="distinct_2")
    result["combined_reward"] = combined_rewards(result)
    if extra is not None:
        result.update(extra(result))
    write_output(out, json.dumps(result, indent=1))
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

if __name__ == "__main__":
    main()
