"""Kaplan-Meier curves of every group at once (an attack cell, say): one sort of all rows,
then sums and products that restart at each group, in numpy, whatever the number of groups.
lifelines' `KaplanMeierFitter` is the reference (tests/survival/test_survival_km.py): its survival
function, plateau and restricted mean per group.

S_KM of a group steps down at each of its failure times u by the share of those still at risk
(duration >= u) that fail there; a row stands for `weights` samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class GroupedKM:
    """The steps of every group's curve, sorted by (group, time): `group` (its position in
    `labels`), `time` and `survival` just after it."""

    labels: pd.Index
    group: np.ndarray
    time: np.ndarray
    survival: np.ndarray

    def last(self) -> np.ndarray:
        """Each group's last step (its position among the steps)."""
        return np.r_[np.flatnonzero(np.diff(self.group)), len(self.group) - 1]

    def plateau(self) -> pd.Series:
        """Each group's survival after its last time: the share never broken within its budget."""
        return pd.Series(self.survival[self.last()], index=self.labels)

    def restricted_mean(self, t_star: pd.Series) -> pd.Series:
        """Each group's integral of S_KM from 0 to its t* (`t_star`, by label): lifelines'
        `restricted_mean_survival_time` of its KaplanMeierFitter."""
        limit = t_star.reindex(self.labels).to_numpy(float)[self.group]
        start = np.r_[True, self.group[1:] != self.group[:-1]]
        before = np.where(start, 1.0, np.r_[1.0, self.survival[:-1]])  # S on [previous time, this time)
        previous = np.where(start, 0.0, np.r_[0.0, self.time[:-1]])
        inside = (np.minimum(self.time, limit) - np.minimum(previous, limit)) * before
        tail = (limit - np.minimum(self.time, limit)) * self.survival  # after a group's last time
        totals = np.bincount(self.group, weights=inside, minlength=len(self.labels))
        totals += np.bincount(self.group[self.last()], weights=tail[self.last()], minlength=len(self.labels))
        return pd.Series(totals, index=self.labels)

    def curves(self, labels: dict | None = None) -> dict:
        """Each group's curve, as lifelines' KaplanMeierFitter holds it for drawing (`Steps`: its
        survival function from time 0, and `labels[group]` for its label)."""
        starts, labels = np.r_[0, self.last()[:-1] + 1], labels or {}
        curves = {}
        for group, start, end in zip(self.labels, starts, self.last()):
            label = labels.get(group, str(group))
            times = pd.Index(np.r_[0.0, self.time[start : end + 1]], name="timeline")
            curves[group] = Steps(pd.DataFrame({label: np.r_[1.0, self.survival[start : end + 1]]}, index=times), label)
        return curves


@dataclass(frozen=True)
class Steps:
    """A Kaplan-Meier curve for a figure: what it reads of lifelines' KaplanMeierFitter."""

    survival_function_: pd.DataFrame
    _label: str


def grouped_km(groups, durations, events, weights=None) -> GroupedKM:
    """Every group's Kaplan-Meier curve (`groups`: a label per row)."""
    codes, labels = pd.factorize(pd.Series(groups), sort=True)
    t = np.asarray(durations, dtype=float)
    w = np.ones(len(t)) if weights is None else np.asarray(weights, dtype=float)
    failed = w * (np.asarray(events) == 1)
    order = np.lexsort((t, codes))
    codes, t, w, failed = codes[order], t[order], w[order], failed[order]
    new_step = np.r_[True, (codes[1:] != codes[:-1]) | (t[1:] != t[:-1])]
    first = np.flatnonzero(new_step)
    step_group, step_time = codes[first], t[first]
    leaving, dying = np.add.reduceat(w, first), np.add.reduceat(failed, first)
    group_total = np.bincount(step_group, weights=leaving, minlength=len(labels))
    left_before = _restarting_cumsum(leaving, step_group) - leaving
    at_risk = group_total[step_group] - left_before
    factor = 1.0 - dying / at_risk
    zero = factor <= 0.0  # every one at risk failed: the curve stays at 0
    logs = _restarting_cumsum(np.log(np.where(zero, 1.0, factor)), step_group)
    survival = np.exp(logs) * (_restarting_cumsum(zero.astype(float), step_group) == 0)
    return GroupedKM(pd.Index(labels), step_group, step_time, survival)


def _restarting_cumsum(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The cumulative sum of `values` within each group, restarting exactly at each (pandas'
    grouped cumsum: no offsets subtracted from a running total, so no rounding carried over)."""
    return pd.Series(values).groupby(groups, sort=False).cumsum().to_numpy()


def logrank(durations, events, weights, in_first) -> tuple[float, float]:
    """The weighted log-rank test of two groups (`in_first`: a row's group), as lifelines'
    `logrank_test` with `weights_A`, `weights_B` computes it, from one sort of all rows: at each
    distinct time, the expected failures of the first group given those at risk, and their
    hypergeometric variance (n_1 n_2 d (n - d) / (n^2 (n - 1)), 1 where n = 1). lifelines builds
    a table per distinct time in pandas: at 10^7 samples, minutes. Returns (chi^2 with 1 degree
    of freedom, p)."""
    from scipy.stats import chi2

    durations, weights = np.asarray(durations, float), np.asarray(weights, float)
    events, in_first = np.asarray(events).astype(bool), np.asarray(in_first).astype(bool)
    times, position = np.unique(durations, return_inverse=True)
    tally = lambda rows: np.bincount(position[rows], weights=weights[rows], minlength=len(times))  # noqa: E731
    everyone = np.ones(len(durations), dtype=bool)
    leaving, leaving_first = tally(everyone), tally(in_first)
    failing, failing_first = tally(events), tally(events & in_first)
    at_risk = leaving.sum() - np.r_[0.0, np.cumsum(leaving)[:-1]]
    at_risk_first = leaving_first.sum() - np.r_[0.0, np.cumsum(leaving_first)[:-1]]
    observed_minus_expected = failing_first.sum() - (at_risk_first * failing / at_risk).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(at_risk == 1, 1.0, (at_risk - failing) / (at_risk - 1))
    variance = (at_risk_first * (at_risk - at_risk_first) * spread * failing / at_risk**2).sum()
    statistic = observed_minus_expected**2 / variance if variance > 0 else 0.0
    return float(statistic), float(chi2.sf(statistic, 1))
