"""Stage `prepare`: load each data set, split it 80/20 (stratified) per permutation seed,
compute per-channel training statistics and pick a class-balanced attack subset."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from sklearn.model_selection import train_test_split

from trashfire.core.checks import RULES, UNHASHED, as_list
from trashfire.core.errors import DataError
from trashfire.core.grid import split_hashes
from trashfire.core.records import write_npy, write_npz
from trashfire.core.stage import Artefacts
from trashfire.data.datasets import dataset_dir
from trashfire.data.fusion import prepare_fusion
from trashfire.data.loaders import LOADERS, RawDataset
from trashfire.data.splits import balanced_subset, split_path, to_shape

log = logging.getLogger(__name__)


def subsample(data: RawDataset, n: int | None) -> RawDataset:
    """A stratified subset of n images, the same for every permutation seed."""
    if n is None or n >= len(data.labels):
        return data
    keep, _ = train_test_split(np.arange(len(data.labels)), train_size=n, stratify=data.labels, random_state=0)
    keep = np.sort(keep)
    return RawDataset(data.images[keep], data.labels[keep], data.pixel_max)


def split_permutation(data: RawDataset, seed: int, test_size: float, n_attack: int, n_classes: int) -> dict[str, np.ndarray]:
    index = np.arange(len(data.labels))
    train, test = train_test_split(index, test_size=test_size, stratify=data.labels, random_state=seed)
    pixels = data.images[train].astype(np.float64) / data.pixel_max
    mean = pixels.mean(axis=(0, 2, 3))
    std = pixels.std(axis=(0, 2, 3))
    attack = test[balanced_subset(data.labels[test], n_attack, n_classes, np.random.default_rng(seed))]
    return {"train": np.sort(train), "test": np.sort(test), "attack": attack, "mean": mean, "std": std, "pixel_max": np.float64(data.pixel_max)}


# a data option's keys that prepare applies itself, or that are no input at all; the loader
# gets every other key (a loader takes **_ for those it does not read)
PREPARE_KEYS = ("name", "source", "n_classes", "subsample", "size", "channels", RULES, UNHASHED)


def loader_args(spec: DictConfig) -> dict:
    """The keys of a data option its loader reads: all but PREPARE_KEYS, so that a new key
    reaches the loader with no list to extend (and enters the cell hash, trashfire.core.grid)."""
    return {key: OmegaConf.to_container(value) if OmegaConf.is_config(value) else value for key, value in spec.items() if key not in PREPARE_KEYS}


def prepare_dataset(cfg: DictConfig, name: str, processed: Path) -> Path:
    """One data set's images and a split per seed, in the folder named by exactly the config
    that makes them, each split carrying its identity (`split_hashes`) for its readers."""
    spec, split, folder = cfg.data[name], cfg.split, dataset_dir(processed, cfg, name)
    identities = {seed: split_hashes(cfg, name, seed) for seed in as_list(split.seeds)}
    if spec.source == "fusion":
        prepare_fusion(spec, split, folder, identities, subsample)
        log.info("%s: fusion (%s task), %d permutation(s) -> %s", name, spec.task, len(as_list(split.seeds)), folder)
        return folder
    data = subsample(LOADERS[spec.source](**loader_args(spec)), spec.get("subsample"))
    data = to_shape(data, spec.get("size"), spec.get("channels"))
    n_labels = len(np.unique(data.labels))
    if n_labels != spec.n_classes:
        raise DataError(f"data.{name}.n_classes is {spec.n_classes} but the data hold {n_labels} classes")
    for array_name, array in (("images", data.images), ("labels", data.labels)):
        write_npy(folder / f"{array_name}.npy", array)
    for seed, identity in identities.items():
        arrays = split_permutation(data, seed, split.test_size, split.n_attack, spec.n_classes)
        write_npz(split_path(folder, seed), compressed=False, **arrays, **{key: np.str_(value) for key, value in identity.items()})
    log.info("%s: %d images, %d permutation(s) -> %s", name, len(data.labels), len(as_list(split.seeds)), folder)
    return folder


def prepare_all(cfg: DictConfig, artefacts: Artefacts) -> list[Path]:
    return [prepare_dataset(cfg, name, artefacts.output("processed")) for name in cfg.data]
