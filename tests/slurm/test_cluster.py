"""Sweeps through a real SLURM cluster (`make test-slurm` starts a single-node one): each trial
is a job that `sbatch` submitted; a sweep through SLURM gives the records of a local one and
leaves DVC nothing to compute; a job cancelled or timed out mid-trial has its trial queued
again and completed by a later job, no cell computed twice and none lost; a job on a node
without a GPU that asks for CUDA fails its trial with one line; three single-trial sweepers
(tools/slurm/sweepers.sbatch) share a grid without the slowest trial holding the others."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.conftest import ROOT
from tests.pipeline.test_dvc import scratch_project
from tests.sweep.test_sweep import CELL, env, postgres, records, sweep_command, trials_of  # noqa: F401 - postgres: a fixture

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL
# the launcher preset's resources, shrunk to this one-node cluster; quick looks at the jobs
ON_THIS_CLUSTER = [
    "launcher=slurm",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=null",
    "hydra.launcher.timeout_min=10",
    "hydra.launcher.poll_s=1",
    "hydra.launcher.lost_after_s=5",
    "threads=1",
]
TWO_POINTS = ["model=choice(fcnet)", "defence=choice(none,fsq)", "train.epochs=choice(1)"]
EIGHT_POINTS = ["model=choice(fcnet,mlp2)", "defence=choice(none,fsq,gauss_out,conf)", "train.epochs=choice(1)"]
WAIT = 600  # s: no test waits on the cluster longer than this


def slow(match: str, seconds: float, at: str, once: Path | None = None, name: str = "slow") -> list[str]:
    """Overrides that hold the trials with the override(s) `match` (one, `[a,b]`: all of them,
    or `[]`: every trial) in their overrides (tests/slurm/slow_trial.py)."""
    quoted = "[" + ",".join(f"'{m}'" for m in match.strip("[]").split(",") if m) + "]"
    held = [
        f"+hydra.callbacks.{name}._target_=tests.slurm.slow_trial.SlowTrial",
        f"+hydra.callbacks.{name}.match={quoted}",
        f"+hydra.callbacks.{name}.seconds={seconds}",
        f"+hydra.callbacks.{name}.at={at}",
    ]
    return held + ([f"+hydra.callbacks.{name}.once={once}"] if once else [])


def cluster_env(**extra: str) -> dict[str, str]:
    """The tests' environment, handed to each job by sbatch: this venv first on PATH, the
    project importable (the slow-trial callback lives in tests/)."""
    return env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT), **extra)


def sweep(folder: Path, storage: str | None, *args: str, **extra_env: str) -> str:
    command = sweep_command(folder, storage, *args)
    result = subprocess.run(command, cwd=folder, env=cluster_env(**extra_env), capture_output=True, text=True, timeout=WAIT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def job_state(job_id: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"JobState=(\S+)", shown)
    return found.group(1) if found else "GONE"


def cells_computed(logs: str) -> tuple[int, int]:
    """Training and attack cells the logged trials computed (not found cached)."""
    trained = sum(int(n) for n in re.findall(r"training cells, \d+ cached, (\d+) to train", logs))
    attacked = sum(int(n) for n in re.findall(r"attack cells, \d+ recorded, (\d+) to run", logs))
    return trained, attacked


def job_logs(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix in (".out", ".err"))


def test_a_sweep_through_slurm_gives_the_local_records_and_dvc_finds_every_cell_cached(tmp_path, postgres):  # noqa: F811
    """The grid of a scratch DVC project (the tiny preset on the FC net), swept through SLURM on
    a PostgreSQL study, then through submitit's local executor; then `dvc repro` in the first."""
    grid = ["model=choice(fcnet)", "defence=choice(none,gauss_in,gauss_out,conf,fsq)", "train.epochs=choice(3)"]
    runs = {}
    for name, storage, launcher in (("slurm", None, ON_THIS_CLUSTER), ("local", "sqlite:///{}/optuna.db", ["launcher=submitit_local"])):
        project = scratch_project(tmp_path / name)
        folder = project.repo
        command = [
            sys.executable,
            "-m",
            "trashfire.experiment",
            "--multirun",
            "hparams_search=training_grid",
            *grid,
            *launcher,
            f"hydra.sweep.dir={folder / 'sweep'}",
            *([f"hydra.sweeper.storage={storage.format(folder)}"] if storage else []),
        ]
        study_env = {"TRASHFIRE_STUDY_URL": postgres} if storage is None else {}
        ran = subprocess.run(
            command, cwd=folder, env=cluster_env(TRASHFIRE_CONFIG_DIR=str(folder / "conf"), **study_env), capture_output=True, text=True, timeout=WAIT
        )
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        runs[name] = (project, trials_of(storage.format(folder) if storage else postgres))

    trials = runs["slurm"][1]
    assert len(trials) == 5 and all(t.state == COMPLETE for t in trials)  # the study is complete
    job_ids = [t.user_attrs["slurm_job_id"] for t in trials]
    wait_for_jobs(job_ids, time.monotonic() + 60)  # a job may still be finishing after its result is written
    assert len(set(job_ids)) == 5 and all(job_state(j) == "COMPLETED" for j in job_ids), job_ids  # each trial its own SLURM job
    local = {tuple(sorted(t.params.items())): t.value for t in runs["local"][1]}
    assert {tuple(sorted(t.params.items())): t.value for t in trials} == local
    slurm_repo, local_repo = runs["slurm"][0].repo, runs["local"][0].repo
    for cache in ("models", "reports/attacks"):
        assert records(slurm_repo / cache) and records(slurm_repo / cache) == records(local_repo / cache), cache

    runs["slurm"][0](sys.executable, "-m", "trashfire.params")  # params.yaml: the project's default, the grid swept
    repro = runs["slurm"][0]("dvc", "repro", "attack")
    assert re.search(r"(\d+) training cells, \1 cached, 0 to train", repro), repro[-3000:]
    assert re.search(r"(\d+) attack cells, \1 recorded, 0 to run", repro), repro[-3000:]


