"""The vectorised Efron computation (trashfire.survival.cox) against lifelines' own loop:
the same partial log-likelihood, gradient and Hessian at any coefficients, and the same fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from lifelines import CoxPHFitter
from lifelines.datasets import load_rossi
from lifelines.fitters.coxph_fitter import SemiParametricPHFitter

from trashfire.survival.cox import FastCoxPHFitter, efron


@pytest.mark.parametrize("seed", range(8))
def test_efron_values_are_lifelines_with_ties_and_weights(seed):
    rng = np.random.default_rng(seed)
    n, p = int(rng.integers(5, 300)), 3
    X = rng.normal(size=(n, p))
    T = np.sort(rng.integers(0, int(rng.integers(2, 30)), n).astype(float))  # many tied times
    E = rng.random(n) < rng.uniform(0.3, 0.9)
    weights = rng.integers(1, 4, n).astype(float)
    beta = rng.normal(size=p) * 0.5
    theirs = SemiParametricPHFitter()._get_efron_values_single(pd.DataFrame(X), pd.Series(T), pd.Series(E), pd.Series(weights), None, beta)
    for ours, reference in zip(efron(X, T, E, weights, beta), theirs):
        np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=1e-9)


def test_a_fit_is_lifelines_fit():
    rossi = load_rossi()
    ours = FastCoxPHFitter(penalizer=0.001).fit(rossi, "week", "arrest")
    theirs = CoxPHFitter(penalizer=0.001).fit(rossi, "week", "arrest")
    pd.testing.assert_series_equal(ours.params_, theirs.params_, rtol=1e-9)
    pd.testing.assert_series_equal(ours.standard_errors_, theirs.standard_errors_, rtol=1e-9)
    assert ours.log_likelihood_ == pytest.approx(theirs.log_likelihood_, rel=1e-12)
    assert 2 <= ours.newton_iterations <= 10  # one Efron evaluation per Newton step, for Table I
    rows = rossi.head(20)
    np.testing.assert_allclose(ours.predict_partial_hazard(rows), theirs.predict_partial_hazard(rows), rtol=1e-9)
    np.testing.assert_allclose(ours.predict_survival_function(rows, times=[10, 30]), theirs.predict_survival_function(rows, times=[10, 30]), rtol=1e-9)
