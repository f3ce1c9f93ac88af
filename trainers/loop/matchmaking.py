"""Partner populations: N models (``--population N``) and the matchmaking scheme that seats them each iteration.

CORY's role exchange is the smallest population: as many models as seats, rotating every T_REx iterations
(`trainers.loop.role_exchange.RoleExchange`, the default, unchanged). A population trains N >= seats models; a
**scheme** decides, each iteration, which model sits in which seat:

| scheme | who sits where in iteration t |
|---|---|
| ``role-exchange`` | N = seats; seat k holds model (k + r) mod N with r = t // T_REx (the default: CORY) |
| ``rotation`` | N >= seats; the same window over N models: seat k holds model (k + r) mod N, r = t // period |
| ``uniform`` | N >= seats; an ordered draw of distinct models, seeded by (seed, t): uniform random pairing |

A scheme is a plug-in like a learner or a task: a `SchemeSpec` in `SCHEMES` (a registered name, an importable
``module:attr``, or an installed package's entry point in group ``cory.matchmaking``), whose `factory` builds the
scheme from its own options dataclass (`SchemeSpec.options`; given as ``--matchmaking_options KEY=VALUE``). A
scheme is a function of the iteration (``assign(t)``), so a resumed run seats the same models as an uninterrupted
one. Each model keeps its own learner state and trains only on the seats it played (the learners update the models
of `JointBatch.models`); its episodes are counted per model (`Population.episodes`), so budgets can be matched per
model.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from cory_env.checks import check_number
from cory_env.overrides import override_types, parse_overrides
from cory_env.registry import Registry

__all__ = ["Population", "SCHEMES", "Scheme", "SchemeSpec", "check_population", "scheme_options"]

logger = logging.getLogger(__name__)


@runtime_checkable
class Scheme(Protocol):
    """What the trainer needs from a matchmaking scheme: ``assign(t)`` -> seat -> model name for iteration t (0-based),
    every seat once, distinct models, a pure function of t (and the scheme's seed and options)."""

    def assign(self, iteration: int) -> dict[str, str]: ...


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
    """

    factory: Callable[..., Scheme]
    options: type | None = None
    min_models: str = "at_least_seats"
    summary: str = ""


@dataclass(frozen=True)
class Rotating:
    """Seat k holds model (k + r) mod N with r = t // period (period 0: never moves). With N = seats this is role
    exchange (`trainers.loop.role_exchange`): every model visits every seat."""

    models: tuple[str, ...]
    seats: tuple[str, ...]
    period: int

    def assign(self, iteration: int) -> dict[str, str]:
        r = iteration // self.period if self.period else 0
        return {seat: self.models[(k + r) % len(self.models)] for k, seat in enumerate(self.seats)}


@dataclass(frozen=True)
class UniformOptions:
    """Options of the ``uniform`` scheme."""

    stream: int = dataclasses.field(default=0, metadata={"help": "Extra seed of the pairing draws (the run's seed "
                                                                 "and the iteration are the others)."})


@dataclass(frozen=True)
class Uniform:
    """An ordered draw of distinct models per iteration: ``numpy.random.default_rng([seed, stream, t])``'s
    permutation of the N models, its first `len(seats)` in seat order."""

    models: tuple[str, ...]
    seats: tuple[str, ...]
    seed: int
    stream: int = 0

    def assign(self, iteration: int) -> dict[str, str]:
        order = np.random.default_rng([self.seed, self.stream, iteration]).permutation(len(self.models))
        return {seat: self.models[int(i)] for seat, i in zip(self.seats, order)}


def _rotating(options, models, seats, seed, period) -> Rotating:  # noqa: ARG001 - the factory signature
    return Rotating(tuple(models), tuple(seats), period)


def _uniform(options, models, seats, seed, period) -> Uniform:  # noqa: ARG001
    return Uniform(tuple(models), tuple(seats), seed, (options or UniformOptions()).stream)


ROLE_EXCHANGE = SchemeSpec(_rotating, min_models="seats",
                           summary="CORY: as many models as seats, rotating every role_exchange_period (default)")
ROTATION = SchemeSpec(_rotating, summary="N >= seats models; the seats' window moves one model every "
                                         "role_exchange_period")
UNIFORM = SchemeSpec(_uniform, options=UniformOptions, summary="N >= seats models; a uniform random ordered draw of "
                                                               "distinct models each iteration")

SCHEMES: Registry[SchemeSpec] = Registry("matchmaking scheme", SchemeSpec, "cory.matchmaking",
                                         option="--matchmaking")
for _name, _attr in (("role-exchange", "ROLE_EXCHANGE"), ("rotation", "ROTATION"), ("uniform", "UNIFORM")):
    SCHEMES.register(_name, f"trainers.loop.matchmaking:{_attr}")


def scheme_options(spec: SchemeSpec, given: Mapping[str, Any] | Sequence[str] | None, *, name: str):
    """The scheme's options object from ``--matchmaking_options`` (``KEY=VALUE`` strings or a mapping).

    Raises:
        ValueError: options for a scheme without any, an unknown key (the valid ones listed), a value its
            dataclass refuses.
    """
    if not given:
        return spec.options() if spec.options is not None else None
    if spec.options is None:
        raise ValueError(f"matchmaking scheme {name!r} takes no options, got {given!r}; drop --matchmaking_options")
    if isinstance(given, Mapping):
        given = [f"{k}={v}" for k, v in given.items()]
    values = parse_overrides([f"scheme.{item}" for item in given], override_types(spec.options),
                             name="matchmaking_options") or {}
    try:
        return spec.options(**values.get("scheme", {}))
    except (TypeError, ValueError) as err:
        raise ValueError(f"matchmaking_options for {name!r}: {err}") from None


class Population:
    """Which model bundle sits in which seat, by a scheme, for N >= seats models (the `RoleExchange` interface).

    Args:
        bundles: the N bundles (`trainers.loop.role_exchange.Bundle`), ``llm1`` … ``llmN``.
        seats: the seat names in acting order.
        scheme: the `Scheme`.
        rows: episodes per seat and iteration (the batch): what each seated model is counted per iteration.
        reset_on_exchange: reset a model's learner state whenever its seat changes (`RoleExchange` resets every
            model at an exchange; the same for two models on two seats).

    Raises:
        ValueError: fewer bundles than seats, two bundles of one name, or a scheme whose assignment is not every
            seat once with distinct known models.
    """

    def __init__(self, bundles: Sequence[Any], seats: Sequence[str], scheme: Scheme, *, rows: int = 0,
                 reset_on_exchange: bool = False) -> None:
        bundles, self.seat_names = list(bundles), tuple(seats)
        names = [b.name for b in bundles]
        if len(set(names)) != len(names) or len(bundles) < len(self.seat_names):
            raise ValueError(f"a population needs at least {len(self.seat_names)} differently named models for the "
                             f"seats {list(self.seat_names)}, got {names}")
        self._by_name = {b.name: b for b in bundles}
        self.scheme, self.rows = scheme, rows
        self.reset_on_exchange = reset_on_exchange
        self.period = 1  # the assignment may change after every iteration
        self.num_exchanges = 0
        self.iteration = 0
        #: Model name -> episodes (rows) it has played so far, over every seat.
        self.episodes = dict.fromkeys(names, 0)
        self.seats = self._seated(0)

    def _seated(self, iteration: int) -> dict[str, Any]:
        assignment = self.scheme.assign(iteration)
        if list(assignment) != list(self.seat_names) or len(set(assignment.values())) != len(assignment) or \
                not set(assignment.values()) <= set(self._by_name):
            raise ValueError(f"matchmaking scheme {type(self.scheme).__name__} assigned {assignment} for iteration "
                             f"{iteration}: it must seat every seat {list(self.seat_names)} once, in order, with "
                             f"distinct models of {sorted(self._by_name)}")
        return {seat: self._by_name[name] for seat, name in assignment.items()}

    @property
    def bundles(self) -> dict[str, Any]:
        """Model name -> bundle (every model of the population, seated or not)."""
        return dict(self._by_name)

    def seat_of(self, name: str) -> str | None:
        """The seat model `name` sits in now, or None when it sits out this iteration."""
        if name not in self._by_name:
            raise KeyError(f"no model named {name!r}; have {sorted(self._by_name)}")
        return next((seat for seat, b in self.seats.items() if b.name == name), None)

    def after_iteration(self, iteration: int) -> bool:
        """Count the iteration's episodes (`rows`) for each seated model, then seat iteration + 1's models; True if
        any seat changed."""
        for bundle in self.seats.values():
            self.episodes[bundle.name] += self.rows
        before = {seat: b.name for seat, b in self.seats.items()}
        self.iteration = iteration + 1
        self.seats = self._seated(self.iteration)
        changed = before != {seat: b.name for seat, b in self.seats.items()}
        if changed:
            self.num_exchanges += 1
            if self.reset_on_exchange:
                for seat, bundle in self.seats.items():
                    if before.get(seat) != bundle.name:
                        bundle.learner.reset_state()
        return changed

    def state_dict(self) -> dict[str, Any]:
        return {"seats": {seat: b.name for seat, b in self.seats.items()}, "num_exchanges": self.num_exchanges,
                "iteration": self.iteration, "episodes": dict(self.episodes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` of the same population and scheme.

        Raises:
            ValueError: other seats or models, or a scheme that seats others at that iteration.
        """
        if set(state.get("episodes", {})) != set(self._by_name):
            raise ValueError(f"the checkpoint's population {sorted(state.get('episodes', {}))} is not this run's "
                             f"{sorted(self._by_name)}; resume with the run's --population")
        self.iteration = int(state["iteration"])
        self.seats = self._seated(self.iteration)
        if {seat: b.name for seat, b in self.seats.items()} != state["seats"]:
            raise ValueError(f"the checkpoint seats {state['seats']} at iteration {self.iteration}, this run's scheme "
                             "seats others; resume with the run's --matchmaking and its options")
        self.num_exchanges = int(state["num_exchanges"])
        self.episodes = {name: int(n) for name, n in state["episodes"].items()}


def check_population(spec: SchemeSpec, name: str, population: int, seats: int) -> int:
    """The number of models N of a run: `population`, or the seats when 0.

    Raises:
        ValueError: N below the seats, or a scheme for as many models as seats given another N.
    """
    n = population or seats
    check_number(n, "population", integer=True, low=seats,
                 fix=f"at least one model per seat ({seats} seats); 0 = one model per seat")
    if spec.min_models == "seats" and n != seats:
        raise ValueError(f"matchmaking scheme {name!r} seats as many models as seats ({seats}), got population={n}; "
                         "use --matchmaking rotation or uniform for a larger population")
    return n
