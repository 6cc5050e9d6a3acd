"""Stage `timing`, its second half: the per-sample survival data sets, built from the
experiments table and the outcome arrays that `trashfire.tables.experiments` read.

`reports/survival_data.parquet`: the survival data set of `trashfire.survival.data`, one row per
attacked sample, built as `survival.data` configures it on `timing.clock`.
`reports/eps_survival_data.parquet`: survival in eps (`trashfire.survival.epsilon`), each sample's
smallest successful perturbation per model cell and eps-grid or minimal-perturbation family.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pandas as pd
from omegaconf import DictConfig

from trashfire.core import schema
from trashfire.core.records import write_table
from trashfire.core.schema import Outcomes
from trashfire.core.stage import Artefacts
from trashfire.survival import epsilon
from trashfire.survival.data import survival_table

log = logging.getLogger(__name__)


def write_survival_sets(
    cfg: DictConfig, artefacts: Artefacts, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes], best: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Write survival_data.parquet and eps_survival_data.parquet (with the ensemble's rows: `best`,
    trashfire.tables.distances.ensemble); return the survival data set."""
    data = cfg.survival.data
    survival = survival_table(
        experiments,
        outcomes_by_hash,
        data.covariates,
        data.dummies,
        data.misclassified_before_attack,
        data.nonpositive_durations,
        cfg.timing.clock,
    )
    eps = cfg.metrics.eps_survival
    eps_data = epsilon.sample_table(experiments, outcomes_by_hash, eps.minimal_units, eps.minimal_eps_max)
    if best is not None and not best.empty:
        eps_data = pd.concat([eps_data, epsilon.ensemble_samples(best, experiments)], ignore_index=True)
    for name, table in (("survival_data.parquet", survival), ("eps_survival_data.parquet", eps_data)):
        write_table(table, artefacts.output(name))
    log.info("%d experiment rows, %d survival rows, covariates: %s", len(experiments), len(survival), ", ".join(survival.columns[len(schema.SURVIVAL_IDS) :]))
    return survival
