"""`cory train`: options from the config dataclasses of the run's learner and task, resolved, then one training run
(or a launch of several processes, `trainers.cli.launch`).

The options a run reads are derived from what it runs (`trainers.config.RunConfigs`): the run, model and sampling
configs, the env config (the fields the chosen task reads), the chosen task's own options class, the update
(`PPOConfig`: the fields the chosen learner reads) and the chosen learner's own options class. So ``cory train
--task gsm8k --learner grpo --help`` shows what that run reads, grouped; the options of other learners and tasks are
still accepted (one flat command line), and a run warns that they do nothing (`trainers.unread_options`). Values
resolve as command-line flags > `--config FILE.yaml` > `--preset NAME` > defaults, through
`transformers.HfArgumentParser`, so every option has its field's help.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import logging
import os
import shlex
import signal
import sys
import time
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from transformers import HfArgumentParser

from agents.sampling import SamplingConfig
from cory_env.checks import check_path
from cory_env import EnvConfig
from cory_env.rewards import REWARDS
from cory_env.tasks import OPTIONAL_ENV_FIELDS, TASKS
from trainers.cli.launch import launch_command, preflight, run_launcher, split_num_processes
from trainers.cli.presets import PRESETS, preset
from trainers.config import (CORYConfig, ModelConfig, PPOConfig, RunConfigs, flat_field_types, migrate_flat,
                             option_fields)
from trainers.learning.learners import LEARNERS


class ConfigParser(HfArgumentParser):
    """`transformers.HfArgumentParser` whose parse errors (a flag's value of the wrong kind, ``--use_lora maybe``)
    raise `ValueError`, which `trainers.cli.main` reports as one line and exit 2, instead of printing the whole
    usage first."""

    def error(self, message: str):
        raise ValueError(f"{message} (cory train --help lists the options)")


def run_classes(configs: RunConfigs) -> list[type]:
    """The config classes of a run in ``cory train --help`` order: the run, the model, the env and the task's
    options, the update and the learner's options, sampling."""
    return [c for c in (CORYConfig, ModelConfig, EnvConfig, configs.task_options_class, PPOConfig,
                        configs.learner_options_class, SamplingConfig) if c is not None]


def _registry_help(registry) -> str:
    return "; ".join(f"{name} ({spec.summary})" if getattr(spec, "summary", "") else name
                     for name, spec in registry.items())


def shape_help(parser: argparse.ArgumentParser, configs: RunConfigs) -> None:
    """Make `parser`'s help tell what this run reads: the `PPOConfig` fields the learner ignores and the optional
    `EnvConfig` fields the task does not read are hidden (still accepted, and warned about when set), the groups
    are named after the chosen learner and task, the registries are listed under ``--learner`` / ``--task`` /
    ``--reward``, and each ``--no_X`` switch says what it does (its default is its ``--X``'s)."""
    spec, task = configs.learner_spec, configs.task_spec
    hidden = set(spec.ignores) | {f for f in OPTIONAL_ENV_FIELDS if f not in task.reads}
    listed = {"learner": LEARNERS, "task": TASKS, "reward": REWARDS}
    for action in parser._actions:
        if action.dest in hidden:
            action.help = argparse.SUPPRESS
        elif action.dest in listed and not action.option_strings[0].startswith("--no"):
            action.help = f"{action.help} Registered: {_registry_help(listed[action.dest])}."
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0].startswith("--no"):
            action.help = f"Set {action.dest} to false (the same as --{action.dest} false)."
            action.default = argparse.SUPPRESS
    titles = {PPOConfig._argument_group_name: f"update options read by learner {configs.run.learner!r} (PPOConfig)",
              EnvConfig._argument_group_name: f"env options read by task {configs.env.task!r} (EnvConfig)"}
    for group in parser._action_groups:
        group.title = titles.get(group.title, group.title)


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


