"""DVC stage `brittle`: the LIME brittle-score of every model cell.

`python -m trashfire.stages.brittle [--params params.yaml] [key=value ...]`; the work is
`trashfire.brittle.scores.score_grid`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "brittle",
    params=("data", "split", "model", "defence", "train", "compute", "brittle", "paths.processed", "paths.models", "paths.reports"),
    deps=("{processed}", "{models}"),
    outs=({"{reports}/brittle": {"persist": True}}, "{reports}/brittle_scores.json"),  # the folder: every settings' records; the file: this config's
)


def run(cfg):
    from trashfire.brittle import scores

    return scores.score_grid(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.brittle", __doc__, run, argv)


if __name__ == "__main__":
    main()
