"""Survival analysis: the fitters against lifelines' own numbers on its rossi data, and the
stage's diagnostics, retries and outputs (the survival data set: tests/survival/test_survival_data.py)."""

import contextlib
import io
import json
import math
import subprocess
import sys
import textwrap
import warnings
from copy import deepcopy

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from lifelines import (
    CoxPHFitter,
    ExponentialFitter,
    GeneralizedGammaRegressionFitter,
    KaplanMeierFitter,
    LogLogisticAFTFitter,
    LogNormalAFTFitter,
    WeibullAFTFitter,
)
from lifelines.calibration import survival_probability_calibration
from lifelines.datasets import load_rossi
from lifelines.exceptions import ApproximationWarning, ConvergenceError, ConvergenceWarning
from omegaconf import OmegaConf, open_dict
from PIL import Image
from scipy import stats
from scipy.optimize import minimize

from tests.conftest import DROP, ROOT, config_refusal, stage_cfg, tiny_overrides
from trashfire.core.checks import run_registered
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError, DataError
from trashfire.core.records import write_table
from trashfire.params import composed_yaml
from trashfire.stages import survival
from trashfire.survival import analysis, expected_time, figures, saved_models, scoring
from trashfire.survival import checks as survival_checks
from trashfire.survival import competing as competing_risks
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival.split import split_groups
from trashfire.tables.survival_data import LABEL_COLUMNS

ROSSI_COVARIATES = ["fin", "age", "race", "wexp", "mar", "paro", "prio"]
LIFELINES_CLASSES = {
    "weibull": WeibullAFTFitter,
    "lognormal": LogNormalAFTFitter,
    "loglogistic": LogLogisticAFTFitter,
    "cox": CoxPHFitter,
}
# k by hand: 7 covariates + intercept on the location, plus each ancillary parameter's intercept
K_ON_ROSSI = {"weibull": 9, "lognormal": 9, "loglogistic": 9, "exponential": 8, "gengamma": 10, "cox": 7}


@pytest.fixture(scope="module")
def settings():
    return validate(compose([], conf=ROOT / "conf")).survival


@pytest.fixture(scope="module")
def rossi():
    return load_rossi().rename(columns={"week": "duration", "arrest": "event"})


@pytest.fixture(scope="module")
def rossi_fits(settings, rossi):
    return {name: F.fit_one(name, settings.models[name], rossi, settings.retries) for name in settings.fitters}


@pytest.mark.parametrize("name", ["weibull", "lognormal", "loglogistic", "cox"])
def test_fits_reproduce_lifelines_on_rossi(settings, rossi, rossi_fits, name):
    penalizer = settings.models[name].fitter.penalizer
    reference = LIFELINES_CLASSES[name](penalizer=penalizer).fit(load_rossi(), "week", "arrest")
    fit = rossi_fits[name]
    assert fit.attempts == 1
    # the same optimum: the Newton fits reach it, where lifelines' optimiser may stop up to 1e-7 short
    assert fit.fitter.log_likelihood_ >= reference.log_likelihood_ - 1e-9 * abs(reference.log_likelihood_)
    assert fit.fitter.log_likelihood_ == pytest.approx(reference.log_likelihood_, rel=1e-6)
    # AIC and BIC use the unpenalised log-likelihood: lifelines' score() x n
    unpenalised = reference.score(load_rossi(), scoring_method="log_likelihood") * 432
    assert F.log_likelihood(fit, rossi) == pytest.approx(unpenalised, rel=1e-6)
    assert C.concordance(fit, rossi) == pytest.approx(fit.fitter.concordance_index_, abs=1e-12)  # lifelines' own of this fit


@pytest.mark.parametrize("name", list(LIFELINES_CLASSES) + ["exponential", "gengamma"])
def test_unpenalised_fits_report_lifelines_log_likelihood(settings, rossi, name):
    spec = OmegaConf.merge(settings.models[name], {"fitter": {"penalizer": 0.0}})
    fit = F.fit_one(name, spec, rossi)
    assert F.log_likelihood(fit, rossi) == pytest.approx(fit.fitter.log_likelihood_, rel=1e-9)


def test_generalised_gamma_is_lifelines_regression_fitter_with_covariates_on_mu(settings, rossi, rossi_fits):
    reference = GeneralizedGammaRegressionFitter(penalizer=settings.models.gengamma.fitter.penalizer).fit(
        load_rossi().assign(Intercept=1.0),
        "week",
        "arrest",
        regressors={"lambda_": ["Intercept"], "mu_": ROSSI_COVARIATES + ["Intercept"], "sigma_": ["Intercept"]},
        timeline=np.geomspace(1, 2000, 5_000),  # lifelines reads medians off this curve; rossi's 52 weeks leave most infinite
    )
    fit = rossi_fits["gengamma"]
    assert fit.fitter.log_likelihood_ == pytest.approx(reference.log_likelihood_, rel=1e-9)
    # ours starts next to the log-normal fit, lifelines from its two default points: the same
    # optimum, the coefficients within BFGS's stopping tolerance
    assert fit.fitter.params_.to_numpy() == pytest.approx(reference.params_.to_numpy(), rel=1e-3)
    # lifelines' GG median is read off its survival curve; ours is exact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximationWarning)  # what this comparison is about
        lifelines_c = reference.score(load_rossi().assign(Intercept=1.0), scoring_method="concordance_index")
    assert C.concordance(fit, rossi) == pytest.approx(lifelines_c, abs=1e-3)
    assert C.concordance(fit, rossi) == pytest.approx(fit.fitter.concordance_index_, abs=1e-12)


def test_exponential_without_covariates_is_lifelines_exponential_fitter(rossi):
    spec = OmegaConf.create({"fitter": {"_target_": "trashfire.survival.fitters.ExponentialAFTFitter", "penalizer": 0.0}})
    fit = F.fit_one("exponential", spec, rossi[["duration", "event"]])
    reference = ExponentialFitter().fit(rossi["duration"], rossi["event"])
    assert fit.fitter.log_likelihood_ == pytest.approx(reference.log_likelihood_, rel=1e-9)
    mean = F.expected_time(fit, pd.DataFrame(index=[0]))[0]
    assert mean == pytest.approx(reference.lambda_, rel=1e-5)  # lifelines' lambda_ is the mean


def weibull_log_likelihood(beta, log_rho, x, t, d):
    """TRASHFIRE III-B.2 by hand: S(t) = exp(-(t/lambda)^rho), lambda = exp(x b)."""
    log_lambda = x @ beta
    z = np.log(t) - log_lambda
    rho = np.exp(log_rho)
    return np.sum(d * (log_rho - log_lambda + (rho - 1) * z) - np.exp(rho * z))


def test_exponential_equals_a_weibull_fit_with_shape_one(rossi):
    spec = OmegaConf.create({"fitter": {"_target_": "trashfire.survival.fitters.ExponentialAFTFitter", "penalizer": 0.0}})
    fit = F.fit_one("exponential", spec, rossi)
    x = np.column_stack([rossi[ROSSI_COVARIATES].to_numpy(float), np.ones(len(rossi))])
    t, d = rossi["duration"].to_numpy(float), rossi["event"].to_numpy(float)
    start = np.r_[np.zeros(len(ROSSI_COVARIATES)), np.log(t.mean())]
    shape_one = minimize(lambda b: -weibull_log_likelihood(b, 0.0, x, t, d), start, method="BFGS", options={"gtol": 1e-8})
    ours = fit.fitter.params_.loc["lambda_"][ROSSI_COVARIATES + ["Intercept"]].to_numpy()
    assert ours == pytest.approx(shape_one.x, abs=2e-4)
    assert fit.fitter.log_likelihood_ == pytest.approx(-shape_one.fun, rel=1e-8)
    assert C.concordance(fit, rossi) == pytest.approx(fit.fitter.concordance_index_, abs=1e-12)  # lifelines' own, from our median
    # the hand-written likelihood is lifelines' Weibull AFT: with the shape free it reaches the same maximum
    free = minimize(lambda p: -weibull_log_likelihood(p[:-1], p[-1], x, t, d), np.r_[start, 0.0], method="BFGS")
    assert -free.fun == pytest.approx(WeibullAFTFitter().fit(load_rossi(), "week", "arrest").log_likelihood_, rel=1e-6)


@pytest.mark.parametrize("name", list(K_ON_ROSSI))
def test_bic_counts_every_estimated_coefficient(rossi, rossi_fits, name):
    fit = rossi_fits[name]
    scores = F.information_criteria(fit, rossi)
    assert (scores["k"], scores["n"]) == (K_ON_ROSSI[name], 432)
    assert scores["BIC"] == pytest.approx(-2 * scores["log_likelihood"] + K_ON_ROSSI[name] * math.log(432))
    assert scores["AIC"] == pytest.approx(-2 * scores["log_likelihood"] + 2 * K_ON_ROSSI[name])
    if name != "cox":  # lifelines' BIC_ counts parameter names, not coefficients
        assert fit.fitter.BIC_ < scores["BIC"]


@pytest.mark.parametrize("name", ["exponential", "gengamma"])
def test_closed_form_mean_and_median_match_the_survival_curve(rossi, rossi_fits, name):
    fitter = rossi_fits[name].fitter
    covariates = rossi[ROSSI_COVARIATES].head(4)
    times = np.geomspace(1e-4, 1e6, 400_001)
    curves = fitter.predict_survival_function(covariates, times=times)
    integrated = np.trapezoid(curves.to_numpy().T, times)
    assert fitter.predict_expectation(covariates).to_numpy() == pytest.approx(integrated, rel=1e-3)
    medians = fitter.predict_median(covariates).to_numpy()
    at_median = [fitter.predict_survival_function(covariates.iloc[[i]], times=[m]).iloc[0, 0] for i, m in enumerate(medians)]
    assert at_median == pytest.approx([0.5] * 4, abs=1e-6)


@pytest.mark.parametrize("name", ["exponential", "gengamma"])
def test_closed_form_predictions_keep_the_rows_index_and_refuse_conditioning(rossi, rossi_fits, name):
    fitter = rossi_fits[name].fitter
    covariates = rossi[ROSSI_COVARIATES].iloc[[7, 3, 11]]
    for predict in (fitter.predict_expectation, fitter.predict_median, fitter.predict_percentile):
        assert list(predict(covariates).index) == [7, 3, 11]
        # lifelines' fitters condition on survival so far; ours would silently not
        with pytest.raises(NotImplementedError, match="^conditional_after is not supported by this fitter$"):
            predict(covariates, conditional_after=[1.0, 1.0, 1.0])


def generalised_gamma_with(fitter, lam, sigma, mu):
    """A copy of a fitted generalised gamma with these shapes and location, covariates' coefficients 0."""
    copy = deepcopy(fitter)
    params = copy.params_ * 0.0
    params[("lambda_", "Intercept")], params[("sigma_", "Intercept")], params[("mu_", "Intercept")] = lam, math.log(sigma), mu
    copy.params_ = params
    return copy


