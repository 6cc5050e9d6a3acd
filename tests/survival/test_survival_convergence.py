"""Whether a survival fit reached its optimum (trashfire.survival.convergence): the Newton gain
by hand, the check against the log-likelihood a fit gives up off its optimum, a fit that
stopped short fitted again to the optimum, Table I's convergence columns, and dummies with
few failures named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from autograd import grad
from lifelines import CoxPHFitter, KaplanMeierFitter, WeibullAFTFitter
from lifelines.datasets import load_rossi
from omegaconf import OmegaConf

from tests.conftest import ROOT
from trashfire.core.config import compose
from trashfire.survival import analysis, convergence, scoring
from trashfire.survival import fitters as F
from trashfire.survival.convergence import CONVERGED_GAIN, check, fit_converged, newton_gain
from trashfire.survival.split import split_groups

# the second start is lifelines' scipy optimisers' (the generalised gamma's, the cure models',
# a user's lifelines class): these tests fit the plain AFT models with lifelines' own classes,
# which the default fits by Newton-Raphson (trashfire.survival.newton; its check is below)
LIFELINES_AFT = [
    "survival.models.weibull.fitter._target_=lifelines.WeibullAFTFitter",
    "survival.models.lognormal.fitter._target_=lifelines.LogNormalAFTFitter",
    "survival.models.loglogistic.fitter._target_=lifelines.LogLogisticAFTFitter",
    "survival.models.exponential.fitter._target_=trashfire.survival.fitters.ExponentialAFTFitter",
]


@pytest.fixture(scope="module")
def settings():
    return compose(LIFELINES_AFT, conf=ROOT / "conf").survival


@pytest.mark.parametrize("name", ["weibull", "lognormal", "loglogistic", "exponential"])
def test_a_newton_fit_is_checked_with_its_analytic_gradient_as_lifelines_objective_gives_it(rossi, name):
    """The default plain AFT fits (Newton-Raphson): converged, their iterations in Table I, and
    the gradient they report is autograd's of lifelines' penalised objective at the fit."""
    spec = compose([], conf=ROOT / "conf").survival.models[name]
    fit = fit_converged(name, spec, rossi)
    assert fit.optimiser == "Newton" and fit.convergence.converged and fit.convergence.starts == 1
    assert 0 < fit.convergence.iterations <= 20 and fit.convergence.gradient_norm < 1e-4
    fitter = fit.fitter
    arguments = convergence._parametric_arguments(fitter, rossi)
    autograd = float(arguments[2].sum()) * np.asarray(grad(fitter._neg_likelihood_with_penalty_function)(convergence._normalised_point(fitter), *arguments))
    np.testing.assert_allclose(fitter.newton_gradient_, autograd, atol=1e-6)


@pytest.fixture(scope="module")
def rossi():
    return load_rossi().rename(columns={"week": "duration", "arrest": "event"})


def test_the_newton_gain_is_half_of_g_h_inverse_g():
    assert newton_gain(np.array([2.0, 0.0]), np.diag([4.0, 1.0])) == pytest.approx(0.5)
    assert newton_gain(np.array([1.0, 3.0]), np.diag([1.0, 9.0])) == pytest.approx(0.5 * (1.0 + 1.0))
    assert newton_gain(np.array([2.0, 0.0]), np.diag([4.0, 0.0])) == pytest.approx(0.5)  # singular: the pseudo-inverse
    assert newton_gain(np.zeros(0), np.zeros((0, 0))) == 0.0


def penalised_log_likelihood(fit: F.Fit, data: pd.DataFrame) -> float:
    """lifelines' penalised objective at the fit's coefficients, in nats (a sum over samples)."""
    if fit.is_cox:
        beta = (fit.fitter.params_ * fit.fitter._norm_std).to_numpy()
        return efron_partial_log_likelihood(fit.fitter.params_, data) - len(data) * fit.fitter.penalizer * 0.5 * float(beta @ beta)
    arguments = convergence._parametric_arguments(fit.fitter, data)
    point = convergence._normalised_point(fit.fitter)
    return -float(arguments[2].sum()) * float(fit.fitter._neg_likelihood_with_penalty_function(point, *arguments))


def efron_partial_log_likelihood(coefficients: pd.Series, data: pd.DataFrame) -> float:
    """Cox's partial log-likelihood with Efron's correction for tied times, by its definition:
    at each time with d failures D, sum_D eta - sum_{k<d} log(sum_{at risk} e^eta - k/d sum_D e^eta)."""
    eta = data[list(coefficients.index)].to_numpy(float) @ coefficients.to_numpy()
    times, events = data["duration"].to_numpy(float), data["event"].to_numpy() == 1
    total = 0.0
    for t in np.unique(times[events]):
        failed, at_risk = events & (times == t), times >= t
        d, risk, tied = failed.sum(), np.exp(eta[at_risk]).sum(), np.exp(eta[failed]).sum()
        total += eta[failed].sum() - sum(np.log(risk - k / d * tied) for k in range(d))
    return float(total)


@pytest.mark.parametrize("name", ["weibull", "loglogistic", "gengamma", "cox"])
def test_at_the_optimum_nothing_is_left_to_gain_and_off_it_the_gain_is_what_the_fit_lost(settings, rossi, name):
    fit = F.fit_one(name, settings.models[name], rossi)
    at_optimum = check(fit, rossi)
    assert at_optimum.converged and abs(at_optimum.newton_gain) < 1e-4
    best = penalised_log_likelihood(fit, rossi)
    assert best == pytest.approx(fit.fitter.log_likelihood_, rel=1e-9)  # lifelines' own, penalised
    # one coefficient moved by 0.01 SD of its covariate: near enough for the quadratic model
    moved = fit.fitter.params_.copy()
    [prio] = [key for key in moved.index if (key[-1] if isinstance(key, tuple) else key) == "prio"]
    moved[prio] += 0.01 / rossi["prio"].std()
    fit.fitter.params_ = moved
    off = check(fit, rossi)
    lost = best - penalised_log_likelihood(fit, rossi)
    assert lost > 5 * CONVERGED_GAIN and not off.converged
    assert off.newton_gain == pytest.approx(lost, rel=0.05)
    assert off.gradient_norm > at_optimum.gradient_norm


def test_a_fit_stopped_short_of_its_optimum_is_fitted_again_to_it(settings, rossi):
    """SLSQP with a loose tolerance reports success 25 nats below the optimum: the check sees it,
    and the second start reaches lifelines' own optimum."""
    short = OmegaConf.merge(settings.models.weibull, {"fit_options": {"ftol": 0.1}})
    optimum = F.fit_one("weibull", settings.models.weibull, rossi).fitter.log_likelihood_
    stopped = F.fit_one("weibull", short, rossi)
    assert stopped.fitter.log_likelihood_ < optimum - 1.0 and not check(stopped, rossi).converged
    fit = fit_converged("weibull", short, rossi)
    assert fit.convergence.starts == 2 and fit.convergence.converged
    assert fit.fitter.log_likelihood_ == pytest.approx(optimum, rel=1e-8)
    assert not any("not converged" in note for note in fit.warnings)


