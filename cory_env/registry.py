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
two installed packages claiming one name, a name registered in this process (`register_learner`, ...) that is taken
(a built-in, an earlier registration, an installed package's entry point).

**A plug-in costs nothing until it is named.** Reading the entry points imports nothing and never fails: an installed
plug-in is imported only by a `get` of its name, so a broken package (its module gone, or raising on import) or two
packages claiming one name fail only the runs that name it, in one line naming the package(s). A built-in name always
means the built-in: an entry point claiming one is ignored, without a warning in runs (the built-in is what they
asked for), and `listing` (``cory train --help``) names the package that claims it. Three views of the names:
`listing` (every name, importing no plug-in), `known` (the specs this process has loaded, importing no plug-in) and
`items` (every spec, importing every installed plug-in; one that does not load is logged once and left out).

`Registry.origin` is what a run records, so that ``--resume`` and ``cory eval`` find the same object again.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import sys
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
        spec_type: the class every entry must be an instance of (`trainers.learning.registry.LearnerSpec`, ...).
        group: the entry-point group plug-in packages register under (``"cory.learners"``).
        coerce: turns an imported object that is not a `spec_type` into one (e.g. a plain reward function into a
            reward spec), or returns None when it cannot; None: only `spec_type` instances are accepted.
        option: the command-line option that takes the name (``"--learner"``), for messages.

    The built-in entries may be given as ``"module:attr"`` strings, imported on first use.
    """

    def __init__(self, kind: str, spec_type: type, group: str, *, option: str,
                 coerce: Callable[[Any], T | None] | None = None) -> None:
        self.kind, self.spec_type, self.group, self.option = kind, spec_type, group, option
        self._coerce = coerce
        self._entries: dict[str, T | str] = {}  # name -> spec, or "module:attr" of a built-in not yet imported
        self._origins: dict[str, str] = {}  # name -> where it came from (module:attr, or the entry point)
        self._claims: dict[str, list[importlib.metadata.EntryPoint]] | None = None  # entry points by name (read once)
        self._builtins: set[str] = set()  # names registered with plugin=False (the package's own entries)
        self._registered: set[str] = set()  # names registered with plugin=True (in this process)
        self._broken: set[str] = set()  # entries a listing could not load (logged once)

    # ----- adding ---------------------------------------------------------------------------------------------
    def register(self, name: str, spec: T | str, *, overwrite: bool = False, origin: str | None = None,
                 plugin: bool = False) -> None:
        """Add `spec` (a `spec_type`, or a lazy ``"module:attr"`` string) as `name`.

        Args:
            plugin: a registration by a user or a plug-in in this process (`register_learner`, `register_task`,
                `register_reward`): an installed package's entry point of that name is a taken name too (read
                without importing it). False for the package's own (built-in) entries, which are registered on
                import: an entry point that claims one of them is ignored (see the module docstring).

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
                taken = " and ".join(f"{p.value} (entry point of {_dist(p)})" for p in self._read()[name])
            else:
                taken = None
            if taken is not None:
                raise ValueError(f"two {self.kind}s are registered as {name!r}: {taken} and {new}; rename one, or "
                                 "pass overwrite=True to replace it")
        self._entries[name] = spec
        self._origins[name] = new
        (self._registered if plugin else self._builtins).add(name)

    # ----- looking up -----------------------------------------------------------------------------------------
    def get(self, name: str) -> T:
        """The spec `name` names: a registered name, an importable ``module:attr``, or an entry point (imported
        here, on first use).

        Raises:
            ValueError: see the module docstring; for an entry point, it does not load, or two installed packages
                claim its name (naming both and the ``module:attr`` that picks one).
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
        claims = self._read().get(name, [])
        if not claims:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {', '.join(self.names())}; or give "
                             f"an importable module:attr, or install a package that registers it under the entry "
                             f"point group {self.group!r}")
        if len(claims) > 1:
            raise ValueError(f"two installed packages register the {self.kind} {name!r} (entry point group "
                             f"{self.group!r}): {_claimants(claims)}; uninstall one of them, or name the one to use "
                             f"by module:attr ({self.option} {claims[0].value})")
        point = claims[0]
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
        """Whether `get(name)` finds a spec (which imports a plug-in of that name)."""
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except ValueError:
            return False
        return True

    def names(self) -> list[str]:
        """Registered names, then the entry points' (not loaded, a conflicted one included), in order;
        ``module:attr`` names already used are left out. Imports nothing."""
        own = [n for n in self._entries if ":" not in n]
        return own + [n for n in self.entry_points() if n not in self._entries]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def listing(self) -> list[tuple[str, str]]:
        """(name, one line) of every name (`names`), for ``--help``; imports no installed plug-in.

        The line is a built-in's or a registered spec's ``summary`` (a lazy built-in imported here), plus the
        packages whose entry point claims a built-in name (ignored); for an installed entry point
        ``plug-in: module:attr from DIST VERSION``, ``conflicted: claimed by ... and ...`` (two packages claim the
        name), or ``broken: module X not found (...)`` (its module is not installed: found with
        `importlib.machinery` finders, which run no code of the package).
        """
        out = []
        for name in self.names():
            claims = self._read().get(name, [])
            if name in self._builtins or name in self._registered or not claims:
                out.append((name, self._own_line(name)))
            else:
                out.append((name, self._plugin_line(claims)))
        return out

    def known(self) -> list[tuple[str, T]]:
        """(name, spec) of every spec this process has without importing an installed plug-in: the built-ins (a lazy
        one imported here; one that does not load is logged once and left out), those registered in this process,
        and the entry points and ``module:attr`` names looked up so far (`get`)."""
        out = []
        for name in list(self._entries):
            if name in self._builtins and isinstance(self._entries[name], str):
                try:
                    self.get(name)
                except ValueError as err:
                    self._log_broken(name, err)
                    continue
            entry = self._entries[name]
            if not isinstance(entry, str):
                out.append((name, entry))
        return out

    def items(self) -> list[tuple[str, T]]:
        """(name, spec) of every registered name and entry point, **importing every installed plug-in** (`known` and
        `listing` import none). One that does not load (a broken or conflicted plug-in package, a built-in whose extra
        package is missing) is logged once and left out: `get` raises for it, so only a run that names it fails."""
        out = []
        for name in self.names():
            try:
                out.append((name, self.get(name)))
            except ValueError as err:
                self._log_broken(name, err)
        return out

    def __len__(self) -> int:
        return len(self.names())

    def origin(self, name: str) -> str:
        """Where `name` came from: ``"module:attr"`` (built-ins and imported names), ``"<value> (entry point of
        <distribution>)"``, or a description of an object registered by hand; what a run records."""
        self.get(name)
        return self._origins[name]

    def entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The installed packages' entry points of `group` by name, but those claiming a built-in name (read once;
        imports nothing, never raises). A name two packages claim maps to the first: `get` refuses it, naming both."""
        return {name: claims[0] for name, claims in self._read().items() if name not in self._builtins}

    def _read(self) -> dict[str, list[importlib.metadata.EntryPoint]]:
        """Every entry point of `group`, by name, each value once (a package found twice on the path is one claim),
        sorted by package; read once, importing nothing."""
        if self._claims is None:
            claims: dict[str, list[importlib.metadata.EntryPoint]] = {}
            for point in importlib.metadata.entry_points(group=self.group):
                same = claims.setdefault(point.name, [])
                if all(p.value != point.value for p in same):
                    same.append(point)
            for same in claims.values():  # the packages in a fixed order, whatever the path's order
                same.sort(key=lambda p: (_dist(p), p.value))
            self._claims = claims
        return self._claims

    def snapshot(self) -> tuple[dict, dict]:
        """The entries as they are now, for `restore` (a test registers plug-ins, then puts the registry back)."""
        return dict(self._entries), dict(self._origins)

    def restore(self, snapshot: tuple[dict, dict]) -> None:
        """Put the entries back as `snapshot` took them, and read the entry points again."""
        self._entries, self._origins = dict(snapshot[0]), dict(snapshot[1])
        self._builtins &= set(self._entries)
        self._registered &= set(self._entries)
        self._claims = None
        self._broken = set()

    def refresh(self) -> None:
        """Read the entry points again (after installing a plug-in package in this process)."""
        self._claims = None
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

    def _log_broken(self, name: str, err: ValueError) -> None:
        if name not in self._broken:
            self._broken.add(name)
            logger.warning("%s; left out of the %ss listed here (only a run that names it fails)", err, self.kind)

    def _own_line(self, name: str) -> str:
        """A built-in's or registered name's line in `listing`: its summary (its origin for a lazy ``module:attr``
        registered in this process, not imported here), and any entry point claiming a built-in's name."""
        if isinstance(self._entries[name], str) and name not in self._builtins:
            return self._origins[name]
        try:
            line = getattr(self.get(name), "summary", "") or ""
        except ValueError as err:  # a built-in whose extra package is missing
            line = f"does not load: {err}"
        ignored = self._read().get(name, []) if name in self._builtins else []
        if ignored:
            line += (f"{'; ' if line else ''}also claimed by {_claimants(ignored)}, ignored: a built-in name always "
                     "means the built-in")
        return line

    @staticmethod
    def _plugin_line(claims: list[importlib.metadata.EntryPoint]) -> str:
        """An installed entry point's line in `listing`, imported nothing."""
        if len(claims) > 1:
            return f"conflicted: claimed by {_claimants(claims)}; uninstall one, or name one by module:attr"
        point = claims[0]
        module = point.value.partition(":")[0].strip()
        if not _module_found(module):
            return f"broken: module {module} not found (entry point {point.value} of {_dist(point)})"
        return f"plug-in: {point.value} from {_dist(point)}"

    @staticmethod
    def _describe(spec: Any) -> str:
        return f"an object from {getattr(spec, '__module__', None) or type(spec).__module__}"


def _module_found(module: str) -> bool:
    """Whether the module `module` (dotted) is installed, running none of its code nor its parent packages'
    (`importlib.util.find_spec` of ``a.b`` would import ``a``)."""
    if module in sys.modules:
        return True
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for depth in range(2, len(parts) + 1):
            if spec is None or spec.submodule_search_locations is None:
                return False
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]),
                                                            list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return False
    return spec is not None


def _claimants(points: list[importlib.metadata.EntryPoint]) -> str:
    """``"a:X from dist-a 1.0 and b:Y from dist-b 2.0"``."""
    return " and ".join(f"{p.value} from {_dist(p)}" for p in points)


def _dist(point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"
