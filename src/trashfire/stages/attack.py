"""DVC stage `attack`: every attack cell of the grid, per-sample failure times.

`python -m trashfire.stages.attack [--params params.yaml] [key=value ...]`; the work is
`trashfire.attacks.campaign.attack_grid`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "attack",
    params=("data", "split", "model", "defence", "train", "compute", "attack", "paths.processed", "paths.models", "paths.attacks"),
    deps=("{processed}", "{models}"),
    outs=({"{attacks}": {"persist": True}},),
)


def run(cfg):
    from trashfire.attacks import campaign

    return campaign.attack_grid(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.attack", __doc__, run, argv)


if __name__ == "__main__":
    main()