def test_a_fit_at_its_optimum_runs_once_and_one_that_stays_short_says_so(settings, rossi, monkeypatch):
    fit = fit_converged("weibull", settings.models.weibull, rossi)
    assert fit.convergence.starts == 1 and fit.convergence.converged
    monkeypatch.setattr(convergence, "CONVERGED_GAIN", -1.0)  # no optimum passes: the second start cannot help
    fit = fit_converged("weibull", settings.models.weibull, rossi)
    assert fit.convergence.starts == 2 and not fit.convergence.converged
    assert any(note.startswith("not converged: a Newton step would still gain") for note in fit.warnings)


def test_table_one_states_each_fits_convergence(settings, rossi):
    data = rossi.assign(train_hash=[f"t{i % 10}" for i in range(len(rossi))], weight=1)
    train, test = split_groups(data, "train_hash", 0.2, 0)
    comparison, _ = analysis.compare(train, test, OmegaConf.merge(settings, {"fitters": ["weibull", "cox"]}))
    rows = comparison.set_index("fitter")
    first = comparison.columns.get_loc("converged")
    assert list(comparison.columns[first : first + len(scoring.CONVERGENCE_COLUMNS)]) == scoring.CONVERGENCE_COLUMNS
    for name in ("weibull", "cox"):
        assert bool(rows.loc[name, "converged"]) and rows.loc[name, "starts"] == 1
        assert rows.loc[name, "newton_gain"] < CONVERGED_GAIN and np.isfinite(rows.loc[name, "gradient_norm"])
    assert rows.loc[["runtime_baseline", "failure_share_baseline"], "converged"].isna().all()
    assert rows.loc["weibull", ["aft", "penalizer", "optimiser", "attempts"]].tolist() == [True, 0.001, "SLSQP", 1]
    assert rows.loc["cox", ["aft", "optimiser"]].tolist() == [False, "Newton"] and (comparison["split_by"] == "train_hash").all()
    assert "optimum" not in scoring.latex_table(comparison, 0.2)
    weibull = comparison["fitter"] == "weibull"
    comparison.loc[weibull, ["converged", "starts"]] = [False, 2]
    caption = scoring.latex_table(comparison, 0.2)
    assert f"Not at its optimum (a Newton step would still gain > {CONVERGED_GAIN:g} nats): Weibull." in caption
    comparison.loc[weibull, "converged"] = True
    assert "Fitted again from a second start to reach its optimum: Weibull." in scoring.latex_table(comparison, 0.2)
    fitted = comparison["status"] == "fitted"  # two models each: named in the table's order
    comparison.loc[fitted, ["converged", "starts"]] = [False, 2]
    assert "would still gain > 0.001 nats): Weibull, Cox PH." in scoring.latex_table(comparison, 0.2)
    comparison.loc[fitted, "converged"] = True
    assert "Fitted again from a second start to reach its optimum: Weibull, Cox PH." in scoring.latex_table(comparison, 0.2)


