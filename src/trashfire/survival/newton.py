"""Location-scale AFT fits by Newton-Raphson on the analytic gradient and Hessian, as R's
`survreg` fits them, inside lifelines' own fitters.

lifelines fits its AFT models with a scipy quasi-Newton optimiser on an autograd objective:
tens of passes over the data with a graph per pass, and (seen at 5·10^5 samples) a
log-logistic fit that stops 192 nats short of the optimum. Every model here is
log T = x·b + sigma·W with W a standard extreme-value (Weibull, Exponential with sigma = 1),
normal (Log-Normal) or logistic (Log-Logistic) variable, whose log density and log survival
have closed-form first and second derivatives in z = (log t - x·b) / sigma. A Newton step
costs one pass (the Hessian is X' diag(.) X) and a fit about ten.

The classes subclass lifelines' fitters and replace only `_fit_model`: the optimum of
lifelines' own objective (its mean log-likelihood over the weights, plus its ridge penalty on
the covariates scaled to unit SD, the scale parameter's intercept included where it has no
other covariate), its log-likelihood and Hessian as lifelines returns them. So prediction,
summaries, standard errors and pickling are lifelines', and a fit equals lifelines' own at
its optimum (tests/test_survival_newton.py). With penalizer 0 it is survreg's maximum
likelihood. A model with covariates on its scale parameter goes to lifelines' optimiser.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from lifelines import LogLogisticAFTFitter, LogNormalAFTFitter, WeibullAFTFitter
from lifelines.exceptions import ConvergenceError
from scipy.special import expit, log_ndtr

from trashfire.survival.fitters import ExponentialAFTFitter

MAX_ITERATIONS = 100
MAX_HALVINGS = 30
GRADIENT_TOLERANCE = 1e-9  # of the mean objective, per coefficient (in the unit-SD coordinates)
_SQRT_2PI = np.sqrt(2 * np.pi)


def extreme_value(z: np.ndarray, event: np.ndarray):
    """W ~ standard minimum extreme value: log f = z - e^z, log S = -e^z."""
    ez = np.exp(np.minimum(z, 700.0))
    value = np.where(event, z, 0.0) - ez
    first = np.where(event, 1.0, 0.0) - ez
    return value, first, -ez


def logistic(z: np.ndarray, event: np.ndarray):
    """W ~ standard logistic: log f = z - 2 log(1 + e^z), log S = -log(1 + e^z)."""
    p = expit(z)
    log1pexp = np.logaddexp(0.0, z)
    k = np.where(event, 2.0, 1.0)
    value = np.where(event, z, 0.0) - k * log1pexp
    first = np.where(event, 1.0, 0.0) - k * p
    return value, first, -k * p * (1 - p)


def normal(z: np.ndarray, event: np.ndarray):
    """W ~ standard normal: log f = -z^2/2 - log sqrt(2 pi), log S = log Phi(-z)."""
    log_tail = log_ndtr(-z)
    # inverse Mills ratio phi(z) / Phi(-z), from logs: stable far in the tail
    mills = np.exp(-0.5 * z * z - log_tail) / _SQRT_2PI
    value = np.where(event, -0.5 * z * z - np.log(_SQRT_2PI), log_tail)
    first = np.where(event, -z, -mills)
    second = np.where(event, -1.0, -mills * (mills - z))
    return value, first, second


class LocationScale:
    """One model's log-likelihood in (b, u = log sigma), its gradient and Hessian, on the
    design X (rows, unit-SD columns), log durations y, events d and weights w."""

    def __init__(self, density, X: np.ndarray, y: np.ndarray, event: np.ndarray, weights: np.ndarray, fixed_scale: bool):
        self.density, self.X, self.y, self.event, self.w = density, X, y, event.astype(bool), weights
        self.fixed_scale = fixed_scale
        self.total = float(weights.sum())
        self.log_t_events = float((weights * y * self.event).sum())

    def evaluate(self, b: np.ndarray, u: float, derivatives: bool = True):
        """The log-likelihood (a sum over weights), and its gradient and Hessian in (b, u)."""
        sigma = np.exp(u)
        z = (self.y - self.X @ b) / sigma
        value, first, second = self.density(z, self.event)
        w, d = self.w, self.event
        loglik = float((w * value).sum()) - self.total_events(u) - self.log_t_events
        if not derivatives:
            return loglik, None, None
        gb = -(self.X.T @ (w * first)) / sigma
        Hbb = (self.X.T * (w * second)) @ self.X / sigma**2
        if self.fixed_scale:
            return loglik, gb, Hbb
        gu = -float((w * first * z).sum()) - float((w * d).sum())
        Hbu = (self.X.T @ (w * (z * second + first))) / sigma
        Huu = float((w * (second * z * z + first * z)).sum())
        gradient = np.append(gb, gu)
        hessian = np.block([[Hbb, Hbu[:, None]], [Hbu[None, :], np.array([[Huu]])]])
        return loglik, gradient, hessian

    def total_events(self, u: float) -> float:
        return float((self.w * self.event).sum()) * u


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
        if scale_columns > 1 or (entries is not None and np.any(entries != 0)) or Ts[0] is None or Ts[1] is not None and not np.array_equal(Ts[0], Ts[1]):
            return super()._fit_model(likelihood, Ts, Xs, E, weights, entries, fit_options, show_progress, user_supplied_initial_point)
        # what lifelines' own _fit_model leaves for its score() and our robust SEs' reference
        self._initial_point_dicts = [{name: np.zeros(Xs[name].shape[1]) for name in self._fitted_parameter_names}]
        self._neg_likelihood_with_penalty_function = partial(
            self._create_neg_likelihood_with_penalty_function, likelihood=likelihood, penalty=self._add_penalty
        )
        self._neg_likelihood = partial(self._create_neg_likelihood_with_penalty_function, likelihood=likelihood)
        X = np.asarray(Xs[self.LOCATION], dtype=float)
        model = LocationScale(self.DENSITY, X, np.log(np.asarray(Ts[0], dtype=float)), np.asarray(E), np.asarray(weights, dtype=float), not self.SCALE)
        penalised = self._penalised_mask(Xs)
        theta = self._start(model, user_supplied_initial_point, Xs)
        theta, objective, gradient, hessian = self._newton(model, theta, penalised, int((fit_options or {}).get("maxiter", MAX_ITERATIONS)))
        params = {self.LOCATION: theta[: X.shape[1]]}
        if self.SCALE:
            params[self.SCALE] = theta[-1:]
        order = self._internal_order(Xs)
        self.newton_gradient_ = np.empty_like(gradient)
        self.newton_gradient_[order] = model.total * gradient
        in_lifelines_order = np.empty_like(hessian)
        in_lifelines_order[np.ix_(order, order)] = hessian
        return params, -model.total * objective, model.total * in_lifelines_order

    def _internal_order(self, Xs) -> list[int]:
        """Where each of (b, u) sits among lifelines' flat parameters (Xs's columns)."""
        names = list(Xs.columns.get_level_values(0))
        return [i for i, name in enumerate(names) if name == self.LOCATION] + [i for i, name in enumerate(names) if name == self.SCALE]

    def row_scores(self, durations: np.ndarray, events: np.ndarray, weights: np.ndarray, covariates) -> np.ndarray:
        """Each row's weight x gradient of its log-likelihood at the fit, in lifelines' params_
        (raw covariates, its order): the cluster-robust sandwich's scores, in closed form."""
        design = self.regressors.transform_df(covariates)
        X = design[self.LOCATION].to_numpy(float)
        u = self.SCALE_SIGN * float(self.params_.loc[(self.SCALE, "Intercept")]) if self.SCALE else 0.0
        sigma = np.exp(u)
        z = (np.log(durations) - X @ self.params_.loc[self.LOCATION].to_numpy(float)) / sigma
        _, first, _ = self.DENSITY(z, np.asarray(events, dtype=bool))
        order = self._internal_order(design)
        scores = np.empty((len(z), len(order)))
        scores[:, order[: X.shape[1]]] = -(first / sigma)[:, None] * X
        if self.SCALE:
            scores[:, order[-1]] = self.SCALE_SIGN * (-first * z - np.asarray(events, dtype=float))
        return scores * np.asarray(weights, dtype=float)[:, None]

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
        b, *_ = np.linalg.lstsq(model.X * np.sqrt(model.w)[:, None], model.y * np.sqrt(model.w), rcond=None)
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

    def _objective(self, model: LocationScale, theta: np.ndarray, penalised: np.ndarray, derivatives: bool = True):
        """lifelines' objective in its coordinates (u's sign per SCALE_SIGN): -loglik / sum(w)
        + penalizer/2 |theta_penalised|^2, with its gradient and Hessian."""
        b, u = (theta, 0.0) if model.fixed_scale else (theta[:-1], self.SCALE_SIGN * theta[-1])
        loglik, gradient, hessian = model.evaluate(b, u, derivatives)
        ridge = self.penalizer * penalised
        objective = -loglik / model.total + 0.5 * float((ridge * theta**2).sum())
        if not derivatives:
            return objective, None, None
        sign = np.ones_like(theta)
        if not model.fixed_scale:
            sign[-1] = self.SCALE_SIGN
        gradient = -gradient * sign / model.total + ridge * theta
        hessian = -hessian * np.outer(sign, sign) / model.total + np.diag(ridge)
        return objective, gradient, hessian

    def _newton(self, model: LocationScale, theta: np.ndarray, penalised: np.ndarray, iterations: int = MAX_ITERATIONS):
        """Newton-Raphson with step halving (survreg's); where the Hessian is not positive
        definite, a Levenberg shift. Stops when the gradient is within GRADIENT_TOLERANCE, or
        raises lifelines' ConvergenceError after `iterations` (fit_options' maxiter)."""
        internal = theta.copy()
        sign = np.ones_like(internal)
        if not model.fixed_scale:
            sign[-1] = self.SCALE_SIGN
        params = internal * sign  # lifelines' coordinates: the ridge and the returned Hessian are in them
        objective, gradient, hessian = self._objective(model, params, penalised)
        for iteration in range(iterations + 1):
            if np.all(np.isfinite(gradient)) and np.abs(gradient).max() < GRADIENT_TOLERANCE:
                self.newton_iterations = iteration
                return params, objective, gradient, hessian
            if iteration == iterations:
                break
            step = _newton_step(gradient, hessian)
            for _ in range(MAX_HALVINGS):  # the trial's derivatives too: near the optimum every full step is taken
                trial = self._objective(model, params - step, penalised)
                if np.isfinite(trial[0]) and trial[0] <= objective + 1e-15 * abs(objective):
                    break
                step = step / 2
            else:
                break
            gained = objective - trial[0]
            params = params - step
            objective, gradient, hessian = trial
            if gained < 1e-16 * max(1.0, abs(objective)) and np.abs(gradient).max() < 1e-6:  # as far as float arithmetic goes
                self.newton_iterations = iteration + 1
                return params, objective, gradient, hessian
        raise ConvergenceError(
            f"Newton-Raphson did not converge in {iterations} iterations (largest |gradient| {np.abs(gradient).max():.3g} of the mean log-likelihood)"
        )


