"""Models: torchvision architectures adapted to small inputs."""

from __future__ import annotations

from typing import Any

import torch
import torchvision
from hydra.utils import instantiate
from torch import nn

from trashfire.errors import ConfigError


class Float32Input(nn.Module):
    """ART hands float64 arrays to the model after FeatureSqueezing and HopSkipJump."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float())


def resnet(arch: str, n_classes: int, in_channels: int, depth: int | None = None) -> nn.Module:
    """torchvision's ResNet with a 3x3 stride-1 stem and no max-pool, so that 8x8 and 28x28
    inputs keep spatial extent through the four stages."""
    if depth is not None and arch != f"resnet{depth}":
        raise ConfigError("model.depth", f"{depth} does not match arch {arch}")
    net = getattr(torchvision.models, arch)(weights=None, num_classes=n_classes)
    net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    return Float32Input(net)


def build_model(spec: dict[str, Any], n_classes: int, in_channels: int) -> nn.Module:
    return instantiate(spec, n_classes=n_classes, in_channels=in_channels)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("train.device", f"{name} asked for, but no CUDA device is present; use auto or cpu")
    return torch.device(name)
