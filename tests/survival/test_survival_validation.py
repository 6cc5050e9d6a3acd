"""The fitter that feeds E[T] is chosen by grouped K-fold cross-validation inside the training
split (survival/validation.py): folds keep trained models whole, fold fits start from the full
fit and reach the same optimum, the score is the folds' mean, and the test split never moves it."""

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from tests.survival.test_survival_stage import per_sample_data
from trashfire.survival import analysis, expected_time, validation
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F


def test_folds_keep_each_trained_model_whole_deal_them_evenly_and_follow_the_seed():
    groups = pd.Series(np.repeat([f"t{i}" for i in range(10)], 7))
    folds = validation.grouped_folds(groups, 3, seed=0)
    assert (pd.Series(folds).groupby(groups).nunique() == 1).all()  # every row of a trained model in one fold
    assert sorted(pd.Series(folds).groupby(groups).first().value_counts().tolist()) == [3, 3, 4]
    assert (validation.grouped_folds(groups, 3, seed=0) == folds).all() and not (validation.grouped_folds(groups, 3, seed=1) == folds).all()
    assert (
        validation.grouped_folds(groups.sample(frac=1, random_state=0), 3, seed=0) == pd.Series(folds, index=groups.index).sample(frac=1, random_state=0)
    ).all()


def test_the_plan_follows_select_by_chosen_and_the_groups(settings, parts):
    train = parts[0]
    plan = validation.plan(settings, train)
    assert (plan.measure, plan.column, plan.k, plan.why_not) == ("ICI", "cv_ICI", 3, "")  # the default: cv_ICI over 3 folds
    assert validation.plan(OmegaConf.merge(settings, {"select_by": "BIC"}), train) is None  # in-sample: nothing to cross-validate
    assert validation.plan(OmegaConf.merge(settings, {"chosen": "weibull"}), train) is None  # named: nothing to select
    assert validation.plan(OmegaConf.merge(settings, {"folds": 50}), train).k == train["train_hash"].nunique()  # one trained model a fold at most
    # a grid of two trained models leaves one to train on: the folds keep the next finer label whole
    # (model_hash is one per trained model here, so attack cells), and say so; never the test split
    one_model = train[train["train_hash"] == train["train_hash"].iloc[0]]
    finer = validation.plan(settings, one_model)
    assert (finer.why_not, finer.note) == ("", "folds of attack_hash groups: the training split holds 1 train_hash group") and finer.k == 3
    assert (pd.Series(finer.folds).groupby(one_model["attack_hash"].to_numpy()).nunique() == 1).all()
    one_cell = one_model[one_model["attack_hash"] == one_model["attack_hash"].iloc[0]]
    assert validation.plan(settings, one_cell).why_not == "cross-validation needs 2 training groups by train_hash, the training split holds 1"


@pytest.mark.parametrize("name", ["weibull", "gengamma"])
def test_a_fold_fit_starts_from_the_full_fit_and_reaches_the_optimum_a_fresh_fit_does(settings, parts, name):
    """From the full fit's coefficients (the generalised gamma without lifelines' univariate
    start, 20 s of Nelder-Mead at 40,000 samples, which it computes even for a given start)."""
    train = parts[0]
    spec = settings.models[name]
    full = F.fit_one(name, spec, train)
    fold = train[validation.grouped_folds(train["train_hash"], 3, 0) != 0]
    warm, cold = validation.refit(full, spec, fold, settings.retries), F.fit_one(name, spec, fold)
    assert warm.fitter.log_likelihood_ == pytest.approx(cold.fitter.log_likelihood_, abs=1e-6)
    assert warm.fitter.params_.to_numpy() == pytest.approx(cold.fitter.params_.to_numpy(), abs=1e-4)
    # a step or two from a near start; the generalised gamma's own start is near already (the log-normal fit, which the fold skips)
    assert warm.fitter.newton_iterations < cold.fitter.newton_iterations or (
        name == "gengamma" and warm.fitter.newton_iterations <= cold.fitter.newton_iterations
    )


