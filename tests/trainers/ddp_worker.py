"""Worker for tests/trainers/test_distributed.py: one `cory train` run that also checks the replicas.

Run it alone (one process) or under ``accelerate launch`` / ``torchrun``. After every learner update it measures the
largest parameter difference between this process's replica and the main process's (all trainable tensors of the
updated model), and the main process writes ``{"world_size", "history", "max_replica_diff", "process_group_left"}``
to ``--report`` (the last: whether a process group still exists after the trainer was closed).
Dropout is off by default (``--disable_dropout``), so a 2-process run and a 1-process run compute the same numbers.

    python tests/trainers/ddp_worker.py --report out.json -- <cory train options>
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from trainers.cli.train import parse_train_args
from trainers.loop.cory import CORYTrainer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--nan_rank", type=int, default=None,
                        help="on this rank only, make every PPO loss NaN from iteration 1 on")
    args, train_argv = parser.parse_known_args(argv)
    if train_argv and train_argv[0] == "--":
        train_argv = train_argv[1:]
    trainer = CORYTrainer(*parse_train_args(train_argv))
    diffs: list[float] = []
    for bundle in trainer.exchange.bundles.values():
        step = bundle.learner.step

        def checked_step(rollout, *, generator=None, _step=step, _agent=bundle.agent):
            stats = _step(rollout, generator=generator)
            diffs.append(trainer.dist.max_abs_param_difference(_agent.trainable_parameters()))
            return stats

        bundle.learner.step = checked_step
    if args.nan_rank is not None and trainer.dist.rank == args.nan_rank:
        from trainers.learning import ppo_math

        real, original_iteration = ppo_math.ppo_loss, trainer.iteration

        def iteration(it):
            if it >= 1:
                ppo_math.ppo_loss = lambda *a, **k: (lambda out: (out[0] * float("nan"), out[1]))(real(*a, **k))
            return original_iteration(it)

        trainer.iteration = iteration
    with trainer:
        history = trainer.train()
    if trainer.dist.is_main:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump({"world_size": trainer.dist.world_size, "history": history, "max_replica_diff": diffs,
                       "process_group_left": torch.distributed.is_initialized()}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