# lambda > 1, 0 < lambda < 1 and lambda < 0 (S from the lower incomplete gamma); the last two
# with a mean that is finite just above 1/lambda^2 + sigma/lambda = 0, and infinite below
@pytest.mark.parametrize(("lam", "sigma"), [(2.0, 1.0), (0.5, 0.8), (-0.5, 0.3), (-0.5, 1.8), (-1.0, 2.0)])
def test_generalised_gamma_mean_and_percentiles_are_scipys_gengamma(rossi, rossi_fits, lam, sigma):
    fitter = generalised_gamma_with(rossi_fits["gengamma"].fitter, lam, sigma, mu=1.5)
    covariates = rossi[ROSSI_COVARIATES].iloc[[5, 2]]
    # log T = mu + sigma/lambda log(lambda^2 U), U ~ Gamma(1/lambda^2): scipy's gengamma, c = lambda/sigma
    reference = stats.gengamma(a=1 / lam**2, c=lam / sigma, scale=math.exp(1.5) * (lam**2) ** (sigma / lam))
    for p in (0.1, 0.5, 0.9):
        assert fitter.predict_percentile(covariates, p=p).to_numpy() == pytest.approx([reference.isf(p)] * 2, rel=1e-9)
    assert fitter.predict_percentile(covariates).to_numpy() == pytest.approx([reference.median()] * 2, rel=1e-9)
    mean = fitter.predict_expectation(covariates)
    assert list(mean.index) == [5, 2] and mean.dtype == float
    assert mean.to_numpy() == pytest.approx([reference.mean()] * 2, rel=1e-9)


def generalised_gamma_samples(n=300, seed=0):
    """Survival in whole time units from a generalised gamma (lambda 0.5) in two covariates,
    censored at 8: few distinct rows, so that samples merge into weighted rows."""
    rng = np.random.default_rng(seed)
    x, z = rng.integers(0, 3, n).astype(float), rng.integers(0, 2, n).astype(float)
    lam, sigma = 0.5, 0.6
    t = np.exp(1.0 + 0.4 * x - 0.3 * z + sigma / lam * np.log(lam**2 * rng.gamma(1 / lam**2, size=n)))
    t = np.maximum(np.round(t), 1.0)
    return pd.DataFrame({"duration": np.minimum(t, 8.0), "event": (t < 8).astype(int), "x": x, "z": z})


def merged(samples):
    return samples.groupby(list(samples.columns)).size().rename("weight").reset_index()


def test_weighted_rows_fit_the_generalised_gamma_as_one_row_per_sample(settings):
    compact = merged(generalised_gamma_samples())
    # unpenalised: lifelines scales the penalty by each covariate's SD over rows, not samples
    spec = OmegaConf.merge(settings.models.gengamma, {"fitter": {"penalizer": 0.0}})
    fits = {form: F.fit_one("gengamma", spec, d).fitter for form, d in (("compact", compact), ("expanded", F.per_sample(compact)))}
    assert len(compact) < 50 and fits["compact"].log_likelihood_ == pytest.approx(fits["expanded"].log_likelihood_, rel=1e-9)
    # the same likelihood from the same start (the log-normal fit of the same samples): the
    # same path, to BFGS's last digits; a start that ignored the weights ends 1e-4 away
    assert fits["compact"].params_.to_numpy() == pytest.approx(fits["expanded"].params_.to_numpy(), abs=1e-5)


def test_weighted_rows_fit_the_exponential_as_one_row_per_sample():
    compact = merged(generalised_gamma_samples())
    spec = OmegaConf.create({"fitter": {"_target_": "trashfire.survival.fitters.ExponentialAFTFitter", "penalizer": 0.0}})
    fits = {form: F.fit_one("exponential", spec, d).fitter for form, d in (("compact", compact), ("expanded", F.per_sample(compact)))}
    assert list(fits["compact"].params_.index.get_level_values("covariate")) == ["x", "z", "Intercept"]  # the weight is no covariate
    assert fits["compact"].params_.to_numpy() == pytest.approx(fits["expanded"].params_.to_numpy(), abs=1e-6)
    assert fits["compact"].log_likelihood_ == pytest.approx(fits["expanded"].log_likelihood_, rel=1e-9)


def test_the_exponential_takes_the_fit_options_and_its_default_percentile_is_the_median(rossi, rossi_fits):
    with pytest.raises(ConvergenceError):  # lifelines stops at BFGS's one iteration
        F.ExponentialAFTFitter(penalizer=0.0).fit(rossi, "duration", "event", fit_options={"maxiter": 1})
    fitter = rossi_fits["exponential"].fitter
    covariates = rossi[ROSSI_COVARIATES].head(3)
    assert fitter.predict_percentile(covariates).to_numpy() == pytest.approx(fitter.predict_median(covariates).to_numpy(), rel=1e-12)


def test_weighted_rows_give_the_cluster_robust_errors_of_one_row_per_sample():
    compact = merged(generalised_gamma_samples())  # rows of up to dozens of samples
    expanded = F.per_sample(compact)
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    fit = F.fit_one("weibull", spec, compact)
    clusters = {form: (d["x"] * 2 + d["z"]).to_numpy() for form, d in (("compact", compact), ("expanded", expanded))}
    ours = F.cluster_robust_se(fit, compact, clusters["compact"])
    assert ours.to_numpy() == pytest.approx(F.cluster_robust_se(fit, expanded, clusters["expanded"]).to_numpy(), rel=1e-8)


def test_the_generalised_gamma_starts_at_the_log_normal_fit_and_needs_fewer_iterations(settings, rossi, rossi_fits):
    # on rossi lifelines' two default starts take 40 BFGS iterations, ours 25; the log-normal
    # fit without the censoring, or with its coefficients unscaled or shuffled, 36 to 51
    spec = OmegaConf.merge(settings.models.gengamma, {"fit_options": {"maxiter": 30}})
    fit = F.fit_one("gengamma", spec, rossi)
    assert fit.fitter.log_likelihood_ == pytest.approx(rossi_fits["gengamma"].fitter.log_likelihood_, rel=1e-9)


def test_a_given_initial_point_fits_the_generalised_gamma_to_lifelines_regression_fitters_optimum():
    """Newton-Raphson from lifelines' start reaches the optimum lifelines' BFGS stops near: the
    same coefficients to its tolerance, a log-likelihood no lower, the same standard errors."""
    samples = merged(generalised_gamma_samples())
    start = np.array([0.5, 0.0, 0.0, 1.0, 0.0])  # lambda_, mu_ (x, z, Intercept), sigma_
    ours = F.GeneralizedGammaAFTFitter().fit(samples, "duration", "event", weights_col="weight", initial_point=start)
    reference = GeneralizedGammaRegressionFitter().fit(
        samples.assign(Intercept=1.0),
        "duration",
        "event",
        weights_col="weight",
        regressors={"lambda_": ["Intercept"], "mu_": ["x", "z", "Intercept"], "sigma_": ["Intercept"]},
        initial_point=start,
    )
    assert ours.params_.to_numpy() == pytest.approx(reference.params_.to_numpy(), abs=1e-4)
    assert ours.standard_errors_.to_numpy() == pytest.approx(reference.standard_errors_.to_numpy(), rel=1e-3)
    assert reference.log_likelihood_ - 1e-9 <= ours.log_likelihood_ <= reference.log_likelihood_ + 1e-6
    assert ours.newton_iterations is not None and np.abs(ours.newton_gradient_).max() < 1e-5
    # and lifelines' null model of the same weighted samples, which our warm start skips
    ours_test, reference_test = ours.log_likelihood_ratio_test(), reference.log_likelihood_ratio_test()
    assert ours_test.test_statistic == pytest.approx(reference_test.test_statistic, rel=1e-6)


def test_a_fitted_generalised_gamma_prints_lifelines_summary(settings, rossi, capsys):
    """Fitted here, not taken from the module's fits: the warm start skips lifelines' null
    model, and its stand-in must keep print_summary's likelihood-ratio line working (mutmut
    counts only the tests that call a function, and the shared fits ran in another test)."""
    fit = F.fit_one("gengamma", settings.models["gengamma"], rossi, settings.retries)
    fit.fitter.print_summary()
    printed = capsys.readouterr().out
    assert "Concordance = " in printed and all(name in printed for name in ROSSI_COVARIATES)
    assert "log-likelihood ratio test = nan" in printed  # no null model was fitted: not a number, not a made-up one


# --- the stage on synthetic cells ------------------------------------------------------------


def synthetic_cells(n_cells=60, samples=20, seed=0):
    """Attack cells whose survival follows a Weibull AFT in epochs, depth and an attack dummy,
    in the survival data set's columns (two attack cells per trained model; weighted rows)."""
    rng = np.random.default_rng(seed)
    epochs = rng.integers(1, 6, n_cells).astype(float)
    depth = rng.choice([18.0, 34.0], n_cells)
    pgd = rng.integers(0, 2, n_cells).astype(float)
    t_attack = np.exp(-5 + 0.3 * pgd + rng.normal(0, 0.2, n_cells))
    scale = np.exp(-4.5 + 0.15 * epochs + 0.02 * depth - 0.8 * pgd)
    failed = [(rng.weibull(1.5, samples) * s < t).sum() for s, t in zip(scale, t_attack)]
    rows = []
    for cell, (t, n_failed) in enumerate(zip(t_attack, failed)):
        labels = {
            "attack_hash": f"c{cell}",
            "train_hash": f"t{cell // 2}",
            "model_hash": f"m{cell // 2}",
            "attack_family": "pgd_inf" if pgd[cell] else "fgm_inf",
            "defence": "none",
            "dataset": "digits",
        }
        covariates = {"epochs": epochs[cell], "depth": depth[cell], "attack_pgd_inf": pgd[cell]}
        rows += [
            {**labels, "duration": t, "event": 1, "weight": n_failed, **covariates},
            {**labels, "duration": t, "event": 0, "weight": samples - n_failed, **covariates},
        ]
    return pd.DataFrame(rows).query("weight > 0").reset_index(drop=True)


def test_weighted_rows_score_as_one_row_per_sample(tmp_path, settings):
    compact = synthetic_cells(n_cells=30)
    expanded = F.per_sample(compact)
    train = {form: d.drop(columns=LABEL_COLUMNS) for form, d in (("compact", compact), ("expanded", expanded))}
    for name in ("weibull", "cox"):
        fits = {form: F.fit_one(name, settings.models[name], d) for form, d in train.items()}
        scores = {form: F.information_criteria(fits[form], d) for form, d in train.items()}
        assert scores["compact"]["BIC"] == pytest.approx(scores["expanded"]["BIC"], rel=1e-5)
        assert C.concordance(fits["compact"], train["compact"]) == pytest.approx(C.concordance(fits["expanded"], train["expanded"]), abs=1e-6)
    plt.close("all")


@pytest.mark.parametrize("name", ["weibull", "cox"])
def test_weighted_calibration_is_lifelines_calibration_on_one_row_per_sample(settings, name):
    data = synthetic_cells(n_cells=30).drop(columns=LABEL_COLUMNS)
    fit = F.fit_one(name, settings.models[name], data)
    t0 = float(np.median(np.repeat(data["duration"], data["weight"])))
    ours = F.calibration(fit, data, t0)
    _, ax = plt.subplots()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ici, e50 = survival_probability_calibration(fit.fitter, F.per_sample(data), t0=t0, ax=ax)
    plt.close("all")
    assert ours == pytest.approx((ici, e50), abs=2e-4)


def test_calibration_is_lifelines_with_its_penalised_spline_on_rossi(rossi):
    """One row per sample: lifelines' own curve (its CRC spline with penalizer 1e-6), to 1e-6
    (the two agree to 1e-12 on one machine; a spline without the penalty moves ICI by 3%)."""
    fit = F.Fit("weibull", WeibullAFTFitter().fit(rossi, "duration", "event"), 0.0, "BFGS", 1)
    ours = F.calibration(fit, rossi, 30.0)
    _, ax = plt.subplots()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        _, ici, e50 = survival_probability_calibration(fit.fitter, rossi, t0=30.0, ax=ax)
    plt.close("all")
    assert ours == pytest.approx((ici, e50), rel=1e-6)


