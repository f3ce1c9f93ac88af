"""Where one training iteration's CPU time goes: PPO, GRPO, CORY (this project) and TRL's `GRPOTrainer`, on the
IMDB rung's settings (SmolLM2-135M-Instruct + LoRA r 16, batch 16, mini-batch 8, 2 epochs, 8–12 new tokens).

    python benchmarks/iteration_profile.py                      # every arm, 4 iterations each (the first is warm-up)
    python benchmarks/iteration_profile.py --arms cory ppo --iterations 6 --out /tmp/profile.json
    python benchmarks/iteration_profile.py --arms trl-grpo-default --iterations 2 --out /tmp/trl_bf16.json
    python benchmarks/iteration_profile.py --arms ppo grpo cory --precision bf16-mixed --out /tmp/bf16.json

Every arm runs in its own process (one torch thread) and is timed by wrapping the functions that do each part of an
iteration, with exclusive CPU seconds (`time.process_time`; a phase's nested phases are not counted twice):

============================  ===========================================  =========================================
phase                         this project                                 TRL `GRPOTrainer` (trl 1.16)
============================  ===========================================  =========================================
rollout (generation)          `trainers.rollout.run_episodes` (the          ``_generate_single_turn``
                              KV-cached sampler, acting scores)
reward                        `cory_env.rewards.score_texts` (VADER)        ``_calculate_rewards`` (the same VADER)
reference forward             `agents.ReferenceModel.evaluate`              ``_get_per_token_logps_and_entropies``
                                                                            with the adapter disabled
policy scoring (no grad)      `agents.LLMAgent.evaluate` without grad       the same without grad (old log-probs)
                              (values and old scores when not reused)
update forward (loss)         the learner's mini-batch loss and its         ``_compute_loss``
                              `LLMAgent.evaluate`
backward                      ``torch.Tensor.backward``                     the same
optimizer                     ``Optimizer.step`` (torch's global hooks)     the same
bookkeeping                   everything else in the iteration (padding,    everything else in ``train``
                              advantages, statistics, logging)
============================  ===========================================  =========================================

An iteration is one rollout of `batch_size` episodes and its update; the first iteration of each arm is a warm-up
and is left out. Results: CPU seconds per iteration and each phase's share, printed as a table and written to
`--out` (default `benchmarks/results/iteration_profile.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.paths import recorded_command  # noqa: E402
from benchmarks.outputs import add_out_option, checked_out, write_json  # noqa: E402

PHASES = ("rollout (generation)", "reward", "reference forward", "policy scoring (no grad)",
          "update forward (loss)", "backward", "optimizer", "bookkeeping")
#: The arms profiled: this project's, TRL's `GRPOTrainer` (`trl-grpo-default`: in its own default precision, bf16),
#: and CoMLRL's `MAGRPOTrainer` beside this project's MAGRPO on the same information (`benchmarks.comlrl_magrpo`).
ARMS = ("ppo", "grpo", "cory", "trl-grpo", "trl-grpo-default", "magrpo-wo-kt", "comlrl-magrpo")
TRL_PRECISION = {"trl-grpo": "fp32", "trl-grpo-default": "trl-default"}
BOOKKEEPING = PHASES[-1]


class PhaseClock:
    """Exclusive CPU seconds per phase: a phase entered inside another is subtracted from the outer one.

    `snapshot` marks an iteration boundary; `iterations()` returns the per-iteration totals between marks.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [name, start, seconds spent in nested phases]
        self._marks: list[dict[str, float]] = []
        self._undo: list[tuple[object, str, object]] = []

    def enter(self, name: str) -> None:
        self._stack.append([name, time.process_time(), 0.0])

    def leave(self) -> None:
        name, start, nested = self._stack.pop()
        elapsed = time.process_time() - start
        self.totals[name] += elapsed - nested
        if self._stack:
            self._stack[-1][2] += elapsed

    @contextmanager
    def phase(self, name: str):
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def wrap(self, owner: object, attr: str, name: str | Callable[..., str], *, mark: bool = False) -> None:
        """Time every call of ``owner.attr`` as phase `name` (or ``name(*args, **kwargs)``); `mark`: each call
        starts an iteration. Undone by `restore`."""
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            if mark:
                self.snapshot()
            with self.phase(name(*args, **kwargs) if callable(name) else name):
                return original(*args, **kwargs)

        self._undo.append((owner, attr, original))
        setattr(owner, attr, timed)

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()

    def snapshot(self) -> None:
        """Mark an iteration boundary (call it outside every phase: an open phase's time is settled when it
        closes)."""
        self._marks.append({**self.totals, "_cpu": time.process_time()})

    def iterations(self) -> list[dict[str, float]]:
        """Per-iteration exclusive seconds per phase, the iteration's CPU seconds under ``"total"`` (from each mark
        to the next; the last iteration ends at the last mark)."""
        out = []
        for a, b in zip(self._marks, self._marks[1:]):
            row = {p: b.get(p, 0.0) - a.get(p, 0.0) for p in PHASES}
            row["total"] = b["_cpu"] - a["_cpu"]
            row[BOOKKEEPING] += row["total"] - sum(row[p] for p in PHASES)  # time outside every wrapped phase
            out.append(row)
        return out


