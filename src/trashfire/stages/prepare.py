"""DVC stage `prepare`: the selected data sets, split per seed.

`python -m trashfire.stages.prepare [--params params.yaml] [key=value ...]`; the work is
`trashfire.data.prepare.prepare_all`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "prepare",
    params=("data", "split", "paths.processed"),
    deps=(),
    outs=("{processed}",),
)


def run(cfg):
    from trashfire.data import prepare

    return prepare.prepare_all(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.prepare", __doc__, run, argv)


if __name__ == "__main__":
    main()