def only(settings, *fitters, **changes):
    return OmegaConf.merge(settings, {"fitters": list(fitters), **changes})


def test_constant_covariates_leave_intercept_only_models_and_a_cox_note(settings):
    data = synthetic_cells().assign(epochs=3.0, depth=18.0, attack_pgd_inf=0.0)
    train, test = analysis.usable_covariates(*split_groups(data, "train_hash", 0.2, 0))
    assert list(F.covariates_of(train)) == []
    comparison, fits = analysis.compare(train, test, only(settings, "weibull", "cox"))
    comparison = comparison.set_index("fitter")
    assert comparison.loc["weibull", "status"] == "fitted" and comparison.loc["weibull", "k"] == 2  # intercept and shape
    assert comparison.loc["cox", "status"] == "skipped" and "needs a covariate" in comparison.loc["cox", "note"]
    assert set(fits) == {"weibull"}


def test_a_fitter_that_never_converges_is_reported_and_the_others_go_on(settings):
    train, test = split_groups(synthetic_cells(), "train_hash", 0.2, 0)
    never = only(settings, "gengamma", "exponential", retries=[], models={"gengamma": {"fit_options": {"maxiter": 1}}})
    comparison, fits = analysis.compare(train, test, never)
    rows = comparison.set_index("fitter")
    assert rows.loc["gengamma", "status"] == "failed" and set(fits) == {"exponential"}
    assert "attempt 1" in rows.loc["gengamma", "note"] and "ConvergenceError" in rows.loc["gengamma", "note"]
    assert rows.loc["exponential", [*scoring.TRAIN_COLUMNS, "cv_ICI"]].notna().all() and rows.loc["exponential", scoring.TEST_COLUMNS].isna().all()
    latex = scoring.latex_table(comparison, 0.2)
    assert "Generalised Gamma & " + " & ".join(["--"] * 13) + " \\\\" in latex  # AIC to test E50, the cross-validated ICI among them
    assert "Generalised Gamma: every fit attempt failed" in latex


def test_a_failed_fit_is_retried_with_the_next_settings(settings):
    spec = OmegaConf.merge(settings.models.weibull, {"fit_options": {"maxiter": 1}})
    retries = OmegaConf.create([{"optimiser": "L-BFGS-B"}, {"penalizer": 0.01, "fit_options": {}}])
    fit = F.fit_one("weibull", spec, synthetic_cells().drop(columns=LABEL_COLUMNS), retries)
    assert (fit.attempts, fit.penalizer, fit.optimiser) == (3, 0.01, "Newton")  # maxiter bounds Newton's iterations too
    assert fit.fitter.penalizer == 0.01  # the retry's penalizer is the one lifelines fitted with


def test_a_fit_with_non_finite_coefficients_is_retried_and_named_if_none_is_left(monkeypatch):
    real, fitted = F.fit_quietly, []

    def first_fit_diverges(fitter, data, fit_options, initial_point=None):
        caught = real(fitter, data, fit_options, initial_point)
        fitted.append(fitter)
        if len(fitted) == 1:
            fitter.params_ = fitter.params_ * np.inf  # a finite log-likelihood, coefficients gone to infinity
        return caught

    monkeypatch.setattr(F, "fit_quietly", first_fit_diverges)
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    data = synthetic_cells().drop(columns=LABEL_COLUMNS)
    fit = F.fit_one("weibull", spec, data, OmegaConf.create([{"penalizer": 0.01}]))
    assert fit.attempts == 2 and fit.fitter is fitted[1]
    fitted.clear()
    with pytest.raises(F.FitFailed) as failed:
        F.fit_one("weibull", spec, data)
    assert str(failed.value) == "attempt 1 (penalizer 0, optimiser default): non-finite log-likelihood or coefficients"


def test_a_hessian_lifelines_could_not_invert_is_a_note_of_the_fit(rossi):
    """lifelines says so with an ApproximationWarning, not a convergence warning."""
    data = rossi.assign(nothing=0.0)
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    assert F.fit_one("weibull", spec, data).warnings == ["The Hessian was not invertible."]


def test_a_retry_keeps_the_configured_optimiser_and_a_model_without_a_penalizer_fits_unpenalised():
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter"}, "optimiser": "BFGS"})
    ladder = F.attempts(spec, OmegaConf.create([{"penalizer": 0.1}]))
    assert [(attempt["penalizer"], attempt["optimiser"]) for attempt in ladder] == [(0.0, "BFGS"), (0.1, "BFGS")]


def test_cox_ph_retried_with_another_optimiser_takes_shorter_newton_steps(monkeypatch):
    """Cox PH has one optimiser (Newton-Raphson): its first attempt runs with lifelines' own
    steps, and a retry that names an optimiser runs with NEWTON_FALLBACK's shorter ones."""
    real, options = F.fit_quietly, []

    def first_attempt_diverges(fitter, data, fit_options, initial_point=None):
        options.append(fit_options)
        if len(options) == 1:
            raise ConvergenceError("Newton-Raphson diverged")
        return real(fitter, data, fit_options, initial_point)

    monkeypatch.setattr(F, "fit_quietly", first_attempt_diverges)
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.CoxPHFitter", "penalizer": 0.1}})
    fit = F.fit_one("cox", spec, synthetic_cells().drop(columns=LABEL_COLUMNS), OmegaConf.create([{"optimiser": "BFGS"}]))
    assert options == [{}, F.NEWTON_FALLBACK] and fit.attempts == 2 and np.isfinite(fit.fitter.log_likelihood_)
    assert F.fit_one("cox", spec, synthetic_cells().drop(columns=LABEL_COLUMNS)).optimiser == "Newton"  # lifelines' own, named


def test_every_failed_attempt_is_reported_with_its_settings_and_lifelines_reason():
    data = pd.DataFrame({"duration": [0.0, 1, 2, 3, 4, 5], "event": [1, 1, 0, 1, 1, 0], "x": [0.0, 1, 0, 1, 0, 1]})
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    retries = OmegaConf.create([{"optimiser": "L-BFGS-B", "penalizer": 0.01, "fit_options": {"maxiter": 5}}])
    with pytest.raises(F.FitFailed) as failed:
        F.fit_one("weibull", spec, data, retries)
    reason = "ValueError: This model does not allow for non-positive durations. Suggestion: add a small positive value to zero elements."
    assert str(failed.value) == (
        f"attempt 1 (penalizer 0, optimiser default): {reason}; attempt 2 (penalizer 0.01, optimiser L-BFGS-B, fit_options {{'maxiter': 5}}): {reason}"
    )


def test_lifelines_convergence_warnings_become_one_sentence_notes_of_the_fit():
    # a covariate that separates events from censored samples beside a noise one, and one Newton step
    x = np.repeat([0.0, 1.0], 20)
    data = pd.DataFrame({"duration": np.arange(1.0, 41.0), "event": x.astype(int), "x": x, "y": np.random.default_rng(0).normal(size=40)})
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.CoxPHFitter", "penalizer": 0.1}, "fit_options": {"max_steps": 1}})
    assert F.fit_one("cox", spec, data).warnings == [
        "Column x has high sample correlation with the duration column.",
        "Column x have very low variance when conditioned on death event present or not.",
        "Newton-Raphson failed to converge sufficiently.",
    ]
    # a warning of one sentence keeps its one full stop
    assert F._first_sentence(ConvergenceWarning("\nExceeded max iterations.\n")) == "Exceeded max iterations."


def test_a_reason_is_the_errors_first_line_or_else_its_class_name():
    assert F.first_line(ValueError("\n  durations must be positive \n\n  see the docs")) == "durations must be positive"
    assert F.first_line(np.linalg.LinAlgError()) == "LinAlgError"


def test_one_row_per_sample_repeats_weighted_rows_and_leaves_unweighted_ones_alone():
    rows = pd.DataFrame({"duration": [1.0, 2.0], "event": [1, 0], "weight": [2, 1]})
    expected = pd.DataFrame({"duration": [1.0, 1.0, 2.0], "event": [1, 1, 0], "weight": [1, 1, 1]})
    pd.testing.assert_frame_equal(F.per_sample(rows), expected)
    # no weight column where there was none: lifelines would take it for a covariate
    unweighted = rows.drop(columns="weight")
    pd.testing.assert_frame_equal(F.per_sample(unweighted), unweighted)


def test_fits_in_worker_processes_give_the_table_of_one_process(settings):
    """Two workers, one failing fit among them: the same rows, in the configured order."""
    train, test = split_groups(synthetic_cells(), "train_hash", 0.2, 0)
    chosen = only(settings, "weibull", "gengamma", "exponential", retries=[], models={"gengamma": {"fit_options": {"maxiter": 1}}})
    serial, serial_fits = analysis.compare(train, test, chosen, workers=1)
    parallel, parallel_fits = analysis.compare(train, test, chosen, workers=2)  # the workers fork and find the rows in their memory
    assert not analysis._INHERITED  # nothing left behind for the next stage's memory
    assert list(parallel["fitter"]) == list(serial["fitter"]) and list(parallel_fits) == list(serial_fits) == ["weibull", "exponential"]
    pd.testing.assert_frame_equal(parallel.drop(columns="note"), serial.drop(columns="note"), rtol=1e-6)
    assert "ConvergenceError" in parallel.set_index("fitter").loc["gengamma", "note"]


def test_one_worker_beside_the_stage_leaves_the_ses_and_cross_validation_of_all_but_its_last_fit_to_it(settings, monkeypatch):
    """On a large training split the fits run in one worker and this process finishes each fit
    but the worker's last (robust SEs; an AFT fit's cross-validation) while the worker goes on:
    the same table and SEs as in one process, and the worker sends those fits back unfinished."""
    train, test = split_groups(synthetic_cells(), "train_hash", 0.2, 0)
    chosen = only(settings, "weibull", "exponential", "weibull_cure", "cox", retries=[])
    serial, serial_fits = analysis.compare(train, test, chosen, workers=1)
    finished_here = []
    finish = analysis.finish_fit

    def recorded(fit, *args):  # this process's calls (a forked worker appends to its own copy)
        finished_here.append(fit.name)
        finish(fit, *args)

    sent = {}
    hand_out = analysis.results_as_completed

    def jobs_seen(job, arguments, *args, **kwargs):
        sent.update({arguments[0]: arguments[-1] for arguments in arguments})  # name -> finish in the worker
        return hand_out(job, arguments, *args, **kwargs)

    monkeypatch.setattr(analysis, "finish_fit", recorded)
    monkeypatch.setattr(analysis, "results_as_completed", jobs_seen)
    monkeypatch.setattr(analysis, "LARGE_SPLIT", 0)
    beside, beside_fits = analysis.compare(train, test, chosen, workers=2)
    assert sorted(finished_here) == ["exponential", "weibull", "weibull_cure"]
    assert sent == {"weibull": False, "exponential": False, "weibull_cure": False, "cox": True}  # only its last fit finished there
    pd.testing.assert_frame_equal(beside.drop(columns="note"), serial.drop(columns="note"), rtol=1e-9)
    for name, fit in serial_fits.items():
        pd.testing.assert_series_equal(beside_fits[name].robust_se, fit.robust_se, rtol=1e-9)
        assert beside_fits[name].cv == fit.cv
    finished_here.clear()
    analysis.compare(train, test, chosen, workers=3)  # two workers beside it: each finishes its own fits
    assert finished_here == [] and set(sent.values()) == {True}


