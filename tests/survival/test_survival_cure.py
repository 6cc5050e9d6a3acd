"""The mixture cure model (trashfire.survival.cure): on data with a known cured share it
recovers the share within its interval and beats the plain Weibull on AIC; its closed forms
are its survival function's; it ranks by its restricted mean; and its cured share is set
beside each cell's Kaplan-Meier plateau."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from lifelines import KaplanMeierFitter, LogLogisticAFTFitter, WeibullAFTFitter
from omegaconf import OmegaConf
from scipy.integrate import quad
from scipy.special import expit
from scipy.stats import norm

from tests.conftest import ROOT
from tests.helpers.rounding import TRIALS, perturbed_symmetric
from trashfire.core.config import compose
from trashfire.core.stats import covariance_root
from trashfire.survival import analysis, per_model
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival.aft import NewtonWeibullAFTFitter
from trashfire.survival.cure import LogLogisticCureFitter, WeibullCureFitter, cure_table, km_plateau
from trashfire.survival.split import split_groups

CURED, BUDGET = 0.3, 6.0


def cured_samples(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """A share CURED never fails; the rest fail after a Weibull time (shape 1.5, log scale
    0.5 + 0.5 x); every sample is watched until BUDGET, where most of the rest have failed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    cured = rng.random(n) < CURED
    latency = np.exp(0.5 + 0.5 * x) * rng.weibull(1.5, n)
    event = ~cured & (latency < BUDGET)
    return pd.DataFrame({"duration": np.where(event, latency, BUDGET), "event": event.astype(int), "x": x})


@pytest.fixture(scope="module")
def fitted():
    data = cured_samples()
    return data, WeibullCureFitter(penalizer=0.001).fit(data, "duration", "event")


def test_it_recovers_a_known_cured_share_within_its_interval_and_beats_the_weibull_on_aic(fitted):
    data, cure = fitted
    coefficient, se = cure.params_[("cured_", "Intercept")], cure.standard_errors_[("cured_", "Intercept")]
    z = norm.ppf(0.975)
    assert expit(coefficient - z * se) <= CURED <= expit(coefficient + z * se)
    assert abs(cure.params_[("cured_", "x")]) < 3 * cure.standard_errors_[("cured_", "x")]  # x does not move the share
    assert np.exp(cure.params_[("rho_", "Intercept")]) == pytest.approx(1.5, rel=0.1)
    assert cure.params_[("lambda_", "x")] == pytest.approx(0.5, abs=0.1)
    weibull = WeibullAFTFitter(penalizer=0.001).fit(data, "duration", "event")
    assert cure.AIC_ < weibull.AIC_ - 100


def test_its_closed_forms_are_its_survival_functions(fitted):
    data, cure = fitted
    rows = data.head(3)
    survival = cure.predict_survival_function(rows, times=[0.5, 2.0, 50.0])
    cured = cure.cured_fraction(rows).to_numpy()
    assert survival.iloc[-1].to_numpy() == pytest.approx(cured, abs=1e-6)  # it levels off at pi
    for position in range(len(rows)):
        one = rows.iloc[[position]]

        def curve(t, one=one):
            return float(cure.predict_survival_function(one, times=[t]).iloc[0, 0])

        assert cure.restricted_mean(one, 4.0).iloc[0] == pytest.approx(quad(curve, 0, 4.0)[0], rel=1e-6)
        scale, shape = np.exp(cure._linear(one, "lambda_"))[0], np.exp(cure.params_[("rho_", "Intercept")])
        breakable = quad(lambda t, scale=scale, shape=shape: np.exp(-((t / scale) ** shape)), 0, np.inf)[0]
        assert cure.predict_expectation_breakable(one).iloc[0] == pytest.approx(breakable, rel=1e-6)
        for p in (0.9, 0.5):
            t = cure.predict_percentile(one, p=p).iloc[0]
            assert curve(t) == pytest.approx(p, abs=1e-6) if cured[position] < p else t == np.inf
    assert np.isinf(cure.predict_expectation(rows)).all()
    assert np.isinf(cure.predict_percentile(rows, p=cured.min() / 2)).all()  # below the cured share: never


