"""004's fusion data set on small files in the real MNIST and CIFAR formats: images are
0.5·M + 0.5·C in pixel units, training partners are redrawn every epoch, and a model
trains on it through the ordinary stages."""

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.data.test_datasets import write_cifar, write_idx
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError
from trashfire.data.datasets import dataset_dir, load_split
from trashfire.data.loaders import load_torchvision_cifar, load_torchvision_mnist
from trashfire.data.splits import to_shape
from trashfire.stages import prepare, train


def fusion_cfg(tmp_path, *extra, name="fusion_digit"):
    return validate(
        compose(
            [
                f"data=[{name}]",
                "model=[lenet5]",
                "defence=[none]",
                "split.n_attack=10",
                "split.seeds=[0]",
                "train.epochs=[2]",
                "compute.progress=false",
                f"data.{name}.digits_root={tmp_path / 'mnist'}",
                f"data.{name}.objects_root={tmp_path / 'cifar'}",
                f"data.{name}.verify=false",
                f"paths.processed={tmp_path / 'processed'}",
                f"paths.models={tmp_path / 'models'}",
                *extra,
            ],
            conf=ROOT / "conf",
        )
    )


@pytest.fixture
def components(tmp_path):
    write_idx(tmp_path / "mnist", n=100)
    write_cifar(tmp_path / "cifar", n_per_batch=30)
    digits = to_shape(load_torchvision_mnist(str(tmp_path / "mnist")), 32, 3).images / 255.0
    objects = load_torchvision_cifar(str(tmp_path / "cifar"), verify=False).images / 255.0
    return digits, objects


def pixels(x, split):
    return x.numpy() * split.std[None, :, None, None] + split.mean[None, :, None, None]


@pytest.fixture
def digit_task(tmp_path, components):
    """The prepared digit task: its split of seed 0 and the stored pairing."""
    cfg = fusion_cfg(tmp_path)
    prepare.run(cfg)
    return load_split(cfg.paths.processed, cfg, "fusion_digit", 0), np.load(dataset_dir(cfg.paths.processed, cfg, "fusion_digit") / "split_0.npz")


def test_fusion_images_are_half_digit_half_object(components, digit_task):
    digits, objects = components
    split, meta = digit_task
    expected = 0.5 * digits[meta["test"]] + 0.5 * objects[meta["test_partner"]]
    assert split.input_shape == (3, 32, 32)
    assert np.allclose(pixels(split.x_test, split), expected, atol=1e-5)
    assert np.array_equal(split.y_test.numpy(), np.arange(200)[meta["test"]] % 10)  # the digit's label
    attack_rows = np.searchsorted(meta["test"], meta["attack"])
    assert np.allclose(pixels(split.x_attack, split), expected[attack_rows], atol=1e-5)


def test_training_partners_are_drawn_afresh_each_epoch_from_the_training_objects(components, digit_task):
    digits, objects = components
    split, meta = digit_task
    (x0, y0), (x1, y1) = split.train_epoch(0), split.train_epoch(1)
    assert np.array_equal(y0, y1) and not np.allclose(x0, x1)
    assert np.array_equal(split.train_epoch(1)[0], x1)  # reproducible per (seed, epoch)
    partner = 2 * pixels(x1, split) - digits[meta["train"]]
    flat_objects = objects[meta["partner_train"]].reshape(len(meta["partner_train"]), -1)
    nearest = np.abs(partner.reshape(len(partner), 1, -1) - flat_objects[None]).max(axis=2).min(axis=1)
    assert nearest.max() < 1e-4  # every partner is one of the training objects


def test_object_task_takes_the_cifar_label_and_a_model_trains_on_it(tmp_path, components):
    cfg = fusion_cfg(tmp_path, name="fusion_object")
    prepare.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "fusion_object", 0)
    assert len(split.y_train) + len(split.y_test) == 180  # the CIFAR files' images
    [record] = train.run(cfg)
    assert record["epochs"] == 2 and 0 <= record["acc_ben"] <= 1 and record["t_train_process"] > 0


def test_an_unknown_fusion_task_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"data.fusion_digit.task.*digit, object"):
        fusion_cfg(tmp_path, "data.fusion_digit.task=shape")
