"""The per-sample survival data set from hand-made attack records and outcome arrays (the
attack stage's contract): one row per attacked sample, durations from the chosen clock, the
policies, the covariates, old-format arrays, and the timing stage that writes both tables;
Table I's scores of a fitted model and of the baselines on hand-made parts."""

import dataclasses
import logging
import math
import os
import re
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from lifelines.utils import concordance_index
from omegaconf import OmegaConf

from tests.conftest import ROOT, artefacts_of, tiny_overrides
from trashfire.attacks.campaign import attack_record_path, outcomes_path
from trashfire.core import schema
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.core.grid import attack_cells
from trashfire.core.records import read_table, write_json, write_npz
from trashfire.core.shared_arrays import ArrayChannel
from trashfire.stages import timing
from trashfire.survival import fitters as F
from trashfire.survival import scoring
from trashfire.tables import datasets
from trashfire.tables import experiments as experiment_tables
from trashfire.tables.survival_data import (
    ID_COLUMNS,
    LABEL_COLUMNS,
    _rank_tester,
    diagnose,
    drop_degenerate,
    dummy_columns,
    first_of_kind,
    fix_nonpositive,
    repeated,
    survival_table,
    with_strengths,
)


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
    logging.getLogger("trashfire.tables.survival_data").addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger="trashfire.tables.survival_data"):
        yield caplog


def rows_of(table):
    return list(map(tuple, table[["attack_hash", "duration", "event", "weight"]].to_numpy().tolist()))


def test_one_row_per_attacked_sample_on_the_process_clock(two_cells, survival_log):
    table = survival_table(*two_cells, clock="process")
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
    first_query = survival_table(*two_cells, misclassified_before_attack="first_query", clock="process")
    assert "1 of 9 attacked samples, in 1 of 2 attack cells, misclassified before the attack: kept as failures at the first query" in survival_log.text
    dropped = survival_table(*two_cells, misclassified_before_attack="drop", clock="process")
    assert "1 of 9 attacked samples, in 1 of 2 attack cells, misclassified before the attack: dropped (policy drop)" in survival_log.text
    assert (len(first_query), int(first_query["event"].sum())) == (9, 3)
    assert (len(dropped), int(dropped["event"].sum())) == (8, 2)
    assert rows_of(dropped) == rows_of(first_query)[:4] + rows_of(first_query)[5:]
    assert -1.5 not in dropped["margin"].tolist()
    with pytest.raises(ValueError, match="first_query"):
        survival_table(*two_cells, misclassified_before_attack="attack_time", clock="process")  # a policy that no longer exists


def test_durations_below_the_clock_resolution(two_cells, survival_log):
    experiments, outcomes = two_cells
    outcomes["pgd-0.3"]["duration_process"][:2] = 0.0
    half_min = survival_table(experiments, outcomes, clock="process")
    assert half_min["duration"].tolist()[5:] == [0.0005, 0.0005, 0.03, 0.03]  # half the smallest measured
    assert "2 rows (2 samples) timed at <= 0 s" in survival_log.text
    dropped = survival_table(experiments, outcomes, nonpositive_durations="drop", clock="process")
    assert rows_of(dropped)[5:] == [("pgd-0.3", 0.03, 0, 1)] * 2


def test_all_censored_data_is_a_reported_diagnostic(two_cells):
    experiments, outcomes = two_cells
    for arrays in outcomes.values():
        arrays["event"][:] = False
        arrays["y_pred_ben"][:] = arrays["y_true"]
    with pytest.raises(DataError, match="all 9 attacked samples survived"):
        diagnose(survival_table(experiments, outcomes, clock="process"))
    diagnose(survival_table(*cells(), clock="process"))  # fit for a model


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
        survival_table(two_cells[0], {"fgm-0.1": old, "pgd-0.3": two_cells[1]["pgd-0.3"]}, clock="process")


