"""The headline's noise: episodes that share a query are not independent, so the gain's standard error is clustered
by query (CR1), and the line names the episodes, the distinct queries and the combined reward beside the task
reward (the 128 "held-out queries" offline were 128 episodes of 11 openings, and the plain standard error treated
them as independent)."""

from __future__ import annotations

import math

import pytest

from trainers.evaluation.episodes import clustered_sem, gain_summary


def test_the_clustered_error_by_hand():
    # diffs 1, 1 (query a) and 3, 3 (query b): mean 2, cluster sums of residuals -2 and 2;
    # CR1 variance = G/(G-1) * sum S_g^2 / N^2 = 2 * 8 / 16 = 1
    assert clustered_sem([1.0, 1.0, 3.0, 3.0], ["a", "a", "b", "b"]) == pytest.approx(1.0)
    # one episode per query: the usual s / sqrt(N) = sqrt(4/3) / 2
    assert clustered_sem([1.0, 1.0, 3.0, 3.0], ["a", "b", "c", "d"]) == pytest.approx(math.sqrt(4 / 3) / 2)
    with pytest.raises(ValueError, match="at least 2 clusters"):
        clustered_sem([1.0, 2.0], ["a", "a"])
    with pytest.raises(ValueError, match="one label per value"):
        clustered_sem([1.0, 2.0], ["a"])


def test_gain_summary_counts_queries_and_keeps_the_combined_reward():
    before = {"rewards": [0.0, 0.0, 0.0, 0.0], "query_keys": ["a", "a", "b", "b"], "combined_reward": 0.1}
    after = {"rewards": [1.0, 1.0, 3.0, 3.0], "query_keys": ["a", "a", "b", "b"], "combined_reward": -0.2}
    out = gain_summary(before, after)
    assert (out["gain"], out["episodes"], out["distinct_queries"]) == (2.0, 4, 2)
    assert out["gain_sem"] == pytest.approx(1.0)  # not the 0.577 of independent episodes
    assert (out["combined_before"], out["combined_after"]) == (0.1, -0.2)
    with pytest.raises(ValueError, match="other queries"):
        gain_summary(before, {**after, "query_keys": ["a", "b", "a", "b"]})
