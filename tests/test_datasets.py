"""Loaders on real local files: MNIST from ../shared/data/mnist, and the missing-file message."""

import numpy as np
import pytest

from trashfire.datasets import load_sklearn_digits, load_torchvision_mnist
from trashfire.errors import DataError
from tests.conftest import SHARED_MNIST


def test_digits_are_uint8_nchw_with_their_pixel_maximum():
    data = load_sklearn_digits()
    assert data.images.shape == (1797, 1, 8, 8) and data.images.dtype == np.uint8
    assert data.images.max() == 16 and data.pixel_max == 16.0


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="../shared/data/mnist is not beside the checkout")
def test_mnist_loads_from_a_local_root_in_torchvisions_layout(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for packed in SHARED_MNIST.glob("*.gz"):
        (raw / packed.name).symlink_to(packed)
    data = load_torchvision_mnist(str(tmp_path))
    assert data.images.shape == (70000, 1, 28, 28) and data.pixel_max == 255.0
    assert np.bincount(data.labels).tolist()[:3] == [6903, 7877, 6990]


def test_missing_mnist_files_name_the_folder_and_files(tmp_path):
    with pytest.raises(DataError, match=r"MNIST/raw/: train-images-idx3-ubyte, .*t10k-labels-idx1-ubyte"):
        load_torchvision_mnist(str(tmp_path))


def test_corrupt_mnist_archive_is_reported(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="corrupt archive"):
        load_torchvision_mnist(str(tmp_path))
