"""Every model builder of conf/model builds and trains one step on every data set's shape."""

import pytest
import torch
from torch import nn

from tests.conftest import ROOT
from trashfire.core.config import compose, validate
from trashfire.models import build_model, count_weight_layers

# the builders; an external model is the user's module and checkpoint (tests/core/test_external.py)
MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml") if "\n  checkpoint:" not in p.read_text())
SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28), "cifar": (3, 32, 32)}


def model_spec(name: str) -> dict:
    cfg = validate(compose([f"model=[{name}]"], conf=ROOT / "conf"))
    return dict(cfg.model[name])


# every builder on every shape it accepts: lenet5's valid convolutions refuse 8x8 (tested below)
BUILDS = [(name, data) for name in MODELS for data in SHAPES if not (name == "lenet5" and data == "digits")]


@pytest.mark.parametrize(("name", "data"), BUILDS, ids=[f"{n}-{d}" for n, d in BUILDS])
def test_model_builds_and_trains_one_step(name, data):
    shape = SHAPES[data]
    torch.manual_seed(0)
    model = build_model(model_spec(name), n_classes=10, input_shape=shape)
    x, y = torch.randn(4, *shape, dtype=torch.float64), torch.tensor([0, 1, 2, 3])  # ART may pass float64
    before = [p.detach().clone() for p in model.parameters()]
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    optimiser.step()
    assert model(x).shape == (4, 10) and torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("name", [m for m in MODELS if "resnet" not in m])
def test_depth_is_the_number_of_weight_layers(name):
    spec = model_spec(name)
    assert count_weight_layers(build_model(spec, 10, (1, 28, 28))) == spec["depth"]


@pytest.mark.parametrize("name", [m for m in MODELS if m.startswith("cifar_resnet")])
def test_cifar_resnet_depth_is_6n_plus_2_layers_on_the_main_path(name):
    """He et al. count the stem, two convolutions per block and the classifier; the two 1x1
    projection shortcuts (into stages 2 and 3) are not counted."""
    spec = model_spec(name)
    model = build_model(spec, 10, (1, 8, 8))
    shortcuts = sum(isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1) for m in model.modules())
    assert shortcuts == 2 and count_weight_layers(model) - shortcuts == spec["depth"] == 6 * spec["blocks"] + 2
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_lenet5_is_lenet_5_at_32x32_and_refuses_8x8():
    """004's LeNet-5: valid convolutions, 16 x 5 x 5 = 400 features at 32x32, 61,706 weights
    for 10 classes on one channel (LeCun et al.'s 60k); the padded variant keeps 8x8 working."""
    from trashfire.core.errors import ConfigError

    lenet5 = build_model(model_spec("lenet5"), n_classes=10, input_shape=(1, 32, 32))
    first_linear = next(m for m in lenet5.modules() if isinstance(m, nn.Linear))
    assert first_linear.in_features == 400 and sum(p.numel() for p in lenet5.parameters()) == 61_706
    assert all(m.padding == (0, 0) for m in lenet5.modules() if isinstance(m, nn.Conv2d))
    with pytest.raises(ConfigError, match=r"lenet5.*at least 16x16.*got 8x8.*lenet5_padded"):
        build_model(model_spec("lenet5"), n_classes=10, input_shape=(1, 8, 8))
    padded = build_model(model_spec("lenet5_padded"), n_classes=10, input_shape=(3, 32, 32))
    assert next(m for m in padded.modules() if isinstance(m, nn.Linear)).in_features == 16 * 8 * 8
    assert build_model(model_spec("lenet5_padded"), n_classes=10, input_shape=(1, 8, 8))(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
