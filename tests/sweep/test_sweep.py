"""Sweeps through the trashfire sweeper: a killed grid sweep resumes and runs every cell once,
a failed trial is recorded and the sweep goes on, joblib-parallel trials give the sequential
records, two sweepers share a PostgreSQL study, and submitit's local executor runs a sweep; a
study in a journal file resumes as one in SQLite does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import ROOT, is_timing_key
from trashfire.sweep.heartbeat import STALE_NOTE
from trashfire.sweep.space import grid_points
from trashfire.sweep.storage import optuna_storage, study_lock

CELL = [
    "data.digits.subsample=400",
    "split.n_attack=20",
    "split.seeds=[0]",
    "compute.progress=false",
    "attack.fgm.norms=[inf,2]",
    "attack=[fgm,pgd]",
    "attack.fgm.values=[0.3]",
    "attack.pgd.values=[0.3]",
]
GRID = ["model=choice(fcnet,mlp2)", "defence=choice(none,fsq)", "train.epochs=choice(1)"]
FAST_BEATS = ["hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=2", "hydra.sweeper.poll_interval=0.5"]


def sweep_command(tmp_path: Path, storage: str | None, *args: str, preset: str = "training_grid") -> list[str]:
    """storage None: the preset's, i.e. $TRASHFIRE_STUDY_URL."""
    paths = [f"paths.{k}={tmp_path / k}" for k in ("processed", "models", "attacks")]
    return [
        sys.executable,
        "-m",
        "trashfire.experiment",
        "--multirun",
        f"hparams_search={preset}",
        *CELL,
        *paths,
        *([f"hydra.sweeper.storage='{storage}'"] if storage else []),
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *FAST_BEATS,
        *args,
    ]


def env(**extra: str) -> dict[str, str]:
    return os.environ | {"TRASHFIRE_CONFIG_DIR": str(ROOT / "conf")} | extra


def run_sweep(tmp_path: Path, storage: str, *args: str, preset: str = "training_grid") -> str:
    """The sweep's log (Hydra logs the sweeper on stdout, the trials log on stderr)."""
    result = subprocess.run(sweep_command(tmp_path, storage, *args, preset=preset), cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def trials_of(storage: str, name: str = "training_grid") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=optuna_storage(storage)).get_trials()


def completed_points(trials) -> list[tuple]:
    return sorted(tuple(sorted(t.params.items())) for t in trials if t.state == optuna.trial.TrialState.COMPLETE)


def records(folder: Path) -> dict[str, dict]:
    """Record files by name, timings and device left out."""
    return {p.name: {k: v for k, v in json.loads(p.read_text()).items() if not is_timing_key(k)} for p in sorted(folder.glob("*.json"))}


EXPECTED_POINTS = sorted(tuple(sorted(p.items())) for p in grid_points({"model": ["fcnet", "mlp2"], "defence": ["none", "fsq"], "train.epochs": [1]}))


def test_grid_points_cover_the_product_in_order():
    assert grid_points({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    assert len(EXPECTED_POINTS) == 4


def trial_states(storage: str) -> list[str]:
    """The study's trial states, read while a sweeper writes it."""
    if storage.startswith("sqlite:///"):
        try:
            with sqlite3.connect(storage[len("sqlite:///") :], timeout=1) as connection:
                return [row[0] for row in connection.execute("SELECT state FROM trials")]
        except sqlite3.Error:
            return []
    try:
        return [t.state.name for t in trials_of(storage)]
    except KeyError:  # no study yet
        return []


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_killed_grid_sweep_reruns_to_every_cell_exactly_once(tmp_path, kind):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}" if kind == "sqlite" else f"journal://{tmp_path / 'optuna.log'}"
    process = subprocess.Popen(
        sweep_command(tmp_path, storage, *GRID), cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while not (trial_states(storage).count("COMPLETE") >= 1 and "RUNNING" in trial_states(storage)):
        assert process.poll() is None and time.monotonic() < deadline, "the sweep ended before it could be killed midway"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    states = trial_states(storage)
    assert "RUNNING" in states and 1 <= states.count("COMPLETE") < 4, states
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "attacks").glob("*.json")}

    rerun = run_sweep(tmp_path, storage, *GRID)
    assert STALE_NOTE in rerun
    trials = trials_of(storage)
    assert completed_points(trials) == EXPECTED_POINTS  # each grid point complete exactly once
    assert [t.user_attrs["error"] for t in trials if t.state == optuna.trial.TrialState.FAIL] == [STALE_NOTE]
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "attacks").glob("*.json")}
    assert {name: after[name] for name in before} == before  # cells recorded before the kill were not redone
    assert len(after) == 4 * 3 + 2 * 0 and len(list((tmp_path / "models").glob("*.json"))) == 2  # 4 model cells x 3 attack cells; 2 trained

    again = run_sweep(tmp_path, storage, *GRID)
    assert "0 queued by this run, 4 already done" in again
    assert len(trials_of(storage)) == len(trials)


