"""Data sets as uint8 images in NCHW with a pixel maximum, and their prepared splits.

Pixel units ([0, 1] after dividing by the pixel maximum) are converted to the standardised
scale the models see with per-channel training statistics: x_std = (x_pix - mean) / std, so
eps = 1 is one standard deviation of pixel intensity (TRASHFIRE V-A).
"""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trashfire.errors import DataError

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@dataclass
class RawDataset:
    images: np.ndarray  # uint8, (N, C, H, W)
    labels: np.ndarray  # int64, (N,)
    pixel_max: float


def load_sklearn_digits(root: str | None = None, **_: object) -> RawDataset:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.uint8)[:, None, :, :]
    return RawDataset(images, digits.target.astype(np.int64), pixel_max=16.0)


def load_torchvision_mnist(root: str, download: bool = False, **_: object) -> RawDataset:
    """MNIST from `<root>/MNIST/raw/` (torchvision's layout), train and test pooled."""
    from torchvision.datasets import MNIST

    raw = Path(root) / "MNIST" / "raw"
    if not download:
        _unpack_gz(raw)
        missing = [name for name in MNIST_FILES if not (raw / name).is_file()]
        if missing:
            raise DataError(
                f"MNIST files missing in {raw}/: {', '.join(missing)} (or their .gz); "
                "put them there, point data.mnist.root at their parent, or set data.mnist.download=true when online"
            )
    try:
        parts = [MNIST(str(root), train=train, download=download) for train in (True, False)]
    except (RuntimeError, OSError, ValueError) as err:
        raise DataError(f"cannot read MNIST under {raw}/: {err}") from None
    images = np.concatenate([p.data.numpy() for p in parts])[:, None, :, :]
    labels = np.concatenate([p.targets.numpy() for p in parts]).astype(np.int64)
    return RawDataset(images.astype(np.uint8), labels, pixel_max=255.0)


def _unpack_gz(raw: Path) -> None:
    """torchvision reads unpacked IDX files; unpack the .gz ones shipped beside them."""
    for name in MNIST_FILES:
        target, packed = raw / name, raw / f"{name}.gz"
        if not target.is_file() and packed.is_file():
            tmp = target.with_suffix(".tmp")
            try:
                with gzip.open(packed, "rb") as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (OSError, EOFError) as err:
                tmp.unlink(missing_ok=True)
                raise DataError(f"corrupt archive {packed}: {err}") from None
            tmp.replace(target)


LOADERS = {"sklearn_digits": load_sklearn_digits, "torchvision_mnist": load_torchvision_mnist}


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

    @property
    def clip_values(self) -> tuple[float, float]:
        """The standardised image of the pixel range [0, 1], over all channels."""
        return float(np.min(-self.mean / self.std)), float(np.max((1 - self.mean) / self.std))

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def dataset_dir(processed: str | Path, name: str) -> Path:
    return Path(processed) / name


def load_split(processed: str | Path, name: str, seed: int, n_classes: int) -> Split:
    folder = dataset_dir(processed, name)
    try:
        images = np.load(folder / "images.npy")
        labels = np.load(folder / "labels.npy")
        meta = np.load(folder / f"split_{seed}.npz")
    except FileNotFoundError as err:
        raise DataError(f"prepared data missing: {err.filename}; run the prepare stage (dvc repro prepare)") from None
    except (ValueError, OSError, EOFError) as err:
        raise DataError(f"corrupt prepared data in {folder}: {err}; rerun the prepare stage") from None
    mean, std = meta["mean"], meta["std"]
    pixel_max = float(meta["pixel_max"])

    def standardised(index: np.ndarray) -> torch.Tensor:
        x = images[index].astype(np.float32) / pixel_max
        return torch.from_numpy((x - mean[None, :, None, None]) / std[None, :, None, None]).float()

    def targets(index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(labels[index])

    return Split(
        standardised(meta["train"]), targets(meta["train"]),
        standardised(meta["test"]), targets(meta["test"]),
        standardised(meta["attack"]), targets(meta["attack"]),
        mean.astype(np.float32), std.astype(np.float32), n_classes,
    )
