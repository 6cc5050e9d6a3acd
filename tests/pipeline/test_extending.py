"""The README's "Extending trashfire", re-verified: each test extends a scratch copy of conf/
the way the README says, and counts the files it had to touch (a Python file stands for its
edit by a monkeypatch of what the edit adds). One file for an ART attack, white-box or
black-box, whose kind the validity flags then read from ART's declaration of its class; at
most two for a data set with an option that changes the images (the option changes the
cache key) and for a metric with a setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, tiny_overrides
from trashfire.core import schema
from trashfire.core.config import compose, normalise, validate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import attack_cells, training_cells
from trashfire.data import checks as data_checks
from trashfire.data import loaders
from trashfire.data.datasets import dataset_dir
from trashfire.metrics import registry, validity
from trashfire.metrics.aggregate import eps_curves, with_family
from trashfire.stages import aggregate, prepare
from trashfire.tables.experiments import attack_properties

SRC = ROOT / "src" / "trashfire"


class Scratch:
    """A copy of conf/ and the files an extension touched in it (or in src/, by name)."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.conf = tmp_path / "conf"
        shutil.copytree(ROOT / "conf", self.conf)
        self.tmp, self.touched = tmp_path, set()
        monkeypatch.setenv("TRASHFIRE_CONFIG_DIR", str(self.conf))

    def write(self, relative: str, text: str) -> None:
        (self.conf / relative).write_text(text)
        self.touched.add(f"conf/{relative}")

    def edit(self, relative: str, old: str, new: str) -> None:
        path = self.conf / relative
        assert path.read_text().count(old) == 1, old
        path.write_text(path.read_text().replace(old, new))
        self.touched.add(f"conf/{relative}")

    def python(self, module_file: Path) -> None:
        """A source file the extension edits (the test patches in what the edit adds)."""
        assert module_file.is_file(), module_file
        self.touched.add(str(module_file.relative_to(ROOT)))

    def cfg(self, *overrides: str):
        return normalise(validate(compose(tiny_overrides(self.tmp, *overrides), conf=self.conf)))


# ---------------------------------------------------------------------------------------------
# A new ART attack: one YAML file; its kind is ART's declaration of its class

ZOO = """\
# ART's ZooAttack (Chen et al. 2017): zeroth-order optimisation, gradients estimated from the
# model's scores by finite differences: a black-box attack, as ART declares it.
zoo:
  name: zoo
  _target_: art.attacks.evasion.ZooAttack
  param: max_iter
  units: standardised
  norms: ["2"]
  values: [5]
  samples: 5
  engine: per_image
  kwargs: {nb_parallel: 8, use_resize: false, use_importance: false, verbose: false}
  rules:
    norms: ["2"]
    values: {kind: count, low: 1}
    engine: [per_image, art]
"""

BIM = """\
# ART's BasicIterativeMethod (Kurakin et al.): max_iter linf steps along the loss gradient.
bim:
  name: bim
  _target_: art.attacks.evasion.BasicIterativeMethod
  param: eps
  units: standardised
  norms: [inf]
  values: [0.1, 0.3]
  batch_size: 100
  max_iter: 5
  step_scale: 2.5
  engine: art
  kwargs: {verbose: false}
  rules:
    norms: [inf]
    values: {kind: real, low: 0, open_low: true}
    engine: [art, per_image]
"""


def declared_kinds(scratch: Scratch, cfg) -> dict[str, bool]:
    """What the attack stage records of the grid's classes and the timing stage reads back:
    the experiments table's black_box per attack."""
    from trashfire.attacks.campaign import declare_attacks

    declare_attacks(cfg, Path(cfg.paths.attacks))
    return {name: known["black_box"] for name, known in attack_properties(cfg.attack, cfg.paths.attacks).items()}


