"""Models: the architectures (`architectures`), their training (`training`), defences,
FLOPs counting and imported checkpoints (`external`).

The builders are named here too (`trashfire.models.resnet` is the `_target_` of the model
options), but loaded on first use: importing the package itself, as its config checks do
in the torch-free stages, does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_ARCHITECTURES = ("Float32Input", "resnet", "cifar_resnet", "lenet5", "lenet5_padded", "mlp", "cnn", "count_weight_layers", "resolve_device")


def __getattr__(name: str) -> Any:
    if name in _ARCHITECTURES:
        return getattr(importlib.import_module("trashfire.models.architectures"), name)
    if name == "build_model":
        return importlib.import_module("trashfire.models.build").build_model
    raise AttributeError(f"module 'trashfire.models' has no attribute {name!r}")
