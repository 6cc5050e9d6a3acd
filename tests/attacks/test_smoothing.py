"""Randomized smoothing (trashfire.attacks.smoothing) and the certify stage: Cohen et al.'s
bounds against statsmodels and scipy, CERTIFY against a classifier whose smoothed radius is
known in closed form, the certified floor under the attacked ceiling on a trained Gauss-in
model, the stage's tables, and its config's refusals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from art.estimators.classification import PyTorchClassifier
from scipy import stats
from statsmodels.stats.proportion import proportion_confint
from torch import nn

from tests.conftest import ROOT, config_refusal, tiny_config, tiny_overrides
from trashfire.attacks import certification, smoothing
from trashfire.attacks.checks import check_certify
from trashfire.attacks.target import Target
from trashfire.data.datasets import load_split
from trashfire.params import composed_yaml
from trashfire.stages import certify, prepare, train

CPU = torch.device("cpu")


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (10, 10), (0, 1000), (500, 1000), (990, 1000), (1000, 1000), (99_990, 100_000)])
@pytest.mark.parametrize("alpha", [0.001, 0.05])
def test_the_lower_bound_is_clopper_pearsons_one_sided_bound(k, n, alpha):
    """Cohen et al.'s code: proportion_confint(k, n, alpha=2 * alpha, method="beta")[0]."""
    expected = proportion_confint(k, n, alpha=2 * alpha, method="beta")[0]
    assert smoothing.lower_confidence_bound(k, n, alpha) == pytest.approx(expected, abs=1e-12)


def test_the_radius_is_sigma_times_the_normal_quantile_and_none_at_a_half_or_below():
    assert smoothing.certified_radius(0.9, 0.5) == pytest.approx(0.5 * 1.2815516, abs=1e-6)  # 0.6408
    assert smoothing.certified_radius([0.5, 0.3, 0.0], 0.5).tolist() == [-np.inf] * 3


@pytest.mark.parametrize("n_a, n_b", [(10, 0), (11, 0), (60, 40), (70, 20), (5, 5), (1, 0)])
def test_the_p_value_is_scipys_two_sided_binomial_test(n_a, n_b):
    assert smoothing.binomial_p_value(n_a, n_b) == pytest.approx(stats.binomtest(n_a, n_a + n_b, 0.5).pvalue, rel=1e-9)


def test_predict_abstains_unless_the_top_two_counts_differ_at_alpha():
    counts = np.array([[0, 11, 0], [0, 10, 0], [30, 60, 10], [20, 70, 10], [50, 50, 0]])
    assert smoothing.decide(counts, 0.001).tolist() == [1, smoothing.ABSTAIN, smoothing.ABSTAIN, 1, smoothing.ABSTAIN]


# --- a linear classifier: its smoothed classifier's radius in closed form -----------------------


def linear_target(w: torch.Tensor, b: float) -> Target:
    """Two classes, class 1 where w.x + b > 0: the smoothed classifier is the same half-space
    and its exact l2 radius at x is |w.x + b| / ||w||, whatever sigma."""
    layer = nn.Linear(w.numel(), 2)
    with torch.no_grad():
        layer.weight.copy_(torch.stack([torch.zeros_like(w), w]))
        layer.bias.copy_(torch.tensor([0.0, b]))
    model = nn.Sequential(nn.Flatten(), layer).eval().requires_grad_(False)
    classifier = PyTorchClassifier(model, nn.CrossEntropyLoss(), input_shape=(1, 4, 4), nb_classes=2, clip_values=(-10.0, 10.0))
    return Target(classifier, CPU)


def test_certify_stays_below_the_true_radius_of_a_linear_classifier():
    generator = torch.Generator().manual_seed(1)
    w, b, sigma = torch.randn(16, generator=generator), 0.3, 0.5
    target = linear_target(w, b)
    distances = torch.tensor([0.05, 0.2, 0.4, 0.6, 0.8, 1.0, -0.3, -0.7])  # signed, in units of l2 distance to the boundary
    base = torch.randn(len(distances), 16, generator=generator)
    base -= ((base @ w + b) / w.dot(w))[:, None] * w  # onto the boundary
    x = (base + distances[:, None] * w / w.norm()).view(-1, 1, 4, 4)
    true_radius = distances.abs().numpy()
    found = smoothing.certify(target, x, sigma, 100, 20_000, 0.001, 2, smoothing.noise_generator(CPU, 0), batch_size=4000)
    certified = found.prediction != smoothing.ABSTAIN
    assert (found.prediction[certified] == (distances[certified] > 0).long().numpy()).all()
    assert (found.radius[certified] < true_radius[certified]).all(), (found.radius, true_radius)
    # and not far below: pA = Phi(d / sigma) is estimated from 20,000 draws
    assert certified[:6].all() and (found.radius[certified] > true_radius[certified] - 0.1 * sigma).all(), (found.radius, true_radius)
    on_the_boundary = smoothing.predict(target, base.view(-1, 1, 4, 4), sigma, 1000, 0.001, 2, smoothing.noise_generator(CPU, 0))
    assert (on_the_boundary == smoothing.ABSTAIN).all()


