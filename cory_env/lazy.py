"""Lazy package exports: a package's public names imported on first use (PEP 562 module ``__getattr__``), so that
``import trainers`` or ``import agents`` stays cheap (``cory train --help`` imports no model code).

>>> getattr_ = lazy_exports("pkg", {"dumps": "json"})
>>> getattr_("dumps").__name__
'dumps'
>>> getattr_("nothing")
Traceback (most recent call last):
...
AttributeError: module 'pkg' has no attribute 'nothing'
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of `package`: name -> the attribute of that name of the module `exports` maps it
    to, imported when first read.

    Raises (the returned function):
        AttributeError: a name not in `exports`, as for any module attribute.
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
