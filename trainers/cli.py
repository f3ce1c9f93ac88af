"""The `cory` command line: `cory train`, `cory eval CHECKPOINT`, `cory plot RUN_DIR...`.

Options of `train` come from the config dataclasses (`EnvConfig`, `PPOConfig`, `CORYConfig`) through
`transformers.HfArgumentParser`, so every option has its field's help. Values resolve as
command-line flags > `--config FILE.yaml` > `--preset NAME` > defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import typing
import warnings
from pathlib import Path
from typing import Any, Sequence

import yaml

from cory_env import EnvConfig
from trainers.config import CORYConfig, PPOConfig
from trainers.presets import PRESETS, preset

logger = logging.getLogger("cory")
CONFIG_CLASSES = (EnvConfig, PPOConfig, CORYConfig)


def _field_types() -> dict[str, Any]:
    out = {}
    for cls in CONFIG_CLASSES:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out[f.name] = hints[f.name]
    return out


def _type_ok(value: Any, hint: Any) -> bool:
    args = typing.get_args(hint)
    if args and type(None) in args:
        if value is None:
            return True
        hint = next(a for a in args if a is not type(None))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def load_yaml_config(path: str | Path) -> dict[str, Any]:
    """A flat `field: value` YAML file, checked against the config fields.

    Raises:
        FileNotFoundError: missing file.
        ValueError: not a mapping, unknown keys (lists valid ones), or a value of the wrong type.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} not found")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of option: value, got {type(data).__name__}")
    types = _field_types()
    data = {key: _yaml_float(value) if float in (types.get(key), *typing.get_args(types.get(key))) else value
            for key, value in data.items()}
    check_overrides(data, source=str(path))
    return data


