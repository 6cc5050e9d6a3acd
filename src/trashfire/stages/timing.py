"""DVC stage `timing`: the experiments table and the per-sample survival data sets (in time and in eps).

`python -m trashfire.stages.timing [--params params.yaml] [key=value ...]`; the work is
`trashfire.tables.experiments` (experiments.csv), `trashfire.tables.distances` (each sample's
smallest successful eps per attack and over all of a norm's, the grid check, accuracy against
queries) and `trashfire.tables.datasets` (the survival data sets), from one read of the records.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "timing",
    params=(
        "data",
        "split",
        "model",
        "defence",
        "train",
        "attack",
        "compute.workers",
        "timing",
        "clock",
        "viability",
        "paths.attacks",
        "paths.reports",
    ),
    deps=("{attacks}",),
    outs=(
        "{reports}/experiments.csv",
        "{reports}/survival_data.parquet",
        "{reports}/eps_survival_data.parquet",
        "{reports}/attack_distances.parquet",
        "{reports}/minimal_eps_check.csv",
        "{reports}/query_curves.csv",
    ),
)


def run(cfg):
    import pandas as pd

    from trashfire.core.parallel import resolve_workers
    from trashfire.tables import datasets, experiments

    view, artefacts = STAGE.view(cfg), STAGE.resolved(cfg)
    with pd.option_context("mode.copy_on_write", True):  # a column taken, dropped or reindexed copies no frame: 10^7 rows are GBs
        workers = resolve_workers(view.compute.workers, "cpu")
        table, outcomes = experiments.read_experiments_of_grid(view, artefacts, workers)
        write_table = lambda: experiments.write_experiments(artefacts, table, outcomes)  # noqa: E731 -- beside the distance worker
        return table, datasets.write_beside_distances(view, artefacts, table, outcomes, workers, "trashfire.stages.timing", also=write_table)


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.timing", __doc__, run, argv)


if __name__ == "__main__":
    main()
