"""The architectures: torchvision ResNets adapted to small inputs, and the small nets of the companion
papers. Every builder takes (n_classes, input_shape) and returns a module whose forward
casts its input to float32. `depth` in the configs is the number of weight layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from trashfire.core.errors import ConfigError


class Float32Input(nn.Module):
    """ART hands float64 arrays to the model after FeatureSqueezing and HopSkipJump."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float())


def resnet(arch: str, n_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """torchvision's ResNet with a 3x3 stride-1 stem and no max-pool, so that 8x8 and 28x28
    inputs keep spatial extent through the four stages."""
    import torchvision  # here, not above: it imports torch._dynamo (1 s in each stage process) that the small nets never use

    net = getattr(torchvision.models, arch)(weights=None, num_classes=n_classes)
    net.conv1 = nn.Conv2d(input_shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    return Float32Input(net)


def cifar_resnet(n_classes: int, input_shape: Sequence[int], blocks: int, widths: Sequence[int] = (16, 32, 64)) -> nn.Module:
    """He et al. (2016)'s ResNet for small images, depth 6n+2: a 3x3 stem, three stages of n
    of torchvision's BasicBlocks (stride 2 into the second and third; 1x1 projection
    shortcuts where the shape changes), global average pooling and a linear classifier. It
    fits 8x8 digits in seconds where torchvision's ResNet-18 takes minutes."""
    from torchvision.models.resnet import BasicBlock  # as in resnet()

    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
    n_in = widths[0]
    for stage, width in enumerate(widths):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = None
            if stride != 1 or n_in != width:
                shortcut = nn.Sequential(nn.Conv2d(n_in, width, 1, stride=stride, bias=False), nn.BatchNorm2d(width))
            layers.append(BasicBlock(n_in, width, stride, shortcut))
            n_in = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(n_in, n_classes)]
    return Float32Input(nn.Sequential(*layers))


LENET5_SMALLEST = 16  # valid 5x5 convolutions and two 2x2 pools: 16 -> 12 -> 6 -> 2 -> 1


def lenet5(n_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) as 004 uses it: two valid 5x5 convolutions with 2x2
    max-pooling, then 120-84-K; at 32x32 the features are 16 x 5 x 5 = 400."""
    channels, height, width = input_shape
    if min(height, width) < LENET5_SMALLEST:
        raise ConfigError(
            "model.lenet5",
            f"needs inputs of at least {LENET5_SMALLEST}x{LENET5_SMALLEST} (valid 5x5 convolutions); got {height}x{width}: use lenet5_padded for small inputs",
        )
    return _lenet(channels, ((height - 4) // 2 - 4) // 2, ((width - 4) // 2 - 4) // 2, n_classes, padding=0)


def lenet5_padded(n_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """LeNet-5 with padded 5x5 convolutions (padding 2), so that it runs from 8x8 inputs up:
    at 32x32 its features are 16 x 8 x 8 = 1,024, not LeNet-5's 400."""
    channels, height, width = input_shape
    return _lenet(channels, height // 4, width // 4, n_classes, padding=2)


def _lenet(channels: int, height: int, width: int, n_classes: int, padding: int) -> nn.Module:
    features = nn.Sequential(
        nn.Conv2d(channels, 6, 5, padding=padding),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding=padding),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )
    head = nn.Sequential(nn.Flatten(), nn.Linear(16 * height * width, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_classes))
    return Float32Input(nn.Sequential(features, head))


def mlp(n_classes: int, input_shape: Sequence[int], hidden: Sequence[int]) -> nn.Module:
    """Fully connected: one Linear+ReLU per hidden width, then the classifier. 004's
    FullyConnectedNet is hidden=[7500]; 002's 2-layer MLP is one hidden layer too."""
    widths = [int(torch.tensor(input_shape).prod())] + list(hidden)
    layers: list[nn.Module] = [nn.Flatten()]
    for n_in, n_out in zip(widths, widths[1:]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], n_classes))
    return Float32Input(nn.Sequential(*layers))


def cnn(n_classes: int, input_shape: Sequence[int], channels: Sequence[int]) -> nn.Module:
    """3x3 convolutions with ReLU, a 2x2 max-pool after every second one while the map is at
    least 2x2, then one linear classifier: 002's 3-layer CNN is channels=[32, 64], its
    5-layer CNN channels=[32, 32, 64, 64]."""
    n_in, height, width = input_shape
    layers: list[nn.Module] = []
    for index, n_out in enumerate(channels):
        layers += [nn.Conv2d(n_in, n_out, 3, padding=1), nn.ReLU()]
        if index % 2 == 1 and min(height, width) >= 2:
            layers.append(nn.MaxPool2d(2))
            height, width = height // 2, width // 2
        n_in = n_out
    layers += [nn.Flatten(), nn.Linear(n_in * height * width, n_classes)]
    return Float32Input(nn.Sequential(*layers))


def count_weight_layers(model: nn.Module) -> int:
    return sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in model.modules())


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("compute.device", f"{name} asked for, but no CUDA device is present; use auto or cpu")
    return torch.device(name)
