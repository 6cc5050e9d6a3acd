"""Location-scale AFT models fitted by Newton-Raphson on the analytic gradient and Hessian,
as R's `survreg` fits them: the algorithm, on numpy arrays or torch tensors (a GPU).

Every model here is log T = x·b + sigma·W with W a standard extreme-value (Weibull;
Exponential with sigma = 1), normal (Log-Normal) or logistic (Log-Logistic) variable, whose
log density and log survival have closed-form first and second derivatives in
z = (log t - x·b) / sigma. A Newton step costs one pass over the rows (the Hessian is
X' diag(.) X) and a fit about five to ten, where lifelines' scipy optimiser on its autograd
objective takes tens of passes and (seen at 5·10^5 samples) can stop 192 nats short of the
optimum. `trashfire.survival.aft` puts it inside lifelines' fitters; bench/survival_gpu.py runs
it on a GPU.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_ndtr

from trashfire.survival.design import GroupedDesign, t_dot

MAX_ITERATIONS = 100
MAX_HALVINGS = 30
GRADIENT_TOLERANCE = 1e-9  # of the mean objective, per coefficient (in the unit-SD coordinates)
POSITIVE_DEFINITE = (
    1e-14  # smallest / largest eigenvalue above which a Hessian is positive definite beyond rounding (100x it; the default run's cure fits reach 2e-12)
)
ROW_BLOCK = 1 << 18  # rows per block of a Hessian's product X' diag(d) X: its temporary is a block, not a copy of the design (10^7 rows: 1.6 GB)
ROUNDING_SLACK = 1e-12  # relative: a trial step this much worse is as good (the objective's sum rounds ~1e-16 x log n)
_SQRT_2PI = np.sqrt(2 * np.pi)


class NotConverged(ArithmeticError):
    """Newton-Raphson stopped short of the optimum (trashfire.survival.aft raises lifelines' ConvergenceError)."""


class NumpyOps:
    """The array functions the densities use, on numpy arrays (TorchOps: on torch tensors)."""

    exp = staticmethod(np.exp)
    where = staticmethod(np.where)
    sigmoid = staticmethod(expit)
    log_ndtr = staticmethod(log_ndtr)
    to_numpy = staticmethod(np.asarray)

    @staticmethod
    def softplus(z):
        return np.logaddexp(0.0, z)

    @staticmethod
    def at_most(z, limit: float):
        return np.minimum(z, limit)


def torch_ops():
    """NumpyOps on torch tensors (any device; float64 for survreg's precision)."""
    import torch

    class TorchOps:
        exp = staticmethod(torch.exp)
        where = staticmethod(torch.where)
        sigmoid = staticmethod(torch.sigmoid)
        log_ndtr = staticmethod(torch.special.log_ndtr)

        @staticmethod
        def to_numpy(value):
            return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)

        @staticmethod
        def softplus(z):
            return torch.logaddexp(torch.zeros_like(z), z)

        @staticmethod
        def at_most(z, limit: float):
            return torch.clamp(z, max=limit)

    return TorchOps


def extreme_value(z, event, ops=NumpyOps):
    """W ~ standard minimum extreme value: log f = z - e^z, log S = -e^z; (value, first and
    second derivative in z) per row."""
    ez = ops.exp(ops.at_most(z, 700.0))
    return ops.where(event, z, 0.0) - ez, ops.where(event, 1.0, 0.0) - ez, -ez


def logistic(z, event, ops=NumpyOps):
    """W ~ standard logistic: log f = z - 2 log(1 + e^z), log S = -log(1 + e^z)."""
    p = ops.sigmoid(z)
    k = ops.where(event, 2.0, 1.0)
    return ops.where(event, z, 0.0) - k * ops.softplus(z), ops.where(event, 1.0, 0.0) - k * p, -k * p * (1 - p)


