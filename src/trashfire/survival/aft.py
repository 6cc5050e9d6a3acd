"""lifelines' Weibull, Log-Normal, Log-Logistic and Exponential AFT fitters, fitted by
Newton-Raphson (trashfire.survival.newton) instead of lifelines' scipy optimiser.

The classes replace only `_fit_model`: the optimum of lifelines' own objective (its mean
log-likelihood over the weights, plus its ridge penalty on the covariates scaled to unit SD,
the scale parameter's intercept included where it has no other covariate), its
log-likelihood and Hessian as lifelines returns them. So prediction, summaries, standard
errors and pickling are lifelines', and a fit equals lifelines' own at its optimum
(tests/survival/test_survival_newton.py). With penalizer 0 it is survreg's maximum likelihood
(bench/survival_vs_r.py). A model with covariates on its scale parameter, entry times or
interval censoring goes to lifelines' optimiser.
"""

from __future__ import annotations

from functools import partial

import lifelines
import numpy as np
import pandas as pd
from lifelines import LogLogisticAFTFitter, LogNormalAFTFitter, WeibullAFTFitter
from lifelines.exceptions import ConvergenceError
from lifelines.fitters import ParametricRegressionFitter
from lifelines.utils.safe_exp import safe_exp
from scipy.special import betainc, expit, gamma, gammainc, hyp2f1, ndtr

from trashfire.survival.mappings import FastDesignMixin, row_index
from trashfire.survival.newton import (
    MAX_ITERATIONS,
    ROW_BLOCK,
    LocationScale,
    NotConverged,
    extreme_value,
    logistic,
    newton,
    normal,
    objective,
    sampled_rows,
    sampled_start,
    weighted_gram,
)
from trashfire.survival.newton_fit import keep_lifelines_objectives, right_censored_from_zero


def _covariate_columns(df: pd.DataFrame, *special: str | None) -> list[str]:
    return [c for c in df.columns if c not in special]


def _no_conditioning(conditional_after) -> None:
    if conditional_after is not None:
        raise NotImplementedError("conditional_after is not supported by this fitter")


class ExponentialAFTFitter(ParametricRegressionFitter):
    """Exponential AFT model: S(t | x) = exp(-t / exp(x·b)), the Weibull AFT with its shape
    fixed at 1 (TRASHFIRE III-B.1). The scale exp(x·b) is the mean survival time."""

    _fitted_parameter_names = ["lambda_"]
    _FAST_MEDIAN_PREDICT = True  # lifelines then computes the training concordance from our median
    fit_intercept = True

    def fit(self, df: pd.DataFrame, duration_col: str, event_col: str | None = None, weights_col: str | None = None, **kwargs):
        # every other column a covariate (lifelines appends the intercept: fit_intercept); lifelines'
        # own null model (print_summary's likelihood-ratio test) gives regressors of its own
        regressors = kwargs.pop("regressors", None) or {"lambda_": _covariate_columns(df, duration_col, event_col, weights_col)}
        return super().fit(df, duration_col, event_col, regressors=regressors, weights_col=weights_col, **kwargs)

    def _cumulative_hazard(self, params, T, Xs):
        return T / safe_exp(Xs["lambda_"] @ params["lambda_"])

    def _log_hazard(self, params, T, Xs):
        return -(Xs["lambda_"] @ params["lambda_"]) + 0.0 * T

    def _scale(self, df: pd.DataFrame) -> np.ndarray:
        return np.exp(self.regressors.transform_df(df)["lambda_"].to_numpy(float) @ self.params_.loc["lambda_"].to_numpy())

    def predict_percentile(self, df, *, p: float = 0.5, conditional_after=None) -> pd.Series:
        _no_conditioning(conditional_after)
        return pd.Series(self._scale(df) * -np.log(p), index=row_index(df))

    def predict_median(self, df, *, conditional_after=None) -> pd.Series:
        return self.predict_percentile(df, p=0.5, conditional_after=conditional_after)

    def predict_expectation(self, df, conditional_after=None) -> pd.Series:
        _no_conditioning(conditional_after)
        return pd.Series(self._scale(df), index=row_index(df))


class FrugalFit(FastDesignMixin, ParametricRegressionFitter):
    """FastDesignMixin's `_fit` where lifelines' AFT fitters look for theirs: their `fit` calls
    `super(ParametericAFTRegressionFitter, self)._fit`, which skips a mixin placed before the
    lifelines class. Placed last in a fitter's bases, it comes after ParametericAFTRegressionFitter
    in the MRO and before ParametricRegressionFitter (at 10^7 samples lifelines' `_fit` copied the
    design three more times per fit: its SDs, its normalised copy)."""


