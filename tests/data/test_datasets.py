"""Loaders on real local files: MNIST from ../shared/data/mnist, and small files written in
the real IDX and CIFAR formats; missing and corrupt files are named."""

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, SHARED_MNIST
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.core.grid import training_cells
from trashfire.data.datasets import load_split
from trashfire.data.loaders import (
    MNIST_FILES,
    load_sklearn_digits,
    load_torchvision_cifar,
    load_torchvision_fashion_mnist,
    load_torchvision_mnist,
)
from trashfire.data.splits import to_shape
from trashfire.models.training import initial_model
from trashfire.stages import prepare

needs_shared_mnist = pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="../shared/data/mnist is not beside the checkout")


def write_idx(folder, n=30, size=28, packed=False, seed=0):
    """The four MNIST-layout IDX files: n training and n test images of size x size."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for stem in MNIST_FILES:
        if "images" in stem:
            body = struct.pack(">BBBBIII", 0, 0, 8, 3, n, size, size) + rng.integers(0, 256, (n, size, size), dtype=np.uint8).tobytes()
        else:
            body = struct.pack(">BBBBI", 0, 0, 8, 1, n) + (np.arange(n) % 10).astype(np.uint8).tobytes()
        path = folder / (f"{stem}.gz" if packed else stem)
        path.write_bytes(gzip.compress(body) if packed else body)


def write_cifar(root, n_per_batch=6, classes=10):
    """CIFAR-10's python layout: 5 training batches, a test batch and the meta file."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
        data[0, 1024 + 5 * 32 + 7] = 201  # green channel, row 5, column 7 of the first image
        batch = {"data": data, "labels": [i % classes for i in range(n_per_batch)]}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"class{i}" for i in range(classes)]}))


def test_digits_are_uint8_nchw_with_their_pixel_maximum():
    data = load_sklearn_digits()
    assert data.images.shape == (1797, 1, 8, 8) and data.images.dtype == np.uint8
    assert data.images.max() == 16 and data.pixel_max == 16.0


@needs_shared_mnist
def test_real_mnist_loads_from_a_read_only_folder_of_gz_files():
    data = load_torchvision_mnist(str(SHARED_MNIST))
    assert data.images.shape == (70000, 1, 28, 28) and data.pixel_max == 255.0
    assert np.bincount(data.labels).tolist()[:3] == [6903, 7877, 6990]


def test_mnist_loads_from_torchvisions_layout(tmp_path):
    write_idx(tmp_path / "MNIST" / "raw", n=12)
    data = load_torchvision_mnist(str(tmp_path))
    assert data.images.shape == (24, 1, 28, 28) and data.labels.tolist()[:3] == [0, 1, 2]


def test_fashion_mnist_reads_gzipped_idx_files(tmp_path):
    write_idx(tmp_path, n=10, packed=True)
    assert load_torchvision_fashion_mnist(str(tmp_path)).images.shape == (20, 1, 28, 28)


def test_missing_mnist_files_name_both_layouts_and_the_files(tmp_path):
    with pytest.raises(DataError, match=r"MNIST/raw/ nor .*: expected train-images-idx3-ubyte, .*t10k-labels-idx1-ubyte"):
        load_torchvision_mnist(str(tmp_path))


def test_corrupt_mnist_archive_is_named(tmp_path):
    for stem in MNIST_FILES:
        (tmp_path / f"{stem}.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="corrupt archive .*train-images-idx3-ubyte.gz"):
        load_torchvision_mnist(str(tmp_path))


def test_cifar_loader_reads_the_real_format_channel_first(tmp_path):
    write_cifar(tmp_path)
    data = load_torchvision_cifar(str(tmp_path), classes=10, verify=False)
    assert data.images.shape == (36, 3, 32, 32) and data.images.dtype == np.uint8
    assert data.images[0, 1, 5, 7] == 201
    assert sorted(set(data.labels)) == [0, 1, 2, 3, 4, 5]


def test_missing_cifar_files_stop_with_the_folder_and_files(tmp_path):
    with pytest.raises(DataError, match=r"CIFAR-10 files missing in .*cifar-10-batches-py/: data_batch_1, .*test_batch, batches.meta"):
        load_torchvision_cifar(str(tmp_path), classes=10)


def test_cifar_files_failing_their_checksums_are_reported(tmp_path):
    write_cifar(tmp_path)
    with pytest.raises(DataError, match="cannot read CIFAR-10"):
        load_torchvision_cifar(str(tmp_path), classes=10, verify=True)


def test_upscaled_mnist_repeats_grey_into_three_channels():
    digits = load_sklearn_digits()
    big = to_shape(digits, size=32, channels=3)
    assert big.images.shape == (1797, 3, 32, 32)
    assert np.array_equal(big.images[:, 0], big.images[:, 2])


def test_one_seed_gives_identical_initial_weights_on_mnist_upscaled_and_cifar(tmp_path):
    write_idx(tmp_path / "mnist", n=100)
    write_cifar(tmp_path / "cifar", n_per_batch=30)
    overrides = [
        "data=[mnist,cifar10]",
        "model=[lenet5]",
        "defence=[none]",
        "split.n_attack=10",
        "train.epochs=[1]",
        f"data.mnist.root={tmp_path / 'mnist'}",
        "data.mnist.size=32",
        "data.mnist.channels=3",
        f"data.cifar10.root={tmp_path / 'cifar'}",
        "data.cifar10.verify=false",
        f"paths.processed={tmp_path / 'processed'}",
    ]
    cfg = validate(compose(overrides, conf=ROOT / "conf"))
    prepare.run(cfg)
    weights = {}
    for cell in training_cells(cfg):
        split = load_split(cfg.paths.processed, cfg, cell.dataset, cell.seed)
        assert split.input_shape == (3, 32, 32)
        weights[cell.dataset] = initial_model(cell, split).state_dict()
    assert all(torch.equal(weights["mnist"][k], weights["cifar10"][k]) for k in weights["mnist"])


def test_a_worker_keeps_only_the_splits_it_used_last(tmp_path, monkeypatch):
    """A split of upscaled MNIST is 0.9 GB: a worker that kept every seed's took 14 GB."""
    from tests.conftest import tiny_config
    from trashfire.data import datasets

    cfg = tiny_config(tmp_path, "split.seeds=[0,1,2]")
    monkeypatch.setattr(datasets, "_SPLITS", datasets.OrderedDict())
    loads = []
    monkeypatch.setattr(datasets, "load_split", lambda processed, cfg, dataset, seed: loads.append(seed) or seed)
    for seed in (0, 1, 0, 2, 0, 1):
        assert datasets.cached_split(cfg.paths.processed, cfg, "digits", seed) == seed
    assert loads == [0, 1, 2, 1]  # 0 stays while it is used; 1, used least recently, goes for 2
    assert len(datasets._SPLITS) == datasets.SPLITS_KEPT
