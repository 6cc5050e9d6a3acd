"""Harrell's concordance of a fitted model over samples: the ranking a model gives (its
predicted median, Cox PH's partial hazard, a cure model's restricted mean), and Harrell's C of
weighted rows, pooled or within strata (Table I's concordance, the training part's, within
attack cells). Split from `fitters` (fitting) as scoring is its own concern."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from trashfire.core.stats import significant
from trashfire.survival.fitters import DURATION, EVENT, Fit, covariates_of, sample_weights


def survival_ranking(fit: Fit, covariates: pd.DataFrame) -> np.ndarray:
    """Higher = longer predicted survival: the predicted median for AFT models, minus the
    partial hazard for Cox PH (what lifelines' concordance_index_ uses for each), a cure
    model's restricted mean (survival.cure)."""
    return significant(_survival_ranking(fit, covariates))  # rows of equal covariates tie, whatever BLAS gives X @ b's last bits


def _survival_ranking(fit: Fit, covariates: pd.DataFrame) -> np.ndarray:
    if fit.is_cox:
        return -fit.fitter.predict_partial_hazard(covariates).to_numpy(float).ravel()
    if getattr(fit.fitter, "cure_model", False):  # its median is infinite where most are cured
        return fit.fitter.survival_ranking(covariates)
    return fit.fitter.predict_median(covariates).to_numpy(float).ravel()


def concordance(fit: Fit, data: pd.DataFrame) -> float:
    """Harrell's C over samples: each row counts as many times as it has samples."""
    return ranking_concordance(data, survival_ranking(fit, covariates_of(data)))


def ranking_concordance(data: pd.DataFrame, ranking: np.ndarray) -> float:
    """Harrell's C over samples of any ranking of `data`'s rows (higher = longer survival)."""
    return harrell_c(data[DURATION].to_numpy(float), ranking, data[EVENT].to_numpy(), sample_weights(data))


def harrell_c(durations, ranking, events, weights) -> float:
    """lifelines' `concordance_index` of rows standing for `weights` samples each, in
    O(n log n) numpy: for each failure, the weight of the samples after it in the time order
    that are ranked above it, and level with it (`_ranked_after`). A pair is comparable as in
    lifelines: the failure first, or a sample censored at its very time; two failures at one
    time are not, and are taken back at the end. Ties in the ranking count one half."""
    t, s = np.asarray(durations, float), np.asarray(ranking, float)
    e, w = np.asarray(events).astype(bool), np.asarray(weights, float)
    order = np.lexsort((s, ~e, t))  # by time; at one time the failures first, by ranking
    t, s, e, w = t[order], s[order], e[order], w[order]
    above, level = _ranked_after(np.unique(s, return_inverse=True)[1].astype(np.int64), w)
    concordant = float(w[e] @ (above[e] + 0.5 * level[e]))
    comparable = float(w[e] @ (w.sum() - np.cumsum(w))[e])
    failed = pd.DataFrame({"t": t[e], "s": s[e], "w": w[e], "w2": w[e] ** 2})
    tied = _pairs_within(failed.groupby("t")[["w", "w2"]].sum())  # ordered by ranking within a time: each counted once, ranked right or tied
    comparable -= tied
    concordant -= tied - 0.5 * _pairs_within(failed.groupby(["t", "s"])[["w", "w2"]].sum())
    if comparable <= 0:
        raise ZeroDivisionError("No admissable pairs in the dataset.")  # lifelines' error
    return concordant / comparable


def _ranked_after(rank: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position i, the weight of the positions after it ranked above it, and level with it:
    a bottom-up merge sort of the ranks over blocks of positions, every block of a level at
    once. Where a left block and the right block after it merge, each left row reads the right
    block's weight at or below its rank (merged with the right rows first at a tie) and below
    it (left rows first); merging two sorted runs is a stable argsort's linear case. Weights are
    sample counts, so every sum is exact: the count does not depend on the order of additions."""
    n = len(rank)
    span = np.int64(rank.max(initial=0) + 1)
    slot, ranks, weights = np.arange(n), rank, w  # along the merge's order: each row's position, rank and weight
    above, level = np.zeros(n), np.zeros(n)
    block = 1
    while block < n:
        pair, is_right = slot // (2 * block), (slot // block) % 2 == 1
        first = np.r_[0, np.flatnonzero(np.diff(pair)) + 1]  # each pair's first row (pairs stay contiguous)
        sizes = np.diff(np.r_[first, n])
        right_weights = np.where(is_right, weights, 0.0)
        total_right = np.repeat(np.add.reduceat(right_weights, first), sizes)
        key = (pair * span + ranks) * 2
        counts = []
        for last_at_a_tie in (~is_right, is_right):
            order = np.argsort(key + last_at_a_tie, kind="stable")
            cumulative = np.cumsum(right_weights[order])
            counts.append(np.empty(n))
            counts[-1][order] = cumulative - np.repeat(np.r_[0.0, cumulative][first], sizes)
        at_or_below, below = counts
        above += np.where(is_right, 0.0, total_right - at_or_below)
        level += np.where(is_right, 0.0, at_or_below - below)
        slot, ranks, weights, above, level = slot[order], ranks[order], weights[order], above[order], level[order]
        block *= 2
    by_position = np.empty(n, dtype=np.int64)
    by_position[slot] = np.arange(n)
    return above[by_position], level[by_position]


def _pairs_within(groups: pd.DataFrame) -> float:
    """The weight of pairs within each group (w the group's summed weights, w2 its squares)."""
    return float(((groups["w"] ** 2 - groups["w2"]) / 2).sum())


PAIR_BLOCK = 4_000_000  # pairs compared at once by concordance_counts (32 MB of float64)


def concordance_counts(durations, ranking, events, weights, strata) -> pd.DataFrame:
    """Harrell's C counted within each stratum (R survival's `concordance(..., strata)`): per
    stratum, `concordant` (pairs ranked right, plus half the pairs whose rankings tie) and
    `pairs` (comparable pairs); pairs across strata are never compared. A row stands for
    `weights` samples. A pair is comparable as in lifelines' `concordance_index`: the sample
    that failed first (event) against one that left later, or one censored at the very time it
    failed; two failures at one time are not. Higher `ranking` = longer predicted survival.
    Pooled over strata, C = sum(concordant) / sum(pairs). Strata of similar size are compared
    many at once (padded to the largest, at most PAIR_BLOCK pairs a batch: an attack cell's
    hundred samples, thousands of cells); a stratum larger than that, in blocks of its failures."""
    durations, ranking = np.asarray(durations, float), np.asarray(ranking, float)
    events, weights = np.asarray(events).astype(bool), np.asarray(weights, float)
    codes, names = pd.factorize(pd.Series(strata), sort=True)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=len(names))
    bounds = np.r_[0, np.cumsum(sizes)]
    concordant, pairs = np.zeros(len(names)), np.zeros(len(names))
    columns = (durations[order], ranking[order], events[order], weights[order])
    for batch in _size_batches(sizes):
        rows = bounds[batch][:, None] + np.arange(sizes[batch].max())[None, :]  # (strata, rows), padded
        valid = rows < bounds[batch + 1][:, None]
        rows = np.where(valid, rows, 0)
        t, s, e, w = (np.where(valid, column[rows], pad) for column, pad in zip(columns, (-np.inf, 0.0, False, 0.0)))
        concordant[batch], pairs[batch] = _pair_counts(t, s, e, w)
    return pd.DataFrame({"concordant": concordant, "pairs": pairs}, index=pd.Index(names, name="stratum"))


def _size_batches(sizes: np.ndarray) -> list[np.ndarray]:
    """The strata in batches by size: each batch's strata padded to its largest hold at most
    PAIR_BLOCK pairs; a stratum too large for that alone is a batch of its own."""
    by_size = np.argsort(sizes, kind="stable")
    batches, start = [], 0
    while start < len(by_size):
        end = start + 1
        while end < len(by_size) and (end + 1 - start) * int(sizes[by_size[end]]) ** 2 <= PAIR_BLOCK:
            end += 1
        batches.append(by_size[start:end])
        start = end
    return batches


def _pair_counts(t: np.ndarray, s: np.ndarray, e: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stratum (rows of the (strata, samples) arrays), its concordant and comparable pair
    weights, the failed samples taken in blocks of at most PAIR_BLOCK pairs."""
    concordant, pairs = np.zeros(len(t)), np.zeros(len(t))
    step = max(1, PAIR_BLOCK // max(t.size, 1))
    for first in range(0, t.shape[1], step):
        i = slice(first, first + step)
        later = (t[:, None, :] > t[:, i, None]) | ((t[:, None, :] == t[:, i, None]) & ~e[:, None, :])  # (strata, failed, all)
        pair_weights = np.where(later & e[:, i, None], w[:, i, None] * w[:, None, :], 0.0)
        score = (s[:, None, :] > s[:, i, None]) + 0.5 * (s[:, None, :] == s[:, i, None])
        concordant += (pair_weights * score).sum(axis=(1, 2))
        pairs += pair_weights.sum(axis=(1, 2))
    return concordant, pairs


def stratified_concordance(data: pd.DataFrame, ranking: np.ndarray, strata) -> float:
    """Harrell's C over samples with only pairs within one stratum compared, pooled over strata
    by their pairs; NaN without a comparable pair."""
    counts = concordance_counts(data[DURATION], ranking, data[EVENT], sample_weights(data), strata)
    return float(counts["concordant"].sum() / counts["pairs"].sum()) if counts["pairs"].sum() > 0 else math.nan
