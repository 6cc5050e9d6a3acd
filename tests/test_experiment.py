"""The Hydra entry point: the Optuna grid-sweep preset runs the training grid and stores its
study in SQLite; a single run with a bad option stops with one line."""

import os
import subprocess
import sys

import optuna

from tests.conftest import ROOT, TINY


def experiment(tmp_path, *args):
    paths = [f"paths.{k}={tmp_path / k}" for k in ("processed", "models", "attacks")]
    command = [sys.executable, "-m", "trashfire.experiment", *args, *TINY, "attack.fgm.values=[0.3]", "attack.pgd.values=[0.3]", *paths]
    env = os.environ | {"TRASHFIRE_CONFIG_DIR": str(ROOT / "conf")}
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_grid_sweep_runs_each_cell_once_into_a_sqlite_study(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    result = experiment(
        tmp_path, "--multirun", "hparams_search=training_grid", "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage={storage}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "model=choice(resnet18)", "defence=choice(none,fsq)", "train.epochs=choice(1)",
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
    assert result.stderr.strip().splitlines() == ["trashfire.experiment: config error: attack: unknown option 'nosuch'; available: deepfool, fgm, hsj, pgd, pixel, threshold"]
    assert not (tmp_path / "models").exists()
