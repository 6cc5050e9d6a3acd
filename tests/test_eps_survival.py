"""Survival in eps: each sample's smallest successful perturbation from the recorded cells, the
Kaplan-Meier curve of the samples still standing, its area and bounds on hand-computed
values, against lifelines' own estimators, and the rank correlation with EVP and R."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lifelines import KaplanMeierFitter
from lifelines.utils import restricted_mean_survival_time
from scipy import stats

from trashfire.core import schema
from trashfire.core.schema import Outcomes
from trashfire.survival import epsilon

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
    found = epsilon.grid_search([0.3, 0.1, 0.05, 0.2], [cells[3], cells[1], cells[0], cells[2]])  # any order
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
    found = epsilon.grid_search([0.1, 0.2], [low, high]).set_index("position")
    assert found.index.tolist() == [2, 4, 5]
    assert found["eps"].to_dict() == {2: 0.2, 4: 0.1, 5: 0.2}
    assert found["event"].to_dict() == {2: 0, 4: 1, 5: 1}


def test_kaplan_meier_area_bounds_and_median_on_hand_computed_values():
    found = epsilon.grid_search(GRID, four_samples())
    fitter = epsilon.kaplan_meier(found["eps"], found["event"])
    summary = epsilon.survival_summary(fitter, 0.3, GRID)
    # standing: 3/4 on [0, 0.1), 2/4 on [0.1, 0.2), 1/4 on [0.2, 0.3]
    assert summary["area_hi"] == pytest.approx((0.75 * 0.1 + 0.5 * 0.1 + 0.25 * 0.1) / 0.3)
    # each threshold just above the grid point below: 3/4 on [0, 0.05), 2/4 on [0.05, 0.1), 1/4 on
    # [0.1, 0.3]
    assert summary["area_lo"] == pytest.approx((0.75 * 0.05 + 0.5 * 0.05 + 0.25 * 0.2) / 0.3)
    # the midpoint is the trapezoid rule over the curve at 0, 0.05, 0.1, 0.2, 0.3
    assert summary["area"] == pytest.approx(np.trapezoid([0.75, 0.75, 0.5, 0.25, 0.25], [0, 0.05, 0.1, 0.2, 0.3]) / 0.3) == pytest.approx(0.4375)
    assert summary["area_hi"] == pytest.approx(restricted_mean_survival_time(fitter, t=0.3) / 0.3)  # lifelines' restricted mean
    assert (summary["n"], summary["events"], summary["events_at_zero"], summary["median_eps"]) == (4, 3, 1, 0.1)
    assert epsilon.curve_points(fitter, 0.3, GRID)["survival"].tolist() == pytest.approx([0.75, 0.75, 0.5, 0.25, 0.25])


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
    found = epsilon.minimal_search([first, second], "2", scale=0.5)
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
    data = epsilon.sample_table(experiments, {"a": first, "b": second, "c": other}, minimal_units="pixel")
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
    data = epsilon.sample_table(experiments, dict(zip("abcd", cells)))
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
    from trashfire.stages import aggregate, attack, brittle, figures, prepare, survival, timing, train

    tmp = tmp_path_factory.mktemp("eps")
    extra = (
        "model=[cifar_resnet8]",
        "split.seeds=[0,1]",
        "defence=[none]",
        "attack=[fgm,deepfool]",
        "attack.deepfool.samples=10",
        "metrics.brittle.n_samples=4",
    )
    overrides = tiny_overrides(tmp, *extra)  # two trained models: the survival stage splits by them
    cfg = normalise(validate(compose(overrides, conf=ROOT / "conf")))
    for stage in (prepare, train, attack, timing, survival, brittle):
        stage.run(cfg)
    summary = aggregate.run(cfg)
    written = figures.run(cfg)
    return cfg, Path(cfg.paths.reports), summary, written


def test_a_tiny_pipeline_writes_the_eps_survival_tables_metrics_and_figures(tiny_run):
    cfg, reports, summary, written = tiny_run
    data = pd.read_csv(reports / "eps_survival_data.csv", dtype={"norm": str})
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
        assert reports / "figures" / f"{stem}.png" in written and (reports / "figures" / f"{stem}.pdf").is_file()
    page = (reports / "report.html").read_text()
    assert "Survival in ε per cell" in page and "eps_survival_spearman · digits · fgm linf · evp" in page
