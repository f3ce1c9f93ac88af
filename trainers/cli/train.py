"""`cory train`: options from the config dataclasses, resolved, then one training run (or a launch of several
processes, `trainers.cli.launch`).

Options come from the five config dataclasses (`trainers.config.CONFIG_CLASSES`: `EnvConfig`, `PPOConfig`,
`ModelConfig`, `SamplingConfig`, `CORYConfig`) through `transformers.HfArgumentParser`, so every option has its
field's help. Values resolve as command-line flags > `--config FILE.yaml` > `--preset NAME` > defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import typing
from pathlib import Path
from typing import Any, Sequence

import yaml

from trainers.cli.launch import launch_command, preflight, run_launcher, split_num_processes
from trainers.cli.presets import PRESETS, preset
from trainers.config import (CORYConfig, GRPOConfig, ModelConfig, PPOConfig, RunConfigs, flat_field_types,
                             migrate_flat)
from trainers.learning.learners import LEARNERS
from agents.sampling import SamplingConfig
from cory_env import EnvConfig

#: `cory train --help` order of the config groups: the run, the model, the task, the learners, sampling.
HELP_ORDER = (CORYConfig, ModelConfig, EnvConfig, PPOConfig, GRPOConfig, SamplingConfig)
#: The config classes whose flags `cory train --help` regroups by the learners that read them.
LEARNER_CONFIGS = (PPOConfig, GRPOConfig)


def learner_readers(config_class: type, name: str) -> tuple[str, ...]:
    """The registered learners that read field `name` of `config_class` (`PPOConfig`: all but those whose
    `LearnerSpec.ignores` names it; another class: those whose `LearnerSpec.config_class` it is)."""
    if config_class is PPOConfig:
        return tuple(n for n, spec in LEARNERS.items() if name not in spec.ignores)
    return tuple(n for n, spec in LEARNERS.items() if spec.config_class is config_class)


def group_flags_by_learner(parser: argparse.ArgumentParser) -> None:
    """Regroup the learners' flags in `parser`'s help: one group per set of learners that read them ("options read
    by every learner", "options read by ppo, mappo", ...), from the registered `LearnerSpec`s."""
    by_dest = {}
    for group in list(parser._action_groups):
        if group.title in {c._argument_group_name for c in LEARNER_CONFIGS}:
            by_dest.update({a.dest: a for a in group._group_actions})
            parser._action_groups.remove(group)
    groups: dict[tuple[str, ...], list] = {}
    for config_class in LEARNER_CONFIGS:
        for f in dataclasses.fields(config_class):
            if f.name in by_dest:
                groups.setdefault(learner_readers(config_class, f.name), []).append(by_dest[f.name])
    everyone = tuple(LEARNERS)
    for readers, actions in sorted(groups.items(), key=lambda kv: (kv[0] != everyone, -len(kv[0]))):
        who = "every learner" if readers == everyone else ", ".join(readers) or "no registered learner"
        group = parser.add_argument_group(f"learner options read by {who} (--learner)")
        group._group_actions.extend(actions)
    sampling = [g for g in parser._action_groups if g.title == SamplingConfig._argument_group_name]
    for group in sampling:  # sampling last, as in HELP_ORDER
        parser._action_groups.remove(group)
        parser._action_groups.append(group)

logger = logging.getLogger("cory")


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
    data = migrate_flat(data)  # a run's config.yaml written before a field moved
    types = flat_field_types()
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
    """Raise `ValueError` (naming `source`) for a key that is no config field or a value of the wrong type."""
    types = flat_field_types()
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ValueError(f"{source}: unknown option(s) {unknown}; valid options: {', '.join(sorted(types))}")
    for key, value in data.items():
        if not _type_ok(value, types[key]):
            raise ValueError(f"{source}: option {key} must be {types[key]}, got {value!r} ({type(value).__name__})")


def check_one_name_per_option(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Refuse an option given under two of its names (``--seating cory --algo ppo``): argparse would keep the last
    one without a word.

    Raises:
        ValueError: naming the option's names as given and asking for one.
    """
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    for action in parser._actions:
        used = [name for name in action.option_strings if name in given]
        if len(used) > 1:
            raise ValueError(f"{' and '.join(used)} are two names of one option ({action.dest}); give it once")


def parse_train_args(argv: Sequence[str]) -> RunConfigs:
    """Resolve `cory train` arguments into the run's configs (flags > YAML > preset > defaults)."""
    from transformers import HfArgumentParser

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    defaults: dict[str, Any] = {}
    if known.preset:
        defaults.update(preset(known.preset))
    if known.config:
        defaults.update(load_yaml_config(known.config))

    # help: the common options first, then one group per config (its `_argument_group_name`); no abbreviations:
    # argparse would take --num_iteration for --num_iterations
    parser = HfArgumentParser(HELP_ORDER, prog="cory train", allow_abbrev=False,
                              description="Train with CORY (or the PPO baseline, --algo ppo, or a chain of N seats, "
                                          "--seating chain:N) on a CORY env.")
    parser.add_argument("--preset", default=None, help=f"Preset: {', '.join(sorted(PRESETS))}.")
    parser.add_argument("--config", default=None, help="YAML file of option: value (e.g. a run's config.yaml).")
    parser.add_argument("--num_processes", default=1, type=int,
                        help="Data-parallel processes on this machine (accelerate launch; GPUs, or CPU with gloo). "
                             "batch_size counts one process's episodes.")
    parser.set_defaults(**defaults)
    group_flags_by_learner(parser)
    check_one_name_per_option(parser, argv)
    *configs, extra, remaining = parser.parse_args_into_dataclasses(args=list(argv), return_remaining_strings=True)
    if extra.num_processes != 1:  # run_train takes it off before parsing; anywhere else it would be ignored
        raise ValueError(f"--num_processes {extra.num_processes} is handled by `cory train` (it launches the "
                         "processes); call trainers.cli.main(['train', ...]) or launch with accelerate / torchrun")
    if remaining:
        valid = sorted(a.option_strings[0] for a in parser._actions if a.option_strings)
        flags = [r.split("=")[0] for r in remaining if r.startswith("--")]
        hints = {f: difflib.get_close_matches(f, valid, n=1) for f in flags}
        hint = "; ".join(f"{f}: did you mean {m[0]}?" for f, m in hints.items() if m)
        raise ValueError(f"unknown option(s) {remaining}{' (' + hint + ')' if hint else ''}; options are never "
                         f"abbreviated; valid options: {' '.join(valid)}")
    return RunConfigs.of(configs)


def run_train(argv: Sequence[str]) -> int:
    """``cory train ...``; returns the exit status (130 when a stop signal ended training early)."""
    from trainers.loop.cory import CORYTrainer
    from trainers.distributed import launched_world_size

    num_processes, argv = split_num_processes(argv)
    launched = launched_world_size()
    if num_processes > 1 and launched == 1:  # start the processes, each runs this command without the flag
        configs = parse_train_args(argv)  # a mistake fails here, once, not in every process
        preflight(configs, num_processes)
        return run_launcher(launch_command(num_processes, ["-m", "trainers.cli", "train", *argv]))
    if num_processes > 1 and launched != num_processes:
        raise ValueError(f"--num_processes {num_processes} inside a launch of {launched} processes; drop the flag "
                         "when starting with accelerate launch / torchrun")
    if int(os.environ.get("RANK", "0")) > 0:  # the main process reports progress and warnings; the others errors
        logging.getLogger().setLevel(logging.ERROR)
    configs = parse_train_args(argv)
    with CORYTrainer(*configs) as trainer:  # leaving it destroys the process group (a clean exit under a launcher)
        # the main process evaluates; with FSDP2 shards every process takes part in the same episodes' forwards
        evaluates = bool(configs.run.eval_episodes) and (trainer.dist.is_main or configs.run.sharded)
        before = heldout_eval(trainer, "before") if evaluates else None
        history = trainer.train()
        after = heldout_eval(trainer, "after") if before is not None and not trainer.stopped_early else None
    if history and trainer.dist.is_main:
        last = history[-1]
        scopes = (*trainer.seating.names, "cory")
        summary = {k: round(v, 4) for k, v in last.items() if k.split("/")[0] in scopes
                   and k.split("/")[-1] in ("task_reward", "kl", "combined_reward", "collective_reward")}
        first = trainer.seating.first
        pioneer = next(m for m in trainer.exchange.bundles if last[f"cory/{m}_seat"] == 0.0)
        print(json.dumps({"output_dir": str(trainer.output_dir), "last_iteration": last["iteration"],
                          "pioneer_model_last_iteration": pioneer,
                          "pioneer_model_now": trainer.exchange.seats[first].name, **summary}, indent=2))
    if after is not None and trainer.dist.is_main:  # the result a reader looks for comes last
        report_before_after(trainer, before, after)
    return 130 if trainer.stopped_early or trainer._stop_requested else 0


def heldout_eval(trainer, when: str) -> dict:
    """The pioneer's held-out evaluation (`CORYTrainer.evaluate`) with the same queries and sampling seeds each
    time, so that "before" and "after" differ only by training."""
    logger.info("evaluating the pioneer on %d held-out queries (%s training)", trainer.config.eval_episodes, when)
    out = trainer.heldout_evaluation()
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

