"""`RunConfigs`: the configs of one run as a tree (the run, the model, sampling, the env, the learner's config, the
task's options and the scheme's options), with the learner's, the task's and the scheme's specs resolved once, and the
one conversion between the tree and the flat ``{field: value}`` dict (`RunConfigs.to_flat`, `RunConfigs.from_flat`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from cory_env.generation import SamplingConfig
from cory_env import EnvConfig
from cory_env.rewards import REWARDS
from cory_env.tasks import TASKS, task_spec
from trainers.config.names import check_option_names, option_class, option_fields
from trainers.config.sections import CORYConfig, ModelConfig
from trainers.matchmaking import SCHEMES

__all__ = ["RunConfigs", "plugin_origins"]


@dataclass(frozen=True)
class RunConfigs:
    """The configs of one run, as a tree: the run, the model, sampling, the env, the learner's config and the
    chosen task's own options; with the learner's and the task's specs, resolved once here.

    Attributes:
        run, env, model, sampling: `CORYConfig`, `EnvConfig`, `ModelConfig`, `SamplingConfig`.
        update: the learner's config, an instance of its `LearnerSpec.config_class` (`PPOConfig` for ppo and mappo,
            `GRPOConfig` for grpo and magrpo, a plug-in's subclass of `UpdateConfig`); None = that class's defaults.
        task_options: the instance of the chosen task's options class (`cory_env.tasks.TaskSpec.options`, e.g.
            `IMDBOptions` for ``imdb``); None for a task without options (or its defaults, as above).
        unread: options that were given (a YAML file, a preset, an old ``config.yaml``) but belong to another
            learner's or task's options: the run does not read them, and `unread_options` warns about those that
            differ from their default. Not part of `to_flat`.
        learner_spec, task_spec, scheme_spec: the `trainers.learning.registry.LearnerSpec` of ``run.learner``, the
            `cory_env.tasks.TaskSpec` of ``env.task`` and the `trainers.matchmaking.SchemeSpec` of
            ``run.matchmaking`` (a registered name, a ``module:attr`` or an entry point), looked up once when the
            object is built: a mistake there is a `ValueError` before any folder or model.
        scheme_options: the scheme's options as its own dataclass (`trainers.matchmaking.SchemeSpec.options`), from
            ``run.matchmaking_options``; None for a scheme without options.

    Raises:
        TypeError: a section of the wrong class, or a config of another class than the spec declares.
        ValueError: an unknown learner, task or matchmaking scheme (`trainers.learning.registry.learner_spec`,
            `cory_env.tasks.task_spec`, `trainers.matchmaking.SCHEMES`), options the scheme refuses
            (`trainers.matchmaking.scheme_options`), or an options class whose field names clash with another config's.
    """

    run: CORYConfig = field(default_factory=CORYConfig)
    update: Any = None
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    task_options: Any = None
    unread: Mapping[str, Any] = field(default_factory=dict, compare=False)
    learner_spec: Any = field(init=False, repr=False, compare=False)
    task_spec: Any = field(init=False, repr=False, compare=False)
    scheme_spec: Any = field(init=False, repr=False, compare=False)
    scheme_options: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from trainers.learning.registry import learner_spec
        for name, cls in (("run", CORYConfig), ("env", EnvConfig), ("model", ModelConfig),
                          ("sampling", SamplingConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"RunConfigs.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        object.__setattr__(self, "learner_spec", learner_spec(self.run.learner))
        object.__setattr__(self, "task_spec", task_spec(self.env.task))
        object.__setattr__(self, "scheme_spec", SCHEMES.get(self.run.matchmaking))
        options = self.scheme_spec.options
        object.__setattr__(self, "scheme_options", options(**self.run.matchmaking_options) if options else None)
        try:
            object.__setattr__(self, "update", self.learner_spec.args(self.update))
        except TypeError as err:
            raise TypeError(f"RunConfigs.update: learner {self.run.learner!r} {err}") from None
        options_cls = self.task_options_class
        if options_cls is None:
            if self.task_options is not None:
                raise TypeError(f"RunConfigs.task_options: the chosen task reads no options of its own, got a "
                                f"{type(self.task_options).__name__}")
        elif self.task_options is None:
            object.__setattr__(self, "task_options", options_cls())
        elif not isinstance(self.task_options, options_cls):
            raise TypeError(f"RunConfigs.task_options must be a {options_cls.__name__} (what the chosen task "
                            f"declares), got {type(self.task_options).__name__}")
        check_option_names(self.classes())

    @property
    def task_options_class(self) -> type | None:
        return option_class(self.task_spec.options)

    def classes(self) -> list[type]:
        """The config classes of this run, in `sections` order."""
        return [type(section) for section in self.sections()]

    def sections(self) -> list[Any]:
        """The config objects in flat-dict order: env, task options, the learner's config, model, sampling, run."""
        out = [self.env, self.task_options, self.update, self.model, self.sampling, self.run]
        return [section for section in out if section is not None]

    def to_flat(self) -> dict[str, Any]:
        """The flat ``{field: value}`` dict (what ``config.yaml`` and checkpoints record), in `sections` order."""
        return {name: value for section in self.sections() for name, value in dataclasses.asdict(section).items()}

    @classmethod
    def from_flat(cls, flat: dict[str, Any], *, strict: bool = False) -> RunConfigs:
        """The configs from a flat dict; missing fields take their defaults (a run recorded before a field was
        added reads as it ran). Which classes join the base ones follows from the dict's ``learner`` and ``task``
        (their specs); keys of another known learner's or task's own options go to `unread`.

        Args:
            flat: ``{field: value}``, e.g. a run's ``config.yaml``, a checkpoint's ``trainer_state["config"]``, a
                preset.
            strict: raise on keys that are no option of any known config (else they are ignored).

        Raises:
            ValueError: an unknown key with `strict` (the valid ones are listed), an unknown learner or task, or a
                value a config refuses.
        """
        from trainers.learning.registry import learner_spec
        learner = learner_spec(flat.get("learner", CORYConfig.learner))
        task = task_spec(flat.get("task", EnvConfig.task))
        classes = {"env": EnvConfig, "update": learner.config_class, "model": ModelConfig, "sampling": SamplingConfig,
                   "run": CORYConfig, "task_options": option_class(task.options)}
        read = {f.name for c in classes.values() if c is not None for f in dataclasses.fields(c)}
        rest = set(flat) - read
        others = option_fields() if rest else {}
        unknown = sorted(rest - set(others))
        if strict and unknown:
            valid = sorted(read | set(others))
            raise ValueError(f"unknown option(s) {unknown}; valid options: {', '.join(valid)}")
        sections = {name: c(**{f.name: flat[f.name] for f in dataclasses.fields(c) if f.name in flat})
                    for name, c in classes.items() if c is not None}
        return cls(**sections, unread={k: flat[k] for k in sorted(rest) if k in others})


def plugin_origins(configs: RunConfigs) -> dict[str, str]:
    """Where the run's learner, task and reward came from (`cory_env.registry.Registry.origin`: ``module:attr``,
    or an entry point and its distribution); a reward given as a callable is recorded by `reward_name` instead."""
    from trainers.learning.registry import LEARNERS
    out = {"learner": LEARNERS.origin(configs.run.learner), "task": TASKS.origin(configs.env.task)}
    if configs.task_spec.reads and "reward" in configs.task_spec.reads and not configs.env.reward.startswith("<"):
        try:
            out["reward"] = REWARDS.origin(configs.env.reward)
        except ValueError:
            pass  # a reward the run replaced with a callable: config.yaml records its name
    return out
