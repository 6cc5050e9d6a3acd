"""The survival stage on per-sample data: the split by trained model, cluster-robust standard
errors, the two baselines, the restricted mean E[T], Kaplan-Meier and log-rank, and the stage's
files end to end."""

import json
import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from lifelines import CoxPHFitter, CRCSplineFitter, KaplanMeierFitter, WeibullAFTFitter
from lifelines.calibration import survival_probability_calibration
from lifelines.datasets import load_rossi
from lifelines.exceptions import ConvergenceError
from lifelines.statistics import logrank_test
from lifelines.utils import concordance_index, restricted_mean_survival_time
from lifelines.utils.concordance import _concordance_summary_statistics
from matplotlib.colors import to_hex
from omegaconf import OmegaConf
from scipy.special import gamma, gammainc

from tests.conftest import ROOT, stage_cfg
from trashfire.core import schema
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError, DataError
from trashfire.metrics import aggregate as aggregation
from trashfire.report import sections
from trashfire.report.page import render
from trashfire.stages import survival
from trashfire.survival import analysis, expected_time, per_model, saved_models, scoring
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival.split import split_groups, split_in_one_copy

FAMILIES = ("fgm_2", "pgd_inf", "deepfool_2")
DEFENCES = ("none", "fsq", "gauss_in")


