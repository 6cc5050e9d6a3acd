"""RobustBench checkpoints as models: the `robustbench` package's own `load_model`, from a
local `model_dir` in its layout (<model_dir>/<dataset>/<threat_model>/<name>.pt), downloaded
by it where the machine is online.

RobustBench models take [0, 1] pixels and normalise inside; trashfire hands every model
standardised images, x_std = (x_pix - mean) / std per channel with the training split's
statistics (trashfire.data.datasets). `PixelInput` undoes that exactly, x_pix = x_std * std +
mean, before the model: its logits on trashfire's images are the checkpoint's on the pixels.
The statistics are buffers, so they travel with the weights trashfire saves.

Two snags of robustbench 1.1.1 as PyPI ships it, met here: it declares `pyautoattack` but
imports it as `autoattack` (the GitHub package's name), so that name is bound to
`pyautoattack` before robustbench loads; and its loaders import `pkg_resources`, which
setuptools 81 removed (requirements.lock pins setuptools below it).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trashfire.core.errors import ConfigError

DATASETS = ("cifar10", "cifar100", "imagenet")
THREAT_MODELS = ("Linf", "L2", "corruptions")


def robustbench_utils():
    """robustbench.utils, with `autoattack` bound to the `pyautoattack` it ships as on PyPI
    (and quiet about its own imports' deprecations: pkg_resources, torch.jit.interface)."""
    if "autoattack" not in sys.modules:
        sys.modules["autoattack"] = importlib.import_module("pyautoattack")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (UserWarning, FutureWarning, DeprecationWarning))
        return importlib.import_module("robustbench.utils")


def zoo_entry(key: str, name: str, dataset: str, threat_model: str) -> dict[str, Any]:
    """The model zoo's entry for `name` (its architecture and download ids); one line naming
    what is allowed where the name, data set or threat model is not RobustBench's."""
    if dataset not in DATASETS:
        raise ConfigError(f"{key}.dataset", f"got {dataset!r}; allowed: {', '.join(DATASETS)}")
    if threat_model not in THREAT_MODELS:
        raise ConfigError(f"{key}.threat_model", f"got {threat_model!r}; allowed: {', '.join(THREAT_MODELS)}")
    robustbench_utils()
    from robustbench.model_zoo import model_dicts
    from robustbench.model_zoo.enums import BenchmarkDataset, ThreatModel

    zoo = model_dicts[BenchmarkDataset(dataset)][ThreatModel(threat_model)]
    if name not in zoo:
        shown = ", ".join(sorted(zoo)[:6])
        raise ConfigError(f"{key}.name", f"got {name!r}, not in RobustBench's {dataset} {threat_model} zoo ({len(zoo)} models: {shown}, ...)")
    return zoo[name]


def checkpoint_path(model_dir: str | Path, name: str, dataset: str, threat_model: str) -> Path:
    """Where RobustBench keeps (and looks for) a model's weights."""
    return Path(model_dir) / dataset / threat_model / f"{name}.pt"


class PixelInput(nn.Module):
    """A model of [0, 1] pixels fed trashfire's standardised images: x_pix = x * std + mean."""

    def __init__(self, net: nn.Module, channels: int = 3):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("std", torch.ones(channels))

    def set_standardisation(self, mean: np.ndarray, std: np.ndarray) -> None:
        """The training split's per-channel mean and std (pixel units), as prepare applied them."""
        self.mean.copy_(torch.as_tensor(np.asarray(mean, dtype=np.float32)))
        self.std.copy_(torch.as_tensor(np.asarray(std, dtype=np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x * self.std[None, :, None, None] + self.mean[None, :, None, None])


class RobustBenchNet(PixelInput):
    """A RobustBench model zoo architecture, its weights read by `import_weights` with
    robustbench's `load_model` (built without them: later stages load trashfire's copy)."""

    def __init__(self, name: str, dataset: str = "cifar10", threat_model: str = "Linf", model_dir: str = "models/robustbench"):
        entry = zoo_entry("model.robustbench", name, dataset, threat_model)
        super().__init__(entry["model"]())
        self.name, self.dataset, self.threat_model, self.model_dir = name, dataset, threat_model, str(model_dir)

    def import_weights(self, mean: np.ndarray, std: np.ndarray) -> None:
        """The checkpoint through robustbench's own load_model (its key clean-up, its download
        where the file is missing and the machine online), then the split's statistics."""
        path = checkpoint_path(self.model_dir, self.name, self.dataset, self.threat_model)
        try:
            loaded = robustbench_utils().load_model(model_name=self.name, model_dir=self.model_dir, dataset=self.dataset, threat_model=self.threat_model)
        except Exception as err:  # noqa: BLE001 - a download or a file robustbench cannot read: one line
            raise ConfigError("model.robustbench.model_dir", f"cannot load {self.name} from {path}: {str(err).strip().splitlines()[0]}") from None
        self.net.load_state_dict(loaded.state_dict())
        self.set_standardisation(mean, std)
