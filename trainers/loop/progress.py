"""What a run shows while it trains (and `cory crossplay` while it plays): a progress bar on a terminal, one progress line at a time off it.

Under ``tee``, ``nohup`` or a batch scheduler (Slurm) there is no terminal, so tqdm's bar stays off and nothing would
appear between the start and the checkpoints; there the run logs one line per `every_s` seconds (and after the
first and the last iteration), the way transformers' trainers log every ``logging_steps``::

    iteration 5/24 (21%), 2m10s elapsed, ETA 8m14s: pioneer reward 0.231, observer reward 0.187, pioneer KL 1.20,
    collective reward 0.418

On a terminal the bar carries the same metrics with readable labels.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping

from tqdm.auto import tqdm

__all__ = ["Progress", "progress_metrics"]

logger = logging.getLogger(__name__)

def progress_metrics(seats: tuple[str, ...]) -> dict[str, str]:
    """The metrics the bar and the lines show, with their labels, for a seating's `seats` (in acting order): each
    seat's task reward, the first seat's KL, the collective reward (a metric absent from a run is left out).

    >>> list(progress_metrics(("pioneer", "observer")).values())
    ['pioneer reward', 'observer reward', 'pioneer KL', 'collective reward']
    """
    return {**{f"{seat}/task_reward": f"{seat} reward" for seat in seats}, f"{seats[0]}/kl": f"{seats[0]} KL",
            "cory/collective_reward": "collective reward"}


def _duration(seconds: float) -> str:
    """``"2m10s"``, ``"1h04m"``, ``"45s"``."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Progress of steps ``start .. total - 1`` of one process (a run's iterations, `cory crossplay`'s line-ups).

    Args:
        start, total: the first step this call makes, and the last one's count (a run's `num_iterations`).
        label: the bar's label (the seating).
        seats: the seating's seat names, in acting order (`progress_metrics`); shown: metric -> label instead.
        enabled: this process reports (the main one); False shows nothing.
        every_s: off a terminal, the most seconds between two progress lines (0: a line after every step).
        unit: what a step is called in a line (``"iteration"``, ``"line-up"``).
    """

    def __init__(self, start: int, total: int, label: str, *, seats: tuple[str, ...] = (), enabled: bool,
                 every_s: float, unit: str = "iteration", shown: Mapping[str, str] | None = None) -> None:
        self.start, self.total, self.every_s, self.unit = start, total, every_s, unit
        self.shown = dict(shown) if shown is not None else progress_metrics(seats)
        self.bar = tqdm(total=total, initial=start, desc=label, dynamic_ncols=True,
                        disable=None if enabled else True)  # None: a bar on a terminal only
        self.lines = enabled and self.bar.disable  # off a terminal: lines instead
        self.t0 = self.last_line = time.monotonic()

    def line(self, it: int, metrics: Mapping[str, float]) -> str:
        """The progress line after step `it` (0-based) with `metrics`."""
        done, elapsed = it + 1, time.monotonic() - self.t0
        eta = elapsed / (done - self.start) * (self.total - done)
        values = ", ".join(f"{label} {metrics[key]:.3f}" for key, label in self.shown.items() if key in metrics)
        return (f"{self.unit} {done}/{self.total} ({100 * done // self.total}%), {_duration(elapsed)} elapsed, "
                f"ETA {_duration(eta)}: {values}")

    def update(self, it: int, metrics: Mapping[str, float]) -> None:
        """Step `it` ended with `metrics`: move the bar, or log a line when one is due (the first and the last step,
        and `every_s` seconds after the last line)."""
        self.bar.set_postfix({label: f"{metrics[key]:.3f}" for key, label in self.shown.items()
                              if key in metrics}, refresh=False)
        self.bar.update(1)
        now = time.monotonic()
        if self.lines and (it == self.start or it == self.total - 1 or now - self.last_line >= self.every_s):
            logger.info("%s", self.line(it, metrics))
            self.last_line = now

    def close(self) -> None:
        self.bar.close()
