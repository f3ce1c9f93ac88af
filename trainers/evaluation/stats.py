"""Robust statistics over seeds (the learning ladder, `cory crossplay`): interquartile mean, percentile-bootstrap
confidence intervals and the probability of improvement, as Agarwal et al. recommend for few-run RL results.

Source: R. Agarwal, M. Schwarzer, P. S. Castro, A. Courville, M. G. Bellemare, "Deep Reinforcement Learning at the
Edge of the Statistical Precipice", NeurIPS 2021 (arXiv:2108.13264), and its library ``rliable``, whose definitions
these functions follow with scipy's numerics (``scipy.stats.trim_mean``, ``scipy.stats.bootstrap``):

- **IQM**: the mean of the middle 50 % of the runs (`iqm`: with fewer than 4 runs, the mean).
- **Confidence interval**: the 95 % percentile bootstrap over runs (`bootstrap_ci`): ``rliable``'s stratified
  bootstrap with one task per ladder rung, and for two arms each arm's runs resampled on their own. Percentile, not
  BCa: ``rliable``'s default, and BCa's jackknife rests on N leave-one-out values (3 with the ladder's 3 seats). With
  3 seeds the 95 % interval of the IQM is the range of the seeds: honest, and wide.
- **Probability of improvement** P(A > B) = P(X > Y) + ½ P(X = Y) over all n·m pairs of independent runs of arms A
  and B (the Mann-Whitney U statistic / n·m), whatever their seed sets; ``improvement_summary(..., paired=True)`` is
  the paired variant for runs that share seeds by design.

Bad input, one policy: the numeric functions raise ``ValueError`` on input they cannot answer (no values, a
non-finite value, an interval from one value); the summaries the ladder reports (`arm_summary`,
`improvement_summary`) never invent an interval, and say ``"why"`` instead (empty input still raises).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

__all__ = ["CONFIDENCE", "METHOD", "N_RESAMPLES", "arm_summary", "bootstrap_ci", "improvement_summary", "iqm",
           "probability_of_improvement", "probability_of_improvement_ci"]

#: Confidence level of every interval the ladder reports.
CONFIDENCE = 0.95
#: Bootstrap resamples (scipy's default).
N_RESAMPLES = 9999
#: What the ladder's JSON records as the method of its statistics.
METHOD = {"point": "IQM: scipy.stats.trim_mean(x, 0.25)",
          "ci": f"{CONFIDENCE:.0%} percentile bootstrap over seeds, scipy.stats.bootstrap, {N_RESAMPLES} resamples, "
                "seed 0",
          "improvement": "P(A > B) = P(X > Y) + 0.5 P(X = Y) over all pairs of independent runs, whatever the arms' "
                         "seed sets (Mann-Whitney U / (n m)), its CI the percentile bootstrap resampling each arm's "
                         "seeds on their own",
          "source": "Agarwal et al., NeurIPS 2021, arXiv:2108.13264 (rliable)"}


def _finite(values, name: str = "values") -> np.ndarray:
    """`values` as a float array; ValueError when empty or not finite."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError(f"{name} is empty: pass one value per seed (at least one run)")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds a non-finite value ({x.ravel()[~np.isfinite(x.ravel())][0]}): "
                         "drop or fix the run that produced it")
    return x