def best_time(work, repeats: int = 3) -> float:
    """The fastest of a few runs: the least disturbed by other work on the machine."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def test_rank_test_stays_fast_on_a_per_sample_table():
    """~25k samples of 600 cells with a per-sample margin: the collinearity test must not
    dominate the timing stage. It costs a few SVDs of the design (measured: 4-6), not a
    number growing with its rows."""
    rng = np.random.default_rng(0)
    cell = rng.integers(0, 600, 25_000)
    per_cell = pd.DataFrame(rng.normal(size=(600, 12)), columns=[f"c{i}" for i in range(12)]).assign(c11=lambda d: d.c0 + d.c1)
    design = per_cell.iloc[cell].reset_index(drop=True).assign(margin=rng.normal(size=len(cell)))
    kept = drop_degenerate(design)
    assert "c11" not in kept and "margin" in kept and len(kept.columns) == 12
    one_svd = best_time(lambda: np.linalg.svd(design.to_numpy(float), full_matrices=False))
    assert best_time(lambda: drop_degenerate(design)) / one_svd < 25


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
    written = read_table(tmp_path / "reports" / "survival_data.parquet")
    assert list(written.columns[: len(ID_COLUMNS)]) == ID_COLUMNS and "margin" in written.columns
    assert written.groupby("attack_hash")["event"].sum().to_dict() == experiments.set_index("attack_hash")["n_events"].to_dict()
    assert (experiments["n_events"] + experiments["n_censored"]).eq(experiments["n_attack"]).all()
    assert {"n_events", "n_censored", "event_share", "median_event_step"} <= set(pd.read_csv(tmp_path / "reports" / "experiments.csv"))


def test_timing_with_the_read_and_the_distance_tables_in_workers_writes_the_same_bytes(recorded_grid, tmp_path, monkeypatch):
    """With workers > 1 a forked worker reads half the attack cells (at a paper's size) and the
    distance tables are made in a forked worker beside the survival data sets (which take its
    ensemble): every table the stage writes is the same, byte for byte."""
    from trashfire.core import parallel
    from trashfire.tables import distances

    made_by, write_distance_tables, read_block = tmp_path / "made_by", distances.write_distance_tables, experiment_tables._read_block
    read_by = tmp_path / "read_by"

    def recorded(*args):  # which process made them: a forked worker runs this too
        with open(made_by, "a") as out:
            out.write(f"{os.getpid()}\n")
        return write_distance_tables(*args)

    def read(attacks, hashes, *args):
        with open(read_by, "a") as out:
            out.write(f"{os.getpid()} {len(hashes)}\n")
        return read_block(attacks, hashes, *args)

    monkeypatch.setattr(distances, "write_distance_tables", recorded)
    monkeypatch.setattr(experiment_tables, "_read_block", read)
    monkeypatch.setattr(experiment_tables, "SPLIT_READ_CELLS", 2)  # the recorded grid's cells are few
    for module in (datasets, parallel, experiment_tables):  # this process has loaded torch (other tests); the stage's has not, and the workers use none
        monkeypatch.setattr(module, "torch_loaded", lambda: False)
    written = {}
    for workers in (1, 2):
        recorded_grid.compute.workers = workers
        timing.run(recorded_grid)
        written[workers] = {path.name: path.read_bytes() for path in sorted((tmp_path / "reports").glob("*.*"))}
    in_this, in_worker = made_by.read_text().split()
    assert in_this == str(os.getpid()) != in_worker
    n_cells = len(attack_cells(recorded_grid))
    alone, *halves = [line.split() for line in read_by.read_text().splitlines()]
    assert alone == [str(os.getpid()), str(n_cells)]
    assert sorted(pid == str(os.getpid()) for pid, _ in halves) == [False, True] and sum(int(n) for _, n in halves) == n_cells
    assert set(written[1]) >= {"experiments.csv", "survival_data.parquet", "eps_survival_data.parquet", "attack_distances.parquet", "query_curves.csv"}
    assert written[2] == written[1]


def test_outcome_arrays_packed_for_the_way_back_from_a_worker_unpack_to_equal_arrays():
    """A worker's cells travel as one array per field, through memory both processes map: each
    cell unpacks to the arrays it had, a field some cells lack stays None there, and text of
    several widths keeps its dtype."""
    rng = np.random.default_rng(1)
    cells = []
    for n, steps in ((3, 2), (0, 2), (5, 4)):
        arrays = hand_made_outcomes(
            rng.integers(0, 10, n), rng.integers(0, 10, n), rng.integers(0, 10, n), rng.normal(size=n), rng.random(n), rng.random(n) < 0.5, np.ones(n)
        )
        if n != 3:
            arrays |= {
                "norm_by_step": rng.random((n, steps)),
                "broken_by": np.array(["apgd-ce", "square", "fab", "fab", "fab"][:n], dtype=f"<U{7 if n else 3}"),
            }
        cells.append(schema.Outcomes.of(arrays))
    packed, channel = experiment_tables.pack_outcomes(cells), ArrayChannel()
    try:  # the worker's put and this process's get, here in one process
        layout = channel.put({name: present for name, (present, _) in packed.items() if present is not None})
        packed |= {name: (values, packed[name][1]) for name, values in channel.get(layout).items()}
    finally:
        channel.close()
    assert set(layout) == set(packed) - {"broken_by"}  # text of two widths travels pickled
    unpacked = experiment_tables.unpack_outcomes(packed, len(cells))
    for before, after in zip(cells, unpacked):
        for name in schema.Outcomes.ORDER:
            a, b = getattr(before, name), getattr(after, name)
            assert (a is None and b is None) or (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)), name
    assert experiment_tables.unpack_outcomes(None, 2) == [None, None]


def test_a_failing_distance_worker_leaves_the_survival_data_sets_as_they_were(recorded_grid, tmp_path, monkeypatch):
    """The survival data sets are written once the worker's distance tables are: where the
    worker fails, the stage fails with its error and the tables of the last run stay, with no
    temp file beside them."""
    from trashfire.core import parallel
    from trashfire.tables import distances

    recorded_grid.compute.workers = 2
    timing.run(recorded_grid)
    reports = tmp_path / "reports"
    before = {name: (reports / name).stat().st_ino for name in ("survival_data.parquet", "eps_survival_data.parquet")}  # a rewrite renames a new file onto it

    def broken(*args):
        raise DataError("a distance table that cannot be made")

    monkeypatch.setattr(distances, "write_distance_tables", broken)
    for module in (datasets, parallel):  # as in the test above: the stage's process has no torch
        monkeypatch.setattr(module, "torch_loaded", lambda: False)
    with pytest.raises(DataError, match="cannot be made"):
        timing.run(recorded_grid)
    assert {name: (reports / name).stat().st_ino for name in before} == before
    assert not list(reports.glob(".*.tmp"))


def test_a_failure_after_the_distance_worker_leaves_both_survival_data_sets_as_they_were(recorded_grid, tmp_path, monkeypatch):
    """survival_data.parquet is written beside the worker but renamed only once the eps samples,
    with the worker's ensemble, are written: a failure there leaves both files of the last run."""
    from trashfire.core import parallel
    from trashfire.tables import eps_samples

    recorded_grid.compute.workers = 2
    for module in (datasets, parallel):  # as above: the stage's process has no torch
        monkeypatch.setattr(module, "torch_loaded", lambda: False)
    timing.run(recorded_grid)
    reports = tmp_path / "reports"
    before = {name: (reports / name).stat().st_ino for name in ("survival_data.parquet", "eps_survival_data.parquet")}

    def broken(*args):
        raise MemoryError("no room for the ensemble's rows")

    monkeypatch.setattr(eps_samples, "ensemble_samples", broken)
    with pytest.raises(MemoryError):
        timing.run(recorded_grid)
    assert {name: (reports / name).stat().st_ino for name in before} == before
    assert not list(reports.glob(".*.tmp"))


def test_a_record_missing_from_the_read_workers_half_stops_the_stage_with_its_path(recorded_grid, monkeypatch):
    """With the read split over two processes, a record missing from the worker's half is the
    same one line as in one process, raised here before any table is written."""
    from trashfire.core import parallel

    monkeypatch.setattr(experiment_tables, "SPLIT_READ_CELLS", 2)
    for module in (datasets, parallel, experiment_tables):
        monkeypatch.setattr(module, "torch_loaded", lambda: False)
    recorded_grid.compute.workers = 2
    missing = attack_record_path(recorded_grid.paths.attacks, attack_cells(recorded_grid)[-1].hash)  # in the worker's half
    missing.unlink()
    with pytest.raises(DataError, match=f"attack record missing: {missing}; run the attack stage first"):
        timing.run(recorded_grid)
    assert not (Path(recorded_grid.paths.reports) / "experiments.csv").exists()


def test_timing_reads_no_arrays_for_the_sweep_and_names_an_old_array_file(recorded_grid):
    cell = attack_cells(recorded_grid)[0]
    path = outcomes_path(recorded_grid.paths.attacks, cell.hash)
    write_npz(path, y_true=np.zeros(3), y_pred_ben=np.zeros(3), y_pred_adv=np.zeros(3))
    assert "n_events" not in experiment_tables.experiments_table(recorded_grid, Path(recorded_grid.paths.attacks), outcomes=False)
    with pytest.raises(DataError, match=f"{path}: .*rerun the attack stage"):
        timing.run(recorded_grid)


# --- the two data sets the timing stage writes (trashfire.tables.datasets), on a hand-made config


@pytest.fixture
def datasets_log(caplog):
    logging.getLogger("trashfire.tables.datasets").addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger="trashfire.tables.datasets"):
        yield caplog


def test_timing_writes_both_survival_sets_as_configured(tmp_path, two_cells, datasets_log):
    """Every setting of timing.survival_data, clock and timing.eps_survival reaches its table:
    none of them the default."""
    experiments, outcomes = two_cells
    # a DeepFool cell of model m1 (a minimal-perturbation attack): sample 0 broken at l2 norm 1.0,
    # sample 1 never (its search reached 2.0), sample 2 wrong before the attack (failure step 0)
    deepfool = experiments.iloc[[0]].assign(attack="deepfool", norm="2", attack_param="nb_grads", attack_value=1.0, attack_hash="deepfool-1", pixel_std=0.5)
    experiments = pd.concat([experiments, deepfool], ignore_index=True).assign(minimal=[False, False, True])
    outcomes["deepfool-1"] = hand_made_outcomes([0, 1, 2], [0, 1, 9], [7, 1, 9], [1.0, 2.0, -1.0], [0.01, 0.04, 0.002], [1, 0, 1], [3, 10, 0])
    outcomes["deepfool-1"]["norm_l2"] = np.array([1.0, 2.0, 3.0])
    outcomes["pgd-0.3"]["duration_wall"][0] = 0.0  # below the wall clock's resolution
    cfg = OmegaConf.create(
        {
            "timing": {
                "survival_data": {
                    "covariates": ["margin", "epochs"],
                    "dummies": ["attack"],
                    "misclassified_before_attack": "drop",
                    "nonpositive_durations": "drop",
                },
                "eps_survival": {"minimal_units": "standardised", "minimal_eps_max": 2.5},
            },
            "clock": "wall",
        }
    )
    survival = datasets.write_survival_sets(cfg, artefacts_of(timing, reports=tmp_path, attacks=tmp_path / "attacks"), experiments, outcomes)
    # the wall clock reads twice the process clock; the samples wrong before the attack are
    # dropped (fgm's last, deepfool's last), and so is pgd's first, timed at 0 s
    assert rows_of(survival) == [
        ("deepfool-1", 0.02, 1, 1),
        ("deepfool-1", 0.08, 0, 1),
        ("fgm-0.1", 0.04, 0, 1),
        ("fgm-0.1", 0.03, 1, 1),
        ("fgm-0.1", 0.04, 0, 1),
        ("fgm-0.1", 0.01, 1, 1),
        *[("pgd-0.3", 0.06, 0, 1)] * 3,
    ]
    # the covariates in the configured order, then the attack dummies against deepfool l2 (the
    # first level); attack_pgd_inf is epochs == 2 again, collinear
    assert list(survival.columns[len(ID_COLUMNS) :]) == ["margin", "epochs", "attack_fgm_inf"]
    written = read_table(tmp_path / "survival_data.parquet")
    assert list(written.columns) == list(survival.columns) and rows_of(written) == rows_of(survival)
    eps = read_table(tmp_path / "eps_survival_data.parquet")
    assert list(eps.columns) == schema.EPS_SURVIVAL_DATA
    by_family = {family: rows[["eps", "event"]].to_numpy().tolist() for family, rows in eps.groupby("attack_family")}
    # DeepFool: the returned norm times 1 (standardised units, as configured); 0 for the sample
    # wrong before; fgm's one grid point 0.1 (its last sample wrong at the first query: 0); pgd
    # censored at its 0.3
    assert by_family == {
        "deepfool l2": [[1.0, 1], [2.0, 0], [0.0, 1]],
        "fgm linf": [[0.1, 0], [0.1, 1], [0.1, 0], [0.1, 1], [0.0, 1]],
        "pgd linf": [[0.3, 0]] * 4,
    }
    minimal = eps[eps["attack"] == "deepfool"]
    assert set(minimal["units"]) == {"standardised"} and set(minimal["eps_max"]) == {2.5}  # the configured upper end
    assert {r.getMessage() for r in datasets_log.records if r.name == "trashfire.tables.datasets"} == {
        "3 experiment rows, 9 survival rows, covariates: margin, epochs, attack_fgm_inf"
    }