@contextmanager
def optimizer_phase(clock: PhaseClock):
    """Time every ``torch.optim.Optimizer.step`` (torch's global step hooks) as the optimizer phase."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre = register_optimizer_step_pre_hook(lambda *_: clock.enter("optimizer"))
    post = register_optimizer_step_post_hook(lambda *_: clock.leave())
    try:
        yield
    finally:
        pre.remove()
        post.remove()


def _grad_phase(*_, **__) -> str:
    import torch

    return "update forward (loss)" if torch.is_grad_enabled() else "policy scoring (no grad)"


def profile_own(arm: str, iterations: int, seed: int, run_dir: str, rung: str = "imdb",
                precision: str = "fp32", flags: tuple[str, ...] = ()) -> list[dict[str, float]]:
    """Per-iteration phase seconds of one of this project's arms on a ladder rung (`benchmarks.rungs.RUNGS`), at
    `precision` (``cory train --precision``: fp32 or bf16-mixed), with `flags` (``cory train`` flags) after the
    rung's and the arm's."""
    import torch

    import cory_env.episode
    import trainers.loop.cory
    from agents import LLMAgent, ReferenceModel
    from benchmarks.ladder_run import build_arm_trainer
    from trainers.learning.grpo import GRPOLearner
    from trainers.learning.ppo import PPOLearner

    trainer, _ = build_arm_trainer(rung, arm, seed, 10**9, run_dir,  # iterations are run one by one below
                                   ("--precision", precision, *flags))
    clock = PhaseClock()
    clock.wrap(trainers.loop.cory, "run_episodes", "rollout (generation)", mark=True)
    clock.wrap(cory_env.episode, "score_texts", "reward")
    clock.wrap(ReferenceModel, "evaluate", "reference forward")
    clock.wrap(LLMAgent, "evaluate", _grad_phase)
    for learner in (PPOLearner, GRPOLearner):
        clock.wrap(learner, "_minibatch_loss", "update forward (loss)")
    clock.wrap(torch.Tensor, "backward", "backward")
    try:
        with optimizer_phase(clock):
            for it in range(iterations):
                trainer.iteration(it)
            clock.snapshot()
    finally:
        clock.restore()
    return clock.iterations()


def profile_trl(iterations: int, seed: int, run_dir: str, precision: str = "fp32") -> list[dict[str, float]]:
    """Per-iteration phase seconds of TRL's `GRPOTrainer` on the `grpo` arm's settings (`benchmarks.trl_grpo`)."""
    import torch
    from peft.tuners.lora import LoraLayer

    from benchmarks.rungs import arm_configs
    from benchmarks.trl_grpo import make_trl_trainer

    batch = arm_configs("imdb", "grpo", seed, 0, run_dir)[0].update.batch_size  # episodes per iteration
    run = make_trl_trainer(seed, iterations * batch, run_dir=run_dir, precision=precision)
    trainer = run.trainer
    lora = next(m for m in trainer.model.modules() if isinstance(m, LoraLayer))

    def logps_phase(*args, **kwargs) -> str:
        if torch.is_grad_enabled():
            return "update forward (loss)"
        return "reference forward" if lora.disable_adapters else "policy scoring (no grad)"

    cls = type(trainer)
    clock = PhaseClock()
    clock.wrap(cls, "_generate_single_turn", "rollout (generation)")
    clock.wrap(cls, "_generate_and_score_completions", BOOKKEEPING, mark=True)
    clock.wrap(cls, "_calculate_rewards", "reward")
    clock.wrap(cls, "_get_per_token_logps_and_entropies", logps_phase)
    clock.wrap(cls, "_compute_loss", "update forward (loss)")
    clock.wrap(torch.Tensor, "backward", "backward")
    try:
        with optimizer_phase(clock):
            trainer.train()
            clock.snapshot()
    finally:
        clock.restore()
        run.tmp.cleanup()
    return clock.iterations()


def profile_comlrl(iterations: int, seed: int, run_dir: str, flags: Sequence[str] = ()) -> list[dict[str, float]]:
    """Per-iteration exclusive CPU seconds per phase of CoMLRL's MAGRPO on the arm's settings, in
    `benchmarks.iteration_profile`'s phases: rollout (``_generate_completions``), reward (``_compute_rewards``),
    reference forward and policy scoring (its k3 KL's two ``response_token_logprobs``), update forward
    (``_compute_loss_with_gradients``), backward, optimizer, bookkeeping (the rest)."""
    import comlrl.utils.reference_kl
    import torch

    from benchmarks.comlrl_magrpo import OURS, _update, make_comlrl_trainer, train_iteration
    from benchmarks.rungs import arm_configs

    batch = _update(arm_configs("imdb", OURS, seed, 0, run_dir, flags)[0]).batch_size
    run = make_comlrl_trainer(seed, iterations * batch, run_dir=run_dir, flags=flags)
    cls, refs = type(run.trainer), run.trainer.reference_models

    def logps_phase(model, *_, **__) -> str:
        return "reference forward" if any(model is r for r in refs) else "policy scoring (no grad)"

    clock = PhaseClock()
    clock.wrap(cls, "_generate_completions", "rollout (generation)")
    clock.wrap(cls, "_compute_rewards", "reward")
    clock.wrap(comlrl.utils.reference_kl, "response_token_logprobs", logps_phase)
    clock.wrap(cls, "_compute_loss_with_gradients", "update forward (loss)")
    clock.wrap(torch.Tensor, "backward", "backward")
    try:
        with optimizer_phase(clock):
            for it in range(run.iterations):
                clock.snapshot()
                train_iteration(run, it)
            clock.snapshot()
    finally:
        clock.restore()
        run.tmp.cleanup()
    return clock.iterations()


def profile_arm(arm: str, iterations: int, seed: int, precision: str = "fp32") -> dict:
    """One arm in this process: per-iteration phases, and their mean over the iterations after the first; this
    project's arms at `precision`, TRL's at the arm's own (`TRL_PRECISION`)."""
    import logging

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="cory-profile-") as run_dir:
        if arm in TRL_PRECISION:
            rows = profile_trl(iterations, seed, run_dir, TRL_PRECISION[arm])
        elif arm == "comlrl-magrpo":
            rows = profile_comlrl(iterations, seed, run_dir)
        else:
            rows = profile_own(arm, iterations, seed, run_dir, precision=precision)
    kept = rows[1:] or rows
    mean = {key: sum(r[key] for r in kept) / len(kept) for key in (*PHASES, "total")}
    return {"arm": arm, "precision": TRL_PRECISION.get(arm, precision), "iterations": len(rows),
            "measured_iterations": len(kept), "per_iteration": rows, "mean_cpu_s": mean,
            "share": {p: mean[p] / mean["total"] for p in PHASES}}


