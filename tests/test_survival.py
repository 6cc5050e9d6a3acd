"""Survival analysis: the fitters against lifelines' own numbers on its rossi data, and the
stage's diagnostics, retries and outputs (the survival data set: tests/test_survival_data.py)."""

import math
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from lifelines import (
    CoxPHFitter,
    ExponentialFitter,
    GeneralizedGammaRegressionFitter,
    LogLogisticAFTFitter,
    LogNormalAFTFitter,
    WeibullAFTFitter,
)
from lifelines.calibration import survival_probability_calibration
from lifelines.datasets import load_rossi
from lifelines.exceptions import ApproximationWarning
from omegaconf import OmegaConf
from scipy.optimize import minimize

from tests.conftest import DROP, ROOT, config_refusal, stage_cfg, tiny_overrides
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError, DataError
from trashfire.params import composed_yaml
from trashfire.stages import survival
from trashfire.survival import analysis, expected_time, scoring
from trashfire.survival import checks as survival_checks
from trashfire.survival import fitters as F
from trashfire.survival.data import LABEL_COLUMNS

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
    assert fit.fitter.log_likelihood_ == pytest.approx(reference.log_likelihood_, rel=1e-7)
    # AIC and BIC use the unpenalised log-likelihood: lifelines' score() x n
    unpenalised = reference.score(load_rossi(), scoring_method="log_likelihood") * 432
    assert F.log_likelihood(fit, rossi) == pytest.approx(unpenalised, rel=1e-7)
    assert F.concordance(fit, rossi) == pytest.approx(reference.concordance_index_, abs=1e-12)


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
    assert F.concordance(fit, rossi) == pytest.approx(lifelines_c, abs=1e-3)
    assert F.concordance(fit, rossi) == pytest.approx(fit.fitter.concordance_index_, abs=1e-12)


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
    assert F.concordance(fit, rossi) == pytest.approx(fit.fitter.concordance_index_, abs=1e-12)  # lifelines' own, from our median
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


def test_stage_fits_scores_and_saves_all_six_models(tmp_path):
    data = synthetic_cells()
    cfg = stage_cfg(tmp_path, data)
    table = survival.run(cfg).set_index("fitter")
    assert list(table.index) == ["weibull", "lognormal", "loglogistic", "exponential", "gengamma", "cox", *scoring.BASELINES]
    comparison = table[table["status"] != "baseline"]
    assert (comparison["status"] == "fitted").all()
    assert comparison[scoring.SCORE_COLUMNS].notna().all().all(), comparison[scoring.SCORE_COLUMNS]
    assert comparison.loc["weibull", "concordance"] > 0.55  # ties within a cell cap it; chance is 0.5
    # the selection rule: the AFT model with the lowest test ICI
    aft = comparison[comparison["aft"]]
    assert comparison["selected"].sum() == 1 and comparison.loc[aft["test_ICI"].idxmin(), "selected"]
    out = tmp_path / "reports" / "survival"
    for name in ("aft_comparison.tex", "calibration.png", "coefficients.png", "coefficients.csv", "coefficients/gengamma.png"):
        assert (out / name).is_file(), name
    latex = (out / "aft_comparison.tex").read_text()
    assert "AIC & BIC & Concordance & Test Concordance & Within-cell Concordance & Test Within-cell Concordance & ICI & Test ICI & E50 & Test E50" in latex
    assert "Cox PH" in latex and "partial likelihood" in latex
    times = pd.read_csv(out / "expected_times.csv").set_index("attack_hash")
    assert len(times) == data["attack_hash"].nunique() and np.isfinite(times["E_T"]).all()
    selected = comparison.index[comparison["selected"]][0]
    models = analysis.load_models(out / "models.pkl")
    assert set(models) == set(comparison.index)
    covariates = data.drop_duplicates("attack_hash").set_index("attack_hash")[["epochs", "depth", "attack_pgd_inf"]]
    # a cell's samples share its covariates here: its unrestricted E[T] is the model's mean
    assert models[selected].predict_expectation(covariates).to_numpy() == pytest.approx(times.loc[covariates.index, "E_T_unrestricted"].to_numpy())
    assert (times["E_T"] <= times["E_T_unrestricted"]).all() and (times["E_T"] <= times["t_star"]).all()


