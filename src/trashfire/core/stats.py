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


def spearman(x, y) -> tuple[float, float]:
    """rho and p, NaN for fewer than 3 points or a constant column (scipy would warn)."""
    from scipy import stats  # scipy.stats costs a third of a second: only the callers that test pay it

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    result = stats.spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)
