"""Small-sample statistics for the regression gate: a bootstrap confidence interval of the ratio of
medians and a one-sided Mann-Whitney U test. Benchmarks give a handful of trials per side, so both
are written for n in the 2..50 range and need nothing beyond numpy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np


def ratio(baseline: float, current: float) -> float:
    """current / baseline, with 0/0 read as "no change" rather than NaN."""
    if baseline == 0:
        return 1.0 if current == 0 else math.inf
    return current / baseline


def bootstrap_ratios(
    baseline: Sequence[float], current: Sequence[float], resamples: int = 2000, seed: int = 0
) -> np.ndarray:
    """Bootstrap distribution of median(current) / median(baseline), each side resampled
    independently with replacement. Seeded so the same inputs always give the same verdict."""
    rng = np.random.default_rng(seed)
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(current, dtype=float)
    b_medians = np.median(rng.choice(b, size=(resamples, b.size)), axis=1)
    c_medians = np.median(rng.choice(c, size=(resamples, c.size)), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b_medians == 0, np.where(c_medians == 0, 1.0, np.inf), c_medians / b_medians)


def bootstrap_ratio_ci(
    baseline: Sequence[float],
    current: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(current) / median(baseline)."""
    tail = (1 - confidence) / 2
    low, high = np.quantile(bootstrap_ratios(baseline, current, resamples, seed), [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_median_ci(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of one sample's median (for 3 trials: about their range)."""
    rng = np.random.default_rng(seed)
    v = np.asarray(values, dtype=float)
    medians = np.median(rng.choice(v, size=(resamples, v.size)), axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(medians, [tail, 1 - tail])
    return float(low), float(high)


def detectable_worsening(
    ratios: np.ndarray, point: float, threshold: float, higher_is_better: bool, power: float = 0.9
) -> float:
    """The smallest true worsening (a fraction, as the threshold) that the rule "the whole 95% interval
    beyond the threshold" flags with probability `power`, at the noise these trials show.

    Works in log ratios turned so that worse is positive. The interval's lower end sits a half-width w
    below the observed value, and the observed value scatters around the truth with the bootstrap's
    standard deviation s, so a true worsening x is flagged when x + N(0, s) - w > log-threshold:
    x = log-threshold + w + z(power) * s. Infinite when the noise is unknown (a zero-width interval of
    one repeated value is still known: no noise)."""
    sign = -1.0 if higher_is_better else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        worse = sign * np.log(ratios)
        observed = sign * math.log(point) if point > 0 else math.inf
    if not np.all(np.isfinite(worse)) or not math.isfinite(observed):
        return math.inf
    if higher_is_better and threshold >= 1:
        return math.inf  # a throughput cannot fall by 100% or more
    log_threshold = -math.log(1 - threshold) if higher_is_better else math.log(1 + threshold)
    half_width = observed - float(np.quantile(worse, 0.025))
    x = log_threshold + max(half_width, 0.0) + _normal_quantile(power) * float(worse.std())
    return 1 - math.exp(-x) if higher_is_better else math.exp(x) - 1


def _normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF by bisection on erfc (only a handful of calls)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value that values in `y` tend to be greater than values in `x`.
    Exact distribution when there are no ties and the samples are small, else the normal
    approximation with tie and continuity corrections."""
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        raise ValueError("both samples need at least one value")
    pooled = np.concatenate([np.asarray(x, dtype=float), np.asarray(y, dtype=float)])
    ranks = _average_ranks(pooled)
    u_y = float(ranks[m:].sum() - n * (n + 1) / 2)
    has_ties = np.unique(pooled).size < pooled.size
    if not has_ties and m <= 50 and n <= 50:
        counts = _u_distribution(m, n)
        return float(counts[math.ceil(u_y - 1e-9) :].sum() / counts.sum())
    return _normal_p_greater(u_y, m, n, pooled)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size)
    sorted_values = values[order]
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


@lru_cache(maxsize=256)
def _u_distribution(m: int, n: int) -> np.ndarray:
    """Counts of orderings giving each U_y in 0..m*n (no ties). The largest value either belongs to
    y, beating all m values of x, or to x, beating none: f(m, n) = shift(f(m, n-1), m) + f(m-1, n)."""
    if m == 0 or n == 0:
        return np.ones(1, dtype=np.float64)
    counts = np.zeros(m * n + 1)
    largest_in_y = _u_distribution(m, n - 1)
    counts[m : m + largest_in_y.size] += largest_in_y
    largest_in_x = _u_distribution(m - 1, n)
    counts[: largest_in_x.size] += largest_in_x
    return counts


def _normal_p_greater(u_y: float, m: int, n: int, pooled: np.ndarray) -> float:
    _, tie_sizes = np.unique(pooled, return_counts=True)
    total = m + n
    tie_term = float((tie_sizes**3 - tie_sizes).sum()) / (total * (total - 1))
    variance = m * n / 12 * ((total + 1) - tie_term)
    if variance == 0:
        return 1.0
    z = (u_y - m * n / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))