# --- the table's edges: no cells, its index and order, the strengths, the dummies, the log


def experiment_cells(*specs, n=2):
    """Experiment rows like the hand-made FGM cell's, one per (attack, attack value, defence,
    defence value) in `specs`, with `n` samples each: the first broken at step 1, the others
    surviving; the attack hash names the cell."""
    template = cells()[0].iloc[0].to_dict()
    rows, outcomes = [], {}
    for attack, value, defence, defence_value in specs:
        attack_hash = f"{attack}-{value}-{defence}-{defence_value}"
        rows.append(template | {"attack": attack, "attack_value": value, "defence": defence, "defence_value": defence_value, "attack_hash": attack_hash})
        outcomes[attack_hash] = hand_made_outcomes(range(n), range(n), [9] + list(range(1, n)), [1.0] * n, [0.01] * n, [1] + [0] * (n - 1), [1] * n)
    return pd.DataFrame(rows), outcomes


def covariates_by_cell(table, columns):
    return table.drop_duplicates("attack_hash").set_index("attack_hash")[columns].to_dict("index")


def test_an_experiments_table_without_cells_gives_an_empty_table_with_the_id_columns(two_cells):
    experiments, outcomes = two_cells
    for policy in ("first_query", "drop"):
        table = survival_table(experiments.iloc[:0], outcomes, misclassified_before_attack=policy, clock="process")
        assert table.empty and list(table.columns) == ID_COLUMNS  # every covariate is dropped: it takes no value


def test_the_experiments_index_is_not_read(two_cells):
    experiments, outcomes = two_cells
    indexed = experiments.set_index("attack_hash", drop=False)  # as a caller looking cells up by hash holds it
    pd.testing.assert_frame_equal(survival_table(indexed, outcomes, clock="process"), survival_table(experiments, outcomes, clock="process"))


def test_rows_are_sorted_by_attack_hash_and_keep_each_cells_sample_order(two_cells):
    experiments, _ = two_cells
    # 20 samples a cell, the cell whose hash sorts last listed first; sample i's duration is
    # (i + 1) ms, so a cell's rows in sample order read 1, 2, ..., 20 ms
    cells, outcomes = experiments.iloc[[0, 0]].assign(attack_hash=["b", "a"]), {}
    for attack_hash in ("a", "b"):
        outcomes[attack_hash] = hand_made_outcomes(range(20), range(20), range(20), [1.0] * 20, np.arange(1, 21) / 1000, [0] * 20, [10] * 20)
    table = survival_table(cells, outcomes, clock="process")
    assert table["attack_hash"].tolist() == ["a"] * 20 + ["b"] * 20
    assert table["duration"].tolist() == pytest.approx(2 * [i / 1000 for i in range(1, 21)])


def test_attack_and_defence_strengths_are_min_max_scaled_within_their_family():
    experiments, outcomes = experiment_cells(("fgm", 0.1, "conf", 0.5), ("fgm", 0.2, "conf", 1.0), ("fgm", 0.5, "none", 0.0), ("pgd", 0.3, "conf", 0.75))
    table = survival_table(experiments, outcomes, covariates=("attack_strength", "defence_strength"), dummies=(), clock="process")
    # fgm spans 0.1..0.5: (0.1 - 0.1) / 0.4 = 0, (0.2 - 0.1) / 0.4 = 0.25, (0.5 - 0.1) / 0.4 = 1;
    # pgd has one value: 0. conf spans 0.5..1.0: 0, 1, and 0.75 -> 0.5; none has one value: 0
    assert covariates_by_cell(table, ["attack_strength", "defence_strength"]) == {
        "fgm-0.1-conf-0.5": {"attack_strength": 0.0, "defence_strength": 0.0},
        "fgm-0.2-conf-1.0": {"attack_strength": pytest.approx(0.25), "defence_strength": 1.0},
        "fgm-0.5-none-0.0": {"attack_strength": 1.0, "defence_strength": 0.0},
        "pgd-0.3-conf-0.75": {"attack_strength": 0.0, "defence_strength": 0.5},
    }


def test_dummies_read_against_no_defence_and_the_first_family_by_its_dummy_name(survival_log):
    experiments, outcomes = experiment_cells(
        ("pgd", 0.1, "none", 0.0), ("pgd_bpda", 0.1, "none", 0.0), ("pgd", 0.1, "conf", 0.0), ("pgd", 0.1, "fsq", 0.0), ("pgd_bpda", 0.1, "fsq", 0.0)
    )
    table = survival_table(experiments, outcomes, covariates=(), clock="process")
    # 'pgd_bpda linf' sorts after 'pgd linf' as a label, but its dummy name attack_pgd_bpda_inf
    # before attack_pgd_inf: it is the reference. The defences against none, whatever its place
    assert list(table.columns[len(ID_COLUMNS) :]) == ["attack_pgd_inf", "defence_conf", "defence_fsq"]
    assert covariates_by_cell(table, ["attack_pgd_inf", "defence_conf", "defence_fsq"]) == {
        "pgd-0.1-none-0.0": {"attack_pgd_inf": 1.0, "defence_conf": 0.0, "defence_fsq": 0.0},
        "pgd_bpda-0.1-none-0.0": {"attack_pgd_inf": 0.0, "defence_conf": 0.0, "defence_fsq": 0.0},
        "pgd-0.1-conf-0.0": {"attack_pgd_inf": 1.0, "defence_conf": 1.0, "defence_fsq": 0.0},
        "pgd-0.1-fsq-0.0": {"attack_pgd_inf": 1.0, "defence_conf": 0.0, "defence_fsq": 1.0},
        "pgd_bpda-0.1-fsq-0.0": {"attack_pgd_inf": 0.0, "defence_conf": 0.0, "defence_fsq": 1.0},
    }
    assert "survival data: dummies are read against the reference levels attack pgd_bpda linf, defence none, data digits" in messages(survival_log)


