"""The worst case per sample (trashfire.tables.worst_case): over a model cell's attacks at one
norm and eps, a sample is robust only if no attack broke it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trashfire.core.schema import WORST_CASE, WORST_CASE_COLUMNS, Outcomes
from trashfire.tables.experiments import with_worst_cases
from trashfire.tables.worst_case import measured, worst_case_rows


def outcomes(y_pred_adv, y_pred_ben=None, position=None, y_true=None) -> Outcomes:
    y_pred_adv = np.asarray(y_pred_adv)
    n = len(y_pred_adv)
    y_true = np.zeros(n, int) if y_true is None else np.asarray(y_true)
    zeros = np.zeros(n)
    return Outcomes(
        y_true=y_true,
        y_pred_ben=y_true.copy() if y_pred_ben is None else np.asarray(y_pred_ben),
        y_pred_adv=y_pred_adv,
        margin_ben=zeros,
        failure_step=zeros.astype(int),
        event=y_pred_adv != y_true,
        queries=zeros,
        gradients=zeros,
        flops=zeros,
        duration_process=zeros,
        duration_wall=zeros,
        duration_process_shared=zeros,
        duration_wall_shared=zeros,
        position=None if position is None else np.asarray(position),
    )


def row(attack, attack_hash, eps=0.1, model_hash="m1", norm="inf", param="eps", acc_adv=None):
    return {
        "dataset": "digits",
        "pretrained_on": None,
        "seed": 0,
        "model": "cnn",
        "depth": 3,
        "epochs": 1,
        "lr": 0.1,
        "defence": "none",
        "defence_param": "",
        "defence_value": 0.0,
        "attack": attack,
        "norm": norm,
        "attack_param": param,
        "attack_value": eps,
        "n_train": 10,
        "n_attack": 6,
        "n_classes": 10,
        "acc_ben": 0.9,
        "acc_ben_attack_subset": 5 / 6,
        "attack_units": "pixel",
        "acc_adv": acc_adv,
        "model_hash": model_hash,
        "train_hash": "t1",
        "attack_hash": attack_hash,
    }


# six samples, sample 5 wrong before any attack (true label 0, predicted 1)
BEFORE = [0, 0, 0, 0, 0, 1]
FGM = outcomes([1, 0, 0, 0, 0, 1], y_pred_ben=BEFORE)  # breaks sample 0
PGD = outcomes([0, 1, 1, 0, 0, 1], y_pred_ben=BEFORE)  # breaks 1 and 2
SQUARE = outcomes([0, 1, 0, 0, 2, 1], y_pred_ben=BEFORE)  # breaks 1 and 4


def test_the_worst_case_is_the_per_sample_minimum_over_the_attacks():
    table = pd.DataFrame([row("fgm", "a"), row("pgd", "b"), row("square", "c")])
    (worst,) = worst_case_rows(table, {"a": FGM, "b": PGD, "c": SQUARE}).to_dict("records")
    robust = np.array([0, 0, 0, 1, 0, 0], bool)  # only sample 3 stands against all three
    assert worst["attack"] == WORST_CASE and worst["n_attack"] == 6
    assert worst["acc_adv"] == pytest.approx(robust.mean()) and worst["n_survived"] == 1
    assert (worst["n_misclassified_before"], worst["n_broken"], worst["n_failed"]) == (1, 4, 5)
    # PGD and Square (3 of 6 robust each) tie below FGM (4 of 6): both carried it
    assert worst["carried_by"] == "pgd, square" and worst["attacks"] == "fgm, pgd, square"
    assert worst["n_beyond_carrier"] == 2  # PGD left samples 0 and 4 standing, FGM and Square broke them
    assert (worst["model_hash"], worst["norm"], worst["attack_value"], worst["attack_param"]) == ("m1", "inf", 0.1, "eps")


def test_samples_are_matched_by_position_and_only_those_every_attack_attacked():
    shuffled = outcomes([0, 0, 1, 0], position=[3, 2, 1, 0])  # breaks position 1
    subset = outcomes([1, 0, 0], position=[0, 1, 4])  # breaks position 0; never attacked 2 or 3
    table = pd.DataFrame([row("fgm", "a"), row("pgd", "b")])
    (worst,) = worst_case_rows(table, {"a": shuffled, "b": subset}).to_dict("records")
    assert worst["n_attack"] == 2 and worst["n_survived"] == 0  # positions 0 and 1, each broken by one attack


def test_cells_get_a_worst_case_only_where_two_eps_attacks_share_norm_and_eps():
    table = pd.DataFrame(
        [
            row("fgm", "a"),
            row("pgd", "b"),
            row("pgd", "c", eps=0.2),  # alone at its eps
            row("pgd", "d", norm="2"),  # alone at its norm
            row("deepfool", "e", param="nb_grads"),  # not eps-bounded
            row("fgm", "f", model_hash="m2"),
            row("pgd", "g", model_hash="m2"),
        ]
    )
    arrays = dict.fromkeys("abcdefg", FGM)
    worst = worst_case_rows(table, arrays)
    assert sorted(worst["model_hash"]) == ["m1", "m2"] and set(worst["attack_value"]) == {0.1}
    assert worst.loc[worst["model_hash"] == "m1", "attacks"].item() == "fgm, pgd"


def test_experiments_keep_the_attacks_rows_first_and_measured_drops_the_worst_cases():
    table = pd.DataFrame([row("fgm", "a", acc_adv=4 / 6), row("pgd", "b", acc_adv=3 / 6)])
    written = with_worst_cases(table, {"a": FGM, "b": PGD})
    assert list(written["attack"]) == ["fgm", "pgd", WORST_CASE]
    assert written["acc_adv"].tolist() == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    assert measured(written)["attack_hash"].tolist() == ["a", "b"]
    alone = with_worst_cases(table.iloc[:1], {"a": FGM})  # one attack: no row added, its columns empty
    assert alone["attack"].tolist() == ["fgm"] and alone[list(WORST_CASE_COLUMNS)].isna().all(axis=None)


def test_a_card_states_what_measured_each_robust_accuracy():
    from types import SimpleNamespace

    from trashfire.tables.experiments import evaluation

    standard = SimpleNamespace(
        config={"version": "standard"}, attack="autoattack", n_attack=100, attack_param="eps", attack_value=0.1, attack_units="pixel", norm="inf"
    )
    assert evaluation(standard) == "AutoAttack standard, 100 images, eps 0.1 (pixel, linf)"
    pgd = SimpleNamespace(config={}, attack="pgd", n_attack=20, attack_param="eps", attack_value=0.05, attack_units="standardised", norm="2")
    assert evaluation(pgd) == "pgd, 20 images, eps 0.05 (standardised, l2)"
    table = pd.DataFrame([row("fgm", "a"), row("pgd", "b")])
    (worst,) = worst_case_rows(table, {"a": FGM, "b": PGD}).to_dict("records")
    assert worst["evaluation"] == "worst case per sample over fgm, pgd, 6 images, eps 0.1 (pixel, linf)"


def test_a_sample_wrong_before_counts_as_misclassified_not_as_surviving():
    # sample 0 is wrong at the first query but right after both attacks (a randomised decision)
    wrong_first = outcomes([0, 0, 1], y_pred_ben=[1, 0, 0])
    table = pd.DataFrame([row("fgm", "a"), row("pgd", "b")])
    (worst,) = worst_case_rows(table, {"a": wrong_first, "b": outcomes([0, 0, 0], y_pred_ben=[1, 0, 0])}).to_dict("records")
    assert (worst["n_misclassified_before"], worst["n_broken"], worst["n_survived"]) == (1, 1, 1)
    assert worst["n_misclassified_before"] + worst["n_broken"] + worst["n_survived"] == worst["n_attack"]


def test_an_attack_twice_at_one_eps_is_named_once_and_the_carrier_is_the_strongest_cell():
    table = pd.DataFrame([row("pgd", "a"), row("pgd", "b"), row("fgm", "c")])
    weak, strong = outcomes([0, 0, 0, 0]), outcomes([1, 1, 0, 0])
    (worst,) = worst_case_rows(table, {"a": weak, "b": strong, "c": outcomes([0, 0, 1, 0])}).to_dict("records")
    assert worst["attacks"] == "fgm, pgd" and worst["carried_by"] == "pgd"
    assert worst["n_beyond_carrier"] == 1 and worst["n_survived"] == 1  # the strong PGD cell left sample 2, FGM broke it


def test_attacks_that_share_no_sample_get_no_worst_case():
    table = pd.DataFrame([row("fgm", "a"), row("pgd", "b")])
    apart = {"a": outcomes([0, 0], position=[0, 1]), "b": outcomes([0, 0], position=[2, 3])}
    assert worst_case_rows(table, apart).empty


def test_only_a_composite_with_square_counts_what_square_broke():
    from trashfire.tables.experiments import runs_square

    square = {"version": "standard", "kwargs": {"components": {"apgd_ce": {}, "square": {}}}}
    assert runs_square(square) and runs_square(square | {"version": "custom"})
    assert not runs_square({"version": "rand", "kwargs": {}}) and not runs_square({"kwargs": {"components": {"apgd_ce": {}}}})
    assert not runs_square({"name": "pgd", "kwargs": {}})
