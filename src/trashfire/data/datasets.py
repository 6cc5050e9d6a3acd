"""Data sets as uint8 images in NCHW with a pixel maximum, and their prepared splits.

Pixel units ([0, 1] after dividing by the pixel maximum) are converted to the standardised
scale the models see with per-channel training statistics: x_std = (x_pix - mean) / std, so
eps = 1 is one standard deviation of pixel intensity (TRASHFIRE V-A).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trashfire.core.errors import DataError
from trashfire.data.loaders import RawDataset


def to_shape(data: RawDataset, size: int | None, channels: int | None) -> RawDataset:
    """Resize (bilinear) and repeat grey channels, as 004 upscales MNIST to 3x32x32 so the
    same architecture, and the same initial weights, serve MNIST and CIFAR-10."""
    images = torch.from_numpy(data.images)
    if size is not None and tuple(images.shape[2:]) != (size, size):
        resized = torch.nn.functional.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
        images = resized.round().clamp(0, 255).to(torch.uint8)
    if channels is not None and images.shape[1] != channels:
        if images.shape[1] != 1:
            raise DataError(f"cannot turn {images.shape[1]}-channel images into {channels} channels; only grey images are repeated")
        images = images.repeat(1, channels, 1, 1)
    return RawDataset(images.numpy(), data.labels, data.pixel_max)


def balanced_subset(labels: np.ndarray, n: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of n samples with (as nearly as n allows) equal counts per class."""
    per_class = [n // n_classes + (k < n % n_classes) for k in range(n_classes)]
    picks = []
    for k, count in enumerate(per_class):
        members = np.flatnonzero(labels == k)
        if len(members) < count:
            raise DataError(f"class {k} has {len(members)} test samples, fewer than the {count} the attack subset needs; lower split.n_attack")
        picks.append(rng.choice(members, size=count, replace=False))
    return np.sort(np.concatenate(picks))


@dataclass
class Split:
    """One permutation of a data set, standardised with its training statistics."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_attack: torch.Tensor
    y_attack: torch.Tensor
    mean: np.ndarray  # per channel, pixel units
    std: np.ndarray
    n_classes: int
    clip: tuple[float, float]  # the standardised image of the pixel range [0, 1], over all channels
    redraw: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None = None  # per-epoch training data (fusion)

    def train_epoch(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The training data of one epoch: fixed, or redrawn when the data set says so."""
        return self.redraw(epoch) if self.redraw is not None else (self.x_train, self.y_train)

    @property
    def clip_values(self) -> tuple[float, float]:
        return self.clip

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


SPLIT_ARRAYS = ("train", "test", "attack", "mean", "std", "pixel_max")  # what prepare writes per seed


def _prepared(path: Path, load: Callable[[Path], object]):
    """One file of the prepare stage's output, or a DataError that names it and the fix."""
    if not path.is_file():
        raise DataError(f"prepared data missing: {path}; run the prepare stage (dvc repro prepare)")
    try:
        return load(path)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # a truncated .npz is a bad zip
        raise DataError(f"corrupt prepared data {path}: {err}; rerun the prepare stage") from None


def _arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz read now: np.load reads lazily, and a damaged member would
    otherwise fail later, outside the check."""
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def standardised_range(standardise: Callable[[np.ndarray], torch.Tensor], channels: int) -> tuple[float, float]:
    """Pixel 0 and pixel 1 through the very arithmetic that standardised the data: bounds
    computed another way can miss the data's extremes by a rounding step, which ART's
    PixelAttack and ThresholdAttack reject."""
    ends = standardise(np.stack([np.zeros((channels, 1, 1), np.float32), np.ones((channels, 1, 1), np.float32)]))
    return float(ends[0].min()), float(ends[1].max())


def dataset_dir(processed: str | Path, name: str) -> Path:
    return Path(processed) / name


_SPLITS: dict[tuple[str, str, int], Split] = {}  # per process: a worker's jobs share them


def cached_split(processed: str | Path, dataset: str, seed: int, n_classes: int) -> Split:
    """`load_split`, once per process (a stage's worker runs many cells of one split)."""
    key = (str(processed), dataset, seed)
    if key not in _SPLITS:
        _SPLITS[key] = load_split(processed, dataset, seed, n_classes)
    return _SPLITS[key]


def load_split(processed: str | Path, name: str, seed: int, n_classes: int) -> Split:
    from trashfire.data.fusion import is_fusion, load_fusion_split

    folder = dataset_dir(processed, name)
    if is_fusion(folder):
        return load_fusion_split(folder, seed, n_classes)
    images = _prepared(folder / "images.npy", np.load)
    labels = _prepared(folder / "labels.npy", np.load)
    meta = _prepared(folder / f"split_{seed}.npz", _arrays)
    missing = sorted(set(SPLIT_ARRAYS) - set(meta))
    if missing:
        raise DataError(f"corrupt prepared data {folder / f'split_{seed}.npz'}: arrays {missing} missing; rerun the prepare stage")
    mean, std = meta["mean"], meta["std"]
    pixel_max = float(meta["pixel_max"])

    def standardise(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x - mean[None, :, None, None]) / std[None, :, None, None]).float()

    def standardised(index: np.ndarray) -> torch.Tensor:
        return standardise(images[index].astype(np.float32) / pixel_max)

    def targets(index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(labels[index])

    return Split(
        standardised(meta["train"]),
        targets(meta["train"]),
        standardised(meta["test"]),
        targets(meta["test"]),
        standardised(meta["attack"]),
        targets(meta["attack"]),
        mean.astype(np.float32),
        std.astype(np.float32),
        n_classes,
        standardised_range(standardise, len(mean)),
    )