def test_certify_is_reproducible_by_its_seed():
    target = linear_target(torch.ones(16), 0.0)
    x = torch.linspace(-0.5, 0.5, 6).view(-1, 1, 1, 1).expand(-1, 1, 4, 4).contiguous()
    first, again, other = (smoothing.certify(target, x, 0.5, 50, 200, 0.01, 2, smoothing.noise_generator(CPU, seed)) for seed in (0, 0, 1))
    assert np.array_equal(first.counts, again.counts) and np.array_equal(first.radius, again.radius)
    assert not np.array_equal(first.counts, other.counts)


def test_smoothadv_stays_in_the_ball_and_the_image_box():
    target = linear_target(torch.ones(16), 0.0)
    x = torch.cat([torch.full((2, 1, 4, 4), 9.9), torch.zeros(2, 1, 4, 4)])  # two by the box's upper end
    y = torch.zeros(4, dtype=torch.long)  # the attack raises w.x toward class 1: into the box's wall
    x_adv = smoothing.smooth_adv(target, x, y, 0.5, 1.0, 5, 2.5, 4, smoothing.noise_generator(CPU, 0), scale=torch.tensor([0.5]))
    moved = (x_adv - x).flatten(1).norm(dim=1) * 0.5  # in the attacker's units: standardised x scale
    assert (moved <= 1.0 + 1e-5).all() and moved[2:] == pytest.approx([1.0, 1.0], abs=1e-4)  # the ball, reached in the open
    assert x_adv.max() == 10.0 and (x_adv[:2] > x[:2]).all()  # the box, which cuts the ball


# --- a trained Gauss-in model and the stage ---------------------------------------------------


@pytest.fixture(scope="module")
def gauss_in_run(tmp_path_factory):
    """The tiny grid with the undefended and the Gauss-in (sigma 0.3) ResNet-8, trained."""
    tmp = tmp_path_factory.mktemp("certify")
    cfg = tiny_config(tmp, "defence=[none,gauss_in]", "certify.enabled=true")
    prepare.run(cfg)
    train.run(cfg)
    return cfg


def test_the_certified_floor_is_under_the_attacked_ceiling_sample_by_sample(gauss_in_run):
    """Every sample certified at eps is one that SmoothAdv + PREDICT does not show broken (each
    fails with probability <= alpha), so certified <= attacked at every eps."""
    cfg = gauss_in_run
    [cell] = certification.smoothing_cells(cfg)
    split = load_split(cfg.paths.processed, cfg, cell.train.dataset, cell.train.seed)
    artefacts = certify.STAGE.resolved(cfg)
    from trashfire.attacks.art_attacks import art_classifier

    target = Target(art_classifier(certification.load_model(artefacts, cell, split), split, cell.defence, CPU), CPU)
    x, y, sigma, grid = split.x_attack, split.y_attack, float(cell.defence["value"]), [0.1, 0.25, 1.0]
    generator = smoothing.noise_generator(CPU, 0)
    found = smoothing.certify(target, x, sigma, 100, 1000, 0.001, split.n_classes, generator)
    attacked = smoothing.attack_smoothed(
        target, x, y, sigma, grid, n=100, alpha=0.001, n_classes=split.n_classes, steps=10, step_scale=2.5, draws=8, generator=generator,
        scale=torch.from_numpy(split.std), clean=smoothing.decide(found.counts, 0.001),
    )  # fmt: skip
    for e, eps in enumerate(grid):
        certified = (found.prediction == y.numpy()) & (found.radius > eps / float(split.std.min()))
        assert not (certified & ~attacked.robust[e]).any(), eps
        assert certified.mean() <= attacked.robust[e].mean() and attacked.strict[e].mean() <= attacked.robust[e].mean()
    assert (found.radius > 0.1 / float(split.std.min())).mean() > 0.5  # the floor is not empty
    assert attacked.robust[-1].mean() < attacked.robust[0].mean()  # and the attack breaks samples


