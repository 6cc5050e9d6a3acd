"""The fitters build lifelines' design themselves (survival/mappings.py): the same columns,
order, index and float64 values as lifelines' transform_df, for every fitter of the default
configuration, after a pickle round trip too (models.pkl, the fit workers)."""

import pickle

import numpy as np
import pandas as pd
import pytest
from lifelines.utils import CovariateParameterMappings

from tests.conftest import ROOT
from tests.survival.test_survival_stage import per_sample_data
from trashfire.core.config import compose, validate
from trashfire.survival import analysis
from trashfire.survival import fitters as F
from trashfire.survival.mappings import FastDesignMixin, FastMappings
from trashfire.survival.split import split_groups

SETTINGS = validate(compose([], conf=ROOT / "conf")).survival


@pytest.fixture(scope="module")
def train():
    return analysis.usable_covariates(*split_groups(per_sample_data(n_models=6), "train_hash", 0.2, 0))[0]


@pytest.mark.parametrize("name", [name for name in SETTINGS.fitters if name != "cox"])
def test_the_design_is_lifelines_own(train, name):
    fitter = F.fit_one(name, SETTINGS.models[name], train).fitter
    assert isinstance(fitter.regressors, FastMappings)
    rows = F.covariates_of(train).sample(frac=0.5, random_state=0)  # any rows, in any order: the index travels
    ours, lifelines = fitter.regressors.transform_df(rows), CovariateParameterMappings.transform_df(fitter.regressors, rows)
    pd.testing.assert_frame_equal(ours, lifelines, check_exact=True)
    reloaded = pickle.loads(pickle.dumps(fitter))
    assert isinstance(reloaded.regressors, FastMappings)
    pd.testing.assert_frame_equal(reloaded.regressors.transform_df(rows), lifelines, check_exact=True)
    assert np.array_equal(reloaded.predict_median(rows).to_numpy(), fitter.predict_median(rows).to_numpy())


def test_a_formula_it_does_not_know_goes_to_lifelines():
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0.5, 0.1, 0.2]})
    mappings = FastMappings.of(CovariateParameterMappings({"mu_": "x + np.log(y)", "sigma_": "1"}, frame, force_intercept=True))
    assert mappings.columns_of("mu_") is None and mappings.columns_of("sigma_") == [("Intercept", True)]
    pd.testing.assert_frame_equal(mappings.transform_df(frame), CovariateParameterMappings.transform_df(mappings, frame), check_exact=True)


@pytest.mark.parametrize("name", ["weibull", "lognormal", "loglogistic", "exponential", "gengamma", "weibull_cure"])
def test_a_fit_past_row_block_without_lifelines_copies_is_lifelines_fit(train, name, monkeypatch):
    """Past ROW_BLOCK rows the fit runs lifelines' steps on its own design, normalised in place
    (mappings._frugal_fit; lifelines' AFT fitters reach it through aft.FrugalFit): the same
    optimum, errors, predictions and summary as lifelines' path."""
    spec = SETTINGS.models[name]
    theirs = F.fit_one(name, spec, train).fitter
    monkeypatch.setattr("trashfire.survival.mappings.ROW_BLOCK", 100)
    calls = []
    original = FastDesignMixin._frugal_fit
    monkeypatch.setattr(FastDesignMixin, "_frugal_fit", lambda self, *args: calls.append(len(args[1])) or original(self, *args))
    ours = F.fit_one(name, spec, train).fitter
    assert len(train) in calls  # the frugal path ran on the training rows
    assert ours.log_likelihood_ == pytest.approx(theirs.log_likelihood_, rel=1e-12)
    pd.testing.assert_series_equal(ours.params_, theirs.params_, rtol=1e-8, atol=1e-10)
    pd.testing.assert_series_equal(ours.standard_errors_, theirs.standard_errors_, rtol=1e-6)
    pd.testing.assert_series_equal(ours._norm_std, theirs._norm_std, rtol=1e-12)  # a column's sum in 1-d or 2-d order: a CPU's SIMD may differ in the last bits
    assert ours._cols_to_not_penalize.equals(theirs._cols_to_not_penalize) and ours.timeline.tolist() == theirs.timeline.tolist()
    rows = F.covariates_of(train)
    np.testing.assert_allclose(ours.predict_median(rows).to_numpy(), theirs.predict_median(rows).to_numpy(), rtol=1e-8)
    assert ours.summary.index.equals(theirs.summary.index) and ours.AIC_ == pytest.approx(theirs.AIC_, rel=1e-12)
    if hasattr(theirs, "_predicted_median"):  # its training concordance (print_summary's) from the medians, predicted a block at a time
        np.testing.assert_allclose(ours._predicted_median.to_numpy(), theirs._predicted_median.to_numpy(), rtol=1e-8)
        assert ours.concordance_index_ == pytest.approx(theirs.concordance_index_, abs=1e-12)
