"""The ladder's robust statistics on hand-computed cases (`trainers/evaluation/stats.py`): IQM, percentile-bootstrap
intervals, the probability of improvement, and the n/a and error policy for one seed, differing seeds, no data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from trainers.evaluation.stats import (arm_summary, bootstrap_ci, improvement_summary, iqm, probability_of_improvement,
                              probability_of_improvement_ci)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # mean of 3, 4, 5, 6
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # order does not matter
    assert iqm([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # floor(5 / 4) = 1 cut from each end: mean of 2, 3, 4
    assert iqm([0.1, 0.2, 0.6]) == pytest.approx(0.3)  # fewer than 4 runs: nothing cut
    assert iqm([2.0]) == 2.0
    batch = np.array([[1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 1, 1, 1, 1, 9, 9]])
    np.testing.assert_allclose(iqm(batch, axis=-1), [4.5, 1.0])  # the batched form bootstrap_ci uses


@pytest.mark.parametrize("bad, match", [([], "empty"), ([1.0, float("nan")], "non-finite"),
                                        ([1.0, float("inf")], "non-finite")])
def test_every_function_refuses_empty_or_non_finite_input(bad, match):
    for call in (lambda: iqm(bad), lambda: bootstrap_ci(bad), lambda: arm_summary(bad),
                 lambda: probability_of_improvement(bad, [1.0]), lambda: probability_of_improvement([1.0], bad),
                 lambda: probability_of_improvement_ci(bad, [1.0, 2.0]),
                 lambda: improvement_summary(dict(enumerate(bad)), {0: 1.0})):
        with pytest.raises(ValueError, match=match):
            call()


def test_probability_of_improvement_counts_pairs_and_ties_count_half():
    assert probability_of_improvement([1, 2], [0, 3]) == 0.5  # 1>0, 1<3, 2>0, 2<3
    assert probability_of_improvement([1, 2], [1, 1]) == 0.75  # (0.5 + 0.5 + 1 + 1) / 4
    assert probability_of_improvement([3, 4, 5], [1, 2]) == 1.0
    assert probability_of_improvement([1], [1]) == 0.5
    assert probability_of_improvement([0.2], [0.1, 0.3, 0.2]) == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3
    rng = np.random.default_rng(0)
    for _ in range(20):  # against the naive form: the Mann-Whitney U statistic / (n m), and P(A>B) + P(B>A) = 1
        a, b = rng.integers(0, 5, size=rng.integers(1, 7)), rng.integers(0, 5, size=rng.integers(1, 7))
        u = sps.mannwhitneyu(a, b).statistic if len(set(a) | set(b)) > 1 else len(a) * len(b) / 2
        assert probability_of_improvement(a, b) == pytest.approx(u / (len(a) * len(b)))
        assert probability_of_improvement(a, b) + probability_of_improvement(b, a) == pytest.approx(1.0)


def test_bootstrap_ci_on_hand_computed_cases():
    # two runs 0 and 1: resample means 0 (p 1/4), 0.5 (1/2), 1 (1/4), so the 2.5 % and 97.5 % quantiles are 0 and 1
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # three runs: all three resampled as the lowest has probability 1/27 > 2.5 %, so the interval is the range
    low, high = bootstrap_ci([0.29, 0.31, 0.44])
    assert (low, high) == (pytest.approx(0.29), pytest.approx(0.44))
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)  # every resample the same
    assert bootstrap_ci([1.0, 2.0, 3.0], np.median) == (1.0, 3.0)  # a statistic without `axis`: one call per resample
    with pytest.raises(ValueError, match="one value gives no bootstrap interval"):
        bootstrap_ci([0.5])
    with pytest.raises(ValueError, match="confidence must be in"):
        bootstrap_ci([0.0, 1.0], confidence=95)


def test_bootstrap_ci_contains_the_estimate_narrows_with_data_and_repeats_with_its_seed():
    rng = np.random.default_rng(1)
    small, large = rng.normal(0.5, 0.1, size=10), rng.normal(0.5, 0.1, size=400)
    for values in (small, large):
        low, high = bootstrap_ci(values)
        assert low <= iqm(values) <= high
    width = {n: np.subtract(*bootstrap_ci(v)[::-1]) for n, v in (("small", small), ("large", large))}
    assert width["large"] < width["small"] / 3  # ~ 1 / sqrt(n): 40x the runs, ~6x narrower
    assert bootstrap_ci(small, seed=7) == bootstrap_ci(small, seed=7)
    assert bootstrap_ci(small, seed=7) != bootstrap_ci(small, seed=8)
    low90, high90 = bootstrap_ci(small, confidence=0.9)
    low95, high95 = bootstrap_ci(small)
    assert low95 <= low90 and high90 <= high95


def test_probability_of_improvement_ci():
    assert probability_of_improvement_ci([2, 3], [0, 1]) == (1.0, 1.0)  # every resample of A beats every one of B
    assert probability_of_improvement_ci([0, 1], [2, 3]) == (0.0, 0.0)
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.6, 0.1, size=8), rng.normal(0.5, 0.1, size=8)
    low, high = probability_of_improvement_ci(a, b)
    assert 0 <= low <= probability_of_improvement(a, b) <= high <= 1
    assert probability_of_improvement_ci(a, b, seed=3) == probability_of_improvement_ci(a, b, seed=3)
    wide = probability_of_improvement_ci(rng.normal(0.6, 0.1, size=4), rng.normal(0.5, 0.1, size=4))
    many = probability_of_improvement_ci(rng.normal(0.6, 0.1, size=200), rng.normal(0.5, 0.1, size=200))
    assert many[1] - many[0] < wide[1] - wide[0]
    with pytest.raises(ValueError, match="arm A has 1, arm B 2"):
        probability_of_improvement_ci([1.0], [0.0, 2.0])


def test_arm_summary_marks_one_seed_as_na():
    out = arm_summary([0.1, 0.2, 0.6])
    assert out["iqm"] == pytest.approx(0.3) and out["mean"] == pytest.approx(0.3) and out["n"] == 3
    assert out["ci"] == [pytest.approx(0.1), pytest.approx(0.6)] and "why" not in out
    assert arm_summary([0.4]) == {"iqm": 0.4, "ci": None, "n": 1, "mean": 0.4, "why": "one seed"}
    eight = arm_summary(list(range(1, 9)))
    assert eight["iqm"] == 4.5 and eight["mean"] == 4.5 and eight["ci"][0] < 4.5 < eight["ci"][1]


def test_improvement_summary_compares_independent_runs_whatever_their_seeds():
    out = improvement_summary({0: 1.0, 1: 2.0}, {1: 3.0, 0: 0.0})  # seed order does not matter
    assert out["p"] == 0.5 and out["n"] == [2, 2] and out["seeds"] == [0, 1]
    assert out["ci"][0] <= 0.5 <= out["ci"][1]
    one = improvement_summary({3: 0.7}, {3: 0.2})
    assert one == {"p": 1.0, "ci": None, "n": [1, 1], "seeds": [3], "why": "one seed"}
    # other seeds: all 3 x 2 pairs, as rliable defines it (0.3 > 0.1, 0.3 > 0.2, ...: every pair A above)
    differ = improvement_summary({0: 0.3, 1: 0.4, 2: 0.5}, {0: 0.1, 7: 0.2}, names=("cory", "ppo"))
    assert differ["p"] == 1.0 and differ["ci"] == [1.0, 1.0] and differ["n"] == [3, 2]
    assert differ["seeds"] == [[0, 1, 2], [0, 7]] and "why" not in differ
    mixed = improvement_summary({0: 0.3, 1: 0.1, 2: 0.5}, {3: 0.2, 4: 0.4})  # 3 of 6 pairs won
    assert mixed["p"] == pytest.approx(probability_of_improvement([0.3, 0.1, 0.5], [0.2, 0.4])) == 0.5
    assert mixed["ci"] == list(probability_of_improvement_ci([0.3, 0.1, 0.5], [0.2, 0.4]))


def test_the_paired_variant_pairs_runs_by_seed_and_needs_the_same_seeds():
    a, b = {0: 0.5, 1: 0.1, 2: 0.6}, {2: 0.4, 1: 0.0, 0: 0.7}  # seed by seed: A loses on 0, wins on 1 and 2
    paired = improvement_summary(a, b, paired=True)
    assert paired["p"] == pytest.approx(2 / 3) and paired["seeds"] == [0, 1, 2]
    assert improvement_summary(a, b)["p"] == pytest.approx(5 / 9)  # unpaired: 2 + 1 + 2 of the 9 pairs
    assert 0.0 <= paired["ci"][0] <= 2 / 3 <= paired["ci"][1] <= 1.0
    assert improvement_summary({0: 2.0, 1: 0.5}, {0: 1.0, 1: 0.0}, paired=True)["ci"] == [1.0, 1.0]
    differ = improvement_summary({0: 0.3, 1: 0.4}, {0: 0.1}, names=("cory", "ppo"), paired=True)
    assert differ["p"] is None and differ["ci"] is None
    assert differ["why"] == ("seed sets differ: cory has seeds [0, 1], ppo [0] (a paired comparison needs the same "
                             "seeds)")