def normal(z, event, ops=NumpyOps):
    """W ~ standard normal: log f = -z^2/2 - log sqrt(2 pi), log S = log Phi(-z)."""
    log_tail = ops.log_ndtr(-z)
    mills = ops.exp(-0.5 * z * z - log_tail) / _SQRT_2PI  # phi(z) / Phi(-z), from logs: stable far in the tail
    value = ops.where(event, -0.5 * z * z - float(np.log(_SQRT_2PI)), log_tail)
    return value, ops.where(event, -z, -mills), ops.where(event, -1.0, -mills * (mills - z))


class LocationScale:
    """One model's log-likelihood in (b, u = log sigma), its gradient and Hessian, on the
    design X (rows, unit-SD columns), log durations y, events d and weights w: numpy arrays,
    or torch tensors with `ops=torch_ops()` (on a GPU, say). What it returns is numpy."""

    def __init__(self, density, X, y, event, weights, fixed_scale: bool, ops=NumpyOps):
        self.density, self.X, self.y, self.event, self.w, self.ops = density, X, y, event, weights, ops
        self.fixed_scale = fixed_scale
        self.total = float(weights.sum())
        self.events = float((weights * event).sum())
        self.log_t_events = float((weights * y * event).sum())

    def evaluate(self, b: np.ndarray, u: float, derivatives: bool = True):
        """The log-likelihood (a sum over weights), and its gradient and Hessian in (b, u).
        Past ROW_BLOCK rows of a numpy design, summed over blocks of ROW_BLOCK rows: each
        temporary is a block (2 MB), not n values (a dozen of 64 MB at 10^7 rows, page-faulted
        fresh at every step), the same sums in another order of their terms."""
        sigma = float(np.exp(u))
        n = len(self.w)
        if n <= ROW_BLOCK or not isinstance(self.X, np.ndarray):
            sums = self._row_sums(slice(None), b, sigma, derivatives)
        else:
            blocks = [self._row_sums(slice(start, start + ROW_BLOCK), b, sigma, derivatives) for start in range(0, n, ROW_BLOCK)]
            sums = [sum(parts) for parts in zip(*blocks)]
        loglik = float(sums[0]) - self.events * u - self.log_t_events
        if not derivatives:
            return loglik, None, None
        gb, Hbb = -sums[1] / sigma, sums[2] / sigma**2
        if self.fixed_scale:
            return loglik, gb, Hbb
        gu, Hbu, Huu = -float(sums[3]) - self.events, sums[4] / sigma, float(sums[5])
        return loglik, np.append(gb, gu), np.block([[Hbb, Hbu[:, None]], [Hbu[None, :], np.array([[Huu]])]])

    def _row_sums(self, rows: slice, b: np.ndarray, sigma: float, derivatives: bool) -> list:
        """Over `rows`: sum w value; and X'(w f1), X' diag(w f2) X, sum w f1 z, X'(w (z f2 + f1)),
        sum w (f2 z^2 + f1 z) (f1, f2: the density's derivatives in z), as numpy."""
        X, w, numpy = self.X[rows], self.w[rows], self.ops.to_numpy
        z = (self.y[rows] - X @ self._like(b)) / sigma
        value, first, second = self.density(z, self.event[rows], self.ops)
        sums = [float((w * value).sum())]
        if not derivatives:
            return sums
        w_first = w * first
        sums += [numpy(X.T @ w_first), numpy(weighted_gram(X, w * second, X))]
        if not self.fixed_scale:
            sums += [float((w_first * z).sum()), numpy(X.T @ (w * (z * second + first))), float((w * (second * z * z + first * z)).sum())]
        return sums

    def _like(self, b: np.ndarray):
        """b as the design's kind of array (a tensor on its device)."""
        if isinstance(self.X, np.ndarray):
            return b
        return self.X.new_tensor(b)


def weighted_gram(A, d, B):
    """A' diag(d) B, summed over blocks of ROW_BLOCK rows where there are more, or over cells
    (GroupedDesigns): the same sum in another order of its terms, within rounding of the one
    product."""
    if isinstance(A, GroupedDesign):
        return A.gram(d, B)
    if len(d) <= ROW_BLOCK:
        return (A.T * d) @ B
    total = 0.0
    for start in range(0, len(d), ROW_BLOCK):
        rows = slice(start, start + ROW_BLOCK)
        total = total + (A[rows].T * d[rows]) @ B[rows]
    return total


