"""Scores of a survival model on held-out samples that weigh each sample by the inverse of the
probability that it was still uncensored (IPCW): the integrated Brier score (Graf et al. 1999)
and Uno's C (Uno et al. 2011), computed as scikit-survival's `integrated_brier_score` and
`concordance_index_ipcw` compute them (tests/survival/test_survival_ipcw.py holds them to it),
on rows that stand for `weights` samples each; and each row's share of a concordance's pairs,
from which an interval over the held-out trained models is built (`survival.held_out`).

The censoring distribution G(t) = P(C > t) is the Kaplan-Meier estimate of the censoring times
of the reference (training) samples, a failure at t leaving the risk set before a censoring at t
(scikit-survival's `CensoringDistributionEstimator`), evaluated as a right-continuous step: a
failure at T counts 1 / G(T) with the censorings at T itself already taken out. Beyond the last
reference time G keeps its last value, where scikit-survival refuses.

Both assume censoring independent of the covariates, which the budgets of attack cells are
not (a cell's samples that never break are all censored at its budget): G is the pooled
chance of being still observed, and a sample of a cell with a short budget weighs as if its
budget were the pooled one. The weights are the same for every fitter, so the scores still
rank fitters on one footing; docs/survival.md says how to read them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

GRID_POINTS = 20  # times of the Brier score's integral, at evenly spaced quantiles of the reference durations


@dataclass(frozen=True)
class CensoringCurve:
    """G(t), the reference samples' Kaplan-Meier curve of censoring: `probs[k]` from `times[k]`
    on (1 before the first)."""

    times: np.ndarray
    probs: np.ndarray

    def __call__(self, t) -> np.ndarray:
        index = np.searchsorted(self.times, np.asarray(t, dtype=float), side="right") - 1
        return np.where(index >= 0, self.probs[np.maximum(index, 0)], 1.0)


def censoring_curve(durations, events, weights) -> CensoringCurve:
    """G from the reference samples: at each time, the censored samples over those at risk that
    did not fail then (0 censored: no step)."""
    t, e, w = np.asarray(durations, float), np.asarray(events).astype(bool), np.asarray(weights, float)
    times, index = np.unique(t, return_inverse=True)
    failed = np.bincount(index, weights=w * e, minlength=len(times))
    censored = np.bincount(index, weights=w * ~e, minlength=len(times))
    at_risk = np.cumsum(np.bincount(index, weights=w, minlength=len(times))[::-1])[::-1]
    remaining = at_risk - failed
    ratio = np.divide(censored, remaining, out=np.zeros_like(censored), where=censored > 0)
    return CensoringCurve(times, np.cumprod(1.0 - ratio))


def score_times(durations, weights, low: float, high: float, points: int = GRID_POINTS) -> np.ndarray:
    """The integrated Brier score's times: the reference samples' durations at `points` evenly
    spaced quantiles from `low` to `high` (survival.score_range), without repeats (durations of
    one budget tie)."""
    samples = np.repeat(np.asarray(durations, float), np.asarray(weights).astype(int))
    return np.unique(np.quantile(samples, np.linspace(low, high, points)))


def within_follow_up(times: np.ndarray, durations) -> np.ndarray:
    """The times a held-out part can be scored at: from its shortest duration to before its
    longest (scikit-survival's rule: later, no sample of the part is known to be at risk)."""
    durations = np.asarray(durations, float)
    return times[(times >= durations.min()) & (times < durations.max())]


# --- the integrated Brier score ---------------------------------------------------------------


def brier_losses(survival: np.ndarray, durations, events, times: np.ndarray, curve: CensoringCurve) -> np.ndarray:
    """Each row's Brier loss integrated over `times` by the trapezoid and divided by their span:
    at each t, S(t | x)^2 / G(T) for a failure by t, (1 - S(t | x))^2 / G(t) for a sample still
    standing after t, 0 for one censored by t (its weight is carried by the others' 1 / G); a
    G of 0 gives 0, as scikit-survival's infinite weight does. `survival` is (rows, times). The
    mean over samples is scikit-survival's integrated_brier_score; per row it is a sample's
    share, so that the score is a mean of per-sample values."""
    if len(times) < 2:
        raise ValueError(f"the integrated Brier score needs 2 times within the held-out part's follow-up, got {len(times)}")
    t, e = np.asarray(durations, float)[:, None], np.asarray(events).astype(bool)[:, None]
    at_time, at_failure = curve(times)[None, :], curve(t[:, 0])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        case = np.where((t <= times) & e & (at_failure > 0), survival**2 / at_failure, 0.0)
        control = np.where((t > times) & (at_time > 0), (1.0 - survival) ** 2 / at_time, 0.0)
    return (case + control) @ trapezoid_weights(times)


def trapezoid_weights(times: np.ndarray) -> np.ndarray:
    """w with w @ f(times) = the trapezoid integral of f over `times` divided by their span."""
    gaps = np.diff(times)
    return (np.r_[gaps, 0.0] + np.r_[0.0, gaps]) / 2.0 / (times[-1] - times[0])


# --- Uno's C and each row's share of a concordance ---------------------------------------------


def uno_weights(durations, events, curve: CensoringCurve, tau: float) -> np.ndarray:
    """Uno's weight of a row as the earlier failure of a pair: 1 / G(T)^2 for a failure before
    tau, 0 otherwise (a censored row is never the earlier one)."""
    t, e = np.asarray(durations, float), np.asarray(events).astype(bool)
    counted = e & (t < tau)
    g = curve(t)
    if np.any(counted & (g <= 0)):
        raise ValueError("the censoring survival G is 0 at a failure before tau: no weight can be given; lower survival.score_range's upper quantile")
    return np.where(counted, 1.0 / np.where(counted, g, 1.0) ** 2, 0.0)


def pair_counts(durations, ranking, events, weights, earlier=None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's concordant and comparable pair weight, counted from both ends of its pairs (so
    the rows' sums are twice the pairs'), in O(n log n).

    A pair is comparable as in lifelines' `concordance_index` and scikit-survival: a failure
    and a sample that left later, or was censored at the very time of the failure; two
    failures at one time are not compared. It weighs `earlier` of its failure (Uno's C: weight
    x 1 / G^2; Harrell's: the weight) times `weights` of its later sample, and is concordant
    when the later sample ranks higher (`ranking`: higher = longer survival), half where they
    tie. C = concordant.sum() / comparable.sum().

    By merging halves of the time order (failures first at a time), every level at once: a
    failure in a left half asks the right half for the weight ranked above, level with and
    below it (its pairs as the earlier sample), and every sample in a right half asks the left
    half's failures the same (its pairs as the later one). Pairs of failures at one time are
    counted there and taken back at the end. Each level's order by (half pair, ranking) merges
    the previous level's sorted runs, and each row's share is read off one running sum over it
    (no binary search): O(n log n)."""
    t, s = np.asarray(durations, float), np.asarray(ranking, float)
    e, w = np.asarray(events).astype(bool), np.asarray(weights, float)
    u = w if earlier is None else np.asarray(earlier, float)
    order = np.lexsort((s, ~e, t))  # by time; at one time the failures first, by ranking
    t, s, e, w, u = t[order], s[order], e[order], w[order], u[order]
    rank = np.unique(s, return_inverse=True)[1].astype(np.int64)
    concordant, comparable = np.zeros(len(t)), np.zeros(len(t))
    span, position, block = np.int64(rank.max(initial=0) + 2), np.arange(len(t)), 1
    by_key = position  # the rows by (merge pair, rank, position): each level merges the last one's sorted runs
    while block < len(t):
        pair, right = position // (2 * block), (position // block) % 2 == 1
        keys = pair * span + rank
        by_key = by_key[np.argsort(keys[by_key], kind="stable")]  # timsort: two sorted runs per pair
        pair_start = position - position % (2 * block)  # in the sorted order each pair holds its 2 x block rows (the last, what is left)
        bounds = (*_runs(keys[by_key]), pair_start, np.minimum(pair_start + 2 * block, len(t)))  # each position's run of its key, and its pair's
        asking = ~right & e
        rows, above, level, everyone = _weights_ranked(by_key, bounds, right, w, asking)  # the left failures ask the right half
        concordant[rows] += u[rows] * (above + 0.5 * level)
        comparable[rows] += u[rows] * everyone
        rows, below, level, everyone = _weights_ranked(by_key, bounds, asking, u, right, below=True)  # the right samples ask the left failures
        concordant[rows] += w[rows] * (below + 0.5 * level)
        comparable[rows] += w[rows] * everyone
        block *= 2
    _take_back_tied_failures(t, s, e, w, u, concordant, comparable)
    unsorted = np.empty_like(order)
    unsorted[order] = np.arange(len(order))
    return concordant[unsorted], comparable[unsorted]


def _weights_ranked(by_key, bounds, answering, weight, asking, below: bool = False):
    """The asking rows (in `by_key`'s order) and, for each, the `weight` of the answering rows of
    its merge pair ranked above it (below it, with `below`), level with it, and all of them: a
    running sum of the answering weight in `by_key`'s order (adding the others' 0.0 leaves each
    partial sum as a sum of the answering rows alone), read at the ends of the asking row's
    run of equal keys and of its pair's (`bounds`: _runs of both)."""
    cumulative = np.r_[0.0, np.cumsum(np.where(answering[by_key], weight[by_key], 0.0))]
    at = asking[by_key]
    level_start, level_end, pair_start, pair_end = (cumulative[bound[at]] for bound in bounds)
    outside = level_start - pair_start if below else pair_end - level_end
    return by_key[at], outside, level_end - level_start, pair_end - pair_start


def _runs(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position's run of equal values in a sorted array: its first position, and one past
    its last."""
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    lengths = np.diff(np.r_[starts, len(sorted_values)])
    first = np.repeat(starts, lengths)
    return first, first + np.repeat(lengths, lengths)


def _take_back_tied_failures(t, s, e, w, u, concordant, comparable) -> None:
    """The merge compared two failures at one time (the lower-ranked one as the earlier, or
    either where they tie); no definition does: take each row's share of those pairs back."""
    failed = np.flatnonzero(e)
    if not len(failed):
        return
    frame = pd.DataFrame({"t": t[failed], "s": s[failed], "w": w[failed], "u": u[failed]})
    by_time, by_rank = frame.groupby("t", sort=False), frame.groupby(["t", "s"], sort=False)
    # in the sort order, within a time: the weight after a row (it was their earlier sample) and
    # the earlier weight before it (it was their later one); level rankings count half
    after = by_time["w"].transform("sum") - by_time["w"].cumsum()
    before = by_time["u"].cumsum() - frame["u"]
    after_level = by_rank["w"].transform("sum") - by_rank["w"].cumsum()
    before_level = by_rank["u"].cumsum() - frame["u"]
    comparable[failed] -= (frame["u"] * after + frame["w"] * before).to_numpy()
    concordant[failed] -= (frame["u"] * (after - 0.5 * after_level) + frame["w"] * (before - 0.5 * before_level)).to_numpy()


def concordance_of(concordant: np.ndarray, comparable: np.ndarray) -> float:
    """C from the rows' pair counts; lifelines' error where no pair is comparable."""
    total = float(comparable.sum())
    if total <= 0:
        raise ZeroDivisionError("No admissable pairs in the dataset.")  # lifelines' error
    return float(concordant.sum()) / total
