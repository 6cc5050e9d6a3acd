"""Stage `survival`: fit TRASHFIRE's survival models to the survival data set (one row per
attacked sample), score them as its Table I does beside two baselines, draw its Figures 2 and 3
and Kaplan-Meier curves, and write the selected AFT model's E[T] per attack cell for `aggregate`.

Models (lifelines; `conf/survival/`): Weibull, Log-Normal, Log-Logistic, Exponential (Weibull
with shape 1) and Generalised Gamma AFT, and Cox PH, each retried with another optimiser and
larger penalizers when a fit fails to converge; one that still fails is a row of the table
with its reasons, and the others go on. The label columns (hashes, attack family, defence, data
set) are kept aside, never fitted.

Scores on a train/test split by group (`survival.split_by`, default train_hash: every sample of
a trained model on one side, seeded; `survival.test_size` of the groups to test): AIC and BIC =
-2 loglik + k ln n with k = every estimated coefficient and n = the samples (lifelines' BIC_
counts parameter names and rows), loglik unpenalised (lifelines' log_likelihood_ includes the
penalty); Cox PH's are from its partial likelihood. Concordance (train, test) and ICI and E50
(train, test) of lifelines' `survival_probability_calibration` at the fitter's t0 (a quantile of
the training durations), both over samples. Standard errors: lifelines' naive ones and, beside
them, cluster-robust ones with the trained models as clusters (samples of one trained model share
its weights, so they are not independent). Two baselines are scored on the same halves: a
ranking by the mean runtime of the sample's attack cell, and by its cell's observed survival
share; `beats_baselines` says whether a model's test concordance exceeds both. The selected
model (`survival.chosen`, or the best `survival.select_by` among AFT models with a finite E[T]
everywhere; never a baseline) gives E[T].

Writes `reports/survival/`: aft_comparison.csv and .tex (Table I with the baselines),
calibration.png (Fig. 2), coefficients.png (Fig. 3, selected model) and coefficients/<fitter>.png,
coefficients.csv (naive and cluster-robust intervals), expected_times.csv (E[T] per attack cell:
the selected model's restricted and unrestricted mean, every AFT model's restricted mean),
kaplan_meier.png and logrank.csv (per attack family, each defence against none), and
models.pkl (every fitted model; reload with `trashfire.survival.analysis.load_models`).
"""

from __future__ import annotations

import logging
import math
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from lifelines import KaplanMeierFitter
from lifelines.statistics import logrank_test
from omegaconf import DictConfig

from trashfire.core import schema
from trashfire.core.errors import ConfigError, DataError
from trashfire.core.parallel import resolve_workers, results_as_completed, threads_per_cell
from trashfire.core.records import atomic_path, write_json
from trashfire.survival import fitters as F
from trashfire.survival.data import diagnose, drop_degenerate
from trashfire.survival.figures import calibration_grid, coefficient_figure, finish_calibration, kaplan_meier_figure, save

log = logging.getLogger(__name__)

HIGHER_IS_BETTER = ("test_concordance", "concordance")  # the other select_by scores are errors
SCORE_COLUMNS = [
    "log_likelihood",
    "k",
    "n",
    "n_events",
    "AIC",
    "BIC",
    "concordance",
    "test_concordance",
    "concordance_within",
    "test_concordance_within",
    "t0",
    "ICI",
    "test_ICI",
    "E50",
    "test_E50",
]
WITHIN_PAIRS = ["pairs_within", "test_pairs_within"]  # comparable pairs within attack cells, per part
KM_COLUMNS = ["km_median_abs_log_ratio", "km_share_flagged", "km_worst_cells"]  # per AFT fitter: its E[T] against Kaplan-Meier
FAMILY = "attack_family"
ALL_FAMILIES = "all"  # concordance_within.csv's row over every attack family
KM_WORST = 5  # cells listed as the worst of the Kaplan-Meier check
COX_NOTE = "AIC and BIC from the partial likelihood: comparable among Cox fits only"
CELL = "attack_hash"
REFERENCE_DEFENCE = "none"
BASELINE_NOTE = "a ranking of samples, not a survival model: no likelihood (AIC, BIC) and no survival probabilities (ICI, E50)"
FEW_CLUSTERS = 30  # below this the cluster-robust SEs run small (Cameron and Miller 2015's rule of thumb)
CURVE_POINTS = 120  # time points of the predicted survival curves drawn over Kaplan-Meier
CLUSTER_BY = "train_hash"  # the samples of one trained model are not independent, whatever the split


