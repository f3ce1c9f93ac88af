"""One run of the learning ladder (`benchmarks/learning.py` runs many, one process each): one of this project's
arms trained on a rung and evaluated on held-out queries at the rung's points (`run_own_arm`, resumable from a kept
run folder), or another library's arm through its module (`run_external_arm`); `run_one` is either, with the commit
and flags recorded. `TrainingClock` counts a run's CPU seconds with the evaluations' share kept apart.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.ladder_report import POINT_KEYS, SEAT_POINT_PREFIXES
from benchmarks.paths import ROOT, recorded_flags
from benchmarks.rungs import EXTERNAL_ARMS, RUNGS, Rung, arm_configs, arm_spec

__all__ = ["EVAL_SEED_BASE", "RunInterrupted", "TrainingClock", "build_arm_trainer", "code_version", "eval_points",
           "run_external_arm", "run_one", "run_own_arm"]

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
               **{k: v for k, v in evaluation.items() if k.startswith(SEAT_POINT_PREFIXES)},
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
    rung, ppo_config = RUNGS[rung_name], trainer.configs.update
    collective = rung.collective and trainer.seating.num_seats > 1
    points = eval_points(rung, iterations, arm_spec(arm)[1])
    def evaluate_models() -> dict:
        """The held-out evaluation of this point: for a multi-seat arm scored by its pioneer alone, `llm1` in the
        pioneer seat (one model across role exchanges, so a curve is one model's trajectory) with the other models'
        evaluations kept under ``models``; else the arm's own pioneer (or every seat, `collective`). With ``--flags
        --eval_influence true`` also each later seat's influence and copy rate (`CORYTrainer.influence`: keys
        ``influence/observer``, ...) on the same queries."""
        kwargs = {"episodes": rung.eval_episodes, "seed": EVAL_SEED_BASE + seed, "collective": collective}
        influence = trainer.influence(episodes=rung.eval_episodes, seed=kwargs["seed"]) \
            if trainer.config.eval_influence else {}
        if trainer.seating.num_seats == 1 or collective:
            return {**trainer.evaluate(**kwargs), **influence}
        first, *others = trainer.agents  # llm1 … llmN
        out = trainer.evaluate(**kwargs, model=first)
        out["models"] = {}
        for name in others:
            other = trainer.evaluate(**kwargs, model=name)
            out["models"][name] = {k: other[k] for k in ("reward", *POINT_KEYS) if k in other}
        return {**out, **influence}

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
