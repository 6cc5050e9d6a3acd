"""The per-sample survival data set from hand-made attack records and outcome arrays (the
attack stage's contract): one row per attacked sample, durations from the chosen clock, the
policies, the covariates, old-format arrays, and the timing stage that writes both tables."""

import logging
import time

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, tiny_overrides
from trashfire.attacks.campaign import attack_record_path, outcomes_path
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.core.grid import attack_cells
from trashfire.core.records import write_json, write_npz
from trashfire.stages import timing
from trashfire.survival.data import ID_COLUMNS, LABEL_COLUMNS, diagnose, drop_degenerate, survival_table
from trashfire.tables import experiments as experiment_tables


def hand_made_record(attack, value, epochs, n_attack, t_attack, defence="none", attack_hash=None):
    return {
        "attack_hash": attack_hash or f"{attack}-{value}",
        "model_hash": f"m{epochs}",
        "train_hash": f"t{epochs}",
        "dataset": "digits",
        "pretrained_on": None,
        "seed": 0,
        "model": "resnet18",
        "depth": 18,
        "epochs": epochs,
        "lr": 0.05,
        "n_train": 320,
        "defence": defence,
        "defence_param": None,
        "defence_value": 0.0,
        "attack": attack,
        "norm": "inf",
        "attack_param": "eps",
        "attack_value": value,
        "n_attack": n_attack,
        "acc_ben": 0.9,
        "acc_adv": 0.5,
        "t_train_process": 0.5,
        "t_train_wall": 0.4,
        "t_predict_process": 0.001,
        "t_predict_wall": 0.002,
        "t_attack_process": t_attack,
        "t_attack_wall": 2 * t_attack,
        "config": {"values": [value]},
    }


def hand_made_outcomes(y_true, y_ben, y_adv, margin, duration, event, failure_step):
    """The arrays of docs/design.md's per-sample failure clock; the wall clock reads twice the process clock."""
    n = len(y_true)
    duration = np.array(duration, dtype=float)
    return {
        "position": np.arange(n),
        "y_true": np.array(y_true),
        "y_pred_ben": np.array(y_ben),
        "y_pred_adv": np.array(y_adv),
        **{f"norm_{p}": np.zeros(n) for p in ("l0", "l1", "l2", "linf")},
        "margin_ben": np.array(margin, dtype=float),
        "failure_step": np.array(failure_step, dtype=np.int64),
        # a failure at step s took s + 1 queries and s gradients; a hand-made model of 100 FLOPs a pass
        "queries": np.array(failure_step, dtype=np.int64) + 1,
        "gradients": np.array(failure_step, dtype=np.int64),
        "flops": 100 * (2 * np.array(failure_step, dtype=np.int64) + 1),
        "duration_process": duration,
        "duration_wall": 2 * duration,
        "duration_process_shared": duration,
        "duration_wall_shared": 2 * duration,
        "event": np.array(event, dtype=bool),
    }


FGM_MARGINS = [2.0, 0.5, 3.0, 0.1, -1.5]
PGD_MARGINS = [1.0, 2.0, 3.0, 4.0]
FGM_DURATIONS = [0.02, 0.015, 0.02, 0.005, 0.001]


def cells():
    """FGM: two survive, two broken by the attack, the last wrong before it (a failure at the
    first query, step 0); PGD: all four survive their 10-step budget."""
    fgm = hand_made_outcomes([0, 1, 2, 3, 4], [0, 1, 2, 3, 9], [0, 7, 2, 8, 9], FGM_MARGINS, FGM_DURATIONS, [0, 1, 0, 1, 1], [1, 1, 1, 1, 0])
    pgd = hand_made_outcomes([5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], PGD_MARGINS, [0.03] * 4, [0] * 4, [10] * 4)
    records = [hand_made_record("fgm", 0.1, 1, 5, np.mean(FGM_DURATIONS)), hand_made_record("pgd", 0.3, 2, 4, 0.03)]
    outcomes = {"fgm-0.1": fgm, "pgd-0.3": pgd}
    rows = [experiment_tables.experiment_row(record, outcomes[record["attack_hash"]], n_classes=10) for record in records]
    return experiment_tables.with_clock(pd.DataFrame(rows), "process"), outcomes


@pytest.fixture
def two_cells():
    return cells()


@pytest.fixture
def survival_log(caplog):
    logging.getLogger("trashfire.survival.data").addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger="trashfire.survival.data"):
        yield caplog


def rows_of(table):
    return list(map(tuple, table[["attack_hash", "duration", "event", "weight"]].to_numpy().tolist()))