def per_sample_data(n_models=12, cells_per_model=4, samples=20, seed=0, frailty=0.0):
    """The survival data set's format, one row per attacked sample: `n_models` trained models
    (each with one defence) x `cells_per_model` attack cells x `samples`. Durations follow a
    Weibull AFT in epochs, depth, strength, margin, defence and attack family, times a shared
    random effect exp(N(0, frailty)) per trained model; censored at the cell's budget."""
    rng = np.random.default_rng(seed)
    parts = []
    for model in range(n_models):
        epochs, depth = float(rng.integers(1, 6)), float(rng.choice([8.0, 20.0]))
        defence = DEFENCES[model % len(DEFENCES)]
        shared = rng.normal(0.0, frailty)
        for cell in range(cells_per_model):
            family = FAMILIES[cell % len(FAMILIES)]
            strength = float(rng.choice([0.0, 0.5, 1.0]))  # min-max scaled within the family
            margin = rng.gamma(2.0, 1.0, samples)
            log_scale = -6 + 0.15 * epochs + 0.02 * depth - strength + 0.3 * margin + 0.5 * (defence == "fsq") + 0.8 * (family == "pgd_inf") + shared
            failure = rng.weibull(1.5, samples) * np.exp(log_scale)
            budget = math.exp(-5.2 + 0.8 * (family == "pgd_inf"))
            parts.append(
                pd.DataFrame(
                    {
                        "attack_hash": f"a{model}_{cell}",
                        "train_hash": f"t{model}",
                        "model_hash": f"m{model}",
                        "attack_family": family,
                        "defence": defence,
                        "dataset": "digits",
                        "duration": np.minimum(failure, budget),
                        "event": (failure < budget).astype(int),
                        "weight": 1,
                        "epochs": epochs,
                        "depth": depth,
                        "attack_strength": strength,
                        "margin": margin,
                        "attack_fgm_2": float(family == "fgm_2"),
                        "attack_pgd_inf": float(family == "pgd_inf"),
                        "defence_fsq": float(defence == "fsq"),
                        "defence_gauss_in": float(defence == "gauss_in"),
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def settings():
    return validate(compose([], conf=ROOT / "conf")).survival


# --- the split ---------------------------------------------------------------------------------


@pytest.mark.parametrize("by", ["train_hash", "model_hash", "attack_hash"])
def test_split_keeps_every_group_on_one_side(by):
    data = per_sample_data()
    for seed in range(8):
        train, test = split_groups(data, by, 0.2, seed)
        assert len(train) + len(test) == len(data)
        assert not set(train[by]) & set(test[by])
        assert test[by].nunique() == round(0.2 * data[by].nunique())
        assert not set(train["attack_hash"]) & set(test["attack_hash"])  # an attack cell nests in its trained model
    splits = {tuple(sorted(set(split_groups(data, by, 0.2, seed)[1][by]))) for seed in range(8)}
    assert len(splits) > 1  # seeded, not fixed


def test_past_row_block_the_parts_are_slices_of_one_copy_of_the_rows(monkeypatch):
    """A large study's parts are split_groups' own, but slices of one copy of the rows (training
    rows first) that stands for the data from then on: the stage holds its rows once, not twice."""
    data = per_sample_data()
    monkeypatch.setattr("trashfire.survival.split.ROW_BLOCK", len(data) - 1)
    with pd.option_context("mode.copy_on_write", True):  # as the stage runs
        whole, train, test = split_in_one_copy(data, "train_hash", 0.2, 0)
        expected_train, expected_test = split_groups(data, "train_hash", 0.2, 0)
        pd.testing.assert_frame_equal(train, expected_train)
        pd.testing.assert_frame_equal(test, expected_test)
        pd.testing.assert_frame_equal(whole, pd.concat([expected_train, expected_test]))
        assert np.shares_memory(train["duration"].to_numpy(), whole["duration"].to_numpy())
        assert np.shares_memory(test["margin"].to_numpy(), whole["margin"].to_numpy())
    monkeypatch.setattr("trashfire.survival.split.ROW_BLOCK", len(data))  # up to ROW_BLOCK rows: the data as they are
    assert split_in_one_copy(data, "train_hash", 0.2, 0)[0] is data


def test_split_leaves_a_group_on_each_side_and_needs_two():
    data = per_sample_data(n_models=2)
    for test_size in (0.01, 0.99):
        train, test = split_groups(data, "train_hash", test_size, 0)
        assert train["train_hash"].nunique() == test["train_hash"].nunique() == 1
    with pytest.raises(DataError, match="1 train_hash group; a train/test split by train_hash .survival.split_by. needs at least 2"):
        split_groups(per_sample_data(n_models=1), "train_hash", 0.2, 0)
    with pytest.raises(DataError, match="no column 'train_hash'"):
        split_groups(data.drop(columns="train_hash"), "train_hash", 0.2, 0)


def test_split_by_is_validated_in_one_line():
    with pytest.raises(ConfigError, match="survival.split_by.*'dataset'.*allowed: train_hash, model_hash, attack_hash"):
        validate(compose(["survival.split_by=dataset"], conf=ROOT / "conf"))


def test_labels_are_never_covariates(settings):
    data = per_sample_data()
    assert set(F.covariates_of(data)) == {"epochs", "depth", "attack_strength", "margin", "attack_fgm_2", "attack_pgd_inf", "defence_fsq", "defence_gauss_in"}
    fit = F.fit_one("weibull", settings.models.weibull, data)  # string labels would fail inside lifelines
    assert set(fit.fitter.params_.index.get_level_values("covariate")) == set(F.covariates_of(data)) | {"Intercept"}


# --- cluster-robust standard errors -------------------------------------------------------------


def robust_to_naive(fit):
    return (fit.robust_se / fit.fitter.standard_errors_).to_numpy()


@pytest.mark.parametrize("name", ["weibull", "gengamma", "cox"])
def test_robust_errors_grow_with_a_shared_effect_per_cluster(settings, name):
    data = per_sample_data(n_models=24, cells_per_model=3, samples=20, frailty=1.0)
    fit = F.fit_one(name, settings.models[name], data)
    fit.robust_se = F.cluster_robust_se(fit, data, data["train_hash"].to_numpy())
    ratios = pd.Series(robust_to_naive(fit), index=fit.fitter.params_.index)
    on_location = ratios.xs("epochs", level="covariate") if ratios.index.nlevels > 1 else ratios[["epochs"]]
    assert (on_location > 2).all(), ratios  # a covariate of the trained model: its samples are not independent


@pytest.mark.parametrize("name", ["weibull", "gengamma", "weibull_cure"])
def test_past_row_block_the_cluster_scores_are_summed_a_block_of_rows_at_a_time(settings, name, monkeypatch):
    """Past ROW_BLOCK rows the rows' scores are computed and summed per cluster a block at a
    time (no n x p array): the same standard errors, within rounding."""
    data = per_sample_data(n_models=24, cells_per_model=3, samples=20, frailty=1.0)  # 1,440 rows
    fit = F.fit_one(name, settings.models[name], data)
    whole = F.cluster_robust_se(fit, data, data["train_hash"].to_numpy())
    monkeypatch.setattr(F, "ROW_BLOCK", 500)
    blocks = []
    monkeypatch.setattr(F, "sample_scores", lambda fitter, rows, original=F.sample_scores: blocks.append(len(rows)) or original(fitter, rows))
    in_blocks = F.cluster_robust_se(fit, data, data["train_hash"].to_numpy())
    assert blocks == [500, 500, 440]
    pd.testing.assert_series_equal(in_blocks, whole, rtol=1e-12)


def test_past_row_block_cox_clusters_scores_are_summed_a_block_of_rows_at_a_time(settings, monkeypatch):
    """Past ROW_BLOCK samples Cox PH's sandwich reads its score residuals summed per cluster a
    block of rows at a time (cox.cluster_score_sums, on the design's columns): the same errors."""
    data = per_sample_data(n_models=24, cells_per_model=3, samples=20, frailty=1.0)
    fit = F.fit_one("cox", settings.models["cox"], data)
    whole = F.cluster_robust_se(fit, data, data["train_hash"].to_numpy())
    monkeypatch.setattr(F, "ROW_BLOCK", 500)
    calls = []
    monkeypatch.setattr(F, "cluster_score_sums", lambda *args, original=F.cluster_score_sums: calls.append(len(args[1])) or original(*args, block=300))
    pd.testing.assert_series_equal(F.cluster_robust_se(fit, data, data["train_hash"].to_numpy()), whole, rtol=1e-9)
    assert calls == [len(fit.fitter.params_)]  # the design's columns, one array each


@pytest.mark.parametrize("name", ["weibull", "gengamma", "weibull_cure"])
def test_past_row_block_table_is_log_likelihood_is_summed_a_block_of_rows_at_a_time(settings, name, monkeypatch):
    """Past ROW_BLOCK rows Table I's log-likelihood is the Newton fitters' closed form summed a
    block of rows at a time (a design of every row was 2.6 GB at 10^7 samples): lifelines'
    score's, within rounding (Cox PH's: test_survival_convergence)."""
    data = per_sample_data(n_models=24, cells_per_model=3, samples=20, frailty=1.0)  # 1,440 rows
    fit = F.fit_one(name, settings.models[name], data)
    whole = F.log_likelihood(fit, data)  # lifelines' score at this size
    monkeypatch.setattr(F, "ROW_BLOCK", 500)
    blocks, original = [], type(fit.fitter).unpenalised_log_likelihood
    monkeypatch.setattr(type(fit.fitter), "unpenalised_log_likelihood", lambda self, *rows: blocks.append(len(rows[0])) or original(self, *rows))
    assert F.log_likelihood(fit, data) == pytest.approx(whole, rel=1e-12)
    assert blocks == [500, 500, 440]


@pytest.mark.parametrize("name", ["weibull", "exponential", "cox"])
def test_robust_errors_match_naive_ones_with_one_sample_per_cluster(settings, name):
    data = per_sample_data(n_models=100, cells_per_model=3, samples=4)
    fit = F.fit_one(name, settings.models[name], data)
    fit.robust_se = F.cluster_robust_se(fit, data, np.arange(len(data)))
    assert robust_to_naive(fit) == pytest.approx(1.0, abs=0.25)


def test_robust_errors_are_lifelines_sandwich_with_one_row_per_cluster():
    rossi = load_rossi().head(150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = WeibullAFTFitter().fit(rossi, "week", "arrest", robust=True)  # lifelines loops over rows
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    fit = F.fit_one("weibull", spec, rossi.rename(columns={"week": "duration", "arrest": "event"}))
    ours = F.cluster_robust_se(fit, rossi.rename(columns={"week": "duration", "arrest": "event"}), np.arange(len(rossi)))
    assert ours.to_numpy() == pytest.approx(reference.standard_errors_.to_numpy(), rel=1e-6)


def test_cox_robust_errors_are_lifelines_cluster_col(settings):
    data = per_sample_data(n_models=10, cells_per_model=3, frailty=0.5)
    fit = F.fit_one("cox", settings.models.cox, data)
    ours = F.cluster_robust_se(fit, data, data["train_hash"].to_numpy())
    frame = F.model_frame(data).assign(cluster=data["train_hash"])
    reference = CoxPHFitter(penalizer=settings.models.cox.fitter.penalizer).fit(frame, "duration", "event", weights_col="weight", cluster_col="cluster")
    assert ours.to_numpy() == pytest.approx(reference.standard_errors_.to_numpy(), rel=1e-5)


def test_cox_robust_errors_with_tied_times_do_not_depend_on_row_order():
    rossi = load_rossi().rename(columns={"week": "duration", "arrest": "event"})  # weeks: many ties
    clusters = np.arange(len(rossi)) // 6
    fit = F.Fit("cox", CoxPHFitter().fit(rossi, "duration", "event"), 0.0, "Newton", 1)
    shuffled = rossi.sample(frac=1, random_state=1)
    ours = F.cluster_robust_se(fit, rossi, clusters)
    assert F.cluster_robust_se(fit, shuffled, clusters[shuffled.index]).to_numpy() == pytest.approx(ours.to_numpy(), rel=1e-10)
    reference = CoxPHFitter().fit(rossi.assign(cluster=clusters), "duration", "event", cluster_col="cluster")
    assert ours.to_numpy() == pytest.approx(reference.standard_errors_.to_numpy(), rel=0.1)  # lifelines breaks ties by its sort


# --- baselines ---------------------------------------------------------------------------------


def tiny_cells():
    """Three attack cells of three samples each, by hand."""
    return pd.DataFrame(
        {
            "attack_hash": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
            "duration": [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 0.5, 1.5, 1.0],
            "event": [1, 1, 0, 1, 0, 0, 1, 1, 1],
            "weight": 1,
        }
    )


def test_baseline_scores_by_hand():
    cells = tiny_cells()
    runtime = [2.0] * 3 + [6.0] * 3 + [1.0] * 3  # each cell's mean duration
    survival_share = [1 / 3] * 3 + [2 / 3] * 3 + [0.0] * 3  # 1 - each cell's failure share
    assert scoring.cell_mean_runtime(cells) == pytest.approx(runtime)
    assert scoring.cell_survival_share(cells) == pytest.approx(survival_share)
    for scores in (runtime, survival_share):
        expected = concordance_index(cells["duration"], scores, cells["event"])
        assert C.ranking_concordance(cells, np.array(scores)) == pytest.approx(expected)


def test_baseline_rows_and_verdicts():
    cells = tiny_cells()
    rows = pd.DataFrame(scoring.baseline_rows(cells.iloc[:6], cells))
    assert list(rows["fitter"]) == ["runtime_baseline", "failure_share_baseline"] and (rows["status"] == "baseline").all()
    runtime = rows.set_index("fitter").loc["runtime_baseline"]
    assert runtime["test_concordance"] == pytest.approx(concordance_index(cells["duration"], scoring.cell_mean_runtime(cells), cells["event"]))
    assert "mean attack runtime" in runtime["note"] and "no likelihood" in runtime["note"]
    models = pd.DataFrame(
        {
            "fitter": ["weibull", "lognormal", "gengamma"],
            "model": ["Weibull", "Log-Normal", "GG"],
            "status": ["fitted", "fitted", "failed"],
            "test_concordance": [0.99, 0.5, np.nan],
            "cv_concordance": [0.9, 0.6, np.nan],
        }
    )
    table = scoring.with_baseline_verdict(pd.concat([models, rows], ignore_index=True)).set_index("fitter")
    assert table.loc["weibull", "beats_baselines"] is True and table.loc["lognormal", "beats_baselines"] is False
    assert table.loc[["gengamma", "runtime_baseline"], "beats_baselines"].isna().all()
    lines = scoring.baseline_verdicts(table.reset_index())
    assert lines[0].startswith("Weibull beats both baselines") and lines[1].startswith("Log-Normal does not beat both baselines")
    times = pd.DataFrame({"E_T_weibull": [1.0], "E_T_lognormal": [1.0]})
    assert expected_time.select(table.reset_index(), times, None, "cv_concordance") == "weibull"


# --- concordance ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_harrells_c_of_weighted_rows_is_lifelines_on_the_repeated_samples(seed):
    """Tied times (failures with failures, failures with censorings), tied rankings, weights of
    1 to 3: the merge count equals lifelines' concordance_index on one row per sample."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    durations = rng.integers(0, int(rng.integers(1, 25)), n) + (rng.random(n) if seed % 2 else 0.0)
    ranking = rng.integers(0, int(rng.integers(1, 12)), n).astype(float)
    events = rng.random(n) < rng.uniform(0.2, 0.9)
    events[0] = True
    weights = rng.integers(1, 4, n)
    repeated = [np.repeat(column, weights) for column in (durations, ranking, events)]
    assert C.harrell_c(durations, ranking, events, weights) == pytest.approx(concordance_index(*repeated), abs=1e-12)


@pytest.mark.parametrize("rows", [([1.0, 1.0], [1.0, 2.0], [1, 1], [1, 1]), ([], [], [], [])], ids=["tied-failures", "no-rows"])
def test_harrells_c_without_a_comparable_pair_fails_as_lifelines(rows):
    """lifelines' ZeroDivisionError, for an empty test split too (callers read it as 'no pair')."""
    with pytest.raises(ZeroDivisionError):
        concordance_index(*rows[:3])
    with pytest.raises(ZeroDivisionError):
        C.harrell_c(*rows)


# --- concordance within attack cells ------------------------------------------------------------


def test_within_cell_concordance_by_hand():
    """tiny_cells' comparable pairs: a 3 (1-2, 1-3, 2-3), b 2 (4-6, 4-8: 6 and 8 censored), c 3
    (all failures, none tied); pairs across cells are never compared."""
    cells = tiny_cells()
    ranking = np.array([1.0, 3.0, 2.0, 5.0, 5.0, 1.0, 0.0, 2.0, 1.0])
    counts = C.concordance_counts(cells["duration"], ranking, cells["event"], cells["weight"], cells["attack_hash"])
    # a: 1 < 3 and 1 < 2 right, 3 > 2 wrong; b: 5 = 5 tied, 5 > 1 wrong; c: 0 < 1 < 2 all right
    assert counts.to_dict("index") == {"a": {"concordant": 2.0, "pairs": 3.0}, "b": {"concordant": 0.5, "pairs": 2.0}, "c": {"concordant": 3.0, "pairs": 3.0}}
    assert C.stratified_concordance(cells, ranking, cells["attack_hash"]) == 5.5 / 8
    row = scoring.within_cell_scores([], "test_", cells.assign(attack_family=["x"] * 6 + ["y"] * 3), lambda part: ranking)
    assert row == {
        "test_concordance_within": 5.5 / 8,
        "test_pairs_within": 8.0,
        "test_concordance_within[x]": 2.5 / 5,
        "test_pairs_within[x]": 5.0,
        "test_concordance_within[y]": 1.0,
        "test_pairs_within[y]": 3.0,
    }


def test_within_cell_concordance_treats_tied_times_as_lifelines_does():
    """Two failures at one time are not a pair; a failure and a censoring at one time are (the
    censored sample outlived it); tied rankings count 0.5."""
    durations, events = np.array([1.0, 1.0, 1.0, 2.0]), np.array([1, 1, 0, 1])
    for ranking in ([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]):
        counts = C.concordance_counts(durations, ranking, events, np.ones(4), np.zeros(4))
        assert counts["pairs"].sum() == 4  # each failure at 1 against the censoring at 1 and the failure at 2
        assert counts["concordant"].sum() / 4 == pytest.approx(concordance_index(durations, ranking, events))


def test_within_cell_concordance_in_blocks_of_one_failure_counts_every_pair(monkeypatch):
    """A large cell is compared in blocks of failures (PAIR_BLOCK pairs at most): every block's
    pairs add up to the counts of the whole cell."""
    rng = np.random.default_rng(5)
    n = 40
    durations, ranking = rng.integers(1, 10, n).astype(float), rng.normal(size=n)
    events, weights, cells = rng.integers(0, 2, n), rng.integers(1, 3, n), np.repeat(["a", "b"], n // 2)
    whole = C.concordance_counts(durations, ranking, events, weights, cells)
    monkeypatch.setattr(C, "PAIR_BLOCK", 1)  # one failure to a block
    pd.testing.assert_frame_equal(C.concordance_counts(durations, ranking, events, weights, cells), whole)
    assert (whole["pairs"] > 20).all()


def test_strata_are_batched_as_many_as_fit_in_pair_block_padded_to_the_largest(monkeypatch):
    """The memory bound of within-cell concordance at scale: a batch of strata padded to its
    largest holds at most PAIR_BLOCK pairs, smallest first and as many as fit; a stratum too
    large alone is a batch of its own (then compared in blocks of failures)."""
    monkeypatch.setattr(C, "PAIR_BLOCK", 100)
    sizes = np.array([5, 3, 11, 5, 7, 5, 3, 7, 5, 11])
    batches = C._size_batches(sizes)
    assert [sorted(sizes[batch].tolist()) for batch in batches] == [[3, 3, 5, 5], [5, 5], [7, 7], [11], [11]]
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(sizes)))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * sizes[batch].max() ** 2 <= C.PAIR_BLOCK


def test_within_cell_concordance_on_one_cell_is_lifelines_and_cells_pool_by_pairs():
    """On one stratum: lifelines' concordance_index over samples (weighted rows repeated), with
    tied times and rankings; over many: each cell's lifelines counts, summed."""
    rng = np.random.default_rng(3)
    cells = []
    for cell in range(30):
        n = int(rng.integers(1, 25))
        durations, ranking = rng.integers(1, 6, n).astype(float), rng.integers(0, 4, n).astype(float)
        events, weights = rng.integers(0, 2, n), rng.integers(1, 4, n)
        repeated = [np.repeat(a, weights) for a in (durations, ranking, events)]
        counts = C.concordance_counts(durations, ranking, events, weights, np.zeros(n))
        correct, tied, pairs = _concordance_summary_statistics(repeated[0], repeated[1], repeated[2].astype(bool))
        assert counts["pairs"].sum() == pairs and counts["concordant"].sum() == correct + tied / 2
        if pairs:
            assert counts["concordant"].sum() / pairs == pytest.approx(concordance_index(*repeated))
        cells.append(pd.DataFrame({"attack_hash": f"c{cell}", "duration": durations, "event": events, "weight": weights, "r": ranking, "pairs": pairs}))
        cells[-1]["concordant"] = correct + tied / 2
    data = pd.concat(cells, ignore_index=True)
    per_cell = data.groupby("attack_hash")[["concordant", "pairs"]].first()
    expected = per_cell["concordant"].sum() / per_cell["pairs"].sum()
    assert C.stratified_concordance(data, data["r"].to_numpy(), data["attack_hash"]) == pytest.approx(expected, rel=1e-12)
    # weighted rows count as their samples
    assert C.stratified_concordance(F.per_sample(data), F.per_sample(data)["r"].to_numpy(), F.per_sample(data)["attack_hash"]) == pytest.approx(
        expected, rel=1e-12
    )


def test_the_baselines_are_exactly_one_half_within_attack_cells():
    train, test = split_groups(per_sample_data(), "train_hash", 0.2, 0)
    rows = pd.DataFrame(scoring.baseline_rows(train, test)).set_index("fitter")
    within = rows[[c for c in rows if "concordance_within" in c]]
    assert within.shape[1] == 2 + 2 * len(FAMILIES) and (within == 0.5).all().all()
    per_family_pairs = rows[[c for c in rows if c.startswith(("pairs_within[", "test_pairs_within["))]]
    assert per_family_pairs.shape[1] == 2 * len(FAMILIES) and (per_family_pairs > 0).all().all()
    assert (rows[["concordance", "test_concordance"]] != 0.5).all().all()  # pooled, they rank the cells
    assert (rows[["pairs_within", "test_pairs_within"]] > 0).all().all()


def test_the_true_duration_order_is_one_within_cells_however_the_cells_are_ranked():
    data = per_sample_data()
    row = scoring.within_cell_scores([], "", data, lambda part: part["duration"].to_numpy())
    assert row["concordance_within"] == 1.0 and all(row[f"concordance_within[{family}]"] == 1.0 for family in FAMILIES)
    # the order within each cell kept, the cells ranked against their true costs: pooled C falls, within C does not
    cell_rank = data.groupby("attack_hash")["duration"].transform("mean").rank(method="dense")
    upside_down = data["duration"].rank(pct=True) - 10.0 * cell_rank
    assert scoring.within_cell_scores([], "", data, lambda part: upside_down.to_numpy())["concordance_within"] == 1.0
    assert C.ranking_concordance(data, upside_down.to_numpy()) < 0.5


def test_a_within_cell_score_without_pairs_is_nan_with_a_note():
    cells = tiny_cells().assign(event=0)
    notes = []
    row = scoring.within_cell_scores(notes, "", cells, lambda part: np.arange(len(part), dtype=float))
    assert math.isnan(row["concordance_within"]) and notes == ["concordance_within: no comparable pair within an attack cell"]


# --- E[T] against Kaplan-Meier -------------------------------------------------------------------


def test_kaplan_meier_restricted_mean_is_lifelines():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        durations, events, weights = rng.integers(1, 8, n).astype(float) / 4, rng.integers(0, 2, n), rng.integers(1, 4, n)
        for t_star in (durations.min() / 2, np.median(durations), durations.max(), 0.3 + durations.max() / 3):
            km = KaplanMeierFitter().fit(durations, events, weights=weights)
            cell = pd.DataFrame({"attack_hash": "a", "duration": durations, "event": events, "weight": weights})
            ours = expected_time.km_restricted_means(cell, pd.Series({"a": t_star}))["a"]
            assert ours == pytest.approx(restricted_mean_survival_time(km, t=t_star), rel=1e-10)


def true_restricted_means(data: pd.DataFrame, budgets: pd.Series) -> pd.Series:
    """per_sample_data's generating Weibull (shape 1.5, frailty 0): each sample's restricted mean
    int_0^{t*} S du = scale Gamma(1 + 1/k) P(1/k, (t*/scale)^k), averaged over its cell."""
    log_scale = (
        -6
        + 0.15 * data["epochs"]
        + 0.02 * data["depth"]
        - data["attack_strength"]
        + 0.3 * data["margin"]
        + 0.5 * data["defence_fsq"]
        + 0.8 * data["attack_pgd_inf"]
    )
    scale, shape, t_star = np.exp(log_scale), 1.5, data["attack_hash"].map(budgets)
    per_sample = scale * gamma(1 + 1 / shape) * gammainc(1 / shape, (t_star / scale) ** shape)
    return per_sample.groupby(data["attack_hash"]).mean()


def test_km_check_flags_a_wrong_expected_time_and_not_the_right_one():
    data = per_sample_data(n_models=3, cells_per_model=3, samples=600)
    budgets = expected_time.cell_budgets(data)
    km = expected_time.km_restricted_means(data, budgets)
    right = true_restricted_means(data, budgets)
    check = expected_time.km_check_table(data, right, budgets, km, 0.25)
    assert list(check.columns) == schema.KM_CHECK and len(check) == 9 and not check["flagged"].any()
    assert check["log_ratio"].abs().max() < 0.1  # 600 samples a cell: Kaplan-Meier is close to the truth
    assert check.set_index("attack_hash")["n"].eq(600).all() and (check["events"] == check["attack_hash"].map(data.groupby("attack_hash")["event"].sum())).all()
    wrong = right * np.where(right.index == right.index[0], 1.5, np.where(right.index == right.index[1], 0.7, 1.0))
    check = expected_time.km_check_table(data, wrong, budgets, km, 0.25).set_index("attack_hash")
    assert check.index[check["flagged"]].tolist() == list(right.index[:2])
    assert expected_time.km_check_table(data, wrong, budgets, km, 0.6)["flagged"].sum() == 0  # the tolerance decides
    summary = expected_time.km_summary(check.reset_index())
    assert summary["km_share_flagged"] == pytest.approx(2 / 9)
    worst = expected_time.worst_cells(summary["km_worst_cells"])
    assert len(worst) == expected_time.KM_WORST and list(worst)[:2] == [
        expected_time.cell_label(check.reset_index().iloc[0]),
        expected_time.cell_label(check.reset_index().iloc[1]),
    ]
    assert list(worst.values())[0] == pytest.approx(check["ratio"].iloc[0], rel=1e-3)
    lines = expected_time.km_sentences(check.reset_index(), "Weibull")
    assert lines[0].startswith("Weibull's E[T] is within 25% of the Kaplan-Meier restricted mean") and "2 cell(s) flagged" in lines[1]


def test_an_infinite_expected_time_is_flagged():
    data = tiny_cells().assign(attack_family="pgd_inf", defence="none", dataset="digits")
    budgets = expected_time.cell_budgets(data)
    km = expected_time.km_restricted_means(data, budgets)
    check = expected_time.km_check_table(data, pd.Series({"a": np.inf, "b": np.nan, "c": km["c"]}), budgets, km, 0.25)
    assert check["flagged"].tolist() == [True, True, False]
    # by hand: a fails at 1 and 2, censored at t* = 3: S = 1, 2/3, 1/3 on [0, 1), [1, 2), [2, 3);
    # c fails at 0.5, 1 and 1.5 = t*: S = 1, 2/3, 1/3 on [0, 0.5), [0.5, 1), [1, 1.5)
    assert km["a"] == pytest.approx(1 + 2 / 3 + 1 / 3) and km["c"] == pytest.approx(0.5 + 2 / 3 * 0.5 + 1 / 3 * 0.5)


# --- E[T] -------------------------------------------------------------------------------------


def test_restricted_mean_of_an_exponential_is_its_closed_form():
    data = per_sample_data(n_models=6)[["duration", "event", "weight", "epochs", "margin"]]
    spec = OmegaConf.create({"fitter": {"_target_": "trashfire.survival.fitters.ExponentialAFTFitter", "penalizer": 0.0}})
    fit = F.fit_one("exponential", spec, data)
    covariates = F.covariates_of(data).head(50)
    mean = F.expected_time(fit, covariates)  # lambda, the exponential's mean
    t_star = np.geomspace(0.1, 10, 50) * mean  # budgets well below and well above the mean
    closed_form = mean * (1 - np.exp(-t_star / mean))
    assert F.restricted_mean(fit, covariates, t_star) == pytest.approx(closed_form, rel=1e-4)


def test_restricted_mean_of_a_steep_weibull_is_its_closed_form():
    """Shape about 0.5: S falls steeply at 0, where a linear grid alone is coarse."""
    rng = np.random.default_rng(1)
    data = pd.DataFrame({"duration": rng.weibull(0.5, 400) * 0.01, "event": 1, "weight": 1})
    fit = F.fit_one("weibull", OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}}), data)
    scale, shape = math.exp(fit.fitter.params_[("lambda_", "Intercept")]), math.exp(fit.fitter.params_[("rho_", "Intercept")])
    t_star = np.array([0.001, 0.01, 0.1])
    closed_form = scale * gamma(1 + 1 / shape) * gammainc(1 / shape, (t_star / scale) ** shape)
    assert F.restricted_mean(fit, pd.DataFrame(index=range(3)), t_star) == pytest.approx(closed_form, rel=1e-4)


