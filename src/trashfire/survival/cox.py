"""lifelines' Cox PH with its Efron partial likelihood, gradient and Hessian computed for every
tied failure time at once (numpy), where lifelines' own loop visits the rows one by one in
Python: the same Newton-Raphson, the same sums in the same order (the risk sets' running sums
from the last time back), at the cost of a few passes over the rows.

At a failure time t with d tied failures D (lifelines' Efron, its weights included): R, R1, R2
the sums of phi = w e^(x.b), phi x and phi x x' over the rows still at risk (T >= t); S, S1,
S2 the same over D; for k < d, p = k / d, den = R - p S. With c = (sum of D's weights) / d:

    loglik   += sum_D w x.b - c sum_k log den
    gradient += sum_D w x   - c sum_k (R1 - p S1) / den
    Hessian  += c sum_k [(R1 - p S1)(R1 - p S1)' / den^2 - (R2 - p S2) / den]

The sums over k are scalar weights per time, and the R2 and S2 terms gather into X' diag(.) X
over rows (a row is at risk at every failure time up to its own), so no p x p matrix is kept
per time.
"""

from __future__ import annotations

import numpy as np
from lifelines import CoxPHFitter, utils
from lifelines.fitters.coxph_fitter import SemiParametricPHFitter


class FastSemiParametricPHFitter(SemiParametricPHFitter):
    """lifelines' Breslow-baseline Cox model whose Efron computation is `efron`; entry times go
    to lifelines' own. `newton_iterations`: the Efron evaluations of its fit, one per Newton
    step (Table I's iterations)."""

    newton_iterations: int | None = None

    def fit(self, *args, **kwargs):
        self.newton_iterations, self._counting = 0, True
        try:
            return super().fit(*args, **kwargs)
        finally:
            self._counting = False

    def _choose_gradient_calculator(self, T, X, entries):
        if entries is not None:
            return super()._choose_gradient_calculator(T, X, entries)
        return self._efron

    def _efron(self, X, T, E, weights, entries, beta):
        if getattr(self, "_counting", False):
            self.newton_iterations += 1
        return efron(X.to_numpy(float), T.to_numpy(float), E.to_numpy().astype(bool), weights.to_numpy(float), beta)


class FastCoxPHFitter(CoxPHFitter):
    """lifelines' CoxPHFitter (Breslow baseline) on FastSemiParametricPHFitter: its
    coefficients, standard errors, baseline and predictions lifelines', each Newton step a few
    passes over the rows."""

    def _fit_model_breslow(self, *args, **kwargs):
        if not utils.CensoringType.is_right_censoring(self):
            return super()._fit_model_breslow(*args, **kwargs)
        model = FastSemiParametricPHFitter(penalizer=self.penalizer, l1_ratio=self.l1_ratio, strata=self.strata, alpha=self.alpha, label=self._label)
        model.fit(*args, **kwargs)
        return model


def efron(X: np.ndarray, T: np.ndarray, E: np.ndarray, weights: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(Hessian, gradient, log-likelihood) of the Efron partial likelihood at beta, as
    lifelines' `_get_efron_values_single` returns them; rows sorted by T (as lifelines sorts)."""
    beta = np.asarray(beta, float).ravel()
    phi = weights * np.exp(X @ beta)
    phi_x = phi[:, None] * X
    # the risk sets: running sums from the last row back, read at each time's first row
    starts = np.flatnonzero(np.r_[True, T[1:] != T[:-1]])
    at_risk = np.cumsum(phi[::-1])[::-1][starts]
    at_risk_x = np.cumsum(phi_x[::-1], axis=0)[::-1][starts]
    time_of_row = np.cumsum(np.r_[True, T[1:] != T[:-1]]) - 1
    failed_time = time_of_row[E]
    times = len(starts)
    d = np.bincount(failed_time, minlength=times).astype(float)
    tied = np.bincount(failed_time, weights=phi[E], minlength=times)
    tied_x = np.zeros((times, X.shape[1]))
    np.add.at(tied_x, failed_time, phi_x[E])
    weight_sum = np.bincount(failed_time, weights=weights[E], minlength=times)
    has = np.flatnonzero(d > 0)
    # one entry per failure: its time and its k / d
    per_time = d[has].astype(int)
    entry_time = np.repeat(has, per_time)
    k = np.arange(per_time.sum()) - np.repeat(np.cumsum(per_time) - per_time, per_time)
    p = k / d[entry_time]
    den = at_risk[entry_time] - p * tied[entry_time]
    c = np.zeros(times)
    c[has] = weight_sum[has] / d[has]

    def per_time_sum(values):
        return np.bincount(entry_time, weights=values, minlength=times)

    inverse, p_inverse = per_time_sum(1 / den), per_time_sum(p / den)
    inverse2, p_inverse2, p2_inverse2 = per_time_sum(1 / den**2), per_time_sum(p / den**2), per_time_sum(p * p / den**2)
    weighted_x = weights[E] @ X[E]
    log_lik = float(weighted_x @ beta - c @ per_time_sum(np.log(den)))
    gradient = weighted_x - (c * inverse) @ at_risk_x + (c * p_inverse) @ tied_x
    outer = (
        at_risk_x.T @ ((c * inverse2)[:, None] * at_risk_x)
        - at_risk_x.T @ ((c * p_inverse2)[:, None] * tied_x)
        - tied_x.T @ ((c * p_inverse2)[:, None] * at_risk_x)
        + tied_x.T @ ((c * p2_inverse2)[:, None] * tied_x)
    )
    # sum_t c (inverse R2 - p_inverse S2): a row counts at every failure time up to its own
    through_time = np.cumsum(c * inverse)[time_of_row]
    own_time = np.zeros(len(T))
    own_time[E] = (c * p_inverse)[failed_time]
    second = X.T @ ((phi * (through_time - own_time))[:, None] * X)
    return outer - second, gradient, log_lik
