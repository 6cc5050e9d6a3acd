"""Adding a torch loop is one module plus one YAML file: a scratch copy of the package gains
`trashfire/attacks/loops/noise.py` (a random search the project does not ship) and its conf/
gains `attack/noise.yaml`; with no other edit, the validator accepts the option, the engine
runs the loop with the per-sample failure clock, and the timing stage's tables carry its cells.
It runs in a subprocess, so that `import trashfire` is the copy's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pandas as pd

from tests.conftest import ROOT, tiny_overrides

NOISE = '''\
"""Random search: max_iter draws of a random corner of the linf eps-ball around the clean
input, a query each; a sample fails at its first misclassified draw."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop


def budget(spec) -> int:
    return int(spec["max_iter"])


def run(target, log, clock, spec, strength, early_exit, batch_size) -> None:
    import numpy as np
    import torch

    from trashfire.attacks.failure_log import batches
    from trashfire.attacks.target import margins
    from trashfire.core.clocks import STEPS

    low, high = target.clip_values
    for rows in batches(len(log.y), batch_size):
        x0 = torch.from_numpy(log.x[rows]).to(target.device)
        labels = torch.from_numpy(log.y[rows]).to(target.device)
        x_adv, active = x0.clone(), np.arange(len(rows))
        for step in range(budget(spec) + 1):
            checked = rows[active]
            clock.count(checked, queries=1, group=STEPS)
            with torch.no_grad():
                logits = target.logits(x_adv[active])
            if step == 0:
                wrong = log.first_query(rows, target.decide(logits), margins(logits, labels[active]))
            else:
                wrong = log.observe(checked, target.decide(logits), step)
            clock.lap(checked, STEPS)
            active = active[~wrong]
            if step == budget(spec) or not len(active):
                break
            corner = strength * torch.sign(torch.rand_like(x0[active]) - 0.5)
            x_adv[active] = torch.clamp(x0[active] + corner, low, high)
        log.x_adv[rows] = x_adv.cpu().numpy()


LOOP = TorchLoop(name="noise", budget=budget, run=run)
'''

NOISE_YAML = """\
# A random search on the torch engine (trashfire.attacks.loops.noise): max_iter random corners
# of the linf eps-ball, a query each.
noise:
  name: noise
  _target_: trashfire.attacks.loops.TorchLoop   # no ART class runs it: the torch loop is the attack
  param: eps
  units: standardised
  norms: [inf]
  values: [0.5, 2.0]
  batch_size: 100
  max_iter: 4
  engine: torch
  black_box: true
  kwargs: {}
  rules:
    norms: [inf]
    values: {kind: real, low: 0, open_low: true}
    engine: [torch]
    torch:
      algorithm: noise
      required: [max_iter]
"""

SCRIPT = """\
import json, sys
from pathlib import Path
import trashfire
assert Path(trashfire.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), trashfire.__file__
from trashfire.core.config import compose, normalise, validate
from trashfire.core.grid import attack_cells
from trashfire.stages import attack, prepare, timing, train
cfg = normalise(validate(compose(json.loads(sys.argv[3]), conf=Path(sys.argv[2]))))
prepare.run(cfg)
train.run(cfg)
attack.run(cfg)
timing.run(cfg)
print(json.dumps(sorted(c.hash for c in attack_cells(cfg) if c.attack == "noise")))
"""


def test_a_new_torch_loop_is_one_module_and_one_yaml_file(tmp_path):
    src, conf = tmp_path / "src", tmp_path / "conf"
    shutil.copytree(ROOT / "src" / "trashfire", src / "trashfire", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "conf", conf)
    (src / "trashfire" / "attacks" / "loops" / "noise.py").write_text(NOISE)
    (conf / "attack" / "noise.yaml").write_text(NOISE_YAML)
    overrides = tiny_overrides(tmp_path, "model=[mlp2]", "defence=[none]", "attack=[noise]", "train.epochs=[2]")
    env = os.environ | {"PYTHONPATH": str(src), "TRASHFIRE_CONFIG_DIR": str(conf)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(src), str(conf), json.dumps(overrides)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    hashes = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(hashes) == 2  # one model cell x two strengths

    reports = tmp_path / "reports"
    table = pd.read_csv(reports / "experiments.csv")
    rows = table[table["attack"] == "noise"]
    assert sorted(rows["attack_hash"]) == sorted(hashes)
    assert set(rows["engine"]) == {"torch"}
    samples = pd.read_parquet(reports / "survival_data.parquet", columns=["attack_hash", "event", "queries"])
    samples = samples[samples["attack_hash"].isin(hashes)]
    assert len(samples) and samples["queries"].between(1, 5).all()  # the first query and max_iter draws
    assert (samples.loc[samples["event"] == 0, "queries"] == 5).all()  # a censored sample spent the budget
    by_strength = rows.set_index("attack_value")["attack_hash"]
    broken = samples.groupby("attack_hash", observed=True)["event"].mean()
    assert broken[by_strength[2.0]] > broken[by_strength[0.5]]  # a larger ball breaks more samples
