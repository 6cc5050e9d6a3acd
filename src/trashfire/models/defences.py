"""ART defences: train-time data augmentation and predict-time pre/post-processors."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from art.defences.postprocessor import Postprocessor
from hydra.utils import get_class


class Softmax(Postprocessor):
    """Logits to probabilities: ART's GaussianNoise and HighConfidence expect probabilities,
    while the attacks need the model's logits for their gradients."""

    def __init__(self) -> None:
        super().__init__(is_fitted=True, apply_fit=False, apply_predict=True)

    def __call__(self, preds: np.ndarray) -> np.ndarray:
        shifted = np.exp(preds - preds.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)


def _build(defence: dict[str, Any], clip_values: tuple[float, float]) -> Any:
    cls = get_class(defence["target"])
    kwargs = {defence["param"]: defence["value"], **defence.get("kwargs", {})}
    if "clip_values" in inspect.signature(cls).parameters:
        kwargs.setdefault("clip_values", clip_values)
    return cls(**kwargs)


def predict_defences(defence: dict[str, Any], clip_values: tuple[float, float]) -> dict[str, list]:
    """The ART classifier's preprocessing/postprocessing lists for a predict-time defence."""
    if defence["stage"] != "predict":
        return {"preprocessing_defences": [], "postprocessing_defences": []}
    built = _build(defence, clip_values)
    if isinstance(built, Postprocessor):
        return {"preprocessing_defences": [], "postprocessing_defences": [Softmax(), built]}
    return {"preprocessing_defences": [built], "postprocessing_defences": []}


def augment(defence: dict[str, Any], x: np.ndarray, y: np.ndarray, clip_values, seed: int):
    """Apply a train-time defence (GaussianAugmentation) to one epoch's training data."""
    np.random.seed(seed)  # ART draws its noise from NumPy's global generator
    return _build(defence, clip_values)(x, y)


def is_trainer(defence: dict[str, Any]) -> bool:
    """A defence that replaces the training loop (ART's trainers), not the training data."""
    return defence["stage"] == "train" and ".trainer." in defence["target"]


def adversarial_trainer(defence: dict[str, Any], model, optimiser, split, device) -> Any:
    """ART's AdversarialTrainer with the configured attack (PGD by default).

    The budget `value` is in pixel units (002: linf eps = 8/255 of the [0, 1] range) and is
    converted to the standardised scale the model sees by dividing by the mean per-channel
    training std (exact for grey images)."""
    from art.estimators.classification import PyTorchClassifier
    from torch import nn

    classifier = PyTorchClassifier(
        model=model,
        loss=nn.CrossEntropyLoss(),
        optimizer=optimiser,
        input_shape=split.input_shape,
        nb_classes=split.n_classes,
        clip_values=split.clip_values,
        device_type="gpu" if device.type == "cuda" else "cpu",
    )
    kwargs = dict(defence.get("kwargs", {}))
    attack_spec = dict(kwargs.pop("attack"))
    eps = float(defence["value"]) / float(np.mean(split.std))
    max_iter, step_scale = attack_spec.pop("max_iter"), attack_spec.pop("step_scale")
    norm = {"inf": np.inf, "1": 1, "2": 2}[str(attack_spec.pop("norm"))]
    attack = get_class(attack_spec.pop("_target_"))(
        classifier, norm=norm, eps=eps, eps_step=eps * step_scale / max_iter, max_iter=max_iter, verbose=False, **attack_spec
    )
    return get_class(defence["target"])(classifier, attack, **kwargs)