def objective(model: LocationScale, params: np.ndarray, ridge: np.ndarray, scale_sign: float, derivatives: bool = True):
    """lifelines' objective in its coordinates (u = scale_sign x the last parameter): -loglik /
    sum(w) + 1/2 sum(ridge theta^2), with its gradient and Hessian."""
    b, u = (params, 0.0) if model.fixed_scale else (params[:-1], scale_sign * params[-1])
    loglik, gradient, hessian = model.evaluate(b, u, derivatives)
    value = -loglik / model.total + 0.5 * float((ridge * params**2).sum())
    if not derivatives:
        return value, None, None
    sign = np.ones_like(params)
    if not model.fixed_scale:
        sign[-1] = scale_sign
    return value, -gradient * sign / model.total + ridge * params, -hessian * np.outer(sign, sign) / model.total + np.diag(ridge)


def newton(model: LocationScale, params: np.ndarray, ridge: np.ndarray, scale_sign: float, iterations: int = MAX_ITERATIONS):
    """Newton-Raphson on lifelines' objective of a location-scale model (see `minimise`)."""
    return minimise(lambda theta: objective(model, theta, ridge, scale_sign), params, iterations)


def minimise(function, params: np.ndarray, iterations: int = MAX_ITERATIONS):
    """Newton-Raphson with step halving (survreg's) on `function(params) -> (value, gradient,
    Hessian)`; where the Hessian is not positive definite, its eigenvalues by their absolute
    values (`_newton_step`). Returns (params,
    value, gradient, Hessian, iterations) once the gradient is within GRADIENT_TOLERANCE, or
    raises NotConverged."""
    value, gradient, hessian = function(params)
    for iteration in range(iterations + 1):
        if np.all(np.isfinite(gradient)) and np.abs(gradient).max() < GRADIENT_TOLERANCE:
            return params, value, gradient, hessian, iteration
        if iteration == iterations:
            break
        step = _newton_step(gradient, hessian)
        for _ in range(MAX_HALVINGS):  # the trial's derivatives too: near the optimum every full step is taken
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # a step too far overflows: it is halved
                trial = function(params - step)
            # a slack above the mean objective's summation noise: at 1e-15 the test near the
            # optimum compared rounding with rounding, and a CPU whose noise fell the other way
            # halved every step into NotConverged and the retry ladder (issue 58)
            if np.isfinite(trial[0]) and trial[0] <= value + ROUNDING_SLACK * max(1.0, abs(value)) and np.isfinite(trial[2]).all():
                break
            step = step / 2
        else:
            break
        gained = value - trial[0]
        params = params - step
        value, gradient, hessian = trial
        # as far as float arithmetic goes; rounding decides whether this returns now or after one
        # more step of size ~|gradient|/curvature, and both are the optimum to GRADIENT_TOLERANCE
        if gained < 1e-16 * max(1.0, abs(value)) and np.abs(gradient).max() < 1e-6:
            return params, value, gradient, hessian, iteration + 1
    raise NotConverged(
        f"Newton-Raphson did not converge in {iterations} iterations (largest |gradient| {np.abs(gradient).max():.3g} of the mean log-likelihood)"
    )


START_SEED = 0  # which rows a large fit's start is fitted on (sampled_rows)


def sampled_rows(n: int, size: int) -> np.ndarray | None:
    """`size` of n row positions drawn at random (seeded, in order) where n > size; None
    where n <= size. A large fit's start is fitted on them: Newton-Raphson from the sample's
    optimum, within ~1/sqrt(size) of every row's, takes two or three steps on all n rows,
    each a pass over them (10^7 at a paper's size), where it took six to ten from a
    least-squares or plain start."""
    if n <= size:
        return None
    return np.sort(np.random.default_rng(START_SEED).choice(n, size, replace=False))


