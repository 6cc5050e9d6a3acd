"""lifelines survival fitters as the survival stage uses them: built from config, fitted with
retries, scored per sample.

lifelines has every model TRASHFIRE compares but two as regression AFT models, the Exponential
and the Generalised Gamma: `trashfire.survival.aft` and `.gengamma` give them.

Survival data arrive one row per attacked sample with a `weight` (1; rows with equal duration
and covariates may merge with weight > 1), beside label columns (`LABEL_COLUMNS`: hashes,
attack family, defence, data set) that are never covariates. Scores must not depend on the
storage. The parametric log-likelihoods and the calibration spline's are weighted sums, exact on
weighted rows; concordance and Cox PH (whose Efron correction for tied times counts a weighted
row as one subject) are computed on one row per sample. One exception: lifelines scales a
penalizer by each covariate's SD over rows, not samples, so a penalised fit of merged rows
differs slightly from one of its samples (about 5e-5 nats at the default penalizer 0.001, 5e-3
at a retry's 0.1, on 300 samples in 42 rows); the timing stage writes weight-1 rows, so the
pipeline's fits are the per-sample ones.

Beside lifelines' naive standard errors, cluster-robust ones (a sandwich V B V with V the naive
covariance and B the outer products of per-cluster score sums, no small-sample factor). For
the parametric fitters, which have no `cluster_col`, the scores are autograd gradients of
lifelines' own likelihood at the fitted coefficients (lifelines' `robust=True` is the same
sandwich with one cluster per row, and loops over rows; one autograd Jacobian gives every row's
score here). For Cox PH, lifelines' `cluster_col` sandwich with its score residuals computed as
cumulative sums (lifelines' loop costs O(n^2) in rows).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from autograd import grad, jacobian
from hydra.utils import instantiate
from lifelines import CoxPHFitter, CRCSplineFitter
from lifelines.calibration import survival_probability_calibration
from lifelines.exceptions import ConvergenceError
from lifelines.fitters import ParametricRegressionFitter
from lifelines.utils import DataframeSlicer
from scipy import stats
from scipy.integrate import simpson

from trashfire.core.records import first_line
from trashfire.core.stats import bic
from trashfire.survival.aft import ExponentialAFTFitter, NewtonLogNormalAFTFitter, _covariate_columns, _no_conditioning  # noqa: F401 (ExponentialAFTFitter: its conf path)
from trashfire.survival.calibration_spline import FastCRCSplineFitter
from trashfire.survival.cox import cluster_score_sums
from trashfire.survival.gengamma import GeneralizedGammaAFTFitter  # noqa: F401 (configs written before it moved name it here)
from trashfire.survival.mappings import copied_shallow
from trashfire.survival.newton import ROW_BLOCK, in_row_blocks
from trashfire.tables.survival_data import NOT_COVARIATES

DURATION, EVENT, WEIGHT = "duration", "event", "weight"
NEWTON_FALLBACK = {"step_size": 0.1, "max_steps": 1000}  # Cox PH's "other optimiser": shorter Newton steps
CALIBRATION_SPLINE = {"beta_": ["ccl"], "gamma0_": "1", "gamma1_": "1", "gamma2_": "1"}  # lifelines' calibration model


# --- fitting with retries -------------------------------------------------------------------


class FitFailed(Exception):
    """Every attempt of one fitter failed; the message lists each attempt's reason."""


@dataclass
class Fit:
    """A fitted model and how it got there."""

    name: str
    fitter: Any
    penalizer: float
    optimiser: str
    attempts: int
    warnings: list[str] = field(default_factory=list)
    robust_se: pd.Series | None = None  # cluster-robust standard errors, by params_'s index
    convergence: Any = None  # survival.convergence.Convergence, where that module checked the fit
    criteria: dict[str, float] = field(default_factory=dict)  # Table I's information_criteria on the training split, once scored
    cv: dict[str, Any] = field(default_factory=dict)  # Table I's cross-validation columns (survival.validation), where it ran
    training_log_likelihood: float | None = None  # the unpenalised log-likelihood of its training rows, where a pass over them gave it

    @property
    def is_cox(self) -> bool:
        return isinstance(self.fitter, CoxPHFitter)


