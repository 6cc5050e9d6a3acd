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
