"""Which fitter feeds E[T], chosen without the test split: grouped K-fold cross-validation
inside the training split.

The training split's groups (`survival.split_by`: trained models by default, the units of the
split; where it holds fewer than 2, the next finer label's, with a note) are dealt into
`survival.folds` folds, shuffled by `survival.seed`; each fold is held out
once while the fitter is fitted again on the others, and scored on it by the `select_by` score
(`spec.Score.measure`); the fitter's `cv_<measure>` is the mean over the folds. Only that score
is computed, and only for the fitters that can be selected (AFT models, `aft: true`): each fold
costs a fit on (K - 1) / K of the training split. A fold's fit starts from the full training
fit's coefficients (lifelines' `initial_point`), so Newton-Raphson needs a step or two instead
of a start from nothing; where that fit fails, it is fitted from scratch with the configured
retries. A fold that cannot be scored leaves the fitter without a CV score (its note says why),
and so unselectable by it."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from lifelines.fitters import ParametricRegressionFitter

from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival import held_out, ipcw
from trashfire.survival.convergence import warm_start
from trashfire.survival.score_sample import cross_validation_rows
from trashfire.survival.spec import SPLIT_GROUPS
from trashfire.survival.spec import score as score_named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """A cross-validation: the `measure` of select_by, each training row's fold, and what scoring needs."""

    measure: str  # ICI, E50, IBS, uno_C or concordance
    folds: np.ndarray  # per training row (its position), its fold 0 .. k - 1
    k: int
    t0_quantile: float  # survival.t0_quantile: ICI and E50's time, unless a fitter names its own
    score_range: tuple[float, float]  # survival.score_range: IBS's times, Uno's tau
    retries: tuple = ()
    why_not: str = ""  # why these folds cannot be scored ("": they can)
    note: str = ""  # how the folds differ from survival.split_by's groups ("": they do not)
    rows: np.ndarray | None = None  # the training rows (positions) the folds are dealt from: None, all (survival.score_samples)
    sampled: str = ""  # how those rows were drawn ("": every row)

    @property
    def column(self) -> str:
        return f"cv_{self.measure}"


def chosen_by(settings: Any) -> str:
    """How the selected model is chosen, in words (the log's and Table I's caption's)."""
    if settings.chosen:
        return "survival.chosen"
    if score_named(settings.select_by).measure:
        return f"best {settings.select_by}: grouped {settings.folds}-fold cross-validation inside the training split"
    return f"best {settings.select_by} on the training split"


def plan(settings: Any, train: pd.DataFrame) -> Plan | None:
    """The cross-validation that `survival.select_by` asks for, or None where the selection needs
    none (`survival.chosen` names the model; AIC and BIC are in-sample)."""
    measure = score_named(settings.select_by).measure
    if settings.get("chosen") is not None or not measure:
        return None
    by, note = fold_label(train, settings.split_by)
    groups = train[by].astype(str)
    rows, sampled = cross_validation_rows(groups, F.sample_weights(train), settings.get("score_samples"), int(settings.seed))
    if rows is not None:
        groups = groups.iloc[rows]
        log.info("cross-validation for survival.select_by: %s", sampled)
    k = min(int(settings.folds), groups.nunique())
    why_not = "" if k >= 2 else f"cross-validation needs 2 training groups by {by}, the training split holds {groups.nunique()}"
    folds = grouped_folds(groups, max(k, 1), int(settings.seed))
    if note:
        log.warning("cross-validation for survival.select_by: %s", note)
    return Plan(measure, folds, k, float(settings.t0_quantile), tuple(settings.score_range), tuple(settings.retries), why_not, note, rows, sampled)


def fold_label(train: pd.DataFrame, split_by: str) -> tuple[str, str]:
    """The label whose groups the folds keep whole: survival.split_by's, or, where the training
    split holds fewer than 2 of them (a grid of two trained models leaves one to train on), the
    next finer label that holds 2 (a trained model with one predict-time defence, then an attack
    cell), and a note that says so. The test split is never used either way."""
    finer = SPLIT_GROUPS[SPLIT_GROUPS.index(split_by) :] if split_by in SPLIT_GROUPS else (split_by,)
    for label in finer:
        if label in train and train[label].nunique() >= 2:
            if label == split_by:
                return label, ""
            held = train[split_by].nunique() if split_by in train else 0
            return label, f"folds of {label} groups: the training split holds {held} {split_by} group"
    return split_by, ""


