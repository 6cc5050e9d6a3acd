"""The Newton-Raphson fits (trashfire.survival.newton, in lifelines' classes:
trashfire.survival.aft and newton_fit) against lifelines' own fits of the
same models on the same data: lifelines stays the reference for the optimum, the
log-likelihood and the standard errors; the analytic derivatives against finite differences."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from lifelines import LogLogisticAFTFitter, LogNormalAFTFitter, WeibullAFTFitter
from lifelines.fitters import ParametricRegressionFitter
from scipy.integrate import quad
from scipy.special import expit, hyp2f1

from trashfire.survival import fitters as F
from trashfire.survival.aft import (
    NewtonExponentialAFTFitter,
    NewtonLogLogisticAFTFitter,
    NewtonLogNormalAFTFitter,
    NewtonWeibullAFTFitter,
    log_logistic_restricted_mean,
)
from trashfire.survival.cure import LogLogisticCureFitter, WeibullCureFitter
from trashfire.survival.fitters import ExponentialAFTFitter
from trashfire.survival.newton import LocationScale, extreme_value, logistic, normal

PAIRS = [
    (WeibullAFTFitter, NewtonWeibullAFTFitter),
    (LogNormalAFTFitter, NewtonLogNormalAFTFitter),
    (LogLogisticAFTFitter, NewtonLogLogisticAFTFitter),
    (ExponentialAFTFitter, NewtonExponentialAFTFitter),
]


@pytest.fixture(scope="module")
def censored():
    """4,000 samples, log T = 1 + 0.5 a - 0.3 b + 0.01 c + 0.7 W (W Gumbel), a third censored,
    and a dummy with a handful of failures (a flat direction, as a rare attack family's)."""
    rng = np.random.default_rng(0)
    n = 4000
    frame = pd.DataFrame(
        {"a": rng.normal(size=n), "b": rng.integers(0, 2, n).astype(float), "c": rng.uniform(0, 100, n), "rare": (np.arange(n) < 12).astype(float)}
    )
    log_t = 1 + 0.5 * frame.a - 0.3 * frame.b + 0.01 * frame.c + 0.7 * np.log(-np.log(rng.uniform(size=n)))
    censor = rng.exponential(20, size=n)
    return frame.assign(duration=np.minimum(np.exp(log_t), censor), event=(np.exp(log_t) <= censor).astype(int))


@pytest.mark.parametrize("reference, newton", PAIRS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("penalizer", [0.0, 0.001])
def test_it_reaches_lifelines_optimum_with_lifelines_errors(censored, reference, newton, penalizer):
    theirs = reference(penalizer=penalizer).fit(censored, "duration", "event")
    ours = newton(penalizer=penalizer).fit(censored, "duration", "event")
    # never below lifelines' optimum (its quasi-Newton may stop a little short), and equal to it
    assert ours.log_likelihood_ >= theirs.log_likelihood_ - 1e-7 * abs(theirs.log_likelihood_)
    assert ours.log_likelihood_ == pytest.approx(theirs.log_likelihood_, rel=1e-7)
    pd.testing.assert_series_equal(ours.params_, theirs.params_, atol=2e-3, rtol=0)
    pd.testing.assert_series_equal(ours.standard_errors_, theirs.standard_errors_, rtol=2e-3)
    assert 0 < ours.newton_iterations <= 20
    assert np.abs(ours.newton_gradient_).max() < 1e-4  # nats, at the optimum


@pytest.mark.parametrize("reference, newton", PAIRS, ids=lambda c: c.__name__)
def test_its_predictions_are_lifelines_at_the_same_coefficients(censored, reference, newton):
    ours = newton(penalizer=0.001).fit(censored, "duration", "event")
    theirs = reference(penalizer=0.001).fit(censored, "duration", "event")
    rows = censored.head(50)
    np.testing.assert_allclose(ours.predict_median(rows), theirs.predict_median(rows), rtol=2e-3)
    assert ours.AIC_ == pytest.approx(theirs.AIC_, rel=1e-7)


def test_weighted_rows_are_their_repeated_samples(censored):
    rows = censored.head(400).assign(weight=np.tile([1, 3], 200))
    repeated = rows.loc[rows.index.repeat(rows["weight"])].drop(columns="weight").reset_index(drop=True)
    weighted = NewtonLogLogisticAFTFitter().fit(rows, "duration", "event", weights_col="weight")
    expanded = NewtonLogLogisticAFTFitter().fit(repeated, "duration", "event")
    assert weighted.log_likelihood_ == pytest.approx(expanded.log_likelihood_, rel=1e-9)
    pd.testing.assert_series_equal(weighted.params_, expanded.params_, atol=1e-7, rtol=0)


def test_covariates_on_the_shape_go_to_lifelines_optimiser(censored):
    ours = NewtonWeibullAFTFitter().fit(censored, "duration", "event", ancillary=censored[["a"]].assign(duration=censored.duration))
    assert ours.newton_iterations is None and np.isfinite(ours.log_likelihood_)


@pytest.mark.parametrize("density", [extreme_value, logistic, normal])
def test_gradient_and_hessian_are_the_log_likelihoods(density):
    rng = np.random.default_rng(1)
    n = 60
    design = np.c_[rng.normal(size=(n, 2)), np.ones(n)]
    model = LocationScale(density, design, rng.normal(size=n) * 2, rng.integers(0, 2, n).astype(bool), rng.uniform(1, 2, n), fixed_scale=False)
    theta, step = np.array([0.2, -0.1, 0.3, -0.2]), 1e-4

    def loglik(point):
        return model.evaluate(point[:-1], point[-1], derivatives=False)[0]

    _, gradient, hessian = model.evaluate(theta[:-1], theta[-1])
    unit = np.eye(len(theta)) * step
    numeric_gradient = [(loglik(theta + e) - loglik(theta - e)) / (2 * step) for e in unit]
    numeric_hessian = [
        [(loglik(theta + e + k) - loglik(theta + e - k) - loglik(theta - e + k) + loglik(theta - e - k)) / (4 * step**2) for k in unit] for e in unit
    ]
    np.testing.assert_allclose(gradient, numeric_gradient, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hessian, numeric_hessian, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("reference, newton", PAIRS, ids=lambda c: c.__name__)
def test_its_row_scores_are_autograds_of_lifelines_likelihood(censored, reference, newton):
    """The cluster-robust sandwich's scores: closed form against lifelines' likelihood by autograd."""
    rows = censored.head(300).assign(weight=np.tile([1.0, 2.0], 150))
    fitter = newton(penalizer=0.001).fit(rows, "duration", "event", weights_col="weight")
    np.testing.assert_allclose(F.sample_scores(fitter, rows), F.autograd_scores(fitter, rows), rtol=1e-8, atol=1e-10)
    # and sample_scores takes the closed form (linear in rows), not autograd's Jacobian (a Hessian's cost)
    closed = fitter.row_scores(
        rows.duration.to_numpy(), rows.event.to_numpy().astype(bool), rows.weight.to_numpy(), rows.drop(columns=["duration", "event", "weight"])
    )
    np.testing.assert_array_equal(F.sample_scores(fitter, rows), closed)


# --- fitters of several linear predictors (trashfire.survival.newton_fit) ----------------------


def lifelines_optimiser(newton_class):
    """The same class, fitted by lifelines' own scipy optimiser on its autograd objective."""
    lifelines_class = next(c for c in newton_class.__mro__ if c.__module__.startswith("lifelines"))
    own = {"_fit_model": ParametricRegressionFitter._fit_model, "_scipy_fit_method": lifelines_class._scipy_fit_method}
    return type(f"Lifelines{newton_class.__name__}", (newton_class,), own)


@pytest.fixture(scope="module")
def cured():
    """3,000 samples: a cured share logit^-1(-0.5 + a) never fails, the rest fail at a Weibull
    (shape 1.5, log scale 0.5 - 0.4 a + 0.3 b) time; censored at 6, or at random before."""
    rng = np.random.default_rng(3)
    n = 3000
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 2, n).astype(float)})
    is_cured = rng.uniform(size=n) < expit(-0.5 + frame.a)
    latency = np.exp(0.5 - 0.4 * frame.a + 0.3 * frame.b) * rng.weibull(1.5, n)
    censor = np.minimum(6.0, rng.exponential(30, n))
    failed = ~is_cured & (latency <= censor)
    return frame.assign(duration=np.where(failed, latency, censor), event=failed.astype(int))


