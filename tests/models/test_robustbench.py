"""RobustBench checkpoints as models: robustbench's own load_model on a local model_dir in its
layout (random weights saved as its checkpoints are), never the network, and the wrapper that
feeds a [0, 1]-pixel model trashfire's standardised images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trashfire.core.errors import ConfigError
from trashfire.models import robustbench as rb

NAME = "Wong2020Fast"  # a PreAct ResNet-18 that normalises inside, as most of the zoo does
MEAN, STD = np.array([0.49, 0.48, 0.45]), np.array([0.25, 0.24, 0.26])


@pytest.fixture
def offline(monkeypatch):
    """robustbench's downloads fail as they would here: no network."""
    utils = rb.robustbench_utils()

    def no_network(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(utils, "download_gdrive_new", no_network)
    return utils


def saved_checkpoint(model_dir, seed=0):
    """Random weights of the zoo's architecture where RobustBench keeps them, with the
    'module.' prefix of a DataParallel save under 'state_dict', as many of its files are."""
    torch.manual_seed(seed)
    net = rb.zoo_entry("model.robustbench", NAME, "cifar10", "Linf")["model"]()
    path = rb.checkpoint_path(model_dir, NAME, "cifar10", "Linf")
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, path)
    return net.eval()


def test_the_wrapper_gives_the_models_logits_on_the_pixels():
    """To 1e-6: trashfire's standardised image, unstandardised inside, is the model's [0, 1] input."""
    torch.manual_seed(1)
    net = rb.zoo_entry("model.robustbench", NAME, "cifar10", "Linf")["model"]().eval()
    wrapped = rb.PixelInput(net)
    wrapped.set_standardisation(MEAN, STD)
    pixels = torch.rand(8, 3, 32, 32)
    standardised = (pixels - torch.tensor(MEAN, dtype=torch.float32)[None, :, None, None]) / torch.tensor(STD, dtype=torch.float32)[None, :, None, None]
    with torch.no_grad():
        theirs, ours = net(pixels), wrapped(standardised)
    assert theirs.abs().max() > 0.01  # logits that can differ
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_a_checkpoint_in_robustbench_layout_loads_with_its_load_model_offline(tmp_path, offline):
    reference = saved_checkpoint(tmp_path)
    model = rb.RobustBenchNet(NAME, "cifar10", "Linf", str(tmp_path)).eval()
    model.import_weights(MEAN, STD)
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[key], value, atol=0, rtol=0)
    assert torch.equal(model.mean, torch.tensor(MEAN, dtype=torch.float32)) and torch.equal(model.std, torch.tensor(STD, dtype=torch.float32))
    # the statistics travel with the weights trashfire saves, into a model built without them
    again = rb.RobustBenchNet(NAME, "cifar10", "Linf", str(tmp_path)).eval()
    again.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


def test_a_missing_checkpoint_offline_is_one_line_naming_where_it_was_looked_for(tmp_path, offline):
    model = rb.RobustBenchNet(NAME, "cifar10", "Linf", str(tmp_path))
    with pytest.raises(ConfigError, match=rf"model.robustbench.model_dir: cannot load {NAME} from {tmp_path}/cifar10/Linf/{NAME}.pt: no network"):
        model.import_weights(MEAN, STD)


@pytest.mark.parametrize(
    "name, dataset, threat_model, message",
    [
        ("NoSuchModel2099", "cifar10", "Linf", "model.robustbench.name: got 'NoSuchModel2099', not in RobustBench's cifar10 Linf zoo"),
        (NAME, "mnist", "Linf", "model.robustbench.dataset: got 'mnist'; allowed: cifar10, cifar100, imagenet"),
        (NAME, "cifar10", "L1", "model.robustbench.threat_model: got 'L1'; allowed: Linf, L2, corruptions"),
    ],
)
def test_a_name_data_set_or_threat_model_robustbench_lacks_is_one_line(name, dataset, threat_model, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        rb.RobustBenchNet(name, dataset, threat_model)


def test_the_002_preset_holds_its_tables_six_checkpoints_each_with_robustbenchs_figures(conf_dir):
    from trashfire.core.config import compose
    from trashfire.core.external import reported

    cfg = compose(["experiment=repro_002_robustbench"], conf=conf_dir)
    names = {key: spec.kwargs.name for key, spec in cfg.model.items()}
    assert sorted(names.values()) == sorted(
        ["Standard", "Ding2020MMA", "Engstrom2019Robustness", "Wu2020Adversarial", "Sehwag2021Proxy", "Rebuffi2021Fixing_70_16_cutmix_extra"]
    )
    figures = {names[key]: reported(f"model.{key}", spec) for key, spec in cfg.model.items()}
    assert figures["Engstrom2019Robustness"]["robust_acc"] == 0.4925 and figures["Standard"]["robust_acc"] == 0.0
    assert all(f["eps"] == pytest.approx(8 / 255) and f["norm"] == "inf" for f in figures.values())
    assert all(spec.checkpoint.endswith(f"cifar10/Linf/{spec.kwargs.name}.pt") and spec.rules.checkpoint for spec in cfg.model.values())
