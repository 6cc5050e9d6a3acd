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

from dataclasses import dataclass

import numpy as np
from lifelines import CoxPHFitter, utils
from lifelines.fitters.coxph_fitter import SemiParametricPHFitter

from trashfire.survival.newton import ROW_BLOCK


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
            self._counting, self._ties = False, None  # the rows' arrays stay out of the fitted model (pickled, saved)

    def _choose_gradient_calculator(self, T, X, entries):
        if entries is not None:
            return super()._choose_gradient_calculator(T, X, entries)
        return self._efron

    def _efron(self, X, T, E, weights, entries, beta):
        arrays = (
            X.to_numpy(float),
            T.to_numpy(float),
            E.to_numpy().astype(bool),
            weights.to_numpy(float),
        )  # X as stored (column-major): a copy per step was 1.2 GB at 10^7 rows
        if not getattr(self, "_counting", False):  # a single evaluation (the convergence check)
            return efron(*arrays, beta)
        self.newton_iterations += 1
        cached = getattr(self, "_ties", None)
        if cached is None or any(mine is not theirs for mine, theirs in zip(cached[0], (X, T, E, weights))):
            cached = self._ties = ((X, T, E, weights), Ties.of(*arrays[1:]))  # lifelines passes the same frames at every step of a fit
        return efron(*arrays, beta, ties=cached[1])


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


@dataclass(frozen=True)
class Ties:
    """What the Efron sums take from the durations, events and weights alone (a fit's every
    Newton step reads the same): each time's first row, each row's time, the failure times
    (`has`), one entry per failure (its time, its k / d) and c = (sum of D's weights) / d."""

    starts: np.ndarray
    time_of_row: np.ndarray
    failed_time: np.ndarray
    has: np.ndarray
    entry_time: np.ndarray
    p: np.ndarray
    c: np.ndarray

    @classmethod
    def of(cls, T: np.ndarray, E: np.ndarray, weights: np.ndarray) -> Ties:
        new_time = np.r_[True, T[1:] != T[:-1]]
        starts = np.flatnonzero(new_time)
        time_of_row = np.cumsum(new_time) - 1
        failed_time = time_of_row[E]
        times = len(starts)
        d = np.bincount(failed_time, minlength=times).astype(float)
        weight_sum = np.bincount(failed_time, weights=weights[E], minlength=times)
        has = np.flatnonzero(d > 0)
        per_time = d[has].astype(int)
        entry_time = np.repeat(has, per_time)
        k = np.arange(per_time.sum()) - np.repeat(np.cumsum(per_time) - per_time, per_time)
        c = np.zeros(times)
        c[has] = weight_sum[has] / d[has]
        return cls(starts, time_of_row, failed_time, has, entry_time, k / d[entry_time], c)


