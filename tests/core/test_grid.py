"""Cache keys: what changes a hash, and what must not."""

import pytest
from omegaconf import OmegaConf

from trashfire.core.config import compose, validate
from trashfire.core.grid import attack_cells, data_block, model_cells, training_cells


def hashes(cells):
    return {cell.hash for cell in cells}


def test_changing_an_attack_eps_changes_no_training_hash(conf_dir):
    base = compose([], conf=conf_dir)
    changed = compose(["attack.pgd.values=[0.05,0.1]"], conf=conf_dir)
    assert hashes(training_cells(base)) == hashes(training_cells(changed))
    assert hashes(model_cells(base)) == hashes(model_cells(changed))
    assert hashes(attack_cells(base)) != hashes(attack_cells(changed))


def test_adding_an_epoch_value_only_adds_cells(conf_dir):
    base = training_cells(compose(["train.epochs=[1,2]", "train.per_model={}", "train.lr_schedule=constant"], conf=conf_dir))
    more = training_cells(compose(["train.epochs=[1,2,3]", "train.per_model={}", "train.lr_schedule=constant"], conf=conf_dir))
    assert hashes(base) < hashes(more)
    assert {c.epochs for c in more if c.hash not in hashes(base)} == {3}


def test_predict_time_defences_reuse_the_undefended_weights(conf_dir):
    cfg = compose([], conf=conf_dir)
    trained = {c.defence["name"] for c in training_cells(cfg)}
    assert trained == {"none", "gauss_in", "adv_train"}
    by_defence = {}
    for cell in model_cells(cfg):
        by_defence.setdefault(cell.defence["name"], set()).add(cell.train.hash)
    assert by_defence["fsq"] == by_defence["conf"] == by_defence["gauss_out"] == by_defence["none"]
    assert by_defence["gauss_in"].isdisjoint(by_defence["none"])
    # the default: 3 seeds x (ResNet-8 at 2 epochs x (none, gauss_in, adv_train at 2 strengths)
    # + ResNet-14 and -20 at 1 epoch, undefended); 4 model cells per undefended training cell
    assert len(training_cells(cfg)) == 3 * (2 * 4 + 2) and len(model_cells(cfg)) == 3 * (2 * (4 + 3) + 2 * 4)


def test_a_lone_predict_time_defence_evaluates_only_itself(conf_dir):
    cfg = compose(["defence=fsq", "model=resnet18", "train.epochs=[1]", "split.seeds=[0]"], conf=conf_dir)
    assert [c.defence["name"] for c in training_cells(cfg)] == ["none"]  # its weights
    assert [c.defence["name"] for c in model_cells(cfg)] == ["fsq"]
    only_train_time = compose(["defence=gauss_in", "model=resnet18", "train.epochs=[1]", "split.seeds=[0]"], conf=conf_dir)
    assert [c.defence["name"] for c in training_cells(only_train_time)] == ["gauss_in"]


def test_schedules_are_their_own_cells_and_constant_keeps_older_hashes(conf_dir):
    constant = training_cells(compose(["train.lr_schedule=constant"], conf=conf_dir))
    assert all("lr_schedule" not in cell.spec["train"] for cell in constant)
    decayed = hashes(training_cells(compose(["train.lr_schedule=step_half"], conf=conf_dir)))
    one_cycle = hashes(training_cells(compose([], conf=conf_dir)))  # the default's
    assert len({frozenset(hashes(constant)), frozenset(decayed), frozenset(one_cycle)}) == 3
    assert hashes(constant).isdisjoint(decayed) and hashes(constant).isdisjoint(one_cycle)


def test_adam_cells_are_their_own_and_sgd_keeps_older_hashes(conf_dir):
    sgd = training_cells(compose(["train.optimiser=sgd"], conf=conf_dir))
    assert all("optimiser" not in cell.spec["train"] for cell in sgd)
    assert hashes(sgd) == hashes(training_cells(compose([], conf=conf_dir)))
    adam = training_cells(compose(["train.optimiser=adam"], conf=conf_dir))
    assert {cell.spec["train"]["optimiser"] for cell in adam} == {"adam"}
    assert hashes(sgd).isdisjoint(hashes(adam))


def test_a_train_time_defence_limited_to_some_models_trains_only_those(conf_dir):
    cfg = compose([], conf=conf_dir)  # the default limits gauss_in and adv_train to its ResNet-8
    limited = {(c.model, c.defence["name"]) for c in training_cells(cfg) if c.defence["name"] != "none"}
    assert limited == {("cifar_resnet8", "gauss_in"), ("cifar_resnet8", "adv_train")}
    trial = compose(["model=cifar_resnet14", "defence=gauss_in"], conf=conf_dir)  # a sweep trial: the limit lapses
    assert {c.model for c in training_cells(trial)} == {"cifar_resnet14"}


@pytest.mark.parametrize("preset, n_train, n_attack", [("auc_paper", 6 * 20 * 3 * 6, 6 * 20 * 3 * 6 * 8), ("brittle_paper", 6, 6 * 7)])
def test_paper_presets_state_their_grids(conf_dir, preset, n_train, n_attack):
    """auc_paper: 6 data conditions (MNIST, CIFAR-10, both fine-tuning directions, fusion
    digit and object) x 20 seeds x 3 models x 6 checkpoints, 8 FGSM eps; brittle_paper:
    3 models, standard and PGD-trained, 7 PGD eps."""
    cfg = validate(compose([f"experiment={preset}"], conf=conf_dir))
    cells = training_cells(cfg)
    assert len(cells) == n_train and len(attack_cells(cfg)) == n_attack
    if preset == "auc_paper":
        assert {(c.model, c.lr, c.spec["train"]["horizon"]) for c in cells} == {("lenet5", 0.01, 300), ("fcnet", 0.01, 300), ("resnet50", 0.1, 125)}
        assert {(c.dataset, c.pretrained_on) for c in cells} >= {("mnist", "cifar10"), ("cifar10", "mnist"), ("mnist", None)}
        assert len({c.run_key for c in cells}) == n_train // 6  # every epoch is a checkpoint of one run