def test_without_no_defence_the_first_defence_is_the_reference_and_only_configured_dummies_are_made():
    experiments, outcomes = experiment_cells(("pgd", 0.1, "conf", 0.0), ("fgm", 0.1, "fsq", 0.0), ("pgd", 0.1, "fsq", 0.0))
    table = survival_table(experiments, outcomes, covariates=(), dummies=("defence",), clock="process")
    # conf, fsq: conf (the first) is the reference; no attack dummy though fgm and pgd differ
    assert list(table.columns[len(ID_COLUMNS) :]) == ["defence_fsq"]
    assert covariates_by_cell(table, ["defence_fsq"]) == {
        "fgm-0.1-fsq-0.0": {"defence_fsq": 1.0},
        "pgd-0.1-conf-0.0": {"defence_fsq": 0.0},
        "pgd-0.1-fsq-0.0": {"defence_fsq": 1.0},
    }


def test_one_level_of_every_kind_makes_no_dummy_but_keeps_a_row_per_cell(two_cells):
    cells = with_strengths(two_cells[0].iloc[:1])
    dummies = dummy_columns(cells)
    assert dummies.shape == (1, 0) and dummies.index.tolist() == [0]


def messages(caplog):
    return [record.getMessage() for record in caplog.records]


def test_the_survival_data_log_lines_in_full(two_cells, survival_log):
    experiments, outcomes = two_cells
    outcomes["pgd-0.3"]["duration_process"][:2] = 0.0
    survival_table(experiments, outcomes, clock="process")
    survival_table(experiments, outcomes, nonpositive_durations="drop", clock="process")
    logged = messages(survival_log)
    assert (
        "survival data: 1 of 9 attacked samples, in 1 of 2 attack cells, misclassified before the attack: kept as failures at the first query (policy first_query)"
        in logged
    )
    # 0.001 s is the smallest measured duration (fgm's last sample): half of it
    assert "survival data: 2 rows (2 samples) timed at <= 0 s (below the clock's resolution) set to 0.0005 s, half the smallest measured duration" in logged
    assert "survival data: dropping 2 rows (2 samples) timed at <= 0 s, below the clock's resolution" in logged
    assert "survival data: dropping covariate depth: it takes one value" in logged
    assert "survival data: dropping covariate attack_pgd_inf: collinear with intercept, epochs, margin" in logged


def test_a_missing_outcome_file_names_its_cell(two_cells):
    experiments, outcomes = two_cells
    del outcomes["pgd-0.3"]
    with pytest.raises(DataError, match="^no outcome arrays for attack cell pgd-0.3; run the attack stage first$"):
        survival_table(experiments, outcomes, clock="process")


def test_arrays_of_other_types_are_coded_as_the_tables_types(two_cells):
    """Counts as integers, durations and margins as floats, events as 0/1, whatever types the
    arrays came in (lists, a float count, an integer margin)."""
    experiments, outcomes = two_cells
    for arrays in outcomes.values():
        n = len(arrays["y_true"])
        arrays |= {
            "queries": np.full(n, 2.0),
            "gradients": np.full(n, 1.0),
            "flops": np.full(n, 300.0),
            "duration_process": [1] * n,
            "margin_ben": np.arange(n),
        }
    table = survival_table(experiments, outcomes, clock="process")
    assert {c: str(table[c].dtype) for c in ("duration", "event", "weight", "queries", "gradients", "flops", "margin")} == {
        "duration": "float64",
        "event": "int64",
        "weight": "int64",
        "queries": "int64",
        "gradients": "int64",
        "flops": "int64",
        "margin": "float64",
    }


def test_a_zero_weight_row_timed_at_zero_is_no_sample_and_is_left_alone():
    rows = pd.DataFrame({"duration": [0.0, 0.0, 0.4], "weight": [0, 1, 1]})
    # only the weighted row at 0 s is set to half the smallest positive duration, 0.4 / 2
    assert fix_nonpositive(rows, "half_min")["duration"].tolist() == [0.0, 0.2, 0.4]
    assert fix_nonpositive(rows, "drop")["duration"].tolist() == [0.0, 0.4]


# --- the rank test: constant, unknown and collinear covariates


@pytest.fixture
def degenerate_log(caplog):
    with caplog.at_level(logging.INFO, logger="trashfire.tables.survival_data"):
        logging.getLogger("trashfire.tables.survival_data").addHandler(caplog.handler)
        yield caplog


def test_zero_weight_rows_do_not_count_in_the_rank_test(degenerate_log):
    # epochs varies only through the zero-weight row: on the rows that count it is constant
    covariates = pd.DataFrame({"epochs": [1.0, 1.0, 5.0], "margin": [0.5, -0.5, 2.0]})
    assert drop_degenerate(covariates, np.array([1, 1, 0]), where="split").columns.tolist() == ["margin"]
    assert "split: dropping covariate epochs: it takes one value" in messages(degenerate_log)
    assert drop_degenerate(covariates, np.array([1, 1, 1])).columns.tolist() == ["epochs", "margin"]


def test_a_covariate_unknown_for_some_cells_is_dropped_with_a_note(degenerate_log):
    # an external model records no epochs: None in an object column, NaN in a float one
    covariates = pd.DataFrame({"epochs": pd.Series([1, None, 3], dtype=object), "lr": [0.1, np.nan, 0.2], "margin": [0.5, -0.5, 2.0]})
    assert drop_degenerate(covariates).columns.tolist() == ["margin"]
    note = "dropping covariate {}: unknown for some cells (an external model records no epochs or lr)"
    assert {f"survival data: {note.format('epochs')}", f"survival data: {note.format('lr')}"} <= set(messages(degenerate_log))


def test_an_empty_design_keeps_no_covariate():
    assert drop_degenerate(pd.DataFrame({"epochs": [1.0, 2.0]}), np.array([0, 0])).columns.tolist() == []


def test_the_rank_test_is_blind_to_a_covariates_scale_and_offset():
    # seconds per prediction (spread 1e-4) and a FLOPs count (1e9 apart from zero, spread 1):
    # each is a line through the cells, independent of the intercept and of each other
    covariates = pd.DataFrame({"t_predict": [0.0010, 0.0011, 0.0013], "flops": [1e9, 1e9 + 2, 1e9 + 1]})
    assert drop_degenerate(covariates).columns.tolist() == ["t_predict", "flops"]


def test_a_covariate_collinear_up_to_rounding_is_dropped(degenerate_log):
    # t_attack_wall is twice t_attack up to its 8 printed decimals: collinear within the rank
    # test's tolerance, 1e-8 per distinct row on standardised columns (here the smallest
    # singular value is 4e-8, under 10 x 1e-8)
    t_attack = np.sqrt(np.arange(1, 11)) / 10
    covariates = pd.DataFrame({"t_attack": t_attack, "t_attack_wall": np.round(2 * t_attack, 8)})
    assert drop_degenerate(covariates).columns.tolist() == ["t_attack"]
    assert "survival data: dropping covariate t_attack_wall: collinear with intercept, t_attack" in messages(degenerate_log)


# --- diagnose: what makes a data set unfit to fit


def test_diagnose_names_missing_columns_and_takes_a_table_without_the_compute_counts(two_cells):
    table = survival_table(*two_cells, clock="process")
    with pytest.raises(DataError, match=re.escape("survival data: columns ['event'] missing; rerun the timing stage")):
        diagnose(table.drop(columns="event"))
    diagnose(table.drop(columns=["queries", "gradients", "flops"]))  # the compute counts are for reading


def test_diagnose_takes_one_sample_and_rejects_none(two_cells):
    table = survival_table(*two_cells, clock="process")
    diagnose(table.iloc[[1]])  # one failure: fit for a model
    with pytest.raises(DataError, match=re.escape("survival data: no attacked samples; the attack grid produced nothing to fit")):
        diagnose(table.assign(weight=0))