def load_yaml_config(path: str | Path, *, named: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A flat `field: value` YAML file, checked against the config fields (`check_overrides`): the base configs',
    and the options of the learner and task the file names, of those `named` names, and of every other learner and
    task this process knows.

    Args:
        named: ``{"learner": ..., "task": ...}`` named elsewhere (the command line), None where not.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: no file there (`cory_env.checks.check_path`).
        ValueError: not YAML, not a mapping, a learner or task that is not found, unknown keys (lists valid ones),
            or a value of the wrong type.
    """
    path = check_path(path, "--config", fix="pass a YAML file of option: value, e.g. a run's config.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"--config {str(path)!r} is not valid YAML ({str(err).splitlines()[0]}); pass a YAML file "
                         "of option: value, e.g. a run's config.yaml") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of option: value, got {type(data).__name__}")
    data = migrate_flat(data)  # a run's config.yaml written before a field moved
    types = flat_field_types(**_named_specs(data, named))
    data = {key: _yaml_float(value) if float in (types.get(key), *typing.get_args(types.get(key))) else value
            for key, value in data.items()}
    check_overrides(data, source=str(path), named=named)
    return data


def _named_specs(data: Mapping[str, Any], named: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """The learners and tasks whose options `data` may hold: those it names and those `named` names (None where
    not), as `trainers.config.flat_field_types` takes them."""
    named = named or {}
    return {"learners": [data.get("learner"), named.get("learner")], "tasks": [data.get("task"), named.get("task")]}


def _yaml_float(value: Any) -> Any:
    """YAML 1.1 reads `1e-3` (no dot) as a string; accept it as the float it means."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def check_overrides(data: dict[str, Any], *, source: str, named: Mapping[str, Any] | None = None) -> None:
    """Raise `ValueError` (naming `source`) for a learner or a task that is not found (the registry's reason: a
    plug-in no longer installed is named as such, before its options would read as unknown ones), a key that is no
    config field, or a value of the wrong type. The options of the learner and task `data` names and `named` names
    (``{"learner": ..., "task": ...}``, e.g. the command line's) are looked up first, so a ``module:attr`` plug-in's
    own options are known whatever is installed."""
    types = flat_field_types(**_named_specs(data, named))
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


def _chosen(argv: Sequence[str], defaults: dict[str, Any]) -> RunConfigs:
    """The run's learner and task (flags > YAML > preset > defaults) as `RunConfigs` of defaults: which options the
    run reads. Raises `ValueError` for an unknown learner or task (before anything else is parsed)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--learner", default=defaults.get("learner", CORYConfig.learner))
    pre.add_argument("--task", default=defaults.get("task", EnvConfig.task))
    known, _ = pre.parse_known_args(argv)
    return RunConfigs.from_flat({"learner": known.learner, "task": known.task})


def _other_options(remaining: list[str], chosen: set[str]) -> tuple[dict[str, Any], list[str]]:
    """({field: value} of the other learners' and tasks' options among `remaining` flags, the flags left), parsed
    with their own classes' types (`RunConfigs.unread`)."""
    values: dict[str, Any] = {}
    for owner in dict.fromkeys(owner for owner, _ in option_fields().values()):
        names = [f.name for f in dataclasses.fields(owner) if f.name not in chosen and f.name not in values]
        if not remaining or not names:
            continue
        given = {a.split("=", 1)[0].lstrip("-").replace("-", "_").removeprefix("no_") for a in remaining
                 if a.startswith("--")}
        if not given & set(names):
            continue
        instance, remaining = ConfigParser(owner).parse_args_into_dataclasses(args=remaining,
                                                                             return_remaining_strings=True)
        values.update({n: getattr(instance, n) for n in names if n in given})
    return values, remaining


def build_train_parser(argv: Sequence[str]) -> tuple[ConfigParser, list[type], dict[str, Any]]:
    """(the `cory train` parser of the run `argv` names, its config classes, the preset's and YAML's values): the
    chosen learner's and task's options, grouped and with the preset's and YAML's values as defaults, which
    ``--help`` shows."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--config", default=None)
    pre.add_argument("--learner", default=None)
    pre.add_argument("--task", default=None)
    known, _ = pre.parse_known_args(argv)
    defaults: dict[str, Any] = {}
    if known.preset:
        defaults.update(preset(known.preset))
    if known.config:  # the file may hold the options of the learner and task the command line names
        defaults.update(load_yaml_config(known.config, named={"learner": known.learner, "task": known.task}))
    chosen = _chosen(argv, defaults)
    classes = run_classes(chosen)
    # no abbreviations: argparse would take --num_iteration for --num_iterations
    parser = ConfigParser(classes, prog="cory train", allow_abbrev=False,
                          description="Train with CORY (two seats), the single-agent baseline (--seating ppo) or a "
                                      "chain of N seats (--seating chain:N) on a CORY env, with the learner --learner "
                                      "and the task --task; --help shows the options they read.")
    parser.add_argument("--preset", default=None, help=f"Preset: {', '.join(sorted(PRESETS))}.")
    parser.add_argument("--config", default=None, help="YAML file of option: value (e.g. a run's config.yaml).")
    parser.add_argument("--num_processes", default=1, type=int,
                        help="Data-parallel processes on this machine (accelerate launch; GPUs, or CPU with gloo). "
                             "batch_size counts one process's episodes.")
    read = {f.name for c in classes for f in dataclasses.fields(c)}
    parser.set_defaults(**{k: v for k, v in defaults.items() if k in read})
    shape_help(parser, chosen)
    return parser, classes, defaults


def parse_train_args(argv: Sequence[str]) -> RunConfigs:
    """Resolve `cory train` arguments into the run's configs (flags > YAML > preset > defaults); ``--help`` prints
    the options of the chosen learner and task (see the module docstring)."""
    argv = list(argv)
    parser, classes, defaults = build_train_parser(argv)
    read = {f.name for c in classes for f in dataclasses.fields(c)}
    check_one_name_per_option(parser, argv)
    *configs, extra, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if extra.num_processes != 1:  # run_train takes it off before parsing; anywhere else it would be ignored
        raise ValueError(f"--num_processes {extra.num_processes} is handled by `cory train` (it launches the "
                         "processes); call trainers.cli.main(['train', ...]) or launch with accelerate / torchrun")
    others, remaining = _other_options(remaining, read)
    if remaining:
        valid = sorted(a.option_strings[0] for a in parser._actions if a.option_strings)
        flags = [r.split("=")[0] for r in remaining if r.startswith("--")]
        hints = {f: difflib.get_close_matches(f, valid, n=1) for f in flags}
        hint = "; ".join(f"{f}: did you mean {m[0]}?" for f, m in hints.items() if m)
        raise ValueError(f"unknown option(s) {remaining}{' (' + hint + ')' if hint else ''}; options are never "
                         f"abbreviated; valid options: {' '.join(valid)}")
    flat = {k: v for config in configs for k, v in dataclasses.asdict(config).items()}
    unread = {k: v for k, v in defaults.items() if k not in read} | others  # other learners' / tasks' options
    return RunConfigs.from_flat({**unread, **flat}, strict=True)


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
        report_before_after(trainer, before, after)
    if trainer.stopped_early and trainer.dist.is_main:
        print(stop_report(trainer, "training", history), file=sys.stderr, flush=True)
    return 130 if trainer.stopped_early or trainer._stop_requested else 0


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
    logger.info("evaluating the pioneer on %d held-out queries (%s training)", trainer.config.eval_episodes, when)
    start = time.monotonic()
    out = trainer.heldout_evaluation()
    logger.info("held-out reward %s training: %.3f, KL to the reference %.2f nats (%.0f s)", when, out["reward"],
                out["kl"], time.monotonic() - start)
    return {k: v for k, v in out.items() if k != "samples"} | {"iteration": trainer.start_iteration if when ==
                                                               "before" else trainer.config.num_iterations}


def training_summary(trainer, last: dict) -> dict:
    """The run's last training batch, each number labelled with the model it belongs to (the pioneer seat of the
    last iteration may hold another model than the pioneer after the last role exchange, whose held-out evaluation
    follows)."""
    seats = {seat: next(m for m in trainer.exchange.bundles if last[f"cory/{m}_seat"] == float(k))
             for k, seat in enumerate(trainer.seating.names)}
    batch = {f"{seat} ({model})": {key: round(last[f"{seat}/{key}"], 4) for key in ("task_reward", "kl",
                                                                               "combined_reward")}
             for seat, model in seats.items()}
    return {"output_dir": str(trainer.output_dir), "last_iteration": last["iteration"],
            "last_training_batch": batch, "collective_reward": round(last["cory/collective_reward"], 4),
            "pioneer_now": trainer.exchange.seats[trainer.seating.first].name}


def before_after_line(model: str, before: dict, after: dict, gain: dict) -> str:
    """The one line that says what training did to `model` on held-out queries (`gain_summary`'s fields; a gain
    without a standard error says "s.e. n/a" with the reason; training queries are named as such, not held out)."""
    sem = (f" ± {gain['gain_sem']:.3f} s.e., clustered by query" if gain.get("gain_sem") is not None else
           f", s.e. n/a: {gain.get('gain_sem_note') or 'not computed'}")
    held_out = after["query_split"] == "test"  # else training queries drawn with a fresh seed (not held out)
    return (f"{model} in the pioneer seat, {'held-out ' if held_out else ''}task reward on {gain['episodes']} "
            f"episodes of {gain['distinct_queries']} distinct {after['query_split']}-split queries"
            f"{'' if held_out else ' (not held out)'} (the same queries and sampling seeds): before "
            f"{before['reward']:.3f} -> after {after['reward']:.3f} (gain {gain['gain']:+.3f}"
            f"{sem}); combined reward (task − β·KL) "
            f"{gain['combined_before']:.3f} -> {gain['combined_after']:.3f}; KL to the reference {after['kl']:.2f} "
            f"nats; distinct-2 {before['distinct_2']:.2f} -> {after['distinct_2']:.2f}")


def report_before_after(trainer, before: dict, after: dict) -> None:
    """Print and write (`eval.json`) the pioneer's held-out reward before and after training, with the noise of
    the difference (`trainers.evaluation.episodes.gain_summary`: the standard error clustered by query, since the
    episodes share queries; none with fewer than two distinct queries, and the numbers are still written) and the
    query data it drew from (the run's ``data_path`` and the fingerprint of its training queries). ``eval.json`` is
    written atomically (`trainers.cli.outputs.write_output`)."""
    from trainers.cli.outputs import write_output
    from trainers.evaluation.episodes import gain_summary
    from trainers.loop.run_dir import EVAL_FILE

    gain = gain_summary(before, after)
    model = trainer.exchange.seats[trainer.seating.first].name
    data = {"data_path": trainer.env.config.data_path, "fingerprint": trainer.inputs.get("data")}
    result = {"before": before, "after": after, "model": model, "data": data, **gain}
    write_output(trainer.output_dir / EVAL_FILE, json.dumps(result, indent=2))
    print(before_after_line(model, before, after, gain), flush=True)