def grouped_folds(groups: pd.Series, k: int, seed: int) -> np.ndarray:
    """Each row's fold: the groups shuffled (seeded) and dealt round, so that every row of a
    group is in one fold and the folds hold as many groups as can be."""
    names = np.sort(groups.unique())
    shuffled = np.random.default_rng(seed).permutation(names)
    fold_of = pd.Series(np.arange(len(shuffled)) % k, index=shuffled)
    return groups.map(fold_of).to_numpy(int)


def cross_validate(fit: F.Fit, spec: Any, data: pd.DataFrame, how: Plan) -> dict[str, Any]:
    """Table I's `cv_<measure>` (mean over the folds) and `cv_folds` for one fitted model on its
    training rows `data`; a fold that fails leaves NaN, its reason in fit.warnings."""
    row = {how.column: math.nan, "cv_folds": how.k}
    if how.why_not:
        fit.warnings.append(f"{how.column}: {how.why_not}")
        return row
    for note in (how.note, how.sampled):
        if note:
            fit.warnings.append(f"{how.column}: {note}")
    if how.rows is not None:
        data = data.iloc[how.rows]
    quantile = spec.get("t0_quantile") or how.t0_quantile
    values = []
    for fold in range(how.k):
        held = how.folds == fold
        fitted_on, scored_on = data[~held], data[held]
        try:
            value = fold_score(how, refit(fit, spec, fitted_on, how.retries), fitted_on, scored_on, quantile)
        except Exception as err:  # a fit that fails on this fold, a fold too small to score (no comparable pair, no spread) ...
            fit.warnings.append(f"{how.column}: fold {fold + 1} of {how.k} not scored: {type(err).__name__}: {F.first_line(err)}")
            continue
        if np.isfinite(value):
            values.append(value)
    # the folds that scored (a tiny grid's fold may hold too few samples to score): their mean and count
    return row | {how.column: float(np.mean(values)) if values else math.nan, "cv_folds": len(values)}


def refit(fit: F.Fit, spec: Any, data: pd.DataFrame, retries) -> F.Fit:
    """The fitter on a fold's training rows with the settings its full fit kept, from that fit's
    coefficients (a parametric lifelines fitter), or, failing that, from scratch with every retry."""
    settings = F.attempts(spec, list(retries))[fit.attempts - 1]
    fitter = F.build(spec, settings["penalizer"], settings["optimiser"])
    start = warm_start(fit.fitter) if isinstance(fitter, ParametricRegressionFitter) else None
    if hasattr(fitter, "fits_null_model"):
        fitter.fits_null_model = False  # the generalised gamma's null model, for a likelihood-ratio test no fold reads
    try:
        F.fit_quietly(fitter, data, settings["fit_options"], initial_point=start)
        if np.isfinite(fitter.log_likelihood_):
            return F.Fit(fit.name, fitter, settings["penalizer"], fit.optimiser, fit.attempts)
    except Exception:  # noqa: S110 -- the fit from scratch below says why, if it fails too
        pass
    return F.fit_one(fit.name, spec, data, retries)


def fold_score(how: Plan, fit: F.Fit, fitted_on: pd.DataFrame, scored_on: pd.DataFrame, t0_quantile: float) -> float:
    """The fold's `measure` of `fit` (fitted on `fitted_on`) on the held-out rows `scored_on`."""
    if how.measure in ("ICI", "E50"):
        t0 = float(np.quantile(np.repeat(fitted_on[F.DURATION].to_numpy(), F.sample_weights(fitted_on)), t0_quantile))
        ici, e50 = F.calibration(fit, scored_on, t0)
        return ici if how.measure == "ICI" else e50
    if how.measure == "IBS":
        return held_out.integrated_brier(fit, scored_on, held_out.horizon(fitted_on, scored_on, how.score_range))
    ranking = C.survival_ranking(fit, F.covariates_of(scored_on))
    if how.measure == "uno_C":
        return ipcw.concordance_of(*held_out.uno_pairs(scored_on, ranking, held_out.horizon(fitted_on, scored_on, how.score_range)))
    return C.ranking_concordance(scored_on, ranking)
