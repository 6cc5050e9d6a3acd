"""002's brittle-score with captum's Lime: superpixels, hand-checkable scores, and the stage
on the tiny config with its per-cell cache."""

import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from sklearn.datasets import load_digits
from torch import nn

from trashfire.brittle import scores as brittleness
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import model_cells
from trashfire.stages import brittle, prepare, train

GRID = {"kind": "grid", "patch": 2}
SLIC = {"kind": "slic", "n_segments": 16, "compactness": 0.1}


def digits(n: int) -> np.ndarray:
    """Real 8x8 digits in [0, 1] pixel units, (n, 1, 8, 8)."""
    return load_digits().images[:n, None] / 16.0


class Constant(nn.Module):
    """The same probabilities whatever the input: nothing for LIME to explain."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor([[0.7, 0.2, 0.1]]).expand(len(x), 3)


def small_convnet() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 64, 3), nn.Softmax(dim=1)).eval()


def standardised(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((pixels - pixels.mean()) / pixels.std()).float()


def test_grid_masks_count_patches_and_broadcast_over_channels():
    masks = brittleness.superpixels(np.zeros((3, 1, 8, 8)), GRID)
    assert masks.shape == (3, 1, 8, 8) and masks.dtype == torch.int64
    assert brittleness.n_features(masks).tolist() == [16, 16, 16]
    assert torch.bincount(masks[0].flatten()).tolist() == [4] * 16
    colour = brittleness.superpixels(np.zeros((2, 3, 7, 7)), {"kind": "grid", "patch": 3})
    assert colour.shape == (2, 1, 7, 7) and brittleness.n_features(colour).tolist() == [9, 9]  # 3 + 3 + a 1-pixel edge


def test_slic_masks_are_consecutive_from_zero_on_real_digits():
    masks = brittleness.superpixels(digits(10), SLIC)
    assert masks.shape == (10, 1, 8, 8)
    for mask in masks:
        labels = torch.unique(mask).tolist()
        assert labels == list(range(len(labels))) and len(labels) >= 2
    halves = np.zeros((1, 3, 8, 8))
    halves[0, 0, :, 4:] = 1.0  # a red right half: colour is segmented too
    assert brittleness.n_features(brittleness.superpixels(halves, SLIC))[0] >= 2


def test_a_constant_model_scores_zero_and_below_a_varying_one():
    images = standardised(digits(4))
    masks = brittleness.superpixels(digits(4), GRID)
    targets = torch.zeros(4, dtype=torch.long)
    flat = brittleness.brittle_scores(Constant(), images, masks, targets, lime_samples=40, perturbations_per_eval=40, seed=0)
    varying = brittleness.brittle_scores(small_convnet(), images, masks, targets, lime_samples=40, perturbations_per_eval=40, seed=0)
    assert flat == pytest.approx(np.zeros(4), abs=1e-6)
    assert (varying > 1e-4).all()


def test_a_model_linear_in_the_superpixels_scores_its_mean_absolute_weight():
    """On an all-ones image with baseline 0, each superpixel's mean pixel is its on/off
    indicator, so p0 = 0.5 + sum_j a_j * indicator_j and least squares recovers a exactly."""
    weights = torch.tensor([0.1, -0.2, 0.05, 0.15])
    masks = brittleness.superpixels(np.zeros((2, 1, 4, 4)), GRID)  # 2x2 patches: 4 superpixels

    def forward(x: torch.Tensor) -> torch.Tensor:
        means = torch.stack([x[:, 0][:, masks[0, 0] == j].mean(dim=1) for j in range(4)], dim=1)
        p0 = 0.5 + means @ weights
        return torch.stack([p0, 1 - p0], dim=1)

    images = torch.ones(2, 1, 4, 4)
    for target in (0, 1):  # the other class's probability has the opposite weights
        scores = brittleness.brittle_scores(forward, images, masks, torch.full((2,), target), 30, 10, seed=1)
        assert scores == pytest.approx([0.125, 0.125], abs=1e-5)


def test_the_same_seed_gives_the_same_scores():
    images, masks = standardised(digits(3)), brittleness.superpixels(digits(3), SLIC)
    targets = brittleness.predicted_classes(small_convnet(), images)

    def scores(seed):
        return brittleness.brittle_scores(small_convnet(), images, masks, targets, 30, 30, seed)

    np.testing.assert_array_equal(scores(5), scores(5))
    assert not np.array_equal(scores(5), scores(6))


def test_samples_are_one_seeded_choice():
    first = brittleness.sample_positions(80, 10, seed=0)
    assert np.array_equal(first, brittleness.sample_positions(80, 10, seed=0))
    assert len(set(first)) == 10 and first.max() < 80
    assert len(brittleness.sample_positions(5, 10, seed=0)) == 5  # fewer test images than asked: all of them


def test_stage_records_every_model_cell_once_and_recomputes_a_corrupt_record(tiny_cfg):
    prepare.run(tiny_cfg)
    train.run(tiny_cfg)
    cfg = OmegaConf.merge(tiny_cfg, {"brittle": {"n_samples": 3, "lime_samples": 20, "perturbations_per_eval": 20}})
    cells = model_cells(cfg)
    assert brittle.run(cfg) == len(cells)
    settings = brittleness.brittle_settings(cfg)
    paths = [brittleness.brittle_record_path(f"{cfg.paths.reports}/brittle", brittleness.brittle_hash(cell.hash, settings)) for cell in cells]
    records = [json.loads(path.read_text()) for path in paths]
    assert {r["defence"] for r in records} == {"none", "gauss_in", "gauss_out", "conf", "fsq"}
    assert len({tuple(r["positions"]) for r in records}) == 1  # every cell scores the same images
    for record in records:
        assert record["n_samples"] == 3 and record["lime_samples"] == 20 and record["n_features_mean"] >= 2
        assert record["brittle_score"] == pytest.approx(np.mean(record["image_scores"]))
        # HighConfidence zeroes probabilities under its cutoff (0.5): when every one of the 20
        # LIME samples falls under it, the target's probability is a constant 0 and so is the score
        assert (record["brittle_score"] > 0 or record["defence"] == "conf") and record["brittle_score"] >= 0 and record["brittle_score_sd"] >= 0
        assert record["t_brittle_process"] > 0 and record["t_brittle_wall"] > 0
    assert brittle.run(cfg) == 0
    noisy = [r["defence"] for r in records].index("gauss_out")
    paths[noisy].write_text('{"brittle_score": 0.')  # a half-written record is no record
    assert brittle.run(cfg) == 1
    # recomputed alike, output noise included: only the clocks differ
    assert without_clocks(json.loads(paths[noisy].read_text())) == without_clocks(records[noisy])


def without_clocks(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith("t_brittle")}


@pytest.mark.parametrize(
    "override, key",
    [
        ("brittle.segments.kind=hexagons", "brittle.segments.kind"),
        ("brittle.n_samples=0", "brittle.n_samples"),
        ("brittle.lime_samples=1", "brittle.lime_samples"),
        ("brittle.segments.compactness=0", "brittle.segments.compactness"),
        ("metrics.brittle.robust_acc.eps=-0.1", "metrics.brittle.robust_acc.eps"),
    ],
)
def test_bad_brittle_settings_name_their_key(conf_dir, override, key):
    with pytest.raises(ConfigError) as err:
        validate(compose([override], conf=conf_dir))
    assert err.value.key == key and "\n" not in str(err.value)


@pytest.mark.parametrize("old, new", [("metrics.brittle.n_samples", "brittle.n_samples"), ("metrics.brittle.segments.kind", "brittle.segments.kind")])
def test_a_moved_lime_setting_is_refused_with_its_new_key(conf_dir, tmp_path, capsys, old, new):
    """The LIME settings moved from `metrics.brittle` to the brittle stage's own section: an
    override or a params file that still gives the old key is refused with one line naming
    the new key, never read as a default."""
    with pytest.raises(ConfigError) as err:
        compose([f"{old}=5"], conf=conf_dir)
    assert err.value.key == old and f"moved to {new}" in str(err.value)
    stale = compose([], conf=conf_dir)
    OmegaConf.update(stale, "metrics.brittle.n_samples", 7, force_add=True)  # a params.yaml composed before the move
    with pytest.raises(ConfigError) as err:
        validate(stale)
    assert err.value.key == "metrics.brittle.n_samples" and "moved to brittle.n_samples" in str(err.value)
    params = tmp_path / "params.yaml"
    params.write_text(OmegaConf.to_yaml(compose([], conf=conf_dir)))
    with pytest.raises(SystemExit) as code:
        brittle.main(["--params", str(params), "metrics.brittle.seed=1"])
    assert code.value.code == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "metrics.brittle.seed" in line and "moved to brittle.seed" in line
