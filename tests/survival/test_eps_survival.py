"""Survival in eps: each sample's smallest successful perturbation from the recorded cells, the
Kaplan-Meier curve of the samples still standing, its area and bounds on hand-computed
values, against lifelines' own estimators, and the rank correlation with EVP and R."""

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lifelines import KaplanMeierFitter
from lifelines.utils import restricted_mean_survival_time
from scipy import stats

from trashfire.core import schema
from trashfire.core.records import read_table
from trashfire.core.schema import Outcomes
from trashfire.survival import epsilon
from trashfire.tables import eps_samples

GRID = [0.05, 0.1, 0.2, 0.3]


def outcomes(position, event, y_pred_ben=None, failure_step=None, norm_l2=None) -> Outcomes:
    n = len(position)
    y = np.ones(n, dtype=int)
    zeros = np.zeros(n)
    return Outcomes(
        y_true=y,
        y_pred_ben=y if y_pred_ben is None else np.asarray(y_pred_ben),
        y_pred_adv=y,
        margin_ben=zeros,
        failure_step=np.ones(n, dtype=int) if failure_step is None else np.asarray(failure_step),
        event=np.asarray(event, dtype=bool),
        queries=np.ones(n, dtype=np.int64),
        gradients=np.zeros(n, dtype=np.int64),
        flops=np.ones(n, dtype=np.int64),
        duration_process=zeros + 1,
        duration_wall=zeros + 1,
        duration_process_shared=zeros + 1,
        duration_wall_shared=zeros + 1,
        position=np.asarray(position),
        norm_l2=None if norm_l2 is None else np.asarray(norm_l2, dtype=float),
    )


def four_samples() -> list[Outcomes]:
    """Sample 0 is wrong at the first query, 1 breaks first at 0.1 (and stands again at 0.3),
    2 at 0.2, 3 never: the cells at GRID."""
    wrong = [0, 1, 1, 1]
    return [
        outcomes([0, 1, 2, 3], [1, 0, 0, 0], wrong, [0, 1, 1, 1]),
        outcomes([0, 1, 2, 3], [1, 1, 0, 0], wrong, [0, 1, 1, 1]),
        outcomes([0, 1, 2, 3], [1, 1, 1, 0], wrong, [0, 1, 1, 1]),
        outcomes([0, 1, 2, 3], [1, 0, 1, 0], wrong, [0, 1, 1, 1]),
    ]


def test_the_grid_search_finds_each_samples_smallest_breaking_eps():
    cells = four_samples()
    found = eps_samples.grid_search([0.3, 0.1, 0.05, 0.2], [cells[3], cells[1], cells[0], cells[2]])  # any order
    assert found["position"].tolist() == [0, 1, 2, 3]
    assert found["eps"].tolist() == [0.0, 0.1, 0.2, 0.3]
    assert found["eps_lower"].tolist() == [0.0, 0.05, 0.1, 0.3]  # the threshold lies in (eps_lower, eps]
    assert found["event"].tolist() == [1, 1, 1, 0]
    assert found["nonmonotone"].tolist() == [False, True, False, False]


def test_the_grid_search_matches_samples_by_position_across_cells():
    # the second cell lists its samples in another order, and one more (position 7) that the
    # first cell did not attack: only the shared positions have a search
    low = outcomes([2, 4, 5], [0, 1, 0])
    high = outcomes([7, 5, 4, 2], [1, 1, 1, 0])
    found = eps_samples.grid_search([0.1, 0.2], [low, high]).set_index("position")
    assert found.index.tolist() == [2, 4, 5]
    assert found["eps"].to_dict() == {2: 0.2, 4: 0.1, 5: 0.2}
    assert found["event"].to_dict() == {2: 0, 4: 1, 5: 1}


