"""DVC stage `certify`: randomized smoothing's certified accuracy of each Gauss-in model cell
beside the attacked accuracy of the same smoothed classifier (SmoothAdv), per l2 eps.

`python -m trashfire.stages.certify [--params params.yaml] [key=value ...]`; the work is
`trashfire.attacks.certification.certify_grid`.
"""

from trashfire.core.cli import run_cli
from trashfire.core.stage import Stage

STAGE = Stage(
    "certify",
    params=("data", "split", "model", "defence", "train", "compute", "certify", "paths.processed", "paths.models", "paths.reports"),
    deps=("{processed}", "{models}"),
    outs=("{reports}/certified.csv", "{reports}/certified_samples.csv"),
)


def run(cfg):
    view, artefacts = STAGE.view(cfg), STAGE.resolved(cfg)
    if not view.certify.get("enabled", True):
        from trashfire.attacks.certified import no_certificate  # light: no torch, no ART

        return no_certificate(artefacts)
    from trashfire.attacks import certification

    return certification.certify_grid(view, artefacts)


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.stages.certify", __doc__, run, argv)


if __name__ == "__main__":
    main()
