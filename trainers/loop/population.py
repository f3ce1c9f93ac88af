"""A partner population in the training loop: which model bundle sits in which seat each iteration, by a matchmaking
scheme (`trainers.matchmaking`), with each model's episodes counted, frozen snapshots made and dropped, and the state a
checkpoint keeps (the `trainers.loop.role_exchange.RoleExchange` interface, for N >= seats models)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from trainers.matchmaking import Scheme

__all__ = ["Population"]


class Population:
    """Which model bundle sits in which seat, by a scheme, for N >= seats models (the `RoleExchange` interface).

    Args:
        bundles: the N bundles (`trainers.loop.role_exchange.Bundle`), ``llm1`` … ``llmN``.
        seats: the seat names in acting order.
        scheme: the `Scheme`.
        rows: episodes per seat and iteration (the batch): what each seated model is counted per iteration.
        freeze: ``freeze(bundle, name) -> bundle``: a frozen copy of a bundle named `name` (learner None), for a
            scheme that creates snapshots (`trainers.loop.build.freeze_bundle`).
        reset_on_exchange: reset a model's learner state whenever its seat changes (`RoleExchange` resets every
            model at an exchange; the same for two models on two seats).

    Raises:
        ValueError: fewer bundles than seats, two bundles of one name, or a scheme whose assignment is not every
            seat once with distinct known models.
    """

    def __init__(self, bundles: Sequence[Any], seats: Sequence[str], scheme: Scheme, *, rows: int = 0,
                 reset_on_exchange: bool = False, freeze: Callable[[Any, str], Any] | None = None) -> None:
        bundles, self.seat_names = list(bundles), tuple(seats)
        names = [b.name for b in bundles]
        self.freeze = freeze
        #: Snapshot name -> the model it was copied from (frozen partners present now).
        self.frozen: dict[str, str] = {}
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
        """Model name -> bundle (every model of the population, seated or not; frozen snapshots with learner None)."""
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
            if bundle.name in self.episodes:
                self.episodes[bundle.name] += self.rows
        before = {seat: b.name for seat, b in self.seats.items()}
        self._snapshot(iteration)
        self.iteration = iteration + 1
        self.seats = self._seated(self.iteration)
        changed = before != {seat: b.name for seat, b in self.seats.items()}
        if changed:
            self.num_exchanges += 1
            if self.reset_on_exchange:
                for seat, bundle in self.seats.items():
                    if before.get(seat) != bundle.name and bundle.learner is not None:  # a snapshot never learns
                        bundle.learner.reset_state()
        return changed

    def _snapshot(self, iteration: int) -> None:
        """Add the scheme's snapshots taken after `iteration` (frozen copies) and drop those it retires."""
        created = getattr(self.scheme, "created", None)
        if created is None:
            return
        for name in self.scheme.retired(iteration):
            self._by_name.pop(name, None)
            self.frozen.pop(name, None)
        for name, source in created(iteration).items():
            if self.freeze is None:
                raise ValueError(f"matchmaking scheme {type(self.scheme).__name__} creates snapshots, and this "
                                 "population was built without a freeze function")
            self._by_name[name] = self.freeze(self._by_name[source], name)
            self.frozen[name] = source

    def state_dict(self) -> dict[str, Any]:
        return {"seats": {seat: b.name for seat, b in self.seats.items()}, "num_exchanges": self.num_exchanges,
                "iteration": self.iteration, "episodes": dict(self.episodes), "frozen": dict(self.frozen)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` of the same population and scheme.

        Raises:
            ValueError: other seats or models, or a scheme that seats others at that iteration.
        """
        if set(state.get("episodes", {})) != set(self.episodes):
            raise ValueError(f"the checkpoint's population {sorted(state.get('episodes', {}))} is not this run's "
                             f"{sorted(self.episodes)}; resume with the run's --population")
        for name in list(self.frozen):  # the checkpoint's snapshots, as frozen copies whose weights load next
            self._by_name.pop(name)
        self.frozen = {}
        for name, source in state.get("frozen", {}).items():
            if self.freeze is None or source not in self._by_name:
                raise ValueError(f"the checkpoint holds the snapshot {name!r} of {source!r}, which this run cannot "
                                 "rebuild; resume with the run's --matchmaking and --population")
            self._by_name[name] = self.freeze(self._by_name[source], name)
            self.frozen[name] = source
        self.iteration = int(state["iteration"])
        self.seats = self._seated(self.iteration)
        if {seat: b.name for seat, b in self.seats.items()} != state["seats"]:
            raise ValueError(f"the checkpoint seats {state['seats']} at iteration {self.iteration}, this run's scheme "
                             "seats others; resume with the run's --matchmaking and its options")
        self.num_exchanges = int(state["num_exchanges"])
        self.episodes = {name: int(n) for name, n in state["episodes"].items()}
