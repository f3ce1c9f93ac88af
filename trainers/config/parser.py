"""``cory train``'s options: the parser built from the config classes of the run the command line names, and the
resolution of flags > ``--config FILE.yaml`` > ``--preset NAME`` > defaults into the run's `RunConfigs`.

The options a run reads are derived from what it runs (`trainers.config.RunConfigs`): the run, model and sampling
configs, the env config (the fields the chosen task reads), the chosen task's own options class and the chosen
learner's config (`trainers.learning.configs`: the update every learner shares and its own options). argv is read
twice: a first pass for ``--preset``, ``--config``, ``--learner``, ``--task`` and ``--num_processes`` (`first_pass`),
then one parse into each config class, each built once (`parse_train_args`). Another learner's or task's option given
as a flag is an error; carried by a preset or a YAML file it is kept aside and the run warns that it does nothing
(`trainers.config.unread`). Every option has its field's help (`transformers.HfArgumentParser`).

``cory train --help`` shows what a first run changes (`FIRST_RUN`) and the chosen learner's and task's own options,
each with the first sentence of its help; ``cory train --help_all`` shows every option with its whole help.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from transformers import HfArgumentParser

from cory_env.generation import SamplingConfig
from cory_env import EnvConfig
from cory_env.checks import check_field, check_path
from cory_env.overrides import unescape
from cory_env.rewards import REWARDS
from cory_env.tasks import OPTIONAL_ENV_FIELDS, TASKS, task_spec
from trainers.config.names import check_option_names, flat_field_types, option_fields, own_fields
from trainers.config.presets import PRESETS, preset
from trainers.config.sections import CORYConfig, ModelConfig
from trainers.config.tree import RunConfigs
from trainers.learning.configs import UpdateConfig
from trainers.learning.registry import LEARNERS

__all__ = ["FIRST_RUN", "ConfigParser", "FirstPass", "build_train_parser", "check_overrides", "first_pass",
           "load_yaml_config", "parse_train_args"]

#: Options that take a list of texts, one argv item each (``--stop_strings '\\n' .``): `cory_env.overrides.unescape`
#: reads each item's escapes (the ``KEY=VALUE`` lists, ``--seat_generation`` and ``--models``, read theirs themselves).
TEXT_LIST_OPTIONS = ("stop_strings",)
#: The options ``cory train --help`` shows beside the chosen learner's and task's own: what a first run changes.
FIRST_RUN = ("preset", "config", "task", "data_path", "reward", "model", "use_lora", "learner", "seating",
             "output_dir", "num_iterations", "seed", "batch_size", "learning_rate", "role_exchange_period",
             "population", "matchmaking", "eval_episodes", "resume", "overwrite", "num_processes", "device",
             "torch_threads")


class ConfigParser(HfArgumentParser):
    """`transformers.HfArgumentParser` whose parse errors (a flag's value of the wrong kind, ``--use_lora maybe``)
    raise `ValueError`, which `trainers.cli.main` reports as one line and exit 2, instead of printing the whole
    usage first."""

    def error(self, message: str):
        raise ValueError(f"{message} (cory train --help lists the options)")


def _registry_help(registry) -> str:
    return "; ".join(f"{name} ({line})" if line else name for name, line in registry.listing())  # imports no plug-in


def _text_item(where: str):
    """argparse's ``type`` for one item of a text list: `cory_env.overrides.unescape`, its error as argparse's."""
    def read(text: str) -> str:
        try:
            return unescape(text, where)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return read


def first_sentence(text: str, limit: int = 100) -> str:
    """The first sentence of an option's help (up to a period followed by a capital letter), cut at a clause
    boundary outside parentheses (``;`` or ``,``) before `limit` characters when it is longer (ending in ``…``)."""
    out = re.split(r"(?<=[a-z0-9)\]'])\. (?=[A-Z(])", text, maxsplit=1)[0].rstrip(".")
    if len(out) <= limit:
        return out + "."
    depth, cut = 0, -1
    for i, char in enumerate(out[:limit]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char in ";," and depth == 0:
            cut = i
    return (out[:cut] if cut > limit // 3 else out) + " …" if cut > limit // 3 else out + "."


def shape_help(parser: argparse.ArgumentParser, learner: tuple[str, type], task: tuple[str, Any], *,
               listings: bool = True, short: bool = False) -> None:
    """Make `parser`'s help tell what this run reads: the optional `EnvConfig` fields the task does not read are hidden
    (still accepted, and warned about when set), the groups are named after the chosen learner and task, the registries
    are listed under ``--learner`` / ``--task`` / ``--reward`` (without importing an installed plug-in:
    `cory_env.registry.Registry.listing`), and each ``--no_X`` switch says what it does (its default is its ``--X``'s).

    Args:
        learner: (the chosen learner's name, its config class); task: (the chosen task's name, its
            `cory_env.tasks.TaskSpec`).
        listings: list the registries (only ``--help`` prints them: a run skips the work).
        short: ``--help``'s view: only `FIRST_RUN` and the learner's and task's own options, each with the first
            sentence of its help (``--help_all``: every option, whole).
    """
    (learner, update_class), (name, spec) = learner, task
    hidden = {f for f in OPTIONAL_ENV_FIELDS if f not in spec.reads}
    listed = {"learner": LEARNERS, "task": TASKS, "reward": REWARDS}
    for action in parser._actions:
        if action.dest in hidden:
            action.help = argparse.SUPPRESS
        elif listings and action.dest in listed and not action.option_strings[0].startswith("--no"):
            if short:  # the names alone: --help_all gives each one's line
                names = ", ".join(f"{name} ({line})" if line.startswith(("plug-in", "broken", "conflicted")) or
                                  "claimed by" in line else name  # an installed package's: what it is
                                  for name, line in listed[action.dest].listing())
                action.help = f"{first_sentence(action.help, 60)} Registered: {names}."
            else:
                action.help = f"{action.help} Registered: {_registry_help(listed[action.dest])}."
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0].startswith("--no"):
            action.help = f"Set {action.dest} to false (the same as --{action.dest} false)."
            action.default = argparse.SUPPRESS
    titles = {getattr(update_class, "_argument_group_name", None): f"update options read by learner {learner!r} "
                                                                   f"({update_class.__name__})",
              EnvConfig._argument_group_name: f"env options read by task {name!r} (EnvConfig)"}
    for group in parser._action_groups:
        group.title = titles.get(group.title, group.title)
    if short:
        own = {f.name for f in own_fields(update_class)} | \
            ({f.name for f in dataclasses.fields(spec.options)} if spec.options is not None else set())
        shown = set(FIRST_RUN) | own | {"help", "help_all"}
        for action in parser._actions:
            if action.dest not in shown or action.option_strings[0].startswith("--no_"):
                action.help = argparse.SUPPRESS
                continue
            if action.help not in (None, argparse.SUPPRESS) and action.dest not in ("help", "help_all", *listed):
                action.help = first_sentence(action.help)
            if len(action.option_strings) > 1 and "-" in action.option_strings[1].lstrip("-"):
                action.option_strings = action.option_strings[:1]  # --output-dir beside --output_dir: the help exits
            action.metavar = "X" if action.nargs is None and action.const is None else action.metavar
        parser.usage = "cory train [--preset NAME] [--config FILE.yaml] [--OPTION VALUE ...]"
        total = sum(1 for a in parser._actions if a.option_strings and not a.option_strings[0].startswith("--no_"))
        parser.epilog = (f"These are the options a first run changes and the own options of learner {learner!r} and "
                         f"task {name!r}, each with the first sentence of its help. cory train --help_all lists all "
                         f"{total} options with their whole help (and docs/options.md); cory train --learner NAME "
                         "--task NAME --help shows another learner's and task's.")


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
    """(the `cory train` parser of the run `argv` names, its config classes, the preset's and YAML's values, which
    are the defaults ``--help`` shows). The learner and the task are looked up once here."""
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
    parser.add_argument("--help_all", action="help", help="Show every option with its whole help, and exit.")
    for action in parser._actions:  # a list of texts: each item's escapes read (\\n a newline), an empty item refused
        if action.dest in TEXT_LIST_OPTIONS:
            action.type = _text_item(f"--{action.dest}")
    read = {f.name for c in classes for f in dataclasses.fields(c)}
    parser.set_defaults(**{k: v for k, v in defaults.items() if k in read})
    asked = set(argv)
    shape_help(parser, (learner, update_class), (task, spec), listings=bool({"-h", "--help", "--help_all"} & asked),
               short=bool({"-h", "--help"} & asked) and "--help_all" not in asked)
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
    """Resolve `cory train` arguments into the run's configs (the module docstring); options of another learner or
    task carried by the preset or the YAML file go to `RunConfigs.unread`.

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
