"""ART evasion attacks built from one attack-grid entry."""

from __future__ import annotations

from typing import Any

import numpy as np
from art.estimators.classification import PyTorchClassifier
from hydra.utils import get_class
from torch import nn

from trashfire.defences import predict_defences

NORMS = {"inf": np.inf, "1": 1, "2": 2}


def art_classifier(model: nn.Module, split, defence: dict[str, Any], device) -> PyTorchClassifier:
    """The model as ART sees it, frozen: the attacks need input gradients only, and frozen
    weights make ART's FGM and PGD 1.06-1.3x the plain-torch cost instead of 1.4-1.7x."""
    model.eval().requires_grad_(False)
    return PyTorchClassifier(
        model=model,
        loss=nn.CrossEntropyLoss(),
        input_shape=split.input_shape,
        nb_classes=split.n_classes,
        clip_values=split.clip_values,
        device_type="gpu" if device.type == "cuda" else "cpu",
        **predict_defences(defence, split.clip_values),
    )


def attack_strength(spec: dict[str, Any], pixel_std: float) -> float:
    """The strength on the standardised scale the model sees. units: pixel means [0, 1]
    pixel units (004's eps grid), divided by the mean per-channel training std (exact for
    grey images; on CIFAR's channels the stds differ by under 10%)."""
    value = float(spec["value"])
    return value / pixel_std if spec.get("units", "standardised") == "pixel" else value


def build_attack(classifier: PyTorchClassifier, spec: dict[str, Any], pixel_std: float = 1.0) -> Any:
    """PGD's step is eps*step_scale/max_iter."""
    value = attack_strength(spec, pixel_std)
    kwargs = {
        "norm": NORMS[spec["norm"]],
        spec["param"]: value,
        "batch_size": spec.get("batch_size", 100),
        **spec.get("kwargs", {}),
    }
    if "max_iter" in spec:
        kwargs["max_iter"] = spec["max_iter"]
    if "step_scale" in spec:
        kwargs["eps_step"] = value * spec["step_scale"] / spec["max_iter"]
    return get_class(spec["target"])(estimator=classifier, **kwargs)


def perturbation_norms(x: np.ndarray, x_adv: np.ndarray) -> dict[str, np.ndarray]:
    delta = (x_adv - x).reshape(len(x), -1)
    return {
        "norm_l0": (np.abs(delta) > 1e-6).sum(axis=1).astype(np.int64),
        "norm_l2": np.linalg.norm(delta, axis=1),
        "norm_linf": np.abs(delta).max(axis=1),
    }