def sampled_start(function_on, rows: np.ndarray | None, start: np.ndarray, iterations: int = MAX_ITERATIONS) -> np.ndarray:
    """The optimum of `function_on(rows)` (the objective on those rows) from `start`, or
    `start` where rows is None or Newton-Raphson fails on them: the full fit then goes from
    there and reaches its own optimum either way."""
    if rows is None:
        return start
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return minimise(function_on(rows), start, iterations)[0]
    except (NotConverged, np.linalg.LinAlgError):
        return start


def in_row_blocks(function, frame, *arrays) -> np.ndarray:
    """`function(rows, *arrays' rows)` (a per-row prediction: one value per row) over blocks of
    ROW_BLOCK rows of `frame`, concatenated: the prediction's design holds a block of rows, not
    all of them (10^7 rows x 43 columns: 3.4 GB). Each row's value is the whole frame's, up to
    the last bits a BLAS may give a product of another shape."""
    if len(frame) <= ROW_BLOCK:
        return np.asarray(function(frame, *arrays))
    blocks = range(0, len(frame), ROW_BLOCK)
    return np.concatenate([np.asarray(function(frame.iloc[s : s + ROW_BLOCK], *(a[s : s + ROW_BLOCK] for a in arrays))) for s in blocks])


class LinearPredictors:
    """A regression whose rows' log-likelihood depends on K linear predictors eta_k = X_k theta_k
    (a cure model's cured share, scale and shape; the generalised gamma's lambda, mu and sigma).
    Given each row's log-likelihood and its first and second derivatives in its etas
    (`row_derivatives(*row_data, etas, order) -> (value (n,), first (n, K), second (n, K, K))`, those above
    `order` 0, 1 or 2 None), the
    gradient in theta is X_k' (w g_k) and the Hessian's blocks X_k' diag(w h_kl) X_l: one pass
    over the rows per Newton step, whatever K."""

    def __init__(self, row_derivatives, designs: list[np.ndarray], weights: np.ndarray, row_data: tuple = (), by_blocks: bool = True):
        self.row_derivatives, self.designs, self.w, self.row_data, self.by_blocks = row_derivatives, designs, weights, row_data, by_blocks
        self._buffers: list[np.ndarray | None] = []
        self.total = float(weights.sum())
        edges = np.cumsum([0] + [X.shape[1] for X in designs])
        self.blocks = [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]

    def evaluate(self, theta: np.ndarray, order: int = 2):
        """The log-likelihood (a sum over weights), and its gradient and Hessian in theta (up to
        `order`; None beyond it)."""
        etas = [X @ theta[block] for X, block in zip(self.designs, self.blocks)]
        value, first, second = self._derivatives(etas, order)
        loglik = float(self.w @ value)
        if order == 0:
            return loglik, None, None
        gradient = np.concatenate([t_dot(X, self.w * first[:, k]) for k, X in enumerate(self.designs)])
        if order == 1:
            return loglik, gradient, None
        hessian = np.empty((len(theta), len(theta)))
        for k, (Xk, bk) in enumerate(zip(self.designs, self.blocks)):
            for j, (Xj, bj) in enumerate(zip(self.designs, self.blocks)):
                if j >= k:
                    hessian[bk, bj] = weighted_gram(Xk, self.w * second[:, k, j], Xj)
                    hessian[bj, bk] = hessian[bk, bj].T
        return loglik, gradient, hessian

    def _derivatives(self, etas: list[np.ndarray], order: int):
        """row_derivatives(*row_data, etas, order); past ROW_BLOCK rows computed a block of rows
        at a time into arrays this model keeps from step to step: the dozens of elementwise
        temporaries are a block's (2 MB), where n of them (10^7 rows: 64 MB each, page-faulted
        fresh at every step) took most of a cure fit's time. Each row's values are the same, where
        they depend on that row alone (`by_blocks`; the calibration spline's finite-difference
        step reads every row's)."""
        n = len(self.w)
        if n <= ROW_BLOCK or not self.by_blocks:
            return self.row_derivatives(*self.row_data, etas, order)
        for start in range(0, n, ROW_BLOCK):
            rows = slice(start, start + ROW_BLOCK)
            parts = self.row_derivatives(*(column[rows] for column in self.row_data), [eta[rows] for eta in etas], order)
            if start == 0:
                out = [None if part is None else self._buffer(i, (n, *part.shape[1:])) for i, part in enumerate(parts)]
            for whole, part in zip(out, parts):
                if part is not None:
                    whole[rows] = part
        return out

    def _buffer(self, index: int, shape: tuple) -> np.ndarray:
        while len(self._buffers) <= index:
            self._buffers.append(None)
        if self._buffers[index] is None or self._buffers[index].shape != shape:
            self._buffers[index] = np.empty(shape)
        return self._buffers[index]