def test_selection_rule_and_chosen_model():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "loglogistic", "lognormal", "cox"],
            "cv_ICI": [0.05, 0.01, 0.03, 0.001],
            "BIC": [10.0, 30.0, 20.0, 1.0],
            "cv_concordance": [0.8, 0.7, 0.9, 0.95],
        }
    )
    times = pd.DataFrame({"E_T_weibull": [1.0, 2.0], "E_T_loglogistic": [1.0, np.nan], "E_T_lognormal": [3.0, 4.0]})
    # log-logistic has the best cross-validated ICI but no mean for one cell; Cox PH gives no E[T]
    assert expected_time.select(comparison, times, None, "cv_ICI") == "lognormal"
    assert expected_time.select(comparison, times, None, "BIC") == "weibull"
    assert expected_time.select(comparison, times, None, "cv_concordance") == "lognormal"
    assert expected_time.select(comparison, times, "weibull", "cv_ICI") == "weibull"
    with pytest.raises(DataError, match="survival.chosen = loglogistic: its E.T. is infinite or undefined"):
        expected_time.select(comparison, times, "loglogistic", "cv_ICI")


def test_where_no_fold_could_be_scored_the_training_splits_aic_selects(caplog):
    """A grid too small to cross-validate (every fold unscored) still gives TRASH its E[T]:
    the training split's AIC selects, with a warning; the test split is never read."""
    comparison = pd.DataFrame({"fitter": ["weibull", "lognormal"], "cv_ICI": [np.nan, np.nan], "AIC": [12.0, 10.0]})
    times = pd.DataFrame({"E_T_weibull": [1.0, 2.0], "E_T_lognormal": [3.0, 4.0]})
    assert expected_time.select(comparison, times, None, "cv_ICI") == "lognormal"
    assert "selected by AIC on the training split" in caplog.text
    with pytest.raises(DataError, match="no fitted AFT model has a finite E.T. everywhere and a cv_ICI score"):
        expected_time.select(comparison.assign(AIC=np.nan), times, None, "cv_ICI")


def test_every_selection_score_is_a_column_of_table_i_with_one_direction():
    """survival.spec.SCORES is the one table of what select_by may name: the validator lists
    its names, Table I holds its columns, and select reads its direction."""
    from trashfire.survival import spec

    in_sample = [s for s in spec.SCORES if not s.measure]
    assert {s.name for s in in_sample} <= set(scoring.TRAIN_COLUMNS) and not {s.name for s in spec.SCORES} & set(scoring.TEST_COLUMNS)
    assert all(s.name == f"cv_{s.measure}" for s in spec.SCORES if s.measure)  # validation.Plan.column: Table I's column
    assert {s.name for s in spec.SCORES if s.higher_is_better} == {"cv_uno_C", "cv_concordance"}
    with pytest.raises(ConfigError, match="survival.select_by: got 'C'; allowed: cv_ICI, cv_E50, cv_IBS, cv_uno_C, cv_concordance, AIC, BIC"):
        survival_checks.check(OmegaConf.merge(compose(), {"survival": {"select_by": "C"}}))


def test_a_new_selection_score_is_one_entry_of_the_scores(monkeypatch):
    """Adding a score is one Score in survival.spec.SCORES: the config check then allows it and
    the selection picks the best model by its column of Table I in its direction, with nothing
    else edited (here the training log-likelihood, larger for a better fit)."""
    from trashfire.survival import spec

    monkeypatch.setattr(spec, "SCORES", (*spec.SCORES, spec.Score("log_likelihood", higher_is_better=True)))
    survival_checks.check(OmegaConf.merge(compose(), {"survival": {"select_by": "log_likelihood"}}))
    comparison = pd.DataFrame({"fitter": ["weibull", "lognormal", "loglogistic"], "log_likelihood": [-12.0, -10.0, np.nan], "AIC": [1.0, 9.0, 0.5]})
    times = pd.DataFrame({f"E_T_{name}": [1.0, 2.0] for name in comparison["fitter"]})
    assert expected_time.select(comparison, times, None, "log_likelihood") == "lognormal"
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="survival.select_by: got 'log_likelihood'"):
        survival_checks.check(OmegaConf.merge(compose(), {"survival": {"select_by": "log_likelihood"}}))


@pytest.mark.parametrize("old, new", [("test_ICI", "cv_ICI"), ("test_E50", "cv_E50"), ("test_concordance", "cv_concordance")])
def test_a_selection_score_of_the_test_split_is_refused_naming_its_cross_validated_replacement(old, new):
    """select_by on the test split peeked at it (issue 59): refused in one line, with what replaced it."""
    line = config_refusal(survival_checks.check, {"survival.select_by": old})
    assert line.startswith(f"config error: survival.select_by: {old} was replaced by {new} (it selected on the test split the model is then judged on;")
    assert line.endswith("allowed: cv_ICI, cv_E50, cv_IBS, cv_uno_C, cv_concordance, AIC, BIC") and "\n" not in line
    in_sample = config_refusal(survival_checks.check, {"survival.select_by": old.removeprefix("test_")})
    assert f"{old.removeprefix('test_')} was replaced by {new} (it scored a model on the rows it was fitted to;" in in_sample


def test_survival_cli_reports_all_censored_data_in_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(composed_yaml(tiny_overrides(tmp_path)))
    (tmp_path / "reports").mkdir()
    write_table(synthetic_cells().assign(event=0), tmp_path / "reports" / "survival_data.parquet")
    result = subprocess.run([sys.executable, "-m", "trashfire.stages.survival", "--params", str(params)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "survived (no failure event, all censored)" in result.stderr
    assert not (tmp_path / "reports" / "survival").exists()


def test_a_fitter_class_that_does_not_exist_stops_before_reading_data(tmp_path):
    cfg = validate(compose(tiny_overrides(tmp_path, "survival.models.weibull.fitter._target_=lifelines.NoSuchFitter"), conf=ROOT / "conf"))
    with pytest.raises(ConfigError) as refused:
        survival.run(cfg)  # no survival data is there: the refusal comes first
    assert str(refused.value) == (
        "config error: survival.models.weibull.fitter: cannot build 'lifelines.NoSuchFitter': Error locating target 'lifelines.NoSuchFitter'; "
        "allowed: a lifelines fitter class and its arguments, e.g. lifelines.WeibullAFTFitter"
    )  # Hydra's hint to set HYDRA_FULL_ERROR is cut: the line says all there is


def test_all_censored_survival_data_is_refused_naming_the_file(tmp_path):
    cfg = stage_cfg(tmp_path, synthetic_cells().assign(event=0))
    path = tmp_path / "reports" / "survival_data.parquet"
    with pytest.raises(DataError, match=f"^{path}: all 1200 attacked samples survived \\(no failure event, all censored\\); "):
        analysis.analyse(cfg, survival.STAGE.resolved(cfg))
    assert not (tmp_path / "reports" / "survival").exists()


DATA, MODELS = "corrupt survival data {path}: {reason}; rerun the timing stage", "corrupt survival models file {path}: {reason}; rerun the survival stage"


@pytest.mark.parametrize(
    ("read", "name", "content", "line", "reason"),
    [
        (analysis.read_survival_data, "survival_data.parquet", b"", DATA, "Parquet file size is 0 bytes"),
        (
            analysis.read_survival_data,
            "survival_data.parquet",
            b"duration,event\n1,0\n",
            DATA,
            "Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file",
        ),
        (analysis.read_survival_data, "survival_data.parquet", b"PAR1" + bytes(40) + b"PAR1", DATA, "Couldn't deserialize thrift: No more data to read"),
        (saved_models.load_models, "models.pkl", b"", MODELS, "Ran out of input"),
        (saved_models.load_models, "models.pkl", b"\x80\x04K", MODELS, "pickle data was truncated"),
    ],
)
def test_a_corrupt_survival_input_is_one_line_naming_it(tmp_path, read, name, content, line, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as refused:
        read(path)
    assert str(refused.value) == line.format(path=path, reason=reason)


def test_missing_survival_data_and_models_name_the_stage_to_run(tmp_path):
    with pytest.raises(DataError) as refused:
        analysis.read_survival_data(tmp_path / "survival_data.parquet")
    assert str(refused.value) == f"survival data not found: {tmp_path / 'survival_data.parquet'}; run the timing stage first"
    with pytest.raises(DataError) as refused:
        saved_models.load_models(tmp_path / "models.pkl")
    assert str(refused.value) == f"fitted survival models not found: {tmp_path / 'models.pkl'}; run the survival stage"


# the survival section's config checks (trashfire.survival.checks, which `validate` runs): a
# bad value is refused with one line naming its key and what is allowed

OPTIMISERS = "BFGS, L-BFGS-B, SLSQP, CG, TNC"  # scipy's methods that use lifelines' gradient
RETRY = f"allowed: a mapping of optimiser ({OPTIMISERS}), penalizer (>= 0), fit_options"
FIT_OPTIONS = "allowed: a mapping of the optimiser's options, e.g. {maxiter: 500}"
SCORE_RANGE = "allowed: two quantiles of the training durations [low, high] with 0 < low < high < 1, e.g. [0.1, 0.9]"
FITTER = "missing; name the lifelines fitter class, e.g. lifelines.WeibullAFTFitter"
REMOVED_POLICY = "was removed with the per-sample failure clock; allowed: first_query (such a sample fails at its share of the first query), drop"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"timing.survival_data": DROP}, "timing.survival_data: missing; compose params.yaml with `make params`"),
        (
            {"timing.survival_data.covariates": ["epochs", "height"]},
            "timing.survival_data.covariates: got 'height'; allowed: epochs, depth, lr, n_train, t_train, t_predict, acc_ben, attack_strength, defence_strength, margin",
        ),
        ({"timing.survival_data.dummies": ["model"]}, "timing.survival_data.dummies: got 'model'; allowed: attack, defence, data"),
        (
            {"timing.survival_data.misclassified_before_attack": "attack_time"},
            f"timing.survival_data.misclassified_before_attack: attack_time {REMOVED_POLICY}",
        ),
        (
            {"timing.survival_data.misclassified_before_attack": "predict_time"},
            f"timing.survival_data.misclassified_before_attack: predict_time {REMOVED_POLICY}",
        ),
        (
            {"timing.survival_data.misclassified_before_attack": "zero"},
            "timing.survival_data.misclassified_before_attack: got 'zero'; allowed: first_query, drop",
        ),
        ({"timing.survival_data.nonpositive_durations": "clip"}, "timing.survival_data.nonpositive_durations: got 'clip'; allowed: half_min, drop"),
        ({"survival.models": {}}, "survival.models: select at least one option (an empty grid runs nothing)"),
        (
            {"survival.fitters": ["gompertz"]},
            "survival.fitters: got 'gompertz'; allowed: weibull, lognormal, loglogistic, exponential, gengamma, weibull_cure, loglogistic_cure, cox",
        ),
        ({"survival.models.weibull": "lifelines.WeibullAFTFitter"}, f"survival.models.weibull.fitter._target_: {FITTER}"),  # no mapping
        ({"survival.models.weibull.fitter": "lifelines.WeibullAFTFitter"}, f"survival.models.weibull.fitter._target_: {FITTER}"),
        ({"survival.models.weibull.fitter._target_": DROP}, f"survival.models.weibull.fitter._target_: {FITTER}"),
        ({"survival.models.lognormal.fitter.penalizer": -1}, "survival.models.lognormal.fitter.penalizer: got -1; must be a finite number >= 0"),
        ({"survival.models.cox.aft": "yes"}, "survival.models.cox.aft: got 'yes'; allowed: true (an AFT model, gives E[T]), false"),
        ({"survival.models.weibull.optimiser": "newton"}, f"survival.models.weibull.optimiser: got 'newton'; allowed: {OPTIMISERS}"),
        ({"survival.models.cox.t0_quantile": 0}, "survival.models.cox.t0_quantile: got 0; must be a finite number in (0, 1)"),
        ({"survival.models.cox.t0_quantile": 1}, "survival.models.cox.t0_quantile: got 1; must be a finite number in (0, 1)"),
        ({"survival.models.weibull.fit_options": 500}, f"survival.models.weibull.fit_options: got 500; {FIT_OPTIONS}"),
        # each retry by its position in the list
        ({"survival.retries": [{"penalizer": 0.1}, {"tries": 3}]}, f"survival.retries[1]: got {{'tries': 3}}; {RETRY}"),
        (
            {"survival.retries": [{"optimiser": "BFGS", "penalizer": 0.1, "tries": 3}]},
            f"survival.retries[0]: got {{'optimiser': 'BFGS', 'penalizer': 0.1, 'tries': 3}}; {RETRY}",
        ),
        ({"survival.retries": [{}]}, f"survival.retries[0]: got {{}}; {RETRY}"),  # a retry that changes nothing
        ({"survival.retries": ["BFGS"]}, f"survival.retries[0]: got 'BFGS'; {RETRY}"),
        ({"survival.retries": [{"optimiser": "newton"}]}, f"survival.retries[0].optimiser: got 'newton'; allowed: {OPTIMISERS}"),
        ({"survival.retries": [{"penalizer": -0.1}]}, "survival.retries[0].penalizer: got -0.1; must be a finite number >= 0"),
        ({"survival.retries": [{"fit_options": 500}]}, f"survival.retries[0].fit_options: got 500; {FIT_OPTIONS}"),
        # the chosen model gives E[T]: one of the fitted AFT models, not Cox
        ({"survival.chosen": "cox"}, "survival.chosen: got 'cox'; allowed: weibull, lognormal, loglogistic, exponential, gengamma"),
        ({"survival.fitters": ["weibull", "cox"], "survival.chosen": "lognormal"}, "survival.chosen: got 'lognormal'; allowed: weibull"),
        ({"survival.select_by": "r2"}, "survival.select_by: got 'r2'; allowed: cv_ICI, cv_E50, cv_IBS, cv_uno_C, cv_concordance, AIC, BIC"),
        ({"survival.folds": 1}, "survival.folds: got 1; must be an integer >= 2"),
        ({"survival.folds": 2.5}, "survival.folds: got 2.5; must be an integer >= 2"),
        ({"survival.score_samples": 999}, "survival.score_samples: got 999; must be an integer >= 1000"),
        ({"survival.score_samples": "all"}, "survival.score_samples: got 'all'; must be an integer >= 1000"),
        ({"survival.score_range": [0.9, 0.1]}, f"survival.score_range: got [0.9, 0.1]; {SCORE_RANGE}"),
        ({"survival.score_range": [0.1, 1.0]}, f"survival.score_range: got [0.1, 1.0]; {SCORE_RANGE}"),
        ({"survival.score_range": 0.9}, f"survival.score_range: got 0.9; {SCORE_RANGE}"),
        ({"survival.split_by": "dataset"}, "survival.split_by: got 'dataset'; allowed: train_hash, model_hash, attack_hash"),
        ({"survival.test_size": 0}, "survival.test_size: got 0; must be a finite number in (0, 1)"),
        ({"survival.test_size": 1}, "survival.test_size: got 1; must be a finite number in (0, 1)"),
        ({"survival.seed": -1}, "survival.seed: got -1; must be an integer >= 0"),
        ({"survival.t0_quantile": 0}, "survival.t0_quantile: got 0; must be a finite number in (0, 1)"),
        ({"survival.t0_quantile": 1}, "survival.t0_quantile: got 1; must be a finite number in (0, 1)"),
        ({"survival.km_check_tolerance": 0}, "survival.km_check_tolerance: got 0; must be a finite number > 0"),
    ],
)
def test_a_bad_survival_setting_is_refused_in_one_line_naming_its_key(changes, line):
    assert config_refusal(run_registered, changes) == f"config error: {line}"


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the defaults: three retries, no model with an optimiser, t0_quantile or fit_options of its own
        # no covariates, dummies or retries; each value on its closed bound
        {"timing.survival_data.covariates": None, "timing.survival_data.dummies": None, "survival.retries": None, "survival.seed": 0}
        | {"timing.survival_data.misclassified_before_attack": "drop", "timing.survival_data.nonpositive_durations": "drop"},
        # a model's own optimiser, t0 quantile, options and no penalizer (0); the chosen AFT model
        {"survival.models.weibull.optimiser": "L-BFGS-B", "survival.models.weibull.t0_quantile": 0.5, "survival.models.weibull.fit_options": {"maxiter": 500}}
        | {
            "survival.models.weibull.fitter.penalizer": DROP,
            "survival.models.cox.aft": False,
            "survival.chosen": "weibull",
            "survival.fitters": ["weibull", "cox"],
        },
        {"survival.retries": [{"penalizer": 0}, {"optimiser": "TNC", "fit_options": {"maxiter": 50}}]},
    ],
)
def test_survival_settings_on_their_allowed_bounds_pass(changes):
    assert config_refusal(run_registered, changes) is None