@pytest.mark.parametrize(
    "fitter, reason",
    [
        (CoxPHFitter(penalizer=0.05, l1_ratio=0.5), "an L1 penalty (l1_ratio > 0) has no gradient where a coefficient is 0"),
        (CoxPHFitter(baseline_estimation_method="spline", n_baseline_knots=3), "only Cox PH with the Breslow baseline and no strata is checked"),
    ],
)
def test_a_fit_this_check_cannot_judge_is_kept_as_lifelines_accepted_it_and_says_so(rossi, fitter, reason):
    fitter.fit(rossi, "duration", "event")
    fit = F.Fit("cox", fitter, fitter.penalizer, "Newton", 1)
    state = convergence.safe_check(fit, rossi)
    assert state.unchecked == reason and state.converged is None
    assert state.columns()["converged"] is None and np.isnan(state.columns()["newton_gain"])


def test_a_non_finite_gradient_or_hessian_is_no_optimum():
    assert newton_gain(np.array([1.0, np.nan]), np.eye(2)) == np.inf
    assert newton_gain(np.array([1.0, 0.0]), np.array([[np.inf, 0.0], [0.0, 1.0]])) == np.inf
    with np.errstate(all="ignore"):  # a step that overflows in both directions: inf - inf would be NaN
        assert newton_gain(np.array([1e200, 1e200]), np.diag([1e-200, -1e-200])) == np.inf


def test_strata_an_l1_penalty_and_other_fitters_are_named_as_unchecked(settings, rossi):
    stratified = CoxPHFitter().fit(rossi, "duration", "event", strata=["race"])
    assert convergence.uncheckable(stratified) == "only Cox PH with the Breslow baseline and no strata is checked"
    assert convergence.uncheckable(WeibullAFTFitter(penalizer=0.1, l1_ratio=0.5)) == "an L1 penalty (l1_ratio > 0) has no gradient where a coefficient is 0"
    survival_curve = KaplanMeierFitter().fit(rossi["duration"], rossi["event"])
    assert convergence.uncheckable(survival_curve) == "KaplanMeierFitter is neither a lifelines parametric regression fitter nor Cox PH"
    lasso = OmegaConf.create({"fitter": {"_target_": "lifelines.CoxPHFitter", "penalizer": 0.05, "l1_ratio": 0.5}})
    fit = fit_converged("cox", lasso, rossi)
    assert fit.convergence.converged is None and fit.convergence.starts == 1
    assert "convergence not checked: an L1 penalty (l1_ratio > 0) has no gradient where a coefficient is 0" in fit.warnings