MULTI = [F.GeneralizedGammaAFTFitter, WeibullCureFitter, LogLogisticCureFitter]


@pytest.mark.parametrize("newton", MULTI, ids=lambda c: c.__name__)
def test_several_predictors_reach_lifelines_optimum_with_lifelines_errors(censored, cured, newton):
    data = censored.drop(columns="rare") if newton is F.GeneralizedGammaAFTFitter else cured
    ours = newton(penalizer=0.001).fit(data, "duration", "event")
    theirs = lifelines_optimiser(newton)(penalizer=0.001).fit(data, "duration", "event")
    assert ours.log_likelihood_ >= theirs.log_likelihood_ - 1e-9 * abs(theirs.log_likelihood_)
    assert ours.log_likelihood_ == pytest.approx(theirs.log_likelihood_, rel=1e-7)
    pd.testing.assert_series_equal(ours.params_, theirs.params_, atol=2e-3, rtol=0)
    pd.testing.assert_series_equal(ours.standard_errors_, theirs.standard_errors_, rtol=2e-3)
    assert ours.AIC_ == pytest.approx(theirs.AIC_, rel=1e-7)
    assert 0 < ours.newton_iterations <= 30 and theirs.newton_iterations is None


@pytest.mark.parametrize("newton", MULTI, ids=lambda c: c.__name__)
def test_several_predictors_row_scores_are_autograds_of_lifelines_likelihood(censored, cured, newton):
    data = (censored.drop(columns="rare") if newton is F.GeneralizedGammaAFTFitter else cured).head(300).assign(weight=np.tile([1.0, 2.0], 150))
    fitted = newton(penalizer=0.001).fit(data, "duration", "event", weights_col="weight")
    ours = fitted.row_scores(
        data.duration.to_numpy(), data.event.to_numpy().astype(bool), data.weight.to_numpy(), data.drop(columns=["duration", "event", "weight"])
    )
    np.testing.assert_allclose(ours, F.autograd_scores(fitted, data), rtol=1e-5, atol=1e-8)