def read_survival_data(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise DataError(f"survival data not found: {path}; run the timing stage first") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise DataError(f"corrupt survival data {path}: {str(err).splitlines()[0]}; rerun the timing stage") from None


def split_groups(data: pd.DataFrame, by: str, test_size: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train/test by group: every row of one value of `by` (a trained model for train_hash) on
    one side, `test_size` of the groups (at least one, and one left to train on) to test. The
    labels stay in both parts; the fitters leave them aside."""
    if by not in data:
        raise DataError(f"survival data has no column {by!r} to split by (survival.split_by); rerun the timing stage")
    groups = np.sort(data[by].astype(str).unique())
    if len(groups) < 2:
        raise DataError(f"survival data holds {len(groups)} {by} group; a train/test split by {by} (survival.split_by) needs at least 2")
    rng = np.random.default_rng(seed)
    n_test = min(len(groups) - 1, max(1, round(test_size * len(groups))))
    is_test = data[by].astype(str).isin(rng.choice(groups, size=n_test, replace=False))
    return data[~is_test], data[is_test]


def usable_covariates(train: pd.DataFrame, test: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop covariates that are constant or collinear in the training part (logged)."""
    covariates = F.covariates_of(train)
    kept = drop_degenerate(covariates, train[F.WEIGHT], where="survival training split").columns
    dropped = [c for c in covariates if c not in kept]
    return train.drop(columns=dropped), test.drop(columns=dropped)


def calibration_time(train: pd.DataFrame, quantile: float) -> float:
    """t0: a quantile of the training durations over samples."""
    return float(np.quantile(np.repeat(train[F.DURATION].to_numpy(), F.sample_weights(train)), quantile))


SLOW_FITTERS = ("gengamma",)  # started first, so that the quicker fits fill the other workers meanwhile


def compare(
    train: pd.DataFrame, test: pd.DataFrame, settings: Any, axes: dict | None = None, workers: int = 1, threads: int | None = None
) -> tuple[pd.DataFrame, dict[str, F.Fit]]:
    """Fit and score every configured fitter, then the baselines; returns Table I (one row per
    fitter, failed fits included with their reasons, then one per baseline) and the fitted
    models, with cluster-robust SEs by trained model (CLUSTER_BY). `axes[name]` = (train, test) axes
    for the calibration curves. With workers > 1 the fits run in worker processes, the
    generalised gamma (the slowest) first, and each is scored here as it arrives."""
    rows: dict[str, dict[str, Any]] = {}
    to_fit = []
    for name in settings.fitters:
        spec = settings.models[name]
        rows[name] = {"fitter": name, "model": spec.label, "aft": bool(spec.aft)}
        if not spec.aft and F.covariates_of(train).empty:
            rows[name] |= {"status": "skipped", "note": f"not fitted: {spec.label} needs a covariate that varies, and none does"}
        else:
            to_fit.append((name, spec, train, list(settings.retries)))
    to_fit.sort(key=lambda job: job[0] not in SLOW_FITTERS)
    fits = {}
    for index, fit in results_as_completed(fit_with_robust_se, to_fit, workers, log.name, threads):
        name, spec = to_fit[index][:2]
        if isinstance(fit, F.FitFailed):
            log.warning("%s failed to fit: %s", name, fit)
            rows[name] |= {"status": "failed", "note": f"fit failed: {fit}"}
            continue
        fits[name] = fit
        quantile = spec.get("t0_quantile") or settings.t0_quantile
        rows[name] |= {"status": "fitted", "penalizer": fit.penalizer, "optimiser": fit.optimiser, "attempts": fit.attempts}
        rows[name] |= score(fit, train, test, calibration_time(train, quantile), (axes or {}).get(name, (None, None)))
    ordered = [rows[name] for name in settings.fitters] + baseline_rows(train, test)
    comparison = pd.DataFrame(ordered).assign(split_by=settings.split_by)
    return with_baseline_verdict(comparison).reindex(columns=table_columns(comparison.columns)), {name: fits[name] for name in settings.fitters if name in fits}


def fit_with_robust_se(name: str, spec: Any, train: pd.DataFrame, retries: list) -> F.Fit | F.FitFailed:
    """One fitter (a worker's job): its fit with cluster-robust SEs, or why it failed."""
    try:
        fit = F.fit_one(name, spec, train, retries)
    except F.FitFailed as err:
        return err
    attach_robust_se(fit, train, CLUSTER_BY)
    return fit


def table_columns(columns) -> list[str]:
    """Table I's order: the scores, then the within-cell pairs and the per-family within-cell
    concordance (train, then test), the Kaplan-Meier check, anything else, the note."""
    leading = ["fitter", "model", "status", "aft"] + SCORE_COLUMNS + ["beats_baselines", "split_by", "penalizer", "optimiser", "attempts"]
    per_family = [c for prefix in ("", "test_") for c in sorted(columns) if c.startswith(f"{prefix}concordance_within[")]
    middle = WITHIN_PAIRS + per_family + KM_COLUMNS
    placed = set(leading) | set(middle) | {"note"}
    return leading + [c for c in middle if c in set(columns)] + sorted(set(columns) - placed) + ["note"]


def attach_robust_se(fit: F.Fit, train: pd.DataFrame, by: str) -> None:
    """fit.robust_se: cluster-robust SEs with the trained models (`by`) as clusters; where they cannot
    be computed, a note and NaN intervals. With few clusters the sandwich is biased low (it has
    no small-sample factor, as lifelines'), which the note says."""
    clusters = train[by].nunique()
    if clusters < 2:  # one cluster's score is the total score, 0 at the fit: no variance to estimate
        fit.warnings.append(f"no cluster-robust SEs: the training part holds {clusters} {by} cluster")
        return
    try:
        fit.robust_se = F.cluster_robust_se(fit, train, train[by].to_numpy())
    except Exception as err:  # a missing cluster column, a singular covariance ...
        log.warning("%s: no cluster-robust standard errors: %s", fit.name, F.first_line(err))
        fit.warnings.append(f"cluster-robust SEs: {type(err).__name__}: {F.first_line(err)}")
        return
    if clusters < FEW_CLUSTERS:
        fit.warnings.append(f"cluster-robust SEs from {clusters} {by} clusters (< {FEW_CLUSTERS}): likely too small")


def score(fit: F.Fit, train: pd.DataFrame, test: pd.DataFrame, t0: float, axes: tuple) -> dict[str, Any]:
    """One row of Table I; a score that cannot be computed is NaN with its reason in `note`."""
    row: dict[str, Any] = F.information_criteria(fit, train)
    row |= {"n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum()), "t0": t0}
    notes = list(fit.warnings) + ([COX_NOTE] if fit.is_cox else [])
    for prefix, part, ax in (("", train, axes[0]), ("test_", test, axes[1])):
        row[f"{prefix}concordance"] = _guarded(notes, f"{prefix}concordance", F.concordance, fit, part)
        row |= within_cell_scores(notes, prefix, part, lambda p: F.survival_ranking(fit, F.covariates_of(p)))
        ici_e50 = _guarded(notes, f"{prefix}ICI/E50", F.calibration, fit, part, t0, ax)
        row[f"{prefix}ICI"], row[f"{prefix}E50"] = ici_e50 if isinstance(ici_e50, tuple) else (math.nan, math.nan)
    row["note"] = "; ".join(notes)
    return row


def within_cell_scores(notes: list[str], prefix: str, part: pd.DataFrame, ranking_of) -> dict[str, float]:
    """Table I's within-cell concordance of one part (`prefix` "" for train, "test_"): Harrell's
    C with only the pairs within one attack cell compared, pooled over the cells by their
    pairs, overall (`concordance_within`, with its `pairs_within`) and per attack family
    (`concordance_within[<family>]`). `ranking_of(part)` ranks the rows (higher = longer
    survival). A ranking that is constant within each cell (the baselines) scores 0.5."""
    key = f"{prefix}concordance_within"
    try:
        counts = F.concordance_counts(part[F.DURATION], ranking_of(part), part[F.EVENT], F.sample_weights(part), part[CELL])
    except Exception as err:  # e.g. a ranking that cannot be predicted
        notes.append(f"{key}: {type(err).__name__}: {F.first_line(err)}")
        return {key: math.nan}
    row = {key: _pooled(counts), f"{prefix}pairs_within": float(counts["pairs"].sum())}
    if counts["pairs"].sum() == 0:
        notes.append(f"{key}: no comparable pair within an attack cell")
    if FAMILY in part:
        families = part.groupby(CELL)[FAMILY].first().reindex(counts.index)
        row |= {f"{key}[{family}]": _pooled(group) for family, group in counts.groupby(families, sort=True)}
    return row


def _pooled(counts: pd.DataFrame) -> float:
    pairs = counts["pairs"].sum()
    return float(counts["concordant"].sum() / pairs) if pairs > 0 else math.nan


def concordance_within_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """concordance_within.csv: Table I's within-cell concordance, one row per fitter or baseline
    and attack family (first `all`, every family pooled), train and test side by side."""
    families = sorted({c[c.index("[") + 1 : -1] for c in comparison if c.startswith(("concordance_within[", "test_concordance_within["))})
    rows = []
    for _, row in comparison.iterrows():
        for family in [ALL_FAMILIES, *families]:
            suffix = "" if family == ALL_FAMILIES else f"[{family}]"
            values = {f"{p}concordance_within": row.get(f"{p}concordance_within{suffix}", math.nan) for p in ("", "test_")}
            rows.append({"fitter": row["fitter"], "model": row["model"], "status": row["status"], FAMILY: family, **values})
    return pd.DataFrame(rows, columns=schema.CONCORDANCE_WITHIN)


def _guarded(notes: list[str], what: str, function, *args):
    try:
        return function(*args)
    except Exception as err:  # e.g. a test part without events, a calibration spline that fails
        notes.append(f"{what}: {type(err).__name__}: {F.first_line(err) or 'no comparable pairs'}")
        return math.nan


# --- baselines -----------------------------------------------------------------------------


def cell_mean_runtime(part: pd.DataFrame) -> np.ndarray:
    """Each sample's score for the runtime baseline: the mean duration over the samples of its
    attack cell (the cell's attack time per sample)."""
    return _per_cell_mean(part, part[F.DURATION].to_numpy(float))


def cell_survival_share(part: pd.DataFrame) -> np.ndarray:
    """Each sample's score for the failure-share baseline: 1 - the share of its attack cell's
    samples in `part` that failed (a higher score ranks as longer survival)."""
    return 1.0 - _per_cell_mean(part, part[F.EVENT].to_numpy(float))


def _per_cell_mean(part: pd.DataFrame, values: np.ndarray) -> np.ndarray:
    return part[CELL].map(cell_means(part, values)).to_numpy(float)


# name -> (label in Table I, what it knows, its score of each sample: higher = longer survival)
BASELINES = {
    "runtime_baseline": ("Runtime baseline", "knows only each attack cell's mean attack runtime", cell_mean_runtime),
    "failure_share_baseline": ("Failure-share baseline", "knows only each attack cell's observed failure share", cell_survival_share),
}


def baseline_rows(train: pd.DataFrame, test: pd.DataFrame) -> list[dict[str, Any]]:
    """Table I rows of the baselines: Harrell's C over samples on each half, as for the models;
    no likelihood or calibration scores."""
    rows = []
    for name, (label, knows, scores) in BASELINES.items():
        notes = [f"baseline: {knows}", BASELINE_NOTE]
        row: dict[str, Any] = {"fitter": name, "model": label, "status": "baseline", "aft": False}
        row |= {"n": float(F.sample_weights(train).sum()), "n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum())}
        for prefix, part in (("", train), ("test_", test)):
            row[f"{prefix}concordance"] = _guarded(notes, f"{prefix}concordance", lambda p: F.ranking_concordance(p, scores(p)), part)  # noqa: B023 -- called at once
            row |= within_cell_scores(notes, prefix, part, scores)
        rows.append(row | {"note": "; ".join(notes)})
    return rows


def within_summary(comparison: pd.DataFrame) -> str:
    """Each row's test concordance within attack cells, for the log."""
    return ", ".join(f"{row['model']} {row['test_concordance_within']:.4f}" for _, row in comparison.iterrows() if "test_concordance_within" in row)


def with_baseline_verdict(comparison: pd.DataFrame) -> pd.DataFrame:
    """`beats_baselines` per fitted model: its test concordance above every baseline's (a
    baseline without a score cannot be beaten); empty for the other rows."""
    baselines = comparison.loc[comparison["status"] == "baseline", "test_concordance"].to_numpy(float)
    fitted = comparison["status"] == "fitted"
    beats = comparison["test_concordance"].to_numpy(float)[:, None] > baselines[None, :]
    verdict = pd.Series(beats.all(axis=1) & (len(baselines) > 0), index=comparison.index, dtype=object)
    return comparison.assign(beats_baselines=verdict.where(fitted, None))


def baseline_verdicts(comparison: pd.DataFrame) -> list[str]:
    """One sentence per fitted model: whether it beats both baselines on test concordance."""
    baselines = comparison[comparison["status"] == "baseline"].set_index("model")["test_concordance"]
    bar = ", ".join(f"{model} {value:.4f}" for model, value in baselines.items())
    lines = []
    for _, row in comparison[comparison["status"] == "fitted"].iterrows():
        verb = "beats" if row["beats_baselines"] is not None and bool(row["beats_baselines"]) else "does not beat"
        lines.append(f"{row['model']} {verb} both baselines on test concordance ({row['test_concordance']:.4f}; {bar})")
    return lines


# --- E[T] ----------------------------------------------------------------------------------


def cell_budgets(data: pd.DataFrame) -> pd.Series:
    """t* per attack cell, its budget: the largest censoring time among its samples, or, where
    no sample of the cell was censored, the cell's largest duration."""
    longest = data.groupby(CELL)[F.DURATION].max()
    censored = data[data[F.EVENT] == 0].groupby(CELL)[F.DURATION].max()
    return censored.reindex(longest.index).fillna(longest).rename("t_star")


def expected_times(fits: dict[str, F.Fit], data: pd.DataFrame, aft: list[str], budgets: pd.Series) -> pd.DataFrame:
    """E_T_<fitter> per attack cell from every fitted AFT model: 003's restricted mean
    int_0^{t*} S(u | x) du with t* the cell's budget (`cell_budgets`: its largest censoring
    time, or its largest duration when none of its samples was censored), averaged over the
    cell's samples (their covariates, such as the margin, differ)."""
    covariates = F.covariates_of(data)
    t_star = data[CELL].map(budgets).to_numpy(float)
    columns = {f"E_T_{name}": cell_means(data, F.restricted_mean(fits[name], covariates, t_star)) for name in aft if name in fits}
    return pd.DataFrame(columns, index=budgets.index)


def cell_means(data: pd.DataFrame, values: np.ndarray) -> pd.Series:
    """The mean of a per-row value over each attack cell's samples (an infinite one stays so)."""
    weights = pd.Series(F.sample_weights(data).astype(float), index=data.index)
    frame = pd.DataFrame({"v": np.asarray(values, float) * weights, "w": weights, CELL: data[CELL]})
    sums = frame.groupby(CELL)[["v", "w"]].sum()
    return sums["v"] / sums["w"]


def expected_time_table(times: pd.DataFrame, budgets: pd.Series, fit: F.Fit, data: pd.DataFrame) -> pd.DataFrame:
    """expected_times.csv: per attack cell E_T (the selected model's restricted mean, what TRASH
    uses), E_T_unrestricted (its mean E[T | x], over the cell's samples; inf or NaN where the
    model has none), t_star, the selected fitter and every AFT model's E_T_<fitter>."""
    unrestricted = cell_means(data, F.expected_time(fit, F.covariates_of(data))).reindex(times.index)
    leading = pd.DataFrame({"E_T": times[f"E_T_{fit.name}"], "E_T_unrestricted": unrestricted, "t_star": budgets.reindex(times.index), "fitter": fit.name})
    return pd.concat([leading, times], axis=1).rename_axis(CELL).reset_index()


def select(comparison: pd.DataFrame, times: pd.DataFrame, chosen: str | None, select_by: str) -> str:
    """The AFT model whose E[T] feeds TRASH: `chosen`, or the best by `select_by` among the
    fitted AFT models whose E[T] is finite for every cell; never a baseline."""
    finite = {c.removeprefix("E_T_"): bool(np.isfinite(times[c]).all() and (times[c] > 0).all()) for c in times}
    if chosen is not None:
        if chosen not in finite:
            raise DataError(f"survival.chosen = {chosen}: it did not fit (see aft_comparison.csv); choose another or set chosen: null")
        if not finite[chosen]:
            raise DataError(f"survival.chosen = {chosen}: its E[T] is infinite or undefined for some cells; choose another or set chosen: null")
        return chosen
    models = comparison[comparison["status"] != "baseline"] if "status" in comparison else comparison
    candidates = models[models["fitter"].map(lambda name: finite.get(name, False))].dropna(subset=[select_by])
    if candidates.empty:
        raise DataError(f"no fitted AFT model has a finite E[T] everywhere and a {select_by} score; see aft_comparison.csv, or name one in survival.chosen")
    best = candidates[select_by].idxmax() if select_by in HIGHER_IS_BETTER else candidates[select_by].idxmin()
    return str(candidates.loc[best, "fitter"])


# --- E[T] against the Kaplan-Meier restricted mean -------------------------------------------


def km_restricted_mean(durations, events, weights, t_star: float) -> float:
    """The Kaplan-Meier restricted mean int_0^{t*} S_KM(u) du of one set of samples (a row
    stands for `weights` samples): lifelines' `restricted_mean_survival_time` of its
    `KaplanMeierFitter`, in numpy. S_KM steps down at each failure time u by the share of those
    still at risk (duration >= u) that fail there."""
    order = np.argsort(np.asarray(durations, float), kind="stable")
    t, e, w = np.asarray(durations, float)[order], np.asarray(events, float)[order], np.asarray(weights, float)[order]
    times, first = np.unique(t, return_index=True)
    failed, leaving = np.add.reduceat(w * e, first), np.add.reduceat(w, first)
    at_risk = w.sum() - np.r_[0.0, np.cumsum(leaving)[:-1]]
    levels = np.r_[1.0, np.cumprod(1.0 - failed / at_risk)]  # S on [0, u1), [u1, u2), ..., [u_last, inf)
    edges = np.minimum(np.r_[0.0, times], t_star)
    return float((levels * np.diff(np.r_[edges, t_star])).sum())


def km_restricted_means(data: pd.DataFrame, budgets: pd.Series) -> pd.Series:
    """Per attack cell, the Kaplan-Meier restricted mean of its samples to its budget t*."""
    samples = pd.DataFrame({CELL: data[CELL].to_numpy(), "t": data[F.DURATION].to_numpy(float), "e": data[F.EVENT].to_numpy(), "w": F.sample_weights(data)})
    means = {cell: km_restricted_mean(rows["t"], rows["e"], rows["w"], float(budgets[cell])) for cell, rows in samples.groupby(CELL, sort=True)}
    return pd.Series(means, name="E_T_km").rename_axis(CELL)


def km_check_table(data: pd.DataFrame, expected: pd.Series, budgets: pd.Series, km: pd.Series, tolerance: float) -> pd.DataFrame:
    """km_check.csv: per attack cell, a model's E[T] (`expected`, by cell) against the
    Kaplan-Meier restricted mean of the cell's samples to the same t* (`km`); `flagged` where
    they differ by more than `tolerance` (|ratio - 1| > tolerance)."""
    weights = pd.Series(F.sample_weights(data).astype(float), index=data.index)
    labels = data.groupby(CELL, sort=True)[[c for c in (FAMILY, "defence", "dataset") if c in data]].first()
    counts = pd.DataFrame({"n": weights, "events": weights * data[F.EVENT]}).groupby(data[CELL], sort=True).sum()
    table = labels.join(counts.astype(int), how="outer").reindex(km.index)
    table["t_star"], table["E_T"], table["E_T_km"] = budgets.reindex(km.index), expected.reindex(km.index), km
    with np.errstate(divide="ignore", invalid="ignore"):
        table["ratio"] = table["E_T"] / table["E_T_km"]
        table["log_ratio"] = np.log(table["ratio"])
    table["flagged"] = ~((table["ratio"] - 1.0).abs() <= tolerance)  # a missing or infinite E[T] is flagged too
    return table.assign(tolerance=tolerance).rename_axis(CELL).reset_index().reindex(columns=schema.KM_CHECK)


def km_summary(check: pd.DataFrame) -> dict[str, Any]:
    """Table I's Kaplan-Meier check of one model: the median |log(E[T] / KM)| over cells, the
    share of cells flagged, and the KM_WORST cells furthest off as text."""
    worst = check.assign(off=check["log_ratio"].abs().fillna(np.inf)).sort_values("off", ascending=False, kind="stable").head(KM_WORST)
    return {
        "km_median_abs_log_ratio": float(check["log_ratio"].abs().median()),
        "km_share_flagged": float(check["flagged"].mean()),
        "km_worst_cells": "; ".join(f"{cell_label(row)} = {row['ratio']:.4g}" for _, row in worst.iterrows()),
    }


def cell_label(row: pd.Series) -> str:
    """An attack cell as the Kaplan-Meier check names it: its hash (family, defence, data set)."""
    labels = [str(row[c]) for c in (FAMILY, "defence", "dataset") if c in row and pd.notna(row[c])]
    return f"{row[CELL]} ({', '.join(labels)})" if labels else str(row[CELL])


def worst_cells(text: Any) -> dict[str, float]:
    """Table I's `km_worst_cells` back as {cell: E[T] / KM}."""
    if not isinstance(text, str) or not text:
        return {}
    return {cell: float(ratio) for cell, ratio in (entry.rsplit(" = ", 1) for entry in text.split("; "))}


def with_km_check(comparison: pd.DataFrame, times: pd.DataFrame, data: pd.DataFrame, budgets: pd.Series, km: pd.Series, tolerance: float) -> pd.DataFrame:
    """Table I with each AFT model's Kaplan-Meier check (km_summary; empty for Cox PH and the
    baselines)."""
    summaries = {
        name: km_summary(km_check_table(data, times[f"E_T_{name}"], budgets, km, tolerance)) for name in comparison["fitter"] if f"E_T_{name}" in times
    }
    table = comparison.copy()
    for column in KM_COLUMNS:
        table[column] = table["fitter"].map(lambda name: summaries.get(name, {}).get(column))  # noqa: B023 -- called at once
    return table.reindex(columns=table_columns(table.columns))


def km_sentences(check: pd.DataFrame, model: str) -> list[str]:
    """km_check.csv in words, for the log and the report: how far the model's E[T] is from
    Kaplan-Meier, how many cells are flagged, the worst, and what to do about them."""
    if check.empty:
        return []
    flagged = check["flagged"].astype(str).str.lower() == "true"
    summary = km_summary(check.assign(flagged=flagged))
    lines = [
        f"{model}'s E[T] is within {float(check['tolerance'].iloc[0]):.0%} of the Kaplan-Meier restricted mean to the same budget in "
        f"{int((~flagged).sum())} of {len(check)} attack cells (median |log(E[T] / KM)| {summary['km_median_abs_log_ratio']:.3g}; 0 is a perfect match)"
    ]
    if flagged.any():
        lines.append(f"{int(flagged.sum())} cell(s) flagged; the furthest off (E[T] / KM): {summary['km_worst_cells']}")
        lines.append(
            "the model misfits the flagged cells: compare its dashed curve with the Kaplan-Meier one (kaplan_meier.png), try another fitter "
            "(survival.chosen; Table I's km_ columns compare them), add covariates, or use E_T_km for those cells"
        )
    return lines


# --- Kaplan-Meier --------------------------------------------------------------------------


def logrank_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per attack family, each defence's samples against the undefended ones (lifelines'
    weighted log-rank test); a family without undefended samples has no rows."""
    rows = []
    for family, samples in data.groupby("attack_family", sort=True):
        reference = samples[samples["defence"] == REFERENCE_DEFENCE]
        if reference.empty:
            continue
        for defence, group in samples[samples["defence"] != REFERENCE_DEFENCE].groupby("defence", sort=True):
            result = logrank_test(
                group[F.DURATION],
                reference[F.DURATION],
                group[F.EVENT],
                reference[F.EVENT],
                weights_A=F.sample_weights(group),
                weights_B=F.sample_weights(reference),
            )
            rows.append(
                {
                    "attack_family": family,
                    "defence": defence,
                    "reference": REFERENCE_DEFENCE,
                    **_counts(group),
                    **{f"{k}_reference": v for k, v in _counts(reference).items()},
                    "test_statistic": float(result.test_statistic),
                    "p": float(result.p_value),
                }
            )
    columns = ["attack_family", "defence", "reference", "n", "events", "n_reference", "events_reference", "test_statistic", "p"]
    return pd.DataFrame(rows, columns=columns)


def _counts(samples: pd.DataFrame) -> dict[str, int]:
    weights = F.sample_weights(samples)
    return {"n": int(weights.sum()), "events": int(weights[samples[F.EVENT].to_numpy() == 1].sum())}


def kaplan_meier_fits(data: pd.DataFrame) -> dict[tuple[str, str], KaplanMeierFitter]:
    """(attack family, defence) -> lifelines' Kaplan-Meier estimate of its samples (weighted)."""
    fits = {}
    for (family, defence), samples in data.groupby(["attack_family", "defence"], sort=True):
        label = f"{defence} (Kaplan-Meier)"
        fits[(family, defence)] = KaplanMeierFitter().fit(samples[F.DURATION], samples[F.EVENT], weights=F.sample_weights(samples), label=label)
    return fits


def predicted_curves(fit: F.Fit, data: pd.DataFrame, points: int = CURVE_POINTS) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(attack family, defence) -> (times, the model's survival curve averaged over those
    samples), on a log-spaced grid over the family's durations."""
    curves = {}
    for family, samples in data.groupby("attack_family", sort=True):
        durations = samples[F.DURATION].to_numpy(float)
        grid = np.geomspace(durations.min(), durations.max(), points) if durations.max() > durations.min() else durations[:1]
        survival = fit.fitter.predict_survival_function(F.covariates_of(samples), times=grid).to_numpy()  # (times, samples)
        weights = F.sample_weights(samples).astype(float)
        for defence in sorted(samples["defence"].unique()):
            mine = (samples["defence"] == defence).to_numpy()
            curves[(family, defence)] = (grid, survival[:, mine] @ weights[mine] / weights[mine].sum())
    return curves


# --- tables and files ----------------------------------------------------------------------


def latex_table(comparison: pd.DataFrame, test_size: float) -> str:
    """Table I's layout: AIC, BIC, concordance, ICI and E50 (train and test) per model and
    baseline; '--' where a score is missing, with the reason as a footnote."""
    columns = {
        "AIC": "AIC",
        "BIC": "BIC",
        "concordance": "Concordance",
        "test_concordance": "Test Concordance",
        "concordance_within": "Within-cell Concordance",
        "test_concordance_within": "Test Within-cell Concordance",
        "ICI": "ICI",
        "test_ICI": "Test ICI",
        "E50": "E50",
        "test_E50": "Test E50",
    }
    table = comparison.set_index("model").reindex(columns=list(columns)).rename(columns=columns)
    table.index.name = None
    # concordance to 3 decimals: a model and a baseline often differ in the third
    formats = {c: "{:.3g}" if c in ("AIC", "BIC") else "{:.3f}" if "Concordance" in c else "{:.2f}" for c in table}
    notes = []
    for model, row in comparison.set_index("model").iterrows():
        if row["status"] == "failed":
            notes.append(f"{model}: every fit attempt failed (the reasons are in aft_comparison.csv)")
        elif row["status"] == "baseline":
            notes.append(f"{model}: {BASELINES[row['fitter']][1]}, {BASELINE_NOTE}")
        elif row["status"] != "fitted":
            notes.append(f"{model}: {row['note']}")
        elif not row["aft"]:
            notes.append(f"{model}: {COX_NOTE}")
    if "concordance_within" in comparison:
        notes.append("Within-cell concordance compares only samples of one attack cell (the baselines rank a cell's samples alike: 0.5)")
    if "beats_baselines" in comparison:
        fitted = comparison[comparison["status"] == "fitted"]
        losers = fitted.loc[~fitted["beats_baselines"].eq(True), "model"]
        if len(losers):
            notes.append(f"Test concordance not above both baselines: {', '.join(losers)}")
    by = comparison["split_by"].iloc[0] if "split_by" in comparison and len(comparison) else "train_hash"
    split = f"training ({100 * (1 - test_size):.0f}%) and test ({100 * test_size:.0f}%) groups of samples by {by}"
    caption = f"Survival models compared on the {_latex_escape(split)}. " + " ".join(_latex_escape(n.rstrip(".")) + "." for n in notes)
    styler = table.style.format(formats, na_rep="--").format_index(escape="latex")
    return styler.to_latex(hrules=True, position_float="centering", caption=caption, label="tab:survival-models") + "% needs \\usepackage{booktabs}\n"


def _latex_escape(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}")):
        text = text.replace(char, escaped)
    return text


def coefficient_table(fits: dict[str, F.Fit], train: pd.DataFrame) -> pd.DataFrame:
    """Every fitted coefficient with its naive and cluster-robust 95% intervals, and the
    covariate's SD over samples."""
    sd = sample_sd(F.covariates_of(train), F.sample_weights(train))
    columns = ["param", "covariate", "coef", "se", "lower", "upper", "p", "se_robust", "lower_robust", "upper_robust", "p_robust", "sd"]
    frames = []
    for name, fit in fits.items():
        summary = fit.fitter.summary.join(F.robust_summary(fit)).reset_index()
        if "param" not in summary:
            summary.insert(0, "param", "log_hazard")
        summary = summary.rename(columns={"se(coef)": "se", "coef lower 95%": "lower", "coef upper 95%": "upper"})
        summary["sd"] = summary["covariate"].map(sd).fillna(0.0)
        frames.append(summary[columns].assign(fitter=name))
    return pd.concat(frames, ignore_index=True)[["fitter"] + columns]


def sample_sd(covariates: pd.DataFrame, weights: np.ndarray) -> pd.Series:
    """Each column's SD over samples (ddof 1), from rows weighted by their samples."""
    mean = np.average(covariates, axis=0, weights=weights)
    variance = np.average((covariates - mean) ** 2, axis=0, weights=weights) * weights.sum() / max(weights.sum() - 1, 1)
    return pd.Series(np.sqrt(variance), index=covariates.columns)


def check_fitters(settings: Any) -> None:
    """Build every configured fitter once, so a bad _target_ stops before any data is read."""
    for name in settings.fitters:
        try:
            F.build(settings.models[name], 0.0, None)
        except Exception as err:
            target = settings.models[name].fitter.get("_target_")
            reason = F.first_line(err).split(", set env var HYDRA_FULL_ERROR")[0]  # Hydra's hint is no help here
            raise ConfigError(
                f"survival.models.{name}.fitter",
                f"cannot build {target!r}: {reason}; allowed: a lifelines fitter class and its arguments, e.g. lifelines.WeibullAFTFitter",
            ) from None


def save_models(fits: dict[str, F.Fit], path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(pickle.dumps({name: fit.fitter for name, fit in fits.items()}))


def load_models(path: str | Path) -> dict[str, Any]:
    """The fitted lifelines models the survival stage saved, by fitter name. They were fitted
    on durations in the unit `fit_unit.json` beside them names (GFLOPs, FLOPs / 1e9, on the
    compute clock; seconds on the others): give them durations in it."""
    try:
        return pickle.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise DataError(f"fitted survival models not found: {path}; run the survival stage") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as err:
        raise DataError(f"corrupt survival models file {path}: {err}; rerun the survival stage") from None


def write_csv(table: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)


# The unit the fits see per clock: lifelines' optimisers (and its calibration spline) start
# near durations of order 1 and fail to converge on FLOPs of order 1e8, so the compute clock
# is fitted in GFLOPs; every time the stage writes (E[T], t*) is back in the clock's unit.
FIT_UNITS = {"flops": 1e9}
FIT_UNIT_NAMES = {"flops": "GFLOPs", "process": "s", "wall": "s"}


def fit_unit(clock: str) -> float:
    return FIT_UNITS.get(clock, 1.0)


def in_clock_units(table: pd.DataFrame, unit: float, columns) -> pd.DataFrame:
    """`table` with its time `columns` from the fitting unit back to the clock's."""
    return table.assign(**{c: table[c] * unit for c in columns if c in table})


def analyse(cfg: DictConfig) -> pd.DataFrame:
    settings = cfg.survival
    check_fitters(settings)
    reports = Path(cfg.paths.reports)
    out = reports / "survival"
    data = read_survival_data(reports / "survival_data.csv")
    diagnose(data, str(reports / "survival_data.csv"))
    clock = str(cfg.timing.clock)
    unit = fit_unit(clock)
    data = data.assign(**{F.DURATION: data[F.DURATION] / unit})
    if unit != 1.0:
        log.info("durations on the %s clock fitted in %s (x %g); E[T] and t* are written back in %s", clock, FIT_UNIT_NAMES[clock], unit, clock)
    train, test = usable_covariates(*split_groups(data, settings.split_by, settings.test_size, settings.seed))
    log.info(
        "train/test split by %s: %d / %d groups, %d / %d samples",
        settings.split_by,
        train[settings.split_by].nunique(),
        test[settings.split_by].nunique(),
        F.sample_weights(train).sum(),
        F.sample_weights(test).sum(),
    )
    if train[CLUSTER_BY].nunique() < FEW_CLUSTERS:
        log.warning(
            "cluster-robust standard errors from %d %s clusters (< %d) run small: read them with care", train[CLUSTER_BY].nunique(), CLUSTER_BY, FEW_CLUSTERS
        )
    fig, axes = calibration_grid([settings.models[name].label for name in settings.fitters], list(settings.fitters))
    workers = resolve_workers(cfg.train.get("workers", "auto"), "cpu")
    comparison, fits = compare(train, test, settings, axes, workers, threads_per_cell(workers, cfg.train.get("threads", 1)))
    comparison = in_clock_units(comparison, unit, ["t0"])  # Table I's calibration time, in the clock's unit
    aft = [name for name in settings.fitters if settings.models[name].aft]
    budgets = cell_budgets(data)
    times = expected_times(fits, data, aft, budgets)
    selected = select(comparison, times, settings.chosen, settings.select_by)
    comparison["selected"] = comparison["fitter"] == selected
    out.mkdir(parents=True, exist_ok=True)
    save(finish_calibration(fig, axes, comparison, clock), out / "calibration.png")  # Table I's t0 is back in the clock's unit
    with atomic_path(out / "aft_comparison.tex") as tmp:
        tmp.write_text(latex_table(comparison, settings.test_size))
    coefficients = coefficient_table(fits, train)
    write_csv(coefficients, out / "coefficients.csv")
    for name, fit in fits.items():
        coefficient_figure(coefficients[coefficients["fitter"] == name], settings.models[name].label, fit.is_cox, out / "coefficients" / f"{name}.png")
    with atomic_path(out / "coefficients.png") as tmp:
        shutil.copyfile(out / "coefficients" / f"{selected}.png", tmp)
    expected = expected_time_table(times, budgets, fits[selected], data)
    km = km_restricted_means(data, budgets)
    check = km_check_table(data, expected.set_index(CELL)["E_T"], budgets, km, settings.km_check_tolerance)
    comparison = with_km_check(comparison, times, data, budgets, km, settings.km_check_tolerance)
    write_csv(comparison, out / "aft_comparison.csv")
    write_csv(concordance_within_table(comparison), out / "concordance_within.csv")
    write_csv(in_clock_units(expected, unit, ["E_T", "E_T_unrestricted", "t_star", *times.columns]), out / "expected_times.csv")
    write_csv(in_clock_units(check, unit, ["t_star", "E_T", "E_T_km"]), out / "km_check.csv")
    write_csv(logrank_table(data), out / "logrank.csv")
    kaplan_meier_figure(
        kaplan_meier_fits(data),
        predicted_curves(fits[selected], data),
        settings.models[selected].label,
        out / "kaplan_meier.png",
        FIT_UNIT_NAMES.get(clock, clock),
    )
    save_models(fits, out / "models.pkl")
    write_json(out / "fit_unit.json", {"clock": clock, "unit": FIT_UNIT_NAMES.get(clock, clock), "scale": unit})  # what models.pkl's durations are in
    shown = comparison.drop(columns=["note", "aft", "model", "split_by", "km_worst_cells"] + [c for c in comparison if "[" in c])
    log.info(
        "fitted %s of %s; selected %s (%s)\n%s",
        ", ".join(fits),
        ", ".join(settings.fitters),
        selected,
        settings.chosen and "survival.chosen" or f"best {settings.select_by}",
        shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
    )
    for line in baseline_verdicts(comparison):
        log.info("%s", line)
    log.info("within attack cells (pairs of one cell only; the baselines are 0.5 there): test concordance %s", within_summary(comparison))
    for line in km_sentences(check, settings.models[selected].label):
        log.log(logging.WARNING if check["flagged"].any() else logging.INFO, "%s", line)
    return comparison
