"""`cory train`: options from the config dataclasses of the run's learner and task, resolved, then one training run
(or a launch of several processes, `trainers.cli.launch`).

The options a run reads are derived from what it runs (`trainers.config.RunConfigs`): the run, model and sampling
configs, the env config (the fields the chosen task reads), the chosen task's own options class and the chosen
learner's config (`trainers.learning.configs`: the update every learner shares and its own options). So ``cory train
--task gsm8k --learner grpo --help`` shows what that run reads, grouped. argv is read twice: a first pass for
``--preset``, ``--config``, ``--learner``, ``--task`` and ``--num_processes`` (`first_pass`), then one parse into each
config class, each built once. Another learner's or task's option given as a flag is an error; carried by a preset or
a YAML file it is kept aside and the run warns that it does nothing (`trainers.unread_options`). Values resolve as
command-line flags > `--config FILE.yaml` > `--preset NAME` > defaults, through `transformers.HfArgumentParser`, so
every option has its field's help.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from transformers import HfArgumentParser

from agents.sampling import SamplingConfig
from cory_env.checks import check_field, check_path
from cory_env import EnvConfig
from cory_env.rewards import REWARDS
from cory_env.tasks import OPTIONAL_ENV_FIELDS, TASKS, task_spec
from trainers.cli.launch import launch_command, preflight, run_launcher
from trainers.cli.presets import PRESETS, preset
from trainers.config import CORYConfig, ModelConfig, RunConfigs, check_option_names, flat_field_types, option_fields
from trainers.learning.configs import UpdateConfig
from trainers.learning.registry import LEARNERS


class ConfigParser(HfArgumentParser):
    """`transformers.HfArgumentParser` whose parse errors (a flag's value of the wrong kind, ``--use_lora maybe``)
    raise `ValueError`, which `trainers.cli.main` reports as one line and exit 2, instead of printing the whole
    usage first."""

    def error(self, message: str):
        raise ValueError(f"{message} (cory train --help lists the options)")


def _registry_help(registry) -> str:
    return "; ".join(f"{name} ({line})" if line else name for name, line in registry.listing())  # imports no plug-in


def shape_help(parser: argparse.ArgumentParser, learner: tuple[str, type], task: tuple[str, Any], *,
               listings: bool = True) -> None:
    """Make `parser`'s help tell what this run reads: the optional `EnvConfig` fields the task does not read are
    hidden (still accepted, and warned about when set), the groups are named after the chosen learner and task, the
    registries are listed under ``--learner`` / ``--task`` / ``--reward`` (without importing an installed plug-in:
    `cory_env.registry.Registry.listing`), and each ``--no_X`` switch says what it does (its default is its
    ``--X``'s).

    Args:
        learner: (the chosen learner's name, its config class); task: (the chosen task's name, its
            `cory_env.tasks.TaskSpec`).
        listings: list the registries (only ``--help`` prints them: a run skips the work).
    """
    (learner, update_class), (name, spec) = learner, task
    hidden = {f for f in OPTIONAL_ENV_FIELDS if f not in spec.reads}
    listed = {"learner": LEARNERS, "task": TASKS, "reward": REWARDS}
    for action in parser._actions:
        if action.dest in hidden:
            action.help = argparse.SUPPRESS
        elif listings and action.dest in listed and not action.option_strings[0].startswith("--no"):
            action.help = f"{action.help} Registered: {_registry_help(listed[action.dest])}."
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0].startswith("--no"):
            action.help = f"Set {action.dest} to false (the same as --{action.dest} false)."
            action.default = argparse.SUPPRESS
    titles = {getattr(update_class, "_argument_group_name", None): f"update options read by learner {learner!r} "
                                                                   f"({update_class.__name__})",
              EnvConfig._argument_group_name: f"env options read by task {name!r} (EnvConfig)"}
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


def _type_name(kind: Any) -> str:
    """A config field's type as a reader writes it: ``int``, ``Optional[list[str]]``."""
    return kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")


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
            raise ValueError(f"{source}: option {key} must be {_type_name(types[key])}, got {value!r} "
                             f"({type(value).__name__})")


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


@dataclass(frozen=True)
class FirstPass:
    """What ``cory train``'s first pass over argv reads: the options that decide the rest (which preset and YAML file
    give defaults, which learner and task choose the config classes) and ``--num_processes`` (`run_train` launches
    the processes); `rest` is argv without ``--num_processes``."""

    preset: str | None
    config: str | None
    learner: str | None
    task: str | None
    num_processes: int
    rest: list[str]


def first_pass(argv: Sequence[str]) -> FirstPass:
    """The first pass over ``cory train``'s argv (`FirstPass`); the one full parse follows (`parse_train_args`).

    Raises:
        ValueError: ``--num_processes`` not an integer >= 1.
    """
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("preset", "config", "learner", "task", "num_processes"):
        pre.add_argument(f"--{name}", default=None)
    known, _ = pre.parse_known_args(list(argv))
    rest, skip = [], False
    for arg in argv:  # argv without --num_processes N / --num_processes=N, for the launched processes
        if skip:
            skip = False
        elif arg == "--num_processes":
            skip = True
        elif not arg.startswith("--num_processes="):
            rest.append(arg)
    try:
        n = int(known.num_processes) if known.num_processes is not None else 1
    except ValueError:
        n = 0
    check_field(n >= 1, "--num_processes", known.num_processes, "use an integer >= 1")
    return FirstPass(known.preset, known.config, known.learner, known.task, n, rest)


def build_train_parser(argv: Sequence[str], first: FirstPass | None = None
                       ) -> tuple[ConfigParser, list[type], dict[str, Any]]:
    """(the `cory train` parser of the run `argv` names, its config classes, the preset's and YAML's values): the chosen learner's config
    class and the chosen task's options, grouped and with the preset's and YAML's values as defaults, which
    ``--help`` shows. The learner and the task are looked up once here (flags > YAML > preset > defaults)."""
    from trainers.learning.registry import learner_spec

    first = first_pass(argv) if first is None else first
    defaults: dict[str, Any] = {}
    if first.preset:
        defaults.update(preset(first.preset))
    if first.config:  # the file may hold the options of the learner and task the command line names
        defaults.update(load_yaml_config(first.config, named={"learner": first.learner, "task": first.task}))
    learner = first.learner or defaults.get("learner", CORYConfig.learner)
    task = first.task or defaults.get("task", EnvConfig.task)
    update_class, spec = learner_spec(learner).config_class, task_spec(task)
    task_class = spec.options
    classes = [c for c in (CORYConfig, ModelConfig, EnvConfig, task_class, update_class, SamplingConfig)
               if c is not None]
    check_option_names(classes)  # before argparse, which would refuse a clash with a traceback
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
    shape_help(parser, (learner, update_class), (task, spec), listings=bool({"-h", "--help"} & set(argv)))
    return parser, classes, defaults


def _refuse_unknown(parser: argparse.ArgumentParser, remaining: list[str], learner: str, task: str) -> None:
    """Raise for flags the run's parser does not take: another learner's or task's option given as a flag (a typo
    class of mistake: ``--learner ppo --group_size 4``) names its owners; anything else gets the close matches."""
    if not remaining:
        return
    flags = [r.split("=")[0] for r in remaining if r.startswith("--")]
    others = option_fields()
    owned = {f: others[f.lstrip("-").replace("-", "_").removeprefix("no_")] for f in flags
             if f.lstrip("-").replace("-", "_").removeprefix("no_") in others}
    if owned:
        which = "; ".join(f"{flag} is read by {' and '.join(who)} only" for flag, (_, who) in owned.items())
        raise ValueError(f"{which}, not by this run (learner={learner!r}, task={task!r}); drop it, or choose that "
                         "learner or task (cory train --learner NAME --help lists what a learner reads)")
    valid = sorted(a.option_strings[0] for a in parser._actions if a.option_strings)
    hints = {f: difflib.get_close_matches(f, valid, n=1) for f in flags}
    hint = "; ".join(f"{f}: did you mean {m[0]}?" for f, m in hints.items() if m)
    raise ValueError(f"unknown option(s) {remaining}{' (' + hint + ')' if hint else ''}; options are never "
                     f"abbreviated; valid options: {' '.join(valid)}")


def parse_train_args(argv: Sequence[str], first: FirstPass | None = None) -> RunConfigs:
    """Resolve `cory train` arguments into the run's configs (flags > YAML > preset > defaults): the first pass
    (`first_pass`), then one parse into each config class, each built once; ``--help`` prints the options of the
    chosen learner and task (see the module docstring). Options of another learner or task carried by the preset or
    the YAML file go to `RunConfigs.unread` (the run warns that they do nothing); given as flags they are an error.

    Raises:
        ValueError: an unknown option (close matches named), another learner's or task's option given as a flag,
            an option given under two of its names, ``--num_processes`` other than 1 (`run_train` launches), or a
            value a config refuses.
    """
    argv = list(argv)
    parser, classes, defaults = build_train_parser(argv, first)
    check_one_name_per_option(parser, argv)
    *sections, extra, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    by_class = dict(zip(classes, sections))
    if extra.num_processes != 1:  # run_train takes it off before parsing; anywhere else it would be ignored
        raise ValueError(f"--num_processes {extra.num_processes} is handled by `cory train` (it launches the "
                         "processes); call trainers.cli.main(['train', ...]) or launch with accelerate / torchrun")
    run, env = by_class[CORYConfig], by_class[EnvConfig]
    _refuse_unknown(parser, remaining, run.learner, env.task)
    read = {f.name for section in sections for f in dataclasses.fields(section)}
    unread = {k: v for k, v in defaults.items() if k not in read}  # other learners' / tasks' options (checked)
    update = next(section for section in sections if isinstance(section, UpdateConfig))
    task_options = next((section for cls, section in by_class.items()
                         if cls not in (CORYConfig, ModelConfig, EnvConfig, SamplingConfig, type(update))), None)
    return RunConfigs(run=run, update=update, env=env, model=by_class[ModelConfig], sampling=by_class[SamplingConfig],
                      task_options=task_options, unread=unread)


def run_train(argv: Sequence[str]) -> int:
    """``cory train ...``; returns the exit status (130 when a stop signal ended training early)."""
    from trainers.loop.cory import CORYTrainer
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
    configs = parse_train_args(argv, first)
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
    seats = {seat: next((m for m in trainer.agents if last.get(f"cory/{m}_seat") == float(k)), "a frozen snapshot")
             for k, seat in enumerate(trainer.seating.names)}  # a snapshot partner logs only its task reward
    batch = {f"{seat} ({model})": {key: round(last[f"{seat}/{key}"], 4) for key in ("task_reward", "kl",
                                                                               "combined_reward")
                                   if f"{seat}/{key}" in last}
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
    model = trainer.evaluated_model or trainer.exchange.seats[trainer.seating.first].name
    data = {"data_path": trainer.env.config.data_path, "fingerprint": trainer.inputs.get("data")}
    result = {"before": before, "after": after, "model": model, "data": data, **gain}
    write_output(trainer.output_dir / EVAL_FILE, json.dumps(result, indent=2))
    print(before_after_line(model, before, after, gain), flush=True)