def test_a_cox_fit_without_covariates_has_nothing_left_to_gain(settings, rossi):
    baseline = rossi[["duration", "event"]]
    state = convergence.safe_check(F.fit_one("cox", settings.models.cox, baseline), baseline)
    assert (state.gradient_norm, state.newton_gain, state.converged) == (0.0, 0.0, True)


def test_a_dummy_with_fewer_than_10_failures_in_training_is_named_and_kept(caplog):
    """Its coefficient is weakly determined (the default run's threshold attack: 8 failures in
    the training part), but dropping it would lend its cells the reference level's E[T]; a
    numeric covariate that happens to take 0 and 1 is not a dummy."""
    n = 200
    rng = np.random.default_rng(0)
    event = rng.integers(0, 2, n)
    rare = np.zeros(n)
    rare[np.flatnonzero(event == 1)[:9]] = 1.0  # 9 failures
    enough = np.zeros(n)
    enough[np.flatnonzero(event == 1)[20:30]] = 1.0  # 10 failures
    train = pd.DataFrame(
        {
            "duration": rng.exponential(1.0, n),
            "event": event,
            "weight": 1,
            "attack_threshold_inf": rare,
            "defence_fsq": enough,
            "attack_strength": np.where(event == 1, 0.0, 1.0),
            "epochs": rng.integers(1, 5, n).astype(float),
        }
    )
    assert analysis.few_failures(train, ["attack", "defence", "data"]) == ["attack_threshold_inf"]
    assert "dummy attack_threshold_inf has 9 failures (< 10)" in caplog.text
    kept_train, kept_test = analysis.usable_covariates(train, train.copy(), ["attack", "defence", "data"])
    assert {"attack_threshold_inf", "defence_fsq", "attack_strength", "epochs"} <= set(kept_train) and "attack_threshold_inf" in kept_test
    assert analysis.few_failures(train, ["defence"]) == []  # only the configured kinds' columns


def test_weighted_rows_check_as_their_samples_do(settings, rossi):
    """A row of weight 2 is two samples: on one fit (stopped short, so that there is a gradient),
    the check of weighted rows is the check of the rows repeated."""
    weighted = rossi.assign(weight=2.0)
    doubled = pd.concat([rossi, rossi], ignore_index=True).assign(weight=1.0)
    for name, options in (("weibull", {"ftol": 0.1}), ("cox", {"max_steps": 2})):
        fit = F.fit_one(name, OmegaConf.merge(settings.models[name], {"fit_options": options}), doubled)
        on_weights, on_rows = check(fit, weighted), check(fit, doubled)
        assert not on_rows.converged
        assert on_weights.newton_gain == pytest.approx(on_rows.newton_gain, rel=1e-9)
        assert on_weights.gradient_norm == pytest.approx(on_rows.gradient_norm, rel=1e-9)


def test_a_strong_penalty_enters_the_cox_check_as_lifelines_fits_it(rossi):
    """At penalizer 0.5 the ridge term n p beta^2 / 2 outweighs the partial likelihood's
    curvature: a sign or a scale wrong in it, or the covariates left unscaled, and the gain no
    longer equals what a fit off its optimum lost."""
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.CoxPHFitter", "penalizer": 0.5}})
    fit = F.fit_one("cox", spec, rossi)
    at_optimum = check(fit, rossi)
    assert at_optimum.converged and abs(at_optimum.newton_gain) < 1e-8
    best = penalised_log_likelihood(fit, rossi)
    assert best == pytest.approx(fit.fitter.log_likelihood_, rel=1e-9)
    moved = fit.fitter.params_.copy()
    moved["prio"] += 0.05 / rossi["prio"].std()
    fit.fitter.params_ = moved
    assert check(fit, rossi).newton_gain == pytest.approx(best - penalised_log_likelihood(fit, rossi), rel=0.02)


