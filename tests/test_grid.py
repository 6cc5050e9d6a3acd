"""Cache keys: what changes a hash, and what must not."""

from trashfire.config import compose
from trashfire.grid import attack_cells, model_cells, training_cells


def hashes(cells):
    return {cell.hash for cell in cells}


def test_changing_an_attack_eps_changes_no_training_hash(conf_dir):
    base = compose([], conf=conf_dir)
    changed = compose(["attack.pgd.values=[0.05,0.1]"], conf=conf_dir)
    assert hashes(training_cells(base)) == hashes(training_cells(changed))
    assert hashes(model_cells(base)) == hashes(model_cells(changed))
    assert hashes(attack_cells(base)) != hashes(attack_cells(changed))


def test_adding_an_epoch_value_only_adds_cells(conf_dir):
    base = training_cells(compose(["train.epochs=[1,2]"], conf=conf_dir))
    more = training_cells(compose(["train.epochs=[1,2,3]"], conf=conf_dir))
    assert hashes(base) < hashes(more)
    assert {c.epochs for c in more if c.hash not in hashes(base)} == {3}


def test_predict_time_defences_reuse_the_undefended_weights(conf_dir):
    cfg = compose([], conf=conf_dir)
    trained = {c.defence["name"] for c in training_cells(cfg)}
    assert trained == {"none", "gauss_in"}
    by_defence = {}
    for cell in model_cells(cfg):
        by_defence.setdefault(cell.defence["name"], set()).add(cell.train.hash)
    assert by_defence["fsq"] == by_defence["conf"] == by_defence["gauss_out"] == by_defence["none"]
    assert by_defence["gauss_in"].isdisjoint(by_defence["none"])
    # 2 models x 2 epochs x (none, gauss_in) trained; 5 defences evaluated each
    assert len(training_cells(cfg)) == 8 and len(model_cells(cfg)) == 20


def test_a_lone_predict_time_defence_evaluates_only_itself(conf_dir):
    cfg = compose(["defence=fsq", "model=resnet18", "train.epochs=[1]"], conf=conf_dir)
    assert [c.defence["name"] for c in training_cells(cfg)] == ["none"]  # its weights
    assert [c.defence["name"] for c in model_cells(cfg)] == ["fsq"]
    only_train_time = compose(["defence=gauss_in", "model=resnet18", "train.epochs=[1]"], conf=conf_dir)
    assert [c.defence["name"] for c in training_cells(only_train_time)] == ["gauss_in"]


def test_step_decay_is_its_own_cell_and_constant_keeps_older_hashes(conf_dir):
    constant = hashes(training_cells(compose([], conf=conf_dir)))
    explicit = hashes(training_cells(compose(["train.lr_schedule=constant"], conf=conf_dir)))
    decayed = hashes(training_cells(compose(["train.lr_schedule=step_half"], conf=conf_dir)))
    assert constant == explicit and constant.isdisjoint(decayed)
