"""A data set's prepared split as the stages use it (`Split`), and the array helpers that
prepare, the loaders' splits and fusion's share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trashfire.core.errors import DataError
from trashfire.data.loaders import RawDataset

IDENTITY_ARRAYS = ("data_hash", "attack_data_hash")  # the config a split was prepared for (trashfire.core.grid.split_hashes)


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
    data_hash: str | None = None  # the config it was prepared for (trashfire.core.grid.split_hashes): the training data's
    attack_data_hash: str | None = None  # and the attack subset's

    def train_epoch(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The training data of one epoch: fixed, or redrawn when the data set says so."""
        return self.redraw(epoch) if self.redraw is not None else (self.x_train, self.y_train)

    @property
    def clip_values(self) -> tuple[float, float]:
        return self.clip

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def standardised_range(standardise: Callable[[np.ndarray], torch.Tensor], channels: int) -> tuple[float, float]:
    """Pixel 0 and pixel 1 through the very arithmetic that standardised the data: bounds
    computed another way can miss the data's extremes by a rounding step, which ART's
    PixelAttack and ThresholdAttack reject."""
    ends = standardise(np.stack([np.zeros((channels, 1, 1), np.float32), np.ones((channels, 1, 1), np.float32)]))
    return float(ends[0].min()), float(ends[1].max())


def split_path(folder: Path, seed: int) -> Path:
    return folder / f"split_{seed}.npz"


def checked_identity(meta: dict[str, np.ndarray], path: Path, expected: dict[str, str]) -> dict[str, str]:
    """A split's identity arrays, equal to the config's, or a DataError: data prepared for
    another config is never trained or attacked on."""
    found = {key: str(meta[key]) if key in meta else None for key in IDENTITY_ARRAYS}
    if found != expected:
        raise DataError(f"prepared data {path} were made for another config ({found['data_hash']}, not {expected['data_hash']}); rerun the prepare stage")
    return found