def test_the_weibull_cure_likelihood_is_the_models_without_lifelines_hazard_floor():
    """lifelines floors a regression fitter's hazard at 1e-20 in its likelihood; a failure the
    model deems near impossible (an early one, under a steep Weibull) then counts at least
    -46 nats, and the optimum moves. Ours is the model's own likelihood, summed by hand here."""
    rng = np.random.default_rng(4)
    n = 2000
    frame = pd.DataFrame({"a": rng.normal(size=n)})
    latency = np.exp(1.0 + 0.3 * frame.a) * rng.weibull(4.0, n)
    failed = (rng.uniform(size=n) > 0.3) & (latency < 5.0)
    frame = frame.assign(duration=np.where(failed, latency, 5.0), event=failed.astype(int))
    frame.loc[:4, ["duration", "event"]] = [1e-9, 1]  # failures at once: the hazard (t / lambda)^3 / lambda is some 1e-27
    ours = WeibullCureFitter(penalizer=0.0).fit(frame, "duration", "event")
    cured = ours.cured_fraction(frame).to_numpy()
    scale, shape = ours._latency(frame)
    t, event = frame.duration.to_numpy(), frame.event.to_numpy() == 1
    latency_survival = np.exp(-((t / scale) ** shape))
    density = (1 - cured) * shape / scale * (t / scale) ** (shape - 1) * latency_survival
    by_hand = np.where(event, np.log(density), np.log(cured + (1 - cured) * latency_survival)).sum()
    assert ours.log_likelihood_ == pytest.approx(by_hand, rel=1e-12)
    theirs = lifelines_optimiser(WeibullCureFitter)(penalizer=0.0).fit(frame, "duration", "event")
    assert theirs.log_likelihood_ > ours.log_likelihood_ + 1  # lifelines' floored likelihood: higher, and not the model's


@pytest.mark.parametrize("reference, newton", PAIRS, ids=lambda c: c.__name__)
def test_closed_form_restricted_means_are_the_integral_of_the_survival_curve(censored, reference, newton):
    fitted = newton(penalizer=0.001).fit(censored, "duration", "event")
    rows = censored.drop(columns=["duration", "event"]).head(300)
    budgets = np.random.default_rng(2).uniform(0.5, 40.0, len(rows))
    closed = F.restricted_mean(F.Fit("newton", fitted, 0.001, "Newton-Raphson", 1), rows, budgets)
    np.testing.assert_array_equal(closed, fitted.closed_restricted_mean(rows, budgets))  # the closed form itself, not the integral
    fitted.newton_iterations = None  # as if lifelines' optimiser had fitted it: the numerical integral
    integral = F.restricted_mean(F.Fit("newton", fitted, 0.001, "BFGS", 1), rows, budgets)
    np.testing.assert_allclose(closed, integral, rtol=1e-5)


