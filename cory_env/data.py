"""Query loaders: local tables (CSV/JSONL/Parquet through `datasets`), the Hugging Face hub, built-in openings.

A loader returns *records*: a list of dicts, each with a ``"query"`` text plus the row's other fields (e.g.
IMDB ``label``/``sentiment``, GSM8K ``answer``). The env draws one record per episode.

IMDB sources (`load_imdb_records`):

* ``data_path=None``: the package's built-in review openings (``cory_env/tasks/imdb_openings.txt``), offline.
* a local file with a ``text`` (Hugging Face `stanfordnlp/imdb`) or ``review`` (50k CSV export) column;
  ``<br />`` tags are replaced by spaces; reviews that are then empty, or shorter than `min_review_chars`, are
  dropped (an empty text cannot be a query; the count is logged).
* ``"hub"`` (or ``"stanfordnlp/imdb"``): the hub's train split when reachable. The decision is made fast: with
  ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` or a failed 3 s connection probe (`cory_env.hub.hub_reachable`)
  the loader falls back to the built-in openings. The source used is logged at INFO.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import re
from pathlib import Path

from cory_env.hub import hub_reachable

__all__ = [
    "HUB_IMDB",
    "heldout_split",
    "resolve_imdb_source",
    "load_builtin_openings",
    "load_imdb_records",
    "load_table",
]

logger = logging.getLogger(__name__)

#: Hugging Face dataset id of IMDB (columns text, label).
HUB_IMDB = "stanfordnlp/imdb"
_BR = re.compile(r"(?:\s*<br\s*/?>\s*)+", flags=re.IGNORECASE)
_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_table(path: str | os.PathLike):
    """Load a local CSV, JSON/JSONL or Parquet file with `datasets.load_dataset`.

    Args:
        path: file path; the suffix picks the format.

    Returns:
        A `datasets.Dataset`.

    Raises:
        FileNotFoundError: if `path` does not exist.
        ValueError: for an unsupported suffix, or a file without rows or not in its format.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} not found; pass an existing CSV/JSONL/Parquet path, "
                                "or data_path=None for the built-in data")
    builder = _BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(f"data file {str(path)!r} has the unsupported suffix {path.suffix!r}; use one of "
                         f"{sorted(_BUILDERS)}")
    import datasets

    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train")
    except (StopIteration, ValueError, datasets.exceptions.DatasetGenerationError) as exc:
        # `datasets` raises these for an empty, header-only or malformed file
        cause = exc.__cause__ or exc
        raise ValueError(f"data file {str(path)!r} has no rows or is not valid {builder.upper()} "
                         f"({type(cause).__name__}: {str(cause)[:200]}); pass a file with data, or data_path=None "
                         "for the built-in data") from exc


def heldout_split(records: list[dict], split: str, heldout_fraction: float) -> list[dict]:
    """The records of one side of the held-out slice (`EnvConfig.heldout_fraction`, `EnvConfig.query_split`).

    A record is held out when the first 32 bits of the SHA-256 of its ``"query"`` text, read as a fraction of 2^32,
    fall below `heldout_fraction`: a fixed slice, the same on every machine, run and file order, so a run's
    training queries never come from the reviews its `cory eval` uses. (Different reviews may still open with the
    same words.)

    Args:
        records: ``{"query": text, ...}`` records.
        split: "train" (outside the slice) or "test" (inside it).
        heldout_fraction: in [0, 1); 0 returns `records` unchanged for "train".

    Raises:
        ValueError: an unknown split, a fraction outside [0, 1), "test" with a fraction of 0, or an empty side
            (the message gives the record count and what to change).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction!r}")
    if heldout_fraction == 0.0:
        if split == "test":
            raise ValueError("the 'test' split needs heldout_fraction > 0 (e.g. 0.1)")
        return records
    threshold = heldout_fraction * 2**32
    chosen = [r for r in records
              if (int(hashlib.sha256(str(r["query"]).encode("utf-8")).hexdigest()[:8], 16) < threshold)
              == (split == "test")]
    if not chosen:
        raise ValueError(f"the {split!r} side of heldout_fraction={heldout_fraction} is empty among {len(records)} "
                         "records; use more data or another heldout_fraction")
    logger.info("queries: %d of %d records on the %r side of the held-out slice (heldout_fraction=%g)",
                len(chosen), len(records), split, heldout_fraction)
    return chosen


def load_builtin_openings() -> list[dict]:
    """The package's built-in review openings (no dataset text), one record per non-comment line."""
    text = importlib.resources.files("cory_env.tasks").joinpath("imdb_openings.txt").read_text("utf-8")
    return [{"query": line} for line in text.splitlines() if line.strip() and not line.startswith("#")]


