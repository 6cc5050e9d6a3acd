"""Metric definitions (docs/design.md, "Metrics"): pure functions on numbers and arrays."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# shared helpers on the lowest floor (trashfire.core.stats), named here too for users of trashfire.metrics
from trashfire.core.stats import accuracy, bic, degeneracy_threshold, viability_threshold  # noqa: F401


def failure_rate(acc: float, seconds_per_sample: float) -> float:
    """f = (1 - Acc) / t (TRASHFIRE eq. 3), with t the per-sample time of the query."""
    return (1.0 - acc) / seconds_per_sample


def trash(t_train: float, expected_survival: float) -> float:
    """C_adv = t_train / E[T | 0 < eps <= eps*] (TRASHFIRE eq. 9); > 1: cheaper to break than to train.
    E[T] is the survival model's restricted mean time to failure, int_0^{t*} S(u) du up to the
    attack's budget t* (003's definition; the survival stage's `E_T`), on t_train's clock and
    per sample."""
    return t_train / expected_survival


def trash_benign(t_train: float, acc_ben: float, t_predict: float) -> float:
    """The benign analogue: t_train over the expected time to a benign failure, which for
    i.i.d. queries of t_predict each failing with 1 - Acc_ben is t_predict / (1 - Acc_ben)."""
    return t_train * failure_rate(acc_ben, t_predict)


def evp(eps: Sequence[float], performance: Sequence[float], tau: float) -> float:
    """Expected viable performance: the trapezoid integral over eps / eps_max in [0, 1] of
    g(eps) = P(eps) where P(eps) >= tau, else 0. The grid must start at eps_0 = 0."""
    return float(_viable_area(*_curve(eps, performance), np.asarray(tau, dtype=float)))


def robustness_auc(eps: Sequence[float], performance: Sequence[float], eps0: float, eps1: float) -> float:
    """Normalised robustness AUC R = int_{eps0}^{eps1} f de / (f(eps0) (eps1 - eps0)) by the
    trapezoid rule on the curve, linearly interpolated at eps0 and eps1. S = 1 - R."""
    if not eps1 > eps0:
        raise ValueError(f"normalised AUC needs eps1 > eps0; got [{eps0}, {eps1}]")
    eps, performance = _curve(eps, performance)
    if eps0 < eps[0] or eps1 > eps[-1]:
        raise ValueError(f"[{eps0}, {eps1}] lies outside the measured eps range [{eps[0]}, {eps[-1]}]")
    inside = (eps > eps0) & (eps < eps1)
    grid = np.concatenate([[eps0], eps[inside], [eps1]])
    values = np.interp(grid, eps, performance)
    if not values[0] > 0:
        raise ValueError(f"normalised AUC needs f(eps0) > 0; got f({eps0}) = {values[0]}")
    return float(np.trapezoid(values, grid) / (values[0] * (eps1 - eps0)))


def viability_table(classes: Sequence[int], w: float = 0.5) -> list[tuple[int, float]]:
    """(K, tau(K)) for each K: 001's Table I for K = 2, 5, 10, 100, 1000 and w = 0.5."""
    return [(int(k), viability_threshold(int(k), w)) for k in classes]


def evp_over_thresholds(eps: Sequence[float], performance: Sequence[float], taus: Sequence[float]) -> np.ndarray:
    """EVP as a function of the viability threshold (001 Fig. 7): a step function of tau that
    falls at each measured performance. One array op over the thresholds: a row per tau, each
    summed as `evp` sums its one (the same values, bit for bit)."""
    return _viable_area(*_curve(eps, performance), np.asarray(taus, dtype=float)[:, None])


def _viable_area(eps: np.ndarray, performance: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """EVP's trapezoid integral at `tau` (a scalar, or a column of thresholds: a row each)."""
    if eps[0] != 0:
        raise ValueError(f"EVP needs the grid to start at eps_0 = 0 (benign performance); got {eps[0]}")
    viable = np.where(performance >= tau, performance, 0.0)
    return np.trapezoid(viable, eps / eps[-1], axis=-1)


def evp_convergence(eps: Sequence[float], performance: Sequence[float], tau: float) -> list[tuple[int, float]]:
    """(intervals, EVP) on nested sub-grids of the measured grid (001 Fig. 8): every s-th eps
    for s = n ... 1, always keeping eps_0 = 0 and eps_max so that the scaling is the same."""
    eps, performance = _curve(eps, performance)
    n = len(eps) - 1
    points = {}
    for stride in range(n, 0, -1):
        keep = sorted(set(range(0, n + 1, stride)) | {n})
        points[len(keep) - 1] = evp(eps[keep], performance[keep], tau)
    return sorted(points.items())


def mean_interval(values: Sequence[float], level: float = 0.95, log: bool = False) -> tuple[float, float, float]:
    """The mean over independent units (seeds: trained models) and its Student's t interval
    (trashfire.core.inference); with `log`, the geometric mean and the interval of the mean log
    taken back (for ratios such as TRASH, whose logs are near normal where the values are
    skewed: on them a t interval of the plain mean covers 81-86% at 3-10 seeds,
    bench/inference_calibration.py). NaNs (and with `log`, values <= 0) are left out. With one
    value, or units all equal, there is no interval (NaN bounds). (It replaced a percentile
    bootstrap, whose interval over 3 values holds the mean at most 75% of the time: issue 59.)"""
    from trashfire.core.inference import mean_over_units

    values = np.asarray(values, dtype=float)
    if not log:
        estimate = mean_over_units(values, level=level)
        return estimate.value, estimate.lo, estimate.hi
    estimate = mean_over_units(np.log(values[values > 0]), level=level)
    return tuple(math.exp(x) if np.isfinite(x) else math.nan for x in (estimate.value, estimate.lo, estimate.hi))


def relative_improvement(standard: float, model: float) -> float:
    """R.I. = (brittle(standard) - brittle(model)) / brittle(standard) * 100 (002 eq. 3): the
    percentage by which a model's brittle-score is below the undefended model's."""
    if not standard > 0:
        return math.nan
    return (standard - model) / standard * 100.0


def _curve(eps: Sequence[float], performance: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    eps, performance = np.asarray(eps, dtype=float), np.asarray(performance, dtype=float)
    if eps.shape != performance.shape or eps.ndim != 1 or len(eps) < 2:
        raise ValueError("a curve needs matching 1-d eps and performance arrays of at least two points")
    if np.any(np.diff(eps) <= 0):
        raise ValueError("eps must be strictly increasing")
    return eps, performance
