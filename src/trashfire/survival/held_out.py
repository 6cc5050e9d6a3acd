"""Scores of a fit on held-out samples (a cross-validation fold, or the test split) against the
part it was fitted on, and their intervals over the held-out trained models.

Harrell's C, Uno's C and the integrated Brier score (IBS; `survival.ipcw`) are each a ratio of
sums over the held-out samples: the IBS a mean of per-sample losses, a concordance its
concordant pairs over its comparable ones. The samples of one trained model share its weights,
so the independent unit is the trained model (`UNIT`), and each score's interval is built over
the held-out trained models from each model's linearised score: the score plus the model's
deviation from it, (numerator - score x denominator) summed over its samples, scaled by the
units over the total denominator; twice that for a concordance, whose pairs each model shares
with the others from both ends (the clustered U-statistic's variance, as DeLong's and
Obuchowski's for the AUC). Where every model holds as many samples, a model's linearised IBS is
its own IBS. Their mean is the score and Student's t standard error of their mean is the
cluster-robust one of the ratio; the interval is `trashfire.core.inference.bounded_mean`'s,
the score interval with that spread within the score's range [0, 1], where Student's t
interval would run past 0 or 1 with a few held-out models (two, on a small grid)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trashfire.core.inference import Estimate, bounded_mean
from trashfire.survival import fitters as F
from trashfire.survival import ipcw
from trashfire.survival.newton import in_row_blocks

UNIT = "train_hash"  # what an interval counts: a trained model and every sample attacked on it


@dataclass(frozen=True)
class Horizon:
    """Where the IPCW scores of a held-out part look: its Brier score's `times` (within the
    part's follow-up), Uno's truncation `tau`, and the reference part's censoring curve."""

    times: np.ndarray
    tau: float
    curve: ipcw.CensoringCurve


def horizon(reference: pd.DataFrame, part: pd.DataFrame, score_range) -> Horizon:
    """The reference part's censoring curve and its durations' quantiles `score_range` (low,
    high): the Brier score's times from low to high, Uno's tau at high."""
    durations, weights = reference[F.DURATION].to_numpy(float), F.sample_weights(reference)
    times = ipcw.score_times(durations, weights, *score_range)
    curve = ipcw.censoring_curve(durations, reference[F.EVENT].to_numpy(), weights)
    return Horizon(ipcw.within_follow_up(times, part[F.DURATION]), float(times[-1]), curve)


def brier_losses(fit: F.Fit, part: pd.DataFrame, at: Horizon) -> np.ndarray:
    """Each held-out row's integrated Brier loss (`ipcw.brier_losses`) under the fit's survival curves."""
    if len(at.times) < 2:
        raise ValueError(f"the integrated Brier score needs 2 times within the held-out part's follow-up, got {len(at.times)}")

    def losses(rows: pd.DataFrame, durations: np.ndarray, events: np.ndarray) -> np.ndarray:
        survival = fit.fitter.predict_survival_function(F.covariates_of(rows), times=at.times).to_numpy(float).T  # (rows, times)
        return ipcw.brier_losses(survival, durations, events, at.times, at.curve)

    # a block of rows at a time: lifelines' prediction holds several (times, rows) arrays, GBs at 2·10^6 held-out rows
    return in_row_blocks(losses, part, part[F.DURATION].to_numpy(float), part[F.EVENT].to_numpy())


def integrated_brier(fit: F.Fit, part: pd.DataFrame, at: Horizon) -> float:
    """The IBS over the held-out samples (scikit-survival's integrated_brier_score)."""
    weights = F.sample_weights(part)
    return float(brier_losses(fit, part, at) @ weights / weights.sum())


def uno_pairs(part: pd.DataFrame, ranking: np.ndarray, at: Horizon) -> tuple[np.ndarray, np.ndarray]:
    """Each held-out row's concordant and comparable pairs under Uno's weights (failures before tau, 1 / G^2)."""
    durations, events, weights = part[F.DURATION].to_numpy(float), part[F.EVENT].to_numpy(), F.sample_weights(part)
    earlier = weights * ipcw.uno_weights(durations, events, at.curve, at.tau)
    return ipcw.pair_counts(durations, ranking, events, weights, earlier)


def harrell_pairs(part: pd.DataFrame, ranking: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each held-out row's concordant and comparable pairs as Harrell's C counts them."""
    return ipcw.pair_counts(part[F.DURATION].to_numpy(float), ranking, part[F.EVENT].to_numpy(), F.sample_weights(part))


SCORE_RANGE = (0.0, 1.0)  # a concordance's, and a Brier score's


def over_units(numerators, denominators, units, pairs: bool = False) -> Estimate:
    """The ratio sum(numerators) / sum(denominators) with its interval over `units` (module
    docstring; None: no units known, no interval); `pairs`: numerators and denominators count
    each pair from both of its ends."""
    frame = pd.DataFrame({"a": np.asarray(numerators, float), "b": np.asarray(denominators, float)})
    sums = frame.groupby(np.zeros(len(frame)) if units is None else np.asarray(units), sort=True).sum()
    total = float(sums["b"].sum())
    if total <= 0:
        raise ZeroDivisionError("No admissable pairs in the dataset." if pairs else "no held-out sample")
    ratio = float(sums["a"].sum()) / total
    linearised = ratio + (2.0 if pairs else 1.0) * len(sums) * (sums["a"] - ratio * sums["b"]) / total
    estimate = bounded_mean(linearised.to_numpy(), *SCORE_RANGE)
    return Estimate(ratio, estimate.lo, estimate.hi, estimate.se, estimate.df, estimate.n, estimate.p, estimate.null, estimate.method)


def with_interval(key: str, estimate: Estimate) -> dict[str, float]:
    """Table I's columns of one score: its value and its interval's bounds."""
    return {key: estimate.value, f"{key}_low": estimate.lo, f"{key}_high": estimate.hi}
