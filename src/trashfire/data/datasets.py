"""Data sets as uint8 images in NCHW with a pixel maximum, and their prepared splits.

Pixel units ([0, 1] after dividing by the pixel maximum) are converted to the standardised
scale the models see with per-channel training statistics: x_std = (x_pix - mean) / std, so
eps = 1 is one standard deviation of pixel intensity (TRASHFIRE V-A).
"""

from __future__ import annotations

import gzip
import pickle
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trashfire.core.errors import DataError

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
    """MNIST from torchvision's layout (`<root>/MNIST/raw/`) or a folder holding the four
    IDX files directly (gzipped or not); train and test pooled."""
    from torchvision.datasets import MNIST

    return _load_idx(root, "MNIST", MNIST, download)


def load_torchvision_fashion_mnist(root: str, download: bool = False, **_: object) -> RawDataset:
    """Fashion-MNIST, same files and layouts as MNIST (Debian's dataset-fashion-mnist puts
    them in /usr/share/datasets/fashion-mnist)."""
    from torchvision.datasets import FashionMNIST

    return _load_idx(root, "FashionMNIST", FashionMNIST, download)


def _load_idx(root: str, name: str, dataset_class, download: bool) -> RawDataset:
    from torchvision.datasets.mnist import read_image_file, read_label_file

    if download:
        for train in (True, False):
            dataset_class(str(root), train=train, download=True)
    folder = _find_idx_folder(Path(root), name)
    arrays = {}
    with tempfile.TemporaryDirectory() as scratch:
        for stem in MNIST_FILES:
            path = _unpacked(folder, stem, Path(scratch))
            reader = read_image_file if "images" in stem else read_label_file
            try:
                arrays[stem] = reader(str(path)).numpy()
            except (RuntimeError, ValueError, AssertionError, OSError, KeyError) as err:
                # torchvision asserts on a bad magic number, without a message
                reason = str(err).splitlines()[0] if str(err) else "bad magic number"
                raise DataError(f"corrupt {name} file {folder / stem}: {reason}; expected an IDX file, MNIST's format") from None
    images = np.concatenate([arrays["train-images-idx3-ubyte"], arrays["t10k-images-idx3-ubyte"]])[:, None]
    labels = np.concatenate([arrays["train-labels-idx1-ubyte"], arrays["t10k-labels-idx1-ubyte"]])
    return RawDataset(images.astype(np.uint8), labels.astype(np.int64), pixel_max=255.0)


def _find_idx_folder(root: Path, name: str) -> Path:
    for folder in (root / name / "raw", root):
        if all((folder / stem).is_file() or (folder / f"{stem}.gz").is_file() for stem in MNIST_FILES):
            return folder
    raise DataError(
        f"{name} files not found in {root / name / 'raw'}/ nor {root}/: expected {', '.join(MNIST_FILES)} "
        f"(or .gz); point the data set's root at them, or set download=true when online"
    )


def _unpacked(folder: Path, stem: str, scratch: Path) -> Path:
    """The IDX file itself, or its .gz unpacked into scratch (the folder may be read-only)."""
    if (folder / stem).is_file():
        return folder / stem
    target = scratch / stem
    try:
        with gzip.open(folder / f"{stem}.gz", "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except (OSError, EOFError) as err:
        raise DataError(f"corrupt archive {folder / stem}.gz: {err}") from None
    return target


def load_torchvision_cifar(root: str, download: bool = False, classes: int = 10, verify: bool = True, **_: object) -> RawDataset:
    """CIFAR-10/100 in torchvision's python layout under root, train and test pooled.
    verify=false checks for the files instead of their MD5 sums (for reduced local copies)."""
    from torchvision.datasets import CIFAR10, CIFAR100

    base = {10: CIFAR10, 100: CIFAR100}[classes]
    dataset_class = base if verify else _without_checksums(base)
    folder = Path(root) / base.base_folder
    expected = [name for name, _ in base.train_list + base.test_list] + [base.meta["filename"]]
    missing = [name for name in expected if not (folder / name).is_file()]
    if missing and not download:
        raise DataError(
            f"CIFAR-{classes} files missing in {folder}/: {', '.join(missing)}; point data.cifar{classes}.root at the folder holding {base.base_folder}/, or set download=true when online"
        )
    try:
        parts = [dataset_class(str(root), train=train, download=download) for train in (True, False)]
    except (RuntimeError, OSError, ValueError, KeyError, EOFError, TypeError, pickle.UnpicklingError) as err:
        # the batches are pickles: garbage fails to unpickle, or unpickles to the wrong type
        raise DataError(f"cannot read CIFAR-{classes} in {folder}/: {err}; expected torchvision's python batches ({base.base_folder}/)") from None
    images = np.concatenate([p.data for p in parts]).transpose(0, 3, 1, 2)  # NHWC -> NCHW
    labels = np.concatenate([np.asarray(p.targets) for p in parts])
    return RawDataset(np.ascontiguousarray(images, dtype=np.uint8), labels.astype(np.int64), pixel_max=255.0)


def _without_checksums(base: type) -> type:
    """torchvision's class with every MD5 set to None, which its integrity check reads as
    'the file exists'."""
    return type(
        f"Unverified{base.__name__}",
        (base,),
        {
            "train_list": [[name, None] for name, _ in base.train_list],
            "test_list": [[name, None] for name, _ in base.test_list],
            "meta": base.meta | {"md5": None},
        },
    )


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


LOADERS = {
    "sklearn_digits": load_sklearn_digits,
    "torchvision_mnist": load_torchvision_mnist,
    "torchvision_fashion_mnist": load_torchvision_fashion_mnist,
    "torchvision_cifar": load_torchvision_cifar,
}


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