def flags(cells: dict[str, tuple[list[float], bool]], eps=(0.1, 0.2, 0.3)) -> dict:
    """The validity flags of one undefended linf model cell attacked at `eps` by each attack
    (accuracies, and its kind as the experiments table gives it)."""
    rows = [
        {"attack": attack, "attack_value": e, "attack_value_standardised": e, "acc_adv": a} for attack, (accs, _) in cells.items() for e, a in zip(eps, accs)
    ]
    labels = {"train_hash": "m", "model_hash": "m", "dataset": "digits", "pretrained_on": "", "seed": 0, "model": "mlp2", "depth": 2, "epochs": 1, "lr": 0.05}
    labels |= {"defence": "none", "defence_param": "", "defence_value": 0, "norm": "inf", "attack_param": "eps", "attack_units": "standardised"}
    probes = dict.fromkeys(schema.PROBES, 0.0) | {"query_repeats": 5}
    table = pd.DataFrame(rows).assign(pixel_std=1.0, n_classes=10, acc_ben=0.9, acc_ben_attack_subset=0.9, degenerate=False, **labels, **probes)
    table = with_family(table.assign(black_box=table["attack"].map({attack: kind for attack, (_, kind) in cells.items()})))
    return validity.validity_table(table, eps_curves(table), validity.tolerances(compose([]))).iloc[0].to_dict()


def test_a_black_box_art_attack_is_one_file_and_the_flags_read_it_as_black_box(tmp_path, monkeypatch):
    scratch = Scratch(tmp_path, monkeypatch)
    scratch.write("attack/zoo.yaml", ZOO)
    cfg = scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[fgm,zoo]", "attack.fgm.norms=[inf]")
    assert len(scratch.touched) == 1, scratch.touched
    assert {cell.attack for cell in attack_cells(cfg)} == {"fgm", "zoo"}
    kinds = declared_kinds(scratch, cfg)
    assert kinds == {"fgm": False, "zoo": True}  # ZooAttack requires no gradient interface of ART's estimators
    # the flags compare a black-box attack with the white-box ones at a shared eps budget:
    # zoo's own strength is an iteration count, so its rows are given eps budgets here
    row = flags({"fgm": ([0.6, 0.5, 0.4], kinds["fgm"]), "zoo": ([0.3, 0.25, 0.2], kinds["zoo"])})
    assert row["black_box_stronger"] is True and "black-box 0.30, white-box 0.60" in row["black_box_stronger_detail"]
    assert "zoo" not in row["largest_eps_not_breaking_detail"]  # only white-box attacks must reach zero


def test_a_white_box_art_attack_is_one_file_and_the_flags_read_it_as_white_box(tmp_path, monkeypatch):
    scratch = Scratch(tmp_path, monkeypatch)
    scratch.write("attack/bim.yaml", BIM)
    cfg = scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[square,bim]", "attack.square.values=[0.1,0.3]", "attack.square.units=standardised")
    assert len(scratch.touched) == 1, scratch.touched
    assert sum(cell.attack == "bim" for cell in attack_cells(cfg)) == 2
    kinds = declared_kinds(scratch, cfg)
    assert kinds == {"square": True, "bim": False}  # BasicIterativeMethod requires LossGradientsMixin
    row = flags({"bim": ([0.6, 0.5, 0.4], kinds["bim"]), "square": ([0.3, 0.2, 0.1], kinds["square"])})
    assert row["black_box_stronger"] is True  # square (black-box) beats bim (white-box)
    assert row["largest_eps_not_breaking"] is True and "bim linf 0.40 at eps 0.3" in row["largest_eps_not_breaking_detail"]