def iqm(values: Sequence[float], *, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50 % of `values`.

    Args:
        values: float (N,), one value per run (seed), e.g. held-out rewards; or any array with `axis`.
        axis: the axis of the runs (``None``: all values, flattened); set by `bootstrap_ci` on batches of resamples.

    Returns:
        float (an array of IQMs along `axis` when given): ``scipy.stats.trim_mean(values, 0.25)``, i.e. the mean
        after cutting ``floor(N / 4)`` values from each end (N < 4: the plain mean).

    Raises:
        ValueError: if `values` is empty or holds a NaN or an infinity.

    Source: Agarwal et al. 2021 (arXiv:2108.13264), §4; ``rliable.metrics.aggregate_iqm``.

    >>> iqm([1, 2, 3, 4, 5, 6, 7, 8])  # mean of 3, 4, 5, 6
    4.5
    >>> iqm([0.1, 0.2, 0.6])  # fewer than 4 runs: the mean
    0.3
    """
    x = _finite(values)
    out = sps.trim_mean(x, 0.25, axis=axis)
    return float(out) if axis is None else out


def bootstrap_ci(values: Sequence[float], statistic: Callable = iqm, *, confidence: float = CONFIDENCE,
                 seed: int = 0, n_resamples: int = N_RESAMPLES) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of `statistic` over runs.

    Args:
        values: float (N,), one value per run (seed), N >= 2.
        statistic: function of a 1-D array returning a float; when it takes an ``axis`` keyword (as `iqm` does) it
            is called once on a batch of resamples, else once per resample.
        confidence: the interval's level, in (0, 1).
        seed: the resampling seed; the same seed and input give the same interval.

    Returns:
        ``(low, high)``, floats in the unit of `values`; ``low == high`` when every value is the same.

    Raises:
        ValueError: if `values` is empty, holds a non-finite value or only one value (no interval from one run:
            `arm_summary` reports it as n/a), or `confidence` is not in (0, 1).

    Source: Efron & Tibshirani 1993, ch. 13 (percentile interval); Agarwal et al. 2021 (arXiv:2108.13264), §4.

    >>> [round(v, 6) for v in bootstrap_ci([0.29, 0.31, 0.44])]  # 3 seeds: the 95 % interval is their range
    [0.29, 0.44]
    """
    x = _finite(values)
    if x.size < 2:
        raise ValueError("one value gives no bootstrap interval: run more seeds (arm_summary reports this as n/a)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}; e.g. 0.95")
    if np.all(x == x[0]):  # every resample is the same run: the interval is that point (scipy would warn)
        point = float(statistic(x))
        return point, point
    res = sps.bootstrap((x,), statistic, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                        rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _improvement(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + ½ P(X = Y) over all pairs, along `axis` of batched samples."""
    x, y = np.moveaxis(a, axis, -1)[..., :, None], np.moveaxis(b, axis, -1)[..., None, :]
    return (x > y).mean(axis=(-2, -1)) + 0.5 * (x == y).mean(axis=(-2, -1))


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """The probability that a run of arm A beats a run of arm B: P(X > Y) + ½ P(X = Y) over all pairs.

    Args:
        a: float (N,), one value per run of arm A (higher is better).
        b: float (M,), one value per run of arm B, same unit.

    Returns:
        float in [0, 1]: the Mann-Whitney U statistic of A against B divided by N·M (0.5: neither is better).

    Raises:
        ValueError: if `a` or `b` is empty or holds a non-finite value.

    Source: Agarwal et al. 2021 (arXiv:2108.13264), §4 "probability of improvement";
    ``rliable.metrics.probability_of_improvement``.

    >>> probability_of_improvement([1, 2], [0, 3])  # pairs 1>0, 1<3, 2>0, 2<3: 2 of 4
    0.5
    >>> probability_of_improvement([1, 2], [1, 1])  # ties count half: (0.5 + 0.5 + 1 + 1) / 4
    0.75
    """
    return float(_improvement(_finite(a, "a"), _finite(b, "b")))


def probability_of_improvement_ci(a: Sequence[float], b: Sequence[float], *, confidence: float = CONFIDENCE,
                                  seed: int = 0, n_resamples: int = N_RESAMPLES) -> tuple[float, float]:
    """Percentile-bootstrap interval of `probability_of_improvement`, each arm's runs resampled on their own.

    Args:
        a: float (N,), arm A's runs, N >= 2.
        b: float (M,), arm B's runs, M >= 2.
        confidence, seed, n_resamples: as in `bootstrap_ci`.

    Returns:
        ``(low, high)`` in [0, 1].

    Raises:
        ValueError: if an arm is empty, holds a non-finite value or only one run, or `confidence` is not in (0, 1).

    Source: Agarwal et al. 2021 (arXiv:2108.13264), §4 (``rliable``'s independent bootstrap of each algorithm).

    >>> probability_of_improvement_ci([2, 3], [0, 1])  # every resample: A above B
    (1.0, 1.0)
    """
    x, y = _finite(a, "a"), _finite(b, "b")
    if min(x.size, y.size) < 2:
        raise ValueError(f"one run gives no bootstrap interval (arm A has {x.size}, arm B {y.size}): run more seeds "
                         "(improvement_summary reports this as n/a)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}; e.g. 0.95")
    if x.max() < y.min() or x.min() > y.max() or (np.all(x == x[0]) and np.all(y == x[0])):
        point = float(_improvement(x, y))  # every resample gives the same value (scipy would warn)
        return point, point
    res = sps.bootstrap((x, y), _improvement, n_resamples=n_resamples, confidence_level=confidence,
                        method="percentile", paired=False, batch=1000, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def arm_summary(values: Sequence[float], *, confidence: float = CONFIDENCE, seed: int = 0) -> dict:
    """IQM and its bootstrap interval of one arm's per-seed values, as the ladder's JSON stores them.

    Args:
        values: float (N,), one value per seed (e.g. final held-out reward, or gain over the base model).
        confidence, seed: as in `bootstrap_ci`.

    Returns:
        ``{"iqm": float, "ci": [low, high], "n": N, "mean": float}``; with one seed ``"ci": None`` and
        ``"why": "one seed"`` (no interval from one point).

    Raises:
        ValueError: if `values` is empty or holds a non-finite value.

    >>> arm_summary([0.5])
    {'iqm': 0.5, 'ci': None, 'n': 1, 'mean': 0.5, 'why': 'one seed'}
    """
    x = _finite(values)
    out = {"iqm": iqm(x), "ci": None, "n": int(x.size), "mean": float(x.mean())}
    if x.size < 2:
        return {**out, "why": "one seed"}
    return {**out, "ci": list(bootstrap_ci(x, confidence=confidence, seed=seed))}


def improvement_summary(a: Mapping[int, float], b: Mapping[int, float], *, names: tuple[str, str] = ("A", "B"),
                        paired: bool = False, confidence: float = CONFIDENCE, seed: int = 0) -> dict:
    """P(A > B) and its bootstrap interval between two arms, as the ladder's JSON stores it.

    Args:
        a: seed -> value of arm A (higher is better), e.g. final held-out reward.
        b: seed -> value of arm B, same unit.
        names: the arms' names, for the ``"why"`` of an n/a.
        paired: False (independent runs, the ladder's arms): `probability_of_improvement` over all N·M pairs, each
            arm's runs resampled on their own; the seed sets may differ. True (runs that share seeds by design):
            P(A_s > B_s) + ½ P(A_s = B_s) over the seeds s, the seeds resampled with both values together; n/a
            when the seed sets differ.
        confidence, seed: as in `bootstrap_ci`.

    Returns:
        ``{"p": float, "ci": [low, high], "n": [N, M], "seeds": [...]}`` (``"seeds"``: A's seeds when both arms
        have the same, else ``[A's seeds, B's seeds]``); with one run in an arm ``"ci": None``, ``"why": "one
        seed"``; paired with different seed sets ``"p": None``, ``"ci": None`` and a ``"why"`` naming both sets.

    Raises:
        ValueError: if `a` or `b` is empty or holds a non-finite value.

    >>> improvement_summary({0: 1.0, 1: 2.0}, {0: 0.0, 1: 3.0})["p"]
    0.5
    >>> improvement_summary({0: 1.0, 1: 2.0}, {2: 0.0})["p"]  # independent runs: any seeds
    1.0
    >>> improvement_summary({0: 1.0, 1: 2.0}, {0: 0.0}, names=("cory", "ppo"), paired=True)["why"]
    'seed sets differ: cory has seeds [0, 1], ppo [0] (a paired comparison needs the same seeds)'
    """
    x, y = _finite(list(a.values()), "a"), _finite(list(b.values()), "b")
    same = set(a) == set(b)
    out = {"p": None, "ci": None, "n": [int(x.size), int(y.size)],
           "seeds": sorted(a) if same else [sorted(a), sorted(b)]}
    if paired and not same:
        out["why"] = (f"seed sets differ: {names[0]} has seeds {sorted(a)}, {names[1]} {sorted(b)} (a paired "
                      "comparison needs the same seeds)")
        return out
    if paired:
        y = _finite([b[s] for s in a], "b")  # B in A's seed order: each seed a pair
        out["p"] = float(_paired_improvement(x, y))
    else:
        out["p"] = probability_of_improvement(x, y)
    if min(x.size, y.size) < 2:
        out["why"] = "one seed"
    elif paired:
        out["ci"] = list(_paired_ci(x, y, confidence=confidence, seed=seed))
    else:
        out["ci"] = list(probability_of_improvement_ci(x, y, confidence=confidence, seed=seed))
    return out


def _paired_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X_s > Y_s) + ½ P(X_s = Y_s) over the matched pairs along `axis`."""
    return (x > y).mean(axis=axis) + 0.5 * (x == y).mean(axis=axis)


def _paired_ci(x: np.ndarray, y: np.ndarray, *, confidence: float, seed: int) -> tuple[float, float]:
    """Percentile-bootstrap interval of `_paired_improvement`, the seeds resampled with both values together."""
    wins = np.sign(x - y)
    if np.all(wins == wins[0]):  # every resample gives the same value (scipy would warn)
        point = float(_paired_improvement(x, y))
        return point, point
    res = sps.bootstrap((x, y), _paired_improvement, n_resamples=N_RESAMPLES, confidence_level=confidence,
                        method="percentile", paired=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
