"""The raw data sets, read from local files into uint8 NCHW arrays: sklearn's digits, MNIST and
Fashion-MNIST IDX files, CIFAR-10/100 python batches. torchvision is imported by the loader
that needs it, so that the validator can list the sources without loading torch. A new data
set is a loader here, registered in `LOADERS`, and `conf/data/<name>.yaml`."""

from __future__ import annotations

import gzip
import pickle
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


LOADERS = {
    "sklearn_digits": load_sklearn_digits,
    "torchvision_mnist": load_torchvision_mnist,
    "torchvision_fashion_mnist": load_torchvision_fashion_mnist,
    "torchvision_cifar": load_torchvision_cifar,
}