def _yaml_float(value: Any) -> Any:
    """YAML 1.1 reads `1e-3` (no dot) as a string; accept it as the float it means."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def check_overrides(data: dict[str, Any], *, source: str) -> None:
    types = _field_types()
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ValueError(f"{source}: unknown option(s) {unknown}; valid options: {', '.join(sorted(types))}")
    for key, value in data.items():
        if not _type_ok(value, types[key]):
            raise ValueError(f"{source}: option {key} must be {types[key]}, got {value!r} ({type(value).__name__})")


def parse_train_args(argv: Sequence[str]) -> tuple[EnvConfig, PPOConfig, CORYConfig]:
    """Resolve `cory train` arguments into the three config dataclasses (flags > YAML > preset > defaults)."""
    from transformers import HfArgumentParser

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    defaults: dict[str, Any] = {}
    if known.preset:
        defaults.update(preset(known.preset))
    if known.config:
        defaults.update(load_yaml_config(known.config))

    parser = HfArgumentParser(CONFIG_CLASSES, prog="cory train",
                              description="Train with CORY (or the PPO baseline) on a CORY env.")
    parser.add_argument("--preset", default=None, help=f"Preset: {', '.join(sorted(PRESETS))}.")
    parser.add_argument("--config", default=None, help="YAML file of option: value (e.g. a run's config.yaml).")
    parser.add_argument("--num_processes", default=1, type=int,
                        help="Data-parallel processes on this machine (accelerate launch; GPUs, or CPU with gloo). "
                             "batch_size counts one process's episodes.")
    parser.set_defaults(**defaults)
    *configs, extra, remaining = parser.parse_args_into_dataclasses(args=list(argv), return_remaining_strings=True)
    if extra.num_processes != 1:  # cmd_train takes it off before parsing; anywhere else it would be ignored
        raise ValueError(f"--num_processes {extra.num_processes} is handled by `cory train` (it launches the "
                         "processes); call trainers.cli.main(['train', ...]) or launch with accelerate / torchrun")
    if remaining:
        valid = sorted(a.option_strings[0] for a in parser._actions if a.option_strings)
        raise ValueError(f"unknown option(s) {remaining}; valid options: {' '.join(valid)}")
    env_cfg, ppo_cfg, cory_cfg = configs
    return env_cfg, ppo_cfg, cory_cfg


def free_port() -> int:
    """A TCP port that is free on this machine now (for the launcher's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_command(num_processes: int, program: Sequence[str], *, port: int | None = None) -> list[str]:
    """The ``accelerate launch`` command that runs `program` on `num_processes` processes of this machine.

    Args:
        num_processes: N >= 2.
        program: what each process runs, e.g. ``["-m", "trainers.cli", "train", "--preset", "tiny"]`` or
            ``["script.py", ...]``.
        port: the rendezvous port; default a free one.

    ``--multi_gpu`` selects accelerate's torchrun launcher, which also serves CPU-only machines (each process then
    trains on the CPU with the gloo backend; `trainers.distributed`).
    """
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
            "--num_processes", str(num_processes), "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port or free_port()), *program]


def run_launcher(cmd: list[str]) -> int:
    """Run the launcher in its own session to its end and return its exit status.

    SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) sent to this process are forwarded to the launcher,
    which asks every training process to stop (they finish the iteration and write a checkpoint within the
    launcher's shutdown timeout); this process keeps waiting, so no training process is orphaned. After a forwarded
    signal the exit status is 130, as for a one-process run stopped by Ctrl-C.
    """
    proc = subprocess.Popen(cmd, start_new_session=True)  # the terminal's Ctrl-C reaches us only: no double signal
    forwarded: list[int] = []

    def forward(signum, frame):  # noqa: ARG001 - signal handler signature
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 130 if forwarded and status != 0 else status


def split_num_processes(argv: Sequence[str]) -> tuple[int, list[str]]:
    """(N from ``--num_processes N``, 1 if absent; the other arguments).

    Raises:
        ValueError: a value that is not an integer >= 1.
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--num_processes", default="1")
    known, rest = pre.parse_known_args(list(argv))
    try:
        n = int(known.num_processes)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--num_processes must be an integer >= 1, got {known.num_processes!r}")
    return n, rest


def cmd_train(argv: Sequence[str]) -> int:
    from trainers.cory import CORYTrainer, preflight
    from trainers.distributed import launched_world_size

    num_processes, argv = split_num_processes(argv)
    launched = launched_world_size()
    if num_processes > 1 and launched == 1:  # start the processes, each runs this command without the flag
        _, ppo_cfg, cory_cfg = parse_train_args(argv)  # a mistake fails here, once, not in every process
        preflight(cory_cfg, ppo_cfg, num_processes)
        return run_launcher(launch_command(num_processes, ["-m", "trainers.cli", "train", *argv]))
    if num_processes > 1 and launched != num_processes:
        raise ValueError(f"--num_processes {num_processes} inside a launch of {launched} processes; drop the flag "
                         "when starting with accelerate launch / torchrun")
    if int(os.environ.get("RANK", "0")) > 0:  # the main process reports progress and warnings; the others errors
        logging.getLogger().setLevel(logging.ERROR)
    env_cfg, ppo_cfg, cory_cfg = parse_train_args(argv)
    trainer = CORYTrainer(cory_cfg, ppo_cfg, env_cfg)
    before = heldout_eval(trainer, "before") if cory_cfg.eval_episodes and trainer.dist.is_main else None
    history = trainer.train()
    if before is not None and not trainer.stopped_early:
        report_before_after(trainer, before, heldout_eval(trainer, "after"))
    if history and trainer.dist.is_main:
        last = history[-1]
        summary = {k: round(v, 4) for k, v in last.items() if k.split("/")[0] in ("pioneer", "observer", "cory")
                   and k.split("/")[-1] in ("task_reward", "kl", "combined_reward", "collective_reward")}
        pioneer = "llm1" if last.get("cory/pioneer_is_llm1", 1.0) else "llm2"
        print(json.dumps({"output_dir": str(trainer.output_dir), "last_iteration": last["iteration"],
                          "pioneer_model_last_iteration": pioneer,
                          "pioneer_model_now": trainer.exchange.seats["pioneer"].name, **summary}, indent=2))
    return 130 if trainer.stopped_early or trainer._stop_requested else 0


#: Query/sampling seed of `cory train --eval_episodes` (training derives its streams from --seed; see derive_seed).
EVAL_SEED = 2_000_003


def heldout_eval(trainer, when: str) -> dict:
    """The pioneer's held-out evaluation (`CORYTrainer.evaluate`) with the same queries and sampling seeds each
    time, so that "before" and "after" differ only by training."""
    logger.info("evaluating the pioneer on %d held-out queries (%s training)", trainer.config.eval_episodes, when)
    out = trainer.evaluate(episodes=trainer.config.eval_episodes, seed=EVAL_SEED)
    return {k: v for k, v in out.items() if k != "samples"} | {"iteration": trainer.start_iteration if when ==
                                                               "before" else trainer.config.num_iterations}


def report_before_after(trainer, before: dict, after: dict) -> None:
    """Print and write (`eval.json`) the pioneer's held-out reward before and after training, with the noise of
    the difference (standard error of the per-query reward difference on the same queries and seeds)."""
    diffs = [a - b for a, b in zip(after["rewards"], before["rewards"])]
    mean = sum(diffs) / len(diffs)
    sem = (sum((d - mean) ** 2 for d in diffs) / max(1, len(diffs) - 1) / len(diffs)) ** 0.5
    result = {"before": before, "after": after, "gain": mean, "gain_sem": sem}
    (trainer.output_dir / "eval.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"pioneer held-out task reward ({before['num_queries']} {before['query_split']}-split queries, same "
          f"queries and sampling seeds): before {before['reward']:.3f} -> after {after['reward']:.3f} "
          f"(gain {mean:+.3f} ± {sem:.3f} s.e.; KL to the reference {after['kl']:.2f} nats, "
          f"distinct-2 {before['distinct_2']:.2f} -> {after['distinct_2']:.2f})", flush=True)


def cmd_eval(argv: Sequence[str]) -> int:
    from trainers.evaluate_cli import run_eval

    return run_eval(argv)


def cmd_plot(argv: Sequence[str]) -> int:
    from trainers.plotting import plot_runs

    parser = argparse.ArgumentParser(prog="cory plot", description="PNG curves and a Pareto scatter of runs.")
    parser.add_argument("run_dirs", nargs="+", help="Run directories (each with metrics.jsonl).")
    parser.add_argument("--out", default=None, help="Output folder (default: the first run directory).")
    args = parser.parse_args(argv)
    for path in plot_runs(args.run_dirs, args.out or args.run_dirs[0]):
        print(path)
    return 0


def cmd_bench(argv: Sequence[str]) -> int:
    from trainers.bench import run_bench

    return run_bench(argv)


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "bench": cmd_bench}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # raised inside transformers when peft checks a LoRA model; nothing a user can act on
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: cory {train,eval,plot,bench} [options]\n\n"
              "  train   train with CORY (default) or the PPO baseline (--algo ppo); cory train --help\n"
              "  eval    the pioneer alone: a checkpoint on IMDB, or pass@k on GSM8K (--task gsm8k); cory eval --help\n"
              "  plot    plot run directories; cory plot --help\n"
              "  bench   arms x seeds with identical settings, one table; cory bench --help\n")
        return 0 if argv else 2
    command = argv[0]
    if command not in COMMANDS:
        print(f"cory: unknown command {command!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[command](argv[1:])
    except (ValueError, FileNotFoundError, FileExistsError, OSError) as exc:
        print(f"cory {command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before training started, or a second Ctrl-C: no checkpoint was written then
        print(f"cory {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