def test_it_ranks_samples_by_its_restricted_mean(fitted):
    data, cure = fitted
    fit = F.Fit("weibull_cure", cure, 0.001, "BFGS", 1)
    ranking = C.survival_ranking(fit, data[["x"]])
    assert ranking == pytest.approx(cure.restricted_mean(data[["x"]], data["duration"].max()).to_numpy())
    assert C.concordance(fit, data) > 0.6  # larger x, longer survival


def test_each_cells_cured_share_stands_beside_its_kaplan_meier_plateau(fitted):
    data, cure = fitted
    cells = data.assign(attack_hash=np.where(data["x"] > 0, "high", "low"), attack_family="pgd linf", defence="none", dataset="digits", weight=1)
    table = cure_table(cure, cells, "attack_hash", ["attack_family", "defence", "dataset"]).set_index("attack_hash")
    for name, part in cells.groupby("attack_hash"):
        km = KaplanMeierFitter().fit(part["duration"], part["event"])
        assert table.loc[name, "km_plateau"] == pytest.approx(float(km.survival_function_.iloc[-1, 0]))
        assert table.loc[name, "cured_fraction"] == pytest.approx(cure.cured_fraction(part[["x"]]).mean())
        assert table.loc[name, "samples"] == len(part)
        assert table.loc[name, "E_T_breakable"] == pytest.approx(cure.predict_expectation_breakable(part[["x"]]).mean())
    assert table["difference"].to_numpy() == pytest.approx((table["cured_fraction"] - table["km_plateau"]).to_numpy())
    assert (table["difference"].abs() < 0.05).all()  # the model's share is the plateau here (the budget suffices)


def test_it_is_a_row_of_table_one_and_writes_its_cured_shares(tmp_path, caplog):
    settings = compose([], conf=ROOT / "conf").survival
    assert "weibull_cure" in settings.fitters and not settings.models.weibull_cure.aft
    data = cured_samples(600).assign(
        train_hash=lambda d: [f"t{i % 10}" for i in range(len(d))], attack_hash=lambda d: [f"c{i % 20}" for i in range(len(d))], weight=1
    )
    data = data.assign(attack_family="pgd linf", defence="none", dataset="digits")
    train, test = split_groups(data, "train_hash", 0.2, 0)
    comparison, fits = analysis.compare(train, test, OmegaConf.merge(settings, {"fitters": ["weibull", "weibull_cure"]}))
    rows = comparison.set_index("fitter")
    assert rows.loc["weibull_cure", "status"] == "fitted" and rows.loc["weibull_cure", "AIC"] < rows.loc["weibull", "AIC"]
    assert rows.loc["weibull_cure", "k"] == 5 and bool(rows.loc["weibull_cure", "converged"])
    assert np.isfinite(rows.loc["weibull_cure", ["concordance", "ICI"]].astype(float)).all()
    assert rows.loc["weibull_cure", ["test_concordance", "test_ICI"]].isna().all()  # never selected (no E[T]): not scored on the test split
    assert "partial likelihood" not in str(rows.loc["weibull_cure", "note"])
    caplog.set_level("INFO", logger=analysis.log.name)
    per_model.write_cure_fractions(fits, data, tmp_path / "cure_fractions.csv")
    written = pd.read_csv(tmp_path / "cure_fractions.csv")
    assert set(written["fitter"]) == {"weibull_cure"} and len(written) == 20
    median = written["difference"].abs().median()
    said = [r.getMessage() for r in caplog.records if r.name == analysis.log.name and "cured share" in r.getMessage()]
    assert said == [f"weibull_cure: cured share against the Kaplan-Meier plateau per cell, median |difference| by family: pgd linf {median:.3f}"]
    per_model.write_cure_fractions(fits, data, tmp_path / "in_flops.csv", unit=1e9)  # fitted in GFLOPs, written in FLOPs
    assert pd.read_csv(tmp_path / "in_flops.csv")["E_T_breakable"].to_numpy() == pytest.approx(written["E_T_breakable"].to_numpy() * 1e9)
    per_model.write_cure_fractions({"weibull": fits["weibull"]}, data, tmp_path / "cure_fractions.csv")
    assert not (tmp_path / "cure_fractions.csv").exists()  # no cure model, no stale table


