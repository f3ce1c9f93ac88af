"""Options a run does not read, named at its start instead of being ignored silently.

Nothing here is a table of combinations: every message is derived from a declaration that lives with what it declares.

* **the learner's spec** (`trainers.learning.registry.LearnerSpec`): whether it trains a value head
  (``value_head_dropout``); what it reads is its config class (`trainers.learning.configs`), so a learner never
  lists what it ignores;
* **the task's spec** (`cory_env.tasks.TaskSpec.reads`): which optional `EnvConfig` fields it reads (``data_path``,
  ``reward``, ``heldout_fraction``, ...);
* **another spec's options** carried by a YAML file or a preset into this run (`RunConfigs.unread`: ``group_size``
  with ``--learner ppo``, ``min_review_chars`` with ``--task gsm8k``; given as a flag, they are an error);
* **a field's own rule**, declared beside the fields of its config class: ``_unread_when = {field: (configs, seating) ->
  reason or None}``, checked when the field differs from its default (``lora_r`` without ``use_lora``), and
  ``_unread_always``, checked at any value (a default ``role_exchange_period`` that ``num_iterations`` never reaches);
  the model options' rules hold for a model slot's own options too (``--models llm2.lora_r=8`` in a slot without LoRA).

An option counts only when it differs from its default (``inert_always`` aside), so the defaults and the presets are
quiet. One message per reason, naming the options, their values, why, and what to change.

>>> from cory_env.seating import Seating
>>> from trainers.config import RunConfigs
>>> unread_options(RunConfigs.from_flat({"num_iterations": 3}), Seating.cory())[0][:75]
'role_exchange_period=5 does nothing with num_iterations=3: no role exchange'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cory_env.seating import Seating
from cory_env.tasks import OPTIONAL_ENV_FIELDS
from trainers.config import RunConfigs, option_fields

__all__ = ["unread_options"]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _field_reasons(configs: RunConfigs, seating: Seating) -> list[tuple[str, Any, str]]:
    """(field, value, reason) of every field whose own metadata rule says it does nothing."""
    out = []
    for section in configs.sections():
        always, when = getattr(section, "_unread_always", {}), getattr(section, "_unread_when", {})
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            rules = [always.get(f.name)]
            if value != _default(f):
                rules.append(when.get(f.name))
            for rule in filter(None, rules):
                reason = rule(configs, seating)
                if reason:
                    out.append((f.name, value, reason))
                    break
    return out


def _slot_reasons(configs: RunConfigs, seating: Seating) -> list[tuple[str, Any, str]]:
    """(``slot.field``, value, reason) of every model slot's own option (``--models llm2.lora_r=8``) that
    ``ModelConfig._unread_when`` says does nothing in that slot."""
    out = []
    rules = getattr(type(configs.model), "_unread_when", {})
    for slot, options in (configs.model.models or {}).items():
        model = dataclasses.replace(configs.model, **options, models=None)
        own = dataclasses.replace(configs, model=model)
        for key, value in options.items():
            reason = rules[key](own, seating) if key in rules else None
            if reason:
                out.append((f"{slot}.{key}", value, f"{reason} in slot {slot} (set {slot}.use_lora=true)"
                            if "use_lora" in reason else f"{reason} in slot {slot}"))
    return out


def _spec_reasons(configs: RunConfigs) -> list[tuple[str, Any, str]]:
    """(field, value, reason) of the options the chosen learner's and task's specs say they do not read, and of the
    options given for another learner or task."""
    spec, name = configs.learner_spec, configs.run.learner
    learner = (f"not read by learner={name!r} (it trains no value head; `cory train --learner {name} --help` lists "
               "what it reads)")
    out = []
    if not spec.value_head and not configs.model.disable_dropout and configs.model.value_head_dropout != \
            _default(next(f for f in dataclasses.fields(configs.model) if f.name == "value_head_dropout")):
        out.append(("value_head_dropout", configs.model.value_head_dropout, learner))
    task = configs.env.task
    reads = configs.task_spec.reads
    for f in dataclasses.fields(configs.env):
        value = getattr(configs.env, f.name)
        if f.name in OPTIONAL_ENV_FIELDS and f.name not in reads and value != _default(f):
            out.append((f.name, value, f"not read by task={task!r} (its TaskSpec reads {list(reads) or 'none of them'})"))
    others = option_fields() if configs.unread else {}
    for key, value in configs.unread.items():
        owner, who = others[key]
        if value != _default(next(f for f in dataclasses.fields(owner) if f.name == key)):
            out.append((key, value, f"read by {' and '.join(who)} only (this run: learner={name!r}, task={task!r})"))
    return out


def unread_options(configs: RunConfigs, seating: Seating) -> list[str]:
    """Messages for the options that do nothing in the run of `configs` and `seating` (its
    `cory_env.seating.config_seating`): one per reason, naming every option it covers with its value, in config
    order; empty when every option counts."""
    by_reason: dict[str, list[str]] = {}
    for name, value, reason in _field_reasons(configs, seating) + _slot_reasons(configs, seating) + \
            _spec_reasons(configs):
        entry = f"{name}={value!r}"
        if entry not in by_reason.setdefault(reason, []):
            by_reason[reason].append(entry)
    return [f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} nothing"
            f"{' ' if reason.startswith('with') else ': '}{reason}" for reason, names in by_reason.items()]
