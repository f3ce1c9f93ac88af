"""What every task's data loading shares: local tables (CSV/JSONL/Parquet through `datasets`) and the fixed
held-out slice.

A task's loader returns *records*: a list of dicts, each with a ``"query"`` text plus the row's other fields (e.g.
IMDB ``label``, GSM8K ``answer``). The env draws one record per episode. The tasks' own loaders live with them
(`cory_env.tasks.imdb_data`, `cory_env.tasks.gsm8k`).
"""

from __future__ import annotations

import hashlib
import logging
import os

from cory_env.checks import check_number, check_path

__all__ = ["heldout_split", "load_table"]

logger = logging.getLogger(__name__)

_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_table(path: str | os.PathLike):
    """Load a local CSV, JSON/JSONL or Parquet file (its suffix picks the format) with `datasets.load_dataset`, as a
    `datasets.Dataset`.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: nothing at `path`, a folder, unreadable
            (`cory_env.checks.check_path`).
        ValueError: for an unsupported suffix, or a file without rows or not in its format.
    """
    path = check_path(path, "data_path", fix="pass an existing CSV/JSONL/Parquet file, or data_path=None for the "
                                             "built-in data")
    builder = _BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(f"data_path {str(path)!r} has the unsupported suffix {path.suffix!r}; use one of "
                         f"{sorted(_BUILDERS)}")
    import datasets
    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train")
    except (StopIteration, ValueError, datasets.exceptions.DatasetGenerationError) as exc:
        # `datasets` raises these for an empty, header-only or malformed file
        cause = exc.__cause__ or exc
        raise ValueError(f"data_path {str(path)!r} has no rows or is not valid {builder.upper()} "
                         f"({type(cause).__name__}: {str(cause)[:200]}); pass a file with data, or data_path=None "
                         "for the built-in data") from exc


def heldout_split(records: list[dict], split: str, heldout_fraction: float) -> list[dict]:
    """The records of one side of the held-out slice (`EnvConfig.heldout_fraction`, `EnvConfig.query_split`).

    A record is held out when the first 32 bits of the SHA-256 of its ``"query"`` text, read as a fraction of 2^32, fall
    below `heldout_fraction`: a fixed slice, the same on every machine, run and file order, so a run's training queries
    never come from the reviews its `cory eval` uses. (Different reviews may still open with the same words.)

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
    check_number(heldout_fraction, "heldout_fraction", low=0, below=1)
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
    logger.debug("queries: %d of %d records on the %r side of the held-out slice (heldout_fraction=%g)",
                 len(chosen), len(records), split, heldout_fraction)
    return chosen