def test_its_predictions_keep_the_rows_index_and_its_median_is_the_half_percentile(fitted):
    data, cure = fitted
    rows = data.iloc[5:9]  # an index that is not 0..n-1
    for prediction in (
        cure.cured_fraction(rows),
        cure.predict_expectation_breakable(rows),
        cure.predict_expectation(rows),
        cure.predict_percentile(rows, p=0.8),
    ):
        assert list(prediction.index) == [5, 6, 7, 8]
    assert cure.predict_median(rows).equals(cure.predict_percentile(rows, p=0.5))
    assert list(cure.restricted_mean(rows, 2.0).index) == [5, 6, 7, 8]


def test_weighted_rows_give_the_cells_table_of_their_samples(fitted):
    """A row of weight w is w samples: the plateau, the shares and the sample count of a cell of
    weighted rows are those of its rows repeated."""
    data, cure = fitted
    rows = data.head(300).assign(attack_hash=lambda d: np.where(d["x"] > 0, "high", "low"), attack_family="pgd linf", defence="none", dataset="digits")
    weights = np.random.default_rng(1).integers(1, 4, len(rows))
    weighted = rows.assign(weight=weights)
    repeated = rows.loc[rows.index.repeat(weights)].assign(weight=1).reset_index(drop=True)
    labels = ["attack_family", "defence", "dataset"]
    ours, theirs = (cure_table(cure, part, "attack_hash", labels).set_index("attack_hash") for part in (weighted, repeated))
    assert list(ours.index) == ["high", "low"]  # in the cells' order
    pd.testing.assert_frame_equal(ours, theirs, check_exact=False, rtol=1e-12)
    assert ours["samples"].sum() == weights.sum()


def test_it_starts_from_the_plain_weibull_with_half_the_censored_share_cured(fitted):
    """The start is the plain Weibull AFT fit on the same rows (weights and penalizer kept), in
    lifelines' scaled coordinates, with the cured share's intercept at logit(censored / 2) and
    its other coefficients 0: from a cured share of 0 (the Weibull itself) the share's gradient
    can point the wrong way."""
    data, cure = fitted
    noise = np.random.default_rng(5).normal(size=(len(data), 2))
    # covariates out of alphabetical order: lifelines' Weibull sorts its coefficients, the cure model keeps the frame's order
    weighted = data.assign(w=np.where(data["x"] > 0, 2.0, 1.0), z=noise[:, 0], a=noise[:, 1])
    fitter = WeibullCureFitter(penalizer=0.01).fit(weighted, "duration", "event", weights_col="w")
    weibull = NewtonWeibullAFTFitter(penalizer=0.01).fit(weighted, "duration", "event", weights_col="w")
    params, cured = fitter._warm_start
    pd.testing.assert_series_equal(params, weibull.params_)
    censored = weighted.loc[weighted["event"] == 0, "w"].sum() / weighted["w"].sum()
    assert cured == pytest.approx(censored / 2)
    Xs = fitter.regressors.transform_df(weighted[["x", "z", "a"]].assign(duration=1.0, event=1))  # the design lifelines builds
    Xs = {name: Xs[name] for name in ("cured_", "lambda_", "rho_")}
    start = fitter._create_initial_point(None, None, None, None, Xs)
    scales = fitter._norm_std.loc["lambda_"].reindex(Xs["lambda_"].columns)
    assert start["lambda_"] == pytest.approx((weibull.params_.loc["lambda_"].reindex(Xs["lambda_"].columns) * scales).to_numpy())
    assert start["rho_"] == pytest.approx([weibull.params_.loc[("rho_", "Intercept")]])
    cured_start = dict(zip(Xs["cured_"].columns, start["cured_"]))
    assert cured_start == pytest.approx({"x": 0.0, "z": 0.0, "a": 0.0, "Intercept": np.log(cured / (1 - cured))})
    assert list(Xs["lambda_"].columns) != sorted(Xs["lambda_"].columns)  # the order the start must follow
    # where nothing is censored (or no event column says so) the share starts at 0.01, not 0
    assert WeibullCureFitter()._plain_start(data.assign(event=1), "duration", "event", None)[1] == pytest.approx(0.01)
    assert WeibullCureFitter()._plain_start(data[["duration", "x"]], "duration", None, None)[1] == pytest.approx(0.01)
    # an explicit initial point is lifelines' own, and lifelines' other options reach it
    explicit = WeibullCureFitter(penalizer=0.001).fit(data, "duration", "event", initial_point=cure.params_.to_numpy(), timeline=[1.0, 2.0])
    assert explicit._warm_start is None and explicit.log_likelihood_ == pytest.approx(cure.log_likelihood_, rel=1e-8)
    assert list(explicit.timeline) == [1.0, 2.0]


