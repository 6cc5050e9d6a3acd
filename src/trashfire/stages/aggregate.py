"""DVC stage `aggregate`: TRASH, EVP, R, survival in eps, brittle tables, findings and cards.

`python -m trashfire.stages.aggregate [--params params.yaml] [key=value ...]`; the work is
`trashfire.metrics.aggregate.aggregate_reports`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "aggregate",
    params=(
        "metrics",
        "viability",
        "budget.share",
        "defence",
        "model",
        "paths.reports",
    ),  # model: the imported ones' published figures, for the cards; budget.share: the validity flag's
    deps=(
        "{reports}/experiments.csv",
        "{reports}/eps_survival_data.parquet",
        "{reports}/attack_distances.parquet",
        "{reports}/certified.csv",
        "{reports}/survival",
        "{reports}/budget",
        "{reports}/brittle_scores.json",
    ),
    outs=(
        "{reports}/trash.csv",
        "{reports}/trash_summary.csv",
        "{reports}/depth_decomposition.csv",
        "{reports}/robustness.csv",
        "{reports}/auc_table.csv",
        "{reports}/tau_table.csv",
        "{reports}/evp_convergence.csv",
        "{reports}/findings.csv",
        "{reports}/validity.csv",
        "{reports}/eps_survival.csv",
        "{reports}/optimality.csv",
        "{reports}/optimality_ranking.csv",
        "{reports}/cards",
        {"{reports}/brittle.csv": {"cache": False}},
        {"{reports}/curves.csv": {"cache": False}},
        {"{reports}/evp_tau.csv": {"cache": False}},
        {"{reports}/eps_survival_curves.csv": {"cache": False}},
        {"{reports}/metrics.json": {"cache": False}},  # every metric; DVC shows headline.json's
    ),
    metrics=({"{reports}/headline.json": {"cache": False}},),  # git-tracked (.gitignore), so `dvc exp show` has each experiment's
)


def run(cfg):
    from trashfire.metrics import aggregate

    return aggregate.aggregate_reports(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.aggregate", __doc__, run, argv)


if __name__ == "__main__":
    main()