# --- the survival stage's figures (survival/figures.py), drawn from hand-made tables ---


def _calibration_row(fitter, status="fitted", note="", **values):
    row = {"fitter": fitter, "model": fitter.title(), "status": status, "note": note, "t0": 2.0}
    row |= {"ICI": 0.0123, "E50": 0.0456, "test_ICI": 0.0789, "test_E50": 0.0321} | values
    return row


def _with_curves(axes):
    for train, test in axes.values():
        train.plot([0, 1], [0, 1])
        test.plot([0, 1], [0, 1])
        train.legend(["curve"])


def test_calibration_grid_gives_each_fitter_a_train_and_a_test_panel_two_fitters_to_a_row():
    fig, axes = figures.calibration_grid(["weibull", "lognormal", "cox"])
    grid = fig.axes
    assert list(axes) == ["weibull", "lognormal", "cox"]
    assert [grid.index(ax) for pair in axes.values() for ax in pair] == [0, 1, 2, 3, 4, 5]
    assert len(grid) == 8 and [ax.get_visible() for ax in grid] == [True] * 6 + [False] * 2  # 2 rows of 4
    assert tuple(fig.get_size_inches()) == pytest.approx((4.6 * 4, 4.0 * 2))
    plt.close(fig)
    fig, axes = figures.calibration_grid(["weibull"])
    assert len(fig.axes) == 2 and all(ax.get_visible() for ax in fig.axes)
    assert tuple(fig.get_size_inches()) == pytest.approx((4.6 * 2, 4.0))
    plt.close(fig)


def test_calibration_titles_give_each_parts_ici_and_e50_and_an_unfitted_model_its_reason():
    fig, axes = figures.calibration_grid(["weibull", "cox", "lognormal"])
    _with_curves({name: pair for name, pair in axes.items() if name != "lognormal"})
    comparison = pd.DataFrame(
        [
            _calibration_row("weibull"),
            _calibration_row("cox", status="failed", note="the Newton steps diverged " * 4),
            _calibration_row("lognormal"),  # fitted, but no curve was drawn
            _calibration_row("constant", t0=np.nan),  # a baseline: no panel of its own
        ]
    )
    assert figures.finish_calibration(fig, axes, comparison, unit="GFLOPs") is fig
    train, test = axes["weibull"]
    assert train.get_title() == "Weibull (train): ICI 0.012, E50 0.046"
    assert test.get_title() == "Weibull (test): ICI 0.079, E50 0.032"
    assert train.get_xlabel() == "predicted P(T <= t0)" and test.get_ylabel() == "observed P(T <= t0), smoothed"
    assert train.get_legend() is None and train.axison
    for ax, part in zip(axes["cox"], ("train", "test")):
        assert ax.get_title() == f"Cox ({part}): failed" and not ax.axison and not ax.lines
        (text,) = ax.texts
        assert text.get_text().startswith("the Newton steps diverged") and "\n" in text.get_text()
    for ax in axes["lognormal"]:
        assert ax.get_title().endswith(": fitted") and not ax.axison
    train, test = axes["lognormal"]
    assert train.texts[0].get_text() == "no calibration curve (see the table's\nnote)"
    assert test.texts[0].get_text() == textwrap.fill(figures.UNSELECTED, 40)  # not selected: not scored on the test split
    assert fig.get_suptitle().startswith("Calibration at t0 = 2 GFLOPs: observed")
    plt.close(fig)


def test_calibration_suptitle_gives_the_range_of_t0_where_the_fitters_differ():
    fig, axes = figures.calibration_grid(["weibull", "cox"])
    _with_curves(axes)
    comparison = pd.DataFrame([_calibration_row("weibull", t0=0.5), _calibration_row("cox", t0=12.5)])
    figures.finish_calibration(fig, axes, comparison)
    assert fig.get_suptitle().startswith("Calibration at t0 = 0.5 to 12.5 s:")
    plt.close(fig)


def test_a_long_reason_is_wrapped_and_cut_at_600_characters():
    fig, axes = figures.calibration_grid(["cox"])
    figures.finish_calibration(fig, axes, pd.DataFrame([_calibration_row("cox", status="failed", note="x" * 2000)]))
    text = axes["cox"][0].texts[0].get_text()
    assert len(text) == 600 and set(text.split("\n")[0]) == {"x"} and len(text.split("\n")[0]) == 40
    plt.close(fig)


def _coefficients(param_rows=("mu_",) * 4 + ("sigma_",)):
    rows = [
        ("attack_pgd", 0.5, 0.1, 0.9, 0.0, 1.2, 0.5),  # a dummy's SD: shown per level, not per SD
        ("defence_adversarial", -0.4, -0.8, 0.0, -1.0, 0.3, 0.4),
        ("epochs", 0.2, 0.1, 0.3, 0.05, 0.4, 2.0),
        ("Intercept", 3.0, 2.0, 4.0, 1.0, 5.0, 0.0),
        ("depth", 0.7, 0.6, 0.8, 0.5, 0.9, 10.0),
    ]
    table = pd.DataFrame(rows, columns=["covariate", "coef", "lower", "upper", "lower_robust", "upper_robust", "sd"])
    return table.assign(param=list(param_rows))


def _bars(ax):
    """(x extents per bar, line width) of each errorbar container, in drawing order."""
    found = []
    for container in ax.containers:
        (bars,) = container.lines[2]
        found.append(([tuple(np.round(seg[:, 0], 6)) for seg in bars.get_segments()], bars.get_linewidth()[0]))
    return found


