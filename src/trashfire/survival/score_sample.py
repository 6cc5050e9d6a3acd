"""The rows a score reads at scale: `survival.score_samples` caps the samples that calibration
(ICI, E50) and the cross-validation read, so that their cost stops growing with the study.

The fits never read a sample: every model is fitted, and its likelihood, AIC and
coefficients computed, on every training sample. What is capped are three estimates whose
sampling error at the cap is far below the differences they are read for:

- ICI and E50 (`calibration_rows`): a simple random sample of the samples (seeded), each
  drawn row weighted by how many of its samples were drawn. A calibration spline fitted by
  scipy's SLSQP costs about 3.5 s per 6·10^5 samples, and Table I draws 8 of them on the
  training part, one per cross-validation fold of every AFT model and one on the test part.
- the cross-validation (`cross_validation_rows`): whole groups (`survival.split_by`'s, the
  trained models), drawn in a seeded order until they hold the cap; the folds are dealt from
  them. Each fold refits every AFT model, so this is where the stage's time went at 10^7.
- the training part's Harrell's C and within-cell concordance (`concordance_rows`), for every
  model and baseline: whole attack cells, drawn in a seeded order until they hold the cap, so
  that every pair within a drawn cell is compared. Harrell's C is an O(n log n) merge sort
  per model (22 s at 8·10^6 training samples, ten of them) and a cure model's ranking a
  restricted mean per row. Whole cells keep the baselines' per-cell scores what they are, and
  every model reads the same cells, so their differences are compared on the same pairs; the
  price is a cluster sample's error: at 8·10^6 training samples (2,709 of 108,234 cells drawn)
  each model's C was 0.0011 to 0.0047 below its value on every sample and the within-cell C
  0.0072 above, the ten rows in the same order (the closest two are 0.0002 apart on every
  sample): read it as an estimate, and a difference between models well under 0.005 as a
  tie. The test part's scores, which select nothing but say whether the selected
  model beats the baselines, read every test sample.

At or below the cap nothing is drawn, and the stage computes what it computed before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trashfire.survival import fitters as F


def calibration_rows(data: pd.DataFrame, cap: int | None, seed: int) -> tuple[pd.DataFrame, str]:
    """`data`, or where it holds more than `cap` samples, a seeded simple random sample of
    `cap` of them (rows re-weighted by their drawn samples); and a note that says so ("" when
    all are read)."""
    weights = F.sample_weights(data)
    total = int(weights.sum())
    if cap is None or total <= cap:
        return data, ""
    drawn = np.random.default_rng(seed).choice(total, size=cap, replace=False)
    rows, counts = np.unique(np.searchsorted(np.cumsum(weights), drawn, side="right"), return_counts=True)
    sample = data.iloc[rows].assign(**{F.WEIGHT: counts})
    return sample, f"on a seeded sample of {cap:,} of its {total:,} samples (survival.score_samples)"


def whole_groups(groups: pd.Series, weights: np.ndarray, cap: int | None, seed: int) -> tuple[np.ndarray | None, int, int]:
    """The positions of the rows of whole groups, shuffled (seeded) and taken in that order
    until they hold `cap` samples, with how many groups were taken of how many; None (every
    row) where the groups hold at most `cap` samples."""
    codes, names = pd.factorize(groups, sort=True)
    per_group = np.bincount(codes, weights=weights, minlength=len(names))
    if cap is None or per_group.sum() <= cap:
        return None, len(names), len(names)
    order = np.random.default_rng(seed).permutation(len(names))
    taken = order[: int(np.searchsorted(np.cumsum(per_group[order]), cap, side="left")) + 1]
    chosen = np.zeros(len(names), dtype=bool)
    chosen[taken] = True
    return np.flatnonzero(chosen[codes]), len(taken), len(names)


def cross_validation_rows(groups: pd.Series, weights: np.ndarray, cap: int | None, seed: int) -> tuple[np.ndarray | None, str]:
    """The positions of the rows the cross-validation reads (`whole_groups`; None: every row),
    with a note that says so."""
    rows, taken, of = whole_groups(groups, weights, cap, seed)
    if rows is None:
        return None, ""
    total = int(weights.sum())
    return rows, f"folds of {taken:,} of the {of:,} training groups ({int(weights[rows].sum()):,} of {total:,} samples; survival.score_samples)"


def concordance_rows(data: pd.DataFrame, cell: str, cap: int | None, seed: int) -> tuple[pd.DataFrame, str]:
    """The training rows Table I's concordance and within-cell concordance read: `data`, or
    where it holds more than `cap` samples, the rows of whole attack cells (`cell`) drawn
    seeded until they hold `cap` (whole cells, so that every pair within a drawn cell is
    compared); and a note that says so ("" when all are read)."""
    weights = F.sample_weights(data).astype(float)
    if cap is None or weights.sum() <= cap or cell not in data:
        return data, ""
    rows, taken, of = whole_groups(data[cell], weights, cap, seed)
    note = (
        f"on a seeded sample of {taken:,} of the {of:,} attack cells ({int(weights[rows].sum()):,} of {int(weights.sum()):,} samples; survival.score_samples)"
    )
    return data.iloc[rows], note