def test_one_row_per_attacked_sample_on_the_process_clock(two_cells, survival_log):
    table = survival_table(*two_cells)
    assert rows_of(table) == [
        ("fgm-0.1", 0.02, 0, 1),
        ("fgm-0.1", 0.015, 1, 1),
        ("fgm-0.1", 0.02, 0, 1),
        ("fgm-0.1", 0.005, 1, 1),
        ("fgm-0.1", 0.001, 1, 1),  # wrong before the attack: a failure at its share of the first query
        *[("pgd-0.3", 0.03, 0, 1)] * 4,
    ]
    assert list(table.columns[: len(ID_COLUMNS)]) == ID_COLUMNS
    assert table["event"].dtype == np.int64 and table["weight"].dtype == np.int64
    assert table[LABEL_COLUMNS].drop_duplicates().to_dict("records") == [
        {"attack_hash": "fgm-0.1", "train_hash": "t1", "model_hash": "m1", "attack_family": "fgm linf", "defence": "none", "dataset": "digits"},
        {"attack_hash": "pgd-0.3", "train_hash": "t2", "model_hash": "m2", "attack_family": "pgd linf", "defence": "none", "dataset": "digits"},
    ]  # the family's label as every table spells it (schema.attack_family); its dummy is an identifier
    # beside the intercept epochs spans the two cells and margin the samples; the rest is constant or collinear
    assert list(table.columns[len(ID_COLUMNS) :]) == ["epochs", "margin"]
    # each sample's compute beside its duration: a failure at step s took s + 1 queries and s gradients
    assert table["queries"].tolist() == [2, 2, 2, 2, 1, *[11] * 4] and table["gradients"].tolist() == [1, 1, 1, 1, 0, *[10] * 4]
    assert (table["flops"] == 100 * (table["queries"] + table["gradients"])).all()
    assert table["margin"].tolist() == FGM_MARGINS + PGD_MARGINS
    assert table["epochs"].tolist() == [1.0] * 5 + [2.0] * 4
    assert "dropping covariate depth: it takes one value" in survival_log.text
    assert "dropping covariate attack_pgd_inf: collinear with intercept, epochs, margin" in survival_log.text


def test_durations_follow_the_configured_clock(two_cells):
    wall = survival_table(*two_cells, clock="wall")
    assert wall["duration"].tolist() == pytest.approx([2 * d for d in FGM_DURATIONS] + [0.06] * 4)
    compute = survival_table(*two_cells, clock="flops")  # the compute clock: each sample's FLOPs, exactly
    assert compute["duration"].tolist() == [300.0] * 4 + [100.0] + [2100.0] * 4
    with pytest.raises(ValueError, match="clock"):
        survival_table(*two_cells, clock="gpu")


def test_policies_for_samples_misclassified_before_the_attack(two_cells, survival_log):
    first_query = survival_table(*two_cells, misclassified_before_attack="first_query")
    assert "1 of 9 attacked samples, in 1 of 2 attack cells, misclassified before the attack: kept as failures at the first query" in survival_log.text
    dropped = survival_table(*two_cells, misclassified_before_attack="drop")
    assert "1 of 9 attacked samples, in 1 of 2 attack cells, misclassified before the attack: dropped (policy drop)" in survival_log.text
    assert (len(first_query), int(first_query["event"].sum())) == (9, 3)
    assert (len(dropped), int(dropped["event"].sum())) == (8, 2)
    assert rows_of(dropped) == rows_of(first_query)[:4] + rows_of(first_query)[5:]
    assert -1.5 not in dropped["margin"].tolist()
    with pytest.raises(ValueError, match="first_query"):
        survival_table(*two_cells, misclassified_before_attack="attack_time")  # a policy that no longer exists


def test_durations_below_the_clock_resolution(two_cells, survival_log):
    experiments, outcomes = two_cells
    outcomes["pgd-0.3"]["duration_process"][:2] = 0.0
    half_min = survival_table(experiments, outcomes)
    assert half_min["duration"].tolist()[5:] == [0.0005, 0.0005, 0.03, 0.03]  # half the smallest measured
    assert "2 rows (2 samples) timed at <= 0 s" in survival_log.text
    dropped = survival_table(experiments, outcomes, nonpositive_durations="drop")
    assert rows_of(dropped)[5:] == [("pgd-0.3", 0.03, 0, 1)] * 2


def test_all_censored_data_is_a_reported_diagnostic(two_cells):
    experiments, outcomes = two_cells
    for arrays in outcomes.values():
        arrays["event"][:] = False
        arrays["y_pred_ben"][:] = arrays["y_true"]
    with pytest.raises(DataError, match="all 9 attacked samples survived"):
        diagnose(survival_table(experiments, outcomes))
    diagnose(survival_table(*cells()))  # fit for a model