def test_the_cross_validated_score_is_the_mean_of_the_folds_scored_by_hand(settings, parts):
    train = parts[0]
    how = validation.plan(OmegaConf.merge(settings, {"select_by": "cv_concordance"}), train)
    fit = F.fit_one("lognormal", settings.models.lognormal, train)
    row = validation.cross_validate(fit, settings.models.lognormal, train, how)
    by_hand = []
    for fold in range(3):
        held = how.folds == fold
        fold_fit = F.fit_one("lognormal", settings.models.lognormal, train[~held])
        by_hand.append(C.concordance(fold_fit, train[held]))
    assert row == {"cv_concordance": pytest.approx(np.mean(by_hand), abs=1e-9), "cv_folds": 3}
    assert 0.6 < row["cv_concordance"] < C.concordance(fit, train) + 0.05  # held-out, so no better than in-sample by much


@pytest.mark.parametrize("select_by", ["cv_ICI", "cv_IBS", "cv_uno_C"])
def test_the_selection_never_sees_the_test_split(settings, parts, select_by):
    """The same training part beside two test parts, one with its outcomes scrambled: the same
    cross-validated scores, the same selection (issue 59: the selection peeked at test_ICI)."""
    train, test = parts
    scrambled = test.assign(duration=test["duration"].sample(frac=1, random_state=0).to_numpy(), event=1 - test["event"])
    chosen = OmegaConf.merge(settings, {"fitters": ["weibull", "lognormal", "cox"], "select_by": select_by})
    tables = [analysis.compare(train, part, chosen)[0].set_index("fitter") for part in (test, scrambled)]
    column = f"cv_{select_by.removeprefix('cv_')}"
    assert tables[0].loc[["weibull", "lognormal"], column].notna().all() and np.isnan(tables[0].loc["cox", column])  # only AFT models can be selected
    pd.testing.assert_series_equal(tables[0][column], tables[1][column])
    times = pd.DataFrame({"E_T_weibull": [1.0], "E_T_lognormal": [1.0]})
    picks = {expected_time.select(table.reset_index(), times, None, select_by) for table in tables}
    assert len(picks) == 1


def test_a_fold_that_cannot_be_scored_is_left_out_of_the_mean_and_says_why(settings, parts):
    """A fold without a comparable pair has no concordance: the score is the other folds' mean,
    cv_folds counts them, and the fitter's notes say which fold and why."""
    train = parts[0]
    how = validation.plan(OmegaConf.merge(settings, {"select_by": "cv_concordance"}), train)
    fit = F.fit_one("weibull", settings.models.weibull, train)
    censored = train.assign(event=np.where(how.folds == 1, 0, train["event"]))  # fold 2 holds no failure: no comparable pair
    row = validation.cross_validate(fit, settings.models.weibull, censored, how)
    scored = []
    for fold in (0, 2):
        held = how.folds == fold
        refit = validation.refit(fit, settings.models.weibull, censored[~held], how.retries)
        scored.append(validation.fold_score(how, refit, censored[~held], censored[held], how.t0_quantile))
    assert row["cv_folds"] == 2 and row["cv_concordance"] == pytest.approx(np.mean(scored), rel=1e-9)
    assert fit.warnings[-1] == "cv_concordance: fold 2 of 3 not scored: ZeroDivisionError: No admissable pairs in the dataset."


def test_a_grid_of_two_trained_models_still_selects_a_model_and_scores_it_on_the_other(tmp_path, caplog):
    """experiment=tiny's two trained models: one to train on, one to test on. The folds keep its
    attack cells whole (here one predict-time defence per trained model), a model is selected,
    and it alone is scored on the held-out model, without an interval (one model: a note says so)."""
    from tests.conftest import stage_cfg
    from trashfire.stages import survival

    data = per_sample_data(n_models=2, cells_per_model=6, samples=30)
    cfg = stage_cfg(tmp_path, data, "survival.fitters=[weibull,lognormal,cox]")
    caplog.set_level("WARNING", logger=validation.log.name)
    table = survival.run(cfg).set_index("fitter")
    selected = table.index[table["selected"]][0]
    assert selected in ("weibull", "lognormal") and table.loc[["weibull", "lognormal"], "cv_ICI"].notna().all()
    assert "cv_ICI: folds of attack_hash groups: the training split holds 1 train_hash group" in table.loc[selected, "note"]
    assert table.loc[selected, "test_concordance"] > 0.5 and np.isnan(table.loc[selected, "test_concordance_low"])
    assert "test intervals: 1 held-out trained model" in table.loc[selected, "note"]
    said = [r.getMessage() for r in caplog.records if r.name == validation.log.name]
    assert said == ["cross-validation for survival.select_by: folds of attack_hash groups: the training split holds 1 train_hash group"]
