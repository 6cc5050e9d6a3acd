"""DVC stage `certify`: randomized smoothing's certified accuracy of each Gauss-in model cell
beside the attacked accuracy of the same smoothed classifier (SmoothAdv), per l2 eps.

`python -m trashfire.stages.certify [--params params.yaml] [key=value ...]`; the work is
`trashfire.attacks.certification.certify_grid`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "certify",
    params=("data", "split", "model", "defence", "train", "certify", "paths.processed", "paths.models", "paths.reports"),
    deps=("{processed}", "{models}"),
    outs=("{reports}/certified.csv", "{reports}/certified_samples.csv"),
)


def run(cfg):
    from trashfire.attacks import certification

    return certification.certify_grid(STAGE.view(cfg), STAGE.resolved(cfg))


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.certify", __doc__, run, argv)


if __name__ == "__main__":
    main()
