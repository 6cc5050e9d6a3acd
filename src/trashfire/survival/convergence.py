"""Whether a survival fit reached its optimum, and a second start where it did not.

lifelines accepts what its scipy optimiser returns when the optimiser reports success, and
SLSQP (its default for the Weibull and log-logistic AFT models) reports success when the
objective stops changing by its tolerance. On a flat ridge, a dummy with a handful of events
say, that can be many nats short of the optimum: the default run's log-logistic fit stopped
42 nats below R's `survreg` on the same data. So each fit is checked where it stopped, on
lifelines' own penalised objective and in its own coordinates (the covariates divided by their
SDs):

- `gradient_norm`: the largest |d loglik / d coefficient| there, in nats per SD of the
  covariate (0 at an optimum);
- `newton_gain`: the nats a Newton step from there would still gain, g' H^-1 g / 2 with
  lifelines' Hessian (on a flat ridge the gradient is small and the gain is not).

A fit whose gain exceeds `CONVERGED_GAIN` (or is negative: no optimum there) is fitted again
by lifelines from a second start, the same optimiser and penalizer with tighter stopping rules
(`TIGHTER`), from the Newton step's point (from the first optimum where the gain is negative),
and the better optimum of the two is kept (`starts` says how many ran, `converged` whether the
kept one passes the check). Cox PH is fitted by lifelines' own Newton-Raphson, which stops on the
Newton decrement; its check uses the same quantities from lifelines' Efron gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from autograd import grad
from autograd.misc import flatten
from lifelines.fitters import ParametricRegressionFitter
from lifelines.utils import DataframeSlicer, normalize

from trashfire.survival import fitters as F
from trashfire.survival.newton import ROW_BLOCK

CONVERGED_GAIN = 1e-3  # nats a Newton step may still gain at an accepted optimum
# the second start's stopping rules, on lifelines' objective (a mean over the samples): scipy's
# defaults (SLSQP's ftol 1e-6, BFGS's gtol 1e-5) let a flat ridge pass for an optimum
TIGHTER = {
    "SLSQP": {"ftol": 1e-12},
    "BFGS": {"gtol": 1e-8},
    "L-BFGS-B": {"ftol": 1e-14, "gtol": 1e-8},
    "CG": {"gtol": 1e-8},
    "TNC": {"ftol": 1e-14, "gtol": 1e-8},
    "Newton-CG": {"xtol": 1e-10},
}  # another optimiser's second start runs with the fit's own options


@dataclass(frozen=True)
class Convergence:
    gradient_norm: float
    newton_gain: float
    starts: int = 1
    unchecked: str = ""  # why the fit could not be checked ("": it was)
    iterations: int | None = None  # Newton-Raphson's (trashfire.survival.aft); None: another optimiser's, which lifelines does not report

    @property
    def converged(self) -> bool | None:
        """None where unchecked; a negative gain (H not positive definite there) is no optimum."""
        return None if self.unchecked else bool(abs(self.newton_gain) <= CONVERGED_GAIN)

    def columns(self) -> dict[str, float | int | bool | None]:
        """Table I's convergence columns."""
        return {
            "converged": self.converged,
            "gradient_norm": self.gradient_norm,
            "newton_gain": self.newton_gain,
            "starts": self.starts,
            "iterations": self.iterations,
        }


def fit_converged(name: str, spec, data: pd.DataFrame, retries: list = ()) -> F.Fit:
    """`fitters.fit_one`, checked; a parametric fit short of its optimum is fitted again from
    the Newton step's point, and the better of the two kept. `fit.convergence` says how it
    ended; an optimum still not reached, or a fit that could not be checked, is noted in
    `fit.warnings`."""
    fit = F.fit_one(name, spec, data, retries)
    state = safe_check(fit, data)
    if state.converged is False and isinstance(fit.fitter, ParametricRegressionFitter):
        fit, state = _second_start(fit, spec, data, state, F.attempts(spec, list(retries))[fit.attempts - 1]["fit_options"])
    fit.convergence = state
    if state.unchecked:
        fit.warnings.append(f"convergence not checked: {state.unchecked}")
    elif not state.converged:
        fit.warnings.append(f"not converged: a Newton step would still gain {state.newton_gain:.3g} nats (gradient {state.gradient_norm:.3g})")
    return fit


def safe_check(fit: F.Fit, data: pd.DataFrame) -> Convergence:
    """`check`, or why it cannot run on this fitter: a check that fails leaves the fit as
    lifelines accepted it, with the reason."""
    reason = uncheckable(fit.fitter)
    if not reason:
        try:
            return check(fit, data)
        except Exception as err:  # a singular design, a fitter's internals this check does not know ...
            reason = f"{type(err).__name__}: {F.first_line(err)}"
    return Convergence(math.nan, math.nan, unchecked=reason)