def resolve_imdb_source(data_path: str | os.PathLike | None, *, probe_timeout: float = 3.0) -> str | None:
    """Where IMDB queries really come from: `data_path` itself, except ``"hub"`` (or ``"stanfordnlp/imdb"``) when
    the hub is unreachable, which becomes None (the built-in openings) with one log line.

    Resolve once and build every env of a run from the result (`trainers.loop.CORYTrainer` does): the probe then
    runs, and its fallback line prints, once per run instead of once per env (training, evaluation before and after).
    """
    if data_path is None or str(data_path) not in {"hub", HUB_IMDB}:
        return None if data_path is None else str(data_path)
    if hub_reachable(probe_timeout, datasets=True):
        return str(data_path)
    logger.info("IMDB queries: hub %s unreachable (offline or probe failed); using the built-in review openings",
                HUB_IMDB)
    return None


def load_imdb_records(data_path: str | os.PathLike | None = None, *, min_review_chars: int = 200,
                      probe_timeout: float = 3.0) -> list[dict]:
    """IMDB reviews (or the built-in openings) as query records.

    Args:
        data_path: None (built-in openings), a local file, or ``"hub"`` / ``"stanfordnlp/imdb"``.
        min_review_chars: drop reviews shorter than this after removing ``<br />`` (not applied to the openings);
            empty reviews are always dropped.
        probe_timeout: seconds allowed for the hub connection probe.

    Returns:
        Records ``{"query": review text, **other columns}``.

    Raises:
        FileNotFoundError: for a missing file.
        ValueError: if the table has neither a ``text`` nor a ``review`` column (the columns found are listed), or
            no review is left after filtering.
    """
    data_path = resolve_imdb_source(data_path, probe_timeout=probe_timeout)
    if data_path is None:
        records = load_builtin_openings()
        logger.info("IMDB queries: %d built-in review openings", len(records))
        return records
    if data_path in {"hub", HUB_IMDB}:
        import datasets

        table, source = datasets.load_dataset(HUB_IMDB, split="train"), f"hub {HUB_IMDB} (train)"
    else:
        table, source = load_table(data_path), str(data_path)
    column = next((c for c in ("text", "review") if c in table.column_names), None)
    if column is None:
        raise ValueError(f"IMDB data {source!r} has no 'text' or 'review' column (columns found: "
                         f"{table.column_names}); rename the review column to 'text' or 'review'")
    records, empty = [], 0
    for row in table:
        text = _BR.sub(" ", str(row.pop(column) or "")).strip()
        empty += not text
        if text and len(text) >= min_review_chars:
            records.append({"query": text, **row})
    if empty:
        logger.warning("IMDB data %s: dropped %d empty review(s) (nothing left after removing <br /> tags and "
                       "whitespace)", source, empty)
    if not records:
        raise ValueError(f"IMDB data {source!r}: no review of at least min_review_chars={min_review_chars} "
                         f"characters among {len(table)} rows; lower min_review_chars or use other data")
    logger.info("IMDB queries: %d of %d reviews from %s (min_review_chars=%d)", len(records), len(table), source,
                min_review_chars)
    return records