def test_cell_budget_is_the_largest_censoring_time_else_the_largest_duration():
    budgets = expected_time.cell_budgets(tiny_cells())
    assert budgets.to_dict() == {"a": 3.0, "b": 8.0, "c": 1.5}  # c: nothing censored


# --- Kaplan-Meier and log-rank ------------------------------------------------------------------


def test_kaplan_meier_of_a_hand_made_set():
    data = pd.DataFrame(
        {"attack_family": "pgd_inf", "defence": "none", "duration": [1.0, 2.0, 2.0, 3.0, 4.0], "event": [1, 1, 0, 1, 0], "weight": [1, 1, 1, 2, 1]}
    )
    km = expected_time.kaplan_meier_fits(data)[("pgd_inf", "none")]
    # six samples: at 1, 1 of 6 fails; at 2, 1 of 5 (one more censored); at 3, 2 of 3
    expected = {0.0: 1.0, 1.0: 5 / 6, 2.0: 5 / 6 * 4 / 5, 3.0: 5 / 6 * 4 / 5 * 1 / 3, 4.0: 5 / 6 * 4 / 5 * 1 / 3}
    curve = km.survival_function_.iloc[:, 0]
    assert curve.to_dict() == pytest.approx(expected)


def test_logrank_separates_defences_and_needs_an_undefended_reference():
    rng = np.random.default_rng(0)
    fast, slow = rng.exponential(1.0, 60), rng.exponential(10.0, 60)
    family = lambda name, defences, durations: pd.DataFrame(  # noqa: E731
        {"attack_family": name, "defence": defences, "duration": durations, "event": 1, "weight": 1}
    )
    data = pd.concat(
        [
            family("pgd_inf", ["none"] * 60 + ["fsq"] * 60 + ["conf"] * 60, np.r_[fast, slow, rng.exponential(1.0, 60)]),
            family("fgm_2", ["fsq"] * 60, slow),  # no undefended samples: no rows
        ]
    )
    table = expected_time.logrank_table(data).set_index("defence")
    assert list(table["attack_family"]) == ["pgd_inf", "pgd_inf"]
    assert table.loc["fsq", "p"] < 1e-6 and table.loc["conf", "p"] > 0.01
    assert table.loc["fsq", ["n", "events", "n_reference", "events_reference"]].tolist() == [60, 60, 60, 60]