def test_the_stage_writes_one_row_per_cell_and_eps_and_one_per_sample(gauss_in_run):
    cfg = gauss_in_run
    table = certify.run(cfg)
    reports = certify.STAGE.resolved(cfg)
    cells = pd.read_csv(reports.output("certified.csv"))
    samples = pd.read_csv(reports.output("certified_samples.csv"))
    assert list(cells) == certification.CELL_COLUMNS and list(samples) == certification.SAMPLE_COLUMNS
    assert len(cells) == len(cfg.certify.eps) and set(cells["defence"]) == {"gauss_in"} and (cells["defence_value"] == 0.3).all()
    assert len(samples) == cfg.split.n_attack == cells["n_samples"].iloc[0]
    assert (cells["certified_acc"] <= cells["attacked_acc"]).all()
    assert np.allclose(cells["bracket"], cells["attacked_acc"] - cells["certified_acc"])
    pixel_std = cells["eps"] / cells["eps_standardised"]
    assert np.allclose(pixel_std, pixel_std.iloc[0]) and 0.3 < pixel_std.iloc[0] < 0.45  # the digits' training std
    for row in cells.itertuples():  # the table is the per-sample certificates counted
        certified = (samples["prediction"] == samples["label"]) & (samples["radius"] > row.eps_standardised)
        assert row.certified_acc == pytest.approx(certified.mean())
    abstained = samples["prediction"] == smoothing.ABSTAIN
    assert (samples.loc[abstained, "radius"] == -np.inf).all() and (samples.loc[~abstained, "pA_lower"] > 0.5).all()
    assert np.allclose(samples["radius_pixel"], samples["radius"] * pixel_std.iloc[0])
    pd.testing.assert_frame_equal(table.reset_index(drop=True)[certification.CELL_COLUMNS], cells, check_dtype=False)
    certify.run(cfg)  # seeded: a rerun writes the same tables
    pd.testing.assert_frame_equal(pd.read_csv(reports.output("certified.csv")), cells)


@pytest.mark.parametrize("overrides", [("defence=[none,fsq]", "certify.enabled=true"), ("defence=[none,gauss_in]", "certify.enabled=false")])
def test_without_a_smoothing_cell_or_switched_off_the_stage_writes_headers_only(tmp_path, overrides):
    cfg = tiny_config(tmp_path, *overrides)
    certify.run(cfg)  # nothing to load: no data or models needed
    reports = certify.STAGE.resolved(cfg)
    for name, columns in (("certified.csv", certification.CELL_COLUMNS), ("certified_samples.csv", certification.SAMPLE_COLUMNS)):
        table = pd.read_csv(reports.output(name))
        assert list(table) == columns and table.empty


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("certify.n0", 0, ">= 1"),
        ("certify.n", 0, ">= 1"),
        ("certify.alpha", 0.0, "in (0, 1)"),
        ("certify.alpha", 1.0, "in (0, 1)"),
        ("certify.eps", [0.25, -0.5], "> 0"),
        ("certify.eps", [], "non-empty"),
        ("certify.units", "inches", "pixel"),
        ("certify.samples", 0, ">= 1"),
        ("certify.attack.steps", 0, ">= 1"),
        ("certify.attack.draws", 0, ">= 1"),
        ("certify.attack.n", 0, ">= 1"),
        ("certify.attack.step_scale", 0, "> 0"),
    ],
)
def test_a_bad_certify_value_is_refused_naming_its_key(key, value, needle):
    refusal = config_refusal(check_certify, {key: value})
    assert refusal is not None and refusal.startswith(f"config error: {key}: ") and needle in refusal and "\n" not in refusal


def test_the_default_certify_settings_pass():
    assert config_refusal(check_certify, {}) is None


def test_a_bad_value_stops_the_stage_with_one_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(composed_yaml(tiny_overrides(tmp_path)))
    result = subprocess.run(
        [sys.executable, "-m", "trashfire.stages.certify", "--params", str(params), "certify.alpha=1.5"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "certify.alpha" in line and "1.5" in line
    assert not (tmp_path / "reports" / "certified.csv").exists()
