"""The selected model's test scores beside Harrell's C (survival/ipcw.py, held_out.py): the
integrated Brier score and Uno's C equal to scikit-survival's on real data sets, each row's
share of a concordance's pairs counted by hand, and the intervals over held-out trained models."""

import math

import numpy as np
import pandas as pd
import pytest
from lifelines.datasets import load_gbsg2, load_rossi
from lifelines.utils import concordance_index
from omegaconf import OmegaConf
from sksurv.metrics import concordance_index_censored, concordance_index_ipcw, integrated_brier_score
from sksurv.nonparametric import CensoringDistributionEstimator
from sksurv.util import Surv

from trashfire.core.inference import bounded_mean, mean_over_units
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival import held_out, ipcw, scoring

AGREE = 1e-6  # issue 59's bound on the difference from scikit-survival (the measured one is about 1e-16)
WEIBULL = OmegaConf.create({"fitter": {"_target_": "trashfire.survival.aft.NewtonWeibullAFTFitter", "penalizer": 0.001}})


def rossi() -> pd.DataFrame:
    """Rossi et al.'s recidivism data (lifelines): 432 released prisoners, weeks to re-arrest,
    every survivor censored at week 52: discrete durations with many ties, and a censoring time
    that ties with failures at 52."""
    data = load_rossi().rename(columns={"week": F.DURATION, "arrest": F.EVENT})
    models = [f"m{i // 12}" for i in range(len(data))]
    return data.assign(weight=1, train_hash=models, attack_hash=models)  # one attack cell per trained model


def gbsg2() -> pd.DataFrame:
    """The German Breast Cancer Study Group 2 data (lifelines): 686 patients, days to
    recurrence, censored throughout follow-up (G falls steadily), a few tied days."""
    data = load_gbsg2()
    frame = pd.DataFrame(
        {
            F.DURATION: data["time"].astype(float),
            F.EVENT: data["cens"],
            "weight": 1,
            "age": data["age"],
            "tsize": data["tsize"],
            "pnodes": data["pnodes"],
            "progrec": np.log1p(data["progrec"]),
            "estrec": np.log1p(data["estrec"]),
            "horTh_yes": (data["horTh"] == "yes").astype(float),
            "menostat_Post": (data["menostat"] == "Post").astype(float),
        }
    )
    models = [f"m{i // 15}" for i in range(len(frame))]
    return frame.assign(train_hash=models, attack_hash=models)


