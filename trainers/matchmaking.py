"""Matchmaking schemes: which of a population's N models (``--population N``) sits in which seat each iteration.

CORY's role exchange is the smallest population: as many models as seats, rotating every T_REx iterations
(`trainers.loop.role_exchange.RoleExchange`, the default, unchanged). A population trains N >= seats models; a
**scheme** decides, each iteration, which model sits in which seat:

| scheme | who sits where in iteration t |
|---|---|
| ``role-exchange`` | N = seats; seat k holds model (k + r) mod N with r = t // T_REx (the default: CORY) |
| ``rotation`` | N >= seats; the same window over N models: seat k holds model (k + r) mod N, r = t // period |
| ``uniform`` | N >= seats; an ordered draw of distinct models, seeded by (seed, t): uniform random pairing |
| ``snapshots`` | self-play against lagged frozen snapshots: after every K iterations a frozen copy of every model joins the pool (the `keep` latest per model); the first seat holds a learning model, each later seat a snapshot with probability `p_snapshot` (else another learning model); snapshots never learn |

A scheme is a plug-in like a learner or a task: a `SchemeSpec` in `SCHEMES` (a registered name, an importable
``module:attr``, or an installed package's entry point in group ``cory.matchmaking``), whose `factory` builds the scheme
from its own options dataclass (``--matchmaking_options KEY=VALUE``); `register_scheme` adds one in a process
(docs/extending.md has a worked plug-in). Each model keeps its own learner state, trains only on the seats it played
and has its episodes counted (`trainers.loop.role_exchange.RoleExchange.episodes`), so budgets can be matched per
model. The frozen partners a scheme creates (`Scheme.created`) are copied (`trainers.loop.build.freeze_bundle`),
seated, checkpointed and restored by the role-exchange wrapper, never updated. This module holds no model and no
learner, so the configs can ask a scheme what it reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import logging
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

from cory_env.checks import check_number
from cory_env.overrides import override_types, parse_options
from cory_env.registry import PluginContractError, Registry

__all__ = ["MAX_POPULATION", "SCHEMES", "Scheme", "SchemeSpec", "build_scheme", "canonical_options", "check_assignment",
           "check_population", "register_scheme", "scheme_options"]

logger = logging.getLogger(__name__)


class Scheme:
    """What the trainer needs from a matchmaking scheme (the contract every scheme, built-in or plug-in, keeps):
    subclass it and define `assign`; the other methods have defaults.

    * ``assign(t)`` -> ``{seat: model name}`` for iteration t (0-based): every seat once, in the seating's order,
      distinct models of the population (``llm1`` … ``llmN``, or a snapshot the scheme created), a pure function of
      t (and the scheme's seed and options), so a resumed run seats the same models as an uninterrupted one;
    * ``evaluated(t)`` -> the ``{seat: model name}`` held-out evaluations seat after iteration t (the collective
      reward, influence; the first seat's model is the one a pioneer-alone evaluation follows), or None (default):
      the population's first models in seat order, ``llm1`` as the pioneer, whoever trained where;
    * ``created(t)`` -> ``{snapshot name: source model}``: frozen copies taken after iteration t (default none);
    * ``retired(t)`` -> snapshot names that leave the pool after iteration t (default none).
    """

    def assign(self, iteration: int) -> dict[str, str]:
        raise NotImplementedError(f"{type(self).__name__} defines no assign(iteration)")

    def evaluated(self, iteration: int) -> dict[str, str] | None:  # noqa: ARG002 - the contract's signature
        return None

    def created(self, iteration: int) -> dict[str, str]:  # noqa: ARG002
        return {}

    def retired(self, iteration: int) -> list[str]:  # noqa: ARG002
        return []


@dataclass(frozen=True)
class SchemeSpec:
    """A matchmaking scheme in the registry.

    Attributes:
        factory: ``factory(options, models, seats, seed, period) -> Scheme``: `options` an instance of `options` (or
            None), `models` the population's names (``llm1`` … ``llmN``), `seats` the seating's names, `seed` the
            run's, `period` the run's `CORYConfig.role_exchange_period`.
        options: the scheme's own options dataclass (``--matchmaking_options KEY=VALUE``), or None.
        min_models: ``"seats"`` (N must equal the seats) or ``"at_least_seats"``.
        summary: one line for listings.
        reads_period: the factory reads `period` (else ``role_exchange_period`` does nothing and the run says so).
        unread: ``unread(options, num_iterations) -> reason or None``: why the options do nothing in a run of that
            many iterations (warned at start-up), or None.
    """

    factory: Callable[..., Scheme]
    options: type | None = None
    min_models: str = "at_least_seats"
    summary: str = ""
    reads_period: bool = True
    unread: Callable[[Any, int], str | None] | None = None


@dataclass(frozen=True)
class Rotating(Scheme):
    """Seat k holds model (k + r) mod N with r = t // period (period 0: never moves). With N = seats this is role
    exchange (`trainers.loop.role_exchange`): every model visits every seat. `seated_evaluation`: held-out
    evaluations seat the models where they sit (CORY's role exchange: the paper's pioneer curve follows the seat),
    else the population's first models in seat order."""

    models: tuple[str, ...]
    seats: tuple[str, ...]
    period: int
    seated_evaluation: bool = False

    def assign(self, iteration: int) -> dict[str, str]:
        r = iteration // self.period if self.period else 0
        return {seat: self.models[(k + r) % len(self.models)] for k, seat in enumerate(self.seats)}

    def evaluated(self, iteration: int) -> dict[str, str] | None:
        return self.assign(iteration) if self.seated_evaluation else None


@dataclass(frozen=True)
class UniformOptions:
    """Options of the ``uniform`` scheme."""

    stream: int = dataclasses.field(default=0, metadata={"help": "Extra seed of the pairing draws (the run's seed "
                                                                 "and the iteration are the others)."})

    def __post_init__(self) -> None:
        check_number(self.stream, "stream", integer=True, low=0, fix="it seeds the pairing draws")


@dataclass(frozen=True)
class Uniform(Scheme):
    """An ordered draw of distinct models per iteration: ``numpy.random.default_rng([seed, stream, t])``'s
    permutation of the N models, its first `len(seats)` in seat order."""

    models: tuple[str, ...]
    seats: tuple[str, ...]
    seed: int
    stream: int = 0

    def assign(self, iteration: int) -> dict[str, str]:
        order = np.random.default_rng([self.seed, self.stream, iteration]).permutation(len(self.models))
        return {seat: self.models[int(i)] for seat, i in zip(self.seats, order)}


@dataclass(frozen=True)
class SnapshotOptions:
    """Options of the ``snapshots`` scheme."""

    every: int = dataclasses.field(default=10, metadata={"help": "K: a frozen snapshot of every learning model "
                                                                 "joins the pool after every K iterations."})
    keep: int = dataclasses.field(default=3, metadata={"help": "Snapshots kept per learning model (the oldest "
                                                               "leaves the pool)."})
    p_snapshot: float = dataclasses.field(default=0.5, metadata={"help": "Probability that a later seat holds a "
                                                                          "snapshot, once one exists."})

    def __post_init__(self) -> None:
        check_number(self.every, "every", integer=True, low=1)
        check_number(self.keep, "keep", integer=True, low=1)
        check_number(self.p_snapshot, "p_snapshot", low=0, high=1)


@dataclass(frozen=True)
class Snapshots(Scheme):
    """Self-play against lagged frozen snapshots (see the module table). Snapshot of model m taken after iteration
    k·K - 1 is named ``f"{m}_snap{k·K}"``; during iteration t the pool holds those of the `keep` latest k <= t // K.
    ``assign(t)`` draws from ``numpy.random.default_rng([seed, 5, t])``: a learning model for the first seat, then per
    later seat a snapshot (probability `p_snapshot`, when one is free) or a learning model not seated yet."""

    models: tuple[str, ...]
    seats: tuple[str, ...]
    seed: int
    every: int = 10
    keep: int = 3
    p_snapshot: float = 0.5

    def pool(self, iteration: int) -> list[str]:
        """The snapshots present during `iteration`."""
        last = iteration // self.every
        return [f"{m}_snap{k * self.every}" for k in range(max(1, last - self.keep + 1), last + 1) for m in self.models]

    def assign(self, iteration: int) -> dict[str, str]:
        rng = np.random.default_rng([self.seed, 5, iteration])
        learners, snaps = list(self.models), self.pool(iteration)
        out = {self.seats[0]: learners.pop(int(rng.integers(len(learners))))}
        for seat in self.seats[1:]:
            if snaps and (not learners or rng.random() < self.p_snapshot):
                out[seat] = snaps.pop(int(rng.integers(len(snaps))))
            else:
                out[seat] = learners.pop(int(rng.integers(len(learners))))
        return out

    def created(self, iteration: int) -> dict[str, str]:
        """Snapshot name -> its source model, taken after `iteration`."""
        done = iteration + 1
        return {f"{m}_snap{done}": m for m in self.models} if done % self.every == 0 else {}

    def retired(self, iteration: int) -> list[str]:
        """The snapshots that leave the pool after `iteration`."""
        done = iteration + 1
        old = done // self.every - self.keep
        return [f"{m}_snap{old * self.every}" for m in self.models] if done % self.every == 0 and old >= 1 else []


def _rotating(options, models, seats, seed, period) -> Rotating:  # noqa: ARG001 - the factory signature
    if period == 0 and len(models) > len(seats):
        raise ValueError(f"matchmaking 'rotation' with role_exchange_period=0 never moves the seats' window, so "
                         f"{', '.join(models[len(seats):])} would never play; set role_exchange_period >= 1")
    return Rotating(tuple(models), tuple(seats), period)


def _role_exchange(options, models, seats, seed, period) -> Rotating:  # noqa: ARG001
    return Rotating(tuple(models), tuple(seats), period if len(seats) > 1 else 0, seated_evaluation=True)


def _uniform(options, models, seats, seed, period) -> Uniform:  # noqa: ARG001
    return Uniform(tuple(models), tuple(seats), seed, (options or UniformOptions()).stream)


def _snapshots(options, models, seats, seed, period) -> Snapshots:  # noqa: ARG001
    o = options or SnapshotOptions()
    return Snapshots(tuple(models), tuple(seats), seed, o.every, o.keep, o.p_snapshot)


ROLE_EXCHANGE = SchemeSpec(_role_exchange, min_models="seats",
                           summary="CORY: as many models as seats, rotating every role_exchange_period (default)")
ROTATION = SchemeSpec(_rotating, summary="N >= seats models; the seats' window moves one model every "
                                         "role_exchange_period")
UNIFORM = SchemeSpec(_uniform, options=UniformOptions, summary="N >= seats models; a uniform random ordered draw of "
                                                               "distinct models each iteration", reads_period=False)


def _snapshots_unread(options: SnapshotOptions, num_iterations: int) -> str | None:
    if options.every < num_iterations:
        return None
    return (f"with num_iterations={num_iterations}: no snapshot is taken (the first after every={options.every} "
            f"iterations), so every seat holds a learning model; lower every below {num_iterations}")


SNAPSHOTS = SchemeSpec(_snapshots, options=SnapshotOptions, reads_period=False, unread=_snapshots_unread,
                       summary="self-play against lagged frozen snapshots of the population (they never learn)")

SCHEMES: Registry[SchemeSpec] = Registry("matchmaking scheme", SchemeSpec, "cory.matchmaking",
                                         option="--matchmaking")
for _name, _attr in (("role-exchange", "ROLE_EXCHANGE"), ("rotation", "ROTATION"), ("uniform", "UNIFORM"),
                     ("snapshots", "SNAPSHOTS")):
    SCHEMES.register(_name, f"trainers.matchmaking:{_attr}")


def register_scheme(name: str, spec: SchemeSpec, *, overwrite: bool = False) -> None:
    """Make `spec` available as ``--matchmaking name`` in this process (an installed package uses the entry-point
    group ``cory.matchmaking`` instead, which every process, launched workers included, finds by itself).

    Raises:
        ValueError, TypeError: as `cory_env.registry.Registry.register` (a name already registered, or claimed by
            an installed package's entry point, without `overwrite`: naming both).
    """
    SCHEMES.register(name, spec, overwrite=overwrite, plugin=True,
                     origin=f"{getattr(spec.factory, '__module__', '?')}:{getattr(spec.factory, '__qualname__', '?')}")


def scheme_options(spec: SchemeSpec, given: Mapping[str, Any] | Sequence[str] | str | None, *, name: str):
    """The scheme's options object from ``--matchmaking_options``: ``KEY=VALUE`` strings (a list, or one string) or a
    mapping, string values converted to the option's type (`cory_env.overrides.parse_options`).

    Raises:
        ValueError: options for a scheme without any, an entry that is not ``KEY=VALUE``, an unknown key (the valid
            ones listed), a key given twice, a value of the wrong type or one the options dataclass refuses.
    """
    empty = given is None or (isinstance(given, (str, list, tuple, Mapping)) and len(given) == 0)
    if spec.options is None:
        if not empty:
            raise ValueError(f"matchmaking scheme {name!r} takes no options, got {given!r}; drop "
                             "--matchmaking_options")
        return None
    example = " ".join(f"{f.name}={f.default}" for f in dataclasses.fields(spec.options))
    values = parse_options(given, override_types(spec.options), name="matchmaking_options", owner=repr(name),
                           example=example)
    try:
        return spec.options(**values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"matchmaking_options for {name!r}: {err}") from None


def canonical_options(options: Any) -> dict[str, Any] | None:
    """A scheme's options object as the mapping a run records (every option, defaults included, in field order), so
    that two spellings of one setting record and resume as one; None for a scheme without options."""
    return dataclasses.asdict(options) if options is not None else None


#: The most models a population may hold (`check_population`): each is an agent and a learner in memory (a LoRA
#: adapter of SmolLM2-135M ≈ 16.5 MiB, a full copy ≈ 0.5 GiB with its Adam state more), built before training starts.
MAX_POPULATION = 256


def check_population(spec: SchemeSpec, name: str, population: int, seats: int) -> int:
    """The number of models N of a run: `population`, or the seats when 0.

    Raises:
        ValueError: N below the seats or above `MAX_POPULATION`, or a scheme for as many models as seats given
            another N.
    """
    n = population or seats
    check_number(n, "population", integer=True, low=seats, high=max(MAX_POPULATION, seats),
                 fix=f"at least one model per seat ({seats} seats) and at most {MAX_POPULATION} (each model is an "
                     "agent and a learner in memory); 0 = one model per seat")
    if spec.min_models == "seats" and n != seats:
        raise ValueError(f"matchmaking scheme {name!r} seats as many models as seats ({seats}), got population={n}; "
                         "use --matchmaking rotation or uniform for a larger population")
    return n


def check_assignment(assignment: Any, *, scheme: str, call: str, seats: Sequence[str],
                     models: Collection[str]) -> dict[str, str]:
    """`assignment` (what a scheme's ``assign`` or ``evaluated`` returned) if it keeps the `Scheme` contract: a dict
    seat -> model name with every seat once, in order, and distinct models of `models`.

    Raises:
        PluginContractError: one line naming the scheme, the call (``assign(3)``), what it returned and the contract.
    """
    ok = isinstance(assignment, Mapping) and list(assignment) == list(seats) and all(
        isinstance(v, str) and v in models for v in assignment.values()) and \
        len(set(assignment.values())) == len(assignment)
    if not ok:
        raise PluginContractError(
            f"matchmaking scheme {scheme!r}: {call} returned {assignment!r}; it must return a dict seat -> model name "
            f"with every seat {list(seats)} once, in order, and distinct models of {sorted(models)} "
            "(trainers.matchmaking.Scheme)")
    return dict(assignment)


def build_scheme(spec: SchemeSpec, *, name: str, options: Any, models: Sequence[str], seats: Sequence[str], seed: int,
                 period: int) -> Scheme:
    """The run's scheme: ``spec.factory(options, models, seats, seed, period)``, its result and its first
    assignments (``assign(0)``, ``evaluated(0)``) checked against the `Scheme` contract.

    Raises:
        PluginContractError: the factory returned no `Scheme`, or ``assign(0)`` or ``evaluated(0)`` breaks the
            contract (one line naming the scheme, what it returned and the contract).
        ValueError: what the factory refuses (a plug-in's refusal prefixed with its name). A plug-in's own other
            exception propagates, named in a log line before its traceback.
    """
    try:
        scheme = spec.factory(options, tuple(models), tuple(seats), seed, period)
    except ValueError as err:
        if getattr(spec.factory, "__module__", None) == __name__:
            raise  # the package's own schemes (factories of this module) name their option
        raise ValueError(f"matchmaking scheme {name!r} refused the run: {err}") from err
    except Exception:
        logger.error("matchmaking scheme %r: its factory raised; its traceback follows", name)
        raise
    if not isinstance(scheme, Scheme):
        raise PluginContractError(f"matchmaking scheme {name!r}: its factory returned {type(scheme).__name__} "
                                  f"{scheme!r}, not a trainers.matchmaking.Scheme; a factory returns an object of a "
                                  "Scheme subclass that defines assign(iteration) (docs/extending.md)")
    for call in ("assign", "evaluated"):
        try:
            first = getattr(scheme, call)(0)
        except Exception:
            logger.error("matchmaking scheme %r raised in %s(0); its traceback follows", name, call)
            raise
        if first is not None or call == "assign":
            check_assignment(first, scheme=name, call=f"{call}(0)", seats=seats, models=models)
    return scheme