def test_a_failing_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    args = ["model=choice(fcnet)", "train.epochs=choice(1)", "defence_cell=choice(fsq@4,fsq@0)", "~hydra.sweeper.params.defence"]
    result = run_sweep(tmp_path, storage, *args)
    trials = trials_of(storage)
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert [t.params["defence_cell"] for t in failed] == ["fsq@0"]
    assert failed[0].user_attrs["error"] == "config error: defence_cell: got 0; must be an integer in [1, 64] (the value of fsq: defence.fsq.rules.values)"
    assert completed_points(trials) == [(("defence_cell", "fsq@4"), ("model", "fcnet"), ("train.epochs", 1))]
    assert "1 trials complete, 1 failed" in result

    rerun = run_sweep(tmp_path, storage, *args)  # a rerun retries the failure only
    assert "1 queued by this run, 1 already done" in rerun

    sweep_dir = tmp_path / "sweep"  # trial_configs: overrides, the default
    assert "hparams_search" in (sweep_dir / "multirun.yaml").read_text()
    assert sorted(p.name for p in (sweep_dir / "0" / ".hydra").iterdir()) == ["overrides.yaml"]
    assert yaml.safe_load((sweep_dir / "0" / ".hydra" / "overrides.yaml").read_text())[:3] == [
        "model=fcnet",
        "train.epochs=1",
        "defence_cell=fsq@0",
    ]  # the rerun's trial


def test_a_sampled_sweep_counts_n_trials_over_the_study(tmp_path):
    """TPE through ask/tell: n_trials is the study's total, so a rerun asks only the rest."""
    storage = f"journal://{tmp_path / 'optuna.log'}"
    args = ["model=choice(fcnet)", "train.epochs=choice(1)", "defence_cell=choice(none@0,fsq@4)", "train.lr=tag(log, interval(0.01, 0.3))", "attack=[fgm]"]
    run_sweep(tmp_path, storage, *args, "hydra.sweeper.n_trials=2", preset="search")
    rerun = run_sweep(tmp_path, storage, *args, "hydra.sweeper.n_trials=3", preset="search")
    trials = trials_of(storage, "search_acc_adv")
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3 and "3 trials complete, 0 failed" in rerun
    assert all(0.01 <= t.params["train.lr"] <= 0.3 and t.params["defence_cell"] in ("none@0", "fsq@4") for t in trials)
    assert trials[-1].user_attrs["data.digits.subsample"] == "400"  # the fixed overrides, recorded with each trial


def test_joblib_parallel_sweep_gives_the_sequential_records(tmp_path):
    sequential, parallel = tmp_path / "sequential", tmp_path / "parallel"
    for folder, extra in ((sequential, ["threads=1"]), (parallel, ["launcher=joblib"])):
        folder.mkdir()
        run_sweep(folder, f"sqlite:///{folder / 'optuna.db'}", *GRID, *extra)
    assert records(sequential / "models") == records(parallel / "models")
    assert records(sequential / "attacks") and records(sequential / "attacks") == records(parallel / "attacks")
    values = [{tuple(sorted(t.params.items())): t.value for t in trials_of(f"sqlite:///{f / 'optuna.db'}")} for f in (sequential, parallel)]
    assert len(values[0]) == 4 and values[0] == values[1]


def test_a_trial_run_in_a_thread_is_refused_because_threads_share_one_process_clock():
    """Hydra's joblib launcher always uses loky's processes; a launcher that ran trials as
    threads would have each trial's CPU clock count the others' work."""
    import threading

    from trashfire.core.errors import ConfigError
    from trashfire.experiment import _refuse_thread_launchers

    _refuse_thread_launchers()  # the main thread: the basic launcher, a joblib or submitit worker
    raised = []
    worker = threading.Thread(target=lambda: raised.append(pytest.raises(ConfigError, _refuse_thread_launchers)))
    worker.start(), worker.join()
    assert raised and "trials run as threads of one process" in str(raised[0].value)


