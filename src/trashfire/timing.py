"""Stage `timing`: compile the records of the current grid into tidy tables.

`reports/experiments.csv`: one row per (trained cell x attack cell), per-sample times on the
configured clock (t_train, t_predict, t_attack) and on the other (suffixed with its name).
`reports/survival_data.csv`: the survival data set, two weighted rows per attack cell:
duration = the cell's attack time per sample; event 1 (weight = samples misclassified after
the attack) and event 0 (censored, weight = samples that survived).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire.attack import attack_record_path, outcomes_path
from trashfire.cli import run_cli
from trashfire.errors import DataError
from trashfire.grid import attack_cells
from trashfire.records import atomic_path, read_json, read_npz

log = logging.getLogger("trashfire.timing")  # not __name__: it is __main__ under python -m

EXPERIMENT_COLUMNS = [
    "dataset", "pretrained_on", "seed", "model", "depth", "epochs", "lr", "defence", "defence_param", "defence_value",
    "attack", "norm", "attack_param", "attack_value", "n_train", "n_attack", "n_classes", "n_failed",
    "acc_ben", "acc_adv", "t_train", "t_predict", "t_attack", "clock",
    "t_train_process", "t_predict_process", "t_attack_process", "t_train_wall", "t_predict_wall", "t_attack_wall",
    "device", "train_hash", "model_hash", "attack_hash",
]
ID_COLUMNS = ["attack_hash", "duration", "event", "weight"]
NUMERIC_COVARIATES = ["epochs", "depth", "t_train", "t_predict", "acc_ben", "attack_strength", "defence_strength"]
REFERENCE_LEVELS = {"defence": "none"}


def experiments_table(cfg: DictConfig) -> pd.DataFrame:
    rows = []
    for cell in attack_cells(cfg):
        path = attack_record_path(cfg.paths.attacks, cell.hash)
        if not path.is_file():
            raise DataError(f"attack record missing: {path}; run the attack stage first")
        record = read_json(path)
        outcomes = read_npz(outcomes_path(cfg.paths.attacks, cell.hash))
        record.pop("config")
        record.setdefault("pretrained_on", None)  # records from before fine-tuning existed
        record["n_failed"] = int((outcomes["y_pred_adv"] != outcomes["y_true"]).sum())
        record["n_classes"] = cfg.data[record["dataset"]].n_classes
        rows.append(record)
    table = pd.DataFrame(rows)
    return with_clock(table, cfg.timing.clock)


def read_experiments(reports: str | Path) -> pd.DataFrame:
    """experiments.csv with norms kept as the strings they are ("inf", "2")."""
    return pd.read_csv(Path(reports) / "experiments.csv", dtype={"norm": str, "defence_param": str})


def with_clock(table: pd.DataFrame, clock: str) -> pd.DataFrame:
    """t_x on the configured clock; t_x_<clock> keeps both clocks."""
    for quantity in ("t_train", "t_predict", "t_attack"):
        table[quantity] = table[f"{quantity}_{clock}"]
    table["clock"] = clock
    leading = [c for c in EXPERIMENT_COLUMNS if c in table]
    return table[leading + [c for c in table.columns if c not in leading]]


def minmax_within(values: pd.Series, family: pd.Series) -> pd.Series:
    """Min-max scale within each family; a family with one value scales to 0."""
    low = values.groupby(family).transform("min")
    span = values.groupby(family).transform("max") - low
    return ((values - low) / span.where(span > 0)).fillna(0.0)


def survival_table(experiments: pd.DataFrame) -> pd.DataFrame:
    cells = experiments.copy()
    cells["attack_family"] = cells["attack"] + "_" + cells["norm"].astype(str)
    cells["attack_strength"] = minmax_within(cells["attack_value"].astype(float), cells["attack_family"])
    cells["defence_strength"] = minmax_within(cells["defence_value"].astype(float), cells["defence"])
    nonpositive = cells["t_attack"] <= 0
    if nonpositive.any():
        log.warning("dropping %d attack cells with attack time <= 0 (below the clock's resolution)", nonpositive.sum())
        cells = cells[~nonpositive]
    covariates = pd.concat([cells[NUMERIC_COVARIATES].astype(float), dummies(cells)], axis=1)
    covariates = drop_degenerate(covariates)
    failed = cells.assign(event=1, weight=cells["n_failed"])
    survived = cells.assign(event=0, weight=cells["n_attack"] - cells["n_failed"])
    rows = pd.concat([failed, survived]).loc[:, ["attack_hash", "t_attack", "event", "weight"]]
    rows = rows.rename(columns={"t_attack": "duration"}).join(covariates)
    return rows[rows["weight"] > 0].sort_values(["attack_hash", "event"]).reset_index(drop=True)


def dummies(cells: pd.DataFrame) -> pd.DataFrame:
    """One-hot attack family, defence and data set; each drops its reference level."""
    parts = []
    for column, source in (("attack", "attack_family"), ("defence", "defence"), ("data", "dataset")):
        levels = sorted(cells[source].unique())
        reference = REFERENCE_LEVELS.get(column, levels[0])
        reference = reference if reference in levels else levels[0]
        for level in levels:
            if level != reference:
                parts.append((cells[source] == level).astype(float).rename(f"{column}_{level}"))
    return pd.concat(parts, axis=1) if parts else pd.DataFrame(index=cells.index)


def drop_degenerate(covariates: pd.DataFrame) -> pd.DataFrame:
    """Drop constant columns, then each column that adds no rank beside an intercept and
    the columns kept before it (perfect collinearity), with a logged note."""
    kept: list[str] = []
    basis = np.ones((len(covariates), 1))
    for column in covariates.columns:
        values = covariates[column].to_numpy(dtype=float)
        if np.ptp(values) == 0:
            log.info("survival data: dropping constant covariate %s", column)
            continue
        scaled = (values - values.mean()) / values.std()
        candidate = np.column_stack([basis, scaled])
        if np.linalg.matrix_rank(candidate, tol=1e-8 * len(values)) < candidate.shape[1]:
            log.info("survival data: dropping %s, collinear with %s", column, ", ".join(["intercept", *kept]))
            continue
        basis, kept = candidate, kept + [column]
    return covariates[kept]


def run(cfg: DictConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    reports = Path(cfg.paths.reports)
    reports.mkdir(parents=True, exist_ok=True)
    experiments = experiments_table(cfg)
    survival = survival_table(experiments)
    for name, table in (("experiments.csv", experiments), ("survival_data.csv", survival)):
        with atomic_path(reports / name) as tmp:
            table.to_csv(tmp, index=False)
    log.info("%d experiment rows, %d survival rows, covariates: %s", len(experiments), len(survival), ", ".join(survival.columns[len(ID_COLUMNS):]))
    return experiments, survival


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.timing", __doc__, run, argv)


if __name__ == "__main__":
    main()
