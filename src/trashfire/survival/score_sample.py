"""The rows a score reads at scale: `survival.score_samples` caps the samples that calibration
(ICI, E50) and the cross-validation read, so that their cost stops growing with the study.

The fits never read a sample: every model is fitted, and its likelihood, AIC, concordance and
coefficients computed, on every training sample. What is capped are two estimates whose
sampling error at the cap is far below the differences they are read for:

- ICI and E50 (`calibration_rows`): a simple random sample of the samples (seeded), each
  drawn row weighted by how many of its samples were drawn. A calibration spline fitted by
  scipy's SLSQP costs about 3.5 s per 6·10^5 samples, and Table I draws 8 of them on the
  training part, one per cross-validation fold of every AFT model and one on the test part.
- the cross-validation (`cross_validation_rows`): whole groups (`survival.split_by`'s, the
  trained models), drawn in a seeded order until they hold the cap; the folds are dealt from
  them. Each fold refits every AFT model, so this is where the stage's time went at 10^7.

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


def cross_validation_rows(groups: pd.Series, weights: np.ndarray, cap: int | None, seed: int) -> tuple[np.ndarray | None, str]:
    """The positions of the rows the cross-validation reads: None (every row) where the groups
    hold at most `cap` samples; else the rows of whole groups, shuffled (seeded) and taken in
    that order until they hold `cap` samples; with a note that says so."""
    total = int(weights.sum())
    if cap is None or total <= cap:
        return None, ""
    per_group = pd.Series(weights).groupby(groups.to_numpy()).sum()
    order = np.random.default_rng(seed).permutation(np.sort(per_group.index.to_numpy()))
    held = per_group.loc[order].cumsum().to_numpy()
    taken = order[: int(np.searchsorted(held, cap, side="left")) + 1]
    rows = np.flatnonzero(groups.isin(taken).to_numpy())
    return (
        rows,
        f"folds of {len(taken):,} of the {len(per_group):,} training groups ({int(weights[rows].sum()):,} of {total:,} samples; survival.score_samples)",
    )
