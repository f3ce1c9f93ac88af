"""`Registry`: names -> plug-in specs, for learners, tasks and rewards alike.

A name given to ``--learner``, ``--task`` or ``--reward`` is looked up in this order:

1. a **registered name** (the built-in entries, or one added with `Registry.register`);
2. an **importable** ``"module:attr"`` (``mypkg.learners:SPEC``), imported on first use;
3. a **Python entry point** of the registry's group (``cory.learners``, ``cory.tasks``, ``cory.rewards``), the way
   pytest and setuptools find plug-ins: an installed package declares, in its ``pyproject.toml``,

   .. code-block:: toml

       [project.entry-points."cory.learners"]
       reinforce = "mypkg.learners:REINFORCE"

   and ``--learner reinforce`` finds it without any edit to this project.

Every failure is a `ValueError` naming the kind, the name, the problem and the fix: an unknown name (the known ones
listed), a ``module:attr`` that does not import, an object of the wrong kind (a task where a learner is expected),
two plug-ins (or a plug-in and a built-in entry) claiming one name, a name registered in this process
(`register_learner`, ...) that an installed package's entry point already claims. An installed plug-in that does not
load is an error only for a run that names it: listings (`Registry.items`, ``--help``, the options every plug-in
declares) log it once and leave it out. `Registry.origin` is what a run records, so that ``--resume`` and ``cory
eval`` find the same object again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from typing import Any, Callable, Generic, Iterator, TypeVar

__all__ = ["PluginContractError", "Registry", "import_object"]

T = TypeVar("T")

logger = logging.getLogger(__name__)


def import_object(spec: str, *, kind: str = "object") -> Any:
    """The object ``"module:qualified.name"`` names.

    >>> import_object("cory_env.registry:Registry").__name__
    'Registry'

    Raises:
        ValueError: `spec` is not ``module:attr``, or the module does not import, or it lacks the attribute (the
            message names `kind`, the spec and the cause).
    """
    module_name, colon, qualname = spec.partition(":")
    if not colon or not module_name or not qualname:
        raise ValueError(f"{kind} {spec!r} is not 'module:attr'; write e.g. mypkg.plugins:{kind.upper()}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"{kind} {spec!r}: module {module_name!r} does not import ({type(err).__name__}: {err}); "
                         "install the package that provides it or put its folder on PYTHONPATH") from err
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{kind} {spec!r}: module {module_name!r} has no attribute {qualname!r}; check the "
                             "name after the colon") from None
    return obj


class PluginContractError(TypeError, ValueError):
    """A plug-in (a task builder, a learner factory) returned an object of the wrong kind: a `TypeError` (the wrong
    kind of object) and a `ValueError`, which ``cory`` reports in one line with exit status 2 before any folder."""


class Registry(Generic[T]):
    """Plug-in specs of one kind, by name (see the module docstring).

    Args:
        kind: what the entries are, for messages (``"learner"``).
        spec_type: the class every entry must be an instance of (`trainers.learning.learners.LearnerSpec`, ...).
        group: the entry-point group plug-in packages register under (``"cory.learners"``).
        coerce: turns an imported object that is not a `spec_type` into one (e.g. a plain reward function into a
            reward spec), or returns None when it cannot; None: only `spec_type` instances are accepted.
        option: the command-line option that takes the name (``"--learner"``), for messages.

    The built-in entries may be given as ``"module:attr"`` strings: they are imported on first use, so an entry
    whose module needs an extra package costs nothing until it is asked for.
    """

    def __init__(self, kind: str, spec_type: type, group: str, *, option: str,
                 coerce: Callable[[Any], T | None] | None = None) -> None:
        self.kind, self.spec_type, self.group, self.option = kind, spec_type, group, option
        self._coerce = coerce
        self._entries: dict[str, T | str] = {}  # name -> spec, or "module:attr" of a built-in not yet imported
        self._origins: dict[str, str] = {}  # name -> where it came from (module:attr, or the entry point)
        self._entry_points: dict[str, importlib.metadata.EntryPoint] | None = None
        self._builtins: set[str] = set()  # names registered with plugin=False (the package's own entries)
        self._broken: set[str] = set()  # entries a listing could not load (logged once)

    # ----- adding ---------------------------------------------------------------------------------------------
    def register(self, name: str, spec: T | str, *, overwrite: bool = False, origin: str | None = None,
                 plugin: bool = False) -> None:
        """Add `spec` (a `spec_type`, or a lazy ``"module:attr"`` string) as `name`.

        Args:
            plugin: a registration by a user or a plug-in in this process (`register_learner`, `register_task`,
                `register_reward`): an installed package's entry point of that name is a taken name too. False for
                the package's own (built-in) entries, which are registered on import: an entry point that claims
                one of them is refused when the entry points are read (`entry_points`).

        Raises:
            ValueError: an empty name, a name with a colon (``module:attr`` is how an unregistered object is named),
                or, without `overwrite`, a name already registered or (with `plugin`) an installed entry point's
                (naming both).
            TypeError: `spec` of the wrong type.
        """
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"{self.kind} name must be a non-empty str without ':', got {name!r}")
        if not isinstance(spec, str):
            spec = self._checked(spec, name)
        new = origin or (spec if isinstance(spec, str) else self._describe(spec))
        if not overwrite:
            if name in self._entries:
                taken = self._origins.get(name, "built-in")
            elif plugin and name in self.entry_points():
                point = self.entry_points()[name]
                taken = f"{point.value} (entry point of {_dist(point)})"
            else:
                taken = None
            if taken is not None:
                raise ValueError(f"two {self.kind}s are registered as {name!r}: {taken} and {new}; rename one, or "
                                 "pass overwrite=True to replace it")
        self._entries[name] = spec
        self._origins[name] = new
        if not plugin:
            self._builtins.add(name)

    # ----- looking up -----------------------------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The spec `name` names: a registered name, an importable ``module:attr``, or an entry point.

        Raises:
            ValueError: see the module docstring.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.option} must be a {self.kind} name, got {name!r}")
        if name in self._entries:
            entry = self._entries[name]
            if isinstance(entry, str):  # a built-in imported on first use
                entry = self._entries[name] = self._checked(import_object(entry, kind=self.kind), name)
            return entry
        if ":" in name:
            spec = self._checked(import_object(name, kind=self.kind), name)
            self._entries[name], self._origins[name] = spec, name
            return spec
        point = self.entry_points().get(name)
        if point is None:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {', '.join(self.names())}; or give "
                             f"an importable module:attr, or install a package that registers it under the entry "
                             f"point group {self.group!r}")
        try:
            loaded = point.load()
        except Exception as err:  # noqa: BLE001 - a broken plug-in is reported with its name
            raise ValueError(f"{self.kind} {name!r} (entry point {point.value!r} of {_dist(point)}) does not load "
                             f"({type(err).__name__}: {err}); reinstall or fix that package") from err
        spec = self._checked(loaded, name)
        self._entries[name], self._origins[name] = spec, f"{point.value} (entry point of {_dist(point)})"
        return spec

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except ValueError:
            return False
        return True

    def names(self) -> list[str]:
        """Registered names, then the entry points' (not loaded), in order; ``module:attr`` names already used
        are left out."""
        own = [n for n in self._entries if ":" not in n]
        return own + [n for n in self.entry_points() if n not in self._entries]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        """(name, spec) of every registered name and entry point (loading them). One that does not load (a broken
        plug-in package, a built-in whose extra package is missing) is logged once and left out: `get` raises for
        it, so only a run that names it fails."""
        out = []
        for name in self.names():
            try:
                out.append((name, self.get(name)))
            except ValueError as err:
                if name not in self._broken:
                    self._broken.add(name)
                    logger.warning("%s; left out of the %ss listed here (only a run that names it fails)", err,
                                   self.kind)
        return out

    def imported(self) -> list[tuple[str, T]]:
        """(name, spec) of the ``module:attr`` names looked up in this process (`get`), which `names` and `items`
        leave out (nobody registered them); with `items`, every spec this process knows."""
        return [(name, spec) for name, spec in self._entries.items() if ":" in name and not isinstance(spec, str)]

    def values(self) -> list[T]:
        return [spec for _, spec in self.items()]

    def __len__(self) -> int:
        return len(self.names())

    def origin(self, name: str) -> str:
        """Where `name` came from: ``"module:attr"`` (built-ins and imported names), ``"<value> (entry point of
        <distribution>)"``, or a description of an object registered by hand; what a run records."""
        self.get(name)
        return self._origins[name]

    def entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The installed packages' entry points of `group`, by name (read once).

        Raises:
            ValueError: two distributions declare one name, or an entry point takes a built-in name (naming both).
        """
        if self._entry_points is None:
            found: dict[str, importlib.metadata.EntryPoint] = {}
            for point in importlib.metadata.entry_points(group=self.group):
                if point.name in found and found[point.name].value != point.value:
                    raise ValueError(f"two installed packages register the {self.kind} {point.name!r} (entry point "
                                     f"group {self.group!r}): {found[point.name].value} from "
                                     f"{_dist(found[point.name])} and {point.value} from {_dist(point)}; uninstall "
                                     "one of them")
                if point.name in self._builtins:
                    raise ValueError(f"the installed package {_dist(point)} registers the {self.kind} {point.name!r} "
                                     f"({point.value}), which is a built-in {self.kind} "
                                     f"({self._origins[point.name]}); that package must choose another name")
                found[point.name] = point
            self._entry_points = found
        return self._entry_points

    def snapshot(self) -> tuple[dict, dict]:
        """The entries as they are now, for `restore` (a test registers plug-ins, then puts the registry back)."""
        return dict(self._entries), dict(self._origins)

    def restore(self, snapshot: tuple[dict, dict]) -> None:
        """Put the entries back as `snapshot` took them, and read the entry points again."""
        self._entries, self._origins = dict(snapshot[0]), dict(snapshot[1])
        self._builtins &= set(self._entries)
        self._entry_points = None
        self._broken = set()

    def refresh(self) -> None:
        """Read the entry points again (after installing a plug-in package in this process)."""
        self._entry_points = None
        self._broken = set()
        importlib.invalidate_caches()

    # ----- helpers --------------------------------------------------------------------------------------------
    def _checked(self, obj: Any, name: str) -> T:
        if isinstance(obj, self.spec_type):
            return obj
        coerced = self._coerce(obj) if self._coerce is not None else None
        if coerced is not None:
            return coerced
        raise ValueError(f"{self.kind} {name!r} is a {type(obj).__name__}, not a {self.spec_type.__name__}; "
                         f"{self.option} takes a {self.spec_type.__name__} (see docs/extending.md)")

    @staticmethod
    def _describe(spec: Any) -> str:
        module = getattr(spec, "__module__", None) or type(spec).__module__
        return f"an object from {module}"


def _dist(point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"