def penalised(model: LinearPredictors, ridge: np.ndarray):
    """lifelines' objective of `model`: -loglik / sum(w) + 1/2 sum(ridge theta^2), with its
    gradient and (at `order` 2) Hessian, as a function of theta."""

    def function(theta: np.ndarray, order: int = 2):
        loglik, gradient, hessian = model.evaluate(theta, order)
        value = -loglik / model.total + 0.5 * float((ridge * theta**2).sum())
        if order == 1:
            return value, -gradient / model.total + ridge * theta
        return value, -gradient / model.total + ridge * theta, -hessian / model.total + np.diag(ridge)

    return function


def torch_row_derivatives(row_loglik):
    """`LinearPredictors.row_derivatives` from a torch function of the etas that gives each
    row's log-likelihood (float64): each row depends on its own etas only, so one backward pass
    gives every row's first derivatives and K more its second, exactly (autograd)."""

    def derivatives(etas: list[np.ndarray], order: int = 2):
        import torch

        leaves = [torch.from_numpy(np.ascontiguousarray(eta, dtype=np.float64)).requires_grad_(order > 0) for eta in etas]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # elementwise work: a second thread gains little, and beside other work it spins (50x slower seen)
        try:
            with torch.set_grad_enabled(order > 0):
                value = row_loglik(*leaves)
            if order == 0:
                return value.detach().numpy(), None, None
            firsts = torch.autograd.grad(value.sum(), leaves, create_graph=order > 1)
            second = np.zeros((len(value), len(leaves), len(leaves))) if order > 1 else None
            for k, first in enumerate(firsts if order > 1 else ()):
                if first.requires_grad:
                    for j, row in enumerate(torch.autograd.grad(first.sum(), leaves, retain_graph=True, allow_unused=True)):
                        if row is not None:
                            second[:, k, j] = row.detach().numpy()
        finally:
            torch.set_num_threads(threads)
        return value.detach().numpy(), np.stack([first.detach().numpy() for first in firsts], axis=1), second

    return derivatives


def _newton_step(gradient: np.ndarray, hessian: np.ndarray) -> np.ndarray:
    """H^-1 g where H is positive definite beyond rounding (its smallest eigenvalue above
    POSITIVE_DEFINITE times its largest: what Cholesky's step gives); elsewhere (a mixture
    model's start, off its optimum) each eigenvalue by its absolute value, floored at 1e-8 of
    the largest, so that a direction of negative curvature is walked down at its own scale (a
    Levenberg shift just past the most negative eigenvalue makes that step so long that its
    halving leaves nothing of it). The choice was "Cholesky succeeds or not", which rounding
    decided for a singular H (issue 58); now a stated tolerance decides, 100 times rounding's
    size, and V diag V' is the same whatever signs eigh gives the vectors."""
    if not np.all(np.isfinite(hessian)):
        raise NotConverged("Newton-Raphson: the Hessian is not finite")
    values, vectors = np.linalg.eigh(hessian)
    largest = float(np.abs(values).max())
    if values.min() > POSITIVE_DEFINITE * largest:
        return vectors @ ((vectors.T @ gradient) / values)
    floor = max(1e-12, 1e-8 * largest)
    return vectors @ ((vectors.T @ gradient) / np.maximum(np.abs(values), floor))
