"""Hydra entry point: prepare, train and attack the grid a composed config selects, in this
process, writing to the same per-cell caches the DVC stages use. With a sweeper each trial
is one cell (or a few) of a grid:

    python -m trashfire.experiment                                  # the default grid, once
    python -m trashfire.experiment model=resnet34 defence=fsq       # one model, one defence
    python -m trashfire.experiment --multirun hparams_search=paper_grid
    python -m trashfire.experiment --multirun hparams_search=search objective=[acc_adv,trash_constant_hazard]

A trial returns its objective(s) (`objective`, one name or a list; see OBJECTIVES), each a
mean over the trial's attack cells. A trial that fails raises; the sweeper records its
error in the study and goes on.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from trashfire import metrics
from trashfire.core.cli import configure_logging
from trashfire.core.config import check_group_options, config_dir, normalise, validate
from trashfire.core.errors import ConfigError, TrashfireError
from trashfire.stages import attack, prepare, train

log = logging.getLogger("trashfire.experiment")  # not __name__: it is __main__ under python -m

OBJECTIVES = {
    "acc_adv": "mean adversarial accuracy (maximise)",
    "acc_ben": "mean benign accuracy (maximise)",
    "trash_constant_hazard": "mean t_train * f_adv: TRASH with the cell's constant-hazard E[T] = t_attack / (1 - Acc_adv), not the survival model's (minimise)",
    "evp": "mean EVP over the eps attack families (maximise)",
    "auc_r": "mean normalised robustness AUC R over the eps attack families (maximise)",
}
EPS_OBJECTIVES = ("evp", "auc_r")
# objectives renamed: the name a config may still give -> why, and the name now
RENAMED_OBJECTIVES = {
    "trash": "trash_constant_hazard (a trial has no survival model: its TRASH takes a constant-hazard E[T], "
    "not the survival stage's, which trash.csv and the findings report)"
}


def objective_names(cfg: DictConfig) -> list[str]:
    chosen = cfg.get("objective", "acc_adv")
    names = list(chosen) if isinstance(chosen, (list, ListConfig)) else [chosen]
    for name in names:
        if name in RENAMED_OBJECTIVES:
            raise ConfigError("objective", f"{name!r} is now {RENAMED_OBJECTIVES[name]}")
        if name not in OBJECTIVES:
            raise ConfigError("objective", f"got {name!r}; allowed: {', '.join(OBJECTIVES)} (one, or a list for a multi-objective sampler)")
    if not names:
        raise ConfigError("objective", "empty list; name at least one of " + ", ".join(OBJECTIVES))
    if any(n in EPS_OBJECTIVES for n in names) and not any(spec.param == "eps" for spec in cfg.attack.values()):
        raise ConfigError("objective", f"{'/'.join(EPS_OBJECTIVES)} need an eps-grid attack (fgm or pgd) in `attack`")
    return names


def objective_values(cfg: DictConfig, names: list[str]) -> list[float]:
    """The trial's objectives from its attack records."""
    from trashfire.tables import experiments as experiment_tables

    attacks = attack.STAGE.resolved(cfg).output("attacks")  # where the trial's attack stage wrote its records
    return objectives_of(experiment_tables.experiments_table(cfg, attacks, outcomes=False), names, cfg.metrics, cfg.viability)


def objectives_of(table: pd.DataFrame, names: list[str], metric_cfg: DictConfig, viability: DictConfig) -> list[float]:
    """Each objective as a mean over the rows of an experiments table (one per attack cell)."""

    def robustness() -> pd.DataFrame:
        from trashfire.metrics import aggregate as aggregation  # lifelines and matplotlib: for evp and auc_r only

        return aggregation.robustness_table(aggregation.eps_curves(aggregation.with_family(table)), viability, metric_cfg.auc)

    values = {
        "acc_adv": lambda: table["acc_adv"].mean(),
        "acc_ben": lambda: table["acc_ben"].mean(),
        "trash_constant_hazard": lambda: np.mean(
            [metrics.trash(r.t_train, r.t_attack / (1 - r.acc_adv)) if r.acc_adv < 1 else 0.0 for r in table.itertuples()]
        ),
        "evp": lambda: robustness()["evp"].mean(),
        "auc_r": lambda: robustness()["auc_R"].mean(),
    }
    return [float(values[name]()) for name in names]


def set_threads(threads: int | None) -> None:
    if threads is None:
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError("threads", f"got {threads!r}; allowed: a whole number >= 1 of torch CPU threads per trial, or null for torch's default")
    import torch

    torch.set_num_threads(threads)


def run_experiment(cfg: DictConfig) -> list[float]:
    # torch, ART and the tables load here, after the config is checked: a bad value is one line
    # in a second, not after seconds of imports
    cfg = normalise(validate(cfg))
    from trashfire.data.datasets import is_prepared

    names = objective_names(cfg)
    set_threads(cfg.get("threads"))
    if cfg.get("threads") is not None or cfg.compute.workers == "auto":
        # a sweep runs trials side by side (the launcher), each a few cells: worker processes
        # would cost more than they save, and a trial's `threads` is its thread budget
        OmegaConf.update(cfg, "compute.workers", 1, force_add=True)
        if cfg.get("threads") is not None:  # the trial's thread budget for its cells as well
            OmegaConf.update(cfg, "compute.threads", cfg.threads, force_add=True)
    # data prepared for exactly this config (its folder is named by the config's hash): a
    # trial never trains on data another config prepared
    if not all(is_prepared(cfg.paths.processed, cfg, name) for name in cfg.data):
        prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    return objective_values(cfg, names)


def _refuse_thread_launchers() -> None:
    """Trials in threads of one process would share its CPU clock, and each trial's t_train
    and t_attack would count the others' work."""
    if threading.current_thread() is not threading.main_thread():
        raise ConfigError(
            "hydra.launcher",
            "trials run as threads of one process, whose CPU clock would count every trial's work; use the joblib launcher's processes (launcher=joblib) or the basic launcher",
        )


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def hydra_main(cfg: DictConfig) -> float | list[float]:
    configure_logging("trashfire.experiment")
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        _refuse_thread_launchers()
        values = run_experiment(cfg)
    except TrashfireError as err:
        if multirun:
            log.error("trial failed: %s", err)
            raise  # the sweeper records the error with the trial and goes on
        print(f"trashfire.experiment: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except Exception:
        if multirun:
            log.exception("trial failed")
        raise
    log.info("%s", ", ".join(f"{name} = {value:.4g}" for name, value in zip(objective_names(cfg), values)))
    return values[0] if len(values) == 1 else values


def main() -> None:
    try:
        check_group_options([a for a in sys.argv[1:] if not a.startswith("-")], config_dir())
    except TrashfireError as err:
        print(f"trashfire.experiment: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    Path(".sweeps").mkdir(exist_ok=True)  # Optuna's SQLite storage needs its folder
    hydra_main()


if __name__ == "__main__":
    main()
