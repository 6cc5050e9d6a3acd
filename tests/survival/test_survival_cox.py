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


@pytest.mark.parametrize("block", [1 << 18, 16, 1])
@pytest.mark.parametrize("seed", range(8))
def test_efron_values_are_lifelines_with_ties_and_weights(seed, block):
    rng = np.random.default_rng(seed)
    n, p = int(rng.integers(5, 300)), 3
    X = rng.normal(size=(n, p))
    T = np.sort(rng.integers(0, int(rng.integers(2, 30)), n).astype(float))  # many tied times
    E = rng.random(n) < rng.uniform(0.3, 0.9)
    weights = rng.integers(1, 4, n).astype(float)
    beta = rng.normal(size=p) * 0.5
    theirs = SemiParametricPHFitter()._get_efron_values_single(pd.DataFrame(X), pd.Series(T), pd.Series(E), pd.Series(weights), None, beta)
    for ours, reference in zip(efron(X, T, E, weights, beta, block), theirs):  # blocks of rows from the last back, tied times never split
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


@pytest.mark.parametrize("block", [1 << 18, 7, 1])
def test_cluster_sums_of_score_residuals_a_block_at_a_time_are_the_whole_arrays(block):
    """Past ROW_BLOCK samples the Cox sandwich's per-cluster scores go a block of rows at a
    time (ties never split): the sums of fitters.cox_score_residuals, to rounding."""
    from trashfire.survival import fitters as F
    from trashfire.survival.cox import cluster_score_sums

    rng = np.random.default_rng(3)
    n = 400
    data = pd.DataFrame(
        {"duration": rng.integers(1, 40, n).astype(float), "event": (rng.random(n) < 0.7).astype(int), "a": rng.normal(size=n), "b": rng.normal(size=n)}
    )
    data["weight"] = rng.integers(1, 3, n).astype(float)
    fitter = CoxPHFitter().fit(data, "duration", "event", weights_col="weight")
    clusters = rng.integers(0, 9, n)
    whole = pd.DataFrame(F.cox_score_residuals(fitter, data)).groupby(clusters).sum().to_numpy()
    codes, names = pd.factorize(clusters, sort=True)
    arrays = (data["duration"].to_numpy(float), data["event"].to_numpy(float), data["weight"].to_numpy(float))
    blocked = cluster_score_sums(fitter.params_.to_numpy(float), data[["a", "b"]].to_numpy(float), *arrays, codes, len(names), block)
    np.testing.assert_allclose(blocked, whole, rtol=1e-9, atol=1e-10)


def test_rows_per_sample_in_time_order_are_lifelines_sort_of_them_which_then_copies_nothing():
    """Cox PH's fit and check take the rows per sample already in lifelines' order (its stable
    sort by duration, then event, labels included), so that its own sort is a view at 10^7 rows."""
    from trashfire.survival import fitters as F

    rng = np.random.default_rng(5)
    n = 300
    data = pd.DataFrame({"duration": rng.integers(1, 20, n).astype(float), "event": (rng.random(n) < 0.6).astype("int8"), "a": rng.normal(size=n)})
    data["weight"] = rng.integers(1, 4, n).astype("int8")
    data.index = rng.permutation(n) + 1000  # labels of a split's rows
    ordered = F.per_sample(data, in_time_order=True)
    pd.testing.assert_frame_equal(ordered, F.per_sample(data).sort_values(["duration", "event"]))
    with pd.option_context("mode.copy_on_write", True):
        resorted = ordered.sort_values(["duration", "event"])
        assert np.shares_memory(resorted["a"].to_numpy(), ordered["a"].to_numpy())
