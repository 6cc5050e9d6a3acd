"""The compute clock of training (trashfire.models.flops): FLOPs per training sample beside the
seconds, counted exactly: every row through a training step, Gauss-in's extra rows, adversarial
training's attack steps and ART's predictions, a fine-tuned cell's base run, a resumed run's
earlier epochs. FlopCounterMode's convention: 2 FLOPs per multiply-accumulate of the
convolutions and matrix products, nothing for the rest."""

import logging
import math

import pytest
import torch
from torch import nn

from tests.conftest import ROOT, tiny_overrides
from tests.models.test_train import two_mnist_shaped_sets
from trashfire.core.config import compose, normalise, validate
from trashfire.core.grid import training_cells
from trashfire.core.schema import TrainRecord
from trashfire.data.datasets import load_split
from trashfire.models import flops, training
from trashfire.stages import prepare, train

CPU = torch.device("cpu")

# --- hand counts ---------------------------------------------------------------------------

IN, OUT = 5, 3  # a linear layer: IN x OUT multiply-accumulates per row
CONV = 4 * 6 * 6 * (1 * 3 * 3)  # Conv2d(1, 4, 3, padding=1) on 1x6x6: 4x6x6 outputs of 1x3x3 each
HEAD = (4 * 6 * 6) * 10  # Linear(144, 10)


def small_conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def test_a_linear_layer_counts_two_flops_per_multiply_accumulate():
    layer, x, y = nn.Linear(IN, OUT), torch.randn(7, IN), torch.tensor([0, 1, 2, 0, 1, 2, 0])
    mac = IN * OUT
    assert flops.forward_flops(layer, x) == 2 * mac
    assert flops.gradient_flops(layer, x, y) == 2 * mac + 2 * mac  # the backward to the input only: frozen weights
    assert flops.pass_flops(flops.FORWARD, layer, x, y) == 2 * mac
    assert flops.pass_flops(flops.STEP, layer, x, y) == 2 * mac + 2 * mac  # the weights' gradient; the input needs none
    assert flops.pass_flops(flops.GRADIENT, layer, x, y) == 2 * mac + 2 * (2 * mac)  # input and weights


def test_a_small_conv_net_counts_its_convolution_and_its_head():
    net, x, y = small_conv_net(), torch.randn(3, 1, 6, 6), torch.tensor([1, 2, 3])
    forward = 2 * (CONV + HEAD)
    assert flops.forward_flops(net, x) == forward
    assert flops.gradient_flops(net, x, y) == forward + 2 * (HEAD + CONV)  # back through the head and the conv to the input
    # a training step: the head's input and weight gradients, the conv's weight gradient (its input needs none)
    assert flops.pass_flops(flops.STEP, net, x, y) == forward + 2 * (2 * HEAD + CONV)
    assert flops.pass_flops(flops.GRADIENT, net, x, y) == forward + 2 * (2 * HEAD + 2 * CONV)  # ART's attack step
    assert flops.SampleCost(flops.forward_flops(net, x), flops.gradient_flops(net, x, y)).backward == 2 * (HEAD + CONV)


def test_measuring_a_training_step_leaves_the_model_and_the_generators_as_they_were():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Dropout(0.5), nn.Linear(4 * 4 * 4, 10)).train()
    x, y = torch.randn(2, 1, 6, 6), torch.tensor([0, 1])
    before = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()
    for kind in flops.PASSES:
        flops.pass_flops(kind, net, x, y)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # batch-norm statistics untouched
    assert all(p.grad is None for p in net.parameters()) and net.training
    assert torch.equal(torch.get_rng_state(), rng)


def test_the_pass_counter_tells_steps_gradients_and_predictions_apart():
    net, x = small_conv_net(), torch.randn(5, 1, 6, 6)
    with flops.PassCounter().watching(net) as passes:
        net(x)  # a training step's forward
        with torch.no_grad():
            net(x[:2])
        net(x[:3].clone().requires_grad_(True))
    assert passes.rows == {flops.FORWARD: 2, flops.STEP: 5, flops.GRADIENT: 3}
    net(x)  # unhooked after
    assert passes.rows[flops.STEP] == 5


# --- training ------------------------------------------------------------------------------


def cfg_of(tmp_path, *extra):
    return normalise(validate(compose(tiny_overrides(tmp_path, "model=[cnn3]", *extra), conf=ROOT / "conf")))


def fresh_model(cfg, split) -> nn.Module:
    """The grid's model with fresh weights: FLOPs do not depend on the weights."""
    return training.initial_model(training_cells(cfg)[0], split)


def step_flops(cfg, split) -> int:
    """A training step per row, measured afresh."""
    return flops.pass_flops(flops.STEP, fresh_model(cfg, split), split.x_train[:2], split.y_train[:2])


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """cnn3 undefended and with Gauss-in, checkpoints at 6 and 10 epochs of one run."""
    root = tmp_path_factory.mktemp("plain")
    cfg = cfg_of(root, "defence=[none,gauss_in]", "train.epochs=[6,10]")
    prepare.run(cfg)
    return cfg, {(r["defence"], r["epochs"]): r for r in train.run(cfg)}


