"""`RoleExchange`: the role-exchange wrapper — which model bundle sits in which seat each iteration, by a matchmaking
scheme (`trainers.matchmaking`).

A *bundle* is everything that belongs to one model (`llm1` … `llmN`): the agent (policy or LoRA adapter plus its
value head) and its learner (optimizer state, KL controller, score statistics). Seats are the seating's
(`cory_env.seating`: ``"pioneer"``, ``"observer"`` for CORY). CORY's role exchange (docs/paper.md §1, step 7;
official code `swap_freq=5`) is the default scheme: as many models as seats, rotating one seat every T_REx
iterations (the bundle of seat k moves to seat k − 1 and the pioneer's to the last seat, so over N exchanges every
model sits in every seat; with two seats this is CORY's swap). A population (N >= seats models) is the same wrapper
with another scheme (rotation, uniform pairing, frozen snapshots, a plug-in). Nothing is copied or reloaded, so Adam
moments, β and score statistics travel with their model; `reset_on_exchange=True` replicates the official code,
whose swap through disk silently starts every one of those afresh.

A scheme that creates frozen partners (`Scheme.created`, `Scheme.retired`: ``snapshots``) gets them made by
`freeze` and dropped by `discard`; they sit in seats like any model, never learn, and are checkpointed and restored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from cory_env.registry import PluginContractError
from trainers.matchmaking import Rotating, Scheme, check_assignment

__all__ = ["Bundle", "RoleExchange"]

logger = logging.getLogger(__name__)


@dataclass
class Bundle:
    """One model identity: `name` ("llm1", "llm2", ...), its agent and its learner (a frozen snapshot's learner does
    nothing: `trainers.learning.joint.FrozenLearner`)."""

    name: str
    agent: Any
    learner: Any


class RoleExchange:
    """Which bundle sits in which seat, iteration by iteration, by a matchmaking `Scheme`.

    Args:
        bundles: the models' bundles, ``llm1`` … ``llmN`` (N >= the seats).
        seats: the seat names in acting order (`cory_env.seating.Seating.names`).
        scheme: the `trainers.matchmaking.Scheme` (its registered `name` for messages); None: CORY's role exchange
            over N = seats models with period `period`.
        period: T_REx of the default scheme, iterations between exchanges; 0 disables (ablation w/o REx).
        rows: episodes per seat and iteration (the batch): what each seated model is counted per iteration (`episodes`).
        reset_on_exchange: reset a model's learner state whenever its seat changes (official-code replication).
        freeze: ``freeze(bundle, name) -> bundle``: a frozen copy named `name` whose learner does nothing
            (`trainers.loop.build.freeze_bundle`); discard: ``discard(bundle)`` frees a retired snapshot's weights.
        follow: the model a pioneer-alone held-out evaluation follows (`evaluated_model`); None: the first seat's
            model of `evaluation_seats`.

    Raises:
        ValueError: fewer bundles than seats or two of one name; the default scheme with N != seats or a negative
            period.
        PluginContractError: a scheme that is no `Scheme`, or whose assignment breaks its contract (one line naming
            the scheme, what it returned and the contract).
    """

    def __init__(self, bundles: Sequence[Bundle], seats: Sequence[str], scheme: Scheme | None = None, *,
                 name: str = "role-exchange", period: int = 0, rows: int = 0, reset_on_exchange: bool = False,
                 freeze: Callable[[Bundle, str], Bundle] | None = None,
                 discard: Callable[[Bundle], None] | None = None, follow: str | None = None) -> None:
        from cory_env.checks import check_number
        bundles, self.seat_names = list(bundles), tuple(seats)
        names = [b.name for b in bundles]
        if scheme is None:
            check_number(period, "role_exchange_period", integer=True, low=0, fix="0 disables role exchange")
        if len(set(names)) != len(names) or len(bundles) < len(self.seat_names) or not self.seat_names:
            raise ValueError(f"{len(bundles)} bundle(s) {names} for the seats {list(self.seat_names)}: give at least "
                             "one differently named bundle per seat")
        if scheme is None:
            if len(bundles) != len(self.seat_names):
                raise ValueError(f"{len(bundles)} bundle(s) for the seats {list(self.seat_names)}: role exchange "
                                 "seats one model per seat; give a scheme for a larger population")
            scheme = Rotating(tuple(names), self.seat_names, period if len(names) > 1 else 0, seated_evaluation=True)
        if not isinstance(scheme, Scheme):
            raise PluginContractError(f"matchmaking scheme {name!r}: its factory returned {type(scheme).__name__} "
                                      f"{scheme!r}, not a trainers.matchmaking.Scheme; the factory returns an object "
                                      "of a Scheme subclass defining assign(iteration) (docs/extending.md)")
        self.scheme, self.name, self.rows = scheme, name, rows
        self.reset_on_exchange, self.freeze, self.discard, self.follow = reset_on_exchange, freeze, discard, follow
        self._by_name = {b.name: b for b in bundles}
        #: Snapshot name -> the model it was copied from (frozen partners present now).
        self.frozen: dict[str, str] = {}
        self.num_exchanges = 0
        self.iteration = 0
        #: Model name -> episodes (rows) it has played so far, over every seat (the learning models).
        self.episodes = dict.fromkeys(names, 0)
        self.seats: dict[str, Bundle] = self._seated(0)

    # ------------------------------------------------------------------ the scheme, checked
    def _call(self, method: str, iteration: int) -> Any:
        """``scheme.method(iteration)``; a plug-in's own exception is named (the scheme and the call) before its
        traceback."""
        try:
            return getattr(self.scheme, method)(iteration)
        except Exception:
            logger.error("matchmaking scheme %r raised in %s(%d); its traceback follows", self.name, method, iteration)
            raise

    def _checked(self, assignment: Any, method: str, iteration: int) -> dict[str, str]:
        return check_assignment(assignment, scheme=self.name, call=f"{method}({iteration})", seats=self.seat_names,
                                models=self._by_name)

    def _seated(self, iteration: int) -> dict[str, Bundle]:
        assignment = self._checked(self._call("assign", iteration), "assign", iteration)
        return {seat: self._by_name[name] for seat, name in assignment.items()}

    # ------------------------------------------------------------------ what the trainer reads
    @property
    def bundles(self) -> dict[str, Bundle]:
        """Model name -> bundle (every model, seated or not; frozen snapshots included)."""
        return dict(self._by_name)

    @property
    def frozen_seats(self) -> tuple[str, ...]:
        """The seats a frozen snapshot holds this iteration (their models never learn)."""
        return tuple(seat for seat, b in self.seats.items() if b.name in self.frozen)

    def seat_of(self, name: str) -> str | None:
        """The seat model `name` sits in now, or None when it sits out this iteration.

        Raises:
            KeyError: no model of that name.
        """
        if name not in self._by_name:
            raise KeyError(f"no model named {name!r}; have {sorted(self._by_name)}")
        return next((seat for seat, b in self.seats.items() if b.name == name), None)

    def evaluation_seats(self) -> dict[str, Bundle]:
        """Seat -> the bundle held-out evaluations seat there now (`Scheme.evaluated`; by default the first models
        in seat order, ``llm1`` as the pioneer, so every point of a curve evaluates the same models)."""
        names = self._call("evaluated", self.iteration)
        if names is None:
            learning = [n for n in self._by_name if n not in self.frozen]
            names = dict(zip(self.seat_names, learning))
        return {seat: self._by_name[n] for seat, n in self._checked(names, "evaluated", self.iteration).items()}

    def evaluated_model(self) -> str:
        """The model a pioneer-alone held-out evaluation follows now: `follow`, else the first seat's of
        `evaluation_seats` (CORY's role exchange: the model in the pioneer seat)."""
        return self.follow or next(iter(self.evaluation_seats().values())).name

    # ------------------------------------------------------------------ one iteration
    def after_iteration(self, iteration: int) -> bool:
        """Count the iteration's episodes (`rows`) for each seated learning model, take and drop the scheme's
        snapshots, then seat iteration + 1's models; True if any seat changed (a role exchange)."""
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
                    if before.get(seat) != bundle.name:
                        bundle.learner.reset_state()
            logger.info("role exchange #%d: %s", self.num_exchanges,
                        " ".join(f"{seat}={b.name}" for seat, b in self.seats.items()))
        return changed

    def _snapshot(self, iteration: int) -> None:
        """Drop the snapshots the scheme retires after `iteration` and add the frozen copies it creates."""
        for name in self._call("retired", iteration):
            bundle = self._by_name.pop(name, None)
            self.frozen.pop(name, None)
            if bundle is not None and self.discard is not None:
                self.discard(bundle)
        for name, source in self._call("created", iteration).items():
            self._add_snapshot(name, source)

    def _add_snapshot(self, name: str, source: str) -> None:
        if self.freeze is None:
            raise ValueError(f"matchmaking scheme {self.name!r} creates snapshots, and this run was built without a "
                             "freeze function")
        self._by_name[name] = self.freeze(self._by_name[source], name)
        self.frozen[name] = source

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"seats": {seat: b.name for seat, b in self.seats.items()}, "num_exchanges": self.num_exchanges,
                "iteration": self.iteration, "episodes": dict(self.episodes), "frozen": dict(self.frozen)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` of the same models, seating and scheme (the snapshots it holds are rebuilt as
        frozen copies, whose weights the checkpoint loads next).

        Raises:
            ValueError: other models or seats, or a scheme that seats others at that iteration.
        """
        if set(state["episodes"]) != set(self.episodes):
            raise ValueError(f"the checkpoint's models {sorted(state['episodes'])} are not this run's "
                             f"{sorted(self.episodes)}; resume with the run's --population")
        if set(state["seats"]) != set(self.seat_names):
            raise ValueError(f"the checkpoint seats {list(state['seats'])}, this run's seating has "
                             f"{list(self.seat_names)}; resume with the run's seating (its config.yaml)")
        for name in list(self.frozen):
            bundle = self._by_name.pop(name)
            if self.discard is not None:
                self.discard(bundle)
        self.frozen = {}
        for name, source in state["frozen"].items():
            if source not in self._by_name:
                raise ValueError(f"the checkpoint holds the snapshot {name!r} of {source!r}, which this run cannot "
                                 "rebuild; resume with the run's --matchmaking and --population")
            self._add_snapshot(name, source)
        self.iteration = int(state["iteration"])
        self.seats = self._seated(self.iteration)
        if {seat: b.name for seat, b in self.seats.items()} != state["seats"]:
            raise ValueError(f"the checkpoint seats {state['seats']} at iteration {self.iteration}, this run's scheme "
                             "seats others; resume with the run's --matchmaking and its options")
        self.num_exchanges = int(state["num_exchanges"])
        self.episodes = {name: int(n) for name, n in state["episodes"].items()}
