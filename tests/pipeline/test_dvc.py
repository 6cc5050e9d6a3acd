"""The DVC pipeline on a tiny grid, in a scratch git + DVC copy of the project whose conf/
default is the tiny grid: `dvc exp run` composes params.yaml from conf/ (DVC's Hydra
integration) and runs everything; a second `dvc repro` does nothing; `dvc exp run -S` on an
attack eps re-runs attack and later stages but trains nothing; `dvc plots show` and `dvc exp
show` list the plots and the headline metrics. Slow: a new epoch value trains only the new
cells, a plotting change redraws without re-running experiments, and a queued grid runs."""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pandas.testing as pdt
import pytest
import yaml
from filelock import FileLock
from omegaconf import OmegaConf

from tests.conftest import ROOT
from trashfire.core import schema
from trashfire.stages import ORDER

# the tiny preset on the FC net: the same 5 model cells (one per defence), a fraction of the
# compute; three survival fitters and small LIME runs, since these tests are about what DVC re-runs.
# One process per stage, as conftest.TINY: each worker process a stage spawns imports torch and
# ART afresh, which costs more than these cells' compute (the first run takes 47 s instead of
# 66 s); that cells give the same records in workers is tests/core/test_parallel.py's to prove
SMALLER = {"compute": {"workers": 1}, "survival": {"fitters": ["weibull", "lognormal", "cox"]}, "brittle": {"n_samples": 4, "lime_samples": 20}}


def tiny_default() -> str:
    """conf/experiment/tiny.yaml on the FC net with SMALLER, as a scratch project's default."""
    preset = yaml.safe_load((ROOT / "conf" / "experiment" / "tiny.yaml").read_text())
    preset["defaults"] = [{"override /model": ["fcnet"]} if "override /model" in entry else entry for entry in preset["defaults"]]
    merged = OmegaConf.to_container(OmegaConf.merge(preset, SMALLER))
    return "# @package _global_\n" + yaml.safe_dump(merged, sort_keys=False)


@pytest.fixture(scope="session")
def first_run(tmp_path_factory, worker_id):
    """One scratch project after its first `dvc exp run`, built once for all xdist workers
    (the first to ask builds it under a lock, the others wait): (its folder, the run's output)."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    template, output = shared / "dvc_first_run", shared / "dvc_first_run.log"
    with FileLock(str(shared / "dvc_first_run.lock")):
        if not output.exists():
            shutil.rmtree(template, ignore_errors=True)
            ran = scratch_project(template)("dvc", "exp", "run")
            output.write_text(ran)
    return template, output.read_text()


@pytest.fixture
def ran_project(first_run, tmp_path):
    """A copy of the project after its first run (git, DVC cache, outputs): what a user has
    after `dvc exp run`. DVC's state (inodes, locks) stays behind; it rehashes on demand."""
    return copy_of_first_run(first_run, tmp_path / "repo")


def copy_of_first_run(first_run, repo: Path):
    template, output = first_run
    shutil.copytree(template, repo, symlinks=True, ignore=dvc_state)
    run = runner(repo)
    run.first_run, run.first_output = first_run, output
    return run


def dvc_state(folder: str, names: list[str]) -> list[str]:
    """DVC's own scratch files (locks, inode state): a copy starts without them. Our last
    checked params file there (trashfire.core.workspace) stays, as in the user's workspace."""
    return [name for name in names if name != "trashfire"] if folder.endswith(os.path.join(".dvc", "tmp")) else []


def scratch_project(repo: Path):
    repo.mkdir()
    for item in ("dvc.yaml", "conf", "src"):
        source = ROOT / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, repo / item)
    (repo / "conf" / "experiment" / "default.yaml").write_text(tiny_default())
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")  # reports/headline.json in git, as in the project
    run = runner(repo)
    for command in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "hydra.enabled", "true"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "tiny"],
    ):
        run(*command)
    return run


def runner_env(repo: Path) -> dict[str, str]:
    """The environment of the scratch project `repo`: its conf/ and this venv's tools."""
    return os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TRASHFIRE_CONFIG_DIR": str(repo / "conf"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