def attempts(spec: Any, retries: list) -> list[dict[str, Any]]:
    """The configured settings first, then each retry: another optimiser, a larger penalizer
    (a retry's penalizer applies where it exceeds the configured one), other fit options."""
    base = {
        "penalizer": float(spec.fitter.get("penalizer", 0.0)),
        "optimiser": spec.get("optimiser"),
        "fit_options": dict(spec.get("fit_options") or {}),
    }
    ladder = [base]
    for retry in retries:
        ladder.append(
            {
                "penalizer": max(base["penalizer"], float(retry.get("penalizer") or 0.0)),
                "optimiser": retry.get("optimiser", base["optimiser"]),
                "fit_options": dict(retry["fit_options"]) if retry.get("fit_options") is not None else base["fit_options"],
            }
        )
    return ladder


def build(spec: Any, penalizer: float, optimiser: str | None):
    """The lifelines fitter of `spec.fitter` (`_target_` + its arguments) with these settings."""
    fitter = instantiate(spec.fitter, penalizer=penalizer)
    if optimiser and isinstance(fitter, ParametricRegressionFitter):
        fitter._scipy_fit_method = optimiser  # lifelines' own advice when BFGS does not converge
    return fitter


def fit_one(name: str, spec: Any, data: pd.DataFrame, retries: list = ()) -> Fit:
    """Fit `data` (duration, event, optional weight, covariates) with the configured settings,
    then each retry in turn; raise FitFailed with every attempt's reason if none converges."""
    reasons = []
    for number, settings in enumerate(attempts(spec, list(retries)), start=1):
        fitter = build(spec, settings["penalizer"], settings["optimiser"])
        fit_options = settings["fit_options"]
        if settings["optimiser"] and isinstance(fitter, CoxPHFitter):
            fit_options = NEWTON_FALLBACK | fit_options
        try:
            caught = fit_quietly(fitter, data, fit_options)
        except Exception as err:  # lifelines raises ConvergenceError, ValueError, LinAlgError, ...
            reasons.append(f"attempt {number} ({_describe(settings)}): {type(err).__name__}: {first_line(err)}")
            continue
        if not (np.isfinite(fitter.log_likelihood_) and np.all(np.isfinite(fitter.params_))):
            reasons.append(f"attempt {number} ({_describe(settings)}): non-finite log-likelihood or coefficients")
            continue
        optimiser = settings["optimiser"] or ("Newton" if isinstance(fitter, CoxPHFitter) else fitter._scipy_fit_method)
        if getattr(fitter, "newton_iterations", None) is not None:  # trashfire.survival.aft's fitters, whatever optimiser was asked
            optimiser = "Newton"
        return Fit(name, fitter, settings["penalizer"], optimiser, number, caught)
    raise FitFailed("; ".join(reasons))


def fit_quietly(fitter, data: pd.DataFrame, fit_options: dict, initial_point: np.ndarray | None = None) -> list[str]:
    """Fit (from `initial_point`, in lifelines' normalised coordinates, where given), returning
    lifelines' warnings (convergence notes) instead of printing them."""
    data = per_sample(model_frame(data), in_time_order=True) if isinstance(fitter, CoxPHFitter) else model_frame(data)  # per sample: see log_likelihood
    weights = WEIGHT if WEIGHT in data else None
    options = {"fit_options": fit_options} if fit_options else {}
    if initial_point is not None:
        options["initial_point"] = initial_point
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        fitter.fit(copied_shallow(data), duration_col=DURATION, event_col=EVENT, weights_col=weights, **options)
    notes = {_first_sentence(w.message) for w in caught if "onvergence" in type(w.message).__name__ or "Hessian" in str(w.message)}
    return sorted(notes)


def _first_sentence(message: Any) -> str:
    line = first_line(message)
    return line.split(". ")[0].rstrip(".") + "."


def _describe(settings: dict[str, Any]) -> str:
    options = f", fit_options {settings['fit_options']}" if settings["fit_options"] else ""
    return f"penalizer {settings['penalizer']:g}, optimiser {settings['optimiser'] or 'default'}{options}"


# --- scores --------------------------------------------------------------------------------


def covariates_of(data: pd.DataFrame) -> pd.DataFrame:
    """The covariates: every column but duration, event, weight, the labels and the compute counts."""
    return data.drop(columns=[c for c in (DURATION, EVENT, WEIGHT, *NOT_COVARIATES) if c in data])


def model_frame(data: pd.DataFrame) -> pd.DataFrame:
    """What lifelines fits: duration, event, weight and covariates, the labels left aside
    (lifelines takes every column of its frame for a covariate)."""
    return data.drop(columns=[c for c in NOT_COVARIATES if c in data])


