"""pass@k estimators: hand-computed values, the binomial form, bad inputs, the per-problem table."""

from __future__ import annotations

import math

import pytest

from trainers.evaluation.passk import pass_at_k, pass_at_k_first, pass_at_k_table


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 1, 1, 0.2),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),  # 0.7
        (5, 2, 1, 0.4),
        (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),
        (5, 5, 3, 1.0),
        (5, 0, 5, 0.0),
        (4, 0, 1, 0.0),
        (5, 4, 2, 1.0),  # n - c < k: every k-subset holds a correct sample
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_form_for_large_n():
    n, c, k = 200, 13, 10
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-10)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [(3, 1, 4, r"^k=4 is invalid: use an integer in \[1, 3\]; draw at least k samples per problem$"),
     (3, 4, 1, r"^c=4 is invalid: use an integer in \[0, 3\]"),
     (3, 1, 0, r"^k=0 is invalid: use an integer in \[1, 3\]"),
     (3, -1, 1, r"^c=-1 is invalid: use an integer in \[0, 3\]"), (3, 1, 1.0, r"^k=1.0 is invalid: use an integer")],
)
def test_pass_at_k_bad_inputs(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_first():
    assert pass_at_k_first([False, True, False], 1) == 0.0
    assert pass_at_k_first([False, True, False], 2) == 1.0
    assert pass_at_k_first([False, False, False], 3) == 0.0
    with pytest.raises(ValueError, match=r"^k=2 is invalid: use an integer in \[1, 1\]; at most the number of "
                                         "samples$"):
        pass_at_k_first([True], 2)


def test_pass_at_k_table():
    rows = [[True, False, False, False, False], [False] * 5, [False, False, True, True, False]]
    first = pass_at_k_table(rows, estimator="first")
    assert first == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 2 / 3, 4: 2 / 3, 5: 2 / 3})
    unbiased = pass_at_k_table(rows)
    assert list(unbiased) == [1, 2, 3, 4, 5]
    assert unbiased[1] == pytest.approx((0.2 + 0.0 + 0.4) / 3)
    assert unbiased[5] == pytest.approx(2 / 3)
    assert all(unbiased[k] <= unbiased[k + 1] for k in range(1, 5))
    with pytest.raises(ValueError, match="empty"):
        pass_at_k_table([])
    with pytest.raises(ValueError, match="estimator"):
        pass_at_k_table(rows, estimator="max")
    with pytest.raises(ValueError, match=r"^k=3 is invalid: use an integer in \[1, 2\]"):
        pass_at_k_table([[True, False]], ks=(3,))