@pytest.mark.parametrize("duration", [0.0, np.inf, np.nan])
def test_diagnose_rejects_a_duration_lifelines_cannot_take(two_cells, duration):
    table = survival_table(*two_cells, clock="process")
    table.loc[3, "duration"] = duration
    message = "survival data: durations must be finite and > 0 (lifelines' requirement); rebuild it with the timing stage"
    with pytest.raises(DataError, match=re.escape(message)):
        diagnose(table)


def test_diagnose_says_how_to_get_failures_when_all_samples_survived(two_cells):
    table = survival_table(*two_cells, clock="process")
    message = (
        "survival data: all 9 attacked samples survived (no failure event, all censored); "
        "a survival model needs failures: strengthen the attacks or add attack families"
    )
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        diagnose(table.assign(event=0))


# --- Table I's scores (survival/scoring.py) on hand-made tables ---


def test_table_i_lists_the_scores_then_the_within_cell_pairs_families_and_kaplan_meier_check_and_ends_with_the_note():
    columns = [
        "note",
        "zeta",
        "km_worst_cells",
        "test_concordance_within[pgd linf]",
        "concordance_within[fgm linf]",
        "test_concordance_within[fgm linf]",
        "concordance_within[pgd linf]",
        "pairs_within",
        "selected",
        "fitter",
        "concordance_within",
        "E50",
    ]
    leading = [
        "fitter",
        "model",
        "status",
        "aft",
        *scoring.SCORE_COLUMNS,
        "beats_baselines",
        "split_by",
        "penalizer",
        "optimiser",
        "attempts",
        *scoring.CONVERGENCE_COLUMNS,
    ]
    # every leading column, present or not (the table is reindexed to them); per family train before test
    assert scoring.table_columns(columns) == [
        *leading,
        "pairs_within",
        "concordance_within[fgm linf]",
        "concordance_within[pgd linf]",
        "test_concordance_within[fgm linf]",
        "test_concordance_within[pgd linf]",
        "km_worst_cells",
        "selected",
        "zeta",
        "note",
    ]
    assert scoring.table_columns([]) == [*leading, "note"]
    # the cross-validated selection score and its folds right after BIC, the one select_by asked for
    with_cv = scoring.table_columns(["cv_folds", "cv_IBS", *columns])
    assert with_cv[with_cv.index("BIC") + 1 : with_cv.index("BIC") + 3] == ["cv_IBS", "cv_folds"] and len(with_cv) == len(leading) + 11


def scored_cells():
    """A training part of two attack cells by hand (one sample of cell a counted twice, one
    censored sample too) and a test part; a longer time goes with a larger x. Within cell a
    x ranks 2 and 3 the wrong way round: 16 of 17 weighted pairs right (1 x 2 against 2, 3, 4
    (twice), 5 = 10; 2 against 3, 4 (twice), 5: 3 of 4; 3 against 4 (twice), 5: 3), cell b
    8 of 8. The test part: cell a 2 of 3, cell b 1 of 2 (2 against 4 wrong, against 6 right)."""
    train = pd.DataFrame(
        {
            "attack_hash": ["a"] * 5 + ["b"] * 5,
            "attack_family": ["fgm linf"] * 5 + ["pgd linf"] * 5,
            "duration": [1.0, 2.0, 3.0, 4.0, 5.0, 2.0, 4.0, 6.0, 8.0, 10.0],
            "event": [1, 1, 1, 0, 1, 1, 1, 0, 1, 0],
            "weight": [2, 1, 1, 2, 1, 1, 1, 1, 1, 1],
            "x": [0.1, 0.3, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
        }
    )
    test = pd.DataFrame(
        {
            "attack_hash": ["a"] * 3 + ["b"] * 3,
            "attack_family": ["fgm linf"] * 3 + ["pgd linf"] * 3,
            "duration": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0],
            "event": [1, 1, 1, 1, 0, 1],
            "weight": 1,
            "x": [0.3, 0.2, 0.4, 0.7, 0.6, 0.8],
        }
    )
    return train, test


def fitted(target):
    return F.fit_one(target, OmegaConf.create({"fitter": {"_target_": f"lifelines.{target}", "penalizer": 0.0}}), scored_cells()[0])


@pytest.fixture(scope="module")
def cox_fit():
    return fitted("CoxPHFitter")


def test_a_models_row_scores_the_training_part_and_the_test_part_each_on_its_own(cox_fit):
    train, test = scored_cells()
    assert cox_fit.fitter.params_["x"] < 0  # a larger x, a lower hazard: the model ranks as x does
    figure, axes = plt.subplots(1, 2)
    row = scoring.train_scores(cox_fit, train, 3.0, axes[0])
    on_test, notes = scoring.test_scores(cox_fit, train, test, 3.0, (0.1, 0.9), axes[1])
    assert not set(row) & set(on_test) and set(on_test) == set(scoring.TEST_COLUMNS) | {"test_pairs_within"} | {c for c in on_test if "[" in c}
    row |= on_test
    # each part's calibration curve and diagonal on its own axes, over a histogram of its samples
    assert [len(ax.lines) for ax in axes] == [2, 2]
    assert [sum(bar.get_height() for bar in twin.patches) for twin in figure.axes[2:]] == [12, 6]
    plt.close(figure)
    loglik = F.log_likelihood(cox_fit, train)
    assert {key: row[key] for key in ("log_likelihood", "k", "n", "n_events", "t0")} == {
        "log_likelihood": loglik,
        "k": 1,
        "n": 12.0,
        "n_events": 8.0,
        "t0": 3.0,
    }
    assert (row["AIC"], row["BIC"]) == pytest.approx((-2 * loglik + 2, -2 * loglik + math.log(12)))

    def over_samples(part):
        return [np.repeat(part[c].to_numpy(float), part["weight"]) for c in ("duration", "x", "event")]

    assert row["concordance"] == pytest.approx(concordance_index(*over_samples(train)))
    assert row["test_concordance"] == pytest.approx(concordance_index(*over_samples(test)))
    assert row["test_concordance"] != pytest.approx(row["concordance"])
    within = {k: v for k, v in row.items() if "within" in k}
    assert within == {
        "concordance_within": pytest.approx(24 / 25),
        "pairs_within": 25.0,
        "concordance_within[fgm linf]": pytest.approx(16 / 17),
        "pairs_within[fgm linf]": 17.0,
        "concordance_within[pgd linf]": 1.0,
        "pairs_within[pgd linf]": 8.0,
        "test_concordance_within": pytest.approx(3 / 5),
        "test_pairs_within": 5.0,
        "test_concordance_within[fgm linf]": pytest.approx(2 / 3),
        "test_pairs_within[fgm linf]": 3.0,
        "test_concordance_within[pgd linf]": 0.5,
        "test_pairs_within[pgd linf]": 2.0,
    }
    assert 0 < row["E50"] < 1 and 0 < row["test_E50"] < 1 and row["test_ICI"] != pytest.approx(row["ICI"])
    assert 0.5 < row["test_uno_C"] <= 1 and 0 < row["test_IBS"] < 0.25  # better than predicting 1/2 everywhere
    # the IBS from the training durations' 10% quantile, 1.1 s (12 samples: 1, 1, 2, 2 ...), to tau, their 90% one, 7.8 s
    # (6 + 0.9 x 2), within the test part's follow-up: 20 times, those from 6 s on left out; Uno's C counts failures before tau
    assert (row["ibs_from"], row["tau"]) == pytest.approx((1.1, 7.8))
    assert row["note"] == scoring.COX_NOTE
    assert notes == ["test intervals: 0 held-out trained model (survival data's train_hash); an interval over them needs 2"]
    assert all(math.isnan(row[f"{key}_{end}"]) for key in scoring.INTERVAL_SCORES for end in ("low", "high"))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no stray numpy warning either: a score without pairs is NaN by choice