# --- the stage --------------------------------------------------------------------------------


def test_stage_on_per_sample_data(tmp_path):
    data = per_sample_data(frailty=0.3)
    comparison = survival.run(stage_cfg(tmp_path, data)).set_index("fitter")
    plt.close("all")
    out = tmp_path / "reports" / "survival"
    for name in (
        "aft_comparison.tex",
        "calibration.png",
        "coefficients.png",
        "coefficients/gengamma.png",
        "kaplan_meier.png",
        "models.pkl",
        "cure_fractions.csv",
    ):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "aft_comparison.csv").set_index("fitter")
    fitters = ["weibull", "lognormal", "loglogistic", "exponential", "gengamma", "weibull_cure", "loglogistic_cure", "cox"]
    assert list(table.index) == [*fitters, *scoring.BASELINES]
    assert (table["split_by"] == "train_hash").all()
    baselines = table[table["status"] == "baseline"]
    assert baselines[["concordance", "test_concordance"]].notna().all().all()
    assert baselines[["AIC", "BIC", "ICI", "test_ICI", "E50", "test_E50"]].isna().all().all() and not baselines["selected"].any()
    fitted = table[table["status"] == "fitted"]
    assert list(fitted.index) == fitters  # all eight
    on_test = scoring.TEST_COLUMNS
    assert fitted[scoring.TRAIN_COLUMNS].notna().all().all()
    assert (fitted["concordance"] > 0.55).all()  # chance is 0.5
    aft = fitted[fitted["aft"]]
    # the default rule: the best ICI by grouped 3-fold cross-validation inside the training split, among AFT models
    assert aft["cv_ICI"].notna().all() and (aft["cv_folds"] == 3).all() and fitted.loc[~fitted["aft"], "cv_ICI"].isna().all()
    assert table["selected"].sum() == 1 and table.loc[aft["cv_ICI"].idxmin(), "selected"]
    selected = table.index[table["selected"]][0]
    # the selected model alone is scored on the test split, every test score with a 95% interval over held-out trained models
    assert table.loc[selected, on_test].notna().all(), table.loc[selected, on_test]
    assert fitted.drop(index=selected)[on_test].isna().all().all()
    for key in scoring.INTERVAL_SCORES:
        assert table.loc[selected, f"{key}_low"] < table.loc[selected, key] < table.loc[selected, f"{key}_high"]
    bar = baselines["test_concordance"].max()
    assert table.loc[selected, "beats_baselines"] == (table.loc[selected, "test_concordance"] > bar)
    assert fitted.drop(index=selected)["beats_baselines"].isna().all()
    latex = (out / "aft_comparison.tex").read_text()
    assert "Runtime baseline" in latex and "Test Uno's C" in latex and "Test IBS" in latex and "grouped 3-fold cross-validation" in latex

    coefficients = pd.read_csv(out / "coefficients.csv")
    assert {"se_robust", "lower_robust", "upper_robust", "p_robust", "se", "lower", "upper", "p"} <= set(coefficients)
    assert coefficients[["se_robust", "lower_robust", "upper_robust", "p_robust"]].notna().all().all()

    times = pd.read_csv(out / "expected_times.csv")
    assert list(times.columns[:5]) == ["attack_hash", "E_T", "E_T_unrestricted", "t_star", "fitter"]
    assert set(times["attack_hash"]) == set(data["attack_hash"]) and np.isfinite(times["E_T"]).all()
    finite = np.isfinite(times["E_T_unrestricted"])
    assert (times.loc[finite, "E_T"] <= times.loc[finite, "E_T_unrestricted"]).all()
    assert (times["E_T"] <= times["t_star"]).all()  # a restricted mean never exceeds its bound
    selected = comparison.index[comparison["selected"]][0]
    assert (times["fitter"] == selected).all() and times["E_T"].equals(times[f"E_T_{selected}"])
    models = saved_models.load_models(out / "models.pkl")
    assert list(models) == list(fitted.index)
    model = models[selected]
    cell = data[data["attack_hash"] == times["attack_hash"].iloc[0]]
    # the unrestricted E[T]: the model's mean E[T | x] over the cell's samples
    assert times["E_T_unrestricted"].iloc[0] == pytest.approx(model.predict_expectation(F.covariates_of(cell)).mean())
    by_hand = F.restricted_mean(F.Fit(selected, model, 0, "", 1), F.covariates_of(cell), np.full(len(cell), times["t_star"].iloc[0])).mean()
    assert times["E_T"].iloc[0] == pytest.approx(by_hand)

    logrank = pd.read_csv(out / "logrank.csv")
    assert set(logrank["attack_family"]) == set(FAMILIES) and set(logrank["defence"]) == {"fsq", "gauss_in"}

    headline = aggregation.survival_headline(pd.read_csv(out / "aft_comparison.csv"))
    assert headline["survival_model"] == selected and headline["survival_split_by"] == "train_hash"
    assert headline["survival_beats_baselines"] == bool(table.loc[selected, "beats_baselines"])
    assert headline["survival_runtime_baseline_test_concordance"] == pytest.approx(table.loc["runtime_baseline", "test_concordance"])
    sentences = sections.baseline_sentences(pd.read_csv(out / "aft_comparison.csv"))
    assert len(sentences) == 1 and "both baselines on test concordance" in sentences[0] and sentences[0].startswith(table.loc[selected, "model"])

    # within attack cells: every row on the training half, the selected model and the baselines on
    # the test half too, overall and per family; the baselines 0.5
    within = ["concordance_within", *(f"concordance_within[{f}]" for f in FAMILIES)]
    test_within = ["test_concordance_within", *(f"test_concordance_within[{f}]" for f in FAMILIES)]
    assert table[within].notna().all().all() and table.loc[[selected, *scoring.BASELINES], test_within].notna().all().all()
    assert (table.loc[list(scoring.BASELINES), within + test_within] == 0.5).all().all()
    assert (table.loc[fitted.index, "concordance_within"] > 0.6).all() and table.loc[
        selected, "test_concordance_within"
    ] > 0.6  # the margin orders a cell's samples
    long = pd.read_csv(out / "concordance_within.csv")
    assert list(long.columns) == schema.CONCORDANCE_WITHIN and len(long) == len(table) * (1 + len(FAMILIES))
    chosen = long[long["fitter"] == selected].set_index("attack_family")
    assert chosen.loc["all", "test_concordance_within"] == table.loc[selected, "test_concordance_within"]
    assert chosen.loc["pgd_inf", "concordance_within"] == table.loc[selected, "concordance_within[pgd_inf]"]
    # E[T] against Kaplan-Meier: the selected model's cells, and every AFT model's summary in Table I
    check = pd.read_csv(out / "km_check.csv")
    assert list(check.columns) == schema.KM_CHECK and set(check["attack_hash"]) == set(data["attack_hash"])
    assert check["E_T"].tolist() == pytest.approx(times.set_index("attack_hash").loc[check["attack_hash"], "E_T"].tolist())
    assert (check["tolerance"] == 0.25).all() and check["flagged"].eq((check["ratio"] - 1).abs() > 0.25).all()
    aft = table[table["aft"] & (table["status"] == "fitted")]
    assert aft[["km_median_abs_log_ratio", "km_share_flagged", "km_worst_cells"]].notna().all().all()
    assert table.loc[["cox", *scoring.BASELINES], ["km_median_abs_log_ratio", "km_share_flagged"]].isna().all().all()
    assert table.loc[selected, "km_share_flagged"] == pytest.approx(check["flagged"].mean())
    assert table.loc[selected, "km_median_abs_log_ratio"] == pytest.approx(check["log_ratio"].abs().median())
    assert headline["survival_test_concordance_within"] == table.loc[selected, "test_concordance_within"]
    assert set(headline["survival_test_concordance_within_by_family"]) == set(FAMILIES)
    assert headline["survival_km_share_flagged"] == pytest.approx(check["flagged"].mean())
    assert len(headline["survival_km_worst_cells"]) == expected_time.KM_WORST
    blocks = sections.survival_tables(
        pd.read_csv(out / "aft_comparison.csv"), None, pd.read_csv(out / "concordance_within.csv"), pd.read_csv(out / "km_check.csv")
    )
    markup = render("sections/tables.html.j2", tables=blocks)
    assert 'id="table-concordance-within"' in markup and 'id="table-km-check"' in markup and "E[T] is within 25% of the Kaplan-Meier" in markup


def test_a_stage_whose_models_give_no_e_t_writes_them_and_says_why(tmp_path, caplog):
    """Fitted models, none an AFT model with a finite E[T] (Cox PH alone here; FGSM's one-step
    durations on real MNIST in issue 47): Table I, the coefficients and the Kaplan-Meier curves
    are written, E[T] is missing per cell, and status.json and the log name why; the stage exits
    cleanly, and removes a previous run's files of the model it selected then."""
    cfg = stage_cfg(tmp_path, per_sample_data(n_models=4, cells_per_model=6, samples=10), "survival.fitters=[cox]")
    out = tmp_path / "reports" / "survival"
    out.mkdir()
    for stale in ("km_check.csv", "coefficients.png"):
        (out / stale).write_text("a previous run's, of the model it selected\n")
    caplog.set_level("INFO", logger=analysis.log.name)
    comparison = survival.run(cfg)
    plt.close("all")
    assert comparison.set_index("fitter").loc["cox", "status"] == "fitted" and not comparison["selected"].any()
    status = json.loads((out / "status.json").read_text())
    assert status["selected"] is None and status["reason"].startswith("no fitted AFT model has a finite E[T] everywhere")
    expected = pd.read_csv(out / "expected_times.csv")
    assert list(expected.columns) == ["attack_hash", "E_T", "E_T_unrestricted", "t_star", "fitter", "note"]
    assert len(expected) == 24 and expected[["E_T", "E_T_unrestricted", "fitter"]].isna().all().all() and (expected["t_star"] > 0).all()
    assert (expected["note"] == status["reason"]).all()
    assert (out / "coefficients" / "cox.png").is_file() and (out / "kaplan_meier.png").is_file()
    assert not (out / "coefficients.png").exists() and not (out / "km_check.csv").exists()  # both are the selected model's
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == analysis.log.name]
    assert ("WARNING", f"no survival model gives E[T], so TRASH is missing downstream: {status['reason']}") in said
    assert [message.split("\n")[0] for _, message in said if message.startswith("fitted ")] == ["fitted cox of cox; selected none"]


