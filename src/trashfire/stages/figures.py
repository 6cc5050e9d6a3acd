"""DVC stage `figures`: the figures and report.html.

`python -m trashfire.stages.figures [--params params.yaml] [key=value ...]`; the work is
`trashfire.report.figures.draw_report`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "figures",
    params=("paths.reports", "report"),
    deps=(
        "{reports}/experiments.csv",
        "{reports}/trash.csv",
        "{reports}/trash_summary.csv",
        "{reports}/depth_decomposition.csv",
        "{reports}/robustness.csv",
        "{reports}/auc_table.csv",
        "{reports}/tau_table.csv",
        "{reports}/evp_tau.csv",
        "{reports}/evp_convergence.csv",
        "{reports}/curves.csv",
        "{reports}/eps_survival.csv",
        "{reports}/eps_survival_curves.csv",
        "{reports}/brittle.csv",
        "{reports}/validity.csv",
        "{reports}/cards",
        "{reports}/metrics.json",
        "{reports}/findings.csv",
        "{reports}/query_curves.csv",
        "{reports}/minimal_eps_check.csv",
        "{reports}/optimality.csv",
        "{reports}/optimality_ranking.csv",
        "{reports}/certified.csv",
        "{reports}/survival",
        "{reports}/budget",
        "src/trashfire/report/templates",  # the page's templates and CSS: package data, not imports
    ),
    outs=("{reports}/figures", {"{reports}/report.html": {"cache": False}}),
)


def run(cfg):
    from trashfire.report import figures

    return figures.draw_report(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.figures", __doc__, run, argv)


if __name__ == "__main__":
    main()