def uncheckable(fitter) -> str:
    """Why the gradient and Hessian of this fitter's objective are not computed here ("": they are)."""
    if not isinstance(fitter, (F.CoxPHFitter, ParametricRegressionFitter)):
        return f"{type(fitter).__name__} is neither a lifelines parametric regression fitter nor Cox PH"
    if fitter.l1_ratio > 0:
        return "an L1 penalty (l1_ratio > 0) has no gradient where a coefficient is 0"
    if isinstance(fitter, F.CoxPHFitter) and (fitter.baseline_estimation_method != "breslow" or fitter.strata is not None):
        return "only Cox PH with the Breslow baseline and no strata is checked"
    return ""


def _second_start(fit: F.Fit, spec, data: pd.DataFrame, first: Convergence, fit_options: dict) -> tuple[F.Fit, Convergence]:
    """lifelines' fit again, the same settings, from the first optimum's Newton point; the
    better optimum (lifelines' penalised log-likelihood) of the two, with starts = 2."""
    start = _normalised_point(fit.fitter)
    if first.newton_gain > 0:  # the quadratic model has a minimum: start there
        gradient, hessian = _parametric_gradient_and_hessian(fit.fitter, data)
        start = start - np.linalg.lstsq(hessian, gradient, rcond=None)[0]
    fitter = F.build(spec, fit.penalizer, fit.optimiser)
    try:
        caught = F.fit_quietly(fitter, data, fit_options | TIGHTER.get(fit.optimiser, {}), initial_point=start)
    except Exception as err:  # the second start failing leaves the first optimum
        fit.warnings.append(f"second start: {type(err).__name__}: {F.first_line(err)}")
        return fit, Convergence(first.gradient_norm, first.newton_gain, starts=2)
    # the second start is kept only where it climbs beyond rounding (1e-9 relative): where both
    # starts reach one optimum, rounding would otherwise choose between them (issue 58)
    if not fitter.log_likelihood_ > fit.fitter.log_likelihood_ + 1e-9 * max(1.0, abs(fit.fitter.log_likelihood_)):
        return fit, Convergence(first.gradient_norm, first.newton_gain, starts=2)
    second = F.Fit(fit.name, fitter, fit.penalizer, fit.optimiser, fit.attempts, caught)
    state = safe_check(second, data)
    return second, Convergence(state.gradient_norm, state.newton_gain, starts=2)


def check(fit: F.Fit, data: pd.DataFrame) -> Convergence:
    """The fit's gradient and Newton gain at its coefficients, on `data` (its training rows)."""
    if fit.is_cox:
        gradient, hessian, log_likelihood = _cox_gradient_and_hessian(fit.fitter, data)
        if len(data) > ROW_BLOCK:  # Table I's: the same pass over every training row, which at 10^7 took 20 s more
            fit.training_log_likelihood = log_likelihood
    else:
        gradient, hessian = _parametric_gradient_and_hessian(fit.fitter, data)
    iterations = getattr(fit.fitter, "newton_iterations", None)
    return Convergence(float(np.max(np.abs(gradient), initial=0.0)), newton_gain(gradient, hessian), iterations=iterations)


def newton_gain(gradient: np.ndarray, hessian: np.ndarray) -> float:
    """g' H^-1 g / 2 of the negative log-likelihood: what a Newton step gains where the
    objective is quadratic (a pseudo-inverse where H is singular)."""
    if not len(gradient):
        return 0.0
    if not (np.all(np.isfinite(gradient)) and np.all(np.isfinite(hessian))):
        return math.inf
    step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
    gain = 0.5 * float(gradient @ step)
    return gain if math.isfinite(gain) else math.inf


def warm_start(fitter: ParametricRegressionFitter) -> np.ndarray:
    """Where a fit of the same fitter on similar rows (a cross-validation fold's) may start:
    this fit's coefficients as lifelines' `initial_point` takes them."""
    return _normalised_point(fitter)


def _normalised_point(fitter: ParametricRegressionFitter) -> np.ndarray:
    """The fit's coefficients as lifelines' optimiser sees them: times the covariates' SDs, in
    autograd's order of the parameters (the order of its objective, Hessian and starts)."""
    scaled = fitter.params_ * fitter._norm_std
    return flatten({name: scaled.loc[name].to_numpy(float) for name in fitter.regressors.keys()})[0]