def test_experiment_rows_count_events_and_censored_samples(two_cells):
    experiments = two_cells[0].set_index("attack_hash")
    counts = ["n_failed", "n_misclassified_before", "n_broken", "n_survived", "n_events", "n_censored"]
    assert experiments.loc["fgm-0.1", counts].tolist() == [3, 1, 2, 2, 3, 2]
    assert experiments.loc["pgd-0.3", counts].tolist() == [0, 0, 0, 4, 0, 4]
    assert experiments["event_share"].tolist() == [0.6, 0.0]
    assert experiments.loc["fgm-0.1", "median_event_step"] == 1.0 and np.isnan(experiments.loc["pgd-0.3", "median_event_step"])


def test_arrays_from_before_per_sample_clocks_are_one_clear_line(tmp_path, two_cells):
    old = {k: v for k, v in two_cells[1]["fgm-0.1"].items() if k in ("position", "y_true", "y_pred_ben", "y_pred_adv")}
    write_npz(outcomes_path(tmp_path, "old"), **old)
    with pytest.raises(DataError) as error:
        experiment_tables.read_outcomes(tmp_path, "old")
    message = str(error.value)
    assert "\n" not in message and str(outcomes_path(tmp_path, "old")) in message
    assert "margin_ben" in message and "duration_process" in message and "rerun the attack stage" in message
    with pytest.raises(DataError, match="attack cell fgm-0.1: .*rerun the attack stage"):
        survival_table(two_cells[0], {"fgm-0.1": old, "pgd-0.3": two_cells[1]["pgd-0.3"]})


def test_rank_test_stays_fast_on_a_per_sample_table():
    """~25k samples of 600 cells with a per-sample margin: the collinearity test must not
    dominate the timing stage."""
    rng = np.random.default_rng(0)
    cell = rng.integers(0, 600, 25_000)
    per_cell = pd.DataFrame(rng.normal(size=(600, 12)), columns=[f"c{i}" for i in range(12)]).assign(c11=lambda d: d.c0 + d.c1)
    design = per_cell.iloc[cell].reset_index(drop=True).assign(margin=rng.normal(size=len(cell)))
    start = time.perf_counter()
    kept = drop_degenerate(design)
    assert time.perf_counter() - start < 2.0
    assert "c11" not in kept and "margin" in kept and len(kept.columns) == 12


# --- the timing stage on hand-made records ---------------------------------------------------


@pytest.fixture
def recorded_grid(tmp_path):
    """Hand-made records and arrays at the hashes of a small grid's attack cells."""
    cfg = validate(compose(tiny_overrides(tmp_path, "defence=[none,conf]"), conf=ROOT / "conf"))
    rng = np.random.default_rng(0)
    for number, cell in enumerate(attack_cells(cfg)):
        n = 6
        record = hand_made_record(cell.attack, cell.value, 1 + number % 2, n, 0.01, cell.model.defence["name"], cell.hash)
        record |= {"norm": cell.norm, "defence_value": cell.model.defence.get("value") or 0.0}
        y_true = rng.integers(0, 10, n)
        event = rng.random(n) < 0.5
        outcomes = hand_made_outcomes(
            y_true, y_true, np.where(event, (y_true + 1) % 10, y_true), rng.normal(size=n), rng.uniform(0.005, 0.015, n), event, np.ones(n)
        )
        write_json(attack_record_path(cfg.paths.attacks, cell.hash), record)
        write_npz(outcomes_path(cfg.paths.attacks, cell.hash), **outcomes)
    return cfg


def test_timing_writes_one_row_per_sample_and_counts_per_cell(recorded_grid, tmp_path):
    experiments, survival = timing.run(recorded_grid)
    n_cells = len(attack_cells(recorded_grid))
    assert len(experiments) == n_cells and len(survival) == 6 * n_cells
    written = pd.read_csv(tmp_path / "reports" / "survival_data.csv")
    assert list(written.columns[: len(ID_COLUMNS)]) == ID_COLUMNS and "margin" in written.columns
    assert written.groupby("attack_hash")["event"].sum().to_dict() == experiments.set_index("attack_hash")["n_events"].to_dict()
    assert (experiments["n_events"] + experiments["n_censored"]).eq(experiments["n_attack"]).all()
    assert {"n_events", "n_censored", "event_share", "median_event_step"} <= set(pd.read_csv(tmp_path / "reports" / "experiments.csv"))


def test_timing_reads_no_arrays_for_the_sweep_and_names_an_old_array_file(recorded_grid):
    cell = attack_cells(recorded_grid)[0]
    path = outcomes_path(recorded_grid.paths.attacks, cell.hash)
    write_npz(path, y_true=np.zeros(3), y_pred_ben=np.zeros(3), y_pred_adv=np.zeros(3))
    assert "n_events" not in experiment_tables.experiments_table(recorded_grid, outcomes=False)
    with pytest.raises(DataError, match=f"{path}: .*rerun the attack stage"):
        timing.run(recorded_grid)
