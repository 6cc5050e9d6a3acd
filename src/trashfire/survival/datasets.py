"""Stage `timing`, its second half: the per-sample survival data sets, built from the
experiments table and the outcome arrays that `trashfire.tables.experiments` read.

`reports/survival_data.parquet`: the survival data set of `trashfire.survival.data`, one row per
attacked sample, built as `survival.data` configures it on `timing.clock`.
`reports/eps_survival_data.parquet`: survival in eps (`trashfire.survival.epsilon`), each sample's
smallest successful perturbation per model cell and eps-grid or minimal-perturbation family.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from trashfire.core import schema
from trashfire.core.parallel import results_as_completed, torch_loaded
from trashfire.core.records import atomic_path, dead_temps_removed, write_parquet, write_table
from trashfire.core.schema import Outcomes
from trashfire.core.stage import Artefacts
from trashfire.survival import epsilon
from trashfire.survival.data import survival_table
from trashfire.tables import distances

log = logging.getLogger(__name__)


def write_survival_sets(
    cfg: DictConfig, artefacts: Artefacts, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes], best: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Write survival_data.parquet and eps_survival_data.parquet (with the ensemble's rows: `best`,
    trashfire.tables.distances.ensemble); return the survival data set."""
    survival, eps_data = _survival_and_eps_samples(cfg, experiments, outcomes_by_hash)
    _write_sets(artefacts, survival, eps_data, best, experiments)
    _log_sets(experiments, survival)
    return survival


def write_beside_distances(
    cfg: DictConfig,
    artefacts: Artefacts,
    experiments: pd.DataFrame,
    outcomes_by_hash: Mapping[str, Outcomes],
    workers: int = 1,
    prog: str = __name__,
    also: Callable[[], None] | None = None,
) -> pd.DataFrame:
    """The distance tables (`trashfire.tables.distances.write_distance_tables`), then the survival
    data sets, which take their ensemble; returns the survival data set. `also()` runs first
    here (the stage's experiments table). With `workers` > 1 the distance tables are made in a
    forked worker, which reads the outcome arrays from this process's memory, while this
    process runs `also` and builds the survival data set and the eps samples (at 10^7 samples
    each took a minute and a half on one core of two), and writes the survival data set to a
    temp file (from a thread, while it makes the eps samples); it is renamed onto its name once the worker's tables and the eps samples (with
    the ensemble's rows) are written, so that a failure in either process, or in the eps
    samples, leaves the survival data sets as they were. A killed worker's temp
    files are removed, and a killed run's before it starts."""
    folders = {artefacts.output(name).parent for name in ("attack_distances.parquet", "survival_data.parquet")}
    with dead_temps_removed(*folders):  # a killed run's temp files before, a killed worker's after
        if workers <= 1 or torch_loaded():  # a forked torch can hang on its threads
            if also is not None:
                also()
            best = distances.write_distance_tables(cfg, artefacts, experiments, outcomes_by_hash)
            return write_survival_sets(cfg, artefacts, experiments, outcomes_by_hash, best)
        return _beside_the_distance_worker(cfg, artefacts, experiments, outcomes_by_hash, workers, prog, also)


def _beside_the_distance_worker(
    cfg: DictConfig,
    artefacts: Artefacts,
    experiments: pd.DataFrame,
    outcomes_by_hash: Mapping[str, Outcomes],
    workers: int,
    prog: str,
    also: Callable[[], None] | None,
) -> pd.DataFrame:
    built: list[tuple[pd.DataFrame, pd.DataFrame]] = []
    _INHERITED[ROWS] = (experiments, outcomes_by_hash)

    def meanwhile(survival_file: Path) -> None:
        if also is not None:
            also()
        survival = _survival_samples(cfg, experiments, outcomes_by_hash)
        # pyarrow encodes and compresses without the GIL: the eps samples are made meanwhile
        with ThreadPoolExecutor(1) as writer:
            written = writer.submit(write_parquet, survival, survival_file)
            built.append((survival, _eps_samples(cfg, experiments, outcomes_by_hash)))
            written.result()

    try:  # the forked worker and this process leave the objects alive now out of their garbage collections (core.parallel)
        # renamed once the worker's tables and the eps samples with their ensemble are written
        with atomic_path(artefacts.output("survival_data.parquet")) as survival_file:
            jobs = [(cfg, artefacts)]
            ((_, best),) = results_as_completed(
                _distance_tables, jobs, workers, prog, threads=1, away=True, fork=True, meanwhile=lambda: meanwhile(survival_file)
            )
            survival, eps_data = built[0]
            _write_sets(artefacts, None, eps_data, best, experiments)
    finally:
        _INHERITED.pop(ROWS, None)
    _log_sets(experiments, survival)
    return survival


ROWS = "rows"
_INHERITED: dict[str, tuple[pd.DataFrame, Mapping[str, Outcomes]]] = {}  # what a forked worker reads instead of a pickled copy


def _distance_tables(cfg: DictConfig, artefacts: Artefacts) -> pd.DataFrame:
    return distances.write_distance_tables(cfg, artefacts, *_INHERITED[ROWS])


def _survival_and_eps_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The survival data set and the eps samples of every attack (without the ensemble's)."""
    return _survival_samples(cfg, experiments, outcomes_by_hash), _eps_samples(cfg, experiments, outcomes_by_hash)


def _survival_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    data = cfg.survival.data
    return survival_table(
        experiments,
        outcomes_by_hash,
        data.covariates,
        data.dummies,
        data.misclassified_before_attack,
        data.nonpositive_durations,
        cfg.timing.clock,
    )


def _eps_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    eps = cfg.metrics.eps_survival
    return epsilon.sample_table(experiments, outcomes_by_hash, eps.minimal_units, eps.minimal_eps_max)


def _write_sets(artefacts: Artefacts, survival: pd.DataFrame | None, eps_data: pd.DataFrame, best: pd.DataFrame | None, experiments: pd.DataFrame) -> None:
    """eps_survival_data.parquet with the ensemble's rows, and survival_data.parquet unless it is
    written (None)."""
    if best is not None and not best.empty:
        eps_data = pd.concat([eps_data, epsilon.ensemble_samples(best, experiments)], ignore_index=True)
    for name, table in (("survival_data.parquet", survival), ("eps_survival_data.parquet", eps_data)):
        if table is not None:
            write_table(table, artefacts.output(name))


def _log_sets(experiments: pd.DataFrame, survival: pd.DataFrame) -> None:
    log.info("%d experiment rows, %d survival rows, covariates: %s", len(experiments), len(survival), ", ".join(survival.columns[len(schema.SURVIVAL_IDS) :]))
