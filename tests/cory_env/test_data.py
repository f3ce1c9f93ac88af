"""Query loaders: the real IMDB CSV, a JSONL with a `text` column, built-in openings, hub fallback, errors."""

from __future__ import annotations

import contextlib
import json
import logging

import pytest

from cory_env import data, hub
from cory_env.tasks import imdb_data
from cory_env.tasks.imdb_data import load_builtin_openings, load_imdb_records
from cory_env.tasks.gsm8k import load_gsm8k


def test_imdb_csv_review_column_filtering_and_br_removal(imdb_csv):
    records = load_imdb_records(imdb_csv, min_review_chars=200)
    assert 900 < len(records) < 1000  # short reviews dropped
    assert all(len(r["query"]) >= 200 for r in records)
    assert not any("<br" in r["query"] for r in records)
    assert records[0]["query"].startswith("One of the other reviewers has mentioned")
    assert records[0]["sentiment"] == "positive"  # other columns travel with the record
    everything = load_imdb_records(imdb_csv, min_review_chars=0)
    assert len(everything) == 1000


def test_imdb_jsonl_text_column(tmp_path):
    path = tmp_path / "reviews.jsonl"
    rows = [{"text": "A" * 50 + "<br /><br />" + "B" * 50, "label": 1}, {"text": "too short", "label": 0}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records = load_imdb_records(path, min_review_chars=60)
    assert records == [{"query": "A" * 50 + " " + "B" * 50, "label": 1}]


def test_missing_file_and_wrong_columns(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_path .*nope.csv' does not exist; pass an existing CSV"):
        load_imdb_records(tmp_path / "nope.csv")
    path = tmp_path / "other.csv"
    path.write_text("title,stars\nGood film,5\n")
    with pytest.raises(ValueError, match=r"no 'text' or 'review' column \(columns found: \['title', 'stars'\]\)"):
        load_imdb_records(path)
    bad = tmp_path / "x.txt"
    bad.write_text("hi")
    with pytest.raises(ValueError, match="unsupported suffix '.txt'"):
        load_imdb_records(bad)


def test_empty_reviews_are_dropped_even_with_min_review_chars_0(tmp_path, caplog):
    """`<br /><br />` became an empty query that failed only when first drawn (iteration 5)."""
    path = tmp_path / "reviews.csv"
    path.write_text("review\nA good film.\n<br /><br />\nBad.\n")
    with caplog.at_level(logging.WARNING, logger="cory_env.tasks.imdb_data"):
        records = load_imdb_records(path, min_review_chars=0)
    assert [r["query"] for r in records] == ["A good film.", "Bad."]
    assert "dropped 1 empty review(s)" in caplog.text


def test_zero_usable_rows(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("review\nshort one\nanother\n")
    with pytest.raises(ValueError, match="no review of at least min_review_chars=200 characters among 2 rows"):
        load_imdb_records(path)


def test_builtin_openings_are_the_default():
    records = load_imdb_records(None)
    assert records == load_builtin_openings() and len(records) == 289
    assert not any(r["query"].startswith("#") for r in records)


def test_hub_falls_back_offline(monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.INFO, logger="cory_env.tasks.imdb_data"):
        records = load_imdb_records("hub")
    assert records == load_builtin_openings()
    assert "unreachable" in caplog.text


def test_hub_probe_failure_falls_back(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)

    def refuse(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(hub.socket, "create_connection", refuse)  # the one hub probe (cory_env.hub)
    assert imdb_data.hub_reachable is hub.hub_reachable and hub.hub_reachable(datasets=True) is False
    assert load_imdb_records("stanfordnlp/imdb") == load_builtin_openings()


def test_datasets_offline_counts_for_data_only(monkeypatch):
    """HF_DATASETS_OFFLINE stops dataset downloads (IMDB, GSM8K), not model loading."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub.socket, "create_connection", lambda *a, **k: contextlib.nullcontext())
    assert hub.hub_reachable(datasets=True) is False and hub.hub_reachable() is True
    assert load_imdb_records("hub") == load_builtin_openings()


def test_gsm8k_records(gsm8k_paths, tmp_path):
    _, test_path = gsm8k_paths
    records = load_gsm8k(test_path)
    assert len(records) == 1319 and records[0]["query"].startswith("Janet") and "####" in records[0]["answer"]
    bad = tmp_path / "g.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ValueError, match=r"g.jsonl, line 1.*answer"):
        load_gsm8k(bad)



def test_heldout_split_is_a_fixed_disjoint_slice(imdb_csv):
    records = load_imdb_records(imdb_csv, min_review_chars=0)
    train = data.heldout_split(records, "train", 0.2)
    test = data.heldout_split(records, "test", 0.2)
    train_q, test_q = {r["query"] for r in train}, {r["query"] for r in test}
    assert not train_q & test_q and len(train) + len(test) == len(records)
    assert 0.15 < len(test) / len(records) < 0.25  # 1000 reviews: the slice is near the fraction
    # the same slice whatever the order of the file, and nested: a smaller fraction holds out a subset
    assert {r["query"] for r in data.heldout_split(records[::-1], "test", 0.2)} == test_q
    assert {r["query"] for r in data.heldout_split(records, "test", 0.1)} < test_q
    assert data.heldout_split(records, "train", 0.0) is records


def test_heldout_split_errors():
    openings = load_builtin_openings()
    with pytest.raises(ValueError, match="needs heldout_fraction > 0"):
        data.heldout_split(openings, "test", 0.0)
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        data.heldout_split(openings, "validation", 0.1)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        data.heldout_split(openings, "train", 1.0)
    with pytest.raises(ValueError, match="is empty among 1 records"):
        data.heldout_split([{"query": "one review"}], "test", 1e-9)
