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


@pytest.fixture
def git_project(tmp_path):
    """A git + DVC repository whose conf/ default is the tiny grid, so that `dvc exp run -S`
    (which composes params.yaml from conf/ through DVC's Hydra integration) stays tiny."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("dvc.yaml", "conf", "src"):
        shutil.copytree(ROOT / item, repo / item) if (ROOT / item).is_dir() else shutil.copy(ROOT / item, repo / item)
    tiny = "\n".join(f"{key}: {value}" for key, value in (o.split("=", 1) for o in TINY if not o.startswith(("model=", "attack="))))
    (repo / "conf" / "experiment" / "default.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: [fcnet]\n  - override /attack: [fgm, pgd]\n" + _nested(tiny))
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "TRASHFIRE_CONFIG_DIR": str(repo / "conf"),
                        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(*command: str) -> str:
        result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{command}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
        return result.stdout + result.stderr

    run("git", "init", "-q")
    run("dvc", "init", "-q")
    run("dvc", "config", "hydra.enabled", "true")
    (repo / ".gitignore").write_text("/data/\n/models/\n/reports/\n__pycache__/\n")
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "tiny project")
    run.repo = repo
    return run


def _nested(dotted_lines: str) -> str:
    """`a.b.c: v` lines as nested YAML."""
    from omegaconf import OmegaConf

    merged = OmegaConf.from_dotlist([line.replace(": ", "=", 1) for line in dotted_lines.splitlines()])
    return OmegaConf.to_yaml(merged)


def test_dvc_exp_run_set_param_on_an_attack_trains_nothing_and_exp_show_lists_the_headline(git_project):
    baseline = git_project("dvc", "exp", "run")
    assert {"prepare", "train", "attack"} <= stages_run(baseline), baseline
    assert "fcnet" in (git_project.repo / "params.yaml").read_text()

    changed = git_project("dvc", "exp", "run", "-S", "attack.pgd.values=[0.1,0.5]")
    assert "train" not in stages_run(changed) and "prepare" not in stages_run(changed), changed
    assert "attack" in stages_run(changed), changed
    assert "0.5" in (git_project.repo / "params.yaml").read_text()

    import csv
    import io

    shown = list(csv.DictReader(io.StringIO(git_project("dvc", "exp", "show", "--csv"))))
    headline = [column for column in shown[0] if column.endswith(("acc_adv_mean", "evp_mean", "trash_adv_median"))]
    assert len(headline) == 3, list(shown[0])
    experiments = [row for row in shown if row[headline[0]] not in ("", "-")]
    assert len(experiments) >= 2, shown  # the baseline and the -S experiment, each with its metrics


@pytest.mark.slow
def test_dvc_exp_queue_runs_a_grid_of_attack_params(git_project):
    git_project("dvc", "exp", "run")
    git_project("git", "add", "-A")
    git_project("git", "commit", "-q", "-m", "baseline results")
    git_project("dvc", "exp", "run", "--queue", "-S", "attack.fgm.values=[0.2],[0.4]")
    ran = git_project("dvc", "exp", "run", "--run-all", "-j", "1")
    assert "train" not in stages_run(ran), ran
    shown = git_project("dvc", "exp", "show", "--csv")
    assert "[0.2]" in shown and "[0.4]" in shown, shown
