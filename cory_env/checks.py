"""The one numeric check of the public API: configs, seatings, tasks and rewards take a number only when it is one.

A number given as text (``"1e3"``, ``("11", "11")`` read character by character), a bool where a count or a weight is
meant (``True`` is 1 to Python), NaN, ±inf, or a finite value so large that a product overflows (a reward weight of
1e308 makes R = M · r infinite): each is refused with a `ValueError` naming the field, the value and the fix.

>>> check_number(2, "lora_r", integer=True, low=1)
2
>>> check_number("1e3", "learning_rate")
Traceback (most recent call last):
...
ValueError: learning_rate must be a number, got '1e3' (str); write it without quotes
"""

from __future__ import annotations

import math
import numbers

__all__ = ["MAX_MAGNITUDE", "MAX_REWARD", "check_number", "check_path"]

#: The largest magnitude a weight (a reward-matrix entry, a loss coefficient) may have.
MAX_MAGNITUDE = 1e6
#: The largest magnitude a task reward may have: rewards in small units (3e6 micro-units) are legitimate, and a
#: reward times a weight summed over 256 seats (2.6e20) stays far from float32's 3.4e38 and float64's 1.8e308.
MAX_REWARD = 1e12


def check_number(value, name: str, *, integer: bool = False, low: float | None = None, high: float | None = None,
                 bounded: bool = False, fix: str = "") -> int | float:
    """`value` as an int (`integer`) or a float, if it is a real number of that kind in range.

    Args:
        value: a Python or numpy number; never a bool, a str or bytes.
        name: the field, for the message.
        integer: an int is required (``3.0`` is refused).
        low, high: inclusive bounds.
        bounded: the magnitude must be at most `MAX_MAGNITUDE` (weights, rewards: what gets multiplied).
        fix: what to do, appended to the message.

    Raises:
        ValueError: naming `name`, the value, its type and the fix.
    """
    hint = f"; {fix}" if fix else ""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        quoted = "; write it without quotes" if isinstance(value, (str, bytes)) else ""
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r} "
                         f"({type(value).__name__}){quoted}{hint}")
    if integer and not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__}){hint}")
    out = int(value) if integer else float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name}={value!r} is invalid: use a finite number{hint}")
    if bounded and abs(out) > MAX_MAGNITUDE:
        raise ValueError(f"{name}={value!r} is too large: use a magnitude of at most {MAX_MAGNITUDE:g} (larger "
                         f"weights and rewards overflow a product to inf){hint}")
    if low is not None and out < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}{hint}")
    if high is not None and out > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}{hint}")
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