def test_a_weighted_row_fits_as_its_repeated_samples():
    data = cured_samples(600, seed=3)
    doubled = pd.concat([data, data[data["x"] > 0]], ignore_index=True)
    weighted = data.assign(w=np.where(data["x"] > 0, 2.0, 1.0))
    repeated = WeibullCureFitter(penalizer=0.001).fit(doubled, "duration", "event")
    merged = WeibullCureFitter(penalizer=0.001).fit(weighted, "duration", "event", weights_col="w")
    assert merged.params_.to_numpy() == pytest.approx(repeated.params_.to_numpy(), abs=2e-3)  # to the optimiser's tolerance
    assert merged.log_likelihood_ == pytest.approx(repeated.log_likelihood_, rel=1e-4)  # ignoring the weights is ~30% off


def test_it_refuses_a_conditional_prediction_it_cannot_make(fitted):
    """lifelines' `conditional_after` (survival given survival so far) is not in its closed
    forms: each prediction says so instead of ignoring it."""
    data, cure = fitted
    rows = data.head(3)
    for predict in (cure.predict_expectation, cure.predict_median, cure.predict_percentile):
        with pytest.raises(NotImplementedError, match="^conditional_after is not supported by this fitter$"):
            predict(rows, conditional_after=[1.0, 1.0, 1.0])
    assert cure.predict_percentile(rows).equals(cure.predict_percentile(rows, p=0.5))  # the default is the median


def test_the_plateau_is_the_kaplan_meier_survival_after_the_last_time():
    """Where the last sample fails (no one censored after it) the curve ends at 0, not at its step before."""
    assert km_plateau(np.array([1.0, 2.0, 3.0]), np.array([1, 0, 1]), np.ones(3)) == pytest.approx(0.0)
    assert km_plateau(np.array([1.0, 2.0, 3.0, 3.0]), np.array([1, 0, 0, 0]), np.ones(4)) == pytest.approx(0.75)
    # a row stands for its weight's samples: two failures at 1 of four samples
    assert km_plateau(np.array([1.0, 2.0, 3.0]), np.array([1, 0, 0]), np.array([2.0, 1.0, 1.0])) == pytest.approx(0.5)


def singular_copy(cure, covariance: np.ndarray):
    singular = copy.copy(cure)
    singular.variance_matrix_ = pd.DataFrame(covariance, index=cure.variance_matrix_.index, columns=cure.variance_matrix_.columns)
    return singular


def test_parameter_draws_are_the_mean_plus_normals_through_the_covariances_symmetric_root(fitted):
    """draws = params + z @ root, z numpy's normals of the seed, root the symmetric square root
    of lifelines' covariance (root @ root = covariance), for a singular covariance too."""
    _, cure = fitted
    mean, covariance = cure.params_.to_numpy(float), cure.variance_matrix_.to_numpy(float)
    normal = np.random.default_rng(3).standard_normal((40, len(mean)))
    root = covariance_root(covariance)
    np.testing.assert_allclose(root, root.T, rtol=0, atol=1e-15 * np.abs(covariance).max())
    np.testing.assert_allclose(root @ root, covariance, rtol=0, atol=1e-12 * np.abs(covariance).max())
    np.testing.assert_allclose(cure.parameter_draws(40, 3), mean + normal @ root, rtol=0, atol=1e-12)
    factor = np.linalg.cholesky(covariance)[:, :-1]  # one direction fewer: positive semi-definite, singular
    draws = singular_copy(cure, factor @ factor.T).parameter_draws(40, 3)
    assert np.isfinite(draws).all()
    np.testing.assert_allclose(
        np.cov(singular_copy(cure, factor @ factor.T).parameter_draws(20_000, 0).T), factor @ factor.T, atol=0.05 * np.abs(covariance).max()
    )