@pytest.mark.parametrize("shape", [0.4, 0.999, 1.0, 1.0 + 1e-12, 1.001, 1.5, 4.0, 30.0])
def test_the_log_logistic_restricted_mean_is_its_integral_on_both_sides_of_shape_one(shape):
    """The incomplete-beta form (shape > 1) and Pfaff's 2F1 (shape <= 1, no mean) against the
    integral of 1 / (1 + (u / scale)^shape), from far below the scale to far above it."""
    scale, t_star = 2.0, np.geomspace(1e-6, 1e6, 13)

    def survival(u):
        return 1 / (1 + (u / scale) ** shape)

    def integral(t):  # to the scale directly, beyond it in log u (where the curve is smooth)
        below = quad(survival, 0, min(t, scale), limit=200, epsabs=0, epsrel=1e-12)[0]
        return below + (quad(lambda y: survival(np.exp(y)) * np.exp(y), np.log(scale), np.log(t), limit=200, epsabs=0, epsrel=1e-12)[0] if t > scale else 0.0)

    # quad is good to about 1e-7 at the cusp at 0 (shape < 1)
    np.testing.assert_allclose(log_logistic_restricted_mean(t_star, scale, shape), [integral(t) for t in t_star], rtol=1e-6)


def test_the_log_logistic_restricted_mean_takes_each_rows_form_where_shapes_differ():
    """A cure model's shape may vary by row: each row gets its own form, equal to the 2F1 one."""
    t_star, scale, shape = np.array([0.5, 3.0, 40.0, 7.0]), np.array([1.0, 2.0, 0.5, 7.0]), np.array([0.7, 1.5, 3.0, 1.0])
    a, log_z = 1 / shape, shape * np.log(t_star / scale)
    pfaff = t_star * np.exp(-a * np.logaddexp(0.0, log_z)) * hyp2f1(a, a, 1 + a, expit(log_z))
    np.testing.assert_allclose(log_logistic_restricted_mean(t_star, scale, shape), pfaff, rtol=1e-12)
    # t* far below the scale (expit(log z) underflows): t* itself, as the 2F1 form gives it
    assert log_logistic_restricted_mean(np.array([10.0, 10.0]), np.array([np.inf, 1e300]), 2.0).tolist() == [10.0, 10.0]
    one_budget = [log_logistic_restricted_mean(np.array([3.0]), s, k)[0] for s, k in zip(scale, shape)]  # a scalar t* (the longest time), rows' own shapes
    np.testing.assert_allclose(log_logistic_restricted_mean(3.0, scale, shape), one_budget, rtol=1e-15)


def test_a_fit_lifelines_optimiser_made_takes_the_integral_not_the_closed_form(censored):
    """Covariates on the shape send the fit to lifelines' optimiser (see above), where the
    closed form, written for a shape without covariates, does not hold: the restricted mean is
    then the integral of lifelines' own survival curve."""
    ancillary = censored[["a"]].assign(duration=censored.duration)
    fitted = NewtonWeibullAFTFitter().fit(censored, "duration", "event", ancillary=ancillary)
    rows = censored.drop(columns=["duration", "event"]).head(20)
    ours = F.restricted_mean(F.Fit("newton", fitted, 0.0, "BFGS", 1), rows, np.full(len(rows), 10.0))
    grid = np.linspace(0.0, 10.0, 20001)
    by_trapezoid = np.trapezoid(fitted.predict_survival_function(rows, times=grid).to_numpy(), grid, axis=0)
    np.testing.assert_allclose(ours, by_trapezoid, rtol=1e-6)
    assert np.abs(fitted.closed_restricted_mean(rows, np.full(len(rows), 10.0)) / by_trapezoid - 1).max() > 1e-3