def test_plain_training_counts_epochs_times_rows_times_a_training_step(plain):
    cfg, records = plain
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    n_train, step = len(split.y_train), step_flops(cfg, split)
    assert len(split.train_epoch(0)[0]) == n_train
    gauss = cfg.defence.gauss_in
    augmented = n_train + int(n_train * gauss.kwargs.ratio)  # GaussianAugmentation adds int(ratio x rows) noisy rows
    for epochs in (6, 10):
        assert records[("none", epochs)]["t_train_flops"] == epochs * n_train * step / n_train
        assert records[("gauss_in", epochs)]["t_train_flops"] == epochs * augmented * step / n_train
    # checkpoints of one run scale exactly with their epochs
    assert records[("none", 10)]["t_train_flops"] * 6 == records[("none", 6)]["t_train_flops"] * 10
    model = training.load_weights(cfg.paths.models, next(c for c in training_cells(cfg) if c.epochs == 6), split)
    assert records[("none", 6)]["t_predict_flops"] == flops.forward_flops(model.eval(), split.x_test)


def test_the_flop_count_is_the_same_in_every_run_and_thread_count(plain):
    cfg, records = plain
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    cell = next(c for c in training_cells(cfg) if c.epochs == 6 and c.defence["name"] == "gauss_in")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, again = training.train_cell(cell, split, cfg, CPU)
    finally:
        torch.set_num_threads(threads)
    assert again.t_train_flops == records[("gauss_in", 6)]["t_train_flops"]
    assert again.t_predict_flops == records[("gauss_in", 6)]["t_predict_flops"]


def test_a_resumed_run_carries_its_flop_count(tmp_path):
    first = cfg_of(tmp_path, "defence=[none]", "train.epochs=[2]")
    prepare.run(first)
    train.run(first)
    more = cfg_of(tmp_path, "defence=[none]", "train.epochs=[2,4]")
    records = {r["epochs"]: r for r in train.run(more)}
    split = load_split(more.paths.processed, more, "digits", 0)
    assert records[4]["t_train_flops"] == 4 * step_flops(more, split) == 2 * records[2]["t_train_flops"]


def test_a_state_saved_before_flops_leaves_them_unknown(tmp_path, caplog):
    cfg = cfg_of(tmp_path, "defence=[none]", "train.epochs=[1]")
    prepare.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    (cell,) = training_cells(cfg)
    run = training.start_run(cell, split, cfg.train, CPU)
    state = run.state()
    del state["train_flops"]
    with caplog.at_level(logging.INFO, logger="trashfire.models.training"):
        run.restore(state)
    assert run.train_flops is None and "predates FLOP counting" in caplog.text
    assert training.checkpoint_record(run, cell, split, CPU).t_train_flops is None


def test_adversarial_training_adds_its_counted_attack_steps(tmp_path):
    cfg = cfg_of(tmp_path, "defence=[none,adv_train]", "defence.adv_train.values=[0.1]", "train.epochs=[2]", "train.batch_size=100")
    prepare.run(cfg)
    records = {r["defence"]: r for r in train.run(cfg)}
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    model = fresh_model(cfg, split)
    x, y = split.x_train[:2], split.y_train[:2]
    forward, step, gradient = (flops.pass_flops(kind, model, x, y) for kind in (flops.FORWARD, flops.STEP, flops.GRADIENT))
    kwargs = cfg.defence.adv_train.kwargs
    ratio, max_iter, restarts = kwargs.ratio, kwargs.attack.max_iter, max(1, kwargs.attack.num_random_init)
    assert restarts == 1  # more random starts would add ART's success checks between them
    n_train, batch = len(split.y_train), cfg.train.batch_size
    attack = 0
    for start in range(0, n_train, batch):  # AdversarialTrainer: per batch, PGD on ceil(ratio x rows) of it
        attacked = math.ceil(ratio * min(batch, n_train - start))
        # max_iter gradient steps (ART's loss_gradient backs up to the input and, the weights
        # being trainable, to the weights), then ART's success check: 2 forward passes
        attack += restarts * max_iter * attacked * gradient + 2 * attacked * forward
    epochs = 2
    assert records["none"]["t_train_flops"] == epochs * n_train * step / n_train
    assert records["adv_train"]["t_train_flops"] == epochs * (n_train * step + attack) / n_train
    assert records["adv_train"]["t_train_flops"] > 2 * records["none"]["t_train_flops"]


def test_a_fine_tuned_cell_includes_its_base_run_on_every_clock(tmp_path):
    cfg = two_mnist_shaped_sets(tmp_path, "+train.pretrained_on.mnist=[null,fashion_mnist]")
    prepare.run(cfg)
    records = train.run(cfg)
    tuned = {r["epochs"]: r for r in records if r["pretrained_on"] == "fashion_mnist"}
    scratch = {r["epochs"]: r for r in records if r["dataset"] == "mnist" and r["pretrained_on"] is None}
    base = TrainRecord.read(training.record_path(cfg.paths.models, tuned[1]["pretrain_hash"]))
    assert base.epochs == 2 and base.t_train_flops > 0
    for epochs in (1, 2):
        own = scratch[epochs]["t_train_flops"] * scratch[epochs]["n_train"]  # the same model and rows from scratch
        assert tuned[epochs]["t_train_flops"] == (base.t_train_flops * base.n_train + own) / tuned[epochs]["n_train"]
        # and its seconds include the base run's seconds as well (the base alone costs more than nothing)
        for clock in ("process", "wall"):
            assert tuned[epochs][f"t_train_{clock}"] > getattr(base, f"t_train_{clock}") * base.n_train / tuned[epochs]["n_train"]
