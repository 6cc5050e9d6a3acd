"""Stage `brittle`: 002's black-box brittle-score of every model cell (a trained cell plus
its predict-time defence), skipping cells already recorded.

brittle-score = (1/(n·d)) Σ_i ‖LIME(M(x_i))‖₁ (002 eq. 2): captum's Lime explains the
predicted class's probability on n unlabelled test images, each cut into d_i superpixels;
the score is the mean over the images of ‖w_i‖₁ / d_i. The black box M is the model as a
user queries it: ART's classifier with the defence's pre/post-processing. One record per
model cell, `<reports>/brittle/<hash>.json`, keyed by the model cell and the LIME settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import torch
from captum._utils.models.linear_model import SkLearnLinearRegression
from captum.attr import Lime
from omegaconf import DictConfig
from skimage.segmentation import slic
from torch import nn
from tqdm import tqdm

from trashfire.attacks.art_attacks import art_classifier
from trashfire.brittle.spec import BrittleRecord, brittle_hash, brittle_record_path, brittle_settings, write_current_scores
from trashfire.core.clocks import Stopwatch
from trashfire.core.errors import ConfigError
from trashfire.core.grid import ModelCell, model_cells
from trashfire.core.parallel import describe, resolve_workers, run_jobs, threads_per_cell
from trashfire.core.records import config_hash, recorded, remove_dead_temps
from trashfire.core.schema import TrainRecord, cell_labels
from trashfire.core.stage import Artefacts
from trashfire.data.datasets import Split, cached_split
from trashfire.models.architectures import resolve_device
from trashfire.models.defences import Softmax
from trashfire.models.training import load_weights, record_path

log = logging.getLogger(__name__)

Forward = Callable[[torch.Tensor], torch.Tensor]


# --- superpixels: LIME's interpretable features --------------------------------------------


def superpixels(images: np.ndarray, segments: Mapping[str, Any]) -> torch.Tensor:
    """Integer feature masks (N, 1, H, W), labels 0..d_i-1 per image, for pixel-unit images
    (N, C, H, W) in [0, 1]. One mask serves every channel: a superpixel is switched off in
    all of them at once, as lime's image explainer does."""
    images = np.asarray(images, dtype=np.float64)
    if segments["kind"] == "grid":
        labels = np.tile(grid_labels(*images.shape[2:], segments["patch"]), (len(images), 1, 1))
    elif segments["kind"] == "slic":
        labels = np.stack([slic_labels(image, segments["n_segments"], segments["compactness"]) for image in images])
    else:
        raise ConfigError("brittle.segments.kind", f"got {segments['kind']!r}; allowed: slic, grid")
    return torch.from_numpy(labels.astype(np.int64)).unsqueeze(1)


def grid_labels(height: int, width: int, patch: int) -> np.ndarray:
    """Square patches of side `patch`, row-major; the last row/column may be narrower."""
    rows, cols = np.arange(height) // patch, np.arange(width) // patch
    return rows[:, None] * (cols[-1] + 1) + cols[None, :]


def slic_labels(image: np.ndarray, n_segments: int, compactness: float) -> np.ndarray:
    """SLIC on one (C, H, W) image in [0, 1]. Colour stays in RGB (no Lab conversion) so that
    one compactness means the same on grey and colour data sets."""
    grey = image.shape[0] == 1
    pixels = image[0] if grey else np.moveaxis(image, 0, -1)
    labels = slic(
        pixels,
        n_segments=n_segments,
        compactness=compactness,
        start_label=0,
        channel_axis=None if grey else -1,
        convert2lab=False,
    )
    return consecutive(labels)


def consecutive(labels: np.ndarray) -> np.ndarray:
    """Relabel to 0..d-1: captum counts max+1 features, so a gap would be a dead feature."""
    return np.unique(labels, return_inverse=True)[1].reshape(labels.shape)


def n_features(masks: torch.Tensor) -> np.ndarray:
    """d_i of each image: its number of superpixels."""
    return np.array([len(torch.unique(mask)) for mask in masks])


# --- the black box -----------------------------------------------------------------------