def test_weighted_rows_score_as_one_row_per_sample(tmp_path, settings):
    compact = synthetic_cells(n_cells=30)
    expanded = F.per_sample(compact)
    train = {form: d.drop(columns=LABEL_COLUMNS) for form, d in (("compact", compact), ("expanded", expanded))}
    for name in ("weibull", "cox"):
        fits = {form: F.fit_one(name, settings.models[name], d) for form, d in train.items()}
        scores = {form: F.information_criteria(fits[form], d) for form, d in train.items()}
        assert scores["compact"]["BIC"] == pytest.approx(scores["expanded"]["BIC"], rel=1e-5)
        assert F.concordance(fits["compact"], train["compact"]) == pytest.approx(F.concordance(fits["expanded"], train["expanded"]), abs=1e-6)
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


def only(settings, *fitters, **changes):
    return OmegaConf.merge(settings, {"fitters": list(fitters), **changes})


def test_constant_covariates_leave_intercept_only_models_and_a_cox_note(settings):
    data = synthetic_cells().assign(epochs=3.0, depth=18.0, attack_pgd_inf=0.0)
    train, test = analysis.usable_covariates(*analysis.split_groups(data, "train_hash", 0.2, 0))
    assert list(F.covariates_of(train)) == []
    comparison, fits = analysis.compare(train, test, only(settings, "weibull", "cox"))
    comparison = comparison.set_index("fitter")
    assert comparison.loc["weibull", "status"] == "fitted" and comparison.loc["weibull", "k"] == 2  # intercept and shape
    assert comparison.loc["cox", "status"] == "skipped" and "needs a covariate" in comparison.loc["cox", "note"]
    assert set(fits) == {"weibull"}


def test_a_fitter_that_never_converges_is_reported_and_the_others_go_on(settings):
    train, test = analysis.split_groups(synthetic_cells(), "train_hash", 0.2, 0)
    never = only(settings, "gengamma", "exponential", retries=[], models={"gengamma": {"fit_options": {"maxiter": 1}}})
    comparison, fits = analysis.compare(train, test, never)
    rows = comparison.set_index("fitter")
    assert rows.loc["gengamma", "status"] == "failed" and set(fits) == {"exponential"}
    assert "attempt 1" in rows.loc["gengamma", "note"] and "ConvergenceError" in rows.loc["gengamma", "note"]
    assert rows.loc["exponential", scoring.SCORE_COLUMNS].notna().all()
    latex = scoring.latex_table(comparison, 0.2)
    assert "Generalised Gamma & -- & -- & -- & -- & -- & -- & -- & -- & -- & -- \\\\" in latex
    assert "Generalised Gamma: every fit attempt failed" in latex


def test_a_failed_fit_is_retried_with_the_next_settings(settings):
    spec = OmegaConf.merge(settings.models.weibull, {"fit_options": {"maxiter": 1}})
    retries = OmegaConf.create([{"optimiser": "L-BFGS-B"}, {"penalizer": 0.01, "fit_options": {}}])
    fit = F.fit_one("weibull", spec, synthetic_cells().drop(columns=LABEL_COLUMNS), retries)
    assert (fit.attempts, fit.penalizer, fit.optimiser) == (3, 0.01, WeibullAFTFitter._scipy_fit_method)


def test_fits_in_worker_processes_give_the_table_of_one_process(settings):
    """Two workers, one failing fit among them: the same rows, in the configured order."""
    train, test = analysis.split_groups(synthetic_cells(), "train_hash", 0.2, 0)
    chosen = only(settings, "weibull", "gengamma", "exponential", retries=[], models={"gengamma": {"fit_options": {"maxiter": 1}}})
    serial, serial_fits = analysis.compare(train, test, chosen, workers=1)
    parallel, parallel_fits = analysis.compare(train, test, chosen, workers=2)
    assert list(parallel["fitter"]) == list(serial["fitter"]) and list(parallel_fits) == list(serial_fits) == ["weibull", "exponential"]
    pd.testing.assert_frame_equal(parallel.drop(columns="note"), serial.drop(columns="note"), rtol=1e-6)
    assert "ConvergenceError" in parallel.set_index("fitter").loc["gengamma", "note"]


