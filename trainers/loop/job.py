"""A ``cory train`` job around the trainer: the held-out evaluations before and after training, ``eval.json``, the
last batch's summary, and what a stopped run kept (with the command that continues it). The command prints what
these return (`trainers.cli.train`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import signal
import time

from trainers.evaluation.episodes import gain_summary
from trainers.loop.run_dir import EVAL_FILE
from trainers.loop.outputs import write_output

__all__ = ["heldout_eval", "stop_report", "stop_signals_interrupt", "training_summary", "write_eval"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def stop_signals_interrupt():
    """While the block runs, SIGTERM raises `KeyboardInterrupt` as SIGINT does (Python's default for SIGTERM ends the
    process at once, with exit 143 and no word of what was kept); `CORYTrainer.train` installs its own handler
    (finish the iteration, checkpoint) and restores this one after."""
    def interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
        raise KeyboardInterrupt(signal.Signals(signum).name)

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_report(trainer, stage: str, history: list[dict]) -> str:
    """What a run that stopped during `stage` kept, and the command that continues it."""
    from trainers.loop.checkpoint import latest_checkpoint
    out = trainer.output_dir
    where = out.resolve()  # the command works from any folder, its paths quoted for a shell
    resume = (f"cory train --config {shlex.quote(str(where / 'config.yaml'))} --output_dir "
              f"{shlex.quote(str(where))} --resume")
    if trainer.replaced_restored:
        return (f"cory train: stopped during {stage}, before the first checkpoint; nothing of this run was kept and "
                f"the run it was replacing is back in {out}, unchanged; rerun the command to start again")
    checkpoint = latest_checkpoint(out)
    if checkpoint is None:
        return (f"cory train: stopped during {stage}, before the first checkpoint; {out} holds the run's config only "
                f"(no iteration was kept); start it again (from the beginning) with: {resume}")
    done = int(checkpoint.name.removeprefix("iter-")) + 1
    total = trainer.config.num_iterations
    if done < total:
        return (f"cory train: stopped during {stage}; kept {checkpoint} ({done} of {total} iterations); continue "
                f"with: {resume}")
    return (f"cory train: stopped during {stage}; training is complete ({checkpoint}, {done} iterations) but the "
            f"held-out evaluation after training was not finished, so eval.json was not written; evaluate the "
            f"trained model with: cory eval {shlex.quote(str(where))}")


def heldout_eval(trainer, when: str) -> dict:
    """The pioneer's held-out evaluation (`CORYTrainer.evaluate`) with the same queries and sampling seeds each
    time, so that "before" and "after" differ only by training."""
    model = trainer.evaluated_model
    held_out = trainer.evaluator.env(trainer.config.eval_episodes, False, trainer.cast.tokenizers[model]).config
    what = "held-out" if held_out.query_split == "test" else "training (not held-out)"
    logger.info("evaluating %s in the pioneer seat on %d %s queries (%s training)", model,
                trainer.config.eval_episodes, what, when)
    start = time.monotonic()
    out = trainer.heldout_evaluation()
    logger.info("%s reward %s training: %.3f, KL to the reference %.2f nats (%.0f s)",
                "held-out" if held_out.query_split == "test" else "evaluation", when, out["reward"], out["kl"],
                time.monotonic() - start)
    return {k: v for k, v in out.items() if k != "samples"} | {
        "iteration": trainer.start_iteration if when == "before" else trainer.config.num_iterations, "model": model}


def training_summary(trainer, last: dict) -> dict:
    """The run's last training batch, each number labelled with the model it belongs to (the pioneer seat of the
    last iteration may hold another model than the pioneer after the last role exchange, whose held-out evaluation
    follows)."""
    seats = {seat: next((m for m in trainer.agents if last.get(f"cory/{m}_seat") == float(k)), "a frozen snapshot")
             for k, seat in enumerate(trainer.seating.names)}  # a snapshot partner logs only its task reward
    keys = ("task_reward", "kl", "combined_reward")
    batch = {f"{seat} ({model})": {key: round(last[f"{seat}/{key}"], 4) for key in keys if f"{seat}/{key}" in last}
             for seat, model in seats.items()}
    return {"output_dir": str(trainer.output_dir), "last_iteration": last["iteration"],
            "last_training_batch": batch, "collective_reward": round(last["cory/collective_reward"], 4),
            "pioneer_now": trainer.exchange.seats[trainer.seating.first].name}


def write_eval(trainer, before: dict, after: dict) -> dict:
    """Write ``eval.json`` (atomically, `trainers.loop.outputs.write_output`): the pioneer's held-out reward before and
    after training with `trainers.evaluation.episodes.gain_summary`, the model evaluated, and the query data it drew
    from (the run's ``data_path`` and the fingerprint of its training queries); returns what it wrote."""
    gain = gain_summary(before, after)
    data = {"data_path": trainer.env.config.data_path, "fingerprint": trainer.inputs.get("data")}
    result = {"before": before, "after": after, "model": after["model"], "data": data, **gain}
    write_output(trainer.output_dir / EVAL_FILE, json.dumps(result, indent=2))
    return result