def sample_weights(data: pd.DataFrame) -> np.ndarray:
    """Samples per row: the weight column, or one sample per row without one."""
    if WEIGHT not in data:
        return np.ones(len(data), dtype=int)
    return data[WEIGHT].to_numpy().astype(int)


def per_sample(data: pd.DataFrame, in_time_order: bool = False) -> pd.DataFrame:
    """One row per sample: for what lifelines computes without weights (Cox PH's tied times,
    concordance, its own calibration function). `in_time_order`: sorted by duration, then event,
    and labelled, as lifelines' Cox PH sorts the rows (stably), whose sort then copies nothing."""
    rows = np.repeat(np.arange(len(data)), sample_weights(data))
    labels = in_time_order_of(data, rows) if in_time_order else pd.RangeIndex(len(rows))
    repeated = data.iloc[rows[labels] if in_time_order else rows]
    repeated.index = labels
    return repeated.assign(**{WEIGHT: 1}) if WEIGHT in data else repeated


def in_time_order_of(data: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The order of `data`'s `rows` (positions) by duration, then event, stable: lifelines' sort."""
    return np.lexsort((data[EVENT].to_numpy()[rows], data[DURATION].to_numpy()[rows]))


def n_parameters(fit: Fit) -> int:
    """k of AIC and BIC: every estimated coefficient (lifelines' BIC_ counts parameter names)."""
    return int(np.size(fit.fitter.params_))


def calibration(fit: Fit, data: pd.DataFrame, t0: float, ax=None) -> tuple[float, float]:
    """ICI and E50 of the smoothed calibration curve at t0 (Austin et al. 2020), over samples;
    draws the curve on ax.

    This is lifelines' `survival_probability_calibration` (the same complementary log-log
    transform, CRC spline with 3 knots and penalizer, ICI = mean and E50 = median absolute
    difference) fitted to the weighted rows, whose likelihood is the per-sample one: lifelines'
    function ignores weights, and on one row per sample costs time in proportion to samples.
    The spline is fitted by SLSQP on the exact gradient (FastCRCSplineFitter); where that does
    not converge, by lifelines' SLSQP on its autograd objective, then L-BFGS-B, then lifelines'
    own function on one row per sample."""
    weights = sample_weights(data)
    predicted = np.clip(1 - fit.fitter.predict_survival_function(covariates_of(data), times=[t0]).to_numpy().ravel(), 1e-10, 1 - 1e-10)
    frame = pd.DataFrame({"ccl": _ccl(predicted), DURATION: data[DURATION].to_numpy(), EVENT: data[EVENT].to_numpy(), WEIGHT: weights})
    for spline_class, optimiser in ((FastCRCSplineFitter, "SLSQP"), (CRCSplineFitter, "SLSQP"), (CRCSplineFitter, "L-BFGS-B")):
        spline = spline_class(n_baseline_knots=3, penalizer=0.000001)
        spline._scipy_fit_method = optimiser
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spline.fit_right_censoring(frame, DURATION, EVENT, regressors=CALIBRATION_SPLINE, weights_col=WEIGHT)
        except ConvergenceError:  # SLSQP's success near its tolerance may be rounding's: the next way fits the same spline
            continue
        observed = 1 - spline.predict_survival_function(frame[["ccl"]], times=[t0]).to_numpy().ravel()
        deltas = np.repeat(np.abs(observed - predicted), weights)
        if ax is not None:
            _draw_calibration(ax, spline, predicted, weights, t0)
        return float(deltas.mean()), float(np.percentile(deltas, 50))
    return _lifelines_calibration(fit, data, t0, ax)


def _lifelines_calibration(fit: Fit, data: pd.DataFrame, t0: float, ax) -> tuple[float, float]:
    scratch = plt.figure(figsize=(1, 1))  # lifelines calls plt.tight_layout() on the current figure
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, ici, e50 = survival_probability_calibration(fit.fitter, per_sample(model_frame(data)), t0=t0, ax=ax if ax is not None else scratch.gca())
    finally:
        plt.close(scratch)
    return float(ici), float(e50)


def _ccl(p: np.ndarray) -> np.ndarray:
    return np.log(-np.log(1 - p))


def _draw_calibration(ax, spline, predicted: np.ndarray, weights: np.ndarray, t0: float) -> None:
    """lifelines' calibration plot: the smoothed curve, the diagonal, a histogram of predictions."""
    grid = np.linspace(max(predicted.min() - 0.01, 0), min(predicted.max() + 0.01, 1), 100)
    curve = 1 - spline.predict_survival_function(pd.DataFrame({"ccl": _ccl(np.clip(grid, 1e-10, 1 - 1e-10))}), times=[t0]).to_numpy().ravel()
    ax.plot(grid, curve, color="tab:red")  # no legend: finish_calibration titles the panel
    ax.plot(grid, grid, c="k", ls="--")
    ax.tick_params(axis="y", labelcolor="tab:red")
    twin = ax.twinx()
    bins = int(min(50, max(1, np.ceil(np.sqrt(weights.sum())))))  # numpy's "sqrt" rule, which it refuses for weights
    twin.hist(predicted, weights=weights, bins=bins, alpha=0.3, color="tab:blue")
    twin.set_ylabel("samples", color="tab:blue")
    twin.tick_params(axis="y", labelcolor="tab:blue")


def log_likelihood(fit: Fit, data: pd.DataFrame) -> float:
    """The unpenalised (weighted) log-likelihood of `data` at the fitted coefficients; Cox PH's
    partial one. lifelines' log_likelihood_ includes the penalty, and its score() is a mean over
    the weights for parametric fitters but over the rows for Cox PH. Cox PH is fitted and scored
    on one row per sample: lifelines' Efron correction for tied times counts a weighted row as
    one subject, and samples can tie (those that fail at one step of one cell)."""
    data = model_frame(data)
    if fit.is_cox:
        if fit.training_log_likelihood is not None and len(data) > ROW_BLOCK and sample_weights(data).sum() == fit.fitter._n_examples:  # the check's
            return fit.training_log_likelihood
        samples = per_sample(data)
        return float(fit.fitter.score(samples, scoring_method="log_likelihood")) * len(samples)
    if len(data) <= ROW_BLOCK:
        return float(fit.fitter.score(data, scoring_method="log_likelihood")) * float(sample_weights(data).sum())
    return float(sum(_rows_log_likelihood(fit.fitter, data.iloc[start : start + ROW_BLOCK]) for start in range(0, len(data), ROW_BLOCK)))


def _rows_log_likelihood(fitter, rows: pd.DataFrame) -> float:  # a block's (a design of every row: 2.6 GB at 10^7); the closed form where it is lifelines'
    own = getattr(fitter, "unpenalised_log_likelihood", lambda *_: None)(
        rows[DURATION].to_numpy(float), rows[EVENT].to_numpy(), sample_weights(rows), covariates_of(rows)
    )
    return own if own is not None else float(fitter.score(rows, scoring_method="log_likelihood")) * float(sample_weights(rows).sum())


def information_criteria(fit: Fit, data: pd.DataFrame) -> dict[str, float]:
    """AIC and BIC = -2 loglik + k ln n, k = every coefficient, n = samples; Cox PH's from its
    partial likelihood."""
    loglik, k, n = log_likelihood(fit, data), n_parameters(fit), float(sample_weights(data).sum())
    return {"log_likelihood": loglik, "k": k, "n": n, "AIC": -2.0 * loglik + 2.0 * k, "BIC": bic(loglik, k, n)}


def expected_time(fit: Fit, covariates: pd.DataFrame) -> np.ndarray:
    """E[T | x] in the data's time unit; NaN or inf where the model's mean does not exist. A
    block of rows at a time: lifelines' design of 10^7 rows was 1.7 GB, the stage's peak."""
    return in_row_blocks(lambda rows: fit.fitter.predict_expectation(rows).to_numpy(float).ravel(), covariates)


def restricted_mean(fit: Fit, covariates: pd.DataFrame, t_star: np.ndarray, points: int = 201, chunk: int = 4096) -> np.ndarray:
    """The restricted mean survival time int_0^{t*} S(u | x) du of each row, t* per row, from
    the model's survival function on `points` times log-spaced from t* 1e-6 to t*: Simpson's
    rule in v = log u (int S(e^v) e^v dv, smooth where S is steep near 0 and where t* is many
    scales long), plus [0, t* 1e-6] by the trapezoid. Within 3e-5 of the closed form for
    Weibull shapes 0.3 to 4 and t* from 0.01 to 1000 scales (a trapezoid on the same number of
    linear points: 3e-3). Every row has its own grid, evaluated in one call per chunk of rows.
    The Newton AFT fitters (trashfire.survival.aft) and the generalised gamma give it in
    closed form."""
    t_star = np.asarray(t_star, dtype=float)
    closed = getattr(fit.fitter, "closed_restricted_mean", None)
    if closed is not None and getattr(fit.fitter, "newton_iterations", None) is not None:
        exact = closed(covariates, t_star)
        if exact is not None:
            return exact
    fractions = np.geomspace(1e-6, 1.0, points)
    result = np.empty(len(covariates))
    for start in range(0, len(covariates), chunk):
        rows = slice(start, start + chunk)
        times = fractions[:, None] * t_star[rows][None, :]  # (points, rows)
        curves = np.exp(-cumulative_hazard_at(fit.fitter, covariates.iloc[rows], times))
        head = times[0] * (1.0 + curves[0]) / 2.0  # S(0) = 1
        result[rows] = head + simpson(curves * times, x=np.log(fractions), axis=0)
    return result


def cumulative_hazard_at(fitter: Any, covariates: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """H(t | x) at a (points, rows) array of times, a column per row: lifelines'
    predict_cumulative_hazard evaluates one shared time grid for all rows, through the same
    regressors and parameters used here (lifelines 0.30)."""
    design = DataframeSlicer(fitter.regressors.transform_df(covariates.copy()))
    params = {name: fitter.params_.loc[name].values for name in fitter._fitted_parameter_names}
    return np.asarray(fitter._cumulative_hazard(params, times, design), dtype=float)


# --- cluster-robust standard errors ----------------------------------------------------------


def cluster_robust_se(fit: Fit, data: pd.DataFrame, clusters: np.ndarray) -> pd.Series:
    """Standard errors of the sandwich V B V, B = sum over clusters of the outer product of the
    cluster's score (summed over its samples), V = lifelines' naive covariance. No small-sample
    factor, as lifelines' `cluster_col`."""
    if fit.is_cox:
        return _cox_cluster_se(fit, data, np.asarray(clusters))
    if len(data) > ROW_BLOCK:  # the rows' scores a block at a time, summed per cluster: no n x p array (8·10^6 x 41: 2.6 GB and its copy)
        codes, names = pd.factorize(np.asarray(clusters))
        scores = np.zeros((len(names), len(fit.fitter.params_)))
        for start in range(0, len(data), ROW_BLOCK):
            block = sample_scores(fit.fitter, data.iloc[start : start + ROW_BLOCK])
            scores += np.stack([np.bincount(codes[start : start + ROW_BLOCK], weights=column, minlength=len(names)) for column in block.T], axis=1)
        return _sandwich_se(fit, scores)
    return _sandwich_se(fit, pd.DataFrame(sample_scores(fit.fitter, data)).groupby(np.asarray(clusters)).sum().to_numpy())


def _sandwich_se(fit: Fit, scores: np.ndarray) -> pd.Series:
    """sqrt diag of V B V: V lifelines' naive covariance, B the outer products of the rows'
    scores summed per cluster (`scores`: one row per cluster)."""
    v = fit.fitter.variance_matrix_.to_numpy()
    sandwich = v @ (scores.T @ scores) @ v
    return pd.Series(np.sqrt(np.diag(sandwich)), index=fit.fitter.params_.index, name="se_robust")


def sample_scores(fitter, data: pd.DataFrame) -> np.ndarray:
    """Each row's score, weight x d log-likelihood / d coefficients at the fitted ones, from
    lifelines' own likelihood function (the one its score() evaluates). The likelihood is
    sum_i w_i l_i, so d/dw_i of its gradient is row i's gradient: one autograd Jacobian of the
    gradient in the weights gives every row's at the cost of a Hessian, whatever the number of
    rows or clusters."""
    durations = data[DURATION].to_numpy(float)
    events = data[EVENT].to_numpy().astype(bool)
    weights = sample_weights(data).astype(float)
    if hasattr(fitter, "row_scores"):  # trashfire.survival.newton's fitters: the same scores in closed form, linear in rows
        return fitter.row_scores(durations, events, weights, covariates_of(data))
    return autograd_scores(fitter, data)


def autograd_scores(fitter, data: pd.DataFrame) -> np.ndarray:
    """`sample_scores` from lifelines' likelihood by autograd (the reference of the closed forms)."""
    durations = data[DURATION].to_numpy(float)
    events = data[EVENT].to_numpy().astype(bool)
    weights = sample_weights(data).astype(float)
    design = DataframeSlicer(fitter.regressors.transform_df(covariates_of(data)))
    entries = np.zeros(len(data))

    def log_likelihood(params, w):  # lifelines' is a mean over the weights
        return -fitter._neg_likelihood(params, (durations, None), events, w, entries, design) * w.sum()

    gradient = grad(log_likelihood, 0)
    params = fitter.params_.to_numpy(float)
    with np.errstate(all="ignore"):  # log(0) of a censored row's density term, multiplied by 0
        per_row = jacobian(lambda w: gradient(params, w))(weights)  # (params, rows)
    return per_row.T * weights[:, None]


def _cox_cluster_se(fit: Fit, data: pd.DataFrame, clusters: np.ndarray) -> pd.Series:
    """lifelines' `cluster_col` sandwich for Cox PH: score residuals summed per cluster, between
    lifelines' naive covariance. lifelines computes the residuals in a loop that costs O(n^2) in
    rows (4 s at 20k rows, minutes at 100k); `cox_score_residuals` gives the same in O(n)."""
    samples = per_sample(model_frame(data).assign(_cluster=clusters))
    if len(samples) > ROW_BLOCK:  # the residuals summed per cluster a block of rows at a time (cox.cluster_score_sums)
        codes, names = pd.factorize(samples["_cluster"].to_numpy())
        x = [samples[column].to_numpy(float) for column in fit.fitter.params_.index]  # columns, not a copy of the design
        arrays = (samples[DURATION].to_numpy(float), samples[EVENT].to_numpy(float), sample_weights(samples).astype(float), codes, len(names))
        return _sandwich_se(fit, cluster_score_sums(fit.fitter.params_.to_numpy(float), x, *arrays))
    return _sandwich_se(fit, pd.DataFrame(cox_score_residuals(fit.fitter, samples)).groupby(samples["_cluster"].to_numpy()).sum().to_numpy())


def cox_score_residuals(fitter: CoxPHFitter, samples: pd.DataFrame) -> np.ndarray:
    """Each row's score residual of a fitted Cox PH model (Lin and Wei 1989), in `samples`' row
    order: r_i = w_i [E_i (x_i - xbar(t_i)) - phi_i sum_{j: t_j <= t_i} E_j w_j (x_i - xbar(t_j)) / R(t_j)],
    R(t) = sum over the risk set {k: t_k >= t} of w_k phi_k and xbar(t) its phi-weighted mean.
    As cumulative sums over the rows sorted by time. Without tied times this is lifelines'
    residual; lifelines takes tied rows one by one in its sort order, here a tie shares one risk
    set (Breslow), whatever the row order."""
    order = np.argsort(samples[DURATION].to_numpy(float), kind="stable")
    times = samples[DURATION].to_numpy(float)[order]
    first = np.searchsorted(times, times, side="left")  # the risk set of t_i starts at its first tie
    last = np.searchsorted(times, times, side="right") - 1  # events up to t_i end at its last tie
    x = samples[list(fitter.params_.index)].to_numpy(float)[order]
    x = x - x.mean(axis=0)  # phi up to a constant factor, which cancels; exp stays finite
    events = samples[EVENT].to_numpy(float)[order]
    weights = sample_weights(samples).astype(float)[order]
    phi = np.exp(x @ fitter.params_.to_numpy(float))
    risk = np.cumsum((weights * phi)[::-1])[::-1][first]
    risk_mean = np.cumsum((x * (weights * phi)[:, None])[::-1], axis=0)[::-1][first] / risk[:, None]
    steps = events * weights / risk
    since = x * np.cumsum(steps)[last][:, None] - np.cumsum(risk_mean * steps[:, None], axis=0)[last]
    residuals = weights[:, None] * (events[:, None] * (x - risk_mean) - phi[:, None] * since)
    unsorted = np.empty_like(residuals)
    unsorted[order] = residuals
    return unsorted


def robust_summary(fit: Fit, level: float = 0.95) -> pd.DataFrame:
    """se_robust, its interval and Wald p beside each coefficient (NaN without robust SEs)."""
    coef = fit.fitter.params_
    se = fit.robust_se.reindex(coef.index) if fit.robust_se is not None else pd.Series(np.nan, index=coef.index)
    z = stats.norm.ppf(0.5 + level / 2)
    return pd.DataFrame(
        {
            "se_robust": se,
            "lower_robust": coef - z * se,
            "upper_robust": coef + z * se,
            "p_robust": stats.chi2.sf((coef / se) ** 2, 1),
        },
        index=coef.index,
    )