class NewtonAFTMixin:
    """`_fit_model` by Newton-Raphson for a lifelines AFT fitter (see the module's docstring).
    A subclass names its location and scale parameters, the density of W and how lifelines'
    scale coefficient maps to u = log sigma (`SCALE_SIGN`: u = sign x coefficient)."""

    LOCATION: str
    SCALE: str | None
    SCALE_SIGN: float = 1.0
    DENSITY = staticmethod(extreme_value)
    newton_iterations: int | None = None  # None: the fit went to lifelines' optimiser
    newton_gradient_: np.ndarray | None = None  # the penalised negative log-likelihood's gradient at the fit (nats), lifelines' order

    def _fit_model(self, likelihood, Ts, Xs, E, weights, entries, fit_options, show_progress=False, user_supplied_initial_point=None):
        scale_columns = Xs[self.SCALE].shape[1] if self.SCALE else 0
        if scale_columns > 1 or not right_censored_from_zero(Ts, entries):
            return super()._fit_model(likelihood, Ts, Xs, E, weights, entries, fit_options, show_progress, user_supplied_initial_point)
        # what lifelines' own _fit_model leaves for its score() and our robust SEs' reference
        self._initial_point_dicts = [{name: np.zeros(Xs[name].shape[1]) for name in self._fitted_parameter_names}]
        keep_lifelines_objectives(self, likelihood)
        X = np.asarray(Xs[self.LOCATION], dtype=float)
        model = LocationScale(
            self.DENSITY, X, np.log(np.asarray(Ts[0], dtype=float)), np.asarray(E, dtype=bool), np.asarray(weights, dtype=float), not self.SCALE
        )
        penalised = self._penalised_mask(Xs)
        theta = self._start(model, user_supplied_initial_point, Xs)
        sign = np.ones_like(theta)
        if self.SCALE:
            sign[-1] = self.SCALE_SIGN
        ridge = self.penalizer * penalised
        maxiter = int((fit_options or {}).get("maxiter", MAX_ITERATIONS))

        def on_rows(rows):
            sample = LocationScale(self.DENSITY, X[rows], model.y[rows], model.event[rows], model.w[rows], model.fixed_scale)
            return partial(objective, sample, ridge=ridge, scale_sign=self.SCALE_SIGN)

        start = sampled_start(on_rows, sampled_rows(len(model.w), ROW_BLOCK), theta * sign, maxiter)
        try:
            theta, value, gradient, hessian, self.newton_iterations = newton(model, start, ridge, self.SCALE_SIGN, maxiter)
        except NotConverged as err:
            raise ConvergenceError(str(err)) from None
        params = {self.LOCATION: theta[: X.shape[1]]}
        if self.SCALE:
            params[self.SCALE] = theta[-1:]
        order = self._internal_order(Xs)
        self.newton_gradient_ = np.empty_like(gradient)
        self.newton_gradient_[order] = model.total * gradient
        in_lifelines_order = np.empty_like(hessian)
        in_lifelines_order[np.ix_(order, order)] = hessian
        return params, -model.total * value, model.total * in_lifelines_order

    UNIVARIATE: str | None = None  # lifelines' univariate fitter of the family: the null model

    @property
    def _ll_null(self) -> float:
        """The null model's log-likelihood (print_summary's likelihood-ratio test): lifelines
        fits its univariate model in the start that these fits skip; here, when first asked."""
        if not hasattr(self, "_ll_null_"):
            if self.UNIVARIATE is None:
                return super()._ll_null
            null = getattr(lifelines, self.UNIVARIATE)()
            null.fit_right_censoring(self.durations, event_observed=self.event_observed, entry=self.entry, weights=self.weights)
            self._ll_null_ = null.log_likelihood_
        return self._ll_null_

    def _internal_order(self, Xs) -> list[int]:
        """Where each of (b, u) sits among lifelines' flat parameters (Xs's columns)."""
        names = list(Xs.columns.get_level_values(0))
        return [i for i, name in enumerate(names) if name == self.LOCATION] + [i for i, name in enumerate(names) if name == self.SCALE]

    def _log_sigma(self) -> float:
        """u = log sigma at the fit (0 where the scale is fixed)."""
        return self.SCALE_SIGN * float(self.params_.loc[(self.SCALE, "Intercept")]) if self.SCALE else 0.0

    def row_scores(self, durations: np.ndarray, events: np.ndarray, weights: np.ndarray, covariates) -> np.ndarray:
        """Each row's weight x gradient of its log-likelihood at the fit, in lifelines' params_
        (raw covariates, its order): the cluster-robust sandwich's scores, in closed form."""
        design = self.regressors.transform_df(covariates)
        X = design[self.LOCATION].to_numpy(float)
        u = self._log_sigma()
        sigma = np.exp(u)
        z = (np.log(durations) - X @ self.params_.loc[self.LOCATION].to_numpy(float)) / sigma
        _, first, _ = self.DENSITY(z, np.asarray(events, dtype=bool))
        order = self._internal_order(design)
        scores = np.empty((len(z), len(order)))
        scores[:, order[: X.shape[1]]] = -(first / sigma)[:, None] * X
        if self.SCALE:
            scores[:, order[-1]] = self.SCALE_SIGN * (-first * z - np.asarray(events, dtype=float))
        return scores * np.asarray(weights, dtype=float)[:, None]

    def unpenalised_log_likelihood(self, durations: np.ndarray, events: np.ndarray, weights: np.ndarray, covariates) -> float:
        """The weighted log-likelihood of these rows at the fit, in closed form (lifelines'
        score() evaluates its autograd objective: a minute at 10^7 rows)."""
        design = self.regressors.transform_df(covariates)
        u = self._log_sigma()
        model = LocationScale(
            self.DENSITY,
            design[self.LOCATION].to_numpy(float),
            np.log(np.asarray(durations, dtype=float)),
            np.asarray(events, dtype=bool),
            np.asarray(weights, dtype=float),
            not self.SCALE,
        )
        return model.evaluate(self.params_.loc[self.LOCATION].to_numpy(float), u, derivatives=False)[0]

    def closed_restricted_mean(self, covariates, t_star: np.ndarray) -> np.ndarray:
        """int_0^t* S(u | x) du per row, in closed form (`restricted_mean_of`)."""
        design = self.regressors.transform_df(covariates)
        location = design[self.LOCATION].to_numpy(float) @ self.params_.loc[self.LOCATION].to_numpy(float)
        u = self._log_sigma()
        return self.restricted_mean_of(np.asarray(t_star, float), location, np.exp(u))

    @staticmethod
    def restricted_mean_of(t_star: np.ndarray, location: np.ndarray, sigma: float) -> np.ndarray:
        raise NotImplementedError

    def _penalised_mask(self, Xs) -> np.ndarray:
        """lifelines' ridge applies to every coefficient but the constant columns of a
        parameter with more than one covariate (so a lone scale intercept is penalised)."""
        free = ~np.asarray(self._cols_to_not_penalize, dtype=bool)
        return free[self._internal_order(Xs)]

    def _start(self, model: LocationScale, initial, Xs) -> np.ndarray:
        """Least squares of log t on X over all rows (events and censored alike), and the
        residuals' log SD: survreg's kind of start, near enough for Newton's step halving."""
        if isinstance(initial, np.ndarray):
            return self._to_internal(initial.astype(float), Xs)
        if len(model.w) <= ROW_BLOCK:
            b, *_ = np.linalg.lstsq(model.X * np.sqrt(model.w)[:, None], model.y * np.sqrt(model.w), rcond=None)
        else:  # the normal equations: lstsq would copy the design twice (10^7 rows: 3 GB); a start needs no more
            b, *_ = np.linalg.lstsq(weighted_gram(model.X, model.w, model.X), model.X.T @ (model.w * model.y), rcond=None)
        if model.fixed_scale:
            return b
        residual = model.y - model.X @ b
        spread = np.sqrt(np.average(residual**2, weights=model.w))
        return np.append(b, np.log(max(spread, 1e-3)))

    def _to_internal(self, theta: np.ndarray, Xs) -> np.ndarray:
        """lifelines' flat parameters (its regressors' order) as (b, u)."""
        internal = theta[self._internal_order(Xs)]
        if self.SCALE:
            internal[-1] *= self.SCALE_SIGN
        return internal


