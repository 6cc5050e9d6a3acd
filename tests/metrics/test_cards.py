"""Model cards: each model cell carries timing's `degenerate` flag."""

import json

import numpy as np
import pandas as pd
import pytest

from trashfire.core import schema
from trashfire.metrics import cards
from trashfire.metrics.registry import curve_metric_names


def experiments(flags: list) -> pd.DataFrame:
    """One trained cell with a model cell per flag; every column a card reads, with dummy values."""
    base = {column: 0.0 for column in schema.CARD_TRAINING + schema.CARD_TIMES + schema.CARD_ATTACK}
    rows = [
        base
        | {
            "train_hash": "t0",
            "model_hash": f"m{i}",
            "defence": f"d{i}",
            "defence_param": "",
            "defence_value": 0.0,
            "acc_ben": 0.1 if flag is True else 0.9,
            "t_predict": 1e-4,
            "degenerate": flag,
        }
        for i, flag in enumerate(flags)
    ]
    return pd.DataFrame(rows)


def written_cells(tmp_path, table: pd.DataFrame) -> dict[str, dict]:
    empty = {
        name: pd.DataFrame(columns=["model_hash", *columns])
        for name, columns in (
            ("trash", schema.CARD_FAMILY),
            ("robustness", schema.card_robustness(curve_metric_names())),
            ("brittle", ["brittle_score", "brittle_ri"]),
        )
    }
    [path] = cards.write_cards(tmp_path, table, empty["trash"], empty["robustness"], empty["brittle"])
    return {cell["model_hash"]: cell for cell in json.loads(path.read_text())["model_cells"]}


def test_each_model_cell_carries_its_degenerate_flag(tmp_path):
    cells = written_cells(tmp_path, experiments([True, False, np.nan]))
    assert [cells[h]["degenerate"] for h in ("m0", "m1", "m2")] == [True, False, False]  # NaN is no flag, not bool(NaN)


def test_cards_from_experiments_without_the_flag_say_not_degenerate(tmp_path):
    cells = written_cells(tmp_path, experiments([False, False]).drop(columns="degenerate"))
    assert all(cell["degenerate"] is False for cell in cells.values())


# A whole card, written by the aggregate stage to reports/cards/<train_hash>.json: one trained
# cell (t0) with two model cells, a jpeg defence (mb) and no defence (ma), listed in the
# experiments table in that order, each attacked once with PGD.

TRAINING = {"dataset": "mnist", "pretrained_on": "none", "seed": 0, "model": "cnn", "depth": 2, "epochs": 3, "lr": 0.01, "n_train": 1000}
TIMES = {"clock": "process", "t_train": 0.002, "t_train_flops": 1.5e6, "t_train_process": 0.002, "t_train_wall": 0.001}
PGD = {
    "attack": "pgd",
    "norm": "linf",
    "attack_family": "pgd_linf",
    "attack_param": "eps",
    "attack_value": 0.03,
    "attack_units": "pixel",
    "attack_value_standardised": 0.1,
    "n_attack": 100,
    "acc_ben_attack_subset": 0.9,
    "acc_adv": 0.2,
    "evaluation": "pgd, 100 images, eps 0.03 (pixel, linf)",
    "t_attack": 0.5,
    "t_attack_process": 0.5,
    "t_attack_wall": 0.25,
    "attack_hash": "a1",
}
JPEG = {"model_hash": "mb", "defence": "jpeg", "defence_param": "quality", "defence_value": 75.0, "acc_ben": 0.9, "t_predict": 1e-4, "degenerate": False}
NONE = {"model_hash": "ma", "defence": "none", "defence_param": "", "defence_value": np.nan, "acc_ben": 0.1, "t_predict": 2e-5, "degenerate": True}


