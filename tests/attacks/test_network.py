"""The attack engine's network: the model's logits and input gradients to the bit, faster
BatchNorm backward or not, and the model itself untouched."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tests.models.test_models import model_spec
from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.network import EvalBatchNorm2d, attack_network
from trashfire.attacks.target import Target
from trashfire.core.grid import UNDEFENDED
from trashfire.models import build_model

CPU = torch.device("cpu")


def frozen_resnet(name: str = "cifar_resnet8", shape=(1, 8, 8)) -> nn.Module:
    """A ResNet as the attacks see one: eval mode, frozen, with running statistics far from 0 and 1."""
    torch.manual_seed(0)
    model = build_model(model_spec(name), n_classes=10, input_shape=shape)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.normal_()
            module.running_var.uniform_(0.05, 4.0)
            module.weight.data.normal_()
            module.bias.data.normal_()
    return model.eval().requires_grad_(False)


def logits_and_gradient(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = x.clone().requires_grad_(True)
    logits = model(inputs)
    loss = logits.log_softmax(1)[:, 0].sum()
    return logits.detach(), torch.autograd.grad(loss, inputs)[0]


def graph_names(tensor: torch.Tensor) -> set[str]:
    """The names of the autograd nodes behind `tensor`."""
    seen, names, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(parent for parent, _ in node.next_functions)
    return names


@pytest.mark.parametrize(
    "name, shape, rows",
    [("cifar_resnet8", (1, 8, 8), rows) for rows in (1, 2, 100, 460)] + [("resnet18", (3, 32, 32), rows) for rows in (2, 33)] + [("resnet18", (1, 8, 8), 5)],
)  # ResNet-18 on 8x8 digits ends in 1x1 maps, which PyTorch's kernel takes another way
def test_the_network_gives_the_models_logits_and_input_gradients_to_the_bit(name, shape, rows):
    model = frozen_resnet(name, shape)
    network = attack_network(model)
    x = torch.randn(rows, *shape, generator=torch.Generator().manual_seed(rows))
    ours, theirs = logits_and_gradient(network, x), logits_and_gradient(model, x)
    assert torch.equal(ours[0], theirs[0]), "logits"
    assert torch.equal(ours[1], theirs[1]), "input gradient"
    inputs = x.clone().requires_grad_(True)
    ours_graph, models_graph = graph_names(network(inputs)), graph_names(model(inputs))
    assert "_EvalInputGradientBackward" in ours_graph, "the faster backward ran"
    pytorchs = {name for name in models_graph if "Norm" in name}
    assert pytorchs and not pytorchs & ours_graph, "none of PyTorch's BatchNorm backward left"


def test_without_affine_weights_the_gradient_is_the_models_too():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4, affine=False), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))
    model(torch.zeros(1, 1, 6, 6))
    model[1].running_var.uniform_(0.1, 3.0)
    model.eval().requires_grad_(False)
    x = torch.randn(7, 1, 6, 6, generator=torch.Generator().manual_seed(0))
    ours, theirs = logits_and_gradient(attack_network(model), x), logits_and_gradient(model, x)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_the_model_is_untouched_and_shares_its_weights_with_the_network():
    model = frozen_resnet()
    network = attack_network(model)
    assert all(type(m) is not EvalBatchNorm2d for m in model.modules())
    assert sum(type(m) is EvalBatchNorm2d for m in network.modules()) == sum(type(m) is nn.BatchNorm2d for m in model.modules()) > 0
    model_tensors = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
    assert {t.data_ptr() for t in [*network.parameters(), *network.buffers()]} == model_tensors, "no weight copied"


def test_where_the_shortcut_does_not_hold_it_is_pytorchs_batchnorm():
    """Training, trainable weights, other memory layouts: PyTorch's own backward (and gradient)."""
    model = frozen_resnet()
    network = attack_network(model)
    x = torch.randn(4, 1, 8, 8).requires_grad_(True)
    assert "_EvalInputGradientBackward" not in graph_names(network(x.to(memory_format=torch.channels_last)))
    network.requires_grad_(True)
    assert "_EvalInputGradientBackward" not in graph_names(network(x))
    for module in network.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.weight.requires_grad_(False)  # a trainable bias alone
    assert "_EvalInputGradientBackward" not in graph_names(network(x))
    network.requires_grad_(False).train()
    assert "_EvalInputGradientBackward" not in graph_names(network(x))


def test_a_model_without_batchnorm_is_its_own_network():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    assert attack_network(model) is model


def test_the_target_runs_the_network_and_a_reference_runs_the_model(monkeypatch):
    model = frozen_resnet()
    target = Target(art_classifier(model, SimpleNamespace(input_shape=(1, 8, 8), n_classes=10, clip_values=(-1.0, 1.0)), dict(UNDEFENDED), CPU), CPU)
    x = torch.randn(3, 1, 8, 8).requires_grad_(True)
    assert target.network is not target.model
    assert "_EvalInputGradientBackward" in graph_names(target.logits(x))
    assert "_EvalInputGradientBackward" not in graph_names(target.model_logits(x))
    model.train()
    assert "_EvalInputGradientBackward" not in graph_names(target.logits(x)), "the network follows the model's mode"