def test_a_score_that_cannot_be_computed_is_nan_with_its_reason_in_the_note():
    train, test = scored_cells()
    warned = dataclasses.replace(fitted("WeibullAFTFitter"), warnings=["Convergence halted."])
    row = scoring.train_scores(warned, train, 3.0)
    on_test, notes = scoring.test_scores(warned, train, test.assign(event=0), 3.0, (0.1, 0.9))  # no failure in the test part
    assert row["concordance"] == pytest.approx(45 / 53) and on_test["test_pairs_within"] == 0.0
    assert row["note"] == "Convergence halted."  # an AFT model's likelihood needs no note
    # the Brier score needs no failure: survivors are scored too; every other test score does
    assert all(math.isnan(on_test[k]) for k in on_test if k.startswith("test_") and not k.startswith(("test_pairs_within", "test_IBS")))
    assert on_test["test_IBS"] > 0
    assert notes[:3] == [
        "test_concordance: ZeroDivisionError: No admissable pairs in the dataset.",
        "test_concordance_within: no comparable pair within an attack cell",
        "test_uno_C: ZeroDivisionError: No admissable pairs in the dataset.",
    ]
    assert notes[3].startswith("test_ICI/E50: IndexError: ") and len(notes) == 5 and notes[4].startswith("test intervals: ")


def test_a_ranking_that_cannot_be_computed_leaves_the_within_cell_score_nan_with_its_reason():
    notes = ["earlier note"]

    def no_ranking(part):
        raise ValueError("\n  covariate x is missing\nsecond line")

    row = scoring.within_cell_scores(notes, "test_", scored_cells()[1], no_ranking)
    assert list(row) == ["test_concordance_within"] and math.isnan(row["test_concordance_within"])
    assert notes == ["earlier note", "test_concordance_within: ValueError: covariate x is missing"]


def test_cell_means_weigh_each_row_by_its_samples_and_keep_an_infinite_mean():
    # a part of a split keeps the rows' index in the whole table
    data = pd.DataFrame({"attack_hash": ["b", "a", "b", "a", "c"], "weight": [1, 1, 3, 3, 2]}, index=[7, 3, 9, 4, 8])
    # a: (1 x 1 + 3 x 3) / 4 = 2.5; b: (2 x 1 + 6 x 3) / 4 = 5; c: a model without a finite mean
    means = scoring.cell_means(data, [2, 1, 6, 3, np.inf])
    assert means.to_dict() == {"a": 2.5, "b": 5.0, "c": np.inf}
    assert scoring.cell_means(data.drop(columns="weight"), [2, 1, 6, 3, 4]).to_dict() == {"a": 2.0, "b": 4.0, "c": 4.0}  # one sample a row


def test_the_baseline_rows_by_hand():
    """Train: cell a (1 s failed, counted twice; 3 s censored), cell b (2 s and 6 s, failed):
    mean runtimes 5/3 and 4, survival shares 1/3 and 0. Comparable pairs: 1 s (twice) against
    3, 2 and 6 s; 2 s against 3 and 6 s: 8. Test: cell c (1 s, 2 s failed), cell d (3 s
    censored, 4 s failed); the pairs 1 s against 2, 3, 4 s and 2 s against 3, 4 s: 5."""
    train = pd.DataFrame({"attack_hash": ["a", "a", "b", "b"], "duration": [1.0, 3.0, 2.0, 6.0], "event": [1, 0, 1, 1], "weight": [2, 1, 1, 1]})
    test = pd.DataFrame({"attack_hash": ["c", "c", "d", "d"], "duration": [1.0, 2.0, 3.0, 4.0], "event": [1, 1, 0, 1], "weight": 1})
    test_with_units = test.assign(train_hash=["t1", "t1", "t2", "t2"])
    assert scoring.cell_mean_runtime(train) == pytest.approx([5 / 3, 5 / 3, 4, 4])
    assert scoring.cell_survival_share(train) == pytest.approx([1 / 3, 1 / 3, 0, 0])
    note = "a ranking of samples, not a survival model: no likelihood (AIC, BIC) and no survival probabilities (ICI, E50)"
    common = {"aft": False, "n": 5.0, "n_events": 4.0, "concordance_within": 0.5, "pairs_within": 3.0, "test_concordance_within": 0.5, "test_pairs_within": 1.0}

    # runtime: 1 s ties 3 s in its cell (1/2) and is below 2 s and 6 s (2), twice; 2 s is above 3 s (0) and ties 6 s (1/2)
    # share: 1 s ties 3 s (1/2) and ranks above both of b, twice; 2 s ranks below 3 s (1) and ties 6 s (1/2)
    # test: c ranks below d for both: 1 s ties 2 s (1/2), the other four pairs right
    def baseline(fitter, model, knows, concordance):
        row = {"fitter": fitter, "model": model, "status": "baseline", **common, "concordance": pytest.approx(concordance)}
        return row | {"test_concordance": pytest.approx(4.5 / 5), "note": f"baseline: knows only each attack cell's {knows}; {note}"}

    rows = scoring.baseline_rows(train, test_with_units)
    for row in rows:  # the test concordance's interval over the test part's two trained models (survival.held_out)
        low, high = row.pop("test_concordance_low"), row.pop("test_concordance_high")
        assert low < row["test_concordance"] < high
    assert rows == [
        baseline("runtime_baseline", "Runtime baseline", "mean attack runtime", 5.5 / 8),
        baseline("failure_share_baseline", "Failure-share baseline", "observed failure share", 2.5 / 8),
    ]


def test_a_test_part_without_failures_leaves_the_baselines_test_scores_nan_with_the_reason():
    train = pd.DataFrame({"attack_hash": ["a", "a", "b", "b"], "duration": [1.0, 3.0, 2.0, 6.0], "event": [1, 0, 1, 1], "weight": 1})
    for row in scoring.baseline_rows(train, train.assign(event=0)):
        assert math.isnan(row["test_concordance"]) and math.isnan(row["test_concordance_within"]) and row["concordance"] > 0
        assert row["note"].split("; ")[2:] == [
            "test_concordance: ZeroDivisionError: No admissable pairs in the dataset.",
            "test_concordance_within: no comparable pair within an attack cell",
        ]


def verdict_table():
    return pd.DataFrame(
        {
            "model": ["Weibull", "Log-Normal", "Log-Logistic", "Generalised Gamma", "Runtime baseline", "Failure-share baseline"],
            "status": ["fitted", "fitted", "fitted", "failed", "baseline", "baseline"],
            "test_concordance": [0.7, 0.65, np.nan, np.nan, 0.65, 0.6],
            "test_concordance_within": [0.55, 0.6, np.nan, np.nan, 0.5, 0.5],
        }
    )


def test_a_model_beats_the_baselines_only_above_every_baselines_test_concordance():
    verdicts = scoring.with_baseline_verdict(verdict_table())["beats_baselines"].tolist()
    # Log-Normal ties the runtime baseline; Log-Logistic has no test score (not selected, or it could
    # not be scored): no verdict; only fitted models scored on test get one
    assert verdicts == [True, False, None, None, None, None] and verdicts[0] is True and verdicts[1] is False
    unscored = verdict_table().assign(test_concordance=[0.7, 0.65, 0.6, np.nan, np.nan, 0.6])
    assert scoring.with_baseline_verdict(unscored)["beats_baselines"].tolist()[:3] == [False] * 3  # a baseline without a score cannot be beaten
    one = verdict_table().iloc[[0, 1, 2, 5]]  # above the failure-share baseline's 0.6 is above every baseline
    assert scoring.with_baseline_verdict(one)["beats_baselines"].tolist() == [True, True, None, None]
    alone = verdict_table().iloc[:3]
    assert scoring.with_baseline_verdict(alone)["beats_baselines"].tolist() == [False, False, None]  # nothing to beat is no win
    # each verdict stays with its row, in whatever order the rows come
    backwards = scoring.with_baseline_verdict(verdict_table().iloc[::-1])
    assert backwards["beats_baselines"].tolist() == [None, None, None, None, False, True]