def test_coefficient_figure_splits_dummies_from_covariates_and_scales_covariates_per_sd():
    fig = figures.coefficient_figure(_coefficients(), "Weibull AFT", is_cox=False)
    dummies, covariates = fig.axes
    assert [t.get_text() for t in dummies.get_yticklabels()] == ["Atk: pgd", "Def: adversarial"]
    assert [t.get_text() for t in covariates.get_yticklabels()] == ["epochs"]  # Intercept dropped; depth is sigma_'s
    (naive, robust) = _bars(dummies)
    assert naive == ([(0.1, 0.9), (-0.8, 0.0)], 0.8) and robust == ([(0.0, 1.2), (-1.0, 0.3)], 2.2)
    (naive, robust) = _bars(covariates)
    assert naive == ([(0.2, 0.6)], 0.8) and robust == ([(0.1, 0.8)], 2.2)  # x SD 2
    points = [[list(line.get_xdata()) for line in ax.lines if line.get_marker() == "o"] for ax in (dummies, covariates)]
    assert points == [[[0.5, -0.4]], [[0.4]]]
    assert dummies.get_title() == "dummies: effect on log survival time vs reference level"
    assert covariates.get_title() == "covariates: effect on log survival time per +1 SD"
    assert dummies.get_xlabel() == "coefficient, 95% CI" and covariates.get_xlabel() == "coefficient x SD, 95% CI"
    left, right = dummies.get_position(), covariates.get_position()
    assert left.x1 < right.x0 and left.y0 == right.y0  # side by side
    for ax in (dummies, covariates):
        (zero,) = [line for line in ax.lines if line.get_linestyle() == "--"]
        assert list(zero.get_xdata()) == [0, 0]
        assert all(line.get_visible() for line in ax.get_xgridlines()) and not any(line.get_visible() for line in ax.get_ygridlines())
    assert fig.get_suptitle() == "Weibull AFT: coefficients (> 0: longer survival); 95% intervals: thick cluster-robust, thin naive"
    assert tuple(fig.get_size_inches()) == pytest.approx((12, 0.32 * 8 + 1.5))
    plt.close(fig)


def test_a_cox_coefficient_figure_speaks_of_hazards_and_grows_with_its_rows():
    many = pd.concat([_coefficients(("log_hazard",) * 5)] * 2, ignore_index=True)
    fig = figures.coefficient_figure(many.drop(columns=["lower_robust", "upper_robust"]), "Cox PH", is_cox=True)
    dummies, covariates = fig.axes
    assert len(dummies.containers) == 1 and len(covariates.containers) == 1  # no robust intervals: thin bars only
    assert [t.get_text() for t in covariates.get_yticklabels()] == ["epochs", "depth", "epochs", "depth"]
    assert dummies.get_title() == "dummies: log hazard ratio vs reference level"
    assert fig.get_suptitle().startswith("Cox PH: coefficients (> 0: higher hazard)")
    assert tuple(fig.get_size_inches()) == pytest.approx((12, 0.32 * 8 + 1.5))
    plt.close(fig)
    fig = figures.coefficient_figure(pd.concat([many] * 2, ignore_index=True), "Cox PH", is_cox=True)
    assert fig.get_size_inches()[1] == pytest.approx(0.32 * 16 + 1.5)
    plt.close(fig)


def test_a_missing_robust_interval_draws_no_thick_bar():
    table = _coefficients(("mu_",) * 5).assign(lower_robust=np.nan, upper_robust=np.nan)
    fig = figures.coefficient_figure(table, "Weibull AFT", is_cox=False)
    (naive, robust) = _bars(fig.axes[0])
    assert robust[0] == [(0.5, 0.5), (-0.4, -0.4)]  # zero-length, not NaN: nothing shows
    plt.close(fig)


def test_dummy_labels_name_their_source_and_numeric_covariates_keep_their_name():
    assert (
        figures._pretty("attack_pgd") == "Atk: pgd"
        and figures._pretty("defence_none_x") == "Def: none_x"
        and figures._pretty("data_fashion") == "Data: fashion"
    )
    assert figures._pretty("attack_strength") == "attack_strength" and figures._pretty("defence_strength") == "defence_strength"
    assert figures._pretty("margin") == "margin" and figures._pretty("datasetx") == "datasetx"


def _kaplan_meier(times):
    return KaplanMeierFitter().fit(times, np.ones(len(times)))


def test_kaplan_meier_figure_draws_a_panel_per_family_and_dashes_the_prediction_in_the_defences_colour():
    km = {
        ("pgd", "adversarial"): _kaplan_meier([1.0, 10.0, 100.0]),
        ("pgd", "none"): _kaplan_meier([0.1, 1.0]),
        ("fgm", "none"): _kaplan_meier([0.5, 5.0]),
        ("deepfool", "smoothing"): _kaplan_meier([2.0, 3.0]),
    }
    predicted = {("pgd", "none"): (np.array([0.1, 1.0]), np.array([0.9, 0.2]))}
    fig = figures.kaplan_meier_figure(km, predicted, "Weibull AFT", unit="GFLOPs")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["deepfool", "fgm", "pgd"] and len(fig.axes) == 3
    pgd = panels[2]
    assert pgd.get_xscale() == "log" and pgd.get_ylim() == (0, 1.02)
    assert pgd.get_xlabel() == "adversary's work per sample (GFLOPs)" and pgd.get_ylabel() == "P(not yet misclassified)"
    dashed = [line for line in pgd.lines if line.get_linestyle() == "--"]
    (line,) = dashed
    assert line.get_label() == "none (Weibull AFT)" and list(line.get_ydata()) == [0.9, 0.2] and list(line.get_xdata()) == [0.1, 1.0]
    assert not pgd.collections  # no confidence bands: five curves in one panel would drown in them
    solid = [line for line in pgd.lines if line.get_linestyle() == "-"]
    colours = plt.get_cmap("tab10")
    assert [line.get_color() for line in solid] == [colours(0), colours(1)]  # none first, then adversarial
    assert line.get_color() == colours(0)
    assert panels[0].lines[0].get_color() == colours(2)  # every defence keeps its colour across panels
    assert not [line for line in panels[0].lines if line.get_linestyle() == "--"]
    assert pgd.get_legend() is not None
    assert fig.get_suptitle() == "Kaplan-Meier survival per defence (solid) and the Weibull AFT model's prediction for the same samples (dashed)"
    assert tuple(fig.get_size_inches()) == pytest.approx((5.2 * 3, 4.0))
    plt.close(fig)


def test_kaplan_meier_figure_puts_three_families_to_a_row_and_hides_the_empty_panels():
    km = {(family, "none"): _kaplan_meier([1.0, 2.0]) for family in "abcd"}
    fig = figures.kaplan_meier_figure(km, {}, "Cox")
    assert len(fig.axes) == 6 and [ax.get_visible() for ax in fig.axes] == [True] * 4 + [False] * 2
    assert tuple(fig.get_size_inches()) == pytest.approx((5.2 * 3, 4.0 * 2))
    assert fig.axes[0].get_xlabel() == "adversary's work per sample (s)"
    plt.close(fig)
    fig = figures.kaplan_meier_figure({("a", "none"): _kaplan_meier([1.0])}, {}, "Cox")
    assert len(fig.axes) == 1 and tuple(fig.get_size_inches()) == pytest.approx((5.2, 4.0))
    plt.close(fig)


def test_kaplan_meier_colours_cycle_past_ten_defences():
    km = {("pgd", f"d{i:02d}"): _kaplan_meier([1.0, 2.0]) for i in range(11)}
    fig = figures.kaplan_meier_figure(km, {}, "Cox")
    colours = [line.get_color() for line in fig.axes[0].lines]
    assert colours[10] == colours[0] != colours[9]
    plt.close(fig)


def test_a_saved_figure_is_written_whole_in_its_suffix_format_and_closed(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = tmp_path / "deep" / "er" / "curve.svg"
    figures.save(fig, path)
    assert path.read_text().lstrip().startswith("<?xml") and "<svg" in path.read_text()
    assert not plt.fignum_exists(fig.number) and [p.name for p in path.parent.iterdir()] == ["curve.svg"]
    fig, _ = plt.subplots(figsize=(2, 1))
    other, _ = plt.subplots()  # the current figure is another one: only the saved one is closed
    figures.save(fig, tmp_path / "curve.png")
    assert not plt.fignum_exists(fig.number) and plt.fignum_exists(other.number)
    plt.close(other)
    assert Image.open(tmp_path / "curve.png").size == (220, 110)  # 110 dpi


# --- the survival stage end to end (analysis.analyse) on a tiny data set: its files, units and log (issue 26, item 9) ---


def figure_text(fig):
    """What a reader of a figure sees in words: its title, and each panel's title, axis labels and tick labels."""
    panels = [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), [t.get_text() for t in ax.get_yticklabels()]) for ax in fig.axes if ax.get_visible()]
    return fig.get_suptitle(), panels


@pytest.fixture
def stage_run(monkeypatch):
    """Runs the stage in this process, with 16 cores to share out, and records each figure's
    words by file name and the (workers, threads) the fits were given."""
    drawn, given = {}, []
    real_save, real_fits = analysis.save, analysis.results_as_completed

    def save(fig, path):
        drawn[path.relative_to(path.parents[1]).as_posix() if path.parent.name == "coefficients" else path.name] = figure_text(fig)
        real_save(fig, path)

    def fits_here(job, arguments, workers, prog, threads, away=False, fork=False, meanwhile=None):
        given.append((workers, threads))
        return real_fits(job, arguments, 1, prog, None, meanwhile=meanwhile)

    monkeypatch.setattr(analysis, "save", save)
    monkeypatch.setattr(competing_risks, "save", save)  # the competing risks' figure
    monkeypatch.setattr(analysis, "results_as_completed", fits_here)
    monkeypatch.setattr("trashfire.core.parallel.available_cores", lambda: 16)
    return drawn, given


def survival_log(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == analysis.log.name]


def train_part(data, test_size=0.2):
    return split_groups(data, "train_hash", test_size, 0)[0]


