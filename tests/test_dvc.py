"""The DVC pipeline on a tiny grid: a second `dvc repro` does nothing, a new attack eps
re-runs attack and later stages but trains nothing, and a new epoch value trains only the
new cells. Runs the real `dvc repro` in a scratch copy of the project."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trashfire.params import composed_yaml
from tests.conftest import ROOT, TINY


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("dvc.yaml", "conf", "src"):
        source = ROOT / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, repo / item)
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "TRASHFIRE_CONFIG_DIR": str(repo / "conf")}

    def repro(*overrides: str, target: str | None = None) -> str:
        (repo / "params.yaml").write_text(composed_yaml(TINY + list(overrides)))
        result = subprocess.run(["dvc", "repro", *([target] if target else [])], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout + result.stderr

    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=repo, env=env, check=True)
    repro.repo, repro.env = repo, env
    return repro


def stages_run(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def test_repro_caches_at_stage_and_cell_level(project):
    first = project()
    assert stages_run(first) == {"prepare", "train", "attack", "brittle", "timing", "survival", "aggregate", "figures"}, first

    again = project()
    assert stages_run(again) == set(), again

    new_eps = project("attack.pgd.values=[0.1,0.5,1.0]")
    assert "train" not in stages_run(new_eps) and "prepare" not in stages_run(new_eps), new_eps
    assert {"attack", "timing", "survival", "aggregate", "figures"} <= stages_run(new_eps), new_eps
    assert "brittle" not in stages_run(new_eps), new_eps  # LIME scores depend on the models, not the attacks
    assert "5 to run" in new_eps, new_eps  # one new PGD eps for each of the 5 model cells

    new_epoch = project("attack.pgd.values=[0.1,0.5,1.0]", "train.epochs=[1,2]")
    assert "train" in stages_run(new_epoch), new_epoch
    assert "4 training cells, 2 cached, 2 to train" in new_epoch, new_epoch

    # a plotting change redraws the figures and the report from the recorded tables only
    figures_py = project.repo / "src" / "trashfire" / "figures.py"
    figures_py.write_text(figures_py.read_text() + "\n# a plotting change\n")
    report = project.repo / "reports" / "report.html"
    before = report.stat().st_mtime_ns
    redraw = project("attack.pgd.values=[0.1,0.5,1.0]", "train.epochs=[1,2]", target="figures")
    assert stages_run(redraw) == {"figures"}, redraw
    assert report.stat().st_mtime_ns > before

    plots = subprocess.run(["dvc", "plots", "show", "--json"], cwd=project.repo, env=project.env, capture_output=True, text=True, timeout=300)
    assert plots.returncode == 0, plots.stderr
    for plot_id in ("accuracy_vs_eps", "normalised_accuracy_vs_eps", "evp_vs_tau", "brittle_vs_robust_acc"):
        assert plot_id in plots.stdout, plot_id
    assert "accuracy_eps_curves.png" in plots.stdout