def test_the_verdict_sentences_name_each_model_scored_on_test_and_both_baselines_scores():
    table = scoring.with_baseline_verdict(verdict_table())
    bar = "Runtime baseline 0.6500, Failure-share baseline 0.6000"
    assert scoring.baseline_verdicts(table) == [  # Log-Logistic has no test score: no sentence
        f"Weibull beats both baselines on test concordance (0.7000; {bar})",
        f"Log-Normal does not beat both baselines on test concordance (0.6500; {bar})",
    ]
    unjudged = table.assign(beats_baselines=None)
    assert all("does not beat" in line for line in scoring.baseline_verdicts(unjudged))
    assert scoring.within_summary(table.iloc[[0, 4]]) == "Weibull 0.5500, Runtime baseline 0.5000"
    assert scoring.within_summary(table.drop(columns="test_concordance_within")) == ""


def test_concordance_within_csv_has_a_row_per_model_and_family_the_pooled_one_first():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "runtime_baseline"],
            "model": ["Weibull", "Runtime baseline"],
            "status": ["fitted", "baseline"],
            "concordance_within": [0.8, 0.5],
            "pairs_within": [90.0, 90.0],
            "test_concordance_within": [0.7, 0.5],
            "test_pairs_within": [40.0, 40.0],
            "test_concordance_within[pgd linf]": [0.75, 0.5],  # pgd cells only in the test part,
            "test_pairs_within[pgd linf]": [30.0, 30.0],
            "concordance_within[deepfool l2]": [0.95, 0.5],  # deepfool's only in the training part
            "pairs_within[deepfool l2]": [20.0, 20.0],
            "concordance_within[fgm linf]": [0.9, 0.5],
            "pairs_within[fgm linf]": [70.0, 70.0],
            "test_concordance_within[fgm linf]": [0.6, 0.5],
            "test_pairs_within[fgm linf]": [10.0, 10.0],
            "concordance": [0.6, 0.55],
        }
    )
    table = scoring.concordance_within_table(comparison)
    assert list(table.columns) == [
        "fitter",
        "model",
        "status",
        "attack_family",
        "concordance_within",
        "pairs_within",
        "test_concordance_within",
        "test_pairs_within",
    ]
    nan = np.nan
    expected = [
        ["weibull", "Weibull", "fitted", "all", 0.8, 90.0, 0.7, 40.0],
        ["weibull", "Weibull", "fitted", "deepfool l2", 0.95, 20.0, nan, nan],
        ["weibull", "Weibull", "fitted", "fgm linf", 0.9, 70.0, 0.6, 10.0],
        ["weibull", "Weibull", "fitted", "pgd linf", nan, nan, 0.75, 30.0],
        ["runtime_baseline", "Runtime baseline", "baseline", "all", 0.5, 90.0, 0.5, 40.0],
        ["runtime_baseline", "Runtime baseline", "baseline", "deepfool l2", 0.5, 20.0, nan, nan],
        ["runtime_baseline", "Runtime baseline", "baseline", "fgm linf", 0.5, 70.0, 0.5, 10.0],
        ["runtime_baseline", "Runtime baseline", "baseline", "pgd linf", nan, nan, 0.5, 30.0],
    ]
    pd.testing.assert_frame_equal(table, pd.DataFrame(expected, columns=table.columns))


def test_table_i_in_latex_for_a_model_and_a_baseline():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "runtime_baseline"],
            "model": ["Weibull", "Runtime baseline"],
            "status": ["fitted", "baseline"],
            "aft": [True, False],
            "AIC": [1234.5, np.nan],
            "BIC": [98.76, np.nan],
            "concordance": [0.7126, 0.6812],
            "test_concordance": [0.7, 0.6543],
            "concordance_within": [0.6543, 0.5],
            "test_concordance_within": [0.61, 0.5],
            "ICI": [0.0123, np.nan],
            "test_ICI": [0.056, np.nan],
            "E50": [0.0089, np.nan],
            "test_E50": [0.047, np.nan],
            "beats_baselines": [True, None],
            "split_by": "model_hash",
            "note": ["", "baseline: ..."],
        }
    )
    # AIC and BIC to 3 significant digits, concordance to 3 decimals, ICI and E50 to 2; '--' where missing
    assert scoring.latex_table(comparison, 0.2) == "\n".join(
        [
            r"\begin{table}",
            r"\centering",
            r"\caption{Survival models compared on the training (80\%) and test (20\%) groups of samples by model\_hash. "
            r"Runtime baseline: knows only each attack cell's mean attack runtime, a ranking of samples, not a survival model: "
            r"no likelihood (AIC, BIC) and no survival probabilities (ICI, E50). Within-cell concordance compares only samples "
            r"of one attack cell (the baselines rank a cell's samples alike: 0.5).}",
            r"\label{tab:survival-models}",
            r"\begin{tabular}{lrrrrrrrrrrrr}",
            r"\toprule",
            r" & AIC & BIC & Concordance & Test Concordance & Test Uno's C & Test IBS & Within-cell Concordance & Test Within-cell Concordance & ICI & Test ICI "
            r"& E50 & Test E50 \\",
            r"\midrule",
            r"Weibull & 1.23e+03 & 98.8 & 0.713 & 0.700 & -- & -- & 0.654 & 0.610 & 0.01 & 0.06 & 0.01 & 0.05 \\",
            r"Runtime baseline & -- & -- & 0.681 & 0.654 & -- & -- & 0.500 & 0.500 & -- & -- & -- & -- \\",
            r"\bottomrule",
            r"\end{tabular}",
            r"\end{table}",
            r"% needs \usepackage{booktabs}",
            "",
        ]
    )


def test_table_i_in_latex_gives_the_cross_validated_score_the_test_intervals_and_how_the_model_was_selected():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "lognormal", "runtime_baseline"],
            "model": ["Weibull", "Log-Normal", "Runtime baseline"],
            "status": ["fitted", "fitted", "baseline"],
            "AIC": [1234.5, 1300.0, np.nan],
            "BIC": [98.76, 99.0, np.nan],
            "cv_uno_C": [0.7123, 0.7012, np.nan],
            "cv_folds": [3, 3, np.nan],
            "test_concordance": [0.7, np.nan, 0.6543],
            "test_concordance_low": [0.65, np.nan, np.nan],  # a baseline's interval may be missing (one trained model)
            "test_concordance_high": [0.75, np.nan, np.nan],
            "test_IBS": [0.1234, np.nan, np.nan],
            "test_IBS_low": [0.1, np.nan, np.nan],
            "test_IBS_high": [0.15, np.nan, np.nan],
            "selected": [True, False, False],
            "note": ["", "", "baseline: ..."],
        }
    )
    lines = scoring.latex_table(comparison, 0.2, "best cv_uno_C: grouped 3-fold cross-validation inside the training split").splitlines()
    assert lines[6] == (
        r" & AIC & BIC & CV Uno's C & Concordance & Test Concordance & Test Uno's C & Test IBS & Within-cell Concordance "
        r"& Test Within-cell Concordance & ICI & Test ICI & E50 & Test E50 \\"
    )
    assert lines[8] == r"Weibull & 1.23e+03 & 98.8 & 0.712 & -- & 0.700 [0.650, 0.750] & -- & 0.123 [0.100, 0.150] & -- & -- & -- & -- & -- & -- \\"
    assert lines[9] == r"Log-Normal & 1.3e+03 & 99 & 0.701 & " + " & ".join(["--"] * 10) + r" \\"
    assert lines[10].startswith(r"Runtime baseline & -- & -- & -- & -- & 0.654 & ")
    assert (
        r"Selected: Weibull (best cv\_uno\_C: grouped 3-fold cross-validation inside the training split); only it is scored on the test split, "
        r"with 95\% intervals over the held-out trained models" in lines[2]
    )


