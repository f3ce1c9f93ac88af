"""Run logs: one JSON line per iteration in `metrics.jsonl`, sample texts in `samples.jsonl`, TensorBoard scalars.

Keys are `scope/quantity` (the glossary: docs/metrics.md). The x-axis is the CORY iteration (0-based). On resume,
lines past the checkpoint's iteration are dropped first (`truncate_jsonl`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from cory_env.registry import PluginContractError
from cory_env.write_errors import write_errors

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """All records of a JSON-lines file (a torn last line from a crash is ignored)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning("ignoring a torn line in %s", path)
    return out


def truncate_jsonl(path: Path, last_iteration: int) -> None:
    """Keep only records with `iteration <= last_iteration` (written atomically)."""
    if not path.exists():
        return
    keep = [r for r in read_jsonl(path) if int(r.get("iteration", -1)) <= last_iteration]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in keep:
            fh.write(json.dumps(record) + "\n")
    os.replace(tmp, path)


def iteration_metrics(stats: Mapping[str, dict], transcript, seats: Mapping[str, Any], *, frozen: Iterable[str],
                      betas: Mapping[str, float], eta: float | None, learner: str, models: Iterable[str],
                      first: str) -> dict[str, float]:
    """An iteration's metrics (docs/metrics.md) from the algorithm's stats, the episodes' transcript and the seating:
    every learning seat's stats under both its seat and its model (``pioneer/kl``, ``llm1/kl``) with the combined
    reward r − η·KL (η = `eta`, else the seat's β of this step), a frozen snapshot's seat's task reward and
    ``cory/<seat>_frozen``, the collective reward, and the model ↔ seat map (``cory/llmK_seat``: the seat's index,
    −1 for a model sitting out).

    Args:
        stats: seat -> the learner's stats (`trainers.learning.joint.JointLearner.step`).
        transcript: the iteration's `cory_env.episode.EpisodeTranscript`.
        seats: seat -> the bundle seated there (`trainers.loop.role_exchange.Bundle`), in acting order.
        frozen: the seats a frozen snapshot holds; betas: seat -> its β of this step; eta: `CORYConfig.eta`.
        learner: the learner's name, for messages; models: every learning model's name; first: the first seat.

    Raises:
        PluginContractError: a learner's stats without ``task_reward`` or ``kl`` (docs/extending.md).
    """
    metrics: dict[str, float] = {}
    for seat, seat_stats in stats.items():
        bundle = seats[seat]
        missing = [key for key in ("task_reward", "kl") if key not in seat_stats]
        if missing:  # the Learner protocol's stats (docs/extending.md); the checkpoint before stays the latest
            raise PluginContractError(f"learner {learner!r} returned stats without {missing} for {bundle.name} in "
                                      f"seat {seat} (it returned {sorted(seat_stats)}); a learner's step returns at "
                                      "least task_reward and kl (docs/extending.md)")
        seat_stats["combined_reward"] = seat_stats["task_reward"] - (eta if eta is not None else betas[seat]) * \
            seat_stats["kl"]
        for key, value in seat_stats.items():
            metrics[f"{seat}/{key}"] = value
            metrics[f"{bundle.name}/{key}"] = value
    for seat in frozen:  # a snapshot's seat: its task reward, and that it is frozen
        metrics[f"{seat}/task_reward"] = float(np.mean(transcript.seats[seat].task_reward))
        metrics[f"cory/{seat}_frozen"] = 1.0
    metrics["cory/collective_reward"] = float(np.mean(transcript.seats[first].reward))
    metrics["cory/pioneer_is_llm1"] = float(seats[first].name == "llm1")  # during this iteration
    for k, (seat, bundle) in enumerate(seats.items()):  # the model <-> seat map of this iteration (seat index)
        if seat not in frozen:
            metrics[f"cory/{bundle.name}_seat"] = float(k)
    for name in set(models) - {b.name for b in seats.values()}:  # a population's idle models
        metrics[f"cory/{name}_seat"] = -1.0
    return metrics


def sample_rows(transcript, n: int, first: str, models: Mapping[str, str]) -> list[dict]:
    """The first `n` episodes of `transcript` as ``samples.jsonl`` rows: the query, every seat's model (`models`:
    seat -> the model that sat there, ``<seat>_model``), response and task reward, and the collective reward (the
    `first` seat's)."""
    out = []
    for i in range(min(n, len(transcript.query_text))):
        sample: dict[str, Any] = {"query": transcript.query_text[i]}
        for seat, seat_t in transcript.seats.items():
            sample[f"{seat}_model"] = models[seat]
            sample[f"{seat}_response"] = seat_t.response_text[i]
            sample[f"{seat}_task_reward"] = float(seat_t.task_reward[i])
        sample["reward"] = float(transcript.seats[first].reward[i])
        out.append(sample)
    return out


class MetricsLogger:
    """Writes metrics and samples of one run (a context manager; `close` is idempotent).

    Args:
        output_dir: the run directory.
        tensorboard: also write TensorBoard scalars (torch.utils.tensorboard).
        config_text: YAML of the resolved config, written to TensorBoard as text at step 0 (CleanRL style).
        purge_step: on resume, the first iteration to be rewritten: TensorBoard events at or after it (written
            after the checkpoint by the interrupted run) are hidden, as `truncate_jsonl` drops their JSON lines.
    """

    def __init__(self, output_dir: str | os.PathLike, *, tensorboard: bool = True, config_text: str | None = None,
                 purge_step: int | None = None):
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._metrics = self._samples = self._tb = None
        self._failed = False
        try:
            self._metrics = open(self.output_dir / METRICS_FILE, "a", encoding="utf-8")
            self._samples = open(self.output_dir / SAMPLES_FILE, "a", encoding="utf-8")
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter
                self._tb = SummaryWriter(log_dir=str(self.output_dir / TENSORBOARD_DIR), purge_step=purge_step)
                if config_text is not None and not purge_step:
                    self._tb.add_text("config", f"```yaml\n{config_text}\n```", 0)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """Append one JSON line ``{"iteration": i, key: value, ...}`` (NaN/inf written as strings) and scalars."""
        record = {"iteration": iteration, **{k: _jsonable(v) for k, v in metrics.items()}}
        with self._writing(self._metrics):
            self._metrics.write(json.dumps(record) + "\n")
            self._metrics.flush()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(key, value, iteration)

    def log_samples(self, iteration: int, samples: Iterable[dict]) -> None:
        """Append sample texts; text that is not valid Unicode (lone surrogates) is escaped, never fatal."""
        with self._writing(self._samples):
            for sample in samples:
                line = json.dumps({"iteration": iteration, **sample}, ensure_ascii=False)
                self._samples.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
            self._samples.flush()

    @contextlib.contextmanager
    def _writing(self, handle) -> Iterator[None]:
        """A write of `handle`: a failure (a full disk) is an `OSError` naming the file, and `close` then drops what
        the file's buffer still holds (the next run's resume drops the torn line, `read_jsonl`)."""
        try:
            with write_errors(handle.name):
                yield
        except OSError:
            self._failed = True
            raise

    def close(self) -> None:
        """Close the files and the TensorBoard writer (safe to call twice).

        Raises:
            OSError: flushing a file failed (`write_errors`); never after a write already failed.
        """
        for handle in (self._metrics, self._samples):
            if handle is not None and not handle.closed:
                with contextlib.suppress(OSError) if self._failed else write_errors(handle.name):
                    handle.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