def card_tables() -> dict[str, pd.DataFrame]:
    """The aggregate stage's tables for t0, plus rows of another trained cell (t9, model cell mz)
    that t0's card must not pick up."""
    trained = TRAINING | TIMES | {"train_hash": "t0", "t_train_source": np.nan}  # measured: no source
    other = {**TRAINING, **TIMES, **PGD, "train_hash": "t9", "t_train_source": np.nan, "model_hash": "mz"}
    other |= {"defence": "none", "defence_param": "", "defence_value": np.nan, "acc_ben": 0.5, "t_predict": 1.0, "degenerate": False}
    experiments = pd.DataFrame([trained | PGD | JPEG, trained | PGD | NONE, other])
    # the trash table of an older run: no FLOPs column, so the card says null for it
    trash = pd.DataFrame(
        [
            {"model_hash": h, "attack_family": "pgd_linf", "E_T": e_t, "trash_adv": 2.0, "trash_ben": 10.0, "f_adv": 0.8, "f_ben": 0.1}
            | {"E_Q": 20.0, "flops_per_query": 3e6, "trash_adv_process": 2.0, "trash_adv_wall": 1.0}
            for h, e_t in (("mb", 0.5), ("ma", 0.25), ("mz", 9.0))
        ]
    )
    robustness = pd.DataFrame(
        [
            {"model_hash": h, "attack_family": "pgd_linf", "tau": 0.25, "evp": evp, "auc_R": r, "auc_S": 0.5, "auc_units": "pixel", "eps0": 0.0, "eps1": 0.1}
            for h, evp, r in (("mb", 0.75, 0.6), ("ma", np.nan, np.nan), ("mz", 1.0, 1.0))
        ]
    )
    brittle = pd.DataFrame({"model_hash": ["mb", "mz"], "brittle_score": [0.4, 0.9], "brittle_ri": [12.5, 90.0]})  # none for ma
    unchecked = "not checked: the experiments table does not say whether pgd is black-box (rerun the attack stage)"
    flags = pd.DataFrame(
        [
            {"model_hash": "mb", "flags": "non_monotone", "non_monotone": True, "non_monotone_detail": "acc_adv rises 0.2 -> 0.3 at eps 0.05"}
            | {"black_box_stronger": None, "black_box_stronger_detail": unchecked, "gradients_masked": False, "gradients_masked_detail": "share 0.01"}
            | {"randomised": False, "randomised_detail": "deterministic", "largest_eps_not_breaking": None, "largest_eps_not_breaking_detail": unchecked},
            {"model_hash": "ma", "flags": "", "non_monotone": False, "non_monotone_detail": "monotone"}
            | {"black_box_stronger": None, "black_box_stronger_detail": unchecked, "gradients_masked": False, "gradients_masked_detail": "share 0.0"}
            | {"randomised": False, "randomised_detail": "deterministic", "largest_eps_not_breaking": None, "largest_eps_not_breaking_detail": unchecked},
        ]
    )
    worst_case = pd.DataFrame(
        [
            {"model_hash": h, "norm": "inf", "attack_value": 0.03, "attack_units": "pixel", "acc_adv": 0.15, "carried_by": "pgd", "n_beyond_carrier": 2.0}
            for h in ("mb", "mz")
        ]
    ).assign(evaluation="worst case per sample over fgm, pgd, 100 images, eps 0.03 (pixel, linf)")
    return {"experiments": experiments, "trash": trash, "robustness": robustness, "brittle": brittle, "flags": flags, "worst_case": worst_case}


# flags a validity.csv from before them lacks: null, as flags this run cannot check
NEWER_FLAGS = {name: {"tripped": None, "seen": None} for name in schema.VALIDITY_FLAGS[schema.VALIDITY_FLAGS.index("softmax_output") :]}