class NewtonWeibullAFTFitter(NewtonAFTMixin, WeibullAFTFitter, FrugalFit):
    """lifelines' Weibull AFT: lambda_ = exp(x·b) the scale, rho_ = 1/sigma (u = -rho coefficient)."""

    LOCATION, SCALE, SCALE_SIGN = "lambda_", "rho_", -1.0
    UNIVARIATE = "WeibullFitter"
    DENSITY = staticmethod(extreme_value)

    @staticmethod
    def restricted_mean_of(t_star, location, sigma):
        return weibull_restricted_mean(t_star, np.exp(location), 1.0 / sigma)


class NewtonLogNormalAFTFitter(NewtonAFTMixin, LogNormalAFTFitter, FrugalFit):
    """lifelines' Log-Normal AFT: mu_ = x·b, sigma_ = exp(u)."""

    LOCATION, SCALE, SCALE_SIGN = "mu_", "sigma_", 1.0
    UNIVARIATE = "LogNormalFitter"
    DENSITY = staticmethod(normal)

    @staticmethod
    def restricted_mean_of(t_star, location, sigma):
        """t* S(t*) + E[T; T < t*] = t* Phi(-z) + e^(mu + sigma^2 / 2) Phi(z - sigma), z = (log t* - mu) / sigma."""
        z = (np.log(t_star) - location) / sigma
        return t_star * ndtr(-z) + np.exp(location + sigma**2 / 2) * ndtr(z - sigma)