def test_the_stage_on_the_flops_clock_fits_gflops_and_writes_times_back_in_flops(tmp_path, caplog, stage_run):
    drawn, given = stage_run
    data = synthetic_cells(n_cells=24, samples=5)
    data = data.assign(duration=data["duration"] * 1e9)  # FLOPs of order 1e7
    cfg = stage_cfg(tmp_path, data, "clock=flops", "survival.fitters=[weibull,exponential,cox]", "survival.km_check_tolerance=0.01", "compute.threads=auto")
    caplog.set_level("INFO", logger=analysis.log.name)
    comparison = analysis.analyse(cfg, survival.STAGE.resolved(cfg))
    plt.close("all")
    out = tmp_path / "reports" / "survival"
    assert given == [(1, 16)]  # compute.workers = 1: in this process, with compute.threads = auto: every core

    # Table I: every fitter, then the baselines; the selected model is the AFT one with the best test ICI
    table = pd.read_csv(out / "aft_comparison.csv")
    assert table["fitter"].tolist() == comparison["fitter"].tolist() == ["weibull", "exponential", "cox", *scoring.BASELINES]
    rows = table.set_index("fitter")
    selected = rows.loc[["weibull", "exponential"], "cv_ICI"].idxmin()
    assert rows["selected"].tolist() == [name == selected for name in rows.index] and comparison["selected"].tolist() == rows["selected"].tolist()
    label = {"weibull": "Weibull", "exponential": "Exponential"}[selected]
    # t0, the median training duration, in FLOPs
    train = train_part(data)
    t0 = np.median(np.repeat(train["duration"].to_numpy(), train["weight"].to_numpy()))
    assert rows.loc[["weibull", "exponential", "cox"], "t0"].to_numpy() == pytest.approx([t0] * 3, rel=1e-9)
    assert r"training (80\%) and test (20\%) groups" in (out / "aft_comparison.tex").read_text()

    assert json.loads((out / "status.json").read_text()) == {"selected": selected, "reason": None}

    # the models were fitted in GFLOPs, which fit_unit.json says
    assert json.loads((out / "fit_unit.json").read_text()) == {"clock": "flops", "unit": "GFLOPs", "scale": 1e9}
    models = saved_models.load_models(out / "models.pkl")
    assert list(models) == ["weibull", "exponential", "cox"]
    assert models[selected].durations.max() == pytest.approx(train["duration"].max() / 1e9)
    # lifelines' copies of the training rows, kept on each fitter, are one copy (in the stage's memory and models.pkl)
    for attribute in ("durations", "event_observed", "weights", "entry", "timeline"):
        assert getattr(models["weibull"], attribute) is getattr(models["exponential"], attribute)
    for model in models.values():  # they answer as before; the AFT models' null model (the likelihood-ratio test) is fitted when asked for
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            model.print_summary()
        assert "log-likelihood" in printed.getvalue()
    assert models["weibull"].log_likelihood_ratio_test().test_statistic > 0

    # E[T] per cell, back in FLOPs: the budget t* is the cell's (one) duration here
    times = pd.read_csv(out / "expected_times.csv").set_index("attack_hash")
    cells = data.drop_duplicates("attack_hash").set_index("attack_hash")
    assert list(times.columns) == ["E_T", "E_T_unrestricted", "t_star", "fitter", "E_T_weibull", "E_T_exponential"] and (times["fitter"] == selected).all()
    assert times["t_star"].to_numpy() == pytest.approx(cells.loc[times.index, "duration"].to_numpy(), rel=1e-12)
    covariates = cells.loc[times.index, ["epochs", "depth", "attack_pgd_inf"]]
    model = F.Fit(selected, models[selected], 0.0, "", 1)
    in_gflops = F.restricted_mean(model, covariates, times["t_star"].to_numpy() / 1e9)
    assert times["E_T"].to_numpy() == pytest.approx(in_gflops * 1e9, rel=1e-6) and times["E_T"].equals(times[f"E_T_{selected}"])
    assert times["E_T_unrestricted"].to_numpy() == pytest.approx(models[selected].predict_expectation(covariates).to_numpy() * 1e9, rel=1e-6)
    other = "exponential" if selected == "weibull" else "weibull"
    assert (times[f"E_T_{other}"] <= times["t_star"] * (1 + 1e-9)).all() and (times[f"E_T_{other}"] > 1e6).all()  # FLOPs, not GFLOPs

    # the Kaplan-Meier check in FLOPs, every cell flagged at a 1% tolerance
    check = pd.read_csv(out / "km_check.csv").set_index("attack_hash")
    budgets = expected_time.cell_budgets(data)
    assert check["t_star"].to_numpy() == pytest.approx(times.loc[check.index, "t_star"].to_numpy(), rel=1e-12)
    assert check["E_T"].to_numpy() == pytest.approx(times.loc[check.index, "E_T"].to_numpy(), rel=1e-12)
    assert check["E_T_km"].to_numpy() == pytest.approx(expected_time.km_restricted_means(data, budgets)[check.index].to_numpy(), rel=1e-9)
    flagged = int(check["flagged"].sum())
    assert (check["tolerance"] == 0.01).all() and flagged > 0 and rows.loc[selected, "km_share_flagged"] == pytest.approx(flagged / 24)

    coefficients = pd.read_csv(out / "coefficients.csv")
    assert coefficients["fitter"].unique().tolist() == ["weibull", "exponential", "cox"] and coefficients["se_robust"].notna().all()
    assert (coefficients.loc[coefficients["fitter"] == "cox", "param"] == "log_hazard").all()
    within = pd.read_csv(out / "concordance_within.csv")
    assert len(within) == 5 * 3 and set(within["fitter"]) == set(rows.index)  # all, fgm_inf, pgd_inf per row
    assert pd.read_csv(out / "logrank.csv").empty  # no defended samples: the header only

    # the figures: each fitter's coefficients, the selected one's as Fig. 3, times in the clock's unit
    assert sorted(drawn) == ["calibration.png", "coefficients/cox.png", "coefficients/exponential.png", "coefficients/weibull.png", "kaplan_meier.png"]
    assert (out / "coefficients.png").read_bytes() == (out / "coefficients" / f"{selected}.png").read_bytes()
    for name, fit_label in (("weibull", "Weibull"), ("exponential", "Exponential"), ("cox", "Cox PH")):
        by_hand = figures.coefficient_figure(coefficients[coefficients["fitter"] == name], fit_label, name == "cox")
        assert drawn[f"coefficients/{name}.png"] == figure_text(by_hand)
        plt.close(by_hand)
    assert drawn["coefficients/cox.png"][0].startswith("Cox PH: coefficients (> 0: higher hazard)")
    suptitle, panels = drawn["calibration.png"]
    assert suptitle.startswith(f"Calibration at t0 = {t0:.3g} FLOPs: observed")
    at = 2 * ["weibull", "exponential"].index(selected)  # the selected model's panels; the other's test panel says why it is empty
    assert [p[0] for p in panels][at : at + 2] == [
        f"{label} (train): ICI {rows.loc[selected, 'ICI']:.3f}, E50 {rows.loc[selected, 'E50']:.3f}",
        f"{label} (test): ICI {rows.loc[selected, 'test_ICI']:.3f}, E50 {rows.loc[selected, 'test_E50']:.3f}",
    ]
    assert panels[2 - at + 1][0].endswith("(test): fitted")
    suptitle, panels = drawn["kaplan_meier.png"]
    assert f"the {label} model's prediction" in suptitle and {p[1] for p in panels} == {"adversary's work per sample (GFLOPs)"}

    # the log: the unit, the split, the few clusters, what was fitted and selected, and the checks
    log = survival_log(caplog)
    n_train, n_test = int(train["weight"].sum()), int(data["weight"].sum() - train["weight"].sum())
    assert log[:3] == [
        ("INFO", "durations on the flops clock fitted in GFLOPs (x 1e+09); E[T] and t* are written back in flops"),
        ("INFO", f"train/test split by train_hash: 10 / 2 groups, {n_train} / {n_test} samples"),
        ("WARNING", "cluster-robust standard errors from 10 train_hash clusters (< 30) run small: read them with care"),
    ]
    summary = [message for _, message in log if message.startswith("fitted ")]
    assert len(summary) == 1
    head, header, *lines = summary[0].split("\n")
    assert (
        head
        == f"fitted weibull, exponential, cox of weibull, exponential, cox; selected {selected} (best cv_ICI: grouped 3-fold cross-validation inside the training split)"
    )
    assert header.split()[:3] == ["fitter", "status", "log_likelihood"] and "note" not in header and "[" not in header
    assert not {"model", "split_by", "km_worst_cells"} & set(header.split())  # in the tables, not the log's
    assert [line.split()[0] for line in lines] == rows.index.tolist()
    assert lines[0].split()[header.split().index("AIC")] == f"{rows.loc['weibull', 'AIC']:.4g}"
    verdicts = [message for _, message in log if "both baselines on test concordance" in message]
    assert [v.split(" b")[0] for v in verdicts] == [
        f"{label} does not"
    ]  # the selected model alone is scored on test; the runtime baseline is hard to beat here
    runtime, share = rows.loc[list(scoring.BASELINES), "test_concordance"]
    assert verdicts[0].endswith(f"({rows.loc[selected, 'test_concordance']:.4f}; Runtime baseline {runtime:.4f}, Failure-share baseline {share:.4f})")
    assert ("INFO", "within attack cells (pairs of one cell only; the baselines are 0.5 there): test concordance " + scoring.within_summary(comparison)) in log
    assert "Weibull 0.5000" in scoring.within_summary(comparison)  # one duration per cell: no pair within a cell is ordered
    km = [(level, message) for level, message in log[log.index(next(e for e in log if e[1].startswith("within"))) + 1 :]]
    assert [level for level, _ in km] == ["WARNING"] * 3
    assert km[0][1].startswith(f"{label}'s E[T] is within 1% of the Kaplan-Meier restricted mean to the same budget in {24 - flagged} of 24 attack cells")
    assert km[1][1].startswith(f"{flagged} cell(s) flagged")


def test_the_stage_on_the_seconds_clock_writes_the_chosen_model_over_a_previous_run(tmp_path, caplog, stage_run):
    drawn, given = stage_run
    data = synthetic_cells(n_cells=76, samples=5)  # 38 trained models: 30 to train on, as many clusters as the robust SEs want
    cfg = stage_cfg(tmp_path, data, "survival.fitters=[weibull,exponential]", "survival.chosen=exponential", "survival.km_check_tolerance=100")
    with open_dict(cfg):  # the defaults: auto workers, one thread each
        cfg.compute.workers, cfg.compute.threads = "auto", 1
    out = tmp_path / "reports" / "survival"
    out.mkdir()
    (out / "coefficients.csv").write_text("from a previous run\n")
    caplog.set_level("INFO", logger=analysis.log.name)
    comparison = analysis.analyse(cfg, survival.STAGE.resolved(cfg)).set_index("fitter")
    plt.close("all")
    assert given == [(8, 1)]  # one worker per core, at most 8

    assert comparison["selected"].tolist() == [False, True, False, False]
    assert comparison.loc["weibull", "ICI"] < comparison.loc["exponential", "ICI"]  # chosen, though not the best
    assert not [c for c in comparison if c.startswith("cv_")]  # a model named in survival.chosen needs no cross-validation
    assert comparison.loc["weibull", scoring.TEST_COLUMNS].isna().all() and comparison.loc["exponential", scoring.TEST_COLUMNS].notna().all()
    assert json.loads((out / "fit_unit.json").read_text()) == {"clock": "process", "unit": "s", "scale": 1.0}
    assert pd.read_csv(out / "coefficients.csv")["fitter"].unique().tolist() == ["weibull", "exponential"]
    assert (out / "coefficients.png").read_bytes() == (out / "coefficients" / "exponential.png").read_bytes()
    times = pd.read_csv(out / "expected_times.csv").set_index("attack_hash")
    model = F.Fit("exponential", saved_models.load_models(out / "models.pkl")["exponential"], 0.0, "", 1)
    covariates = data.drop_duplicates("attack_hash").set_index("attack_hash").loc[times.index, ["epochs", "depth", "attack_pgd_inf"]]
    assert (times["fitter"] == "exponential").all() and times["E_T"].to_numpy() == pytest.approx(
        F.restricted_mean(model, covariates, times["t_star"].to_numpy()), rel=1e-6
    )
    check = pd.read_csv(out / "km_check.csv")
    assert not check["flagged"].any() and (check["tolerance"] == 100).all()
    train = train_part(data)
    t0 = np.median(np.repeat(train["duration"].to_numpy(), train["weight"].to_numpy()))
    assert drawn["calibration.png"][0].startswith(f"Calibration at t0 = {t0:.3g} s: ")  # the median training duration, in seconds
    suptitle, panels = drawn["kaplan_meier.png"]
    assert "the Exponential model's prediction" in suptitle and {p[1] for p in panels} == {"adversary's work per sample (s)"}

    log = survival_log(caplog)
    assert not [message for _, message in log if message.startswith("durations on the")]  # fitted in the clock's own unit
    assert not [message for _, message in log if message.startswith("cluster-robust")]
    assert log[0][1].startswith("train/test split by train_hash: 30 / 8 groups, ")
    assert [message.split("\n")[0] for _, message in log if message.startswith("fitted ")] == [
        "fitted weibull, exponential of weibull, exponential; selected exponential (survival.chosen)"
    ]
    km = [(level, message) for level, message in log if "Kaplan-Meier" in message]
    assert km == [("INFO", km[0][1])] and km[0][1].startswith(
        "Exponential's E[T] is within 10000% of the Kaplan-Meier restricted mean to the same budget in 76 of 76"
    )