A_PREVIOUS_RUNS_MODEL_FILES = (
    "km_check.csv",
    "concordance_within.csv",
    "coefficients.csv",
    "coefficients.png",
    "calibration.png",
    "aft_comparison.tex",
    "models.pkl",
    "cure_fractions.csv",
    "budget_sufficiency.csv",
)


@pytest.mark.parametrize(
    ("fitters", "n_models", "reason", "previous_run"),
    [
        ([], 4, "survival.fitters is empty: no survival model was asked for", True),
        (["weibull", "cox"], 1, "no survival model could be fitted: ", False),  # one trained model: no split into training and test groups
    ],
)
def test_a_stage_with_no_model_to_fit_writes_what_needs_none_and_says_why(tmp_path, caplog, fitters, n_models, reason, previous_run):
    """No fitter asked for, or none that can be fitted: Table I lists each configured fitter as
    skipped with the reason, E[T] is missing in every attack cell beside its budget t*, the
    Kaplan-Meier curves are drawn, status.json and the log say why, and a previous run's model
    files are removed; the metrics that need no E[T] go on downstream."""
    data = per_sample_data(n_models=n_models, cells_per_model=6, samples=10)
    cfg = stage_cfg(tmp_path, data, f"survival.fitters=[{','.join(fitters)}]")
    out = tmp_path / "reports" / "survival"
    if previous_run:  # its model files are removed; without them, there is nothing to remove, and no error
        (out / "coefficients").mkdir(parents=True)
        for stale in [*A_PREVIOUS_RUNS_MODEL_FILES, "coefficients/weibull.png"]:
            (out / stale).write_text("a previous run's\n")
    caplog.set_level("INFO", logger=analysis.log.name)
    comparison = survival.run(cfg)
    plt.close("all")
    status = json.loads((out / "status.json").read_text())
    assert status["selected"] is None and status["reason"].startswith(reason)
    models = cfg.survival.models
    table = pd.DataFrame(
        {
            "fitter": fitters,
            "model": [models[name].label for name in fitters],
            "aft": [bool(models[name].aft) for name in fitters],
            "status": "skipped",
            "note": status["reason"],
            "split_by": "train_hash",
            "selected": False,
        },
        columns=["fitter", "model", "aft", "status", "note", "split_by", "selected"],
    )
    pd.testing.assert_frame_equal(comparison, table, check_dtype=bool(fitters))
    pd.testing.assert_frame_equal(pd.read_csv(out / "aft_comparison.csv"), table, check_dtype=bool(fitters))
    expected = pd.read_csv(out / "expected_times.csv")
    budgets = expected_time.cell_budgets(data)
    assert list(expected.columns) == ["attack_hash", "E_T", "E_T_unrestricted", "t_star", "fitter", "note"]
    assert expected["attack_hash"].tolist() == budgets.index.tolist() and expected["t_star"].to_numpy() == pytest.approx(budgets.to_numpy())
    assert expected[["E_T", "E_T_unrestricted", "fitter"]].isna().all().all() and (expected["note"] == status["reason"]).all()
    assert (out / "kaplan_meier.png").is_file() and (out / "logrank.csv").is_file()
    assert not [name for name in A_PREVIOUS_RUNS_MODEL_FILES if (out / name).exists()] and not (out / "coefficients").exists()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == analysis.log.name]
    assert ("WARNING", f"survival models left out, so TRASH is missing downstream: {status['reason']}") in said


def test_stage_splits_by_the_configured_group(tmp_path):
    data = per_sample_data(n_models=4, cells_per_model=6, samples=10)
    cfg = stage_cfg(tmp_path, data, "survival.split_by=attack_hash", "survival.fitters=[weibull]")
    comparison = survival.run(cfg)
    plt.close("all")
    assert (comparison["split_by"] == "attack_hash").all()
    # one group: no split, so no model; the stage says why and exits cleanly (the other metrics go on)
    comparison = survival.run(stage_cfg(tmp_path, per_sample_data(n_models=1), "survival.fitters=[weibull]"))
    plt.close("all")
    assert comparison["status"].tolist() == ["skipped"] and "needs at least 2" in comparison["note"].iloc[0]
    status = json.loads((tmp_path / "reports" / "survival" / "status.json").read_text())
    assert status["selected"] is None and "needs at least 2" in status["reason"]


def test_a_models_own_t0_quantile_sets_its_calibration_time_and_the_baselines_score_both_halves(settings):
    """Table I's t0 is a quantile of the training durations: the model's own `t0_quantile` where
    it sets one, else `survival.t0_quantile`. The baselines' concordance is scored on the
    training and on the test groups, as the models' is."""
    train, test = analysis.usable_covariates(*split_groups(per_sample_data(n_models=6), "train_hash", 0.5, 0))
    chosen = OmegaConf.merge(settings, {"fitters": ["weibull", "exponential"], "t0_quantile": 0.5, "models": {"weibull": {"t0_quantile": 0.9}}})
    comparison = analysis.compare(train, test, chosen)[0].set_index("fitter")
    assert comparison.loc["weibull", "t0"] == pytest.approx(analysis.calibration_time(train, 0.9))
    assert comparison.loc["exponential", "t0"] == pytest.approx(analysis.calibration_time(train, 0.5))
    assert comparison.loc["exponential", "t0"] < comparison.loc["weibull", "t0"]
    baselines = comparison[comparison["status"] == "baseline"]
    assert len(baselines) == 2 and baselines[["concordance", "test_concordance"]].notna().all().all()
    assert (baselines["concordance"] != baselines["test_concordance"]).all()  # two halves, two scores


def test_one_training_cluster_gives_no_robust_errors(settings):
    train, test = analysis.usable_covariates(*split_groups(per_sample_data(n_models=2), "train_hash", 0.5, 0))
    comparison, fits = analysis.compare(train, test, OmegaConf.merge(settings, {"fitters": ["weibull"]}))
    assert fits["weibull"].robust_se is None
    assert "no cluster-robust SEs: the training part holds 1 train_hash cluster" in comparison.set_index("fitter").loc["weibull", "note"]
    coefficients = analysis.coefficient_table(fits, train)
    assert coefficients["se"].notna().all() and coefficients["se_robust"].isna().all()
    sds = coefficients.set_index(["param", "covariate"])["sd"]
    assert sds[("lambda_", "Intercept")] == sds[("rho_", "Intercept")] == 0.0  # an intercept has no SD to scale by
    for covariate in F.covariates_of(train):
        assert sds[("lambda_", covariate)] == pytest.approx(analysis.sample_sd(train[[covariate]], F.sample_weights(train))[covariate], rel=1e-12)


def test_the_training_split_drops_a_covariate_its_samples_hold_constant_and_says_where(caplog):
    """A row of weight 0 stands for no sample: the covariate only it varies is constant."""
    train = pd.DataFrame({"duration": [1.0, 2.0, 3.0], "event": [1, 0, 1], "weight": [2, 0, 1], "epochs": [3.0, 5.0, 3.0], "depth": [18.0, 34.0, 50.0]})
    caplog.set_level("INFO")
    kept_train, kept_test = analysis.usable_covariates(train, train.copy())
    assert list(F.covariates_of(kept_train)) == list(F.covariates_of(kept_test)) == ["depth"]
    assert "survival training split: dropping covariate epochs: it takes one value" in caplog.messages


def test_every_dummy_is_checked_for_few_failures_whatever_the_columns_order(caplog):
    train = pd.DataFrame(
        {"duration": 1.0, "event": [1] * 12 + [0] * 4, "weight": 1, "epochs": [float(i % 3) for i in range(16)], "attack_x": [1.0] * 3 + [0.0] * 13}
    )
    caplog.set_level("INFO")
    assert analysis.few_failures(train, ["attack"]) == ["attack_x"]
    assert caplog.messages == [
        "survival training split: dummy attack_x has 3 failures (< 10): its coefficient is weakly determined; read its interval in coefficients.csv"
    ]


# --- expected_time by hand: E[T] per cell, Kaplan-Meier check, curves, log-rank (issue 26, item 9) ---


def two_family_study():
    """Four attack cells of five samples (weights 1 to 3): two families, each with an undefended
    and a defended cell; margin is the one covariate, the rest are labels."""
    return pd.DataFrame(
        {
            "attack_hash": ["c1"] * 5 + ["c2"] * 5 + ["c3"] * 5 + ["c4"] * 5,
            "attack_family": ["pgd_inf"] * 10 + ["fgm_2"] * 10,
            "defence": ["none"] * 5 + ["fsq"] * 5 + ["none"] * 5 + ["fsq"] * 5,
            "dataset": "digits",
            "duration": [1.0, 2.0, 3.0, 4.0, 4.0, 2.0, 3.0, 5.0, 6.0, 6.0, 0.5, 1.0, 1.5, 2.0, 2.0, 1.0, 2.5, 3.0, 4.0, 4.0],
            "event": [1, 1, 1, 0, 0] * 4,
            "weight": [1, 2, 1, 1, 3] * 4,
            "margin": [0.2, 0.5, 1.0, 1.5, 2.0] + [0.4, 0.8, 1.2, 2.5, 3.0] + [0.2, 0.5, 1.0, 1.5, 2.0] + [0.4, 0.8, 1.2, 2.5, 3.0],
        }
    )


@pytest.fixture(scope="module")
def study_fits():
    data = two_family_study()
    specs = {
        "weibull": "lifelines.WeibullAFTFitter",
        "exponential": "trashfire.survival.fitters.ExponentialAFTFitter",
    }
    return {name: F.fit_one(name, OmegaConf.create({"fitter": {"_target_": target, "penalizer": 0.0}}), data) for name, target in specs.items()}


def weibull_scale_shape(fit, data):
    """Each row's Weibull scale lambda(x) = exp(b0 + b1 margin) and the shape rho, from the fitted coefficients."""
    params = fit.fitter.params_
    scale = np.exp(params[("lambda_", "Intercept")] + params[("lambda_", "margin")] * data["margin"].to_numpy())
    return scale, math.exp(params[("rho_", "Intercept")])


def exponential_scale(fit, data):
    params = fit.fitter.params_
    return np.exp(params[("lambda_", "Intercept")] + params[("lambda_", "margin")] * data["margin"].to_numpy())


def weighted_cell_means(data, values):
    weights = data["weight"].astype(float)
    return (weights * values).groupby(data["attack_hash"]).sum() / weights.groupby(data["attack_hash"]).sum()