def test_the_kept_second_fit_is_the_refitted_model_with_the_first_fits_settings(settings, rossi):
    short = OmegaConf.merge(settings.models.weibull, {"fit_options": {"ftol": 0.1}})
    fit = fit_converged("weibull", short, rossi)
    assert (fit.name, fit.penalizer, fit.optimiser, fit.attempts, fit.warnings) == ("weibull", 0.001, "SLSQP", 1, [])
    assert fit.convergence.starts == 2 and fit.convergence.gradient_norm < 1.0


def test_a_retried_fit_is_fitted_again_with_the_options_of_the_attempt_that_fitted(settings, rossi):
    """Attempt 1 fails (one iteration); the retry stops short (a loose tolerance), and its second
    start runs with the retry's options made tighter, not attempt 1's."""
    spec = OmegaConf.merge(settings.models.weibull, {"fit_options": {"maxiter": 1}})
    retries = OmegaConf.create([{"fit_options": {"ftol": 0.1}}])
    fit = fit_converged("weibull", spec, rossi, retries)
    assert fit.attempts == 2 and fit.convergence.starts == 2 and fit.convergence.converged
    assert fit.fitter.log_likelihood_ == pytest.approx(F.fit_one("weibull", settings.models.weibull, rossi).fitter.log_likelihood_, rel=1e-8)


def test_a_retry_with_another_optimiser_starts_again_with_that_optimiser(settings, rossi):
    spec = OmegaConf.merge(settings.models.weibull, {"fit_options": {"maxiter": 1}})
    retries = OmegaConf.create([{"optimiser": "BFGS", "fit_options": {"gtol": 10.0}}])
    fit = fit_converged("weibull", spec, rossi, retries)
    assert fit.attempts == 2 and fit.convergence.starts == 2 and fit.convergence.converged
    assert fit.optimiser == "BFGS" and fit.fitter._scipy_fit_method == "BFGS"


def test_the_second_start_begins_at_the_newton_point_and_keeps_its_own_fits_notes(settings, rossi, monkeypatch):
    """A fit a little off its optimum (a Newton step gains well under a nat): lifelines starts
    again from where the quadratic model has its minimum, and the kept fit carries the notes
    of the fit that produced it."""
    fit = F.fit_one("weibull", settings.models.weibull, rossi)
    moved = fit.fitter.params_.copy()
    [prio] = [key for key in moved.index if key[-1] == "prio"]
    moved[prio] += 0.01 / rossi["prio"].std()
    fit.fitter.params_ = moved
    first = check(fit, rossi)
    assert CONVERGED_GAIN < first.newton_gain < 0.5
    fit.fitter.log_likelihood_ -= first.newton_gain  # the moved point's (the quadratic model's deficit), not the optimum's

    gradient, hessian = convergence._parametric_gradient_and_hessian(fit.fitter, rossi)
    newton_point = convergence._normalised_point(fit.fitter) - np.linalg.solve(hessian, gradient)
    real, starts = F.fit_quietly, []

    def noting_second(fitter, data, options, initial_point=None):
        starts.append(initial_point)
        return real(fitter, data, options, initial_point=initial_point) + ["a note of the second fit"]

    monkeypatch.setattr(F, "fit_quietly", noting_second)
    kept, state = convergence._second_start(fit, settings.models.weibull, rossi, first, {})
    assert len(starts) == 1 and np.allclose(starts[0], newton_point, rtol=1e-12, atol=1e-12)
    assert state.starts == 2 and state.converged and kept.warnings == ["a note of the second fit"]


def test_a_second_start_that_fails_or_does_no_better_keeps_the_first_fit(settings, rossi, monkeypatch):
    short = OmegaConf.merge(settings.models.weibull, {"fit_options": {"ftol": 0.1}})
    first = check(F.fit_one("weibull", short, rossi), rossi)
    real = F.fit_quietly
    calls = []

    def failing_second(fitter, data, options, initial_point=None):
        calls.append(initial_point)
        if initial_point is not None:
            raise ValueError("singular matrix\nsecond line")
        return real(fitter, data, options)

    monkeypatch.setattr(F, "fit_quietly", failing_second)
    fit = fit_converged("weibull", short, rossi)
    assert len(calls) == 2 and "second start: ValueError: singular matrix" in fit.warnings
    assert fit.convergence == convergence.Convergence(first.gradient_norm, first.newton_gain, starts=2)
    assert not fit.convergence.converged and any(note.startswith("not converged") for note in fit.warnings)

    def worse_second(fitter, data, options, initial_point=None):
        caught = real(fitter, data, options, initial_point=initial_point)
        if initial_point is not None:
            fitter.log_likelihood_ = -np.inf  # as if the second start had found a worse optimum
        return caught

    monkeypatch.setattr(F, "fit_quietly", worse_second)
    fit = fit_converged("weibull", short, rossi)
    assert fit.convergence == convergence.Convergence(first.gradient_norm, first.newton_gain, starts=2)
    assert np.isfinite(fit.fitter.log_likelihood_) and not any("second start" in note for note in fit.warnings)