def test_the_calibration_splines_gradient_by_hand_is_autograds():
    """FastCRCSplineFitter's numpy value, gradient and (differenced) Hessian against torch
    autograd's, where the hazard is clipped and where the spline's slope turns negative."""
    spline = F.FastCRCSplineFitter(n_baseline_knots=3)
    spline.knots = np.array([-1.0, 0.3, 1.2])
    rng = np.random.default_rng(0)
    n = 3000
    log_t, event = rng.normal(scale=2.0, size=n), rng.random(n) < 0.6
    for gamma2 in (0.05, -2.0):  # -2: slope negative beyond the middle knot
        etas = [rng.normal(size=n) * 0.5, np.full(n, -0.5), np.full(n, 1.5), np.full(n, gamma2)]
        by_hand, by_autograd = spline.row_derivatives(log_t, event, etas, 2), spline.autograd_row_derivatives(log_t, event, etas, 2)
        np.testing.assert_allclose(by_hand[0], by_autograd[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(by_hand[1], by_autograd[1], rtol=1e-10, atol=1e-10)
        # the Hessian: differences of the gradient, away from the rows where a clip starts (its kink)
        smooth = (np.abs(by_hand[2] - by_autograd[2]) <= 1e-4 * (np.abs(by_autograd[2]) + 1)).all(axis=(1, 2))
        assert smooth.mean() > 0.99
        np.testing.assert_allclose(by_hand[2][smooth], by_autograd[2][smooth], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lam", [None, 0.5, -0.4])
def test_the_generalised_gammas_closed_form_restricted_mean_is_the_integral(censored, lam):
    """At its fitted lambda and at one of each sign (Q and P of the incomplete gamma swap)."""
    fitted = F.GeneralizedGammaAFTFitter(penalizer=0.001).fit(censored.drop(columns="rare"), "duration", "event")
    if lam is not None:
        fitted.params_.loc[("lambda_", "Intercept")] = lam
    rows = censored.drop(columns=["duration", "event", "rare"]).head(300)
    budgets = np.random.default_rng(3).uniform(0.5, 40.0, len(rows))
    closed = F.restricted_mean(F.Fit("gengamma", fitted, 0.001, "Newton-Raphson", 1), rows, budgets)
    fitted.newton_iterations = None
    np.testing.assert_allclose(closed, F.restricted_mean(F.Fit("gengamma", fitted, 0.001, "BFGS", 1), rows, budgets), rtol=1e-5)


@pytest.mark.parametrize("newton", [NewtonWeibullAFTFitter, NewtonLogNormalAFTFitter, WeibullCureFitter], ids=lambda c: c.__name__)
def test_a_fit_in_row_blocks_is_the_fit_in_one(censored, cured, newton, monkeypatch):
    """Past ROW_BLOCK rows the Hessian's products are summed block by block, and an AFT fit
    starts from its optimum on a sample of ROW_BLOCK rows (the normal equations' start before
    it: no copy of the design): the same optimum, within rounding, in fewer passes over every
    row."""
    data = cured if newton is WeibullCureFitter else censored
    whole = newton(penalizer=0.001).fit(data, "duration", "event")
    monkeypatch.setattr("trashfire.survival.newton.ROW_BLOCK", 512)
    monkeypatch.setattr("trashfire.survival.aft.ROW_BLOCK", 512)
    blocks = newton(penalizer=0.001).fit(data, "duration", "event")
    assert blocks.log_likelihood_ == pytest.approx(whole.log_likelihood_, rel=1e-12)
    if newton is not WeibullCureFitter:  # a cure model's sampled start: tests/survival/test_survival_design.py
        assert blocks.newton_iterations < whole.newton_iterations  # 6 -> 4 and 4 -> 3 Newton steps on the 4,000 rows
    pd.testing.assert_series_equal(blocks.params_, whole.params_, atol=1e-7, rtol=1e-7)
    pd.testing.assert_series_equal(blocks.standard_errors_, whole.standard_errors_, rtol=1e-7)


@pytest.mark.parametrize(
    "newton",
    [NewtonWeibullAFTFitter, NewtonLogNormalAFTFitter, NewtonLogLogisticAFTFitter, NewtonExponentialAFTFitter, F.GeneralizedGammaAFTFitter],
    ids=lambda c: c.__name__,
)
def test_the_closed_form_log_likelihood_is_lifelines_score(censored, newton):
    """Table I's log-likelihood past ROW_BLOCK rows (fitters.log_likelihood): the fitter's own
    evaluation, lifelines' score() times the samples; a cure model's likelihood is not lifelines'
    (no hazard floor), so it leaves it to lifelines."""
    data = censored.drop(columns="rare").assign(weight=np.tile([1.0, 2.0], len(censored) // 2))
    fitted = newton(penalizer=0.001).fit(data, "duration", "event", weights_col="weight")
    covariates = data.drop(columns=["duration", "event", "weight"])
    own = fitted.unpenalised_log_likelihood(data.duration.to_numpy(), data.event.to_numpy(), data.weight.to_numpy(), covariates)
    assert own == pytest.approx(fitted.score(data, scoring_method="log_likelihood") * data.weight.sum(), rel=1e-10)


def test_a_cure_models_log_likelihood_is_left_to_lifelines(cured):
    fitted = WeibullCureFitter(penalizer=0.001).fit(cured, "duration", "event")
    assert fitted.unpenalised_log_likelihood(cured.duration.to_numpy(), cured.event.to_numpy(), np.ones(len(cured)), cured[["a", "b"]]) is None
