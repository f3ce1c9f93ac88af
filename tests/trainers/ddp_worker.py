"""Worker for tests/trainers/test_distributed.py: one `cory train` run that also checks the replicas.

Run it alone (one process) or under ``accelerate launch`` / ``torchrun``. After every learner update it measures the
largest parameter difference between this process's replica and the main process's (all trainable tensors of the
updated model), and the main process writes ``{"world_size", "history", "max_replica_diff", "process_group_left"}``
to ``--report`` (the last: whether a process group still exists after the trainer was closed). With ``--dump_params
FILE`` the main process also saves, after every update, the updated model's full trainable parameters (FSDP2 shards
gathered: `trainers.loop.checkpoint.trainable_state`) as a list of flat float32 tensors (torch.save).
``local_param_fraction``: the share of the trainable parameters' elements this process holds (1.0 for replicas,
about 1/W for FSDP2 shards).
Dropout is off by default (``--disable_dropout``), so a 2-process run and a 1-process run compute the same numbers.

    python tests/trainers/ddp_worker.py --report out.json -- <cory train options>
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from trainers.config.parser import parse_train_args
from trainers.loop.checkpoint import trainable_state
from trainers.distributed import is_sharded
from trainers.loop.cory import CORYTrainer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--nan_rank", type=int, default=None,
                        help="on this rank only, make every PPO loss NaN from iteration 1 on")
    parser.add_argument("--dump_params", default=None, help="torch.save the full parameters after every update here")
    args, train_argv = parser.parse_known_args(argv)
    if train_argv and train_argv[0] == "--":
        train_argv = train_argv[1:]
    trainer = CORYTrainer(parse_train_args(train_argv))
    diffs: list[float] = []
    dumps: list[torch.Tensor] = []
    for bundle in trainer.exchange.bundles.values():
        step = bundle.learner.step

        def checked_step(rollout, *, generator=None, _step=step, _agent=bundle.agent, **inputs):  # critic= (mappo)
            stats = _step(rollout, generator=generator, **inputs)
            diffs.append(trainer.dist.max_abs_param_difference(_agent.trainable_parameters()))
            if args.dump_params:
                state = trainable_state(_agent)  # a collective under FSDP2
                dumps.append(torch.cat([state[k].reshape(-1).float() for k in sorted(state)]))
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
    params = [p for b in trainer.exchange.bundles.values() for p in b.agent.trainable_parameters()]
    local = sum((p.to_local() if is_sharded(p) else p).numel() for p in params)
    with trainer:
        history = trainer.train()
    if trainer.dist.is_main:
        if args.dump_params:
            torch.save(dumps, args.dump_params)
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump({"world_size": trainer.dist.world_size, "history": history, "max_replica_diff": diffs,
                       "process_group_left": torch.distributed.is_initialized(),
                       "local_param_fraction": local / sum(p.numel() for p in params)}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