def table(results: dict[str, dict]) -> str:
    """A markdown table: CPU seconds per iteration (share) of each phase, per arm."""
    arms = list(results)
    lines = ["| phase | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for p in (*PHASES, "total"):
        cells = []
        for arm in arms:
            mean = results[arm]["mean_cpu_s"]
            cells.append(f"{mean[p]:.2f}" if p == "total" else f"{mean[p]:.2f} ({100 * mean[p] / mean['total']:.0f} %)")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def precision_table(fp32: dict, bf16: dict) -> str:
    """Markdown: CPU seconds per iteration of each arm in fp32 and in bf16, and their ratio, from two profile reports
    of one machine (`main`'s JSON: ``fp32`` run with ``--precision fp32``, `bf16` with ``--precision bf16-mixed``).
    TRL's arm is paired with itself in its own default precision: ``trl-grpo`` (fp32) beside ``trl-grpo-default``.

    Raises:
        ValueError: the two reports come from machines that differ (``machine``), or `bf16` was not a bf16 run.
    """
    if fp32.get("machine") != bf16.get("machine"):
        raise ValueError(f"the profiles come from different machines ({fp32.get('machine')} vs {bf16.get('machine')}); "
                         "compare precisions on one machine")
    if bf16.get("precision") != "bf16-mixed":
        raise ValueError(f"the second profile ran at --precision {bf16.get('precision')}, not bf16-mixed")
    pairs = {arm: (fp32["arms"][arm], bf16["arms"][arm]) for arm in fp32["arms"] if arm in bf16["arms"]}
    if "trl-grpo" in fp32["arms"] and "trl-grpo-default" in fp32["arms"]:
        pairs["trl-grpo (TRL's default: bf16)"] = (fp32["arms"]["trl-grpo"], fp32["arms"]["trl-grpo-default"])
    lines = ["| arm | fp32 | bf16 | bf16 ÷ fp32 |", "|---|---|---|---|"]
    for arm, (a, b) in pairs.items():
        x, y = a["mean_cpu_s"]["total"], b["mean_cpu_s"]["total"]
        lines.append(f"| {arm} | {x:.2f} | {y:.2f} | {y / x:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=list(ARMS[:4]), choices=ARMS,
                        help="trl-grpo-default (TRL's bf16 default; emulated, ≈ 19x slower, on a CPU without "
                             "AVX512-BF16) is not in the default set")
    parser.add_argument("--iterations", type=int, default=4, help="per arm; the first is a warm-up (>= 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed"),
                        help="this project's arms (`cory train --precision`); TRL's arms keep their own")
    add_out_option(parser, "iteration_profile.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: profile this arm in this process, print JSON
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error(f"--iterations must be >= 2 (the first is a warm-up), got {args.iterations}")
    if args.one:
        print(json.dumps(profile_arm(args.one, args.iterations, args.seed, args.precision)))
        return {}
    out_path = checked_out(parser, args)
    from agents.precision import native_bf16
    from benchmarks.ladder_run import code_version
    from benchmarks.throughput import device_name

    results = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for arm in args.arms:  # one process per arm: no arm inherits another's warm caches or allocator state
        out = subprocess.run([sys.executable, __file__, "--one", arm, "--iterations", str(args.iterations),
                              "--seed", str(args.seed), "--precision", args.precision],
                             capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            sys.exit(f"profiling {arm} failed:\n{out.stderr[-3000:]}")
        results[arm] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"[profile] {arm}: {results[arm]['mean_cpu_s']['total']:.2f} CPU s per iteration", flush=True)
    report = {"command": recorded_command("benchmarks/iteration_profile.py", argv or None),
              "commit": code_version(), "iterations": args.iterations, "seed": args.seed, "precision": args.precision,
              "machine": {"cpu": device_name("cpu"), "native_bf16": native_bf16("cpu")}, "arms": results}
    if "cory" in results and "ppo" in results:
        report["cory_over_ppo"] = results["cory"]["mean_cpu_s"]["total"] / results["ppo"]["mean_cpu_s"]["total"]
    for ours, theirs, key in (("grpo", "trl-grpo", "grpo_over_trl"), ("grpo", "trl-grpo-default", "grpo_over_trl_default"),
                              ("magrpo-wo-kt", "comlrl-magrpo", "magrpo_over_comlrl")):
        if ours in results and theirs in results:
            report[key] = results[ours]["mean_cpu_s"]["total"] / results[theirs]["mean_cpu_s"]["total"]
    write_json(out_path, report)
    print(table(results))
    return report


if __name__ == "__main__":
    main()