def runner(repo: Path):
    """Runs a command in the scratch project `repo`, with its conf/ and this venv's tools."""
    env = runner_env(repo)

    def run(*command: str) -> str:
        result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{command}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
        return result.stdout + result.stderr

    run.repo = repo
    return run


# --- incremental runs equal a run from scratch ---------------------------------------------

SURVIVAL_KEYS = {
    "aft_comparison.csv": ["fitter"],
    "coefficients.csv": ["fitter", "param", "covariate"],
    "expected_times.csv": ["attack_hash"],
    "logrank.csv": ["attack_family", "defence", "reference", "n", "n_reference"],
}


def untimed_outputs(reports: Path) -> dict[str, object]:
    """Every table, card and metric of a run, without what the clock or the machine decides.
    The survival fits are on durations: of them, which rows there are."""
    found: dict[str, object] = {}
    for path in sorted(reports.glob("*.csv")):
        table = pd.read_csv(path)
        if path.name == "findings.csv":  # 003's claims are about times: which rows, not their values
            timed = table["id"].str.startswith(schema.CLOCK_FINDINGS)
            table.loc[timed, ["value", "lo", "hi", "p", "verdict", "detail"]] = None
        found[path.name] = schema.untimed_table(table)
    for name, keys in SURVIVAL_KEYS.items():
        found[f"survival/{name}"] = pd.read_csv(reports / "survival" / name)[keys]
    for path in sorted((reports / "cards").glob("*.json")) + [reports / "metrics.json"]:
        found[str(path.relative_to(reports))] = schema.untimed_record(json.loads(path.read_text()))
    return found


def assert_same_outputs(incremental: Path, scratch: Path) -> None:
    ours, theirs = untimed_outputs(incremental), untimed_outputs(scratch)
    assert sorted(ours) == sorted(theirs)
    for name, value in ours.items():
        if isinstance(value, pd.DataFrame):
            pdt.assert_frame_equal(value, theirs[name], check_exact=False, rtol=1e-9, obj=name)
        else:
            assert value == theirs[name], name


def test_incremental_repro_after_narrowing_widening_and_a_metric_change_equals_a_run_from_scratch(ran_project, tmp_path):
    project = ran_project
    steps = [
        [],  # the tiny grid, already run: FGM and PGD
        ["attack=[fgm]"],  # narrow: the stale experiments.csv
        # widen, with a metric setting: one repro for both (the suite's longest test); the
        # outputs after it must equal a run from scratch of the same params
        ["attack=[fgm]", "attack.fgm.values=[0.1,0.5,1.0]", "viability.w=0.3", "metrics.trash.eps_max=0.5"],
    ]
    for step, overrides in enumerate(steps):
        project(sys.executable, "-m", "trashfire.params", *overrides)
        ran = project("dvc", "repro")
        experiments = pd.read_csv(project.repo / "reports" / "experiments.csv")
        wanted = {"fgm", "pgd", "worst_case"} if step == 0 else {"fgm"}  # the worst case per sample needs two attacks
        assert set(experiments["attack"]) == wanted, (step, ran)
        if step == 0:
            assert stages_run(ran) == set(), ran  # trashfire.params composes what DVC composed
        if step == 1:
            assert {"timing", "survival", "aggregate", "figures"} <= stages_run(ran) and "train" not in stages_run(ran), ran
    assert sorted(experiments["attack_value"].unique()) == [0.1, 0.5, 1.0]

    # from scratch from the attacks on: no step changes a data or training param, so the first
    # run's data and models are what a scratch run would train; every report is made afresh
    scratch = copy_of_first_run(project.first_run, tmp_path / "scratch")
    shutil.rmtree(scratch.repo / "reports")
    shutil.copy(project.repo / "params.yaml", scratch.repo / "params.yaml")
    ran = scratch("dvc", "repro")
    # certify's inputs (data, models, its settings) are the first run's: DVC checks its tables
    # out of the run cache rather than run it (with certify.enabled false they are empty anyway)
    assert stages_run(ran) == set(ORDER) - {"prepare", "train", "certify"}, ran
    assert_same_outputs(project.repo / "reports", scratch.repo / "reports")


# the README's `dvc exp show`: DVC lists each changed dependency's hash (every table the
# figures read) beside the params and metrics, and has no setting to hide them
DEPENDENCY_COLUMNS = "^(reports|data|models)/"


