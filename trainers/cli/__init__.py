"""The `cory` command line (console script ``cory = trainers.cli:main``; also ``python -m trainers.cli``).

| command | module | what |
|---|---|---|
| ``cory train`` | `trainers.cli.train` | train with CORY or a single-agent baseline (options: the config dataclasses) |
| (``cory train --num_processes N``) | `trainers.cli.launch` | start N data-parallel processes (accelerate launch) |
| ``cory eval`` | `trainers.cli.eval` | the pioneer alone: a checkpoint on IMDB, or pass@k on GSM8K |
| ``cory export`` | `trainers.cli.export` | one trained model of a checkpoint as a folder ``from_pretrained`` loads |
| ``cory crossplay`` | `trainers.cli.crossplay` | every model of some runs with every other: self-play, cross-play |
| ``cory plot`` | `trainers.cli.plot` | PNG curves and a Pareto scatter of run directories |
| ``cory bench`` | `trainers.cli.bench` | arms x seeds with identical settings, one table |

Presets (`--preset NAME`) live in `trainers.config.presets`. A command's module is imported only when the command
runs, so ``cory eval`` never imports matplotlib and ``cory train`` never imports the plots.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from typing import Sequence

#: command -> "module:function" taking the command's arguments and returning the exit status.
COMMANDS = {"train": "trainers.cli.train:run_train", "eval": "trainers.cli.eval:run_eval",
            "export": "trainers.cli.export:run_export", "crossplay": "trainers.cli.crossplay:run_crossplay",
            "plot": "trainers.cli.plot:run_plot", "bench": "trainers.cli.bench:run_bench"}

USAGE = ("usage: cory {train,eval,export,crossplay,plot,bench} [options]\n\n"
         "  train   train with CORY (default), the PPO baseline (--algo ppo) or N seats (--seating chain:N); "
         "cory train --help\n"
         "  eval    the pioneer alone: a checkpoint on IMDB, or pass@k on GSM8K (--task gsm8k); cory eval --help\n"
         "  export  one trained model of a checkpoint as a from_pretrained folder; cory export --help\n"
         "  crossplay  every model of some runs with every other (self-play, cross-play); cory crossplay --help\n"
         "  plot    plot run directories; cory plot --help\n"
         "  bench   arms x seeds with identical settings, one table; cory bench --help\n")


def quiet_library_progress_bars() -> None:
    """Off a terminal, the libraries' own progress bars (transformers' GGUF conversion and weight loading, the hub's
    downloads, `datasets`' table builds) would land in a log file as kilobyte-long lines of carriage returns: switch
    them off (the run's own progress lines stay, `trainers.loop.progress`)."""
    import datasets
    import huggingface_hub.utils
    import transformers
    transformers.utils.logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    datasets.disable_progress_bars()


def report_error(line: str) -> None:
    """Print a user error's one line; in a training process started by ``cory train --num_processes N`` write it for
    the launcher instead, which prints each distinct line once (`trainers.cli.launch.process_errors`)."""
    import os
    from pathlib import Path
    from trainers.cli.launch import ERROR_DIR_ENV
    folder = os.environ.get(ERROR_DIR_ENV)
    rank = os.environ.get("RANK")
    if folder and rank is not None and Path(folder).is_dir():
        (Path(folder) / f"rank-{int(rank)}.txt").write_text(line + "\n", encoding="utf-8")
    else:
        print(line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cory COMMAND ...``; returns the exit status (0 ok, 2 a user error reported in one line, 1 a non-finite
    update (`trainers.learning.update.NonFiniteLossError`, one line naming the last good checkpoint), 130 stopped)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # raised inside transformers when peft checks a LoRA model; nothing a user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    # FSDP2 (--sharding fsdp) warns once per module class that a transformers output is a view; cory runs no in-place
    # op on model outputs (the sharded = replicated tests would see a lost gradient)
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor", category=UserWarning)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not sys.stderr.isatty() and not {"-h", "--help", "--help_all"} & set(argv):
        quiet_library_progress_bars()
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command = argv[0]
    if command not in COMMANDS:
        print(f"cory: unknown command {command!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[command].split(":")
    try:
        return getattr(importlib.import_module(module_name), func_name)(argv[1:])
    except (ValueError, FileNotFoundError, FileExistsError, OSError) as exc:
        report_error(f"cory {command}: error: {exc}")
        return 2
    except FloatingPointError as exc:  # NonFiniteLossError: the message names the model and the last good checkpoint
        report_error(f"cory {command}: error: {exc}")
        return 1
    except KeyboardInterrupt:  # before training started, or a second Ctrl-C: no checkpoint was written then
        print(f"cory {command}: interrupted", file=sys.stderr)
        return 130