def test_a_covariates_sd_is_over_samples_with_one_degree_of_freedom_taken():
    covariates = pd.DataFrame({"epochs": [0.0, 1.0, 4.0], "depth": [18.0, 18.0, 18.0]})
    # weights 1, 2, 1 are the samples 0, 1, 1, 4: mean 1.5, squares 2.25 + 0.25 + 0.25 + 6.25 = 9 over 3
    sd = analysis.sample_sd(covariates, np.array([1, 2, 1]))
    assert sd.index.tolist() == ["epochs", "depth"] and sd.tolist() == pytest.approx([math.sqrt(3), 0.0])
    assert analysis.sample_sd(pd.DataFrame({"epochs": [0.0, 2.0]}), np.array([1, 1]))["epochs"] == pytest.approx(math.sqrt(2))
    assert analysis.sample_sd(pd.DataFrame({"epochs": [3.0]}), np.array([1]))["epochs"] == 0.0  # one sample: no spread, not NaN


def robust_se_case(clusters, n=60):
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"duration": rng.exponential(1.0, n) + 0.01, "event": 1, "weight": 1, "x": rng.normal(size=n)})
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    return F.fit_one("weibull", spec, data), data.assign(train_hash=[f"t{i % clusters}" for i in range(n)])


def test_robust_errors_need_two_clusters_and_warn_below_thirty(caplog):
    fit, train = robust_se_case(clusters=2)
    analysis.attach_robust_se(fit, train, "train_hash")
    assert fit.robust_se.notna().all() and fit.warnings == ["cluster-robust SEs from 2 train_hash clusters (< 30): likely too small"]
    fit, train = robust_se_case(clusters=30)
    analysis.attach_robust_se(fit, train, "train_hash")
    assert fit.robust_se.notna().all() and fit.warnings == []
    # robust errors that cannot be computed (here: the training part lacks a fitted covariate) are a note and a warning, not a failure
    fit, train = robust_se_case(clusters=30)
    analysis.attach_robust_se(fit, train.drop(columns="x"), "train_hash")
    assert fit.robust_se is None and fit.warnings == ["cluster-robust SEs: KeyError: \"['x'] not in index\""]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", "weibull: no cluster-robust standard errors: \"['x'] not in index\"")]


def test_robust_intervals_and_p_values_are_wald_ones_from_the_robust_standard_errors():
    fit, train = robust_se_case(clusters=2)
    analysis.attach_robust_se(fit, train, "train_hash")
    coef, se = fit.fitter.params_, fit.robust_se
    summary = F.robust_summary(fit)
    # Table I reads these columns, one row per coefficient in lifelines' order
    assert summary.columns.tolist() == ["se_robust", "lower_robust", "upper_robust", "p_robust"] and summary.index.equals(coef.index)
    z = stats.norm.ppf(0.975)  # 95% by default
    assert summary["se_robust"].tolist() == se.tolist()
    assert summary["lower_robust"].to_numpy() == pytest.approx((coef - z * se).to_numpy(), rel=1e-12)
    assert summary["upper_robust"].to_numpy() == pytest.approx((coef + z * se).to_numpy(), rel=1e-12)
    assert summary["p_robust"].to_numpy() == pytest.approx(2 * stats.norm.sf(np.abs(coef / se)), rel=1e-9)
    narrower = F.robust_summary(fit, level=0.9)
    assert narrower["upper_robust"].to_numpy() == pytest.approx((coef + stats.norm.ppf(0.95) * se).to_numpy(), rel=1e-12)
    fit.robust_se = None  # none could be computed: the columns stay, NaN
    assert F.robust_summary(fit).isna().all().all() and F.robust_summary(fit).index.equals(coef.index)


def test_within_cell_counts_are_listed_by_sorted_cell_whatever_the_row_order():
    rows = pd.DataFrame(
        {
            "attack_hash": ["b", "a", "b", "a", "a", "b"],
            "duration": [2.0, 1.0, 3.0, 2.0, 1.0, 1.0],
            "event": [1, 1, 0, 0, 0, 1],
            "ranking": [1.0, 2.0, 1.0, 3.0, 1.0, 3.0],
            "weight": [1, 2, 1, 1, 1, 1],
        }
    )

    def counts(part):
        return C.concordance_counts(part["duration"], part["ranking"].to_numpy(), part["event"], F.sample_weights(part), part["attack_hash"])

    # a: its failure (2 samples) against the later censoring, ranked right (2), and against the censoring at its
    # time, ranked wrong (2 pairs, 0); b: failure at 2 vs censoring at 3 tied (0.5), failure at 1 vs both ranked wrong
    expected = pd.DataFrame({"concordant": [2.0, 0.5], "pairs": [4.0, 3.0]}, index=pd.Index(["a", "b"], name="stratum"))
    pd.testing.assert_frame_equal(counts(rows), expected)
    pd.testing.assert_frame_equal(counts(rows.iloc[[3, 0, 5, 1, 4, 2]]), expected)


def test_the_figures_draw_with_their_named_style():
    fig, axes = figures.calibration_grid(["weibull"])
    _with_curves(axes)
    figures.finish_calibration(fig, axes, pd.DataFrame([_calibration_row("weibull")]))
    train, _ = axes["weibull"]
    assert train.title.get_fontsize() == figures.PANEL_TITLE["fontsize"]
    assert train.yaxis.label.get_color() == figures.OBSERVED["color"]
    plt.close(fig)
    fig = figures.coefficient_figure(_coefficients(), "Weibull AFT", is_cox=False)
    for ax in fig.axes:
        assert ax.title.get_fontsize() == figures.PANEL_TITLE["fontsize"]
        assert {line.get_alpha() for line in ax.get_xgridlines()} == {figures.GRID["alpha"]}
    plt.close(fig)


def test_the_stage_writes_the_cure_budget_and_competing_tables_in_the_clocks_unit(tmp_path, caplog, stage_run):
    """On the flops clock (fitted in GFLOPs) with a cure model, a composite's cells and a defence
    dummy with few failures: the cure model's tables and E_T_breakable come back in FLOPs."""
    data = synthetic_cells(n_cells=24, samples=5)
    composite = data["attack_pgd_inf"] == 1
    data = data.assign(
        duration=data["duration"] * 1e9,
        broken_by=np.where(composite & (data["event"] == 1), "apgd_ce", ""),
        defence_fsq=(data["attack_hash"] == "c3").astype(float),
    )
    cfg = stage_cfg(tmp_path, data, "clock=flops", "survival.fitters=[weibull,weibull_cure]", "budget.draws=20")
    drawn, _ = stage_run
    caplog.set_level("INFO", logger=analysis.log.name)
    analysis.analyse(cfg, survival.STAGE.resolved(cfg))
    plt.close("all")
    out = tmp_path / "reports" / "survival"
    cure = saved_models.load_models(out / "models.pkl")["weibull_cure"]
    assert math.isfinite(cure.log_likelihood_ratio_test().test_statistic)  # print_summary's test: lifelines' null model of the cure fitter
    cells = data.drop_duplicates("attack_hash").set_index("attack_hash")
    breakable = cure.predict_expectation_breakable(F.covariates_of(data.assign(duration=data["duration"] / 1e9)))
    per_cell = breakable.groupby(data["attack_hash"]).mean() * 1e9  # fitted in GFLOPs, written in FLOPs
    times = pd.read_csv(out / "expected_times.csv").set_index("attack_hash")
    assert times["E_T_breakable"].to_numpy() == pytest.approx(per_cell[times.index].to_numpy(), rel=1e-9)
    fractions = pd.read_csv(out / "cure_fractions.csv").set_index("attack_hash")
    assert len(fractions) == 24 and fractions["E_T_breakable"].to_numpy() == pytest.approx(per_cell[fractions.index].to_numpy(), rel=1e-9)
    budget = pd.read_csv(out / "budget_sufficiency.csv").set_index("attack_hash")
    assert len(budget) == 24 and (budget["factor"] == 10).all() and budget["still_breakable"].between(0, 1).all()
    assert budget["budget"].to_numpy() == pytest.approx(cells.loc[budget.index, "duration"].to_numpy(), rel=1e-9)  # each cell's budget, in FLOPs
    competing = pd.read_csv(out / "competing_risks.csv")
    assert set(competing["attack_hash"]) == set(cells.index[cells["attack_pgd_inf"] == 1]) and set(competing["component"]) == {"apgd_ce"}
    assert (out / "competing_risks.png").exists() and {panel[1] for panel in drawn["competing_risks.png"][1]} == {"adversary's work per sample (FLOPs)"}
    assert any(level == "WARNING" and message.startswith("survival training split: dummy defence_fsq has") for level, message in survival_log(caplog))


def test_a_long_kaplan_meier_curve_is_drawn_within_a_third_of_a_pixel_at_a_few_steps():
    """Past KM_DRAWN_POINTS steps (10^7 samples: a million) the curve is drawn at the steps
    where it crosses a multiple of 0.001: at most about a thousand, and at every one of its
    steps the drawn curve is within 0.001 of lifelines' estimate."""
    from lifelines import KaplanMeierFitter

    rng = np.random.default_rng(0)
    fitter = KaplanMeierFitter().fit(rng.exponential(1.0, 30_000), rng.random(30_000) < 0.7, label="none (Kaplan-Meier)")
    fig, ax = plt.subplots()
    figures.plot_kaplan_meier(ax, fitter, "tab:blue")
    (line,) = ax.get_lines()
    times, drawn = line.get_xdata(), line.get_ydata()
    assert len(fitter.survival_function_) > figures.KM_DRAWN_POINTS and len(times) <= 1002 and line.get_label() == "none (Kaplan-Meier)"
    curve = fitter.survival_function_.iloc[:, 0]
    drawn_at_steps = drawn[np.searchsorted(times, curve.index.to_numpy(), side="right") - 1]  # a step curve drawn "post"
    assert np.abs(drawn_at_steps - curve.to_numpy()).max() < 1e-3
    plt.close(fig)


def test_past_row_block_the_figures_kaplan_meier_curves_are_lifelines_curves(monkeypatch):
    """The Kaplan-Meier figure's curves of a large data set come from trashfire.survival.km,
    every (attack family, defence) at once: lifelines' survival functions, times and labels."""
    from trashfire.survival import expected_time

    rng = np.random.default_rng(2)
    n = 600
    data = pd.DataFrame(
        {
            "attack_family": rng.choice(["fgm linf", "pgd linf"], n),
            "defence": rng.choice(["none", "conf", "fsq"], n),
            "duration": rng.integers(1, 60, n).astype(float),  # tied times
            "event": (rng.random(n) < 0.6).astype(int),
            "weight": rng.integers(1, 3, n),
        }
    )
    theirs = expected_time.kaplan_meier_fits(data)
    monkeypatch.setattr(expected_time, "ROW_BLOCK", 100)
    ours = expected_time.kaplan_meier_fits(data)
    assert list(ours) == list(theirs) and len(ours) == 6
    for key, fit in theirs.items():
        assert ours[key]._label == fit._label
        pd.testing.assert_frame_equal(ours[key].survival_function_, fit.survival_function_, check_exact=False, rtol=1e-12, check_names=False)