def stages_run(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def test_pipeline_caches_at_stage_and_cell_level_through_dvc_exp_run(ran_project):
    project, first = ran_project, ran_project.first_output
    assert stages_run(first) == {"prepare", "train", "attack", "certify", "budget", "brittle", "timing", "survival", "aggregate", "figures"}, first
    assert "fcnet" in (project.repo / "params.yaml").read_text()  # composed from conf/ by DVC

    again = project("dvc", "repro")
    assert stages_run(again) == set(), again

    # the floors: the survival data set's code is read from timing on, and by nothing before it
    # (what DVC would rerun, asked with --dry; the edit is then undone)
    survival_data = project.repo / "src" / "trashfire" / "tables" / "survival_data.py"
    code = survival_data.read_text()
    survival_data.write_text(code + "\n# an edit of the survival data set's code\n")
    edited = project("dvc", "repro", "--dry")
    assert stages_run(edited) == {"timing", "survival", "aggregate", "figures"}, edited
    survival_data.write_text(code)

    project("git", "add", "-A")  # the baseline committed, as a user does: params.yaml, dvc.lock, reports/headline.json
    project("git", "commit", "-q", "-m", "baseline")
    new_eps = project("dvc", "exp", "run", "-S", "attack.pgd.values=[0.1,0.5,1.0]")
    assert "train" not in stages_run(new_eps) and "prepare" not in stages_run(new_eps), new_eps
    assert {"attack", "timing", "survival", "aggregate", "figures"} <= stages_run(new_eps), new_eps
    assert "brittle" not in stages_run(new_eps), new_eps  # LIME scores depend on the models, not the attacks
    assert "5 to run" in new_eps, new_eps  # one new PGD eps for each of the 5 model cells

    plots = project("dvc", "plots", "show", "--json")
    for plot_id in ("accuracy_vs_eps", "normalised_accuracy_vs_eps", "evp_vs_tau", "brittle_vs_robust_acc"):
        assert plot_id in plots, plot_id
    assert "accuracy_eps_curves.png" in plots

    shown = list(csv.DictReader(io.StringIO(project("dvc", "exp", "show", "--csv"))))
    headline = [column for column in shown[0] if column in ("acc_adv", "evp", "trash_flops")]
    assert len(headline) == 3, list(shown[0])
    assert sum(row[headline[0]] not in ("", "-", "!") for row in shown) >= 2, shown  # both experiments with their metrics
    assert "trash_adv_median_by_clock.flops" not in shown[0]  # every metric stays in metrics.json, out of the table

    # the README's plain `dvc exp show --only-changed`: in a 200-column terminal the two
    # experiments' changed metrics and params are all there with values; DVC folds the
    # changed input files' hashes into one last "…" column, and --drop removes them
    for extra in ([], ["--drop", DEPENDENCY_COLUMNS]):
        table = subprocess.run(
            ["dvc", "exp", "show", "--only-changed", "--no-pager", *extra],
            cwd=project.repo,
            env=runner_env(project.repo) | {"COLUMNS": "200"},
            capture_output=True,
            text=True,
        )
        lines = table.stdout.splitlines()
        assert table.returncode == 0 and max(map(len, lines)) <= 200, table.stdout
        header = next(line for line in lines if "Experiment" in line).split()
        assert {"acc_adv", "evp", "trash_flops", "attack.pgd.values"} <= set(header), table.stdout
        assert header[-1] == "attack.pgd.values" or (not extra and header[-1] == "…"), table.stdout
        assert sum(bool(re.search(r"\b0\.\d{2,}", line)) for line in lines) >= 2, table.stdout


@pytest.mark.slow
def test_new_epochs_train_only_new_cells_and_a_plotting_change_only_redraws(ran_project):
    project = ran_project
    new_epoch = project("dvc", "exp", "run", "-S", "train.epochs=[3,4]")  # the tiny preset trains 3 epochs
    assert "train" in stages_run(new_epoch), new_epoch
    assert "4 training cells, 2 cached, 2 to train" in new_epoch, new_epoch

    # a plotting change, or a change of the report's templates (package data, not imports),
    # redraws the figures and the report from the recorded tables only
    report = project.repo / "reports" / "report.html"
    for changed, line in (("figures/trash.py", "\n# a plotting change\n"), ("templates/report.css", "\n/* a style change */\n")):
        source = project.repo / "src" / "trashfire" / "report" / changed
        source.write_text(source.read_text() + line)
        before = report.stat().st_mtime_ns
        redraw = project("dvc", "repro", "figures")
        assert stages_run(redraw) == {"figures"}, (changed, redraw)
        assert report.stat().st_mtime_ns > before, changed


@pytest.mark.slow
def test_dvc_exp_queue_runs_a_grid_of_attack_params(ran_project):
    project = ran_project
    project("git", "add", "-A")
    project("git", "commit", "-q", "-m", "baseline results")
    project("dvc", "exp", "run", "--queue", "-S", "attack.fgm.values=[0.2],[0.4]")
    ran = project("dvc", "exp", "run", "--run-all", "-j", "1")
    assert "train" not in stages_run(ran), ran
    shown = project("dvc", "exp", "show", "--csv")
    assert "[0.2]" in shown and "[0.4]" in shown, shown


# --- data prepared for one config is never another's ----------------------------------------

SMOKE_CELLS = [
    "experiment=smoke",
    "split.n_attack=10",
    "attack=[fgm]",
    "attack.fgm.values=[0.3]",
    "train.epochs=[1]",
    "compute.progress=false",
    "split.seeds=[0]",
]


def test_a_smaller_sweep_after_the_default_run_trains_on_its_own_data_and_repro_trusts_no_stale_cell(ran_project):
    """The default run has prepared its 400 digits; a sweep of experiment=smoke (300 digits,
    10 attacked) on the same working copy prepares and uses the smoke data, and `dvc repro` of
    the smoke config then finds those cells, trained and attacked on its own data."""
    project = ran_project
    sweep = [sys.executable, "-m", "trashfire.experiment", "--multirun", "hparams_search=training_grid", "hydra.sweeper.n_trials=2"]
    choices = ["model=choice(fcnet)", "defence=choice(none,gauss_in)", "train.epochs=choice(1)", f"hydra.sweeper.storage=sqlite:///{project.repo / 'sweep.db'}"]
    project(*sweep, *SMOKE_CELLS, *choices, f"hydra.sweep.dir={project.repo / 'multirun'}")
    trained = [json.loads(path.read_text()) for path in (project.repo / "models").glob("*.json")]
    smoke = [record for record in trained if record["n_train"] != 320]  # the default run's: 400 digits, 80% to train
    assert sorted(record["n_train"] for record in smoke) == [240, 240], [record["n_train"] for record in trained]  # 300 digits
    attacked = [json.loads(path.read_text()) for path in (project.repo / "reports" / "attacks").glob("*.json")]
    assert sorted(record["n_attack"] for record in attacked if record["n_train"] == 240) == [10, 10]

    project(sys.executable, "-m", "trashfire.params", *SMOKE_CELLS, "model=[fcnet]", "defence=[none,gauss_in]")
    repro = project("dvc", "repro", "attack")
    assert "2 training cells, 2 cached, 0 to train" in repro and "2 attack cells, 2 recorded, 0 to run" in repro, repro
    for path in (project.repo / "models").glob("*.json"):
        record = json.loads(path.read_text())
        assert record["n_train"] in (240, 320) and (record["n_train"] == 240) == (record["data_hash"] in {r["data_hash"] for r in smoke}), record


def test_a_dvc_exp_run_that_fails_its_config_check_leaves_the_workspace_as_it_was(ran_project):
    project = ran_project
    before = {name: (project.repo / name).read_bytes() for name in ("params.yaml", "dvc.lock")}
    beyond_the_grid = ["-S", "metrics.auc.units=standardised", "-S", "metrics.auc.eps1=5"]  # the tiny preset's eps grids end at 1.0 standardised
    failed = subprocess.run(
        ["dvc", "exp", "run", *beyond_the_grid], cwd=project.repo, env=runner_env(project.repo), capture_output=True, text=True, timeout=600
    )
    assert failed.returncode != 0 and "metrics.auc.eps1" in failed.stdout + failed.stderr, failed.stdout + failed.stderr
    for name, content in before.items():
        assert (project.repo / name).read_bytes() == content, name