def split(data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every fifth trained model to test, by the label (a train/test split by group)."""
    held = data["train_hash"].str[1:].astype(int) % 5 == 0
    return data[~held], data[held]


def surv(part: pd.DataFrame):
    return Surv.from_arrays(part[F.EVENT].to_numpy().astype(bool), part[F.DURATION].to_numpy(float))


@pytest.mark.parametrize("load", [rossi, gbsg2])
def test_the_integrated_brier_score_and_unos_c_of_table_i_equal_scikit_survivals(load):
    train, test = split(load())
    fit = F.fit_one("weibull", WEIBULL, train)
    row, notes = scoring.test_scores(fit, train, test, float(train[F.DURATION].median()), (0.1, 0.9))
    at = held_out.horizon(train, test, (0.1, 0.9))
    assert len(at.times) >= 2 and at.times[0] == row["ibs_from"] and at.tau == row["tau"]
    survival = fit.fitter.predict_survival_function(F.covariates_of(test), times=at.times).to_numpy().T
    ibs = integrated_brier_score(surv(train), surv(test), survival, at.times)
    ranking = C.survival_ranking(fit, F.covariates_of(test))
    uno = concordance_index_ipcw(surv(train), surv(test), -ranking, tau=at.tau)[0]  # scikit-survival ranks by risk
    harrell = concordance_index_censored(test[F.EVENT].to_numpy().astype(bool), test[F.DURATION].to_numpy(float), -ranking)[0]
    assert abs(row["test_IBS"] - ibs) <= AGREE and abs(row["test_uno_C"] - uno) <= AGREE and abs(row["test_concordance"] - harrell) <= AGREE
    assert row["test_concordance"] == pytest.approx(concordance_index(test[F.DURATION], ranking, test[F.EVENT]), abs=1e-12)
    assert not notes  # every score and interval computed
    for key in scoring.INTERVAL_SCORES:
        assert row[f"{key}_low"] < row[key] < row[f"{key}_high"]


def test_the_censoring_curve_is_scikit_survivals_where_failures_and_censorings_tie():
    data = rossi()  # every censoring at week 52, where 9 of the failures are too
    durations, events = data[F.DURATION].to_numpy(float), data[F.EVENT].to_numpy()
    curve = ipcw.censoring_curve(durations, events, np.ones(len(data)))
    reference = CensoringDistributionEstimator().fit(surv(data))
    weeks = np.arange(0.0, 53.0, 0.5)
    assert curve(weeks) == pytest.approx(reference.predict_proba(weeks), abs=1e-15)
    assert curve(51.0) == 1.0 and curve(52.0) == 0.0  # a failure at 52 weighs 1 / G(52): infinite, so 0 in the Brier score
    gbsg = gbsg2()
    days = np.linspace(0.0, gbsg[F.DURATION].max(), 500)
    expected = CensoringDistributionEstimator().fit(surv(gbsg)).predict_proba(days)
    assert ipcw.censoring_curve(gbsg[F.DURATION], gbsg[F.EVENT], gbsg["weight"])(days) == pytest.approx(expected, abs=1e-15)


def test_a_row_of_weight_two_scores_as_two_samples():
    data = gbsg2().iloc[:120]
    doubled = pd.concat([data, data.iloc[:30]], ignore_index=True)  # the first 30 rows twice
    merged = data.assign(weight=[2] * 30 + [1] * 90)
    days = doubled[F.DURATION].to_numpy(float)
    curve = ipcw.censoring_curve(doubled[F.DURATION], doubled[F.EVENT], doubled["weight"])
    assert ipcw.censoring_curve(merged[F.DURATION], merged[F.EVENT], merged["weight"])(days) == pytest.approx(curve(days), abs=1e-15)
    c_doubled = ipcw.concordance_of(*ipcw.pair_counts(doubled[F.DURATION], doubled["age"], doubled[F.EVENT], doubled["weight"]))
    c_merged = ipcw.concordance_of(*ipcw.pair_counts(merged[F.DURATION], merged["age"], merged[F.EVENT], merged["weight"]))
    assert c_merged == pytest.approx(c_doubled, abs=1e-14)


def pairs_by_hand(t, s, e, w, u):
    """Each row's concordant and comparable pair weight from both ends, pair by pair."""
    concordant, comparable = np.zeros(len(t)), np.zeros(len(t))
    for i in range(len(t)):
        for j in range(len(t)):
            if i != j and e[i] and (t[j] > t[i] or (t[j] == t[i] and not e[j])):
                weight = u[i] * w[j]
                right = weight * (1.0 if s[j] > s[i] else 0.5 if s[j] == s[i] else 0.0)
                concordant[[i, j]] += right
                comparable[[i, j]] += weight
    return concordant, comparable


@pytest.mark.parametrize("seed", range(40))
def test_each_rows_pairs_are_counted_from_both_ends_with_tied_times_and_rankings(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    t, s = rng.integers(1, 6, n).astype(float), rng.integers(0, 4, n).astype(float)  # few levels: ties everywhere
    e, w = rng.random(n) < 0.6, rng.integers(1, 3, n).astype(float)
    u = w * rng.choice([0.0, 1.0, 2.5], n)  # Uno's weights: 0 from tau on
    for earlier in (None, u):
        concordant, comparable = ipcw.pair_counts(t, s, e, w, earlier)
        expected = pairs_by_hand(t, s, e, w, w if earlier is None else earlier)
        assert concordant == pytest.approx(expected[0], abs=1e-12) and comparable == pytest.approx(expected[1], abs=1e-12)
    if e.any() and comparable.sum() > 0:
        assert ipcw.concordance_of(*ipcw.pair_counts(t, s, e, w)) == pytest.approx(C.harrell_c(t, s, e, w), abs=1e-12)


def test_an_interval_over_units_of_equal_size_is_built_from_their_own_scores():
    """IBS over 4 trained models of 3 samples each: the pooled mean, the standard error of
    Student's t over the models' own means (a mean's linearisation is the model's mean where
    the sizes are equal), and the score interval with that spread within [0, 1]."""
    losses = np.array([0.1, 0.2, 0.3, 0.2, 0.2, 0.2, 0.05, 0.1, 0.15, 0.3, 0.4, 0.2])
    units = np.repeat(["a", "b", "c", "d"], 3)
    estimate = held_out.over_units(losses, np.ones(12), units)
    own = pd.Series(losses).groupby(units).mean().to_numpy()
    by_model = bounded_mean(own, 0.0, 1.0)
    assert estimate.value == pytest.approx(losses.mean()) and (estimate.lo, estimate.hi) == pytest.approx((by_model.lo, by_model.hi))
    assert estimate.se == pytest.approx(mean_over_units(own).se) and 0 < estimate.lo < estimate.value < estimate.hi < 1
    assert estimate.n == 4 and math.isnan(held_out.over_units(losses, np.ones(12), np.repeat("a", 12)).lo)  # one model: no interval


def test_an_interval_over_two_held_out_models_stays_within_the_scores_range():
    """Two held-out trained models (a small grid's 20%): Student's t with 1 degree of freedom
    would reach far below 0 and above 1; the score interval stays within [0, 1]."""
    concordant, comparable = np.array([9.0, 2.0, 8.0, 1.0]), np.array([10.0, 10.0, 10.0, 10.0])
    estimate = held_out.over_units(concordant, comparable, ["a", "a", "b", "b"], pairs=True)
    student = mean_over_units(estimate.value + 2 * 2 * (np.array([11.0, 9.0]) - estimate.value * 20.0) / 40.0)
    assert student.lo < 0 or student.hi > 1
    assert 0 <= estimate.lo < estimate.value == 0.5 < estimate.hi <= 1 and estimate.se == pytest.approx(student.se)


def test_a_concordances_interval_covers_as_a_bootstrap_over_trained_models_spreads():
    """Harrell's C over 60 trained models that share a random effect: the clustered U-statistic
    standard error against the spread of a bootstrap resampling whole models (within 20%)."""
    rng = np.random.default_rng(3)
    models, per_model = 60, 25
    units = np.repeat(np.arange(models), per_model)
    x = rng.normal(size=models * per_model)
    times = rng.exponential(np.exp(0.5 * x + rng.normal(0.0, 0.8, models)[units]))
    events = rng.random(len(times)) < 0.7
    concordant, comparable = ipcw.pair_counts(times, x, events, np.ones(len(times)))
    estimate = held_out.over_units(concordant, comparable, units, pairs=True)
    assert estimate.value == pytest.approx(C.harrell_c(times, x, events, np.ones(len(times))), abs=1e-12)
    draws = []
    for _ in range(300):
        chosen = rng.integers(0, models, models)
        rows = (chosen[:, None] * per_model + np.arange(per_model)[None, :]).ravel()
        draws.append(C.harrell_c(times[rows], x[rows], events[rows], np.ones(len(rows))))
    assert estimate.se == pytest.approx(np.std(draws, ddof=1), rel=0.2)
