"""lifelines' regression fitters of several linear predictors (the generalised gamma, the
mixture cure models) fitted by Newton-Raphson (trashfire.survival.newton.LinearPredictors)
instead of lifelines' scipy optimiser on its autograd objective.

A subclass gives `row_derivatives(log_t, event, etas, order)`: each row's log-likelihood, as
lifelines defines it (`E log h(t) - H(t)`, its clips included), and its first and second
derivatives in the row's linear predictors (one per fitted parameter, in lifelines' order of
them). The mixin replaces only `_fit_model`, so prediction, summaries, AIC, standard errors and
pickling stay lifelines', and the optimum is lifelines' own objective's: its mean
log-likelihood plus its ridge on the unit-SD coefficients (tests/survival/test_survival_newton.py).
Entry times and interval censoring go to lifelines' optimiser.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pandas as pd
from lifelines.exceptions import ConvergenceError
from scipy.optimize import minimize

from trashfire.survival.design import grouped
from trashfire.survival.mappings import FastDesignMixin
from trashfire.survival.newton import MAX_ITERATIONS, ROW_BLOCK, LinearPredictors, NotConverged, minimise, penalised, sampled_rows, sampled_start
from trashfire.tables.survival_data import SAMPLE_COVARIATES

NEWTON = "Newton-Raphson"  # `_scipy_fit_method` that selects it; any other is scipy's, on the exact gradient


def right_censored_from_zero(Ts, entries) -> bool:
    """Whether lifelines' data are what the Newton fits take: right-censored, no entry times."""
    return not ((entries is not None and np.any(entries != 0)) or Ts[0] is None or Ts[1] is not None and not np.array_equal(Ts[0], Ts[1]))


