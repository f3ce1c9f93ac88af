"""``KEY=VALUE`` settings, one parser for every option written that way: scoped overrides (per-seat generation
settings, `EnvConfig.seat_generation`; per-model-slot settings, `trainers.config.ModelConfig.models`) and the flat
options of a plug-in (a matchmaking scheme's ``--matchmaking_options``), one spelling for the command line, YAML and
Python.

* command line: ``--seat_generation observer.temperature=0.7 observer.max_new_tokens=16``, ``--models llm2=tiny
  llm2.use_lora=false`` (``SCOPE=VALUE`` sets the scope's `default_key`, e.g. the model name) and
  ``--matchmaking_options every=10 keep=3`` (no scope);
* YAML and Python: a mapping ``{"observer": {"temperature": 0.7}}``, ``{"llm2": "tiny"}`` (a bare value sets the
  default key), ``{"every": 10}``, or the list of strings above.

`parse_overrides` turns any scoped form into the one canonical ``{scope: {field: value}}`` (scopes and fields
sorted, values converted to the field's type), `parse_options` an unscoped one into ``{field: value}``; the configs
hold that form and ``config.yaml`` records it.

**A list value written as text** (``observer.stop_strings=.,!``, a YAML string where a list is meant) is a comma
list with escapes: ``\\,`` a comma, ``\\n`` a newline, ``\\t`` a tab, ``\\r`` a carriage return, ``\\\\`` a backslash;
or a JSON list of strings, ``["\\n", ","]``. An item that is empty (``a,,b``, a lone ``,``, an empty value) is
refused, never dropped. A value given as a mapping or a list is taken literally.

>>> parse_overrides(["llm2=tiny", "llm2.lora_r=8"], {"model": str, "lora_r": int}, name="models",
...                 default_key="model")
{'llm2': {'lora_r': 8, 'model': 'tiny'}}
>>> parse_overrides(["observer.stop_strings=\\\\n,\\\\,"], {"stop_strings": list[str]}, name="seat_generation")
{'observer': {'stop_strings': ['\\n', ',']}}
>>> parse_options(["every=10"], {"every": int, "keep": int}, name="matchmaking_options")
{'every': 10}
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["convert_value", "override_types", "parse_options", "parse_overrides", "parse_text_list", "unescape"]

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a non-empty string"}
#: The escapes of a list written as text (`parse_text_list`).
_ESCAPES = {",": ",", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_LIST_HELP = ("a comma list (escapes: \\, a comma, \\n a newline, \\t a tab, \\\\ a backslash) or a JSON list of "
              "strings such as [\"\\n\", \",\"]")


def override_types(config_cls: type, names: Sequence[str] | None = None) -> dict[str, Any]:
    """``{field: type}`` of the dataclass `config_cls` (its `names` only, when given): the fields a setting may set,
    for `parse_overrides` / `parse_options`. ``Optional[X]`` reads as X."""
    hints = typing.get_type_hints(config_cls)
    fields = [f.name for f in dataclasses.fields(config_cls)]
    out = {}
    for name in fields if names is None else names:
        hint = hints[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        out[name] = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
    return out


def _is_list(kind: Any) -> bool:
    return typing.get_origin(kind) is list


def parse_text_list(text: str, where: str, *, split: bool = True) -> list[str]:
    """A list written as text (module docstring): a JSON list of strings when it starts with ``[``, else a comma
    list with escapes; `split` False: one item (a command-line list's own item), its escapes read, commas kept.

    Raises:
        ValueError: an empty item, an unknown escape, a JSON value that is not a list of strings (naming `where`).

    >>> parse_text_list("a,b\\,c", "x")
    ['a', 'b,c']
    """
    if split and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}={text!r} is invalid: not a JSON list ({err.msg}); write {_LIST_HELP}") from None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"{where}={text!r} is invalid: a JSON list of strings is needed; write {_LIST_HELP}")
    else:
        items, current, i = [], [], 0
        while i < len(text):
            char = text[i]
            if char == "\\":
                code = text[i + 1:i + 2]
                if code not in _ESCAPES:
                    raise ValueError(f"{where}={text!r} is invalid: unknown escape \\{code} at character {i}; write "
                                     f"{_LIST_HELP}")
                current.append(_ESCAPES[code])
                i += 2
                continue
            if char == "," and split:
                items.append("".join(current))
                current = []
            else:
                current.append(char)
            i += 1
        items.append("".join(current))
    if not items or any(item == "" for item in items):
        raise ValueError(f"{where}={text!r} is invalid: it holds an empty item (nothing between two commas, or no "
                         f"value at all), which would be dropped; write {_LIST_HELP}")
    return items


def unescape(text: str, where: str) -> str:
    """One item of a command-line list (``--stop_strings '\\n' .``): its escapes read (``\\n`` a newline, ...).

    Raises:
        ValueError: an empty item or an unknown escape.
    """
    return parse_text_list(text, where, split=False)[0]


def convert_value(value: Any, kind: Any, where: str) -> Any:
    """`value` as `kind` (str values from the command line are converted; others must already be of the kind; a
    ``list[str]`` takes a list of non-empty strings or one string written as `parse_text_list` reads).

    Raises:
        ValueError: ``WHERE=VALUE is invalid: use a KIND`` (an empty string or list item is refused, never dropped).
    """
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
    elif kind in (int, float):
        numeric = (int, float) if kind is float else int  # an int is a float's value, a float no int's
        if isinstance(value, numeric) and not isinstance(value, bool):
            return kind(value)
        if isinstance(value, str):
            try:
                return kind(value.strip())
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, str) and value.strip():
            return value.strip()
    elif _is_list(kind):  # list[str]: a list, or one value written as text
        if isinstance(value, str):
            return parse_text_list(value, where)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
            return list(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}={list(value)!r} is invalid: it holds an empty string, which would be "
                             "dropped; give non-empty strings")
    else:
        return value
    raise ValueError(f"{where}={value!r} is invalid: use {_KINDS.get(kind, _LIST_HELP)}")


def _entries(value: Any, name: str, *, scoped: bool, example: str) -> list[tuple[str | None, str | None, Any, str]]:
    """(scope, field, value, as written) of each entry of a setting; `scoped` False: no scope (``KEY=VALUE``)."""
    form = "SCOPE.FIELD=VALUE" if scoped else "KEY=VALUE"
    if isinstance(value, str):
        value = [value]
    entries = []
    if isinstance(value, Mapping):
        for key, settings in value.items():
            if scoped and isinstance(settings, Mapping):
                entries += [(str(key), str(k), v, f"{key}.{k}") for k, v in settings.items()]
            else:
                entries.append((str(key), None, settings, str(key)) if scoped else (None, str(key), settings, str(key)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"{name} entry {item!r} is invalid: write {form} ({'e.g. ' * scoped}{example})")
            key, val = item.split("=", 1)
            if scoped:
                scope, _, field = key.partition(".")
                entries.append((scope.strip(), field.strip() or None, val, key))
            else:
                entries.append((None, key.strip(), val, item))
    else:
        raise ValueError(f"{name}={value!r} is invalid: give a mapping or a list of {form} strings "
                         f"({'e.g. ' * scoped}{example})")
    return entries


def _converted(value: Any, kind: Any, where: str) -> Any:
    """An entry's value: text written on the command line is stripped, but a list's text is read as written (a
    space or a newline may be a stop string)."""
    if isinstance(value, str) and not _is_list(kind):
        value = value.strip()
    return convert_value(value, kind, where)


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
            scope (with `scopes`), a value of the wrong type or empty, or one field set twice.
    """
    if value is None:
        return None
    example = "llm2=tiny llm2.use_lora=false" if name == "models" else "observer.temperature=0.7"
    out: dict[str, dict[str, Any]] = {}
    for scope, field, val, written in _entries(value, name, scoped=True, example=example):
        if not scope:
            raise ValueError(f"{name} entry {written!r} names no scope: write SCOPE.FIELD=VALUE (e.g. {example})")
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
        out.setdefault(scope, {})[field] = _converted(val, types[field], f"{name} {scope}.{field}")
    return {scope: dict(sorted(fields.items())) for scope, fields in sorted(out.items())} or None


def parse_options(value: Any, types: Mapping[str, Any], *, name: str, owner: str = "", example: str = ""
                  ) -> dict[str, Any]:
    """The ``{field: value}`` of an unscoped ``KEY=VALUE`` setting (a plug-in's own options): a mapping, one
    ``KEY=VALUE`` string or a list of them; str values converted to the field's type (`convert_value`).

    Args:
        value: None or empty (no option given: ``{}``), a mapping, or ``KEY=VALUE`` strings.
        types: the valid keys -> their type (`override_types` of the options dataclass).
        name: the option's name, for messages; owner: whose options they are (``'uniform'``), for messages;
            example: an example entry list for them.

    Raises:
        ValueError: an entry that is not ``KEY=VALUE``, an unknown key (the valid ones listed), a key given twice, a
            value of the wrong type or empty.
    """
    if value is None or (isinstance(value, (str, list, tuple, Mapping)) and len(value) == 0):
        return {}
    example = example or " ".join(f"{k}=..." for k in types)
    of = f" of {owner}" if owner else ""
    out: dict[str, Any] = {}
    for _, key, val, written in _entries(value, name, scoped=False, example=f"for {owner}: {example}" if owner
                                         else example):
        if key not in types:
            raise ValueError(f"{name} entry {written}: {key!r} is not an option{of}; valid: {', '.join(types)}")
        if key in out:
            raise ValueError(f"{name} sets {key} twice; give it once")
        out[key] = _converted(val, types[key], f"{name} {key}")
    return out
