"""The task registry (``--task``): built-in tasks, and plug-ins by ``module:attr`` or entry point.

Each entry is a `TaskSpec` (builder, options class, the tokenizer it brings, the optional env fields it reads, how
it is evaluated); `make_task` builds the `Task` an env plays. A task is one module: its data, templates, reward and
options live there (`cory_env.tasks.imdb`, `cory_env.tasks.gsm8k`), and `register_task` or an entry point in the
group ``cory.tasks`` makes it reachable from ``cory train --task`` (docs/extending.md).

>>> sorted(TASKS.names())
['chain_relay', 'first_symbol', 'gsm8k', 'imdb', 'relay', 'tiny_vocab']
>>> task_spec("gsm8k").evaluation
'pass@k'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cory_env.config import EnvConfig, resolve_config
from cory_env.registry import Registry
from cory_env.tasks.base import OPTIONAL_ENV_FIELDS, Task, TaskSpec

__all__ = ["OPTIONAL_ENV_FIELDS", "TASKS", "Task", "TaskSpec", "env_arguments", "make_task", "register_task",
           "task_options", "task_spec", "task_tokenizer"]

#: Registered tasks; the built-in ones are imported on first use, so a task whose module needs extra data costs
#: nothing until it is asked for.
TASKS: Registry[TaskSpec] = Registry("task", TaskSpec, "cory.tasks", option="--task")
for _name in ("imdb", "gsm8k", "tiny_vocab", "relay", "chain_relay", "first_symbol"):
    TASKS.register(_name, f"cory_env.tasks.{_name}:SPEC")


def register_task(name: str, spec: TaskSpec, *, overwrite: bool = False) -> None:
    """Make `spec` available as ``--task name`` in this process (an installed package uses the entry-point group
    ``cory.tasks`` instead, which every process, launched workers included, finds by itself).

    Raises:
        ValueError, TypeError: as `cory_env.registry.Registry.register` (a name already registered, or claimed by
            an installed package's entry point, without `overwrite`: naming both).
    """
    TASKS.register(name, spec, overwrite=overwrite, plugin=True,
                   origin=f"{getattr(spec.builder, '__module__', '?')}:{getattr(spec.builder, '__qualname__', '?')}")


def task_spec(name: str) -> TaskSpec:
    """The `TaskSpec` of `name` (registered name, ``module:attr`` or entry point).

    Raises:
        ValueError: unknown, not importable, or not a `TaskSpec` (`cory_env.registry.Registry.get`).
    """
    return TASKS.get(name)


def task_tokenizer(task: "str | TaskSpec"):
    """A fresh copy of the tokenizer `task` (a `TaskSpec`, or a name looked up in `TASKS`) brings with it
    (`TaskSpec.tokenizer`), or None when the task works with the model's tokenizer."""
    spec = task if isinstance(task, TaskSpec) else task_spec(task)
    return None if spec.tokenizer is None else spec.tokenizer()


def make_task(name: str, config, tokenizer, options: Any = None) -> Task:
    """Build a registered task.

    Args:
        name: a task name (`TASKS`), ``module:attr`` of a `TaskSpec`, or an entry point's name.
        config: the `EnvConfig` the builder reads (data path, lengths, reward name, templates).
        tokenizer: the env's tokenizer (a builder may use it, e.g. for an action mask), or None.
        options: the run's instance of the task's options class (`TaskSpec.options`); None: its defaults.

    Raises:
        ValueError: for an unknown name (`task_spec`), or what the builder refuses.
        TypeError: `options` of the wrong class (`TaskSpec.build`).
    """
    return task_spec(name).build(config, tokenizer, options)


def task_options(name: str, options: Any = None, **fields: Any) -> Any:
    """The instance of task `name`'s options class (`TaskSpec.options`) from `options` (an instance, a dict of
    fields, or None: the defaults) and keyword `fields` (they win); None for a task without options.

    Raises:
        TypeError: `options` of another class, fields the class lacks (the valid ones are listed), or fields for a
            task that has no options.
        ValueError: a value the options class refuses.
    """
    cls = task_spec(name).options
    if cls is None:
        if options is not None or fields:
            raise TypeError(f"task {name!r} has no options, got {sorted(fields) or type(options).__name__}")
        return None
    if isinstance(options, dict):
        options, fields = None, {**options, **fields}
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"task {name!r} takes {cls.__name__} options, got {type(options).__name__}")
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(fields) - set(valid))
    if unknown:
        raise TypeError(f"task {name!r} has no option(s) {unknown}; its options ({cls.__name__}) are {valid}")
    base = cls() if options is None else options
    return dataclasses.replace(base, **fields) if fields else base


def env_arguments(config: EnvConfig | None, task, options: Any = None, /, **kwargs: Any) -> tuple[EnvConfig, Any]:
    """(`EnvConfig`, task options) of an env constructor's arguments: keyword `EnvConfig` fields override `config`
    (`cory_env.config.resolve_config`), and keywords that are fields of the task's options class (``task="imdb",
    min_review_chars=100``) go to its options together with `options` (`task_options`); a `Task` object given as
    `task` takes no options (None).

    Raises:
        TypeError: a keyword that is neither an `EnvConfig` field nor one of the task's options (both are listed);
            `options` of the wrong class.
        ValueError: a value the configs refuse.
    """
    names = {f.name for f in dataclasses.fields(EnvConfig)}
    rest = {k: v for k, v in kwargs.items() if k not in names}
    config = resolve_config(config, **{k: v for k, v in kwargs.items() if k in names})
    if isinstance(task, Task):
        if rest or options is not None:
            raise TypeError(f"unknown env argument(s) {sorted(rest) or ['task_options']} beside a Task object; "
                            f"EnvConfig fields are {sorted(names)} (a Task object carries its own settings)")
        return config, None
    spec = task_spec(config.task)
    valid = [] if spec.options is None else [f.name for f in dataclasses.fields(spec.options)]
    unknown = sorted(set(rest) - set(valid))
    if unknown:
        raise TypeError(f"unknown env argument(s) {unknown}; EnvConfig fields are {sorted(names)}"
                        + (f", and task {config.task!r}'s options ({spec.options.__name__}) are {valid}" if valid else
                           f"; task {config.task!r} has no options") + " (tokenizer, reward_fn, task, task_options and "
                        "render_mode are the other constructor arguments)")
    return config, task_options(config.task, options, **rest)