def _newton_step(gradient: np.ndarray, hessian: np.ndarray) -> np.ndarray:
    """H^-1 g, H shifted towards positive definite where it is not (Levenberg)."""
    shift = 0.0
    scale = max(1e-12, float(np.abs(np.diag(hessian)).max()))
    for _ in range(60):
        try:
            factor = np.linalg.cholesky(hessian + shift * np.eye(len(gradient)))
            return np.linalg.solve(factor.T, np.linalg.solve(factor, gradient))
        except np.linalg.LinAlgError:
            shift = max(2 * shift, 1e-8 * scale)
    raise ConvergenceError("Newton-Raphson: the Hessian cannot be made positive definite")


class NewtonWeibullAFTFitter(NewtonAFTMixin, WeibullAFTFitter):
    """lifelines' Weibull AFT: lambda_ = exp(x·b) the scale, rho_ = 1/sigma (u = -rho coefficient)."""

    LOCATION, SCALE, SCALE_SIGN = "lambda_", "rho_", -1.0
    DENSITY = staticmethod(extreme_value)


class NewtonLogNormalAFTFitter(NewtonAFTMixin, LogNormalAFTFitter):
    """lifelines' Log-Normal AFT: mu_ = x·b, sigma_ = exp(u)."""

    LOCATION, SCALE, SCALE_SIGN = "mu_", "sigma_", 1.0
    DENSITY = staticmethod(normal)


class NewtonLogLogisticAFTFitter(NewtonAFTMixin, LogLogisticAFTFitter):
    """lifelines' Log-Logistic AFT: alpha_ = exp(x·b), beta_ = 1/sigma (u = -beta coefficient)."""

    LOCATION, SCALE, SCALE_SIGN = "alpha_", "beta_", -1.0
    DENSITY = staticmethod(logistic)


class NewtonExponentialAFTFitter(NewtonAFTMixin, ExponentialAFTFitter):
    """The Exponential AFT (`trashfire.survival.fitters`): the Weibull with sigma fixed at 1."""

    LOCATION, SCALE = "lambda_", None
    DENSITY = staticmethod(extreme_value)
