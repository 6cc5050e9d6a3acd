"""Stage `timing`, its second half: the per-sample survival data sets, built from the
experiments table and the outcome arrays that `trashfire.tables.experiments` read.

`reports/survival_data.parquet`: the survival data set of `trashfire.tables.survival_data`, one row per
attacked sample, built as `timing.survival_data` configures it on the shared `clock`.
`reports/eps_survival_data.parquet`: survival in eps (`trashfire.tables.eps_samples`), each sample's
smallest successful perturbation per model cell and eps-grid or minimal-perturbation family.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from trashfire.core import schema
from trashfire.core.parallel import results_as_completed, torch_loaded
from trashfire.core.records import atomic_path, dead_temps_removed, write_parquet, write_table
from trashfire.core.schema import Outcomes
from trashfire.core.stage import Artefacts
from trashfire.tables import distances, eps_samples
from trashfire.tables.survival_data import survival_table

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
    """The distance tables and the query curves (`trashfire.tables.distances`), then the
    survival data sets, which take the distance tables' ensemble; returns the survival data
    set. `also()` runs first (the stage's experiments table). With `workers` > 1 a forked
    worker, which reads the outcome arrays from this process's memory, runs `also`, makes the
    distance tables, then the eps samples with the ensemble's rows, while this process builds
    the survival data set, writes it (from a thread) and makes the query curves meanwhile (at
    10^7 samples each side took about 25 s on one core of two). Both
    survival data sets are written to temp files, renamed onto their names only once both
    processes are done, so that a failure in either leaves them as they were. A killed
    worker's temp files are removed, and a killed run's before it starts."""
    folders = {artefacts.output(name).parent for name in ("attack_distances.parquet", "survival_data.parquet")}
    with dead_temps_removed(*folders):  # a killed run's temp files before, a killed worker's after
        if workers <= 1 or torch_loaded():  # a forked torch can hang on its threads
            if also is not None:
                also()
            best = distances.write_distance_tables(cfg, artefacts, experiments, outcomes_by_hash)
            distances.write_query_curves(cfg, artefacts, experiments, outcomes_by_hash)
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
    built: list[pd.DataFrame] = []
    _INHERITED[ROWS], _INHERITED[ALSO] = (experiments, outcomes_by_hash), also

    def meanwhile(survival_file: Path) -> None:
        survival = _survival_samples(cfg, experiments, outcomes_by_hash)
        # pyarrow encodes and compresses without the GIL: the query curves are made meanwhile
        with ThreadPoolExecutor(1) as writer:
            written = writer.submit(write_parquet, survival, survival_file)
            distances.write_query_curves(cfg, artefacts, experiments, outcomes_by_hash)
            written.result()
        built.append(survival)

    try:  # the forked worker and this process leave the objects alive now out of their garbage collections (core.parallel)
        # both renamed once the worker's tables and eps samples and this process's survival data set are written
        with atomic_path(artefacts.output("survival_data.parquet")) as survival_file, atomic_path(artefacts.output("eps_survival_data.parquet")) as eps_file:
            jobs = [(cfg, artefacts, eps_file)]
            for _ in results_as_completed(
                _distance_tables_and_eps_samples, jobs, workers, prog, threads=1, away=True, fork=True, meanwhile=lambda: meanwhile(survival_file)
            ):
                pass  # the worker's tables are on disk
    finally:
        _INHERITED.pop(ROWS, None)
        _INHERITED.pop(ALSO, None)
    _log_sets(experiments, built[0])
    return built[0]


ROWS, ALSO = "rows", "also"
_INHERITED: dict[str, Any] = {}  # what a forked worker reads instead of a pickled copy


def _distance_tables_and_eps_samples(cfg: DictConfig, artefacts: Artefacts, eps_file: Path) -> None:
    """The worker's part: `also`, the distance tables, then the eps samples with the
    ensemble's rows, written to `eps_file` (this stage's temp file for eps_survival_data.parquet)."""
    experiments, outcomes_by_hash = _INHERITED[ROWS]
    if _INHERITED[ALSO] is not None:
        _INHERITED[ALSO]()
    best = distances.write_distance_tables(cfg, artefacts, experiments, outcomes_by_hash)
    write_parquet(_with_ensemble_rows(_eps_samples(cfg, experiments, outcomes_by_hash), best, experiments), eps_file)


def _survival_and_eps_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The survival data set and the eps samples of every attack (without the ensemble's)."""
    return _survival_samples(cfg, experiments, outcomes_by_hash), _eps_samples(cfg, experiments, outcomes_by_hash)


def _survival_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    data = cfg.timing.survival_data
    return survival_table(
        experiments,
        outcomes_by_hash,
        data.covariates,
        data.dummies,
        data.misclassified_before_attack,
        data.nonpositive_durations,
        clock=cfg.clock,
    )


def _eps_samples(cfg: DictConfig, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    eps = cfg.timing.eps_survival
    return eps_samples.sample_table(experiments, outcomes_by_hash, eps.minimal_units, eps.minimal_eps_max)


def _write_sets(artefacts: Artefacts, survival: pd.DataFrame, eps_data: pd.DataFrame, best: pd.DataFrame | None, experiments: pd.DataFrame) -> None:
    """survival_data.parquet, and eps_survival_data.parquet with the ensemble's rows."""
    write_table(survival, artefacts.output("survival_data.parquet"))
    write_table(_with_ensemble_rows(eps_data, best, experiments), artefacts.output("eps_survival_data.parquet"))


def _with_ensemble_rows(eps_data: pd.DataFrame, best: pd.DataFrame | None, experiments: pd.DataFrame) -> pd.DataFrame:
    if best is None or best.empty:
        return eps_data
    return pd.concat([eps_data, eps_samples.ensemble_samples(best, experiments)], ignore_index=True)


def _log_sets(experiments: pd.DataFrame, survival: pd.DataFrame) -> None:
    log.info("%d experiment rows, %d survival rows, covariates: %s", len(experiments), len(survival), ", ".join(survival.columns[len(schema.SURVIVAL_IDS) :]))
