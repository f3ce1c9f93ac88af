"""`cory train`: parse the options (`trainers.config.parser`: flags > ``--config FILE.yaml`` > ``--preset NAME`` >
defaults), then train one run with its held-out evaluations before and after (`trainers.loop.job`), or launch
several processes (`trainers.cli.launch`); print what the run kept and found.

``cory train --help`` shows what a first run changes and the chosen learner's and task's own options (``cory train
--task gsm8k --learner grpo --help``); ``cory train --help_all`` every option.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Sequence

from trainers.config.parser import first_pass, parse_train_args

__all__ = ["run_train"]

logger = logging.getLogger("cory")


def run_train(argv: Sequence[str]) -> int:
    """``cory train ...``; returns the exit status (130 when a stop signal ended training early)."""
    from trainers.cli.launch import launch_command, preflight, run_launcher
    from trainers.distributed import launched_world_size
    first = first_pass(argv)
    num_processes, argv = first.num_processes, first.rest
    launched = launched_world_size()
    if num_processes > 1 and launched == 1:  # start the processes, each runs this command without the flag
        configs = parse_train_args(argv, first)  # a mistake fails here, once, not in every process
        preflight(configs, num_processes)
        return run_launcher(launch_command(num_processes, ["-m", "trainers.cli", "train", *argv]))
    if num_processes > 1 and launched != num_processes:
        raise ValueError(f"--num_processes {num_processes} inside a launch of {launched} processes; drop the flag "
                         "when starting with accelerate launch / torchrun")
    if int(os.environ.get("RANK", "0")) > 0:  # the main process reports progress and warnings; the others errors
        logging.getLogger().setLevel(logging.ERROR)
    configs = parse_train_args(argv, first)  # --help prints and exits here, before the training code is imported
    from trainers.evaluation.report import before_after_line
    from trainers.loop.cory import CORYTrainer
    from trainers.loop.job import heldout_eval, stop_report, stop_signals_interrupt, training_summary, write_eval
    stage, history, before, after = "starting", [], None, None
    with stop_signals_interrupt():  # outside training's own handler a stop signal interrupts, then is reported
        try:
            with CORYTrainer(configs) as trainer:  # leaving it destroys the process group (a clean exit)
                # the main process evaluates; with FSDP2 shards every process takes part in the same forwards
                evaluates = bool(configs.run.eval_episodes) and (trainer.dist.is_main or configs.run.sharded)
                stage = "the held-out evaluation before training"
                before = heldout_eval(trainer, "before") if evaluates else None
                stage = "training"
                history = trainer.train()
                stage = "the held-out evaluation after training"
                after = heldout_eval(trainer, "after") if before is not None and not trainer.stopped_early else None
                stage = "done"
        except KeyboardInterrupt:
            if stage == "starting":
                raise  # nothing was written yet: `trainers.cli.main` says "interrupted"
            trainer.restore_replaced()
            if trainer.dist.is_main:
                print(stop_report(trainer, stage, history), file=sys.stderr, flush=True)
            return 130
        except BaseException:
            if stage != "starting" and trainer.dist.is_main:
                trainer.restore_replaced()
                logger.error("%s", stop_report(trainer, stage, history))
            raise
    if history and trainer.dist.is_main:
        print(json.dumps(training_summary(trainer, history[-1]), indent=2))
    if after is not None and trainer.dist.is_main:  # the result a reader looks for comes last
        result = write_eval(trainer, before, after)
        print(before_after_line(result["model"], before, after, result), flush=True)
    if trainer.stopped_early and trainer.dist.is_main:
        print(stop_report(trainer, "training", history), file=sys.stderr, flush=True)
    return 130 if trainer.stopped_early or trainer._stop_requested else 0