def test_kaplan_meier_area_bounds_and_median_on_hand_computed_values():
    found = eps_samples.grid_search(GRID, four_samples())
    fitter = epsilon.kaplan_meier(found["eps"], found["event"])
    summary = epsilon.survival_summary(fitter, 0.3, GRID)
    # standing: 3/4 on [0, 0.1), 2/4 on [0.1, 0.2), 1/4 on [0.2, 0.3]
    assert summary["area_hi"] == pytest.approx((0.75 * 0.1 + 0.5 * 0.1 + 0.25 * 0.1) / 0.3)
    # each threshold just above the grid point below: 3/4 on [0, 0.05), 2/4 on [0.05, 0.1), 1/4 on
    # [0.1, 0.3]
    assert summary["area_lo"] == pytest.approx((0.75 * 0.05 + 0.5 * 0.05 + 0.25 * 0.2) / 0.3)
    # the midpoint is the trapezoid rule over the curve at 0, 0.05, 0.1, 0.2, 0.3
    assert summary["area"] == pytest.approx(np.trapezoid([0.75, 0.75, 0.5, 0.25, 0.25], [0, 0.05, 0.1, 0.2, 0.3]) / 0.3) == pytest.approx(0.4375)
    lifelines = KaplanMeierFitter().fit(found["eps"], found["event"])
    assert summary["area_hi"] == pytest.approx(restricted_mean_survival_time(lifelines, t=0.3) / 0.3)  # lifelines' restricted mean
    assert (summary["n"], summary["events"], summary["events_at_zero"], summary["median_eps"]) == (4, 3, 1, 0.1)
    assert epsilon.curve_points(fitter, 0.3, GRID)["survival"].tolist() == pytest.approx([0.75, 0.75, 0.5, 0.25, 0.25])


def test_the_kaplan_meier_estimate_is_lifelines_with_ties_zeros_and_censoring():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        eps = np.round(rng.exponential(1, n), 1) * rng.integers(0, 2, n)  # ties, and zeros (wrong at the first query)
        event = rng.integers(0, 2, n)
        ours, theirs = epsilon.kaplan_meier(eps, event), KaplanMeierFitter().fit(eps, event)
        pd.testing.assert_frame_equal(ours.event_table, theirs.event_table, check_dtype=False)
        pd.testing.assert_frame_equal(ours.survival_function_, theirs.survival_function_, check_dtype=False, rtol=0, atol=1e-14)


def test_nobody_breaking_gives_area_one_and_no_median():
    fitter = epsilon.kaplan_meier([0.3, 0.3], [0, 0])
    summary = epsilon.survival_summary(fitter, 0.3, GRID)
    assert (summary["area"], summary["area_lo"], summary["area_hi"]) == (1.0, 1.0, 1.0) and np.isnan(summary["median_eps"])


def test_at_the_grid_points_the_estimate_is_lifelines_interval_censored_npmle():
    rng = np.random.default_rng(0)
    grid = np.array([0.0, *GRID])
    k = rng.integers(0, len(grid) + 1, 200)  # 0: wrong at the first query; len(grid): never broken
    event = k < len(grid)
    upper = np.where(event, grid[np.minimum(k, len(grid) - 1)], 0.3)
    lower = np.where(event, np.concatenate([[0.0], grid])[np.minimum(k, len(grid) - 1)], 0.3)
    fitter = epsilon.kaplan_meier(upper, event.astype(int))
    # half-open intervals (lower, upper]: lifelines takes them closed, so lift the lower end a hair
    npmle = KaplanMeierFitter().fit_interval_censoring(np.where(event & (upper > 0), lower + 1e-9, lower), np.where(event, upper, np.inf))
    # lifelines reports P(T >= t) at each Turnbull end point: S at a grid point is its value at the next
    table = npmle.survival_function_["NPMLE_estimate_upper"]
    after = [float(table[table.index > g].iloc[0]) for g in GRID[:-1]]
    assert epsilon.step_values(fitter, np.array(GRID[:-1])) == pytest.approx(after, abs=1e-6)
    assert epsilon.step_values(fitter, np.array([0.3])) == pytest.approx([1 - event.mean()])  # what is left never broke


