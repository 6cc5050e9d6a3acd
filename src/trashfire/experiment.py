"""Hydra entry point: prepare, train and attack the grid a composed config selects, in this
process, writing to the same per-cell caches the DVC stages use. With the Optuna sweeper
each trial is one cell of a grid:

    python -m trashfire.experiment                                  # the default grid, once
    python -m trashfire.experiment model=resnet34 defence=fsq       # one model, one defence
    python -m trashfire.experiment --multirun hparams_search=training_grid

A trial returns its objective (`objective`: acc_adv or acc_ben, mean over its cells). A
trial with a bad config logs one line and returns NaN, which Optuna records as failed.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from trashfire import attack, prepare, train
from trashfire.cli import configure_logging
from trashfire.config import check_group_options, config_dir, validate
from trashfire.datasets import dataset_dir
from trashfire.errors import ConfigError, TrashfireError
from trashfire.grid import attack_cells
from trashfire.records import read_json

log = logging.getLogger("trashfire.experiment")  # not __name__: it is __main__ under python -m
OBJECTIVES = ("acc_adv", "acc_ben")


def run_experiment(cfg: DictConfig) -> float:
    validate(cfg)
    objective = cfg.get("objective", "acc_adv")
    if objective not in OBJECTIVES:
        raise ConfigError("objective", f"got {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    unprepared = {name: spec for name, spec in cfg.data.items() if not all((dataset_dir(cfg.paths.processed, name) / f"split_{s}.npz").is_file() for s in cfg.split.seeds)}
    if unprepared:
        prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    values = [read_json(attack.attack_record_path(cfg.paths.attacks, cell.hash))[objective] for cell in attack_cells(cfg)]
    return float(np.mean(values))


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def hydra_main(cfg: DictConfig) -> float:
    configure_logging("trashfire.experiment")
    try:
        value = run_experiment(cfg)
    except TrashfireError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            log.error("trial failed: %s", err)
            return math.nan
        print(f"trashfire.experiment: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    log.info("%s = %.4f", cfg.get("objective", "acc_adv"), value)
    return value


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