def test_a_job_past_its_time_limit_has_its_trial_queued_again_and_completed_by_a_later_job(tmp_path):
    """launcher=slurm; the fsq trial's first job is held past its two-minute limit before it
    computes anything: SLURM ends it (TIMEOUT), the launcher declares it lost (no accounting
    here: its state comes from scontrol), the sweeper queues the trial again and the next job
    array completes it."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    held = slow("defence=fsq", 600, "start", once=tmp_path / "held-once")
    # submitit's USR2 10 s before the limit, which SLURM may send up to 60 s early (its event
    # resolution, `man sbatch`): at 50 s at the earliest, well after the other trial's job (6 s
    # here) has ended. A one-minute limit let the signal stop that job too, at 5 s (CI, stop 70).
    output = sweep(tmp_path, storage, *TWO_POINTS, *ON_THIS_CLUSTER, "hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=10", *held)
    trials = trials_of(storage)
    failed = [t for t in trials if t.state == FAIL]
    assert len(failed) == 1 and failed[0].params["defence"] == "fsq", [(t.state, t.params, t.user_attrs.get("error")) for t in trials]
    lost = failed[0].user_attrs
    assert re.fullmatch(r"lost: SLURM job \S+ ended without a result \(state TIMEOUT\); its log: \S+; queued again", lost["error"]), lost
    assert job_state(lost["slurm_job_id"]) == "TIMEOUT"
    done = {t.params["defence"]: t for t in trials if t.state == COMPLETE}
    assert sorted(done) == ["fsq", "none"] and done["fsq"].system_attrs["failed_trial"] == failed[0].number
    assert done["fsq"].user_attrs["slurm_job_id"] not in (lost["slurm_job_id"], done["none"].user_attrs["slurm_job_id"])
    # every cell computed once: by the trials' logs, and as the records on disk
    trained, attacked = cells_computed(job_logs(tmp_path / "sweep" / ".submitit"))
    assert (trained, attacked) == (len(list((tmp_path / "models").glob("*.json"))), len(list((tmp_path / "attacks").glob("*.json")))) == (1, 6)
    assert "2 trials complete, 1 failed" in output


def test_a_cancelled_sweeper_job_has_its_trial_taken_over_by_a_later_job(tmp_path):
    """tools/slurm/sweepers.sbatch, one sweeper: its job is cancelled while the fsq trial
    reports (every cell recorded, the result not yet told); a later sweeper job finds the trial
    stale by its heartbeat, queues it again and completes it, computing no cell again."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    args = [
        *sweep_command(tmp_path, storage, *TWO_POINTS, "hydra.sweeper.grace_period=10", "threads=1")[4:],
        *slow("defence=fsq", 600, "end", once=tmp_path / "held-once"),
    ]
    first = submit_sweepers(tmp_path, args, 1, "first")
    deadline = time.monotonic() + WAIT
    while not any(t.state == optuna.trial.TrialState.RUNNING and t.params.get("defence") == "fsq" for t in study_trials(storage)):
        assert time.monotonic() < deadline and job_state(first) in ("PENDING", "RUNNING"), f"the first sweeper ended first: {job_logs(tmp_path)[-3000:]}"
        time.sleep(1)
    while not (tmp_path / "attacks").exists() or len(list((tmp_path / "attacks").glob("*.json"))) < 6:  # fsq's cells recorded: it is held at its end
        assert time.monotonic() < deadline, job_logs(tmp_path)[-3000:]
        time.sleep(1)
    subprocess.run(["scancel", first], check=True, timeout=30)
    wait_for_jobs([first], deadline)
    assert job_state(first) == "CANCELLED"

    later = submit_sweepers(tmp_path, args, 1, "later")
    wait_for_jobs([later], deadline)
    assert job_state(later) == "COMPLETED", job_logs(tmp_path)[-3000:]
    trials = trials_of(storage)
    failed = [t for t in trials if t.state == FAIL]
    assert [(t.params["defence"], t.user_attrs["error"], t.user_attrs["slurm_job_id"]) for t in failed] == [
        ("fsq", "stale: its process stopped beating (killed?); queued again", first)
    ]
    done = {t.params["defence"]: t for t in trials if t.state == COMPLETE}
    assert sorted(done) == ["fsq", "none"] and done["fsq"].user_attrs["slurm_job_id"] == later
    trained, attacked = cells_computed(job_logs(tmp_path / "logs"))
    assert (trained, attacked) == (1, 6)  # the later job found fsq's cells recorded
    assert len(list((tmp_path / "attacks").glob("*.json"))) == 6