def test_pixel_unit_budgets_are_their_own_cells_and_standardised_keeps_older_hashes(conf_dir):
    standardised = ["attack.fgm.units=standardised", "attack.pgd.units=standardised", "attack.fgm.values=[0.3]", "attack.pgd.values=[0.3]"]
    cells = attack_cells(compose(standardised, conf=conf_dir))
    without_units = compose(standardised, conf=conf_dir)
    OmegaConf.set_struct(without_units, False)
    for spec in without_units.attack.values():
        del spec["units"]
    assert hashes(cells) == hashes(attack_cells(without_units))
    pixel = hashes(attack_cells(compose([*standardised, "attack.fgm.units=pixel"], conf=conf_dir)))
    assert hashes(cells) & pixel == {c.hash for c in cells if c.attack != "fgm"}


def test_pixel_units_divide_by_the_mean_training_std():
    from trashfire.attacks.spec import attack_strength

    assert attack_strength({"value": 0.3, "units": "pixel"}, pixel_std=0.3) == pytest.approx(1.0)
    assert attack_strength({"value": 0.3}, pixel_std=0.3) == 0.3


def _hand_written_data_block(name, spec):
    """The data block before it was derived: name, source, subsample and the keys a
    hand-written list said change the images, where set."""
    shape = {key: spec[key] for key in ("size", "channels", "classes", "task") if spec.get(key) is not None}
    return {"name": name, "source": spec.source, "subsample": spec.get("subsample"), **shape}


@pytest.mark.parametrize("dataset", ["digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "fusion_digit", "fusion_object"])
@pytest.mark.parametrize("overrides", [[], ["experiment=auc_paper"]])
def test_every_shipped_data_set_keeps_the_hash_it_had_before_the_block_was_derived(conf_dir, dataset, overrides):
    """No cached model is invalidated: each option's unhashed keys are those the old list left out."""
    cfg = compose([*overrides, f"data=[{dataset}]"], conf=conf_dir)
    for name, spec in cfg.data.items():
        assert data_block(name, spec) == _hand_written_data_block(name, spec)


def test_a_data_key_changes_the_hash_unless_the_option_lists_it_unhashed(conf_dir):
    """A key no list names (a loader's new option) enters the hash; where the files are does not."""
    base = hashes(training_cells(compose(["data=[mnist]"], conf=conf_dir)))
    assert hashes(training_cells(compose(["data=[mnist]", "+data.mnist.noise=0.1"], conf=conf_dir))).isdisjoint(base)
    assert hashes(training_cells(compose(["data=[mnist]", "data.mnist.root=/elsewhere", "data.mnist.download=true"], conf=conf_dir))) == base
    assert hashes(training_cells(compose(["data=[mnist]", "data.mnist.unhashed=[]", "data.mnist.root=/elsewhere"], conf=conf_dir))).isdisjoint(base)


def test_an_attacks_properties_never_enter_a_cell_hash(conf_dir):
    """black_box and minimal say what an attack is (the tables read them), not what it computes."""
    base = compose([], conf=conf_dir)
    described = compose(["+attack.hsj.black_box=true", "attack.deepfool.minimal=false", "+attack.fgm.black_box=false"], conf=conf_dir)
    assert hashes(attack_cells(base)) == hashes(attack_cells(described))
    assert {c.attack: c.spec.get("minimal") for c in attack_cells(base)}["deepfool"] is True  # the spec carries it for the tables


@pytest.mark.parametrize("overrides", [[], ["experiment=auc_paper"]], ids=["default", "fine-tuned"])
def test_a_cache_bump_reruns_the_cells_with_the_same_draws(conf_dir, monkeypatch, overrides):
    """The attack stage seeds a cell's draws from its seed key (its hash at the seed versions),
    not from its cache key: bumping TRAIN_VERSION or ATTACK_VERSION makes every record miss
    and leaves every draw as it was, fine-tuned cells (their base's key) included."""
    from trashfire.core import grid

    monkeypatch.setattr(grid, "TRAIN_VERSION", grid.SEED_TRAIN_VERSION)
    monkeypatch.setattr(grid, "ATTACK_VERSION", grid.SEED_ATTACK_VERSION)
    cells = attack_cells(compose(overrides, conf=conf_dir))
    assert overrides == [] or any(c.model.train.base is not None for c in cells)
    assert all(c.seed_key == c.hash and c.model.seed_key == c.model.hash and c.model.train.seed_key == c.model.train.hash for c in cells)
    monkeypatch.setattr(grid, "TRAIN_VERSION", grid.SEED_TRAIN_VERSION + 1)
    monkeypatch.setattr(grid, "ATTACK_VERSION", grid.SEED_ATTACK_VERSION + 1)
    bumped = attack_cells(compose(overrides, conf=conf_dir))
    assert not {c.hash for c in cells} & {c.hash for c in bumped}
    assert not {c.model.hash for c in cells} & {c.model.hash for c in bumped}
    assert [(c.seed_key, c.model.seed_key) for c in bumped] == [(c.seed_key, c.model.seed_key) for c in cells]