def test_sqlite_study_lock_excludes_a_second_holder(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    code = f"from trashfire.sweep.storage import study_lock\nwith study_lock({url!r}, 's'):\n    print('got it', flush=True)\n"
    with study_lock(url, "s"):
        waiting = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        time.sleep(3)
        assert waiting.poll() is None  # blocked while this process holds the lock
    assert waiting.communicate(timeout=60)[0] == "got it\n"


@pytest.fixture
def postgres():
    """A PostgreSQL server of pgserver's, in a folder of its own outside pytest's tmp_path: a
    second pytest session of this user (a mutation run beside the suite) prunes old tmp_path
    roots, and pulled the server's folder from under it once. Its start is tried twice before
    concluding that none can start here."""
    errors, folder = [], Path(tempfile.mkdtemp(prefix="trashfire-pg-"))
    try:
        for attempt in range(2):
            try:
                import pgserver

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
                    server = pgserver.get_server(folder / f"pg{attempt}", cleanup_mode="delete")
                break
            except Exception as err:  # noqa: BLE001 - any failure to start means: try again, then no server here
                errors.append(str(err))
        else:
            pytest.skip(f"cannot start a PostgreSQL server here with pgserver: {'; '.join(errors)}")
        yield server.get_uri()
        server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_two_sweepers_share_one_postgresql_study(tmp_path, postgres):
    grid = ["model=choice(fcnet,mlp2)", "defence=choice(none,fsq,gauss_out)", "train.epochs=choice(1)"]
    # a grace of 2 s (FAST_BEATS) is shorter than a busy two-core machine may delay a beat
    commands = [sweep_command(tmp_path, None, *grid, "hydra.sweeper.grace_period=30") for _ in range(2)]  # the study URL from the environment
    shared = env(TRASHFIRE_STUDY_URL=postgres)
    processes = [subprocess.Popen(c, cwd=tmp_path, env=shared, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in commands]
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    trials = trials_of(postgres)
    assert len(trials) == 6 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [(t.state, t.params, t.user_attrs) for t in trials] + outputs
    assert len(set(completed_points(trials))) == 6  # no grid point lost or run twice
    queued = [int(out.split(" queued by this run")[0].rsplit(" ", 1)[-1]) for out in outputs]
    assert sorted(queued) == [0, 6], outputs  # one sweeper queued the grid, the other found it queued


def test_submitit_local_runs_a_two_trial_sweep(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    run_sweep(
        tmp_path,
        storage,
        "model=choice(fcnet)",
        "defence=choice(none,fsq)",
        "train.epochs=choice(1)",
        "launcher=submitit_local",
        "hydra.sweeper.trial_configs=full",
    )
    trials = trials_of(storage)
    assert len(trials) == 2 and all(t.state == optuna.trial.TrialState.COMPLETE and 0 <= t.value <= 1 for t in trials)
    assert list((tmp_path / "sweep" / ".submitit").glob("*/*_result.pkl"))  # the trials ran as submitit jobs
    assert sorted(p.name for p in (tmp_path / "sweep" / "1" / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]


def compose_with_hydra(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_paper_grid_preset_is_trashfires_grid_of_4800_cells():
    from trashfire.sweep.space import search_space

    cfg = compose_with_hydra("experiment=trashfire_paper", "hparams_search=paper_grid")
    space, _ = search_space([f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()])
    choices = {name: list(dist.choices) for name, dist in space.items()}
    cells = [c for c in choices["defence_cell"] if c != "none@0"]
    assert cells == [f"{d}@{v}" for d in ("gauss_in", "gauss_out", "conf", "fsq") for v in cfg.defence[d]["values"]]  # the preset's value grids
    assert choices["train.epochs"] == list(cfg.train.epochs) and choices["train.lr"] == list(cfg.train.lr)
    assert len(grid_points(choices)) == 24 * 5 * 5 * 8
    assert cfg.hydra.sweeper._target_.endswith("TrashfireSweeper") and cfg.hydra.sweeper.sampler._target_ == "optuna.samplers.GridSampler"


def test_launcher_presets_compose_to_their_hydra_launchers():
    slurm = compose_with_hydra("hparams_search=paper_grid", "launcher=slurm")
    assert slurm.hydra.launcher._target_.endswith("SlurmLauncher") and slurm.hydra.sweeper.n_jobs == 32
    joblib = compose_with_hydra("hparams_search=training_grid", "launcher=joblib")
    assert joblib.hydra.launcher._target_.endswith("JoblibLauncher") and joblib.threads == 1 and joblib.hydra.sweeper.n_jobs == 2


@pytest.mark.parametrize(
    "override, line",
    [
        (
            "objective=[acc_adv,trash_constant_hazard]",
            "hydra.sweeper.direction: 1 direction(s) ['maximize'] for 2 objective(s) ['acc_adv', 'trash_constant_hazard']; give one per objective",
        ),
        ("hydra.sweeper.trial_configs=all", "hydra.sweeper.trial_configs: got 'all'; allowed: overrides, full"),
    ],
)
def test_sweeper_config_errors_end_in_one_line_before_any_trial(tmp_path, override, line):
    command = sweep_command(tmp_path, f"sqlite:///{tmp_path / 'optuna.db'}", override, preset="search")
    result = subprocess.run(command, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"trashfire.experiment: config error: {line}"
    assert not (tmp_path / "models").exists()


def test_the_sweep_config_cache_composes_what_hydra_composes():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from trashfire.sweep.compose import SweepConfigCache

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides=["hparams_search=training_grid", "hydra.verbose=false"], run_mode=RunMode.MULTIRUN)
        cache = SweepConfigCache(loader)
        trials = [
            ["model=fcnet", "defence=fsq", "train.epochs=1", "data.digits.subsample=400", "attack=[fgm,pgd]", "defence_cell=fsq@4"],
            ["model=fcnet", "defence=none", "train.epochs=2", "data.digits.subsample=400", "attack=[fgm,pgd]", "defence_cell=null"],
            ["model=mlp2", "defence=fsq", "train.epochs=1", "data.digits.subsample=300", "attack=[fgm]", "+extra.key=1", "hydra.output_subdir=null"],
        ]
        for overrides in trials + trials:  # the second round comes from the cache
            direct, cached = loader.load_sweep_config(master, overrides), cache.load_sweep_config(master, overrides)
            assert OmegaConf.to_yaml(cached) == OmegaConf.to_yaml(direct), overrides
        assert len(cache._composed) == 3  # one composition per distinct set of group choices


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_beat_newer_than_the_readers_clock_is_not_stale(tmp_path, kind):
    """Another sweeper's beat may commit after this reader's transaction began (PostgreSQL's
    now() is the transaction's start), so its age reads negative; Optuna 2's own check took
    `timedelta.seconds` of it, a day, and failed live trials. A trial that never beat is stale
    once it started longer than the grace period ago."""
    from datetime import datetime, timedelta

    import sqlalchemy as sa

    from trashfire.sweep.heartbeat import FileBeats, SqlBeats, stale_trials

    url = f"sqlite:///{tmp_path / 'optuna.db'}" if kind == "sqlite" else f"journal://{tmp_path / 'optuna.log'}"
    study = optuna.create_study(study_name="s", storage=optuna_storage(url))
    fresh, old = (study.ask().number for _ in range(2))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING))  # as a sweeper killed before its first beat leaves it
    silent = study.trials[-1].number
    beats = SqlBeats(url, "s") if kind == "sqlite" else FileBeats(tmp_path / "optuna.log", "s")
    beats.beat([fresh, old])
    shift = {fresh: timedelta(seconds=1), old: timedelta(seconds=-10)}  # fresh: committed "in the future" of the reader
    if kind == "sqlite":
        table = beats.table
        with beats.engine.begin() as connection:
            for number, by in shift.items():
                stamp = connection.execute(sa.select(table.c.beat).where(table.c.number == number)).scalar_one()
                connection.execute(sa.update(table).where(table.c.number == number).values(beat=stamp + by))
    else:
        for number, by in shift.items():
            stamp = (beats.folder / str(number)).stat().st_mtime + by.total_seconds()
            os.utime(beats.folder / str(number), (stamp, stamp))
    ages = beats.ages([fresh, old, silent])
    assert ages[fresh] < timedelta(0) < ages[old] and silent not in ages
    running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert [t.number for t in stale_trials(running, ages, grace=2, now=datetime.now() + timedelta(seconds=3))] == [old, silent]
    assert [t.number for t in stale_trials(running, ages, grace=2, now=datetime.now() - timedelta(seconds=1))] == [
        old
    ]  # silent: started within the grace period
    beats.forget([fresh, old])
    assert beats.ages([fresh, old]) == {}
