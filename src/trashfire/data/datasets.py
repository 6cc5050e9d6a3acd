"""Data sets as uint8 images in NCHW with a pixel maximum, and their prepared splits.

Pixel units ([0, 1] after dividing by the pixel maximum) are converted to the standardised
scale the models see with per-channel training statistics: x_std = (x_pix - mean) / std, so
eps = 1 is one standard deviation of pixel intensity (TRASHFIRE V-A).
"""

from __future__ import annotations

import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from trashfire.core.checks import as_list
from trashfire.core.errors import DataError
from trashfire.core.grid import prepared_hash, split_hashes
from trashfire.data.splits import Split, checked_identity, split_path, standardised_range

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


def dataset_dir(processed: str | Path, cfg: DictConfig, name: str) -> Path:
    """Where prepare writes a data set for this config: <processed>/<name>/<prepared hash>."""
    return Path(processed) / name / prepared_hash(cfg, name)


def is_prepared(processed: str | Path, cfg: DictConfig, name: str) -> bool:
    """Every seed's split of the data set prepared for exactly this config."""
    folder = dataset_dir(processed, cfg, name)
    return all(split_path(folder, seed).is_file() for seed in as_list(cfg.split.seeds))


# per process, the splits used last: a worker's jobs share them. Bounded, because a split of
# MNIST upscaled to 3x32x32 is 0.9 GB: five seeds kept in each of two workers took 14 GB.
_SPLITS: OrderedDict[tuple[str, str, int], Split] = OrderedDict()
SPLITS_KEPT = 2


def cached_split(processed: str | Path, cfg: DictConfig, dataset: str, seed: int) -> Split:
    """`load_split` of the data prepared for this config, once per process while it is among
    the SPLITS_KEPT used last (a stage's worker runs many cells of one split in a row)."""
    key = (str(dataset_dir(processed, cfg, dataset)), dataset, seed)
    if key in _SPLITS:
        _SPLITS.move_to_end(key)
    else:
        _SPLITS[key] = load_split(processed, cfg, dataset, seed)
        while len(_SPLITS) > SPLITS_KEPT:
            _SPLITS.popitem(last=False)
    return _SPLITS[key]


def load_split(processed: str | Path, cfg: DictConfig, dataset: str, seed: int) -> Split:
    """The split of one seed of the data prepared for this config."""
    return read_split(dataset_dir(processed, cfg, dataset), seed, cfg.data[dataset].n_classes, split_hashes(cfg, dataset, seed))


def read_split(folder: Path, seed: int, n_classes: int, expected: dict[str, str]) -> Split:
    """The split of one seed in a prepared folder, checked to be the one `expected` names."""
    from trashfire.data.fusion import is_fusion, load_fusion_split

    if is_fusion(folder):
        return load_fusion_split(folder, seed, n_classes, expected)
    images = _prepared(folder / "images.npy", np.load)
    labels = _prepared(folder / "labels.npy", np.load)
    path = split_path(folder, seed)
    meta = _prepared(path, _arrays)
    missing = sorted(set(SPLIT_ARRAYS) - set(meta))
    if missing:
        raise DataError(f"corrupt prepared data {path}: arrays {missing} missing; rerun the prepare stage")
    identity = checked_identity(meta, path, expected)
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
        **identity,
    )
