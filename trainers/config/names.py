"""Who owns a name in the flat option namespace: every option of a run is one name (``--batch_size``, a YAML key,
a ``config.yaml`` key) owned by one field of one config class; two owners of one name are refused
(`check_option_names`), and the options of every learner and task this process knows are found by name
(`option_fields`) without importing an installed plug-in."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterable

from cory_env.generation import SamplingConfig
from cory_env import EnvConfig
from cory_env.tasks import TASKS
from trainers.config.sections import CORYConfig, ModelConfig
from trainers.learning.configs import UpdateConfig

__all__ = ["BASE_CLASSES", "CLI_OPTIONS", "all_config_classes", "check_option_names", "flat_field_types",
           "option_class", "option_fields", "option_names", "own_fields"]


#: The config classes every run has whatever its learner and task, in flat-dict order; the chosen task's options class
#: (`RunConfigs.task_options`) joins them after `EnvConfig`, the chosen learner's config (`RunConfigs.update`) after it.
BASE_CLASSES = (EnvConfig, ModelConfig, SamplingConfig, CORYConfig)


#: The options of ``cory train`` that are no config field (`trainers.cli.train.build_train_parser`; argparse's
#: ``--help``): no config class may have a field (or an alias, or a ``--no_X`` switch) of these names.
CLI_OPTIONS = ("preset", "config", "num_processes", "help", "help_all")


def option_names(config_cls: type) -> dict[str, str]:
    """Every option name the command line takes for `config_cls` (``--NAME``, dashes read as underscores), each with
    what it is, for messages: its fields, their aliases (``metadata["aliases"]``, e.g. ``--algo`` of
    `EnvConfig.seating`) and the ``--no_X`` switch of a field whose default is True (`transformers.HfArgumentParser`
    adds one)."""
    out = {}
    for f in dataclasses.fields(config_cls):
        out[f.name] = f"a field of {config_cls.__name__}"
        aliases = f.metadata.get("aliases", ())
        for alias in [aliases] if isinstance(aliases, str) else aliases:
            out[alias.lstrip("-").replace("-", "_")] = f"{alias} (another name of {config_cls.__name__}.{f.name})"
        if f.default is True:
            out[f"no_{f.name}"] = f"--no_{f.name} (the switch that sets {config_cls.__name__}.{f.name} to false)"
    return out


def _both(first: str, second: str) -> str:
    """Two `option_names` descriptions of one name, joined: ``a field of both PPOConfig and MyOptions``."""
    field_of = "a field of "
    if first.startswith(field_of) and second.startswith(field_of):
        return f"a field of both {first.removeprefix(field_of)} and {second.removeprefix(field_of)}"
    return f"{first} and {second}"


def check_option_names(classes) -> None:
    """Refuse two options of one name among `classes` (the config classes of one run) and ``cory train``'s own
    `CLI_OPTIONS`: a field, an alias or a ``--no_X`` switch (`option_names`), within one class too.

    Raises:
        ValueError: naming the option, both owners and the fix.
    """
    seen = {name: f"`cory train`'s own --{name}" for name in CLI_OPTIONS}
    for cls in classes:
        own = {f.name for f in dataclasses.fields(cls)}
        for name in sorted(own):  # a field named like a switch of its own class: `option_names` hides it
            if name.startswith("no_") and name.removeprefix("no_") in own:
                raise ValueError(f"option {name!r} is a field of {cls.__name__} and the --{name} switch of its "
                                 f"field {name.removeprefix('no_')!r}: every option of a run needs its own name; "
                                 "rename the plug-in's field")
        for name, what in option_names(cls).items():
            if name in seen:
                raise ValueError(f"option {name!r} is {_both(seen[name], what)}: every option of a run needs its "
                                 "own name (the command line and config.yaml are flat); rename the plug-in's field")
            seen[name] = what


def option_class(spec_options: type | None) -> type | None:
    """A task spec's own options class, None when it has none beyond the base configs."""
    return None if spec_options is None or spec_options in BASE_CLASSES else spec_options


def own_fields(config_cls: type) -> list[dataclasses.Field]:
    """The fields `config_cls` adds to what every run reads: a learner config's beyond `UpdateConfig`'s (which every
    learner reads), a task's options class's all."""
    shared = {f.name for f in dataclasses.fields(UpdateConfig)} if issubclass(config_cls, UpdateConfig) else set()
    return [f for f in dataclasses.fields(config_cls) if f.name not in shared]


def all_config_classes(*, learners: Iterable[Any] = (), tasks: Iterable[Any] = ()) -> list[type]:
    """`BASE_CLASSES` and the own options class of every learner and task this process knows, each once
    (`option_fields`, the `learners` and `tasks` named included): every option a command line, a YAML file or a
    preset may hold."""
    owners = (owner for owner, _ in option_fields(learners=learners, tasks=tasks).values())
    return [*BASE_CLASSES, UpdateConfig, *dict.fromkeys(owners)]


def option_fields(*, learners: Iterable[Any] = (),
                  tasks: Iterable[Any] = ()) -> dict[str, tuple[type, tuple[str, ...]]]:
    """Every option of the own options of every learner and task this process knows (a learner's: its config's
    fields beyond `UpdateConfig`, `own_fields`): ``{field: (class, (who, ...))}`` with ``who`` like ``"learner
    grpo"``; what `RunConfigs.from_flat` and a YAML file accept but a run of another learner or task does not read.

    Known are the built-in and registered ones and those looked up so far (`cory_env.registry.Registry.known`), so
    the names in `learners` and `tasks` (None and non-strings skipped) are looked up first.

    Raises:
        ValueError: a name in `learners` or `tasks` that is not found (the registry's reason).
    """
    from trainers.learning.registry import LEARNERS
    out: dict[str, tuple[type, tuple[str, ...]]] = {}
    for kind, registry, attr, named in (("learner", LEARNERS, "config_class", learners),
                                        ("task", TASKS, "options", tasks)):
        for name in named:
            if isinstance(name, str):
                registry.get(name)
        for name, spec in registry.known():
            options = option_class(getattr(spec, attr))
            for f in own_fields(options) if options is not None else ():
                owner, who = out.get(f.name, (options, ()))
                out[f.name] = (owner, (*who, f"{kind} {name}"))
    return out


def flat_field_types(configs=None, *, learners: Iterable[Any] = (), tasks: Iterable[Any] = ()) -> dict[str, Any]:
    """Every flat field name -> its type hint (e.g. ``Optional[float]``), for checking YAML files and presets: the
    base configs' and the options of every learner and task this process knows, the `learners` and `tasks` named
    included (`all_config_classes`); with `configs`, only the classes of that run.

    Raises:
        ValueError: a name in `learners` or `tasks` that is not found (`option_fields`).
    """
    classes = configs.classes() if configs is not None else all_config_classes(learners=learners, tasks=tasks)
    out = {}
    for config_cls in classes:
        hints = typing.get_type_hints(config_cls)
        for f in dataclasses.fields(config_cls):
            out[f.name] = hints[f.name]
    return out