@pytest.mark.parametrize("singular", [True, False], ids=["singular", "positive-definite"])
def test_parameter_draws_do_not_hang_on_rounding(fitted, singular):
    """Another CPU, simulated: the covariance perturbed by 1e-15 relative noise (a few ulps), 20
    times, gives the same draws to 1e-9 every time. A rank-deficient covariance is the case
    where Cholesky succeeds or fails as rounding decides (issue 58: on an AMD EPYC it
    succeeded, and every draw moved by up to 0.195)."""
    _, cure = fitted
    covariance = cure.variance_matrix_.to_numpy(float)
    if singular:
        factor = np.linalg.cholesky(covariance)[:, :-1]
        covariance = factor @ factor.T
    rng = np.random.default_rng(0)
    draws = singular_copy(cure, covariance).parameter_draws(40, 3)
    for _ in range(TRIALS):
        moved = singular_copy(cure, perturbed_symmetric(covariance, rng)).parameter_draws(40, 3)
        np.testing.assert_allclose(moved, draws, rtol=0, atol=1e-9)


def test_the_cure_table_counts_samples_as_integers(fitted):
    data, cure = fitted
    table = cure_table(cure, data.assign(attack_hash=np.where(data["x"] > 0, "a", "b"), attack_family="pgd linf"), "attack_hash", ["attack_family"])
    assert table["samples"].dtype.kind == "i" and table["samples"].sum() == len(data)
    assert list(table.columns) == ["attack_hash", "attack_family", "samples", "km_plateau", "cured_fraction", "difference", "E_T_breakable"]


def test_the_cells_table_is_in_the_cells_order_whatever_the_rows_order(fitted):
    data, cure = fitted
    rows = data.head(200).assign(attack_hash=lambda d: np.where(d["x"] > 0, "b", "a"), attack_family="pgd linf", defence="none", dataset="digits")
    ordered = rows.sort_values("attack_hash", ascending=False)  # b's rows first
    assert list(cure_table(cure, ordered, "attack_hash", ["attack_family"])["attack_hash"]) == ["a", "b"]


# the log-logistic cure model: the same cured share, a log-logistic latency whose shape is the
# attack family's (SHAPES: the reference family's, then attack_pgd_inf's)
SHAPES = (4.0, 1.5)