def test_an_attack_without_an_art_declaration_states_its_kind_in_its_own_file(tmp_path, monkeypatch):
    """Our composite (no ART class) says black_box in its option; without it the attack stage
    refuses before any cell runs."""
    scratch = Scratch(tmp_path, monkeypatch)
    cfg = scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[autoattack]")
    assert declared_kinds(scratch, cfg) == {"autoattack": False}
    scratch.edit("attack/autoattack.yaml", "\n  black_box: false ", "\n  black_box: null ")
    with pytest.raises(ConfigError, match="declares no estimator requirements"):
        declared_kinds(scratch, scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[autoattack]"))


# ---------------------------------------------------------------------------------------------
# A new data set with an option that changes the images: a loader and its YAML file

NOISY = """\
# scikit-learn's digits with Gaussian pixel noise of `noise` grey levels (of 16), drawn once.
noisy_digits:
  name: noisy_digits
  source: noisy_digits
  noise: 1.0
  root: null
  n_classes: 10
  subsample: null
  unhashed: [root]
  rules:
    noise: {kind: real, low: 0}
"""


def test_a_data_set_with_an_option_that_changes_the_images_is_two_files_and_the_option_is_in_the_cache_key(tmp_path, monkeypatch):
    scratch = Scratch(tmp_path, monkeypatch)
    read = []

    def load_noisy_digits(root=None, noise: float = 0.0, **_):  # the loader, in src/trashfire/data/loaders.py
        read.append(noise)
        data = loaders.load_sklearn_digits()
        noisy = data.images + np.random.default_rng(0).normal(0, noise, data.images.shape)
        return loaders.RawDataset(np.clip(noisy, 0, 16).round().astype(np.uint8), data.labels, data.pixel_max)

    scratch.python(SRC / "data" / "loaders.py")  # registered in LOADERS, beside the others
    monkeypatch.setitem(loaders.LOADERS, "noisy_digits", load_noisy_digits)
    monkeypatch.setattr(data_checks, "DATA_SOURCES", (*loaders.LOADERS, "fusion"))  # as its import reads LOADERS
    scratch.write("data/noisy_digits.yaml", NOISY)
    assert len(scratch.touched) == 2, scratch.touched

    grid = ("model=[mlp2]", "defence=[none]", "attack=[fgm]", "data=[digits,noisy_digits]", "data.noisy_digits.subsample=400")

    def trained(*overrides):
        return {cell.hash for cell in training_cells(scratch.cfg(*grid, *overrides)) if cell.dataset == "noisy_digits"}

    cfg = scratch.cfg(*grid)
    assert trained("data.noisy_digits.noise=2.0").isdisjoint(trained())
    assert trained("data.noisy_digits.root=/elsewhere") == trained()  # unhashed: where the files are
    with pytest.raises(ConfigError, match="data.noisy_digits.noise"):
        scratch.cfg(*grid, "data.noisy_digits.noise=-1")  # its rules check it

    prepare.run(cfg)  # the stage hands the loader the new key
    assert read == [1.0]
    assert np.load(dataset_dir(cfg.paths.processed, cfg, "noisy_digits") / "images.npy").shape == (400, 1, 8, 8)


# ---------------------------------------------------------------------------------------------
# A new metric with a setting: its registry entry and the setting


def test_a_metric_with_a_setting_is_two_files(tmp_path, monkeypatch):
    scratch = Scratch(tmp_path, monkeypatch)
    scratch.edit("metrics/default.yaml", "trash:\n", "acc_adv_quantile:\n  q: 0.1          # the quantile of the attack cells' accuracy under attack\ntrash:\n")
    entry = registry.Metric(  # an entry of HEADLINE in src/trashfire/metrics/registry.py, its definition inline
        "acc_adv_quantile",
        lambda r: float(np.quantile(registry.non_degenerate(r.experiments)["acc_adv"], r.settings.acc_adv_quantile.q)),
        "the q-quantile (metrics.acc_adv_quantile.q) of accuracy under attack over the sound attack cells",
    )
    scratch.python(SRC / "metrics" / "registry.py")
    monkeypatch.setattr(registry, "HEADLINE", [*registry.HEADLINE, entry])
    assert len(scratch.touched) == 2, scratch.touched

    cfg = scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[fgm]")
    view = aggregate.STAGE.view(cfg)  # the stage reads it: no declaration to add, dvc.yaml unchanged
    experiments = pd.DataFrame({"acc_adv": [0.0, 0.5, 1.0], "degenerate": False})
    registered = next(metric for metric in registry.HEADLINE if metric.name == "acc_adv_quantile")
    assert registered.compute(registry.Results(experiments=experiments, settings=view.metrics)) == pytest.approx(0.1)
    view = aggregate.STAGE.view(scratch.cfg("model=[mlp2]", "defence=[none]", "attack=[fgm]", "metrics.acc_adv_quantile.q=0.5"))
    assert registered.compute(registry.Results(experiments=experiments, settings=view.metrics)) == pytest.approx(0.5)
    assert registry.meanings()["acc_adv_quantile"].startswith("the q-quantile")  # metrics.json's and the report's sentence
