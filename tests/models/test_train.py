"""Training runs: the epochs of a study are checkpoints of one run, and a grid that asks
for more epochs trains on from the last checkpoint instead of from scratch."""

import logging

import pytest
import torch

from tests.conftest import ROOT, tiny_overrides
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.core.grid import training_cells
from trashfire.core.parallel import threads_limited
from trashfire.data.datasets import load_split
from trashfire.models import training
from trashfire.stages import prepare, train

CPU = torch.device("cpu")


def small_cfg(tmp_path, *extra):
    return validate(compose(tiny_overrides(tmp_path, "model=[cnn3]", "defence=[none]", *extra), conf=ROOT / "conf"))


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def cell_at(cfg, epochs):
    return next(c for c in training_cells(cfg) if c.epochs == epochs)


def test_checkpoints_of_one_run_equal_cells_trained_from_scratch(tmp_path):
    cfg = small_cfg(tmp_path, "train.epochs=[1,3]")
    prepare.run(cfg)
    records = {r["epochs"]: r for r in train.run(cfg)}
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    for epochs in (1, 3):
        cell = cell_at(cfg, epochs)
        with threads_limited(cfg.compute.threads):  # as the stage trains its cells
            scratch, record = training.train_cell(cell, split, cfg, CPU)
        assert same_weights(training.load_weights(cfg.paths.models, cell, split), scratch)
        assert records[epochs]["acc_ben"] == record.acc_ben
    assert records[3]["t_train_process"] > records[1]["t_train_process"] > 0
    resumable = [training.resume_path(cfg.paths.models, cell_at(cfg, e).hash).is_file() for e in (1, 3)]
    assert resumable == [False, True]  # only the run's last checkpoint keeps its state


def test_more_epochs_train_on_from_the_last_checkpoint(tmp_path, caplog):
    first = small_cfg(tmp_path, "train.epochs=[1]")
    prepare.run(first)
    train.run(first)
    more = small_cfg(tmp_path, "train.epochs=[1,3]")
    with caplog.at_level(logging.INFO, logger="trashfire.models.training"):
        train.run(more)
    assert "1 cached, 1 to train" in caplog.text and "from epoch 1" in caplog.text
    split = load_split(more.paths.processed, more, "digits", 0)
    with threads_limited(more.compute.threads):  # as the stage trains its cells
        scratch, _ = training.train_cell(cell_at(more, 3), split, more, CPU)
    assert same_weights(training.load_weights(more.paths.models, cell_at(more, 3), split), scratch)
    assert not training.resume_path(more.paths.models, cell_at(more, 1).hash).exists()


def test_step_decay_comes_at_half_of_the_longest_run(tmp_path):
    cfg = small_cfg(tmp_path, "train.epochs=[1,4]", "train.lr_schedule=step_half")
    assert {c.spec["train"]["horizon"] for c in training_cells(cfg)} == {4}
    assert len({c.run_key for c in training_cells(cfg)}) == 1