class NewtonLogLogisticAFTFitter(NewtonAFTMixin, LogLogisticAFTFitter, FrugalFit):
    """lifelines' Log-Logistic AFT: alpha_ = exp(x·b), beta_ = 1/sigma (u = -beta coefficient)."""

    LOCATION, SCALE, SCALE_SIGN = "alpha_", "beta_", -1.0
    UNIVARIATE = "LogLogisticFitter"
    DENSITY = staticmethod(logistic)

    @staticmethod
    def restricted_mean_of(t_star, location, sigma):
        return log_logistic_restricted_mean(t_star, np.exp(location), 1.0 / sigma)


class NewtonExponentialAFTFitter(NewtonAFTMixin, ExponentialAFTFitter, FrugalFit):
    """The Exponential AFT (`trashfire.survival.fitters`): the Weibull with sigma fixed at 1."""

    LOCATION, SCALE = "lambda_", None
    DENSITY = staticmethod(extreme_value)

    @staticmethod
    def restricted_mean_of(t_star, location, sigma):
        scale = np.exp(location)
        return -scale * np.expm1(-t_star / scale)


def weibull_restricted_mean(t_star, scale, shape):
    """int_0^t* exp(-(u / scale)^shape) du = scale Gamma(1 + 1/shape) P(1/shape, (t*/scale)^shape)."""
    return scale * gamma(1.0 + 1.0 / shape) * gammainc(1.0 / shape, (t_star / scale) ** shape)


def log_logistic_restricted_mean(t_star, scale, shape):
    """int_0^t* du / (1 + (u / scale)^shape) = t* 2F1(1, 1/shape; 1 + 1/shape; -z), z = (t*/scale)^shape.
    With a = 1/shape < 1 and x = z / (1 + z), the substitution w = v^shape / (1 + v^shape) makes it
    scale a B(a, 1 - a) I_x(a, 1 - a), B(a, 1 - a) = pi / sin(pi a): the regularised incomplete
    beta, a quarter of hyp2f1's time, equal to it to 1e-13. Where a >= 1 (no mean: B(a, 1 - a)
    undefined) or t* is far below the scale, Pfaff's transformation of the 2F1: t* (1 + z)^(-a)
    2F1(a, a; 1 + a; x). Both in logs: z overflows far past the scale, and x is then inf / inf."""
    log_z = shape * (np.log(t_star) - np.log(scale))
    inverse = 1.0 / shape
    beta_rows = (inverse < 1.0) & (log_z > BETA_FORM_LOG_Z)
    if np.all(beta_rows):
        return _beta_form(scale, inverse, log_z)
    if not np.any(beta_rows):
        return _pfaff_form(t_star, inverse, log_z)
    t_star, scale, inverse, log_z, beta_rows = np.broadcast_arrays(t_star, scale, inverse, log_z, beta_rows)  # a cure model's shape by row
    mean = np.empty(log_z.shape)
    mean[beta_rows] = _beta_form(scale[beta_rows], inverse[beta_rows], log_z[beta_rows])
    mean[~beta_rows] = _pfaff_form(t_star[~beta_rows], inverse[~beta_rows], log_z[~beta_rows])
    return mean


BETA_FORM_LOG_Z = -700.0  # below it expit(log_z) loses precision (it underflows past -745): t* far below the scale, Pfaff's form


def _beta_form(scale, a, log_z):
    # sin(pi a) = sin(pi (1 - a)): the smaller argument keeps its relative precision as a nears 1
    return scale * a * np.pi / np.sin(np.pi * np.minimum(a, 1.0 - a)) * betainc(a, 1.0 - a, expit(log_z))


def _pfaff_form(t_star, a, log_z):
    return t_star * np.exp(-a * np.logaddexp(0.0, log_z)) * hyp2f1(a, a, 1.0 + a, expit(log_z))
