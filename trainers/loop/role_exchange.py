"""`RoleExchange`: which model bundle sits in which seat, swapped in memory every T_REx iterations.

A *bundle* is everything that belongs to one model (`llm1` or `llm2`): the agent (policy or LoRA adapter plus its
value head) and its learner (optimizer state, KL controller, score statistics). Seats are `"pioneer"` and
`"observer"`. Role exchange (paper §1, step 7; official code `swap_freq=5`) swaps the seat → bundle mapping; nothing
is copied or reloaded, so Adam moments, β and score statistics travel with their model. `reset_on_exchange=True`
replicates the official code, whose swap through disk silently starts every one of those afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cory_env import SEATS

logger = logging.getLogger(__name__)


@dataclass
class Bundle:
    """One model identity: `name` ("llm1"/"llm2"), its agent and its learner."""

    name: str
    agent: Any
    learner: Any


class RoleExchange:
    """Seat assignment of two bundles with periodic in-memory role exchange.

    Args:
        pioneer: the bundle that starts in the pioneer seat (conventionally `llm1`).
        observer: the bundle that starts in the observer seat (`llm2`); None for the single-agent baseline.
        period: T_REx, iterations between exchanges; 0 disables (ablation w/o REx).
        reset_on_exchange: call each learner's `reset_state()` at every exchange (official-code replication).

    Raises:
        ValueError: for a negative period or two bundles with the same name.
    """

    def __init__(self, pioneer: Bundle, observer: Bundle | None, *, period: int,
                 reset_on_exchange: bool = False) -> None:
        if period < 0:
            raise ValueError(f"role_exchange_period must be >= 0, got {period}; use 0 to disable role exchange")
        if observer is None:
            # single-agent baseline: the pioneer seat only, never exchanged
            period = 0
        elif pioneer.name == observer.name:
            raise ValueError(f"the two bundles need different names, both are {pioneer.name!r}")
        self.seats: dict[str, Bundle] = {"pioneer": pioneer}
        if observer is not None:
            self.seats["observer"] = observer
        self.period = period
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
        """Swap the two seats' bundles now."""
        self.seats = {"pioneer": self.seats["observer"], "observer": self.seats["pioneer"]}
        self.num_exchanges += 1
        if self.reset_on_exchange:
            for bundle in self.seats.values():
                bundle.learner.reset_state()
        logger.info("role exchange #%d: pioneer=%s observer=%s", self.num_exchanges,
                    self.seats["pioneer"].name, self.seats["observer"].name)

    def after_iteration(self, iteration: int) -> bool:
        """Exchange roles if `iteration` ends a period; returns whether it did."""
        if self.is_exchange_iteration(iteration):
            self.exchange()
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"seats": {seat: b.name for seat, b in self.seats.items()}, "num_exchanges": self.num_exchanges}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        by_name = self.bundles
        missing = set(state["seats"].values()) - set(by_name)
        if missing:
            raise ValueError(f"checkpoint seats name unknown bundles {sorted(missing)}; have {sorted(by_name)}")
        self.seats = {seat: by_name[state["seats"][seat]] for seat in SEATS if seat in state["seats"]}
        self.num_exchanges = int(state["num_exchanges"])