def test_table_i_captions_each_row_without_a_comparable_score_and_each_model_below_the_baselines():
    comparison = pd.DataFrame(
        {
            "fitter": ["weibull", "cox", "gengamma", "exponential", "lognormal", "failure_share_baseline"],
            "model": ["Weibull", "Cox PH", "Generalised Gamma", "Exponential", "Log-Normal", "Failure-share baseline"],
            "status": ["fitted", "fitted", "failed", "skipped", "fitted", "baseline"],
            "aft": [True, False, True, True, True, False],
            "concordance": [0.6, 0.7, np.nan, np.nan, 0.5, 0.55],
            "test_concordance": [0.6, 0.7, np.nan, np.nan, 0.5, 0.62],
            "beats_baselines": [False, True, None, None, False, None],
            "note": ["Convergence halted.", scoring.COX_NOTE, "fit failed: ...", "not fitted: 50% of $x #1 {needs} a_b & more of X.", "", "baseline: ..."],
        }
    )
    latex = scoring.latex_table(comparison, 1 / 3)
    # no split_by column: the default group; the skipped row's own note, escaped, with one full stop
    assert latex.splitlines()[2] == (
        r"\caption{Survival models compared on the training (67\%) and test (33\%) groups of samples by train\_hash. "
        r"Cox PH: AIC and BIC from the partial likelihood: comparable among Cox fits only. "
        r"Generalised Gamma: every fit attempt failed (the reasons are in aft\_comparison.csv). "
        r"Exponential: not fitted: 50\% of \$x \#1 \{needs\} a\_b \& more of X. "
        r"Failure-share baseline: knows only each attack cell's observed failure share, a ranking of samples, not a survival model: "
        r"no likelihood (AIC, BIC) and no survival probabilities (ICI, E50). "
        r"Test concordance not above both baselines: Weibull, Log-Normal.}"
    )
    assert "Within-cell" not in latex.splitlines()[2]
    # a label with LaTeX's special characters is escaped in the row names too
    renamed = scoring.latex_table(comparison.assign(model=["Weibull & co_1", *comparison["model"][1:]]), 1 / 3)
    assert any(line.startswith(r"Weibull \& co\_1 & ") for line in renamed.splitlines())


def test_a_caption_escapes_latex_specials_once_each_a_backslash_included():
    assert scoring._latex_escape(r"C:\runs_{1} & 5% $ #") == r"C:\textbackslash{}runs\_\{1\} \& 5\% \$ \#"


def test_cells_without_pairs_pool_to_nan_without_dividing_by_zero():
    with np.errstate(all="raise"):  # whatever another library set numpy's error state to
        assert math.isnan(scoring._pooled(pd.DataFrame({"pairs": [0, 0], "concordant": [0, 0]})))
        assert scoring._pooled(pd.DataFrame({"pairs": [3, 1], "concordant": [2, 1]})) == 0.75


def test_a_composites_causes_ride_along_and_other_cells_name_none(two_cells):
    """The FGM cell as if a composite had broken it (`broken_by` in its arrays): each row keeps
    its cause, never as a covariate; PGD's arrays have none, so its rows name none."""
    experiments, outcomes = two_cells
    causes = np.array(["", "apgd_ce", "", "square", "first_query"])
    table = survival_table(experiments, {**outcomes, "fgm-0.1": {**outcomes["fgm-0.1"], "broken_by": causes}}, clock="process")
    assert table.loc[table["attack_hash"] == "fgm-0.1", "broken_by"].tolist() == causes.tolist()
    assert table.loc[table["attack_hash"] == "pgd-0.3", "broken_by"].tolist() == [""] * 4
    assert "broken_by" not in F.covariates_of(table)


def test_the_designs_distinct_rows_are_those_hashing_every_row_finds():
    """The rank test reads each distinct design row once; the survival table finds them from the
    cells' rows and the samples' margins (cells alike in every covariate, margins repeated
    within and across cells), as DataFrame.duplicated over every column would."""
    from trashfire.tables.survival_data import sample_design, sample_rows

    experiments, outcomes = experiment_cells(("fgm", 0.1, "none", 0.0), ("fgm", 0.1, "none", 0.0), ("fgm", 0.3, "none", 0.0), n=4)
    experiments["attack_hash"] = ["a", "b", "c"]
    outcomes = {h: next(iter(outcomes.values())) for h in "abc"}
    outcomes["b"] = outcomes["b"] | {"margin_ben": np.array([1.0, 2.0, 1.0, np.nan])}  # NaN alike NaN, as duplicated() reads it
    cells = with_strengths(experiments)
    samples = sample_rows(cells["attack_hash"], outcomes, "process")
    design, distinct = sample_design(cells, samples, ["epochs", "attack_strength", "margin"], [])
    assert distinct.tolist() == (~design.duplicated()).tolist() == [True, False, False, False, False, True, False, True, True, False, False, False]
    assert drop_degenerate(design, distinct=distinct).columns.tolist() == drop_degenerate(design).columns.tolist() == ["attack_strength"]
    with pytest.raises(ValueError, match="without weights"):
        drop_degenerate(design, np.ones(len(design)), distinct=distinct)


def test_first_of_kind_is_pandas_duplicated_with_zeros_of_either_sign_and_nans():
    """The rank test's distinct rows: pandas' complement of duplicated(), row for row, where
    repeats are many and far apart, -0.0 meets 0.0, NaNs repeat and integers mix in."""
    rng = np.random.default_rng(0)
    base = pd.DataFrame({"a": rng.integers(0, 4, 3000).astype(float), "b": rng.normal(size=3000).round(1), "c": rng.integers(0, 3, 3000)})
    base.loc[::7, "a"] = -0.0
    base.loc[::11, "b"] = np.nan
    frame = pd.concat([base, base.sample(frac=0.5, random_state=1)], ignore_index=True)
    expected = ~frame.duplicated().to_numpy()
    assert 0 < expected.sum() < len(frame) and np.array_equal(first_of_kind(frame), expected)
    assert np.array_equal(first_of_kind(frame.iloc[:0]), np.zeros(0, dtype=bool))
    no_columns = frame[[]]  # a study without covariates: pandas' answer, and drop_degenerate keeps nothing
    assert np.array_equal(first_of_kind(no_columns), ~no_columns.duplicated().to_numpy())
    assert drop_degenerate(no_columns, np.ones(len(no_columns))).columns.tolist() == []


@pytest.mark.parametrize("spread", [3, 10**6, 2**64 - 1])
def test_the_values_that_repeat_are_those_pandas_flags_keeping_none(spread):
    """The sort that finds first_of_kind's suspects: pandas' duplicated(keep=False), value for
    value, where repeats are most, few or none."""
    values = np.random.default_rng(spread % 97).integers(0, spread, 5000, dtype=np.uint64, endpoint=True)
    assert np.array_equal(repeated(values), pd.Series(values).duplicated(keep=False).to_numpy())
    assert repeated(values[:0]).shape == (0,) and not repeated(values[:1]).any()


def test_the_rank_test_a_block_of_rows_at_a_time_reads_every_rows_ranks():
    """The R factor of stacked blocks' R factors is the whole matrix's: any block size gives the
    ranks that one block of every row gives, a collinear column included."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=1000), rng.integers(0, 3, 1000).astype(float)
    columns = [(values, values.mean(), values.std()) for values in (a, b, 2 * a - b, rng.normal(size=1000))]
    rows = np.arange(1000)
    whole, blocked = (_rank_tester(columns, rows, tol=1e-8 * 1000, block=block) for block in (1 << 20, 7))
    subsets = [[0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 3, 4]]
    assert [blocked(s) for s in subsets] == [whole(s) for s in subsets] == [2, 3, 3, 4, 3]