def efron(
    X: np.ndarray, T: np.ndarray, E: np.ndarray, weights: np.ndarray, beta: np.ndarray, block: int = ROW_BLOCK, ties: Ties | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """(Hessian, gradient, log-likelihood) of the Efron partial likelihood at beta, as
    lifelines' `_get_efron_values_single` returns them; rows sorted by T (as lifelines sorts);
    `ties`: Ties.of(T, E, weights), where the caller keeps it from step to step.
    The n x p sums (phi x, its running sum R1, the ties' S1) go `block` rows at a time from the
    last back, a block ending where a time ends: each temporary is a block's, where at 10^7
    rows each was 1.5 GB, page-faulted fresh at every Newton step."""
    ties = Ties.of(T, E, weights) if ties is None else ties
    starts, time_of_row, failed_time, has, entry_time, p, c = (ties.starts, ties.time_of_row, ties.failed_time, ties.has, ties.entry_time, ties.p, ties.c)
    times = len(starts)
    beta = np.asarray(beta, float).ravel()
    phi = weights * np.exp(X @ beta)
    at_risk = np.cumsum(phi[::-1])[::-1][starts]
    tied = np.bincount(failed_time, weights=phi[E], minlength=times)
    den = at_risk[entry_time] - p * tied[entry_time]

    def per_time_sum(values):
        return np.bincount(entry_time, weights=values, minlength=times)

    inverse, p_inverse = per_time_sum(1 / den), per_time_sum(p / den)
    inverse2, p_inverse2, p2_inverse2 = per_time_sum(1 / den**2), per_time_sum(p / den**2), per_time_sum(p * p / den**2)
    log_lik = -float(c @ per_time_sum(np.log(den)))
    # sum_t c (inverse R2 - p_inverse S2): a row counts at every failure time up to its own
    through_time = np.cumsum(c * inverse)[time_of_row]
    own_time = np.zeros(len(T))
    own_time[E] = (c * p_inverse)[failed_time]
    curvature = phi * (through_time - own_time)
    width = X.shape[1]
    weighted_x, gradient, outer, second, later = np.zeros(width), np.zeros(width), np.zeros((width, width)), np.zeros((width, width)), np.zeros(width)
    for first_row, end_row, first_time, end_time in reversed(time_blocks(starts, len(T), block)):
        rows = slice(first_row, end_row)
        x, failed = X[rows], E[rows]
        phi_x = phi[rows, None] * x
        running = _running_sums_back(phi_x)
        # at the block's failure times (the only ones with c > 0): R1 with every later row's, and S1
        times_here = has[(has >= first_time) & (has < end_time)]
        at_risk_x = running[starts[times_here] - first_row] + later
        later = running[0] + later
        failed_times = time_of_row[rows][failed]  # in time order, a time's tied rows all in this block
        tied_x = _sums_by_time(phi_x, failed, failed_times, width)
        a = c[times_here]
        weighted_x += weights[rows][failed] @ x[failed]
        gradient += -(a * inverse[times_here]) @ at_risk_x + (a * p_inverse[times_here]) @ tied_x
        cross = (a * p_inverse2[times_here])[:, None]
        outer += at_risk_x.T @ ((a * inverse2[times_here])[:, None] * at_risk_x - cross * tied_x) + tied_x.T @ (
            (a * p2_inverse2[times_here])[:, None] * tied_x - cross * at_risk_x
        )
        second += (x.T * curvature[rows]) @ x
    return outer - second, weighted_x + gradient, float(weighted_x @ beta) + log_lik


def _running_sums_back(values: np.ndarray) -> np.ndarray:
    """Each column's sums from the last row back to each row, a column at a time along its
    memory (the design is column-major): half the time of numpy's cumsum over a reversed 2-D
    view, the same sums."""
    running = np.empty(values.shape, order="F")
    for j in range(values.shape[1]):
        np.cumsum(values[::-1, j], out=running[::-1, j])
    return running


def _sums_by_time(phi_x: np.ndarray, failed: np.ndarray, failed_times: np.ndarray, width: int) -> np.ndarray:
    """S1 per failure time of the block: the failed rows' phi x summed within each time (rows in
    time order), a column at a time by bincount (twice as fast as reduceat over the rows)."""
    if not len(failed_times):
        return np.zeros((0, width))
    time_index = np.cumsum(np.r_[True, failed_times[1:] != failed_times[:-1]]) - 1
    times = int(time_index[-1]) + 1
    sums = np.empty((times, width), order="F")
    for j in range(width):
        sums[:, j] = np.bincount(time_index, weights=phi_x[:, j][failed], minlength=times)
    return sums


def time_blocks(starts: np.ndarray, n: int, block: int) -> list[tuple[int, int, int, int]]:
    """(first row, end row, first time, end time) of blocks of about `block` rows that each
    begin where a time begins (a time's tied rows in one block)."""
    cuts = np.unique(np.searchsorted(starts, np.arange(0, n, block)))  # the first time at or after each multiple of block
    time_edges = np.r_[cuts[cuts < len(starts)], len(starts)]
    row_edges = np.r_[starts[time_edges[:-1]], n]
    return [(int(row_edges[i]), int(row_edges[i + 1]), int(time_edges[i]), int(time_edges[i + 1])) for i in range(len(time_edges) - 1)]


def cluster_score_sums(
    beta: np.ndarray, x, times: np.ndarray, events: np.ndarray, weights: np.ndarray, codes: np.ndarray, clusters: int, block: int = ROW_BLOCK
) -> np.ndarray:
    """Each cluster's sum of the rows' Cox score residuals (Lin and Wei 1989: see
    `fitters.cox_score_residuals`, whose sums these are to rounding), one row per cluster
    (`codes`: each row's cluster, 0 .. clusters - 1). The rows go by time in blocks of about
    `block` (a time's ties in one): the running sums carry from block to block, and only the
    risk-set means (n x p) are kept whole, where the residuals' n x p arrays, five alive at
    once, took 6 GB at 10^7 samples. `x`: the design, an (n, p) array or its p columns (each
    block's rows are gathered from them: no sorted copy of the design)."""
    order = np.argsort(times, kind="stable")
    sorted_times = times[order]
    first = np.searchsorted(sorted_times, sorted_times, side="left")  # the risk set of t_i starts at its first tie
    last = np.searchsorted(sorted_times, sorted_times, side="right") - 1  # events up to t_i end at its last tie
    columns = list(x.T) if isinstance(x, np.ndarray) else list(x)

    def rows_of(positions: np.ndarray) -> np.ndarray:  # the design's rows at these positions, centred
        return np.column_stack([column[positions] for column in columns]) - mean

    mean = np.array([column.mean() for column in columns])  # phi up to a constant factor, which cancels; exp stays finite
    events, weights = events[order], weights[order]
    phi = np.concatenate([np.exp(rows_of(order[s : s + block]) @ beta) for s in range(0, len(order), block)]) if len(order) else np.zeros(0)
    risk = np.cumsum((weights * phi)[::-1])[::-1][first]
    steps = events * weights / risk
    through = np.cumsum(steps)[last]
    starts = np.flatnonzero(np.r_[True, sorted_times[1:] != sorted_times[:-1]])
    blocks = time_blocks(starts, len(order), block)
    width = len(columns)
    risk_mean, later = np.empty((len(order), width)), np.zeros(width)
    for first_row, end_row, _, _ in reversed(blocks):
        rows = slice(first_row, end_row)
        running = np.cumsum((rows_of(order[rows]) * (weights[rows] * phi[rows])[:, None])[::-1], axis=0)[::-1] + later
        risk_mean[rows] = running[first[rows] - first_row] / risk[rows, None]
        later = running[0]
    sums, earlier = np.zeros((clusters, width)), np.zeros(width)
    for first_row, end_row, _, _ in blocks:
        rows = slice(first_row, end_row)
        centred = rows_of(order[rows])
        running = np.cumsum(risk_mean[rows] * steps[rows, None], axis=0) + earlier
        earlier = running[-1]
        since = centred * through[rows, None] - running[last[rows] - first_row]
        residuals = weights[rows, None] * (events[rows, None] * (centred - risk_mean[rows]) - phi[rows, None] * since)
        in_cluster = codes[order[rows]]
        kept = in_cluster >= 0  # a row without a cluster (pandas' code -1) is left out, as a groupby leaves it
        sums += np.stack([np.bincount(in_cluster[kept], weights=column[kept], minlength=clusters) for column in residuals.T], axis=1)
    return sums