def test_expected_times_are_each_fitted_aft_models_restricted_mean_to_the_cells_budget(study_fits):
    data = two_family_study()
    budgets = expected_time.cell_budgets(data)
    assert budgets.to_dict() == {"c1": 4.0, "c2": 6.0, "c3": 2.0, "c4": 4.0}
    # lognormal did not fit, and the exponential is not asked for: neither has a column
    times = expected_time.expected_times(study_fits, data, ["weibull", "lognormal"], budgets)
    assert list(times.columns) == ["E_T_weibull"] and list(times.index) == ["c1", "c2", "c3", "c4"]
    scale, shape = weibull_scale_shape(study_fits["weibull"], data)
    t_star = data["attack_hash"].map(budgets).to_numpy()
    closed_form = scale * gamma(1 + 1 / shape) * gammainc(1 / shape, (t_star / scale) ** shape)
    assert times["E_T_weibull"].to_numpy() == pytest.approx(weighted_cell_means(data, closed_form).to_numpy(), rel=1e-4)
    both = expected_time.expected_times(study_fits, data, ["weibull", "exponential"], budgets)
    scale = exponential_scale(study_fits["exponential"], data)
    closed_form = weighted_cell_means(data, scale * (1 - np.exp(-t_star / scale)))
    assert both["E_T_exponential"].to_numpy() == pytest.approx(closed_form.to_numpy(), rel=1e-4)
    assert both["E_T_weibull"].equals(times["E_T_weibull"])
    # no AFT model fitted: still a row per cell, nothing to select from
    none = expected_time.expected_times(study_fits, data, ["lognormal"], budgets)
    assert list(none.index) == ["c1", "c2", "c3", "c4"] and none.columns.empty


def test_expected_times_csv_leads_with_the_selected_models_restricted_and_unrestricted_mean(study_fits):
    data = two_family_study()
    budgets = expected_time.cell_budgets(data)
    times = expected_time.expected_times(study_fits, data, ["weibull", "exponential"], budgets)
    table = expected_time.expected_time_table(times, budgets, study_fits["exponential"], data)
    assert list(table.columns) == ["attack_hash", "E_T", "E_T_unrestricted", "t_star", "fitter", "E_T_weibull", "E_T_exponential"]
    assert table["attack_hash"].tolist() == ["c1", "c2", "c3", "c4"] and (table["fitter"] == "exponential").all()
    assert table["E_T"].tolist() == times["E_T_exponential"].tolist() and table["t_star"].tolist() == [4.0, 6.0, 2.0, 4.0]
    # the exponential's mean is its scale, averaged over the cell's samples
    unrestricted = weighted_cell_means(data, exponential_scale(study_fits["exponential"], data))
    assert table["E_T_unrestricted"].to_numpy() == pytest.approx(unrestricted.to_numpy(), rel=1e-10)
    assert table[["E_T_weibull", "E_T_exponential"]].equals(times.reset_index(drop=True))


def test_predicted_curves_average_each_defences_survival_over_its_samples_on_a_log_grid(study_fits):
    data = two_family_study()
    fit = study_fits["weibull"]
    curves = expected_time.predicted_curves(fit, data)
    assert set(curves) == {("pgd_inf", "none"), ("pgd_inf", "fsq"), ("fgm_2", "none"), ("fgm_2", "fsq")}
    scale, shape = weibull_scale_shape(fit, data)
    for (family, defence), (grid, curve) in curves.items():
        durations = data.loc[data["attack_family"] == family, "duration"]
        assert grid == pytest.approx(np.geomspace(durations.min(), durations.max(), expected_time.CURVE_POINTS))
        mine = ((data["attack_family"] == family) & (data["defence"] == defence)).to_numpy()
        weights = data["weight"].to_numpy(float)[mine]
        survival = np.exp(-((grid[:, None] / scale[mine][None, :]) ** shape))  # (times, samples)
        assert curve == pytest.approx(survival @ weights / weights.sum(), rel=1e-6)
    # a family whose samples all took one time has a curve of that one point
    tied = data[data["attack_family"] == "fgm_2"].assign(duration=2.0)
    grid, curve = expected_time.predicted_curves(fit, tied)[("fgm_2", "none")]
    assert grid.tolist() == [2.0] and len(curve) == 1


def test_predicted_curves_in_row_chunks_are_the_curves_in_one(study_fits, monkeypatch):
    """A family of 10^6 samples is predicted CURVE_ROWS at a time (memory): the same curves."""
    data = two_family_study()
    whole = expected_time.predicted_curves(study_fits["weibull"], data)
    monkeypatch.setattr(expected_time, "CURVE_ROWS", 7)
    chunked = expected_time.predicted_curves(study_fits["weibull"], data)
    assert set(chunked) == set(whole)
    for key, (grid, curve) in whole.items():
        assert np.array_equal(chunked[key][0], grid) and chunked[key][1] == pytest.approx(curve, rel=1e-12)


def test_kaplan_meier_curves_are_labelled_by_defence_for_the_legend():
    fits = expected_time.kaplan_meier_fits(two_family_study())
    assert {key: km.label for key, km in fits.items()} == {
        ("fgm_2", "fsq"): "fsq (Kaplan-Meier)",
        ("fgm_2", "none"): "none (Kaplan-Meier)",
        ("pgd_inf", "fsq"): "fsq (Kaplan-Meier)",
        ("pgd_inf", "none"): "none (Kaplan-Meier)",
    }


def test_km_check_counts_and_labels_each_cell_whatever_the_row_order():
    data = two_family_study()
    shuffled = data.sample(frac=1, random_state=3)  # rows and their index labels out of order
    budgets = expected_time.cell_budgets(shuffled)
    km = expected_time.km_restricted_means(shuffled, budgets)
    assert km.equals(expected_time.km_restricted_means(data, budgets))
    check = expected_time.km_check_table(shuffled, km * 2.0, budgets, km, 0.25)
    assert check["attack_hash"].tolist() == ["c1", "c2", "c3", "c4"]
    assert check[["attack_family", "defence", "dataset"]].to_numpy().tolist() == [
        ["pgd_inf", "none", "digits"],
        ["pgd_inf", "fsq", "digits"],
        ["fgm_2", "none", "digits"],
        ["fgm_2", "fsq", "digits"],
    ]
    # samples, not rows: weights 1, 2, 1, 1, 3, the first three failures
    assert check["n"].tolist() == [8] * 4 and check["events"].tolist() == [4] * 4
    assert check["n"].dtype.kind == "i" and check["events"].dtype.kind == "i"  # whole samples in km_check.csv
    assert check["t_star"].tolist() == [4.0, 6.0, 2.0, 4.0] and check["ratio"].tolist() == [2.0] * 4 and check["flagged"].all()


def test_a_cell_exactly_at_the_tolerance_is_not_flagged_and_unlabelled_data_keep_the_columns():
    data = tiny_cells()  # no family, defence or data set
    budgets = expected_time.cell_budgets(data)
    km = pd.Series({"a": 2.0, "b": 2.0, "c": 2.0})
    check = expected_time.km_check_table(data, pd.Series({"a": 3.0, "b": 1.0, "c": 3.5}), budgets, km, 0.5)
    assert list(check.columns) == schema.KM_CHECK and check[["attack_family", "defence", "dataset"]].isna().all().all()
    assert check["ratio"].tolist() == [1.5, 0.5, 1.75] and check["flagged"].tolist() == [False, False, True]


def test_the_worst_cells_are_the_furthest_off_with_missing_expected_times_first_in_cell_order():
    log_ratio = [0.0, np.nan, 0.1, 0.5, np.nan, -0.5, 0.1, np.nan, 0.0, 0.2]
    check = pd.DataFrame({"attack_hash": [f"c{i}" for i in range(10)], "log_ratio": log_ratio, "ratio": np.exp(log_ratio), "flagged": False})
    worst = expected_time.worst_cells(expected_time.km_summary(check)["km_worst_cells"])
    assert list(worst) == ["c1", "c4", "c7", "c3", "c5"]
    assert math.isnan(worst["c1"]) and worst["c3"] == pytest.approx(math.exp(0.5), rel=1e-3)


def test_a_cell_is_named_by_its_hash_and_whichever_labels_it_has():
    row = pd.Series({"attack_hash": "c1", "attack_family": "pgd_inf", "defence": "fsq", "dataset": "digits", "ratio": 1.0})
    assert expected_time.cell_label(row) == "c1 (pgd_inf, fsq, digits)"
    assert expected_time.cell_label(row.drop("dataset")) == "c1 (pgd_inf, fsq)"
    assert expected_time.cell_label(row.drop(["attack_family", "dataset"])) == "c1 (fsq)"
    assert expected_time.cell_label(pd.Series({**row, "defence": np.nan})) == "c1 (pgd_inf, digits)"
    assert expected_time.cell_label(pd.Series({"attack_hash": "c1", "ratio": 1.0})) == "c1"


def test_a_model_without_a_km_check_has_no_worst_cells():
    # Table I read back from aft_comparison.csv: Cox PH and the baselines have NaN there
    assert expected_time.worst_cells(np.nan) == {} and expected_time.worst_cells(None) == {} and expected_time.worst_cells("") == {}
    assert expected_time.worst_cells("c1 (pgd_inf, fsq) = 1.5; c2 = 0.25") == {"c1 (pgd_inf, fsq)": 1.5, "c2": 0.25}


def test_table_one_gets_each_aft_models_km_check_and_nothing_for_the_others():
    data = two_family_study()
    budgets = expected_time.cell_budgets(data)
    km = expected_time.km_restricted_means(data, budgets)
    times = pd.DataFrame({"E_T_weibull": km * [1.0, 1.1, 2.0, 1.0], "E_T_lognormal": km * [0.5, 1.0, 1.0, 1.0]})
    comparison = pd.DataFrame({"fitter": ["weibull", "lognormal", "cox", "runtime_baseline"], "status": ["fitted", "fitted", "fitted", "baseline"], "note": ""})
    table = expected_time.with_km_check(comparison, times, data, budgets, km, 0.25).set_index("fitter")
    assert list(table.columns)[-4:] == [*scoring.KM_COLUMNS, "note"]  # Table I's order, the note last
    assert table.loc["weibull", "km_share_flagged"] == 0.25 and table.loc["lognormal", "km_share_flagged"] == 0.25
    assert table.loc["weibull", "km_median_abs_log_ratio"] == pytest.approx(math.log(1.1) / 2)
    assert table.loc["weibull", "km_worst_cells"].startswith("c3 (fgm_2, none, digits) = 2;")
    assert table.loc["lognormal", "km_worst_cells"].startswith("c1 (pgd_inf, none, digits) = 0.5;")
    assert table.loc[["cox", "runtime_baseline"], scoring.KM_COLUMNS].isna().all().all()
    # the tolerance reaches the check: at 1.5 nothing is flagged
    assert (expected_time.with_km_check(comparison, times, data, budgets, km, 1.5)["km_share_flagged"].dropna() == 0).all()