def test_an_adam_cell_trains_with_adam_at_its_lr_and_sgd_with_momentum(tmp_path):
    for name, kind in (("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)):
        cfg = small_cfg(tmp_path / name, f"train.optimiser={name}", "train.epochs=[1]")
        cell = training_cells(cfg)[0]
        prepare.run(cfg)
        split = load_split(cfg.paths.processed, cfg, "digits", 0)
        run = training.start_run(cell, split, cfg.train, CPU)
        assert type(run.optimiser) is kind
        assert run.optimiser.param_groups[0]["lr"] == cell.lr
        assert run.optimiser.param_groups[0]["weight_decay"] == cfg.train.weight_decay
        if name == "sgd":
            assert run.optimiser.param_groups[0]["momentum"] == cfg.train.momentum


def two_mnist_shaped_sets(tmp_path, *extra):
    from tests.data.test_datasets import write_idx

    write_idx(tmp_path / "mnist", n=100, seed=0)
    write_idx(tmp_path / "fashion", n=100, seed=1)
    return validate(compose(mnist_shaped_overrides(tmp_path, "data=[mnist,fashion_mnist]", "train.epochs=[1,2]", *extra), conf=ROOT / "conf"))


def mnist_shaped_overrides(tmp_path, *extra):
    """The tiny overrides with lenet5 on two 200-image IDX data sets instead of digits."""
    tiny = [o for o in tiny_overrides(tmp_path) if not o.startswith("data.digits")]
    return tiny + [
        "model=[lenet5]",
        "defence=[none]",
        "split.n_attack=10",
        f"data.mnist.root={tmp_path / 'mnist'}",
        f"data.fashion_mnist.root={tmp_path / 'fashion'}",
        *extra,
    ]


def test_fine_tuning_starts_from_the_base_data_sets_final_weights(tmp_path):
    cfg = two_mnist_shaped_sets(tmp_path, "+train.pretrained_on.mnist=[null,fashion_mnist]")
    prepare.run(cfg)
    records = train.run(cfg)
    tuned = [c for c in training_cells(cfg) if c.pretrained_on == "fashion_mnist"]
    assert [c.epochs for c in tuned] == [1, 2] and {c.base.epochs for c in tuned} == {2}
    assert {r["pretrained_on"] for r in records if r["dataset"] == "mnist"} == {None, "fashion_mnist"}
    split = load_split(cfg.paths.processed, cfg, "mnist", 0)
    base = training.load_weights(cfg.paths.models, tuned[0].base, split)
    start = training.start_run(tuned[0], split, cfg.train, CPU, cfg.paths.models).model
    assert same_weights(start, base)
    scratch = training.start_run(tuned[0].base.at_epochs(1), split, cfg.train, CPU).model
    assert not same_weights(start, scratch)


def test_a_base_outside_the_grid_is_trained_first(tmp_path, caplog):
    two_mnist_shaped_sets(tmp_path)  # writes the files
    cfg = validate(
        compose(
            mnist_shaped_overrides(
                tmp_path,
                "data=[mnist,fashion_mnist]",
                "train.epochs=[1]",
                "+train.pretrained_on.mnist=[fashion_mnist]",
                "+train.pretrained_on.fashion_mnist=[mnist]",
            ),
            conf=ROOT / "conf",
        )
    )
    prepare.run(cfg)
    with caplog.at_level(logging.INFO, logger="trashfire.models.training"):
        records = train.run(cfg)
    assert "4 training cells, 0 cached, 4 to train" in caplog.text  # both fine-tuned cells and both bases
    assert {(r["dataset"], r["pretrained_on"]) for r in records} == {("mnist", "fashion_mnist"), ("fashion_mnist", "mnist")}


def test_pretraining_on_a_data_set_of_another_shape_names_both(tmp_path):
    from tests.data.test_datasets import write_cifar

    write_cifar(tmp_path / "cifar", n_per_batch=20)
    two_mnist_shaped_sets(tmp_path)  # writes the files
    overrides = [o for o in mnist_shaped_overrides(tmp_path) if not o.startswith("data.fashion_mnist")]
    cfg = validate(
        compose(
            overrides
            + [
                "data=[mnist,cifar10]",
                "+train.pretrained_on.mnist=[cifar10]",
                "train.epochs=[1]",
                f"data.cifar10.root={tmp_path / 'cifar'}",
                "data.cifar10.verify=false",
            ],
            conf=ROOT / "conf",
        )
    )
    prepare.run(cfg)
    with pytest.raises(DataError, match=r"cannot fine-tune lenet5 on mnist from cifar10.*data.mnist.size=32"):
        train.run(cfg)


def test_a_model_can_carry_its_own_learning_rates_and_epochs(tmp_path):
    cfg = small_cfg(tmp_path, "model=[cnn3,mlp2]", "train.epochs=[1]", "train.lr=[0.05]", "+train.per_model.mlp2={lr:[0.01],epochs:[2,3]}")
    grid = {(c.model, c.epochs, c.lr) for c in training_cells(cfg)}
    assert grid == {("cnn3", 1, 0.05), ("mlp2", 2, 0.01), ("mlp2", 3, 0.01)}