def returns_probabilities(classifier) -> bool:
    """A postprocessing defence (conf, gauss_out) runs after our Softmax, so ART already
    returns (defended) probabilities; otherwise it returns the model's logits."""
    return any(isinstance(step, Softmax) for step in classifier.postprocessing_defences or [])


def black_box(classifier) -> Forward:
    """ART's classifier as a torch forward that returns class probabilities: the output a
    user of the defended model sees (HighConfidence's zeroed, GaussianNoise's noisy ones)."""
    probabilities = returns_probabilities(classifier)

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = torch.from_numpy(classifier.predict(x.detach().cpu().numpy(), batch_size=max(len(x), 1)))
        return out if probabilities else out.softmax(dim=1)

    return forward


# --- the score ---------------------------------------------------------------------------


def coin_flips(generator: torch.Generator) -> Callable[..., torch.Tensor]:
    """captum's default sampler (each superpixel on with probability 1/2), drawn from our own
    generator so that a run is reproducible and leaves torch's global one alone."""

    def perturb(original: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        probs = torch.full((1, int(kwargs["num_interp_features"])), 0.5)
        return torch.bernoulli(probs, generator=generator).long().to(original.device)

    return perturb


def brittle_scores(
    forward: Forward,
    images: torch.Tensor,
    masks: torch.Tensor,
    targets: torch.Tensor | np.ndarray,
    lime_samples: int,
    perturbations_per_eval: int,
    seed: int,
) -> np.ndarray:
    """‖w_i‖₁ / d_i per image: w_i are the LIME weights of the target class's probability
    over image i's d_i superpixels. A superpixel that is off takes the value 0, the training
    mean in the standardised space. The surrogate is weighted least squares (002: "simply
    performing linear regression"), not captum's default Lasso(alpha=0.01), whose penalty
    shrinks the very weights the score sums. Images are explained one at a time so that
    each has its own d_i; captum would give a batch the largest d of all of them."""
    generator = torch.Generator().manual_seed(seed)
    lime = Lime(forward, interpretable_model=SkLearnLinearRegression(), perturb_func=coin_flips(generator))
    scores = np.empty(len(images))
    for i, (image, mask, target) in enumerate(zip(images, masks, targets)):
        weights = lime.attribute(
            image[None],
            target=int(target),
            feature_mask=mask[None],
            baselines=0.0,
            n_samples=lime_samples,
            perturbations_per_eval=perturbations_per_eval,
            return_input_shape=False,
        )
        scores[i] = float(weights.abs().sum()) / weights.numel()
    return scores


def predicted_classes(forward: Forward, images: torch.Tensor) -> torch.Tensor:
    """The class each image's explanation is about: the black box's own prediction (the
    samples are unlabelled, 002)."""
    with torch.no_grad():
        return forward(images).argmax(dim=1)


def sample_positions(n_test: int, n: int, seed: int) -> np.ndarray:
    """A fixed seeded choice of test-split positions: the same images for every model cell
    of a (data set, permutation), so that cells are compared on one sample."""
    return np.sort(np.random.default_rng(seed).choice(n_test, size=min(n, n_test), replace=False))


def pixel_units(x: torch.Tensor, split: Split) -> np.ndarray:
    """Standardised images back to [0, 1] pixel units, where SLIC's compactness is meant."""
    pixels = x.numpy() * split.std[None, :, None, None] + split.mean[None, :, None, None]
    return np.clip(pixels, 0.0, 1.0)


# --- the stage ---------------------------------------------------------------------------


class Samples:
    """The n images of one (data set, permutation) and their superpixels, shared by its cells."""

    def __init__(self, split: Split, settings: dict[str, Any]):
        self.split = split
        self.positions = sample_positions(len(split.x_test), settings["n_samples"], settings["seed"])
        self.images = split.x_test[self.positions]
        self.masks = superpixels(pixel_units(self.images, split), settings["segments"])
        self.features = n_features(self.masks)


def score_model_cell(model: nn.Module, train_record: TrainRecord, model_cell: ModelCell, samples: Samples, settings: dict[str, Any], device) -> BrittleRecord:
    """One cell's record; its clocks time the LIME runs (predictions and explanations)."""
    forward = black_box(art_classifier(model, samples.split, model_cell.defence, device))
    np.random.seed(settings["seed"])  # GaussianNoise draws from NumPy's global generator
    with Stopwatch(device) as watch:
        targets = predicted_classes(forward, samples.images)
        scores = brittle_scores(
            forward,
            samples.images,
            samples.masks,
            targets,
            settings["lime_samples"],
            settings["perturbations_per_eval"],
            settings["seed"],
        )
    return BrittleRecord(
        brittle_hash=brittle_hash(model_cell.hash, settings),
        model_hash=model_cell.hash,
        train_hash=model_cell.train.hash,
        data_hash=samples.split.data_hash,
        **cell_labels(train_record, model_cell.defence),
        n_samples=len(scores),
        n_features_mean=float(samples.features.mean()),
        brittle_score=float(scores.mean()),
        brittle_score_sd=float(scores.std(ddof=1)) if len(scores) > 1 else 0.0,
        image_scores=scores.tolist(),
        positions=samples.positions.tolist(),
        lime_samples=settings["lime_samples"],
        perturbations_per_eval=settings["perturbations_per_eval"],
        brittle_seed=settings["seed"],
        segments=settings["segments"],
        t_brittle_process=watch.elapsed.process,
        t_brittle_wall=watch.elapsed.wall,
        device=str(device),
    )


_SAMPLES: dict[tuple, Samples] = {}  # per process: a worker's jobs share them


def cached_samples(cfg: DictConfig, processed: Path, dataset: str, seed: int, settings: dict[str, Any]) -> Samples:
    key = (str(processed), dataset, seed, config_hash(settings))
    if key not in _SAMPLES:
        _SAMPLES[key] = Samples(cached_split(processed, cfg, dataset, seed), settings)
    return _SAMPLES[key]


def brittle_job(cfg: DictConfig, artefacts: Artefacts, settings: dict[str, Any], group: list[ModelCell]) -> int:
    """The pending cells of one training cell (its predict-time defences share its weights)."""
    device = resolve_device(cfg.compute.device)
    folder, models = artefacts.output("brittle"), artefacts.input("models")
    train = group[0].train
    samples = cached_samples(cfg, artefacts.input("processed"), train.dataset, train.seed, settings)
    train_record = TrainRecord.read(record_path(models, train.hash))
    model = load_weights(models, train, samples.split).to(device)
    for cell in group:
        record = score_model_cell(model, train_record, cell, samples, settings, device)
        record.write(brittle_record_path(folder, record.brittle_hash))
    return len(group)


def scored(folder: Path, cell: ModelCell, settings: dict[str, Any]) -> bool:
    """A whole record of the cell whose images come from the data this config prepares: one
    of other data, or a schema-1 record without a data hash, is scored again."""
    record = recorded(brittle_record_path(folder, brittle_hash(cell.hash, settings)))
    return record is not None and record.get("data_hash") == cell.train.data_hash


def score_grid(cfg: DictConfig, artefacts: Artefacts) -> int:
    """Score every pending model cell; returns how many were computed."""
    device = resolve_device(cfg.compute.device)
    folder = artefacts.output("brittle")
    settings = brittle_settings(cfg)
    cells = model_cells(cfg)
    if folder.is_dir():
        remove_dead_temps(folder)  # a killed run's half-written records
    pending = [cell for cell in cells if not scored(folder, cell, settings)]
    workers = resolve_workers(cfg.compute.workers, device.type)
    threads = threads_per_cell(workers, cfg.compute.threads)
    jobs = [(cfg, artefacts, settings, list(group)) for _, group in groupby(pending, key=lambda cell: cell.train.hash)]
    log.info(
        "%d model cells, %d scored, %d to score on %s (%s)", len(cells), len(cells) - len(pending), len(pending), device, describe(workers, threads, len(jobs))
    )
    jobs.sort(key=lambda job: job[3][0].train.depth or 1, reverse=True)  # the longest first keeps the workers busy to the end
    with tqdm(total=len(pending), desc="brittle cells", disable=not cfg.compute.progress) as progress:
        run_jobs(brittle_job, jobs, workers, progress, log.name, threads)
    write_current_scores(artefacts.output("brittle_scores.json"), folder, [cell.hash for cell in cells], settings)
    return len(pending)
