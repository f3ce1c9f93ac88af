"""The IMDB task's queries: the built-in review openings, a local table, or the Hugging Face hub.

Sources (`load_imdb_records`, `IMDBOptions.min_review_chars`):

* ``data_path=None``: the package's built-in review openings (``cory_env/tasks/imdb_openings.txt``), offline.
* a local file with a ``text`` (Hugging Face `stanfordnlp/imdb`) or ``review`` (50k CSV export) column;
  ``<br />`` tags are replaced by spaces; reviews that are then empty, or shorter than `min_review_chars`, are
  dropped (an empty text cannot be a query; the count is logged).
* ``"hub"`` (or ``"stanfordnlp/imdb"``): the hub's train split when reachable. The decision is made fast: with
  ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` or a failed 3 s connection probe (`cory_env.hub.hub_reachable`)
  the loader falls back to the built-in openings. The source used is logged at INFO.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import re

from cory_env.data import load_table
from cory_env.hub import hub_reachable

__all__ = ["HUB_IMDB", "load_builtin_openings", "load_imdb_records", "resolve_imdb_source"]

logger = logging.getLogger(__name__)

#: Hugging Face dataset id of IMDB (columns text, label).
HUB_IMDB = "stanfordnlp/imdb"
_BR = re.compile(r"(?:\s*<br\s*/?>\s*)+", flags=re.IGNORECASE)


def load_builtin_openings() -> list[dict]:
    """The package's built-in review openings (no dataset text), one record per non-comment line."""
    text = importlib.resources.files("cory_env.tasks").joinpath("imdb_openings.txt").read_text("utf-8")
    return [{"query": line} for line in text.splitlines() if line.strip() and not line.startswith("#")]


def resolve_imdb_source(data_path: str | os.PathLike | None, *, probe_timeout: float = 3.0) -> str | None:
    """Where IMDB queries really come from: `data_path` itself, except ``"hub"`` (or ``"stanfordnlp/imdb"``) when
    the hub is unreachable, which becomes None (the built-in openings) with one log line. A run resolves it once
    (`cory_env.tasks.imdb.resolve_data_source`) and builds every env from the result."""
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
        logger.debug("IMDB queries: %d built-in review openings", len(records))
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
    logger.debug("IMDB queries: %d of %d reviews from %s (min_review_chars=%d)", len(records), len(table), source,
                 min_review_chars)
    return records