def test_km_sentences_count_the_cells_within_tolerance_and_say_what_to_do_about_the_others():
    check = pd.DataFrame(
        {
            "attack_hash": ["a", "b", "c"],
            "ratio": [1.0, 2.0, 1.1],
            "log_ratio": np.log([1.0, 2.0, 1.1]),
            "flagged": ["False", "True", "False"],  # read back from km_check.csv as text
            "tolerance": 0.25,
        }
    )
    lines = expected_time.km_sentences(check, "Weibull")
    assert lines[0].startswith("Weibull's E[T] is within 25% of the Kaplan-Meier restricted mean to the same budget in 2 of 3 attack cells")
    assert lines[1] == "1 cell(s) flagged; the furthest off (E[T] / KM): b = 2; c = 1.1; a = 1"
    assert lines[2] == (
        "the model misfits the flagged cells: compare its dashed curve with the Kaplan-Meier one (kaplan_meier.png), try another fitter "
        "(survival.chosen; Table I's km_ columns compare them), add covariates, or use E_T_km for those cells"
    )
    one = expected_time.km_sentences(check.iloc[[0]], "Weibull")  # a study of one attack cell
    assert len(one) == 1 and "in 1 of 1 attack cells" in one[0]


def test_select_skips_a_model_whose_expected_time_is_infinite_or_zero_somewhere():
    comparison = pd.DataFrame({"fitter": ["gengamma", "lognormal", "weibull"], "cv_concordance": [0.9, 0.8, 0.7]})
    times = pd.DataFrame({"E_T_gengamma": [1.0, np.inf], "E_T_lognormal": [0.0, 2.0], "E_T_weibull": [1.0, 2.0]})
    assert expected_time.select(comparison, times, None, "cv_concordance") == "weibull"
    with pytest.raises(DataError, match="no fitted AFT model has a finite E.T. everywhere and a cv_concordance score; see aft_comparison.csv"):
        expected_time.select(comparison, times.drop(columns="E_T_weibull"), None, "cv_concordance")
    with pytest.raises(DataError, match="survival.chosen = cox: it did not fit .see aft_comparison.csv.; choose another or set chosen: null"):
        expected_time.select(comparison, times, "cox", "cv_concordance")
    with pytest.raises(DataError, match="survival.chosen = gengamma: its E.T. is infinite or undefined for some cells"):
        expected_time.select(comparison, times, "gengamma", "cv_concordance")


def test_logrank_weighs_samples_counts_censored_ones_and_lists_families_and_defences_in_order():
    rng = np.random.default_rng(2)

    def part(family, defence, scale, n=30):
        durations = rng.exponential(scale, n)
        return pd.DataFrame(
            {
                "attack_family": family,
                "defence": defence,
                "duration": np.minimum(durations, 2.0),
                "event": (durations < 2.0).astype(int),
                "weight": rng.integers(1, 4, n),
            }
        )

    # families and defences out of order in the rows
    data = pd.concat(
        [part("pgd_inf", "none", 1.0), part("pgd_inf", "fsq", 2.0), part("fgm_2", "gauss_in", 1.5), part("fgm_2", "none", 1.0), part("fgm_2", "fsq", 3.0)]
    )
    table = expected_time.logrank_table(data)
    assert list(table.columns) == ["attack_family", "defence", "reference", "n", "events", "n_reference", "events_reference", "test_statistic", "p"]
    assert table[["attack_family", "defence", "reference"]].to_numpy().tolist() == [
        ["fgm_2", "fsq", "none"],
        ["fgm_2", "gauss_in", "none"],
        ["pgd_inf", "fsq", "none"],
    ]
    for _, row in table.iterrows():
        family = data[data["attack_family"] == row["attack_family"]]
        group, reference = family[family["defence"] == row["defence"]], family[family["defence"] == "none"]
        # a row of weight w is w samples
        samples = [np.repeat(side[column].to_numpy(), side["weight"].to_numpy()) for side in (group, reference) for column in ("duration", "event")]
        expected = logrank_test(samples[0], samples[2], samples[1], samples[3])
        assert row["test_statistic"] == pytest.approx(expected.test_statistic, rel=1e-9) and row["p"] == pytest.approx(expected.p_value, rel=1e-9)
        assert [row["n"], row["events"], row["n_reference"], row["events_reference"]] == [len(samples[1]), samples[1].sum(), len(samples[3]), samples[3].sum()]
    # no undefended samples anywhere: logrank.csv keeps its header
    empty = expected_time.logrank_table(data[data["defence"] != "none"])
    assert empty.empty and list(empty.columns) == list(table.columns)


# --- the scores of survival/fitters.py: calibration, concordance, E[T], Cox score residuals --------


def weighted_margin_study(n=60, seed=0):
    """`n` rows of 1 to 3 samples: a Weibull in one covariate, censored at 3 (about a third)."""
    rng = np.random.default_rng(seed)
    margin = rng.gamma(2.0, 1.0, n)
    failure = rng.weibull(1.5, n) * np.exp(0.5 * margin)
    return pd.DataFrame(
        {"attack_hash": "a", "duration": np.minimum(failure, 3.0), "event": (failure < 3.0).astype(int), "weight": rng.integers(1, 4, n), "margin": margin}
    )


@pytest.fixture(scope="module")
def margin_fit():
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}})
    return F.fit_one("weibull", spec, weighted_margin_study())


def lifelines_calibration_panel(fit, data, t0):
    """lifelines' own calibration function and plot, on one row per sample."""
    samples = data.loc[data.index.repeat(data["weight"])].drop(columns=["attack_hash", "weight"]).reset_index(drop=True)
    fig, ax = plt.subplots()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ici, e50 = survival_probability_calibration(fit.fitter, samples, t0=t0, ax=ax)
    curve = ax.lines[0].get_data()
    plt.close(fig)
    return ici, e50, curve


def test_calibration_falls_back_to_lifelines_on_one_row_per_sample_where_the_spline_does_not_converge(margin_fit, monkeypatch, capsys):
    data = weighted_margin_study()
    ici, e50, _ = lifelines_calibration_panel(margin_fit, data, 1.5)
    capsys.readouterr()
    fit_spline = CRCSplineFitter.fit_right_censoring

    def weighted_spline_fails(self, *args, **kwargs):  # ours passes weights, lifelines' own function does not
        if kwargs.get("weights_col") is not None:
            raise ConvergenceError("no convergence")
        return fit_spline(self, *args, **kwargs)

    monkeypatch.setattr(CRCSplineFitter, "fit_right_censoring", weighted_spline_fails)
    figures = plt.get_fignums()
    assert F.calibration(margin_fit, data, 1.5) == pytest.approx((ici, e50), rel=1e-9)
    fig, ax = plt.subplots()
    assert F.calibration(margin_fit, data, 1.5, ax) == pytest.approx((ici, e50), rel=1e-9)
    # drawn on the caller's panel, which stays open; no figure of its own left behind, nothing printed
    assert ax.lines and plt.fignum_exists(fig.number) and plt.get_fignums() == [*figures, fig.number]
    assert capsys.readouterr().out == ""
    plt.close(fig)


def test_calibration_falls_back_to_lifelines_slsqp_then_l_bfgs_b(margin_fit, monkeypatch):
    """The weighted spline is fitted by SLSQP on the exact gradient, then by lifelines' SLSQP on
    its autograd objective, then L-BFGS-B; lifelines' own function on one row per sample comes
    only after all three."""
    data = weighted_margin_study()
    fit_spline, tried = CRCSplineFitter.fit_right_censoring, []

    def first_two_fail(self, *args, **kwargs):
        tried.append((type(self).__name__, self._scipy_fit_method))
        if len(tried) <= 2:
            raise ConvergenceError("no convergence")
        return fit_spline(self, *args, **kwargs)

    monkeypatch.setattr(CRCSplineFitter, "fit_right_censoring", first_two_fail)
    monkeypatch.setattr(F, "_lifelines_calibration", lambda *args: pytest.fail("fell back to lifelines' own function"))
    ici, e50 = F.calibration(margin_fit, data, 1.5)
    assert tried == [("FastCRCSplineFitter", "SLSQP"), ("CRCSplineFitter", "SLSQP"), ("CRCSplineFitter", "L-BFGS-B")] and 0 < e50 <= ici < 0.05


def test_samples_predicted_to_survive_or_fail_for_certain_still_calibrate_on_the_spline(margin_fit, monkeypatch):
    """Two rows whose margins put S(t0) at exactly 1.0 and 0.0 in floats: their predictions are
    clipped off 0 and 1 as lifelines clips them, so that their complementary log-log is finite
    and the spline fits."""
    data = pd.concat(
        [weighted_margin_study(), pd.DataFrame({"attack_hash": "a", "duration": [1.0, 2.0], "event": 1, "weight": 1, "margin": [-400.0, 400.0]})],
        ignore_index=True,
    )
    survival = margin_fit.fitter.predict_survival_function(data[["margin"]].tail(2), times=[1.5]).to_numpy().ravel()
    assert sorted(survival) == [0.0, 1.0]
    monkeypatch.setattr(F, "_lifelines_calibration", lambda *args: pytest.fail("fell back to lifelines' own function"))
    ici, e50 = F.calibration(margin_fit, data, 1.5)
    assert np.isfinite([ici, e50]).all() and 0 < ici < 1 and 0 < e50 < 1


def test_the_calibration_panel_is_lifelines_plot_of_the_curve_ici_measures(margin_fit):
    data = weighted_margin_study()
    _, _, (grid, expected) = lifelines_calibration_panel(margin_fit, data, 1.5)
    fig, ax = plt.subplots()
    ici, _ = F.calibration(margin_fit, data, 1.5, ax)
    (curve, diagonal), twin = ax.lines, fig.axes[1]
    x, y = curve.get_data()
    assert x == pytest.approx(grid, abs=1e-12) and y == pytest.approx(expected, abs=1e-3)
    # ICI, read off the drawn curve: the samples' mean distance between it and the diagonal
    predicted = 1 - margin_fit.fitter.predict_survival_function(data[["margin"]], times=[1.5]).to_numpy().ravel()
    assert np.average(np.abs(np.interp(predicted, x, y) - predicted), weights=data["weight"]) == pytest.approx(ici, abs=1e-4)
    assert list(diagonal.get_xdata()) == list(diagonal.get_ydata()) == list(x) and diagonal.get_linestyle() == "--"
    # the curve in the red of the observed axis (figures.OBSERVED), the histogram of predictions in blue, counting samples
    assert to_hex(curve.get_color()) == to_hex("tab:red") and to_hex(ax.yaxis.get_ticklabels()[0].get_color()) == to_hex("tab:red")
    assert to_hex(diagonal.get_color()) == "#000000" and to_hex(ax.xaxis.get_ticklabels()[0].get_color()) == "#000000"  # only the y axis is red
    assert sum(bar.get_height() for bar in twin.patches) == data["weight"].sum() and twin.get_ylabel() == "samples"
    assert (
        to_hex(twin.yaxis.label.get_color()) == to_hex(twin.yaxis.get_ticklabels()[0].get_color()) == to_hex("tab:blue")
    )  # the samples' axis in the bars' blue
    # numpy's "sqrt" rule for the bins, counted in samples (numpy refuses it with weights), light enough to read the curve through
    assert len(twin.patches) == math.ceil(math.sqrt(data["weight"].sum())) and {bar.get_alpha() for bar in twin.patches} == {0.3}
    plt.close(fig)


