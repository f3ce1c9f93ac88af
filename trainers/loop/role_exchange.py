"""`RoleExchange`: which model bundle sits in which seat, rotated in memory every T_REx iterations.

A *bundle* is everything that belongs to one model (`llm1` … `llmN`): the agent (policy or LoRA adapter plus its
value head) and its learner (optimizer state, KL controller, score statistics). Seats are the seating's
(`cory_env.seating`: ``"pioneer"``, ``"observer"`` for CORY). Role exchange (docs/paper.md §1, step 7; official code
`swap_freq=5`) rotates the seat → bundle mapping by one seat: the bundle of seat k moves to seat k − 1 and the
pioneer's to the last seat, so over N exchanges every model sits in every seat; with two seats this is CORY's swap.
Nothing is copied or reloaded, so Adam moments, β and score statistics travel with their model.
`reset_on_exchange=True` replicates the official code, whose swap through disk silently starts every one of those
afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from cory_env.checks import check_number

logger = logging.getLogger(__name__)


@dataclass
class Bundle:
    """One model identity: `name` ("llm1", "llm2", ...), its agent and its learner."""

    name: str
    agent: Any
    learner: Any


class RoleExchange:
    """Seat assignment of N bundles with periodic in-memory role rotation.

    Args:
        bundles: one bundle per seat, in seat order (bundle k starts in seat k; conventionally `llm1` … `llmN`).
        seats: the seat names in acting order (`cory_env.seating.Seating.names`).
        period: T_REx, iterations between exchanges; 0 disables (ablation w/o REx). One seat never exchanges.
        reset_on_exchange: call each learner's `reset_state()` at every exchange (official-code replication).

    Raises:
        ValueError: for a negative period, a bundle count other than the seat count, or two bundles with one name.
    """

    def __init__(self, bundles: Sequence[Bundle], seats: Sequence[str], *, period: int,
                 reset_on_exchange: bool = False) -> None:
        check_number(period, "role_exchange_period", integer=True, low=0, fix="0 disables role exchange")
        bundles, seats = list(bundles), tuple(seats)
        if len(bundles) != len(seats) or not seats:
            raise ValueError(f"{len(bundles)} bundle(s) for the seats {list(seats)}: give one bundle per seat")
        names = [b.name for b in bundles]
        if len(set(names)) != len(names):
            raise ValueError(f"the bundles need different names, got {names}")
        self.seats: dict[str, Bundle] = dict(zip(seats, bundles))
        self.period = period if len(seats) > 1 else 0  # a single seat has nobody to exchange with
        self.reset_on_exchange = reset_on_exchange
        self.num_exchanges = 0

    @property
    def bundles(self) -> dict[str, Bundle]:
        """Model name -> bundle, independent of seats."""
        return {b.name: b for b in self.seats.values()}

    def seat_of(self, name: str) -> str:
        """The seat where the bundle called `name` sits now."""
        for seat, bundle in self.seats.items():
            if bundle.name == name:
                return seat
        raise KeyError(f"no bundle named {name!r}; have {[b.name for b in self.seats.values()]}")

    def is_exchange_iteration(self, iteration: int) -> bool:
        """True when the exchange follows the update of 0-based `iteration` ((iteration + 1) % T_REx == 0)."""
        return self.period > 0 and (iteration + 1) % self.period == 0

    def exchange(self) -> None:
        """Rotate the bundles one seat forward now (the pioneer's goes to the last seat; two seats: a swap)."""
        seats, bundles = list(self.seats), list(self.seats.values())
        self.seats = dict(zip(seats, bundles[1:] + bundles[:1]))
        self.num_exchanges += 1
        if self.reset_on_exchange:
            for bundle in self.seats.values():
                bundle.learner.reset_state()
        logger.info("role exchange #%d: %s", self.num_exchanges,
                    " ".join(f"{seat}={b.name}" for seat, b in self.seats.items()))

    def after_iteration(self, iteration: int) -> bool:
        """Exchange roles if `iteration` ends a period; returns whether it did."""
        if self.is_exchange_iteration(iteration):
            self.exchange()
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"seats": {seat: b.name for seat, b in self.seats.items()}, "num_exchanges": self.num_exchanges}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the seat → model map of `state_dict` (a checkpoint of the same seating).

        Raises:
            ValueError: the state names other seats or unknown bundles.
        """
        by_name = self.bundles
        if set(state["seats"]) != set(self.seats):
            raise ValueError(f"the checkpoint seats {list(state['seats'])}, this run's seating has {list(self.seats)}; "
                             "resume with the run's seating (its config.yaml)")
        missing = set(state["seats"].values()) - set(by_name)
        if missing:
            raise ValueError(f"checkpoint seats name unknown bundles {sorted(missing)}; have {sorted(by_name)}")
        self.seats = {seat: by_name[state["seats"][seat]] for seat in self.seats}  # in acting order
        self.num_exchanges = int(state["num_exchanges"])
