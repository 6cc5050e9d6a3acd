"""DVC stage `survival`: survival models of time to failure, compared.

`python -m trashfire.stages.survival [--params params.yaml] [key=value ...]`; the work is
`trashfire.survival.analysis.analyse`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "survival",
    params=(
        "survival",
        "clock",
        "budget.factor",
        "budget.draws",
        "budget.seed",
        "compute.workers",
        "compute.threads",
        "paths.reports",
    ),  # budget.*: the cure models' sufficiency at the budget stage's factor
    deps=("{reports}/survival_data.parquet",),
    outs=("{reports}/survival",),
)


def run(cfg):
    from trashfire.survival import analysis

    return analysis.analyse(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.survival", __doc__, run, argv)


if __name__ == "__main__":
    main()