def cured_loglogistic_samples(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    """A share CURED never fails; the rest fail after a log-logistic time (log scale 0.5 + 0.5 x,
    shape SHAPES[family]); every sample is watched until BUDGET."""
    rng = np.random.default_rng(seed)
    x, family = rng.normal(size=n), rng.integers(0, 2, n)
    cured = rng.random(n) < CURED
    u = rng.random(n)
    latency = np.exp(0.5 + 0.5 * x) * (u / (1 - u)) ** (1 / np.asarray(SHAPES)[family])
    event = ~cured & (latency < BUDGET)
    return pd.DataFrame({"duration": np.where(event, latency, BUDGET), "event": event.astype(int), "x": x, "attack_pgd_inf": family.astype(float)})


@pytest.fixture(scope="module")
def loglogistic_fitted():
    data = cured_loglogistic_samples()
    return data, LogLogisticCureFitter(penalizer=0.001).fit(data, "duration", "event")


def test_the_loglogistic_cure_recovers_the_share_and_each_familys_shape_and_beats_the_loglogistic(loglogistic_fitted):
    data, cure = loglogistic_fitted
    assert list(cure.params_.loc["beta_"].index) == ["attack_pgd_inf", "Intercept"]  # the shape per family, not per x
    coefficient, se = cure.params_[("cured_", "Intercept")], cure.standard_errors_[("cured_", "Intercept")]
    z = norm.ppf(0.975)
    assert expit(coefficient - z * se) <= CURED <= expit(coefficient + z * se)
    shapes = np.exp(cure.params_[("beta_", "Intercept")]), np.exp(cure.params_[("beta_", "Intercept")] + cure.params_[("beta_", "attack_pgd_inf")])
    assert shapes == pytest.approx(SHAPES, rel=0.1)
    assert cure.params_[("alpha_", "x")] == pytest.approx(0.5, abs=0.1)
    plain = LogLogisticAFTFitter(penalizer=0.001).fit(data, "duration", "event")
    assert cure.AIC_ < plain.AIC_ - 100


def test_the_loglogistic_cures_closed_forms_are_its_survival_functions(loglogistic_fitted):
    data, cure = loglogistic_fitted
    rows = pd.concat([data[data["attack_pgd_inf"] == 0].head(2), data[data["attack_pgd_inf"] == 1].head(2)])
    cured = cure.cured_fraction(rows).to_numpy()
    assert cure.predict_survival_function(rows, times=[1e9]).iloc[-1].to_numpy() == pytest.approx(cured, abs=1e-4)  # it levels off at pi
    for position in range(len(rows)):
        one = rows.iloc[[position]]

        def curve(t, one=one):
            return float(cure.predict_survival_function(one, times=[t]).iloc[0, 0])

        assert cure.restricted_mean(one, 4.0).iloc[0] == pytest.approx(quad(curve, 0, 4.0)[0], rel=1e-6)
        scale, shape = np.exp(cure._linear(one, "alpha_"))[0], np.exp(cure._linear(one, "beta_"))[0]
        breakable = quad(lambda t, scale=scale, shape=shape: 1 / (1 + (t / scale) ** shape), 0, np.inf, limit=200)[0]
        assert cure.predict_expectation_breakable(one).iloc[0] == pytest.approx(breakable, rel=1e-5)
        for p in (0.9, 0.5):
            t = cure.predict_percentile(one, p=p).iloc[0]
            assert curve(t) == pytest.approx(p, abs=1e-6) if cured[position] < p else t == np.inf
        standing = np.array([2.0])
        chance = (curve(2.0) - curve(20.0)) / curve(2.0)
        assert cure.falls_within(one, standing, 10.0)[0, 0] == pytest.approx(chance, rel=1e-9)
    assert np.isinf(cure.predict_expectation(rows)).all()


@pytest.mark.parametrize("shape", [0.5, 0.8, 1.0, 1.7, 12.0])
def test_the_loglogistic_latencys_restricted_mean_is_its_integral_whatever_the_shape(shape):
    """The closed form (Pfaff's transformation of 2F1) against quadrature, on both sides of
    beta = 1 (where the mean turns infinite) and at the degenerate parameters 2F1 meets there."""
    for t in (0.01, 0.7, 3.0, 300.0):
        integral = quad(lambda u: 1 / (1 + (u / 1.3) ** shape), 0, t, points=[1.3] if t > 1.3 else None, limit=200)[0]
        assert LogLogisticCureFitter.latency_restricted_mean(t, 1.3, shape) == pytest.approx(integral, rel=1e-8)
    mean = LogLogisticCureFitter.latency_mean(np.array([1.3]), np.array([shape]))[0]
    assert np.isinf(mean) if shape <= 1 else mean == pytest.approx(quad(lambda u: 1 / (1 + (u / 1.3) ** shape), 0, np.inf, limit=200)[0], rel=1e-6)


def test_the_loglogistic_cures_standard_errors_are_its_likelihoods_curvature_by_name(loglogistic_fitted):
    """Each standard error belongs to its coefficient: the inverse of the log-likelihood's
    Hessian, taken here by finite differences on the model written out by hand, matches
    lifelines' errors by name (lifelines labels its Hessian in the regressors' order; unsorted,
    the errors went to other coefficients)."""
    data, cure = loglogistic_fitted
    design = cure.regressors.transform_df(data[["x", "attack_pgd_inf"]])
    t, event, names = data["duration"].to_numpy(), data["event"].to_numpy() == 1, cure.params_.index

    def log_likelihood(theta):
        part = {name: design[name].to_numpy(float) @ theta[names.get_level_values(0) == name] for name in ("alpha_", "beta_", "cured_")}
        cured, scale, shape = expit(part["cured_"]), np.exp(part["alpha_"]), np.exp(part["beta_"])
        z = (t / scale) ** shape
        density = (1 - cured) * shape / t * z / (1 + z) ** 2
        return np.sum(np.where(event, np.log(density), np.log(cured + (1 - cured) / (1 + z))))

    theta, h = cure.params_.to_numpy(float), 1e-4
    steps = np.eye(len(theta)) * h
    hessian = np.array(
        [
            [
                (log_likelihood(theta + a + b) - log_likelihood(theta + a - b) - log_likelihood(theta - a + b) + log_likelihood(theta - a - b)) / (4 * h * h)
                for b in steps
            ]
            for a in steps
        ]
    )
    errors = pd.Series(np.sqrt(np.diag(np.linalg.inv(-hessian))), index=names)
    assert errors.to_numpy() == pytest.approx(cure.standard_errors_.reindex(names).to_numpy(), rel=0.05)


def test_the_cure_model_is_selected_by_table_is_aic_not_lifelines_penalised_one():
    """One AIC: the unpenalised one of Table I (scoring.score stores it on the fit) picks the
    cure model that gives the budget flag, where lifelines' penalised AIC_ would pick the other."""
    from types import SimpleNamespace

    def cure(penalised_aic, table_aic):
        fit = F.Fit("cure", SimpleNamespace(cure_model=True, AIC_=penalised_aic), 0.001, "Newton-Raphson", 1)
        fit.criteria = {"AIC": table_aic}
        return fit

    fits = {"weibull_cure": cure(100.0, 120.0), "loglogistic_cure": cure(110.0, 90.0)}
    assert per_model.selected_cure(fits) == "loglogistic_cure"


def _torch_latency(model: str):
    """The latency's (log f_u, log S_u) in torch, written from its definition: autograd's reference."""
    import torch

    def weibull(log_t, log_scale, log_shape):
        u = log_shape.exp() * (log_t - log_scale)
        power = u.clamp(max=700.0).exp()
        return log_shape - log_t + u - power, -power

    def loglogistic(log_t, log_scale, log_shape):
        u = log_shape.exp() * (log_t - log_scale)
        spread = torch.logaddexp(torch.zeros_like(u), u)  # exact: softplus is u itself past u = 20
        return log_shape - log_t + u - 2 * spread, -spread

    return {"weibull": weibull, "loglogistic": loglogistic}[model]


@pytest.mark.parametrize("model,cls", [("weibull", WeibullCureFitter), ("loglogistic", LogLogisticCureFitter)])
def test_each_rows_closed_form_derivatives_are_autograds_of_the_mixture_likelihood(model, cls):
    """The Newton fit's per-row log-likelihood and its first and second derivatives in the three
    linear predictors (lifelines' sorted order) equal torch autograd's of the mixture's
    likelihood, log((1 - pi) f_u) or log(pi + (1 - pi) S_u), over etas from deep in the cured
    share to far past the latency's scale."""
    import torch

    from trashfire.survival.newton import torch_row_derivatives

    fitter = cls()
    names = ("cured_", fitter.scale_, fitter.shape_)
    rng = np.random.default_rng(3)
    log_t, event = rng.normal(0.0, 3.0, 4000), rng.random(4000) < 0.4
    spreads = {"cured_": 4.0, fitter.scale_: 3.0, fitter.shape_: 1.0}  # rho within e^±4: torch's exp(u) stays finite
    etas = [rng.normal(0.0, spreads[name], 4000) for name in sorted(names)]
    latency = _torch_latency(model)

    def rows(*linear):
        cured, log_scale, log_shape = (linear[sorted(names).index(name)] for name in names)
        log_density, log_survival = latency(torch.from_numpy(log_t), log_scale, log_shape)
        log_breakable, log_cured = torch.nn.functional.logsigmoid(-cured), torch.nn.functional.logsigmoid(cured)
        breakable_standing = log_breakable + log_survival
        top = torch.maximum(log_cured, breakable_standing).detach()  # logaddexp's second derivative is inf / inf where b << a
        standing = top + torch.log(torch.exp(log_cured - top) + torch.exp(breakable_standing - top))
        return torch.where(torch.from_numpy(event), log_breakable + log_density, standing)

    expected = torch_row_derivatives(rows)(etas, 2)
    for got, want in zip(fitter.row_derivatives(log_t, event, etas, 2), expected):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert fitter.row_derivatives(log_t, event, etas, 0)[0] == pytest.approx(expected[0], rel=1e-12)