def start_rows(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The rows a start (the log-normal fit before the generalised gamma's, the plain fit before
    a cure model's) is fitted on: every row up to ROW_BLOCK, past it ROW_BLOCK rows drawn at
    random (seeded): a start need only be near the optimum, which Newton-Raphson then reaches
    on every row (tests), and a full fit of its own took a minute at 10^7 rows. `columns` that
    are constant in the drawn rows are left out (their start is 0)."""
    rows = sampled_rows(len(df), ROW_BLOCK)
    if rows is None:
        return df
    drawn = df.iloc[rows]
    return drawn.drop(columns=[c for c in columns if drawn[c].nunique() <= 1])


def keep_lifelines_objectives(fitter, likelihood) -> None:
    """What lifelines' own _fit_model leaves for its score() and the convergence check."""
    fitter._neg_likelihood_with_penalty_function = partial(
        fitter._create_neg_likelihood_with_penalty_function, likelihood=likelihood, penalty=fitter._add_penalty
    )
    fitter._neg_likelihood = partial(fitter._create_neg_likelihood_with_penalty_function, likelihood=likelihood)


class NewtonRegressionMixin(FastDesignMixin):
    """`_fit_model` by Newton-Raphson for a lifelines ParametricRegressionFitter (module docstring)."""

    _scipy_fit_method = NEWTON
    newton_iterations: int | None = None  # None: the fit went to a scipy optimiser
    newton_gradient_: np.ndarray | None = None  # the penalised negative log-likelihood's gradient at the fit (nats), lifelines' order
    ROWS_APART = True  # a row's derivatives depend on its own values alone: they may be computed a block of rows at a time

    def row_derivatives(self, log_t: np.ndarray, event: np.ndarray, etas: list[np.ndarray], order: int = 2):
        raise NotImplementedError

    def _fit_model(self, likelihood, Ts, Xs, E, weights, entries, fit_options, show_progress=False, user_supplied_initial_point=None):
        if not right_censored_from_zero(Ts, entries):
            return super()._fit_model(likelihood, Ts, Xs, E, weights, entries, fit_options, show_progress, user_supplied_initial_point)
        starts, _ = self._prepare_initial_points(user_supplied_initial_point, Ts, E, entries, weights, Xs)
        keep_lifelines_objectives(self, likelihood)
        names = self._parameter_order(Xs)
        log_t = np.log(np.asarray(Ts[0], dtype=float))
        frames = [Xs[name] for name in names]
        # past ROW_BLOCK rows, the designs by cell (design.grouped): a Newton step's products cost O(n), not O(n p^2)
        designs = grouped(frames, set(SAMPLE_COVARIATES)) if len(weights) > ROW_BLOCK else None
        event, weights = np.asarray(E, dtype=bool), np.asarray(weights, dtype=float)
        model = LinearPredictors(self.row_derivatives, designs or [frame.to_numpy(float) for frame in frames], weights, (log_t, event), self.ROWS_APART)
        ridge = self.penalizer * ~np.asarray(self._cols_to_not_penalize, dtype=bool)
        maxiter = int((fit_options or {}).get("maxiter", MAX_ITERATIONS))
        objective = penalised(model, ridge)
        try:
            if self._scipy_fit_method == NEWTON:

                def on_rows(rows):
                    sample = [frame.iloc[rows].to_numpy(float) for frame in frames]
                    return penalised(LinearPredictors(self.row_derivatives, sample, weights[rows], (log_t[rows], event[rows])), ridge)

                start = sampled_start(on_rows, sampled_rows(len(weights), ROW_BLOCK), np.asarray(starts[0], dtype=float), maxiter)
                theta, value, gradient, hessian, self.newton_iterations = minimise(objective, start, maxiter)
            else:
                theta, value, gradient, hessian = self._scipy_minimum(objective, starts, fit_options)
        except NotConverged as err:
            raise ConvergenceError(str(err)) from None
        self.newton_gradient_ = model.total * gradient
        return {name: theta[block] for name, block in zip(names, model.blocks)}, -model.total * value, model.total * hessian

    def _scipy_minimum(self, objective, starts, fit_options):
        """lifelines' own path (its optimiser, starts and options, the best of its starts) on the
        exact objective and gradient: for a multimodal model whose optimum is where lifelines'
        optimiser stops, the same optimum at a fraction of autograd's cost per step."""
        best = None
        for start in starts:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = minimize(
                    lambda theta: objective(theta, 1),
                    np.asarray(start, dtype=float),
                    jac=True,
                    method=self._scipy_fit_method,
                    options={"disp": False, **self._scipy_fit_options, **(fit_options or {})},
                )
            # a later start replaces the best only where it is better beyond rounding: starts that
            # reach one optimum tie, and rounding would pick the kept one (and its `success`)
            if best is None or result.fun < best.fun - 1e-10 * (1.0 + abs(best.fun)):
                best = result
        if not best.success:
            raise NotConverged(f"{self._scipy_fit_method} did not converge: {best.message}")
        return (best.x, *objective(best.x))

    @staticmethod
    def _parameter_order(design) -> list[str]:
        """The fitted parameters in the design's (lifelines') column order."""
        return list(dict.fromkeys(design.columns.get_level_values(0)))

    LIFELINES_LIKELIHOOD = True  # row_derivatives' log-likelihood is lifelines' own (its clips included)

    def unpenalised_log_likelihood(self, durations: np.ndarray, events: np.ndarray, weights: np.ndarray, covariates) -> float | None:
        """The weighted log-likelihood of these rows at the fit, from row_derivatives (lifelines'
        score() evaluates its autograd objective: minutes at 10^7 rows); None where row_derivatives'
        likelihood is not lifelines' (LIFELINES_LIKELIHOOD)."""
        if not self.LIFELINES_LIKELIHOOD:
            return None
        _, etas = self._linear_predictors(covariates)
        value, _, _ = self.row_derivatives(np.log(np.asarray(durations, dtype=float)), np.asarray(events, dtype=bool), etas, 0)
        return float(np.asarray(weights, dtype=float) @ value)

    def _linear_predictors(self, covariates) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each parameter's design block and linear predictor at the fit, in lifelines' order."""
        design = self.regressors.transform_df(covariates)
        names = self._parameter_order(design)
        blocks = [design[name].to_numpy(float) for name in names]
        return blocks, [X @ self.params_.loc[name].to_numpy(float) for X, name in zip(blocks, names)]

    def row_scores(self, durations: np.ndarray, events: np.ndarray, weights: np.ndarray, covariates) -> np.ndarray:
        """Each row's weight x gradient of its log-likelihood at the fit, in lifelines' params_
        (raw covariates, its order): the cluster-robust sandwich's scores."""
        blocks, etas = self._linear_predictors(covariates)
        _, first, _ = self.row_derivatives(np.log(np.asarray(durations, dtype=float)), np.asarray(events, dtype=bool), etas, 1)
        return np.hstack([X * first[:, [k]] for k, X in enumerate(blocks)]) * np.asarray(weights, dtype=float)[:, None]