def _parametric_arguments(fitter: ParametricRegressionFitter, data: pd.DataFrame) -> tuple:
    """lifelines' objective's arguments for `data` (right-censored), the design normalised as
    its fit normalised it."""
    frame = F.model_frame(data)
    design = normalize(fitter.regressors.transform_df(F.covariates_of(frame)), 0, fitter._norm_std)
    durations = frame[F.DURATION].to_numpy(float)
    weights = frame[F.WEIGHT].to_numpy(float) if F.WEIGHT in frame else np.ones(len(frame))  # as lifelines read them, not rounded
    return ((durations, None), frame[F.EVENT].to_numpy().astype(bool), weights, np.zeros(len(frame)), DataframeSlicer(design))


def _parametric_gradient_and_hessian(fitter: ParametricRegressionFitter, data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The penalised negative log-likelihood's gradient (nats) at the fit, and lifelines'
    Hessian of it, both in the normalised coordinates lifelines optimises in."""
    if getattr(fitter, "newton_iterations", None) is not None:  # the Newton fitters: their closed-form scores at the coefficients, on these rows
        if len(data) > ROW_BLOCK and getattr(fitter, "newton_gradient_", None) is not None:
            # the fit's own gradient at its last point, summed over these rows by its last step
            # (autograd's of lifelines' objective: a test); the scores again cost a pass over 10^7 rows
            return np.asarray(fitter.newton_gradient_, dtype=float), np.asarray(fitter._hessian_, dtype=float)
        return _newton_gradient(fitter, data), np.asarray(fitter._hessian_, dtype=float)
    arguments = _parametric_arguments(fitter, data)
    total = float(arguments[2].sum())  # lifelines' objective is a mean over the weights
    with np.errstate(all="ignore"):  # log(0) of a censored row's density term, multiplied by 0
        gradient = total * grad(fitter._neg_likelihood_with_penalty_function)(_normalised_point(fitter), *arguments)
    return np.asarray(gradient, dtype=float), np.asarray(fitter._hessian_, dtype=float)


def _newton_gradient(fitter, data: pd.DataFrame) -> np.ndarray:
    """The penalised negative log-likelihood's gradient (nats) at the fitter's coefficients, in
    lifelines' normalised coordinates, from the rows' closed-form scores (raw coordinates)."""
    frame = F.model_frame(data)
    weights = frame[F.WEIGHT].to_numpy(float) if F.WEIGHT in frame else np.ones(len(frame))
    scores = fitter.row_scores(frame[F.DURATION].to_numpy(float), frame[F.EVENT].to_numpy().astype(bool), weights, F.covariates_of(frame))
    std = fitter._norm_std.reindex(fitter.params_.index).to_numpy(float)
    penalised = ~np.asarray(fitter._cols_to_not_penalize, dtype=bool)
    return -scores.sum(axis=0) / std + weights.sum() * fitter.penalizer * penalised * _normalised_point(fitter)


def _cox_gradient_and_hessian(fitter, data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, float]:
    """Cox PH's penalised negative partial log-likelihood's gradient and Hessian at the fit,
    from lifelines' Efron computation on one row per sample, normalised as its fit was; and
    the unpenalised partial log-likelihood there. The rows in lifelines' order go straight into
    one normalised design (a per-sample frame, its normalised copy and that copy's array were
    3.7 GB at once in a fit worker at 10^7 samples)."""
    rows = np.repeat(np.arange(len(data)), F.sample_weights(data))
    rows = rows[F.in_time_order_of(data, rows)]  # as lifelines sorts: its Efron sums need it
    columns = list(fitter.params_.index)
    x = np.empty((len(rows), len(columns)), order="F")
    for j, column in enumerate(columns):
        x[:, j] = (data[column].to_numpy(float)[rows] - fitter._norm_mean[column]) / fitter._norm_std[column]
    x = pd.DataFrame(x, columns=columns, copy=False)
    beta = (fitter.params_ * fitter._norm_std).to_numpy()
    times, events = pd.Series(data[F.DURATION].to_numpy(float)[rows]), pd.Series(data[F.EVENT].to_numpy()[rows].astype(bool))
    weights = pd.Series(np.ones(len(rows)))
    efron = fitter._choose_gradient_calculator(times, x, None)
    hessian, gradient, log_likelihood = efron(x, times, events, weights, None, beta)
    n, penalizer = len(rows), float(fitter.penalizer)
    gradient = gradient - n * penalizer * beta  # lifelines' ridge penalty n * penalizer * beta^2 / 2 (l1_ratio 0)
    hessian = hessian - n * penalizer * np.eye(len(beta))
    return -gradient, -hessian, log_likelihood