def test_the_calibration_histogram_has_at_most_50_bins(margin_fit):
    data = weighted_margin_study().assign(weight=lambda d: d["weight"] * 50)  # over 2,500 samples: sqrt would give more
    fig, ax = plt.subplots()
    F.calibration(margin_fit, data, 1.5, ax)
    assert len(fig.axes[1].patches) == 50
    plt.close(fig)


@pytest.mark.parametrize("t0", [0.05, 3.0])
def test_a_calibration_curve_reaching_a_probability_of_0_or_1_stays_finite_and_quiet(margin_fit, t0):
    """At t0 = 0.05 every prediction is below 0.01 (the curve starts at 0), at 3.0 one is above
    0.99 (it ends at 1): the complementary log-log of 0 and 1 is infinite, lifelines' curve is NaN there."""
    data = weighted_margin_study()
    _, _, (grid, _) = lifelines_calibration_panel(margin_fit, data, t0)
    fig, ax = plt.subplots()
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")
        F.calibration(margin_fit, data, t0, ax)
    x, y = ax.lines[0].get_data()
    assert x == pytest.approx(grid, abs=1e-12) and (x[0] == 0.0 if t0 < 1 else x[-1] == 1.0)
    assert np.all((y >= 0) & (y <= 1)) and np.all(np.diff(y) >= 0)
    plt.close(fig)


def weibull_of_scale_one(shape):
    """An intercept-only Weibull AFT fit, its coefficients set to scale 1 and this shape."""
    rng = np.random.default_rng(0)
    fitter = WeibullAFTFitter().fit(pd.DataFrame({"duration": rng.weibull(1.0, 50), "event": 1}), "duration", "event")
    fitter.params_[:] = [0.0, math.log(shape)]  # lambda_, rho_
    return F.Fit("weibull", fitter, 0.0, "BFGS", 1)


@pytest.mark.parametrize("shape", [0.5, 1.0, 4.0])
def test_restricted_mean_of_a_weibull_is_its_closed_form_from_a_hundredth_to_a_thousand_scales(shape):
    """At 1000 scales the piece below t* 1e-6 is 1e-3 of the mean: it must be there, and right."""
    t_star = np.geomspace(0.01, 1000, 11)
    closed_form = gamma(1 + 1 / shape) * gammainc(1 / shape, t_star**shape)
    assert F.restricted_mean(weibull_of_scale_one(shape), pd.DataFrame(index=range(11)), t_star) == pytest.approx(closed_form, rel=5e-6)


def test_restricted_mean_evaluates_each_row_once_in_chunks(monkeypatch):
    fit, t_star = weibull_of_scale_one(1.5), np.arange(1, 11)  # integer budgets are fine
    whole = F.restricted_mean(fit, pd.DataFrame(index=range(10)), t_star)
    evaluated = []
    hazard = F.cumulative_hazard_at

    def counted(fitter, covariates, times):
        evaluated.append(len(covariates))
        return hazard(fitter, covariates, times)

    monkeypatch.setattr(F, "cumulative_hazard_at", counted)
    assert F.restricted_mean(fit, pd.DataFrame(index=range(10)), t_star, chunk=4).tolist() == whole.tolist()
    assert evaluated == [4, 4, 2]  # memory bounded by the chunk, each row computed once


def test_one_row_per_sample_repeats_weighted_rows_and_leaves_unweighted_data_as_they_are():
    data = pd.DataFrame({"duration": [1.0, 2.0], "event": [1, 0], "weight": [2, 1], "margin": [0.5, 1.5]}, index=[10, 20])
    assert F.per_sample(data).to_dict("list") == {"duration": [1.0, 1.0, 2.0], "event": [1, 1, 0], "weight": [1, 1, 1], "margin": [0.5, 0.5, 1.5]}
    unweighted = data.drop(columns="weight")
    assert F.per_sample(unweighted).equals(unweighted.reset_index(drop=True))


def test_one_comparable_pair_gives_a_concordance_and_none_gives_nan_without_a_warning():
    pair = pd.DataFrame({"duration": [1.0, 2.0], "event": [1, 0], "weight": 1})
    assert C.stratified_concordance(pair, np.array([1.0, 2.0]), ["a", "a"]) == 1.0
    assert C.stratified_concordance(pair, np.array([2.0, 1.0]), ["a", "a"]) == 0.0
    with warnings.catch_warnings(), np.errstate(all="warn"):
        # NaN by design, not numpy's 0/0 and its warning (errstate: lifelines' Kaplan-Meier silences numpy for the process)
        warnings.simplefilter("error")
        assert math.isnan(C.stratified_concordance(pair, np.array([1.0, 2.0]), ["a", "b"]))  # never compared across strata


def cox_on_samples(data, covariates):
    samples = data.loc[data.index.repeat(data["weight"]), ["duration", "event", *covariates]].reset_index(drop=True)
    return CoxPHFitter().fit(samples, "duration", "event")


def test_a_weighted_rows_cox_score_residual_is_its_samples_together():
    data = weighted_margin_study()[["duration", "event", "weight", "margin"]]
    fitter = cox_on_samples(data, ["margin"])
    samples = data.loc[data.index.repeat(data["weight"])].assign(weight=1)
    by_sample = pd.DataFrame(F.cox_score_residuals(fitter, samples)).groupby(samples.index.to_numpy()).sum()
    assert F.cox_score_residuals(fitter, data) == pytest.approx(by_sample.to_numpy(), rel=1e-9, abs=1e-12)


def test_cox_score_residuals_do_not_depend_on_where_the_covariates_lie():
    """Covariates far from 0 (a margin of 3000 + m beside a noise near 0): exp(x beta) overflows
    unless x is centred first; the residuals, differences from the risk set's mean, stay the same."""
    data = weighted_margin_study()[["duration", "event", "weight", "margin"]].assign(noise=np.random.default_rng(1).normal(0.0, 1.0, 60))
    near = F.cox_score_residuals(cox_on_samples(data, ["margin", "noise"]), data)
    far = data.assign(margin=data["margin"] + 3000.0)
    assert F.cox_score_residuals(cox_on_samples(far, ["margin", "noise"]), far) == pytest.approx(near, rel=1e-6, abs=1e-9)


def test_a_dummy_stored_as_bool_gives_the_cox_score_residuals_of_its_0_1_values():
    data = weighted_margin_study()[["duration", "event", "weight", "margin"]]
    dummies = data.assign(fsq=data["margin"] > 2.0)  # pandas' get_dummies gives bool columns
    fitter = cox_on_samples(dummies, ["margin", "fsq"])
    assert F.cox_score_residuals(fitter, dummies) == pytest.approx(F.cox_score_residuals(fitter, dummies.assign(fsq=dummies["fsq"].astype(float))))


def test_past_row_block_each_models_predictions_go_a_block_of_rows_at_a_time(study_fits, monkeypatch):
    """E[T] per cell, the cure table and the breakable means predict ROW_BLOCK rows at a time
    past ROW_BLOCK rows (a design of every row at 10^7 is gigabytes): the same values."""
    data = two_family_study()
    budgets = expected_time.cell_budgets(data)
    cure = F.fit_one("weibull_cure", OmegaConf.create({"fitter": {"_target_": "trashfire.survival.cure.WeibullCureFitter", "penalizer": 0.01}}), data)
    fits = {"weibull_cure": cure}

    def outputs():
        times = expected_time.expected_time_of(study_fits["weibull"], data, budgets)
        table = per_model.cure_fraction_rows("weibull_cure", cure, data)
        breakable = per_model.with_breakable_means(pd.DataFrame({"attack_hash": budgets.index}), fits, data)
        return times, table, breakable

    whole = outputs()
    monkeypatch.setattr("trashfire.survival.newton.ROW_BLOCK", len(data) // 3)
    predicted = []
    original = F.restricted_mean
    monkeypatch.setattr(F, "restricted_mean", lambda fit, rows, until: predicted.append(len(rows)) or original(fit, rows, until))
    in_blocks = outputs()
    assert len(predicted) == 4 and sum(predicted) == len(data)
    # per-row values: equal but for the last bits a CPU's BLAS may give a product of another shape
    pd.testing.assert_series_equal(in_blocks[0], whole[0], rtol=1e-12)
    pd.testing.assert_frame_equal(in_blocks[1], whole[1], rtol=1e-12)
    pd.testing.assert_frame_equal(in_blocks[2], whole[2], rtol=1e-12)


def test_held_out_brier_losses_a_block_of_rows_at_a_time_are_every_rows_at_once(monkeypatch):
    """Past ROW_BLOCK held-out rows the Brier losses are predicted a block at a time (lifelines'
    (times, rows) arrays were GBs at 2·10^6 rows): each row's loss is the same."""
    from trashfire.survival import held_out, newton

    data = weighted_margin_study()
    fit = F.fit_one("weibull", compose([], conf=ROOT / "conf").survival.models["weibull"], data)
    at = held_out.horizon(data, data, (0.05, 0.95))
    whole = held_out.brier_losses(fit, data, at)
    monkeypatch.setattr(newton, "ROW_BLOCK", 7)
    predicted = []
    monkeypatch.setattr(
        fit.fitter,
        "predict_survival_function",
        lambda rows, times, original=fit.fitter.predict_survival_function: predicted.append(len(rows)) or original(rows, times=times),
    )
    np.testing.assert_allclose(held_out.brier_losses(fit, data, at), whole, rtol=1e-12, atol=1e-15)
    assert predicted == [7] * (len(data) // 7) + ([len(data) % 7] if len(data) % 7 else [])


def test_a_curve_past_its_sample_cap_averages_a_random_draw_of_its_rows_on_the_familys_grid(study_fits, monkeypatch):
    """At 10^7 samples a group's curve averages CURVE_SAMPLES of its rows (a figure's line):
    below the cap every row, past it a seeded draw from each (family, defence) group, on the
    grid of all the family's durations."""
    assert np.array_equal(expected_time.curve_rows(np.arange(5), cap=5), np.arange(5))
    drawn = expected_time.curve_rows(np.arange(100, 200), cap=10)
    assert len(set(drawn)) == 10 and set(drawn) <= set(range(100, 200))
    data, fit = two_family_study(), study_fits["weibull"]
    whole = expected_time.predicted_curves(fit, data)
    cap = int(data.groupby(["attack_family", "defence"]).size().min()) // 2
    monkeypatch.setattr(expected_time, "CURVE_SAMPLES", cap)
    capped = expected_time.predicted_curves(fit, data)
    assert set(capped) == set(whole)
    scale, shape = weibull_scale_shape(fit, data)
    for (family, defence), (grid, curve) in capped.items():
        assert np.array_equal(grid, whole[(family, defence)][0])  # the family's grid, from all its rows
        rows = expected_time.curve_rows(np.flatnonzero(((data["attack_family"] == family) & (data["defence"] == defence)).to_numpy()), cap)
        weights = data["weight"].to_numpy(float)[rows]
        survival = np.exp(-((grid[:, None] / scale[rows][None, :]) ** shape))
        assert len(rows) == cap and curve == pytest.approx(survival @ weights / weights.sum(), rel=1e-6)
