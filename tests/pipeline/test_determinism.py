"""Determinism on CPU: the same config and seeds, run twice (one process, so the second run
starts from whatever global random state the first left), give identical weights,
accuracies and per-sample predictions (benign and adversarial, randomised defences
included), and the survival fit of one survival data set gives identical coefficients.
(Survival durations are measured times, so they are compared only through the fit.)"""

import shutil

import pandas as pd

from tests.conftest import ROOT, recorded, tiny_overrides
from trashfire.core.config import compose, validate
from trashfire.core.grid import attack_cells, model_cells
from trashfire.stages import attack, prepare, survival, timing, train

# the FC net keeps it quick: seeding (initialisation, data order, noise defences, PGD's random
# start) is the pipeline's, whatever the model
GRID = ["model=[fcnet]", "attack.fgm.values=[0.3]", "attack.pgd.values=[0.3]", "survival.fitters=[weibull,lognormal,cox]"]


def run_pipeline(folder):
    cfg = validate(compose(tiny_overrides(folder, *GRID), conf=ROOT / "conf"))
    prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    return cfg


def test_same_config_and_seed_give_identical_results_on_cpu(tmp_path):
    first, second = run_pipeline(tmp_path / "first"), run_pipeline(tmp_path / "second")

    models = [recorded(tmp_path / run / "models") for run in ("first", "second")]
    assert models[0] and models[0] == models[1]  # accuracies, weights digests, every recorded value
    assert {r["acc_ben"] for r in models[0].values()} - {0.1}  # trained, not a constant guess

    benign = [recorded(tmp_path / run / "reports" / "attacks" / "benign") for run in ("first", "second")]
    assert len(benign[0]) == len(model_cells(first)) and benign[0] == benign[1]  # accuracy of each defended model cell
    attacks = [recorded(tmp_path / run / "reports" / "attacks") for run in ("first", "second")]
    assert attacks[0].keys() == attacks[1].keys() and len(attacks[0]) == 2 * len(attack_cells(first))  # record and outcomes per cell
    for name, content in attacks[0].items():
        assert content == attacks[1][name], name  # records; per-sample predictions and perturbation norms

    timing.run(first)
    shutil.copytree(tmp_path / "first" / "reports", tmp_path / "second" / "reports", dirs_exist_ok=True)
    fits = []
    for cfg in (first, second):
        survival.run(cfg)
        fits.append(pd.read_csv(f"{cfg.paths.reports}/survival/coefficients.csv"))
    pd.testing.assert_frame_equal(fits[0], fits[1], check_exact=True)
    assert set(fits[0]["fitter"]) == {"weibull", "lognormal", "cox"}


def test_black_box_searches_repeat_exactly(tmp_path):
    """HopSkipJump's starting image and CMA-ES's seed used to come from the OS and the clock,
    so two runs of one black-box cell could differ (seen on Gauss-out: 4 of 66 HSJ cells)."""
    grid = [
        "model=[fcnet]",
        "attack=[hsj,threshold,pixel]",
        "defence=[gauss_out]",
        "attack.hsj.samples=4",
        "attack.threshold.samples=4",
        "attack.pixel.samples=4",
    ]
    runs = []
    for run in ("first", "second"):
        cfg = validate(compose(tiny_overrides(tmp_path / run, *grid), conf=ROOT / "conf"))
        prepare.run(cfg)
        train.run(cfg)
        attack.run(cfg)
        runs.append(recorded(tmp_path / run / "reports" / "attacks"))
    assert len(runs[0]) == 2 * len(attack_cells(cfg))
    for name, content in runs[0].items():
        assert content == runs[1][name], name
