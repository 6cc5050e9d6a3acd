"""Each defence changes what it should (training data, predictions, or both) and nothing
else; adversarial training buys PGD accuracy."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import ROOT
from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.target import Target
from trashfire.core.config import compose, validate
from trashfire.core.grid import defence_values, model_cells
from trashfire.data.datasets import load_split
from trashfire.models import build_model
from trashfire.models.defences import augment
from trashfire.stages import attack, prepare, train


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits")
    cfg = validate(
        compose(["model=[resnet18]", "split.seeds=[0]", "data.digits.subsample=400", "split.n_attack=20", f"paths.processed={folder}"], conf=ROOT / "conf")
    )
    prepare.run(cfg)
    return cfg, load_split(folder, cfg, "digits", 0)


def defence(cfg, name, value):
    return defence_values(name, cfg.defence[name])[0] | {"value": value}


def classifier_with(cfg, split, name, value=None):
    torch.manual_seed(0)
    model = build_model(dict(cfg.model.resnet18), 10, split.input_shape)
    chosen = defence(cfg, name, value) if name != "none" else defence_values("none", cfg.defence.none)[0]
    return art_classifier(model, split, chosen, torch.device("cpu"))


def test_gauss_in_adds_noisy_copies_of_half_the_training_data_and_keeps_the_rest(digits):
    cfg, split = digits
    x, y = split.x_train.numpy(), split.y_train.numpy()
    x_aug, y_aug = augment(defence(cfg, "gauss_in", 0.5), x, y, split.clip_values, seed=0)
    assert len(x_aug) == len(x) + len(x) // 2
    assert np.array_equal(x_aug[: len(x)], x) and np.array_equal(y_aug[: len(y)], y)
    assert not np.allclose(x_aug[len(x) :], x[: len(x) // 2], atol=1e-3)


def test_predict_time_defences_change_predictions_not_weights(digits):
    cfg, split = digits
    x = split.x_test.numpy()[:50]
    plain = classifier_with(cfg, split, "none").predict(x)
    probabilities = np.exp(plain - plain.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    confident = classifier_with(cfg, split, "conf", 0.5).predict(x)
    assert np.array_equal(confident, np.where(probabilities < 0.5, 0.0, probabilities))
    noisy = classifier_with(cfg, split, "gauss_out", 0.3).predict(x)
    assert not np.allclose(noisy, probabilities) and np.allclose(noisy.sum(1), 1)
    squeezed = classifier_with(cfg, split, "fsq", 2)
    low, high = split.clip_values
    levels = np.rint((np.clip(x, low, high) - low) / (high - low) * 3) / 3 * (high - low) + low
    assert np.allclose(squeezed.predict(x), classifier_with(cfg, split, "none").predict(levels), atol=1e-4)


@pytest.mark.parametrize("name, value, deterministic", [("none", None, True), ("conf", 0.5, True), ("fsq", 2, True), ("gauss_out", 0.3, False)])
def test_a_target_knows_whether_asking_a_point_again_can_change_its_answer(digits, name, value, deterministic):
    """Square answers a repeated point from its best without a pass only on such a target."""
    cfg, split = digits
    target = Target(classifier_with(cfg, split, name, value), torch.device("cpu"))
    assert target.deterministic is deterministic
    x = torch.from_numpy(split.x_test.numpy()[:20])
    with torch.no_grad():
        answers = [target.decide(target.logits(x)) for _ in range(5)]
    assert all(np.array_equal(a, answers[0]) for a in answers) or not deterministic


def test_adversarial_training_raises_pgd_accuracy_on_digits(tmp_path):
    overrides = [
        "model=[fcnet]",
        "defence=[none,adv_train]",
        "attack=[pgd]",
        "attack.pgd.values=[0.25]",
        "train.epochs=[3]",
        "compute.progress=false",
        "split.n_attack=60",
        "split.seeds=[0]",
        "attack.pgd.units=standardised",
        "train.lr=[0.05]",
        "train.lr_schedule=constant",
        "compute.workers=1",  # in this process: worker processes are test_parallel's
    ] + [f"paths.{k}={tmp_path / k}" for k in ("processed", "models", "attacks")]
    cfg = validate(compose(overrides, conf=ROOT / "conf"))
    prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    acc_adv = {json.loads(p.read_text())["defence"]: json.loads(p.read_text())["acc_adv"] for p in Path(cfg.paths.attacks).glob("*.json")}
    assert acc_adv["adv_train"] >= acc_adv["none"] + 0.1, acc_adv
    assert {c.defence["name"] for c in model_cells(cfg)} == {"none", "adv_train"}
