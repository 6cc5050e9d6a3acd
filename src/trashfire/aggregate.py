"""Stage `aggregate`: TRASH, failure rates, EVP and normalised AUC R per (model cell x attack
family), and the headline metrics DVC tracks.

An attack family is an attack with one norm (fgm_inf, fgm_2, pgd_inf): its strength grid is
one eps axis. P(0) for EVP and R is the benign accuracy on the same attacked subset.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire import metrics
from trashfire.cli import run_cli
from trashfire.records import atomic_path, write_json
from trashfire.timing import read_experiments

log = logging.getLogger("trashfire.aggregate")  # not __name__: it is __main__ under python -m

CELL_COLUMNS = ["model_hash", "dataset", "pretrained_on", "seed", "model", "depth", "epochs", "lr", "defence", "defence_param", "defence_value", "attack", "norm"]


def trash_table(experiments: pd.DataFrame, expected: pd.DataFrame, eps_max: float | None) -> pd.DataFrame:
    cells = experiments.merge(expected[["attack_hash", "E_T"]], on="attack_hash", how="left")
    if eps_max is not None:
        cells = cells[cells["attack_value"] <= eps_max]
    cells = cells.assign(f_adv=metrics.failure_rate(cells["acc_adv"], cells["t_attack"]))
    table = cells.groupby(CELL_COLUMNS, dropna=False).agg(
        t_train=("t_train", "first"), t_predict=("t_predict", "first"), acc_ben=("acc_ben", "first"),
        acc_adv=("acc_adv", "mean"), t_attack=("t_attack", "mean"), E_T=("E_T", "mean"), f_adv=("f_adv", "mean"),
        eps_max=("attack_value", "max"),
    ).reset_index()
    table["f_ben"] = metrics.failure_rate(table["acc_ben"], table["t_predict"])
    table["trash_adv"] = metrics.trash(table["t_train"], table["E_T"])
    table["trash_ben"] = metrics.trash_benign(table["t_train"], table["acc_ben"], table["t_predict"])
    return table


def robustness_table(experiments: pd.DataFrame, w: float, tau: float | None, eps0: float, eps1: float | None) -> pd.DataFrame:
    """EVP and R per (model cell x attack family); eps1 None integrates R up to the family's largest eps."""
    rows = []
    experiments = experiments[experiments["attack_param"] == "eps"]  # EVP and R are curves over eps
    for key, cell in experiments.groupby(CELL_COLUMNS, dropna=False):
        cell = cell.sort_values("attack_value")
        eps = np.concatenate([[0.0], cell["attack_value"].to_numpy(float)])
        acc = np.concatenate([[cell["acc_ben_attack_subset"].iloc[0]], cell["acc_adv"].to_numpy(float)])
        n_classes = int(cell["n_classes"].iloc[0])
        threshold = tau if tau is not None else metrics.viability_threshold(n_classes, w)
        upper = eps[-1] if eps1 is None else eps1
        try:
            auc, note = metrics.robustness_auc(eps, acc, eps0, upper), ""
        except ValueError as err:  # e.g. a model with no benign accuracy on the subset
            auc, note = float("nan"), str(err)
        rows.append(dict(zip(CELL_COLUMNS, key)) | {
            "n_classes": n_classes, "acc_ben": acc[0], "tau": threshold, "evp": metrics.evp(eps, acc, threshold),
            "auc_R": auc, "auc_S": 1 - auc, "eps0": eps0, "eps1": upper, "note": note,
        })
    return pd.DataFrame(rows)


def headline(experiments: pd.DataFrame, trash: pd.DataFrame, robustness: pd.DataFrame, comparison: pd.DataFrame) -> dict:
    survival = comparison[comparison["selected"].astype(bool)].iloc[0]
    return {
        "n_train_cells": int(experiments["train_hash"].nunique()),
        "n_model_cells": int(experiments["model_hash"].nunique()),
        "n_attack_cells": int(len(experiments)),
        "clock": str(experiments["clock"].iloc[0]),
        "acc_ben_mean": float(experiments.drop_duplicates("model_hash")["acc_ben"].mean()),
        "acc_adv_mean": float(experiments["acc_adv"].mean()),
        "survival_model": str(survival["fitter"]),
        "survival_test_concordance": float(survival["test_concordance"]),
        "survival_test_ici": float(survival["test_ICI"]),
        "trash_adv_median": float(trash["trash_adv"].median()),
        "trash_adv_share_above_1": float((trash["trash_adv"] > 1).mean()),
        "trash_ben_median": float(trash["trash_ben"].median()),
        "evp_mean": float(robustness["evp"].mean()),
        "auc_R_mean": float(robustness["auc_R"].mean()),
    }


def run(cfg: DictConfig) -> dict:
    reports = Path(cfg.paths.reports)
    experiments = read_experiments(reports)
    expected = pd.read_csv(reports / "survival" / "expected_times.csv")
    comparison = pd.read_csv(reports / "survival" / "aft_comparison.csv")
    m = cfg.metrics
    trash = trash_table(experiments, expected, m.trash.eps_max)
    robustness = robustness_table(experiments, m.evp.w, m.evp.tau, m.auc.eps0, m.auc.eps1)
    for name, table in (("trash.csv", trash), ("robustness.csv", robustness)):
        with atomic_path(reports / name) as tmp:
            table.to_csv(tmp, index=False)
    summary = headline(experiments, trash, robustness, comparison)
    write_json(reports / "metrics.json", summary)
    log.info("%s", ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    return summary


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.aggregate", __doc__, run, argv)


if __name__ == "__main__":
    main()
