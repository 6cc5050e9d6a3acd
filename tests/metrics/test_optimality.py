"""How strong each attack is: AttackBench's optimality against hand-computed values, the
ensemble's per-sample minimal eps, the grid check (robust accuracy from the minimal eps equals
each grid cell's up to the samples another attack broke below, counted), robust accuracy
against queries, and the flag of an attack far from the ensemble's best."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import tiny_config
from trashfire.core.records import read_table
from trashfire.metrics import optimality, validity
from trashfire.tables import distances


def test_optimality_is_attackbenchs_on_a_hand_computed_case():
    # d* = 0, 1, 2, 4 (one wrong at the first query); M = 4, clean accuracy 3/4, best area
    # (0 + 1 + 2 + 4) / 4 = 1.75; the attack's area (0 + 2 + 2 + 4) / 4 = 2 (inf clipped at M):
    # 1 - (2 - 1.75) / (0.75 * 4 - 1.75) = 1 - 0.25 / 1.25 = 0.8
    value, area, best_area, clean, m = optimality.optimality(np.array([0, 2, 2, np.inf]), np.array([0, 1, 2, 4.0]))
    assert (value, area, best_area, clean, m) == pytest.approx((0.8, 2.0, 1.75, 0.75, 4.0))
    assert optimality.optimality(np.array([0, 1, 2, 4.0]), np.array([0, 1, 2, 4.0]))[0] == 1.0  # the ensemble's best itself
    assert optimality.optimality(np.array([0, np.inf, np.inf, np.inf]), np.array([0, 1, 2, 4.0]))[0] == 0.0  # broke nothing


def test_the_ensemble_takes_each_samples_smallest_eps_and_its_interval():
    rows = [
        # sample 0: the grid broke it at 0.2 (threshold in (0.1, 0.2]), FMN at 0.15 exactly
        ("pgd linf", "grid", 0, 0.1, 0.2, 1, 0.3),
        ("fmn linf", "exact", 0, 0.15, 0.15, 1, 0.4),
        # sample 1: only the grid broke it; FMN never did
        ("pgd linf", "grid", 1, 0.1, 0.2, 1, 0.3),
        ("fmn linf", "exact", 1, np.inf, np.inf, 0, 0.5),
        # sample 2: nobody
        ("pgd linf", "grid", 2, 0.3, np.inf, 0, 0.3),
        ("fmn linf", "exact", 2, np.inf, np.inf, 0, 0.6),
    ]
    table = pd.DataFrame(rows, columns=["attack_family", "kind", "position", "eps_lower", "eps", "event", "reach"]).assign(
        model_hash="m", dataset="digits", norm="inf", attack=lambda t: t["attack_family"].str.split().str[0]
    )
    best = distances.ensemble(table).set_index("position")
    assert best.loc[0, ["eps_lower", "eps", "kind", "best_by"]].tolist() == [0.15, 0.15, "exact", "fmn linf"]
    assert best.loc[1, ["eps_lower", "eps", "kind"]].tolist() == [0.1, 0.2, "grid"]
    assert best.loc[2, "event"] == 0 and best.loc[2, "reach"] == 0.6  # censored where the farthest search got
    assert (best["n_attacks"] == 2).all()


def _ensemble_by_groupby(distances_table: pd.DataFrame) -> pd.DataFrame:
    """The ensemble's definition in pandas' words (the stage's own code sorts integer ranks)."""
    ranked = distances_table.assign(exact_first=(distances_table["kind"] != "exact").astype(int)).sort_values(["eps", "exact_first"], kind="stable")
    keys = ["model_hash", "dataset", "norm", "position"]
    best = ranked.groupby(keys, sort=True)[["attack_family", "kind", "eps_lower", "eps"]].first().reset_index()
    farthest = np.maximum(distances_table["reach"], distances_table["eps"].where(np.isfinite(distances_table["eps"]), 0.0))
    best["reach"] = farthest.groupby([distances_table[key] for key in keys], sort=True).max().to_numpy()
    best["event"] = np.isfinite(best["eps"]).astype(int)
    families = distances_table.groupby(["model_hash", "norm"])["attack_family"].nunique()
    best["n_attacks"] = pd.MultiIndex.from_frame(best[["model_hash", "norm"]]).map(families)
    return best.rename(columns={"attack_family": "best_by"})[distances.ENSEMBLE_COLUMNS]


@pytest.mark.parametrize("as_categories", [False, True])
def test_the_ensemble_equals_its_groupby_definition_with_ties_missing_values_and_unsorted_labels(as_categories):
    """Ties in eps (exact first, then the table's order), a NaN eps, a NaN reach, labels out of
    order and a row without a data set (left out, as groupby leaves it), as object columns or
    as the categoricals the timing stage builds."""
    rng = np.random.default_rng(3)
    n = 400
    table = pd.DataFrame(
        {
            "model_hash": rng.choice(["m2", "m1", "m10"], n),
            "dataset": rng.choice(["mnist", "digits"], n).astype(object),
            "norm": rng.choice(["inf", "2"], n),
            "attack": "a",
            "attack_family": rng.choice(["pgd linf", "fmn linf", "fgm linf"], n),
            "kind": rng.choice(["grid", "exact"], n),
            "position": rng.integers(0, 12, n),
            "eps": rng.choice([0.0, 0.1, 0.2, np.inf, np.nan], n),
            "reach": rng.choice([0.3, 0.5, np.nan], n),
        }
    )
    table["eps_lower"] = table["eps"] / 2 + rng.choice([0.0, 0.01], n)  # rows tied in eps differ here: the winner shows
    table.loc[5, "dataset"] = None
    if as_categories:
        table = table.astype({name: "category" for name in ("model_hash", "dataset", "norm", "attack_family", "kind")})
    expected = _ensemble_by_groupby(table.astype({name: object for name in ("model_hash", "dataset", "norm", "attack_family", "kind")}))
    pd.testing.assert_frame_equal(distances.ensemble(table), expected)


def test_the_ensembles_eps_is_looked_up_by_position_and_missing_where_it_has_no_sample():
    """The grid check reads the ensemble's eps at a cell's positions: a position the ensemble
    lacks (no attack of the norm attacked it) is NaN, as a reindex gives it, in any order."""
    best = pd.DataFrame({"model_hash": "m", "norm": "inf", "position": [7, 2, 5], "eps": [0.3, 0.1, np.inf]})
    lookup = distances.best_by_cell(best)[("m", "inf")]
    found = distances.eps_at(lookup, np.array([5, 9, 2, 7, 0]))
    np.testing.assert_array_equal(found, [np.inf, np.nan, 0.1, 0.3, np.nan])
    assert np.isnan(distances.eps_at((np.zeros(0, int), np.zeros(0)), np.array([1, 2]))).all()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny grid with FMN linf beside FGM and PGD: prepare, train, attack, timing."""
    from trashfire.stages import attack, prepare, timing, train

    folder = tmp_path_factory.mktemp("optimality")
    cfg = tiny_config(folder, "attack=[fgm,pgd,fmn]", "defence=[none]", "attack.pgd.values=[0.05,0.1,0.3,1.0]")
    for stage in (prepare, train, attack, timing):
        stage.run(cfg)
    return cfg, Path(cfg.paths.reports)


def test_accuracy_from_the_minimal_eps_equals_each_grid_cells_up_to_the_samples_broken_below(tiny_run):
    _, reports = tiny_run
    check = pd.read_csv(reports / "minimal_eps_check.csv")
    assert set(check["attack_family"]) == {"fgm linf", "pgd linf"} and len(check) == 6
    assert (check["n_above"] == 0).all() and check["agrees"].all()
    np.testing.assert_allclose(check["acc_minimal"], check["acc_grid"] - check["n_below"] / check["n"])
    assert check["n_below"].sum() > 0, "FMN breaks some sample below a grid eps that the grid cell left standing"


def test_minimal_attack_distances_are_its_examples_norms_in_pixel_units(tiny_run):
    cfg, reports = tiny_run
    table = read_table(reports / "attack_distances.parquet")
    experiments = pd.read_csv(reports / "experiments.csv")
    fmn = table[table["attack"] == "fmn"]
    cell = experiments[experiments["attack"] == "fmn"].iloc[0]
    outcomes = np.load(Path(cfg.paths.attacks) / f"{cell['attack_hash']}.npz")
    broken = outcomes["event"] & (outcomes["y_pred_ben"] == outcomes["y_true"])
    expected = outcomes["norm_linf"][broken] * cell["pixel_std"]
    np.testing.assert_allclose(fmn.set_index("position").loc[outcomes["position"][broken], "eps"], expected)
    assert set(fmn["kind"]) == {"exact"} and set(table.loc[table["attack"] == "pgd", "kind"]) == {"grid"}


def test_accuracy_against_queries_falls_with_the_work_and_ends_at_the_cells_accuracy(tiny_run):
    _, reports = tiny_run
    curves = pd.read_csv(reports / "query_curves.csv", dtype={"norm": str})
    experiments = pd.read_csv(reports / "experiments.csv")
    for _, curve in curves.groupby(["model_hash", "attack_family", "eps"]):
        assert (np.diff(curve["acc"].to_numpy()) <= 0).all() and (np.diff(curve["passes"].to_numpy()) > 0).all()
    pgd = curves[(curves["attack"] == "pgd")]
    for eps, curve in pgd.groupby("eps"):
        cell = experiments[(experiments["attack"] == "pgd") & np.isclose(experiments["attack_value"] * experiments["pixel_std"], eps)]
        assert curve["acc"].iloc[-1] == pytest.approx(float(cell["acc_adv"].iloc[0]))
    fmn = curves[curves["attack"] == "fmn"]
    assert set(np.round(fmn["eps"], 6)) == set(np.round(pgd["eps"], 6))  # FMN read at every grid eps of its norm


def test_an_attack_far_from_the_ensembles_best_is_flagged():
    table = pd.DataFrame({"model_hash": "m", "attack_family": ["fgm linf", "fmn linf", "hsj l2"], "n": [100, 100, 5], "optimality": [0.3, 1.0, 0.0]})
    tripped, seen = validity.attack_far_from_best(table, 0.5)
    assert tripped is True and seen.startswith("optimality against the ensemble of its norm: fgm linf 0.30; fmn linf 1.00")
    assert "hsj" not in seen  # 5 samples say too little
    assert validity.attack_far_from_best(table.assign(optimality=[0.6, 1.0, 0.0]), 0.5)[0] is False
    assert validity.attack_far_from_best(None, 0.5)[0] is None
    assert validity.attack_far_from_best(table, 0.5, one_step=["fgm linf"])[0] is False  # a one-step attack is ranked, not judged


def test_a_wide_bracket_at_a_certifiable_eps_is_flagged_and_other_defences_have_no_certificate():
    # sigma 0.3 (standardised), alpha 0.001, n 1000: the largest certifiable radius is
    # 0.3 * Phi^-1(0.001^(1/1000)) = 0.3 * Phi^-1(0.99312) = 0.3 * 2.4633 = 0.739; eps 2.0 is beyond it
    assert validity.certifiable_radius(0.3, 0.001, 1000) == pytest.approx(0.3 * 2.4633, rel=1e-3)
    rows = pd.DataFrame({"model_hash": "g", "defence_value": 0.3, "alpha": 0.001, "n": 1000, "eps": [0.25, 0.75], "eps_standardised": [0.66, 2.0]}).assign(
        certified_acc=[0.8, 0.0], attacked_acc=[0.95, 0.7], bracket=[0.15, 0.7]
    )
    tripped, seen = validity.attacked_above_certified(rows, 0.1)
    assert tripped is True and seen == "eps 0.25: certified 0.80, attacked 0.95 (l2, pixel units; tolerance 0.1)"
    assert validity.attacked_above_certified(rows, 0.2)[0] is False
    assert validity.attacked_above_certified(rows.iloc[:0], 0.1)[1].startswith("not checked: no certificate")


def test_the_ensembles_curve_is_exact_at_the_grid_and_the_trapezoids_between():
    # one exact threshold 0.15, one interval (0.1, 0.2], one never broken, one wrong at the first query
    lower, upper = np.array([0.15, 0.1, 0.3, 0.0]), np.array([0.15, 0.2, np.inf, 0.0])
    acc = optimality.standing_share(lower, upper, np.array([0.0, 0.1, 0.15, 0.2, 0.3]))
    np.testing.assert_allclose(acc, [3 / 4, 3 / 4, (0 + 0.5 + 1) / 4, 1 / 4, 1 / 4])
