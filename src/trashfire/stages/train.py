"""DVC stage `train`: every training cell of the grid.

`python -m trashfire.stages.train [--params params.yaml] [key=value ...]`; the work is
`trashfire.models.training.train_grid`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "train",
    params=("data", "split", "model", "defence", "train", "compute", "paths.processed", "paths.models"),
    deps=("{processed}",),
    outs=({"{models}": {"persist": True}},),
)


def run(cfg):
    from trashfire.models import training

    return training.train_grid(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.train", __doc__, run, argv)


if __name__ == "__main__":
    main()