def test_a_trial_asking_for_cuda_on_a_node_without_a_gpu_fails_with_one_line(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    started = time.monotonic()
    sweep(tmp_path, storage, "model=choice(fcnet)", "defence=choice(none)", "train.epochs=choice(1)", *ON_THIS_CLUSTER, "compute.device=cuda")
    (trial,) = trials_of(storage)
    assert trial.state == FAIL and trial.user_attrs["error"] == "config error: compute.device: cuda asked for, but no CUDA device is present; use auto or cpu"
    wait_for_jobs([trial.user_attrs["slurm_job_id"]], time.monotonic() + 60)  # a job may still be finishing after its result is written
    assert job_state(trial.user_attrs["slurm_job_id"]) == "COMPLETED"  # the job ran and reported: no hang
    assert time.monotonic() - started < 120


def test_three_single_trial_sweepers_share_a_grid_and_the_slowest_trial_holds_no_other(tmp_path, postgres):  # noqa: F811
    """tools/slurm/sweepers.sbatch as an array of three on one PostgreSQL study, an eight-point
    grid whose trials stand for GPU work (each held 6 s, the first, fcnet/none, 45 s more):
    every point runs once, and the other seven complete while the first is held. Against one
    sweeper with `launcher=slurm` and batches of three (Hydra's blocking batches, issue 3091),
    where the held trial holds its batch."""
    holds = [*slow("[]", 6, "start", name="busy"), *slow("[model=fcnet,defence=none]", 45, "start")]
    common = [*EIGHT_POINTS, "hydra.sweeper.grace_period=60", "threads=1"]
    started = time.monotonic()
    args = [a for a in sweep_command(tmp_path, None, *common, "hydra.sweeper.study_name=independent")[4:] if not a.startswith("hydra.sweep.dir=")]
    jobs = expand_array(submit_sweepers(tmp_path, [*args, *holds], 3, "independent", TRASHFIRE_STUDY_URL=postgres), 3)
    wait_for_jobs(jobs, started + WAIT)
    independent = time.monotonic() - started
    assert [job_state(j) for j in jobs] == ["COMPLETED"] * 3, job_logs(tmp_path / "logs")[-3000:]
    trials = trials_of(postgres, "independent")
    assert len(trials) == 8 and all(t.state == COMPLETE for t in trials), [(t.state, t.params, t.user_attrs) for t in trials]
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 8  # every point once
    assert {t.user_attrs["slurm_job_id"] for t in trials} == set(jobs)  # each sweeper ran trials, in its own job
    (held,) = [t for t in trials if (t.params["model"], t.params["defence"]) == ("fcnet", "none")]
    times = [(t.params, t.datetime_start.time(), t.datetime_complete.time(), t.user_attrs["slurm_job_id"]) for t in trials]
    assert all(t.datetime_complete < held.datetime_complete for t in trials if t is not held), times  # none waited for it

    started = time.monotonic()
    sweep(tmp_path, None, *common, *ON_THIS_CLUSTER, "hydra.sweeper.n_jobs=3", "hydra.sweeper.study_name=batched", *holds, TRASHFIRE_STUDY_URL=postgres)
    batched = time.monotonic() - started
    assert sorted(t.state for t in trials_of(postgres, "batched")) == [COMPLETE] * 8
    print(
        f"\nthe eight-point grid (trials held 6 s, one 45 s more): {independent:.0f} s with three single-trial sweepers, {batched:.0f} s with one sweeper's batches of three"
    )
    assert independent < batched


def study_trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return trials_of(storage)
    except KeyError:  # no study yet
        return []


def submit_sweepers(folder: Path, args: list[str], n: int, name: str, **extra_env: str) -> str:
    """An array of n sweepers (tools/slurm/sweepers.sbatch) with these overrides: its job id."""
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    command = [
        "sbatch",
        "--parsable",
        f"--array=1-{n}",
        f"--output={logs}/{name}-%A_%a.out",
        f"--chdir={folder}",
        str(ROOT / "tools" / "slurm" / "sweepers.sbatch"),
        *args,
    ]
    submitted = subprocess.run(command, env=cluster_env(**extra_env), capture_output=True, text=True, timeout=30, check=True)
    array = submitted.stdout.strip().split(";")[0]
    return f"{array}_1" if n == 1 else array


def expand_array(array: str, n: int) -> list[str]:
    return [f"{array}_{task}" for task in range(1, n + 1)]


def wait_for_jobs(jobs: list[str], deadline: float) -> None:
    while any(job_state(j) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") for j in jobs):
        assert time.monotonic() < deadline, f"SLURM jobs {jobs} still running after the test's deadline"
        time.sleep(1)


def test_sweepers_script_refuses_to_run_without_a_shared_study(tmp_path):
    environment = {k: v for k, v in cluster_env().items() if k != "TRASHFIRE_STUDY_URL"}
    result = subprocess.run(
        ["bash", str(ROOT / "tools" / "slurm" / "sweepers.sbatch"), "hparams_search=training_grid"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and result.stderr.startswith("tools/slurm/sweepers.sbatch: no shared study")
    assert len(result.stderr.strip().splitlines()) == 1
