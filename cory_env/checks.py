"""The one value check of the public API: configs, seatings, tasks, rewards, samplers and the maths take a value
only when it is one, and refuse it in one message form, ``{name}={value!r} is invalid: {fix}``.

`check_field` is the form; `check_number` builds on it for numbers: a number given as text (``"1e3"``,
``("11", "11")`` read character by character), a bool where a count or a weight is meant (``True`` is 1 to Python),
NaN, ±inf, a finite value so large that a product overflows (a reward weight of 1e308 makes R = M · r infinite), or
one out of its range is refused naming the field, the value and the fix.

>>> check_number(2, "lora_r", integer=True, low=1)
2
>>> check_number("1e3", "learning_rate")
Traceback (most recent call last):
...
ValueError: learning_rate='1e3' is invalid: use a number (got str); write it without quotes
>>> check_number(1.0, "top_p", above=0, high=1)
1.0
>>> check_number(0, "top_p", above=0, high=1)
Traceback (most recent call last):
...
ValueError: top_p=0 is invalid: use a value in (0, 1]
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import typing

__all__ = ["MAX_MAGNITUDE", "MAX_REWARD", "check_field", "check_finite_fields", "check_flag", "check_groups",
           "check_number", "check_path"]

#: The largest magnitude a weight (a reward-matrix entry, a loss coefficient) may have.
MAX_MAGNITUDE = 1e6
#: The largest magnitude a task reward may have: rewards in small units (3e6 micro-units) are legitimate, and a
#: reward times a weight summed over 256 seats (2.6e20) stays far from float32's 3.4e38 and float64's 1.8e308.
MAX_REWARD = 1e12


def check_field(cond: bool, name: str, value, fix: str) -> None:
    """Raise ``ValueError(f"{name}={value!r} is invalid: {fix}")`` unless `cond`: the one message form of every
    value check (configs, seatings, tasks, samplers, the maths' scalars)."""
    if not cond:
        raise ValueError(f"{name}={value!r} is invalid: {fix}")


def check_flag(value, name: str) -> bool:
    """`value` if it is a bool (``"no"`` or 1 would read as True); `check_field`'s error otherwise."""
    check_field(isinstance(value, bool), name, value, f"use True or False (got {type(value).__name__})")
    return value


def _bound(x: float) -> str:
    return str(x) if isinstance(x, numbers.Integral) else f"{x:g}"


def _range(low, high, above, below) -> str:
    """``">= 1"``, ``"> 0"``, ``"in [0, 1)"``, ...: the range the bounds describe ("" when none)."""
    lo = f"[{_bound(low)}" if low is not None else f"({_bound(above)}" if above is not None else None
    hi = f"{_bound(high)}]" if high is not None else f"{_bound(below)})" if below is not None else None
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>=' if lo[0] == '[' else '>'} {lo[1:]}"
    if hi:
        return f" {'<=' if hi[-1] == ']' else '<'} {hi[:-1]}"
    return ""


def check_number(value, name: str, *, integer: bool = False, low: float | None = None, high: float | None = None,
                 above: float | None = None, below: float | None = None, bounded: bool = False,
                 fix: str = "") -> int | float:
    """`value` as an int (`integer`) or a float, if it is a real number of that kind in range.

    Args:
        value: a Python or numpy number; never a bool, a str or bytes.
        name: the field, for the message.
        integer: an int is required (``3.0`` is refused).
        low, high: inclusive bounds. above, below: exclusive bounds.
        bounded: the magnitude must be at most `MAX_MAGNITUDE` (weights, rewards: what gets multiplied).
        fix: what else to do, appended to the message.

    Raises:
        ValueError: ``{name}={value!r} is invalid: use ...`` (`check_field`'s form), naming the kind or range and
        `fix`.
    """
    hint = f"; {fix}" if fix else ""
    kind = "an integer" if integer else "a number"
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        quoted = "; write it without quotes" if isinstance(value, (str, bytes)) else ""
        check_field(False, name, value, f"use {kind} (got {type(value).__name__}){quoted}{hint}")
    check_field(not integer or isinstance(value, numbers.Integral), name, value,
                f"use {kind} (got {type(value).__name__}){hint}")
    out = int(value) if integer else float(value)
    check_field(integer or math.isfinite(out), name, value, f"use a finite number{hint}")  # an int always is
    check_field(not bounded or abs(out) <= MAX_MAGNITUDE, name, value,
                f"use a magnitude of at most {MAX_MAGNITUDE:g} (larger weights and rewards overflow a product to "
                f"inf){hint}")
    check_field((low is None or out >= low) and (high is None or out <= high) and (above is None or out > above)
                and (below is None or out < below), name, value,
                f"use {'an integer' if integer else 'a value'}{_range(low, high, above, below)}{hint}")
    return out


def check_path(path, name: str, *, kind: str = "file", fix: str = "") -> "Path":
    """`path` as a `pathlib.Path` when it exists, is of `kind` (``"file"`` or ``"folder"``) and can be read; else
    an error that says what is wrong with it (missing, the other kind, unreadable) and `fix`.

    Raises:
        FileNotFoundError: nothing there. IsADirectoryError: a folder where a file is expected.
        NotADirectoryError: a file where a folder is expected (or on its path). PermissionError: it, or a folder on
        its path, cannot be read. ValueError: a file option given a pipe, socket or device.
    """
    import os
    from pathlib import Path
    import stat
    path = Path(path)
    hint = f"; {fix}" if fix else ""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} {str(path)!r} does not exist{hint}") from None
    except NotADirectoryError:
        raise NotADirectoryError(f"{name} {str(path)!r}: a folder on its path is a file{hint}") from None
    except PermissionError:
        raise PermissionError(f"{name} {str(path)!r} cannot be reached: a folder on its path cannot be read "
                              f"(permissions){hint}") from None
    if kind == "file" and stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{name} {str(path)!r} is a folder, not a file{hint}")
    if kind == "folder" and not stat.S_ISDIR(mode):
        raise NotADirectoryError(f"{name} {str(path)!r} is a file, not a folder{hint}")
    if kind == "file" and not stat.S_ISREG(mode):  # a FIFO would block the reader, a device never ends
        raise ValueError(f"{name} {str(path)!r} is not a regular file (a pipe, socket or device){hint}")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{name} {str(path)!r} cannot be read (permissions){hint}")
    return path


def check_groups(rows: int, group_size, *, fix: str = "choose batch_size as a multiple of group_size") -> int:
    """The one group rule: `group_size` k (returned) is an int >= 1 and `rows` B splits into groups of k consecutive
    rows (each group answers one query k times: GRPO's samples per query). Checked by
    `trainers.learning.configs.GRPOConfig` before a run, and at the env's and the group maths' inputs.

    Raises:
        ValueError: naming B, k and `fix`.

    >>> check_groups(16, 4)
    4
    """
    group_size = check_number(group_size, "group_size", integer=True, low=1, fix=fix)
    if rows % group_size:
        raise ValueError(f"{rows} rows (batch_size) do not split into groups of group_size={group_size}; {fix}")
    return int(group_size)


def check_finite_fields(config: object) -> None:
    """Raise `ValueError` naming the first field of the dataclass `config` whose value is not of its declared kind:
    a bool field takes a bool, an int field an int (not a bool, not a str), a float field a finite number
    (`cory_env.checks.check_number`), a str field a str; an Optional field also None.

    Every config calls it first in ``__post_init__``: ``inf`` passes a ``> 0`` check, NaN fails every comparison
    silently, and ``"1e3"`` or ``True`` would be read as something else.
    """
    hints = _type_hints(type(config))
    for f in dataclasses.fields(config):
        value, hint = getattr(config, f.name), hints.get(f.name)
        args = typing.get_args(hint)
        if args and type(None) in args:
            if value is None:
                continue
            hint = next(a for a in args if a is not type(None))
        if hint is bool:
            check_flag(value, f.name)
        elif hint in (int, float):
            check_number(value, f.name, integer=hint is int, fix="see --help for its range")
        elif hint is str:
            check_field(isinstance(value, str), f.name, value, f"use a str (got {type(value).__name__})")


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict:
    return typing.get_type_hints(cls)