def test_deepfool_times_are_the_returned_norms_in_pixel_units():
    # two cells (nb_grads 1 and 3) of one model cell: sample 0 wrong at the first query, 1
    # broken by both (the smaller norm counts), 2 by the second only, 3 by neither (censored at
    # the farthest its searches got)
    first = outcomes([0, 1, 2, 3], [1, 1, 0, 0], failure_step=[0, 2, 10, 10], norm_l2=[0.0, 2.0, 1.0, 4.0])
    second = outcomes([0, 1, 2, 3], [1, 1, 1, 0], failure_step=[0, 3, 5, 10], norm_l2=[0.0, 3.0, 5.0, 6.0])
    found = eps_samples.minimal_search([first, second], "2", scale=0.5)
    assert found["eps"].tolist() == [0.0, 1.0, 2.5, 3.0] and found["event"].tolist() == [1, 1, 1, 0]
    assert found["eps_lower"].tolist() == found["eps"].tolist()  # exact times: no interval
    experiments = pd.DataFrame(
        {
            "model_hash": ["m1", "m1", "m2"],
            "dataset": "digits",
            "attack": "deepfool",
            "norm": "2",
            "attack_param": "nb_grads",
            "attack_value": [1, 3, 1],
            "attack_units": "standardised",
            "pixel_std": 0.5,
            "attack_hash": ["a", "b", "c"],
            "minimal": True,  # its option's `minimal: true` (conf/attack/deepfool.yaml)
        }
    )
    other = outcomes([0, 1, 2, 3], [1, 1, 1, 1], norm_l2=[8.0, 2.0, 2.0, 2.0])
    data = eps_samples.sample_table(experiments, {"a": first, "b": second, "c": other}, minimal_units="pixel")
    assert list(data.columns) == schema.EPS_SURVIVAL_DATA
    assert (data["search"] == "minimal").all() and (data["units"] == "pixel").all()
    assert data[data["model_hash"] == "m1"]["eps"].tolist() == [0.0, 1.0, 2.5, 3.0]
    assert (data["eps_max"] == 4.0).all()  # the largest time over the data set's model cells, one upper end for both
    fitter = epsilon.kaplan_meier([0.0, 1.0, 2.5, 3.0], [1, 1, 1, 0])
    summary = epsilon.survival_summary(fitter, 4.0)
    assert summary["area"] == summary["area_lo"] == summary["area_hi"] == pytest.approx((0.75 * 1 + 0.5 * 1.5 + 0.25 * 1.5) / 4)


def test_a_grid_family_keeps_its_configured_units_and_largest_eps():
    cells = four_samples()
    experiments = pd.DataFrame(
        {
            "model_hash": "m1",
            "dataset": "digits",
            "attack": "fgm",
            "norm": "inf",
            "attack_param": "eps",
            "attack_value": GRID,
            "attack_units": "pixel",
            "pixel_std": 0.4,
            "attack_hash": ["a", "b", "c", "d"],
            "minimal": False,
        }
    )
    data = eps_samples.sample_table(experiments, dict(zip("abcd", cells)))
    assert data["eps"].tolist() == [0.0, 0.1, 0.2, 0.3] and set(data["units"]) == {"pixel"} and set(data["eps_max"]) == {0.3}
    labels = {k: "" if k in ("pretrained_on", "defence_param") else 0 for k in schema.MODEL_LABELS}
    table, curves = epsilon.survival_tables(data, experiments.assign(**labels), pd.Series({"m1": False}))
    assert list(table.columns) == schema.EPS_SURVIVAL and list(curves.columns) == schema.EPS_SURVIVAL_CURVES
    assert table["area"].tolist() == pytest.approx([0.4375]) and table["n_nonmonotone"].tolist() == [1]
    assert curves["eps"].tolist() == [0.0, *GRID]