def test_selection_rule_and_chosen_model():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "loglogistic", "lognormal", "cox"],
            "test_ICI": [0.05, 0.01, 0.03, 0.001],
            "BIC": [10.0, 30.0, 20.0, 1.0],
            "test_concordance": [0.8, 0.7, 0.9, 0.95],
        }
    )
    times = pd.DataFrame({"E_T_weibull": [1.0, 2.0], "E_T_loglogistic": [1.0, np.nan], "E_T_lognormal": [3.0, 4.0]})
    # log-logistic has the best test ICI but no mean for one cell; Cox PH gives no E[T]
    assert expected_time.select(comparison, times, None, "test_ICI") == "lognormal"
    assert expected_time.select(comparison, times, None, "BIC") == "weibull"
    assert expected_time.select(comparison, times, None, "test_concordance") == "lognormal"
    assert expected_time.select(comparison, times, "weibull", "test_ICI") == "weibull"
    with pytest.raises(DataError, match="survival.chosen = loglogistic: its E.T. is infinite or undefined"):
        expected_time.select(comparison, times, "loglogistic", "test_ICI")


def test_survival_cli_reports_all_censored_data_in_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(composed_yaml(tiny_overrides(tmp_path)))
    (tmp_path / "reports").mkdir()
    synthetic_cells().assign(event=0).to_csv(tmp_path / "reports" / "survival_data.csv", index=False)
    result = subprocess.run([sys.executable, "-m", "trashfire.stages.survival", "--params", str(params)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "survived (no failure event, all censored)" in result.stderr
    assert not (tmp_path / "reports" / "survival").exists()


def test_a_fitter_class_that_does_not_exist_stops_before_reading_data(tmp_path):
    cfg = validate(compose(tiny_overrides(tmp_path, "survival.models.weibull.fitter._target_=lifelines.NoSuchFitter"), conf=ROOT / "conf"))
    with pytest.raises(ConfigError, match="survival.models.weibull.fitter"):
        survival.run(cfg)


# the survival section's config checks (trashfire.survival.checks, which `validate` runs): a
# bad value is refused with one line naming its key and what is allowed

OPTIMISERS = "BFGS, L-BFGS-B, SLSQP, CG, TNC"  # scipy's methods that use lifelines' gradient
RETRY = f"allowed: a mapping of optimiser ({OPTIMISERS}), penalizer (>= 0), fit_options"
FIT_OPTIONS = "allowed: a mapping of the optimiser's options, e.g. {maxiter: 500}"
FITTER = "missing; name the lifelines fitter class, e.g. lifelines.WeibullAFTFitter"
REMOVED_POLICY = "was removed with the per-sample failure clock; allowed: first_query (such a sample fails at its share of the first query), drop"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"survival.data": DROP}, "survival.data: missing; compose params.yaml with `make params`"),
        (
            {"survival.data.covariates": ["epochs", "height"]},
            "survival.data.covariates: got 'height'; allowed: epochs, depth, lr, n_train, t_train, t_predict, acc_ben, attack_strength, defence_strength, margin",
        ),
        ({"survival.data.dummies": ["model"]}, "survival.data.dummies: got 'model'; allowed: attack, defence, data"),
        ({"survival.data.misclassified_before_attack": "attack_time"}, f"survival.data.misclassified_before_attack: attack_time {REMOVED_POLICY}"),
        ({"survival.data.misclassified_before_attack": "predict_time"}, f"survival.data.misclassified_before_attack: predict_time {REMOVED_POLICY}"),
        ({"survival.data.misclassified_before_attack": "zero"}, "survival.data.misclassified_before_attack: got 'zero'; allowed: first_query, drop"),
        ({"survival.data.nonpositive_durations": "clip"}, "survival.data.nonpositive_durations: got 'clip'; allowed: half_min, drop"),
        ({"survival.models": {}}, "survival.models: select at least one option (an empty grid runs nothing)"),
        ({"survival.fitters": []}, "survival.fitters: must be a non-empty list (an empty grid runs nothing)"),
        ({"survival.fitters": ["gompertz"]}, "survival.fitters: got 'gompertz'; allowed: weibull, lognormal, loglogistic, exponential, gengamma, cox"),
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
        ({"survival.select_by": "r2"}, "survival.select_by: got 'r2'; allowed: test_ICI, ICI, test_E50, E50, AIC, BIC, test_concordance, concordance"),
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
    assert config_refusal(survival_checks.check, changes) == f"config error: {line}"


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the defaults: three retries, no model with an optimiser, t0_quantile or fit_options of its own
        # no covariates, dummies or retries; each value on its closed bound
        {"survival.data.covariates": None, "survival.data.dummies": None, "survival.retries": None, "survival.seed": 0}
        | {"survival.data.misclassified_before_attack": "drop", "survival.data.nonpositive_durations": "drop"},
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
    assert config_refusal(survival_checks.check, changes) is None
