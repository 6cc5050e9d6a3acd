"""DVC stage `timing`: the experiments table and the per-sample survival data sets (in time and in eps).

`python -m trashfire.stages.timing [--params params.yaml] [key=value ...]`; the work is
`trashfire.metrics.experiments.build_tables`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage
from trashfire.metrics import experiments

STAGE = Stage(
    "timing",
    params=(
        "data",
        "split",
        "model",
        "defence",
        "train",
        "attack",
        "timing",
        "survival.data",
        "metrics.degenerate",
        "metrics.evp",
        "metrics.eps_survival",
        "paths.attacks",
        "paths.reports",
    ),
    deps=("reports/attacks",),
    outs=("reports/experiments.csv", "reports/survival_data.csv", "reports/eps_survival_data.csv"),
)


def run(cfg):
    return experiments.build_tables(STAGE.view(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.timing", experiments.__doc__, run, argv)


if __name__ == "__main__":
    main()