def test_a_check_that_raises_leaves_the_fit_unchecked_with_the_reason(settings, rossi, monkeypatch):
    fit = F.fit_one("weibull", settings.models.weibull, rossi)

    def raising(fit, data):
        raise np.linalg.LinAlgError("SVD did not converge\nin lstsq")

    monkeypatch.setattr(convergence, "check", raising)
    state = convergence.safe_check(fit, rossi)
    assert state.unchecked == "LinAlgError: SVD did not converge" and state.converged is None
    assert np.isnan(state.gradient_norm) and np.isnan(state.newton_gain) and state.starts == 1


def test_an_optimiser_without_tighter_rules_starts_again_with_its_own_options(settings, rossi):
    """Nelder-Mead (no gradient, no rule in TIGHTER) stopped early by loose tolerances: the second
    start still runs, and gets further, though not to the optimum; the table says so."""
    spec = OmegaConf.merge(settings.models.weibull, {"optimiser": "Nelder-Mead", "fit_options": {"maxiter": 20000, "fatol": 0.1, "xatol": 0.1}})
    assert "Nelder-Mead" not in convergence.TIGHTER
    first = F.fit_one("weibull", spec, rossi).fitter.log_likelihood_
    fit = fit_converged("weibull", spec, rossi)
    assert fit.convergence.starts == 2 and not any(note.startswith("second start") for note in fit.warnings)
    assert fit.fitter.log_likelihood_ > first + 1.0


def test_past_row_block_the_check_reads_the_newton_fits_own_gradient(rossi, monkeypatch):
    """Past ROW_BLOCK rows a Newton fit's check takes the gradient its last step summed over
    the same rows (autograd's of lifelines' objective: above), not a second pass of the rows'
    scores: the same verdict."""
    spec = compose([], conf=ROOT / "conf").survival.models["weibull"]
    recomputed = fit_converged("weibull", spec, rossi)
    monkeypatch.setattr(convergence, "ROW_BLOCK", 100)  # rossi's 432 rows are past it
    monkeypatch.setattr(type(recomputed.fitter), "row_scores", lambda *args: pytest.fail("the rows' scores were computed again"))
    own = fit_converged("weibull", spec, rossi)
    assert own.convergence.gradient_norm == np.abs(own.fitter.newton_gradient_).max()
    assert own.convergence.converged and own.convergence.gradient_norm == pytest.approx(recomputed.convergence.gradient_norm, abs=1e-6)


def test_a_large_cox_fit_takes_table_is_log_likelihood_from_its_convergence_check(rossi, monkeypatch):
    """Past ROW_BLOCK rows, the check's pass over the training rows gives Table I's partial
    log-likelihood (a second pass took 20 s at 10^7 samples): lifelines' score's to rounding."""
    spec = compose([], conf=ROOT / "conf").survival.models["cox"]
    expected = F.log_likelihood(fit_converged("cox", spec, rossi), rossi)
    monkeypatch.setattr(convergence, "ROW_BLOCK", 100)
    monkeypatch.setattr(F, "ROW_BLOCK", 100)
    fit = fit_converged("cox", spec, rossi)
    assert fit.training_log_likelihood == pytest.approx(expected, rel=1e-12)
    assert F.log_likelihood(fit, rossi.iloc[:-1]) != fit.training_log_likelihood  # other rows: their own, not the training split's
    assert getattr(fit.fitter._model, "_ties", None) is None  # the fit's per-step arrays are not kept with it (pickled, saved)
