"""Scoped overrides: per-seat generation settings (`EnvConfig.seat_generation`) and per-model-slot settings
(`trainers.config.ModelConfig.models`), one spelling for the command line, YAML and Python.

A scoped override sets one field of one scope (a seat such as ``observer``, a model slot such as ``llm2``):

* command line: ``--seat_generation observer.temperature=0.7 observer.max_new_tokens=16`` and
  ``--models llm2=tiny llm2.use_lora=false`` (``SCOPE=VALUE`` sets the scope's `default_key`, e.g. the model name);
* YAML and Python: a mapping ``{"observer": {"temperature": 0.7}}``, ``{"llm2": "tiny"}`` (a bare value sets the
  default key) or the list of strings above.

`parse_overrides` turns any of them into the one canonical form ``{scope: {field: value}}`` (scopes and fields
sorted, values converted to the field's type), which the configs hold and ``config.yaml`` records.

>>> parse_overrides(["llm2=tiny", "llm2.lora_r=8"], {"model": str, "lora_r": int}, name="models",
...                 default_key="model")
{'llm2': {'lora_r': 8, 'model': 'tiny'}}
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["convert_value", "override_types", "parse_overrides"]

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def override_types(config_cls: type, names: Sequence[str] | None = None) -> dict[str, Any]:
    """``{field: type}`` of the dataclass `config_cls` (its `names` only, when given): the fields a scope may set,
    for `parse_overrides`. ``Optional[X]`` reads as X."""
    hints = typing.get_type_hints(config_cls)
    fields = [f.name for f in dataclasses.fields(config_cls)]
    out = {}
    for name in fields if names is None else names:
        hint = hints[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        out[name] = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
    return out


def convert_value(value: Any, kind: Any, where: str) -> Any:
    """`value` as `kind` (str values from the command line are converted; others must already be of the kind; a
    ``list[str]`` takes a list of strings or one comma-separated string).

    Raises:
        ValueError: ``WHERE=VALUE is invalid: use a KIND``.
    """
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
    elif kind in (int, float):
        numeric = (int, float) if kind is float else int  # an int is a float's value, a float no int's
        if isinstance(value, numeric) and not isinstance(value, bool):
            return kind(value)
        if isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, str):
            return value
    elif typing.get_origin(kind) is list:  # list[str]: a list, or one value (the command line: comma-separated)
        if isinstance(value, str):
            return [v for v in value.split(",") if v]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
    else:
        return value
    raise ValueError(f"{where}={value!r} is invalid: use "
                     f"{_KINDS.get(kind, 'a list of strings (or one comma-separated string)')}")


def parse_overrides(value: Any, types: Mapping[str, Any], *, name: str, default_key: str | None = None,
                    scopes: Sequence[str] | None = None) -> dict[str, dict[str, Any]] | None:
    """The canonical ``{scope: {field: value}}`` of a scoped override (see the module docstring).

    Args:
        value: None, a mapping ``{scope: {field: value} | value}``, or a list of ``"SCOPE.FIELD=VALUE"`` /
            ``"SCOPE=VALUE"`` strings.
        types: the fields a scope may set -> their type (`override_types`); str values are converted to it.
        name: the option's name, for messages (``seat_generation``, ``models``).
        default_key: the field ``SCOPE=VALUE`` (a bare value) sets; None: a field must be named.
        scopes: the valid scope names, when known here (else the caller checks them).

    Returns:
        None for None or an empty value, else the sorted mapping.

    Raises:
        ValueError: naming the entry: not ``SCOPE.FIELD=VALUE``, an unknown field (the valid ones listed), an unknown
            scope (with `scopes`), a value of the wrong type, or one field set twice.
    """
    if value is None:
        return None
    entries: list[tuple[str, str | None, Any, str]] = []  # scope, field, value, as written
    if isinstance(value, Mapping):
        for scope, settings in value.items():
            if isinstance(settings, Mapping):
                entries += [(str(scope), str(k), v, f"{scope}.{k}") for k, v in settings.items()]
            else:
                entries.append((str(scope), None, settings, str(scope)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"{name} entry {item!r} is invalid: write SCOPE.FIELD=VALUE (e.g. "
                                 f"{_example(name)})")
            key, val = item.split("=", 1)
            scope, _, field = key.partition(".")
            entries.append((scope.strip(), field.strip() or None, val.strip(), key))
    else:
        raise ValueError(f"{name}={value!r} is invalid: give a mapping {{scope: {{field: value}}}} or a list of "
                         f"SCOPE.FIELD=VALUE strings (e.g. {_example(name)})")
    out: dict[str, dict[str, Any]] = {}
    for scope, field, val, written in entries:
        if not scope:
            raise ValueError(f"{name} entry {written!r} names no scope: write SCOPE.FIELD=VALUE (e.g. "
                             f"{_example(name)})")
        if scopes is not None and scope not in scopes:
            raise ValueError(f"{name} entry {written!r}: {scope!r} is not one of {list(scopes)}; name one of them")
        if field is None:
            if default_key is None:
                raise ValueError(f"{name} entry {written!r} names no field: write {scope}.FIELD=VALUE with a field "
                                 f"of {sorted(types)}")
            field = default_key
        if field not in types:
            raise ValueError(f"{name} entry {written!r}: {field!r} is not a setting here; valid: "
                             f"{', '.join(sorted(types))}")
        if field in out.get(scope, {}):
            raise ValueError(f"{name} sets {scope}.{field} twice; give it once")
        out.setdefault(scope, {})[field] = convert_value(val, types[field], f"{name} {scope}.{field}")
    return {scope: dict(sorted(fields.items())) for scope, fields in sorted(out.items())} or None


def _example(name: str) -> str:
    return "llm2=tiny llm2.use_lora=false" if name == "models" else "observer.temperature=0.7"
