"""Run logs: one JSON line per iteration in `metrics.jsonl`, sample texts in `samples.jsonl`, TensorBoard scalars.

Keys are `scope/quantity` (the glossary: docs/metrics.md). The x-axis is the CORY iteration (0-based). On resume,
lines past the checkpoint's iteration are dropped first so the resumed run appends exactly where the checkpoint
stopped.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


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
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(key, value, iteration)

    def log_samples(self, iteration: int, samples: Iterable[dict]) -> None:
        """Append sample texts; text that is not valid Unicode (lone surrogates) is escaped, never fatal."""
        for sample in samples:
            line = json.dumps({"iteration": iteration, **sample}, ensure_ascii=False)
            self._samples.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        self._samples.flush()

    def close(self) -> None:
        """Close the files and the TensorBoard writer (safe to call twice)."""
        for handle in (self._metrics, self._samples):
            if handle is not None and not handle.closed:
                handle.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
