"""Small statistics shared by several floors: pure functions on numbers and arrays.

They sit in `core`, the lowest floor, because their users span the pipeline: accuracy is
read by training and the attacks, the viability threshold by the timing tables, BIC and
Spearman's rho by the survival fits and the metrics. (`trashfire.models` loads torch on
import, so a torch-free helper shared with the table stages cannot live there.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from trashfire.core.errors import ConfigError


def accuracy(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    """Acc = 1 - false / N."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return 1.0 - float(np.sum(y_true != y_pred)) / len(y_true)


def viability_threshold(n_classes: int, w: float = 0.5) -> float:
    """tau(K) = 1/K + w sqrt(K - 1) / K: Cohen's w effect size against chance for K classes."""
    if n_classes < 2:
        raise ConfigError("n_classes", f"got {n_classes}; the viability threshold needs K >= 2 classes")
    return 1.0 / n_classes + w * math.sqrt(n_classes - 1) / n_classes


def degeneracy_threshold(n_classes: int, margin: float | None, w: float = 0.5, tau: float | None = None) -> float:
    """The benign accuracy a model cell must exceed not to be degenerate: chance 1/K plus
    `margin`; with no margin, the viability threshold (a fixed tau, else tau(K)). A model at or
    below it is near chance (a constant predictor among them): no attack can lower its accuracy
    much, so its R and EVP would read as robustness."""
    if margin is None:
        return tau if tau is not None else viability_threshold(n_classes, w)
    return 1.0 / n_classes + margin


def bic(log_likelihood: float, n_params: int, n_samples: float) -> float:
    """BIC = -2 loglik + k ln n, k counting every estimated coefficient."""
    return -2.0 * log_likelihood + n_params * math.log(n_samples)


ROUNDING_RTOL = 1e-10  # well above float64 rounding (1e-16), far below any difference a result rests on


def covariance_root(covariance: np.ndarray, rtol: float = ROUNDING_RTOL) -> np.ndarray:
    """The symmetric square root of a positive semi-definite covariance, its eigenvalues below
    `rtol` times the largest (rounding's negative ones among them) taken as 0: draws z @ root
    have that covariance. Unlike a Cholesky factor (which exists or not as rounding decides for
    a singular matrix) or eigh's vectors (whose signs rounding picks), it is a continuous
    function of the matrix, singular or not (but where an eigenvalue crosses `rtol` times the
    largest), so that inputs equal to rounding give draws equal to rounding on any CPU."""
    covariance = np.asarray(covariance, float)
    values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    largest = max(float(np.abs(values).max(initial=0.0)), np.finfo(float).tiny)
    kept = np.where(values > rtol * largest, values, 0.0)
    return (vectors * np.sqrt(kept)) @ vectors.T


def significant(values, digits: int = 9) -> np.ndarray:
    """`values` rounded to `digits` significant digits each (non-finite ones kept): values equal
    but for rounding (1e-16 relative: the same quantity computed along two paths, or by two
    CPUs' kernels) become exactly equal, so that a rank, a tie or a constant column they decide
    is not decided by rounding (issue 58); values apart by more than 10^(1 - digits) relative keep their order."""
    x = np.asarray(values, dtype=float)
    finite = np.isfinite(x) & (x != 0)
    magnitude = 10.0 ** np.floor(np.log10(np.abs(x, where=finite, out=np.ones_like(x))))
    return np.where(finite, np.round(x / magnitude, digits - 1) * magnitude, x)


def spearman(x, y) -> tuple[float, float]:
    """rho and p, NaN for fewer than 3 points or a constant column (scipy would warn). Both
    columns are taken to 9 significant digits first: ties and constant columns that rounding
    would break are ties."""
    from scipy import stats  # scipy.stats costs a third of a second: only the callers that test pay it

    x, y = significant(x), significant(y)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    result = stats.spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)