def test_the_spearman_with_evp_and_r_is_scipys_over_the_sound_cells():
    rng = np.random.default_rng(1)
    n = 8
    table = pd.DataFrame(
        {
            "model_hash": [f"m{i}" for i in range(n)],
            "dataset": "digits",
            "attack_family": "pgd linf",
            "area": rng.uniform(size=n),
            "degenerate": [False] * (n - 1) + [True],
        }
    )
    robustness = pd.DataFrame({"model_hash": table["model_hash"], "attack_family": "pgd linf", "evp": rng.uniform(size=n), "auc_R": rng.uniform(size=n)})
    robustness.loc[0, "auc_R"] = np.nan  # a cell R could not score
    found = epsilon.spearman_against(table, robustness)["digits"]["pgd linf"]
    sound = slice(0, n - 1)
    rho, p = stats.spearmanr(table["area"][sound], robustness["evp"][sound])
    assert found["evp"] == {"rho": pytest.approx(rho), "p": pytest.approx(p), "n": n - 1}
    rho, p = stats.spearmanr(table["area"][1 : n - 1], robustness["auc_R"][1 : n - 1])
    assert found["auc_R"] == {"rho": pytest.approx(rho), "p": pytest.approx(p), "n": n - 2}
    few = epsilon.spearman_against(table.head(2), robustness)["digits"]["pgd linf"]["evp"]
    assert np.isnan(few["rho"]) and few["n"] == 2


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The real stages on a tiny grid: two seeds of ResNet-8, FGM over two eps and DeepFool on ten samples."""
    from tests.conftest import ROOT, tiny_overrides
    from trashfire.core.config import compose, normalise, validate
    from trashfire.stages import aggregate, attack, brittle, budget, figures, prepare, survival, timing, train

    tmp = tmp_path_factory.mktemp("eps")
    extra = (
        "model=[cifar_resnet8]",
        "split.seeds=[0,1]",
        "defence=[none]",
        "attack=[fgm,deepfool]",
        "attack.deepfool.samples=10",
        "brittle.n_samples=4",
        "survival.fitters=[weibull,cox]",  # the time-survival fits are test_survival's; two keep the stage real
    )
    overrides = tiny_overrides(tmp, *extra)  # two trained models: the survival stage splits by them
    cfg = normalise(validate(compose(overrides, conf=ROOT / "conf")))
    for stage in (prepare, train, attack, budget, timing, survival, brittle):
        stage.run(cfg)
    summary = aggregate.run(cfg)
    written = figures.run(cfg)
    return cfg, Path(cfg.paths.reports), summary, written


def test_a_tiny_pipeline_writes_the_eps_survival_tables_metrics_and_figures(tiny_run):
    cfg, reports, summary, written = tiny_run
    data = read_table(reports / "eps_survival_data.parquet")
    assert list(data.columns) == schema.EPS_SURVIVAL_DATA
    assert set(data["attack_family"]) == {"fgm linf", "deepfool l2"}
    counts = data.groupby(["model_hash", "attack_family"]).size().unstack()
    assert (counts["deepfool l2"] == 10).all() and (counts["fgm linf"] == 20).all()  # samples per model cell
    table = pd.read_csv(reports / "eps_survival.csv", dtype={"norm": str})
    assert list(table.columns) == schema.EPS_SURVIVAL and len(table) == 2 * len(counts)
    assert table["area"].between(0, 1).all() and (table["area_lo"] <= table["area"]).all() and (table["area"] <= table["area_hi"]).all()
    fgm = table[table["attack"] == "fgm"]
    assert set(fgm["units"]) == {"standardised"} and set(fgm["eps_max"]) == {1.0}  # the tiny grid, as configured
    deepfool = table[table["attack"] == "deepfool"]
    assert set(deepfool["units"]) == {"pixel"} and (deepfool["area"] == deepfool["area_hi"]).all()
    curves = pd.read_csv(reports / "eps_survival_curves.csv", dtype={"norm": str})
    assert list(curves.columns) == schema.EPS_SURVIVAL_CURVES
    assert sorted(curves.loc[curves["attack"] == "fgm", "eps"].unique()) == [0.0, 0.1, 1.0]
    assert set(summary["eps_survival_spearman"]["digits"]) == {"fgm linf"}  # DeepFool has no EVP or R
    assert set(summary["eps_survival_area_mean"]["digits"]) == {"fgm linf", "deepfool l2"}
    for stem in ("eps_survival_curves", "eps_survival_vs_evp_r"):
        assert reports / "figures" / f"{stem}.png" in written
    page = (reports / "report.html").read_text()
    assert "Survival in ε per cell" in page and "eps_survival_spearman · digits · fgm linf · evp" in page


# --- the searches' edges: randomised benign predictions, numeric events, censoring per sample


def test_a_sample_wrong_at_the_benign_prediction_fails_at_zero_even_where_the_cell_missed_it():
    # a randomised model: sample 0's benign prediction in the 0.1 cell was wrong, yet the
    # attack there drew a right answer (no event); 0.2 broke it. It fails at 0, and standing in
    # a cell after failing makes it nonmonotone. Sample 1, broken at the smallest eps, has its
    # threshold in (0, 0.1]
    low = outcomes([0, 1, 2], [0, 1, 0], y_pred_ben=[0, 1, 1])
    high = outcomes([0, 1, 2], [1, 1, 0])
    found = eps_samples.grid_search([0.1, 0.2], [low, high])
    assert found["eps"].tolist() == [0.0, 0.1, 0.2] and found["eps_lower"].tolist() == [0.0, 0.0, 0.2]
    assert found["event"].tolist() == [1, 1, 0] and found["nonmonotone"].tolist() == [True, False, False]


def test_event_arrays_of_zeros_and_ones_are_read_as_booleans():
    """An npz written with numeric events (0.0/1.0) searches as the boolean one; the event
    column is 0/1 integers either way."""
    cells = four_samples()
    numeric = [dataclasses.replace(cell, event=cell.event.astype(float)) for cell in cells]
    found = eps_samples.grid_search(GRID, numeric)
    pd.testing.assert_frame_equal(found, eps_samples.grid_search(GRID, cells))
    assert found["event"].dtype == np.int64 and found["nonmonotone"].tolist() == [False, True, False, False]
    first = outcomes([0, 1], [1, 0], failure_step=[0, 10], norm_l2=[0.0, 2.0])
    minimal = eps_samples.minimal_search([dataclasses.replace(first, event=first.event.astype(float))], "2")
    pd.testing.assert_frame_equal(minimal, eps_samples.minimal_search([first], "2"))
    assert minimal["event"].dtype == np.int64 and minimal["event"].tolist() == [1, 0]


def test_a_minimal_search_censors_each_sample_at_its_own_farthest_norm():
    # samples 0 and 1 never broken: censored at their farthest norm over the two cells (4 and
    # 6 for sample 0, 3 and 1 for sample 1); sample 2 broken by both, the smaller norm counts.
    # Without a scale the norms are as measured; no minimal sample is nonmonotone
    first = outcomes([0, 1, 2], [0, 0, 1], failure_step=[10, 10, 2], norm_l2=[4.0, 3.0, 2.5])
    second = outcomes([0, 1, 2], [0, 0, 1], failure_step=[10, 10, 3], norm_l2=[6.0, 1.0, 1.5])
    found = eps_samples.minimal_search([first, second], "2")
    assert found["eps"].tolist() == [6.0, 3.0, 1.5] and found["event"].tolist() == [0, 0, 1]
    assert found["nonmonotone"].tolist() == [False, False, False]


# --- the per-sample table's edges


def deepfool_cells(**columns) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model_hash": ["m2", "m1"],
            "dataset": "digits",
            "attack": "deepfool",
            "norm": "2",
            "attack_param": "nb_grads",
            "attack_value": 1,
            "attack_units": "standardised",
        }
        | {"pixel_std": 0.5, "attack_hash": ["b", "a"], "minimal": True}
        | columns
    )


DEEPFOOL = {
    "a": outcomes([0, 1], [1, 0], failure_step=[2, 10], norm_l2=[2.0, 4.0]),
    "b": outcomes([0, 1], [1, 1], failure_step=[3, 3], norm_l2=[6.0, 8.0]),
}


def test_an_experiments_table_without_cells_gives_the_columns_and_without_minimal_a_clear_error():
    empty = eps_samples.sample_table(deepfool_cells().iloc[:0], {})
    assert empty.empty and list(empty.columns) == schema.EPS_SURVIVAL_DATA
    message = "the experiments table has no `minimal` column (an attack's property, added by timing's attack_properties)"
    with pytest.raises(KeyError) as error:
        eps_samples.sample_table(deepfool_cells().drop(columns="minimal"), DEEPFOOL)
    assert error.value.args == (message,)


def test_minimal_norms_are_in_pixel_units_by_default():
    data = eps_samples.sample_table(deepfool_cells(), DEEPFOOL)
    # the standardised norms times the pixel std 0.5; rows by model cell, m1 first
    assert data["model_hash"].tolist() == ["m1", "m1", "m2", "m2"] and set(data["units"]) == {"pixel"}
    assert data["eps"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_table_read_back_from_csv_spells_norm_and_minimal_as_text():
    # experiments.csv read back: an all-digit norm column comes as integers, booleans as text
    data = eps_samples.sample_table(deepfool_cells(norm=2, minimal=["True", "True"]), DEEPFOOL, minimal_units="standardised")
    assert data["norm"].tolist() == ["2"] * 4 and set(data["search"]) == {"minimal"}
    assert data["eps"].tolist() == [2.0, 4.0, 6.0, 8.0]  # standardised: as measured
    grid = deepfool_cells(attack="fgm", norm="inf", attack_param="eps", attack_value=0.1, minimal=["False", "false"])
    assert set(eps_samples.sample_table(grid, DEEPFOOL)["search"]) == {"grid"}


def test_minimal_samples_without_a_pixel_std_are_left_out_with_a_warning(caplog):
    logging.getLogger("trashfire.survival.epsilon").addHandler(caplog.handler)
    with caplog.at_level(logging.WARNING, logger="trashfire.survival.epsilon"):
        data = eps_samples.sample_table(deepfool_cells().drop(columns="pixel_std"), DEEPFOOL)
    assert data.empty and list(data.columns) == schema.EPS_SURVIVAL_DATA
    assert "4 samples without a pixel std (older attack records) left out of the eps survival" in {r.getMessage() for r in caplog.records}


# --- areas, medians and curves at their upper end


def test_the_area_and_curve_stop_at_eps_max_and_a_median_beyond_it_is_none():
    # minimal times 0.5, 3, 4, 5 (all broken), eps_max 2: standing 1 on [0, 0.5), 3/4 on
    # [0.5, 2]; area (1 x 0.5 + 0.75 x 1.5) / 2 = 0.8125. Half are broken only at 3 > eps_max
    fitter = epsilon.kaplan_meier([0.5, 3.0, 4.0, 5.0], [1, 1, 1, 1])
    summary = epsilon.survival_summary(fitter, 2.0)
    assert summary["area"] == summary["area_lo"] == summary["area_hi"] == pytest.approx(0.8125)
    assert np.isnan(summary["median_eps"]) and summary["eps_max"] == 2.0
    points = epsilon.curve_points(fitter, 2.0)  # every step up to eps_max, then eps_max
    assert points["eps"].tolist() == [0.0, 0.5, 2.0] and points["survival"].tolist() == pytest.approx([1.0, 0.75, 0.75])


def test_a_median_at_eps_max_itself_counts():
    # on the grid: one of four broken at 0.1 (3/4 standing), one of the three left at 0.3:
    # 3/4 x 2/3 = 1/2 standing at eps_max 0.3, the median
    fitter = epsilon.kaplan_meier([0.1, 0.3, 0.3, 0.3], [1, 1, 0, 0])
    assert epsilon.survival_summary(fitter, 0.3, GRID)["median_eps"] == pytest.approx(0.3)


# --- the per-cell tables


def eps_data() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Model m2's FGM grid family (listed first) and m1's DeepFool with a single sample."""
    fgm = {"model_hash": "m2", "attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "search": "grid", "units": "pixel", "eps_max": 0.3}
    deepfool = {"model_hash": "m1", "attack": "deepfool", "norm": "2", "attack_family": "deepfool l2", "search": "minimal", "units": "pixel", "eps_max": 4.0}
    rows = [fgm | {"eps": e, "event": v, "nonmonotone": e == 0.1} for e, v in zip([0.0, 0.1, 0.2, 0.3], [1, 1, 1, 0])]
    data = pd.DataFrame([*rows, deepfool | {"eps": 2.0, "event": 1, "nonmonotone": False}]).assign(dataset="digits", position=0)
    data["eps_lower"] = data["eps"]
    labels = {k: "" if k in ("pretrained_on", "defence_param") else 0 for k in schema.MODEL_LABELS if k != "dataset"}
    experiments = pd.DataFrame(
        {"model_hash": ["m2"] * 4 + ["m1", "m1"], "dataset": "digits", "attack": ["fgm"] * 4 + ["deepfool"] * 2, "norm": ["inf"] * 4 + ["2"] * 2}
        | {"attack_value": [*GRID, 1, 3]}
        | labels
    )
    return data[schema.EPS_SURVIVAL_DATA], experiments


def test_each_cells_row_carries_its_search_units_eps_max_and_degenerate_flag():
    data, experiments = eps_data()
    table, curves = epsilon.survival_tables(data, experiments, pd.Series({"m2": True}))
    assert table["model_hash"].tolist() == ["m1", "m2"]  # sorted by model cell
    columns = ["search", "units", "eps_max", "n", "events", "n_nonmonotone", "degenerate"]
    assert table[columns].to_dict("records") == [
        {"search": "minimal", "units": "pixel", "eps_max": 4.0, "n": 1, "events": 1, "n_nonmonotone": 0, "degenerate": False},  # not in the series
        {"search": "grid", "units": "pixel", "eps_max": 0.3, "n": 4, "events": 3, "n_nonmonotone": 1, "degenerate": True},
    ]
    # m1's one sample broken at 2: the exact time, no grid (its nb_grads are no eps): 2 / 4 = 0.5
    assert table.loc[0, ["area", "area_lo", "area_hi"]].tolist() == [0.5, 0.5, 0.5]
    assert table.loc[1, "area"] == pytest.approx(0.4375)  # four_samples' curve on GRID
    assert curves[curves["model_hash"] == "m1"][["eps", "survival"]].to_numpy().tolist() == [[0.0, 1.0], [2.0, 0.0], [4.0, 0.0]]
    unflagged, _ = epsilon.survival_tables(data, experiments)
    assert unflagged["degenerate"].tolist() == [False, False]


def test_no_eps_survival_data_gives_both_tables_empty_with_their_columns():
    table, curves = epsilon.survival_tables(pd.DataFrame(columns=schema.EPS_SURVIVAL_DATA), eps_data()[1])
    assert table.empty and list(table.columns) == schema.EPS_SURVIVAL
    assert curves.empty and list(curves.columns) == schema.EPS_SURVIVAL_CURVES


def test_the_spearman_needs_both_tables_and_lists_families_in_order():
    rng = np.random.default_rng(2)
    table = pd.DataFrame(
        {
            "model_hash": [f"m{i}" for i in range(8)],
            "dataset": "digits",
            "attack_family": ["pgd linf"] * 4 + ["fgm linf"] * 4,
            "area": rng.uniform(size=8),
            "degenerate": False,
        }
    )
    robustness = table[["model_hash", "attack_family"]].assign(evp=rng.uniform(size=8), auc_R=rng.uniform(size=8))
    assert list(epsilon.spearman_against(table, robustness)["digits"]) == ["fgm linf", "pgd linf"]
    assert epsilon.spearman_against(table, None) == {} and epsilon.spearman_against(pd.DataFrame(), robustness) == {}


def test_records_without_positions_match_samples_by_their_order():
    # older outcome arrays carry no attack-subset positions: sample i is position i
    cells = [dataclasses.replace(cell, position=None) for cell in four_samples()]
    found = eps_samples.grid_search(GRID, cells)
    assert found["position"].tolist() == [0, 1, 2, 3] and found["eps"].tolist() == [0.0, 0.1, 0.2, 0.3]


def test_a_grid_family_without_recorded_units_is_standardised_and_ends_at_its_largest_eps():
    # every sample broken by 0.2: eps_max is still the grid's 0.3, not the largest time
    broken = [outcomes([0, 1], event) for event in ([0, 1], [1, 1], [1, 1])]
    experiments = pd.DataFrame(
        {
            "model_hash": "m1",
            "dataset": "digits",
            "attack": "pgd",
            "norm": "inf",
            "attack_param": "eps",
            "attack_value": [0.1, 0.2, 0.3],
            "attack_hash": ["a", "b", "c"],
        }
        | {"minimal": False}
    )
    data = eps_samples.sample_table(experiments, dict(zip("abc", broken)))
    assert data["eps"].tolist() == [0.2, 0.1] and set(data["units"]) == {"standardised"} and set(data["eps_max"]) == {0.3}


def test_no_eps_grid_and_no_minimal_attack_gives_an_empty_table_with_its_columns():
    experiments = deepfool_cells(attack="square", attack_param="queries", minimal=False)
    data = eps_samples.sample_table(experiments, DEEPFOOL)
    assert data.empty and list(data.columns) == schema.EPS_SURVIVAL_DATA


def test_minimal_norms_recorded_in_float32_are_scaled_in_double_precision():
    # the attack stage measures norms on float32 images: the unit conversion (MNIST's pixel
    # std 0.3081) is a float64 product of the recorded value, not a float32-rounded one
    norms = np.array([2.1, 0.7], dtype=np.float32)
    cell = dataclasses.replace(outcomes([0, 1], [1, 0], failure_step=[2, 10]), norm_l2=norms)
    found = eps_samples.minimal_search([cell], "2", scale=0.3081)
    assert found["eps"].dtype == np.float64
    assert found["eps"].tolist() == [float(norms[0]) * 0.3081, float(norms[1]) * 0.3081]