def test_card_holds_the_training_its_times_and_each_model_cell_in_grid_order(tmp_path):
    folder = tmp_path / "reports" / "cards"  # not there yet: the stage makes it
    tables = card_tables()
    cards.write_cards(folder, **tables)
    card = json.loads((folder / "t0.json").read_text())
    pgd = dict(PGD)  # every attack column of the row reaches the card as it is
    unchecked = {"tripped": None, "seen": "not checked: the experiments table does not say whether pgd is black-box (rerun the attack stage)"}
    assert card == {
        "train_hash": "t0",
        "training": {"dataset": "mnist", "pretrained_on": "none", "seed": 0, "model": "cnn", "depth": 2, "epochs": 3, "lr": 0.01, "n_train": 1000},
        "times_per_sample": {"clock": "process", "t_train": 0.002, "t_train_flops": 1.5e6, "t_train_process": 0.002, "t_train_wall": 0.001},
        # no t_train_source: our train stage measured it
        "provenance": {"trained_by": "trashfire", "t_train_source": "measured", "t_train": "measured by trashfire's train stage on both clocks"},
        "model_cells": [  # in the experiments table's order (mb before ma), not sorted by hash
            {
                "model_hash": "mb",
                "defence": {"defence": "jpeg", "defence_param": "quality", "defence_value": 75.0},
                "acc_ben": 0.9,
                "degenerate": False,
                "t_predict": 1e-4,
                "brittle_score": 0.4,
                "brittle_ri_percent": 12.5,
                "attacks": [pgd],
                "worst_case": [  # its robust accuracy beside what measured it; the count an int
                    {"norm": "inf", "attack_value": 0.03, "attack_units": "pixel", "acc_adv": 0.15}
                    | {"evaluation": "worst case per sample over fgm, pgd, 100 images, eps 0.03 (pixel, linf)", "carried_by": "pgd", "n_beyond_carrier": 2}
                ],
                "survival_and_trash": [
                    {"attack_family": "pgd_linf", "E_T": 0.5, "trash_adv": 2.0, "trash_ben": 10.0, "f_adv": 0.8, "f_ben": 0.1}
                    | {"E_Q": 20.0, "flops_per_query": 3e6, "trash_adv_flops": None, "trash_adv_process": 2.0, "trash_adv_wall": 1.0}
                ],
                "evp_and_auc": [
                    {"attack_family": "pgd_linf", "tau": 0.25, "evp": 0.75, "auc_R": 0.6, "auc_S": 0.5, "auc_units": "pixel", "eps0": 0.0, "eps1": 0.1}
                ],
                "validity": {
                    "tripped": "non_monotone",
                    "non_monotone": {"tripped": True, "seen": "acc_adv rises 0.2 -> 0.3 at eps 0.05"},
                    "black_box_stronger": unchecked,
                    "gradients_masked": {"tripped": False, "seen": "share 0.01"},
                    "randomised": {"tripped": False, "seen": "deterministic"},
                    "largest_eps_not_breaking": unchecked,
                    **NEWER_FLAGS,
                },
            },
            {
                "model_hash": "ma",
                "defence": {"defence": "none", "defence_param": "", "defence_value": None},  # NaN is null in JSON
                "acc_ben": 0.1,
                "degenerate": True,
                "t_predict": 2e-5,
                "brittle_score": None,  # no brittle row for ma
                "brittle_ri_percent": None,
                "attacks": [pgd],
                "worst_case": [],  # none at ma
                "survival_and_trash": [
                    {"attack_family": "pgd_linf", "E_T": 0.25, "trash_adv": 2.0, "trash_ben": 10.0, "f_adv": 0.8, "f_ben": 0.1}
                    | {"E_Q": 20.0, "flops_per_query": 3e6, "trash_adv_flops": None, "trash_adv_process": 2.0, "trash_adv_wall": 1.0}
                ],
                "evp_and_auc": [
                    {"attack_family": "pgd_linf", "tau": 0.25, "evp": None, "auc_R": None, "auc_S": 0.5, "auc_units": "pixel", "eps0": 0.0, "eps1": 0.1}
                ],
                "validity": {
                    "tripped": "none",  # no flag tripped: "none", not an empty string
                    "non_monotone": {"tripped": False, "seen": "monotone"},
                    "black_box_stronger": unchecked,
                    "gradients_masked": {"tripped": False, "seen": "share 0.0"},
                    "randomised": {"tripped": False, "seen": "deterministic"},
                    "largest_eps_not_breaking": unchecked,
                    **NEWER_FLAGS,
                },
            },
        ],
    }


def test_cards_are_written_per_trained_cell_and_stale_ones_removed(tmp_path):
    (tmp_path / "gone.json").write_text("{}")  # the card of a cell no longer in the grid
    written = cards.write_cards(tmp_path, **card_tables())
    assert sorted(p.name for p in written) == sorted(p.name for p in tmp_path.iterdir()) == ["t0.json", "t9.json"]


