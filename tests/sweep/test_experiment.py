"""The Hydra entry point: the Optuna grid-sweep preset runs the training grid and stores its
study in SQLite; a single run with a bad option stops with one line."""

import os
import subprocess
import sys

import optuna
import pytest

from tests.conftest import ATTACK_OPTIONS, ROOT, TINY


def experiment(tmp_path, *args):
    paths = [f"paths.{k}={tmp_path / k}" for k in ("processed", "models", "attacks")]
    # the test's own overrides come last: a sweep's choice(...) must win over TINY's lists
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    command = [sys.executable, "-m", "trashfire.experiment", *flags, *TINY, "attack.fgm.values=[0.3]", "attack.pgd.values=[0.3]", *paths, *overrides]
    env = os.environ | {"TRASHFIRE_CONFIG_DIR": str(ROOT / "conf")}
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_grid_sweep_runs_each_cell_once_into_a_sqlite_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    result = experiment(
        tmp_path,
        "--multirun",
        "hparams_search=training_grid",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "model=choice(cifar_resnet8)",
        "defence=choice(none,fsq)",
        "train.epochs=choice(1)",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="training_grid", storage=storage)
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.params["defence"] for t in trials) == ["fsq", "none"]
    assert all(0 <= t.value <= 1 for t in trials)
    assert len(list((tmp_path / "models").glob("*.json"))) == 1  # fsq reused the undefended weights


def test_single_run_with_an_unknown_attack_stops_with_one_line(tmp_path):
    result = experiment(tmp_path, "attack=[fgm,nosuch]")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"trashfire.experiment: config error: attack: unknown option 'nosuch'; available: {ATTACK_OPTIONS}"]
    assert not (tmp_path / "models").exists()


def test_objectives_are_means_over_the_trials_attack_cells():
    import pandas as pd
    from omegaconf import OmegaConf

    from tests.metrics.test_aggregate import EVP, PIXEL_AUC, attack_rows
    from trashfire.experiment import objectives_of

    # FGM at eps .5 and 1 (standardised; pixel std .4): acc .6 and .2, benign .8; t_train 2 s,
    # t_attack .1 s and .4 s per sample
    table = pd.DataFrame([row | {"t_train": 2.0, "t_attack": t} for row, t in zip(attack_rows(), (0.1, 0.4))])
    values = objectives_of(table, ["acc_adv", "acc_ben", "trash_constant_hazard", "evp", "auc_r"], OmegaConf.create({"auc": PIXEL_AUC}), EVP)
    # trash_constant_hazard: t_train (1 - acc) / t_attack = 2 * .4 / .1 = 8 and 2 * .8 / .4 = 4
    # evp: tau(10) = .25, g = [.8, .6, 0] on [0, .5, 1]: .5 (.8 + .6) / 2 + .5 (.6 + 0) / 2 = .5
    # auc_r: .19 / (.8 * .3), as in test_aggregate
    assert values == pytest.approx([0.4, 0.8, 6.0, 0.5, 0.19 / 0.24])


def test_an_unknown_objective_or_an_eps_objective_without_an_eps_attack_is_refused(tiny_cfg):
    from omegaconf import OmegaConf

    from trashfire.core.errors import ConfigError
    from trashfire.experiment import objective_names

    assert objective_names(OmegaConf.merge(tiny_cfg, {"objective": ["acc_adv", "trash_constant_hazard"]})) == ["acc_adv", "trash_constant_hazard"]
    with pytest.raises(ConfigError, match="objective: got 'speed'; allowed: acc_adv, acc_ben, trash_constant_hazard, evp, auc_r"):
        objective_names(OmegaConf.merge(tiny_cfg, {"objective": "speed"}))
    with pytest.raises(ConfigError, match="objective: 'trash' is now trash_constant_hazard"):  # its name before: two TRASHes, two names
        objective_names(OmegaConf.merge(tiny_cfg, {"objective": ["acc_adv", "trash"]}))
    no_eps = OmegaConf.merge(tiny_cfg, {"objective": "evp"})
    no_eps.attack = {"deepfool": {"param": "nb_grads"}}
    with pytest.raises(ConfigError, match="need an eps-grid attack"):
        objective_names(no_eps)
