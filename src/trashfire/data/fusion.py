"""004's fusion data set: every image is 0.5·M + 0.5·C in pixel units, M an MNIST digit
upscaled to 3x32x32 and C a CIFAR-10 image. The task picks the label: `digit` (M's) or
`object` (C's). Each task sample is paired with a partner image of the other data set
drawn uniformly from the same part of its split; training pairs are drawn afresh each
epoch, test and attack pairs once per permutation seed.

Stored under `<processed>/<name>/<prepared hash>/`: both components' uint8 images and labels, and per seed
each component's 80/20 split plus the fixed test partners.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from sklearn.model_selection import train_test_split

from trashfire.core.errors import DataError
from trashfire.core.records import atomic_path, write_npy, write_npz
from trashfire.data.loaders import RawDataset, load_torchvision_cifar, load_torchvision_mnist
from trashfire.data.splits import Split, balanced_subset, checked_identity, split_path, standardised_range, to_shape

PIXEL_MAX = 255.0


def load_components(spec: DictConfig) -> dict[str, RawDataset]:
    digits = to_shape(load_torchvision_mnist(spec.digits_root, download=spec.get("download", False)), 32, 3)
    objects = load_torchvision_cifar(spec.objects_root, download=spec.get("download", False), classes=10, verify=spec.get("verify", True))
    return {"digit": digits, "object": objects}


def partner_of(task: str) -> str:
    return "object" if task == "digit" else "digit"


def fuse(task_images: np.ndarray, partner_images: np.ndarray) -> np.ndarray:
    """0.5·M + 0.5·C in pixel units [0, 1], float32."""
    return (0.5 * task_images.astype(np.float32) + 0.5 * partner_images.astype(np.float32)) / PIXEL_MAX


def _split(labels: np.ndarray, seed: int, test_size: float) -> tuple[np.ndarray, np.ndarray]:
    train, test = train_test_split(np.arange(len(labels)), test_size=test_size, stratify=labels, random_state=seed)
    return np.sort(train), np.sort(test)


def split_permutation(components: dict[str, RawDataset], task: str, seed: int, test_size: float, n_attack: int, n_classes: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    own, other = components[task], components[partner_of(task)]
    train, test = _split(own.labels, seed, test_size)
    partner_train, partner_test = _split(other.labels, seed, test_size)
    test_partner = rng.choice(partner_test, size=len(test))
    # statistics of one training pairing: the mean is that of every pairing, the std nearly
    stats_partner = rng.choice(partner_train, size=len(train))
    pixels = fuse(own.images[train], other.images[stats_partner]).astype(np.float64)
    attack = test[balanced_subset(own.labels[test], n_attack, n_classes, rng)]
    return {
        "train": train,
        "test": test,
        "attack": attack,
        "test_partner": test_partner,
        "partner_train": partner_train,
        "mean": pixels.mean(axis=(0, 2, 3)),
        "std": pixels.std(axis=(0, 2, 3)),
        "pixel_max": np.float64(PIXEL_MAX),
    }


def prepare_fusion(spec: DictConfig, split: DictConfig, folder: Path, identities: dict[int, dict[str, str]], subsample) -> Path:
    """Both components and a split per seed, each carrying its identity (`identities`)."""
    components = {k: subsample(v, spec.get("subsample")) for k, v in load_components(spec).items()}
    for component, data in components.items():
        for kind, array in (("images", data.images), ("labels", data.labels)):
            write_npy(folder / f"{component}_{kind}.npy", array)
    for seed, identity in identities.items():
        arrays = split_permutation(components, spec.task, seed, split.test_size, split.n_attack, spec.n_classes)
        write_npz(split_path(folder, seed), compressed=False, **arrays, **{key: np.str_(value) for key, value in identity.items()})
    with atomic_path(folder / "fusion.json") as tmp:
        tmp.write_text(json.dumps({"task": spec.task}))
    return folder


def is_fusion(folder: Path) -> bool:
    return (folder / "fusion.json").is_file()


def load_fusion_split(folder: Path, seed: int, n_classes: int, expected: dict[str, str]) -> Split:
    try:
        task = json.loads((folder / "fusion.json").read_text())["task"]
        own = [np.load(folder / f"{task}_{kind}.npy") for kind in ("images", "labels")]
        other_images = np.load(folder / f"{partner_of(task)}_images.npy")
        meta = dict(np.load(split_path(folder, seed)))
    except FileNotFoundError as err:
        raise DataError(f"prepared fusion data missing: {err.filename}; run the prepare stage") from None
    except (ValueError, OSError, KeyError, EOFError) as err:
        raise DataError(f"corrupt prepared fusion data in {folder}: {err}; rerun the prepare stage") from None
    identity = checked_identity(meta, split_path(folder, seed), expected)
    images, labels = own
    mean, std = meta["mean"].astype(np.float32), meta["std"].astype(np.float32)

    def standardise(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x - mean[None, :, None, None]) / std[None, :, None, None])

    def standardised(index: np.ndarray, partners: np.ndarray) -> torch.Tensor:
        return standardise(fuse(images[index], other_images[partners]))

    def train_epoch(epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh partners for every epoch, the same for a given (seed, epoch)."""
        partners = np.random.default_rng([seed, epoch]).choice(meta["partner_train"], size=len(meta["train"]))
        return standardised(meta["train"], partners), torch.from_numpy(labels[meta["train"]])

    attack_partner = meta["test_partner"][np.searchsorted(meta["test"], meta["attack"])]
    x_train, y_train = train_epoch(0)
    return Split(
        x_train,
        y_train,
        standardised(meta["test"], meta["test_partner"]),
        torch.from_numpy(labels[meta["test"]]),
        standardised(meta["attack"], attack_partner),
        torch.from_numpy(labels[meta["attack"]]),
        mean,
        std,
        n_classes,
        standardised_range(standardise, len(mean)),
        redraw=train_epoch,
        **identity,
    )