def external(source) -> pd.DataFrame:
    """An imported model (one attack row, so one row in experiments) with its t_train_source."""
    row = TRAINING | TIMES | PGD | JPEG | {"train_hash": "t1", "epochs": np.nan, "lr": np.nan, "t_train_source": source}
    return pd.DataFrame([row])


@pytest.mark.parametrize(
    ("source", "says"),
    [
        # a path with a colon in it (a timestamp) is shown whole: the kind is what precedes the first colon
        ("log:logs/run-2026-11-24T08:00.json", "supplied, not measured: from the training log logs/run-2026-11-24T08:00.json"),
        ("log:logs/run.json; flops estimated", "supplied, not measured: from the training log logs/run.json; flops estimated"),
        ("config", "supplied, not measured: from the config (model.<name>.t_train)"),
        ("config; flops estimated", "supplied, not measured: from the config (model.<name>.t_train)"),
    ],
)
def test_card_of_an_imported_model_says_where_its_t_train_comes_from(source, says):
    empty = {name: frame.iloc[:0] for name, frame in card_tables().items() if name != "experiments"}
    card = cards.card("t1", external(source), **empty)
    assert card["provenance"] == {
        "trained_by": "not trashfire: an external model imported from its checkpoint (model.<name>.checkpoint) and evaluated as it is; its epochs and lr are unknown",
        "t_train_source": source,  # as recorded, for readers that parse it
        "t_train": says,
    }
    assert card["training"]["epochs"] is None and card["training"]["lr"] is None  # unknown: null


@pytest.mark.parametrize("source", [np.nan, "", None], ids=["nan", "empty", "none"])
def test_a_model_without_a_t_train_source_was_measured_by_trashfire(source):
    # NaN: a trained cell in a table that also holds imported ones; "" and None: no source recorded
    assert cards.provenance(external(source).iloc[0]) == {
        "trained_by": "trashfire",
        "t_train_source": "measured",
        "t_train": "measured by trashfire's train stage on both clocks",
    }


def test_card_json_has_null_not_nan_for_a_missing_float32_value(tmp_path):
    # a float32 NaN is no Python float: it must still become null, or the file is not valid JSON
    tables = card_tables()
    tables["brittle"] = tables["brittle"].astype({"brittle_score": np.float32, "brittle_ri": np.float32})
    tables["brittle"].loc[0, "brittle_score"] = np.nan
    cards.write_cards(tmp_path, **tables)
    text = (tmp_path / "t0.json").read_text()
    assert "NaN" not in text
    cell = json.loads(text)["model_cells"][0]
    assert (cell["brittle_score"], cell["brittle_ri_percent"]) == (None, 12.5)  # 12.5 is exact in float32


def attack_rows(cells: list[tuple[str, str, str, float, float]]) -> pd.DataFrame:
    """The undefended model's attack cells: (defence, attack, norm, eps in pixels, acc_adv)."""
    return pd.DataFrame(
        [{"defence": d, "attack": a, "norm": n, "attack_units": "pixel", "attack_value": eps, "acc_ben": 0.95, "acc_adv": acc} for d, a, n, eps, acc in cells]
    )


def test_the_publishers_robust_accuracy_stands_beside_our_lowest_at_its_norm_and_eps():
    theirs = {"clean_acc": 0.87, "robust_acc": 0.49, "attack": "autoattack", "norm": "inf", "eps": 8 / 255, "source": "x"}
    rows = attack_rows(
        [
            ("none", "pgd", "inf", 0.0313725, 0.55),
            ("none", "autoattack", "inf", 0.0313725, 0.51),
            ("none", "pgd", "2", 0.0313725, 0.20),  # another norm
            ("none", "pgd", "inf", 0.1, 0.05),  # another eps
            ("fsq", "pgd", "inf", 0.0313725, 0.01),  # a defended model cell, not the publisher's model
        ]
    )
    beside = cards.beside_reported(rows, theirs)
    assert beside["theirs"] == theirs
    assert beside["ours"] == {"clean_acc": 0.95, "robust_acc": 0.51, "robust_attack": "autoattack inf"}
    elsewhere = cards.beside_reported(rows, theirs | {"eps": 0.5})
    assert elsewhere["ours"]["robust_acc"] is None and elsewhere["ours"]["clean_acc"] == 0.95
