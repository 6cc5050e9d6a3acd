"""DVC stage `budget`: is each attack's budget large enough? Calibration reruns at a larger
budget on a share of the model cells, and per attack cell the share of its samples that the
larger budget would break, estimated from its standing samples' margins.

`python -m trashfire.stages.budget [--params params.yaml] [key=value ...]`; the work is
`trashfire.budget.check.check`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "budget",
    params=(
        "data",
        "split",
        "model",
        "defence",
        "train",
        "compute",
        "attack",
        "budget",
        "paths.processed",
        "paths.models",
        "paths.attacks",
        "paths.reports",
    ),
    deps=("{processed}", "{models}", "{attacks}"),
    outs=({"{reports}/budget_reruns": {"persist": True}}, "{reports}/budget"),
)


def run(cfg):
    from trashfire.budget import check as budget_check

    return budget_check.check(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.budget", __doc__, run, argv)


if __name__ == "__main__":
    main()
