"""Adding an ART attack is one YAML file: a scratch copy of conf/ gains one attack the project
does not ship (ART's BasicIterativeMethod), and the stages run it from prepare to aggregate
with no Python edit; its rules (norms, strength kind, engines) come from the file itself."""

from __future__ import annotations

import json
import shutil

import pandas as pd

from tests.conftest import ROOT, tiny_overrides
from trashfire.core.config import compose, normalise, validate
from trashfire.core.grid import attack_cells, model_cells
from trashfire.stages import aggregate, attack, brittle, prepare, survival, timing, train
from trashfire.tables.worst_case import measured

BIM = """\
# ART's BasicIterativeMethod (Kurakin et al.): max_iter linf steps of eps * step_scale /
# max_iter, clipped to the eps-ball; ART's own loop on the whole batch (engine art).
bim:
  name: bim
  _target_: art.attacks.evasion.BasicIterativeMethod
  param: eps
  units: standardised
  norms: [inf]
  values: [0.3, 1.0]
  batch_size: 100
  max_iter: 5
  step_scale: 2.5
  engine: art
  kwargs:
    verbose: false
  rules:
    norms: [inf]
    values: {kind: real, low: 0, open_low: true}
    engine: [art, per_image]
"""


def test_a_new_art_attack_is_one_yaml_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "attack" / "bim.yaml").write_text(BIM)
    monkeypatch.setenv("TRASHFIRE_CONFIG_DIR", str(conf))
    overrides = tiny_overrides(
        tmp_path,
        "model=[mlp2]",
        "defence=[none]",
        "attack=[fgm,bim]",
        "attack.fgm.norms=[inf]",
        "train.epochs=[1,2]",
        "survival.fitters=[weibull]",
        "brittle.n_samples=5",
        "metrics.brittle.robust_acc.attack=bim",
    )
    cfg = normalise(validate(compose(overrides, conf=conf)))
    assert list(cfg.attack) == ["fgm", "bim"]
    bim_cells = [c for c in attack_cells(cfg) if c.attack == "bim"]
    assert len(bim_cells) == 2 * len(model_cells(cfg))

    prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    experiments, _ = timing.run(cfg)
    survival.run(cfg)
    brittle.run(cfg)
    summary = aggregate.run(cfg)

    reports = tmp_path / "reports"
    table = pd.read_csv(reports / "experiments.csv")
    rows = table[table["attack"] == "bim"]
    assert sorted(rows["attack_hash"]) == sorted(c.hash for c in bim_cells)
    assert set(rows["engine"]) == {"art"} and set(rows["attack_param"]) == {"eps"} and set(rows["norm"].astype(str)) == {"inf"}
    assert sorted(rows["attack_value"].unique()) == [0.3, 1.0]
    assert summary["n_attack_cells"] == len(measured(table)) == len(experiments)  # the worst cases are not attack cells
    for name in ("robustness.csv", "curves.csv", "trash.csv"):
        assert "bim" in set(pd.read_csv(reports / name)["attack"]), name
    assert pd.read_csv(reports / "brittle.csv")["robust_acc"].notna().all()  # under bim
    record = json.loads(next((reports / "attacks").glob(f"{bim_cells[0].hash}*.json")).read_text())
    assert record["config"]["rules"]["engine"] == ["art", "per_image"]
