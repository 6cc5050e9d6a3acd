"""survival.score_samples caps what calibration, the cross-validation and the training
concordances read (survival/score_sample.py): a seeded simple random sample of samples for ICI
and E50, whole training groups for the folds, whole attack cells for the concordances, nothing
drawn at or below the cap, and Table I's note says so."""

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from trashfire.survival import analysis, validation
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival.score_sample import calibration_rows, concordance_rows, cross_validation_rows
from trashfire.survival.scoring import cell_mean_runtime


def test_calibration_reads_every_sample_up_to_the_cap_and_a_seeded_sample_of_samples_above_it():
    data = pd.DataFrame({"duration": np.arange(1.0, 101.0), "event": 1, "weight": np.tile([1, 3], 50)})  # 200 samples in 100 rows
    assert calibration_rows(data, 200, 0) == (data, "") and calibration_rows(data, None, 0)[0] is data
    sample, note = calibration_rows(data, 50, seed=0)
    assert sample["weight"].sum() == 50 and note == "on a seeded sample of 50 of its 200 samples (survival.score_samples)"
    assert (sample["weight"].to_numpy() <= data.loc[sample.index, "weight"].to_numpy()).all()  # a row gives at most the samples it stands for
    assert sample.index.equals(calibration_rows(data, 50, seed=0)[0].index) and not sample.index.equals(calibration_rows(data, 50, seed=1)[0].index)
    # a simple random sample of samples: rows standing for 3 are drawn about 3 times as often as rows standing for 1
    draws = pd.concat([calibration_rows(data, 100, seed)[0] for seed in range(40)])
    per_kind = draws.groupby(data.loc[draws.index, "weight"].to_numpy())["weight"].sum()
    assert per_kind[3] / per_kind[1] == pytest.approx(3.0, rel=0.1)


def test_the_folds_are_dealt_from_whole_groups_drawn_until_they_hold_the_cap():
    groups = pd.Series(np.repeat([f"t{i}" for i in range(10)], 20))
    weights = np.ones(200)
    assert cross_validation_rows(groups, weights, 200, 0) == (None, "") and cross_validation_rows(groups, weights, None, 0) == (None, "")
    rows, note = cross_validation_rows(groups, weights, 50, seed=0)
    taken = groups.iloc[rows]
    assert taken.nunique() == 3 and (taken.value_counts() == 20).all()  # whole groups, the fewest that hold 50 samples
    assert note == "folds of 3 of the 10 training groups (60 of 200 samples; survival.score_samples)"
    assert set(taken) != set(groups.iloc[cross_validation_rows(groups, weights, 50, seed=1)[0]])


def test_a_capped_stage_scores_every_fitter_on_the_same_sample_and_its_note_says_so(settings, parts):
    train, test = parts
    total = int(F.sample_weights(train).sum())
    capped = OmegaConf.merge(settings, {"fitters": ["weibull", "lognormal"], "score_samples": total // 2})
    plan = validation.plan(capped, train)
    assert plan.rows is not None and len(plan.folds) == len(plan.rows) and F.sample_weights(train.iloc[plan.rows]).sum() >= total // 2
    assert (pd.Series(plan.folds).groupby(train["train_hash"].iloc[plan.rows].to_numpy()).nunique() == 1).all()
    table, fits = analysis.compare(train, test, capped)
    table = table.set_index("fitter")
    whole = analysis.compare(train, test, OmegaConf.merge(capped, {"score_samples": None}))[0].set_index("fitter")
    ranked, drawn = concordance_rows(train, "attack_hash", total // 2, int(capped.seed))
    assert drawn.startswith("on a seeded sample of ") and F.sample_weights(ranked).sum() >= total // 2
    for name in ("weibull", "lognormal"):
        assert f"ICI/E50 on a seeded sample of {total // 2:,} of its {total:,} samples (survival.score_samples)" in table.loc[name, "note"]
        assert f"concordance, concordance_within {drawn}" in table.loc[name, "note"]
        assert "cv_ICI: folds of" in table.loc[name, "note"] and "survival.score_samples" not in whole.loc[name, "note"]
        # the fits and the scores that read every sample do not move; ICI and the concordances are estimates from half the samples
        for column in ("log_likelihood", "AIC"):
            assert table.loc[name, column] == whole.loc[name, column]
        assert table.loc[name, "ICI"] == pytest.approx(whole.loc[name, "ICI"], abs=0.02)
        assert table.loc[name, "concordance"] == C.concordance(fits[name], ranked) == pytest.approx(whole.loc[name, "concordance"], abs=0.05)
    # the baselines' training concordance reads the same cells
    assert table.loc["runtime_baseline", "concordance"] == C.ranking_concordance(ranked, cell_mean_runtime(ranked))
    assert f"concordance, concordance_within {drawn}" in table.loc["runtime_baseline", "note"]


def test_the_training_concordance_reads_whole_attack_cells_drawn_until_they_hold_the_cap():
    cells = np.repeat([f"c{i}" for i in range(10)], 20)
    data = pd.DataFrame({"attack_hash": cells, "duration": np.arange(1.0, 201.0), "event": 1, "weight": np.tile([1, 2], 100)})  # 30 samples a cell
    assert concordance_rows(data, "attack_hash", 300, 0) == (data, "") and concordance_rows(data, "attack_hash", None, 0)[0] is data
    ranked, note = concordance_rows(data, "attack_hash", 80, seed=0)
    assert ranked["attack_hash"].nunique() == 3 and (ranked["attack_hash"].value_counts() == 20).all()  # whole cells, the fewest that hold 80 samples
    assert note == "on a seeded sample of 3 of the 10 attack cells (90 of 300 samples; survival.score_samples)"
    assert set(ranked["attack_hash"]) != set(concordance_rows(data, "attack_hash", 80, seed=1)[0]["attack_hash"])
