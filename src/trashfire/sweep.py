"""Optuna sweeps that resume and share a study: the logic behind the `trashfire` Hydra sweeper
(`hydra/sweeper=trashfire`, see hydra_plugins/trashfire_sweeper).

Hydra's own Optuna sweeper asks `n_trials` new trials on every run, so a rerun repeats a
finished grid, a killed run leaves its trial RUNNING for ever, and two processes on one
study may pick the same grid point. Here:

- Grid sampler: every point of the grid is queued once in the study (under a lock held on
  the storage, so concurrent sweepers queue it once between them), and every sweeper pops
  queued trials until none is left. Optuna's pop is atomic in the database, so no point
  runs twice. A rerun queues only the points with no COMPLETE trial (failed ones again).
- Other samplers: `n_trials` is the study's total; a rerun runs what is missing.
- Each running trial beats a heartbeat in the storage; a trial whose process died (no beat
  for `grace_period` s) is marked FAIL and its parameters queued again, by whichever sweeper
  sees it first. A sweeper waits for the trials other processes are running, so every
  sweeper returns once the whole grid is done.
- A trial that raises or returns NaN is marked FAIL with its error as the user attribute
  `error`, and the sweep goes on (up to `max_failure_rate` of a batch).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import itertools
import logging
import math
import pickle
import threading
import time
import warnings
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterator, Sequence

import optuna
import yaml
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides
from omegaconf import DictConfig, OmegaConf, open_dict
from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.trial import TrialState

from trashfire.core.clocks import exclude_thread_cpu
from trashfire.core.errors import ConfigError

log = logging.getLogger(__name__)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # enqueue_trial, stable in 2.10 as used here

STALE_NOTE = "stale: its process stopped beating (killed?); queued again"
SCHEMA_LOCK = "optuna schema"  # its own study_lock key (a study of that name would only share the wait)


@contextlib.contextmanager
def study_lock(url: str | None, study_name: str) -> Iterator[None]:
    """A lock across processes and machines for one study, released when its holder dies:
    a file lock beside an SQLite database, an advisory lock on PostgreSQL."""
    if url is None or url == "sqlite:///:memory:":
        yield
        return
    if url.startswith("sqlite:///"):
        with open(Path(url[len("sqlite:///"):]).with_suffix(".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    if url.startswith("postgresql"):
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        key = zlib.crc32(f"trashfire:{study_name}".encode())
        engine = sqlalchemy.create_engine(url, poolclass=NullPool)
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
        engine.dispose()
        return
    log.warning("no study lock for %s: start concurrent sweepers on a fresh study one at a time", url.split(":")[0])
    yield


TRIAL_CONFIGS = ("overrides", "full")


class SweepConfigCache:
    """Hydra composes every trial's config from scratch: each YAML file parsed again and the
    defaults tree rebuilt, about half a second per trial here, more than a tiny cell costs.
    Only the config-group choices shape that work; Hydra applies value overrides to the
    composed result. So: compose once per distinct set of group choices, and apply each
    trial's value overrides to a copy, as Hydra does. Wraps the loader every launcher uses."""

    def __init__(self, loader: Any):
        self._loader = loader
        self._composed: dict[tuple[str, ...], bytes] = {}
        self._parsed: dict[str, Override] = {}
        self._parser = OverridesParser.create()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loader", "_composed", "_parsed", "_parser"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __reduce__(self):
        """Launchers that ship the loader to worker processes (joblib, submitit) ship Hydra's
        own: a worker composes its one trial and has nothing to cache."""
        return copy.copy, (self._loader,)

    def _is_value_override(self, override: Override) -> bool:
        if override.is_hydra_override() or override.is_sweep_override():
            return False
        return isinstance(override.value(), dict) or not self._loader.repository.group_exists(override.key_or_group)

    def _parse(self, line: str) -> Override:
        if line not in self._parsed:
            self._parsed[line] = self._parser.parse_override(line)
        return self._parsed[line]

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        parsed = [self._parse(line) for line in sweep_overrides]
        values = [o for o in parsed if self._is_value_override(o)]
        key = tuple(o.input_line for o in parsed if o not in values)
        if key not in self._composed:
            # pickled: a copy unpickles in a third of a deepcopy's time (OmegaConf nodes)
            self._composed[key] = pickle.dumps(self._loader.load_sweep_config(master_config, list(key)))
        cfg = pickle.loads(self._composed[key])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]
        dirname = cfg.hydra.job.config.override_dirname
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            cfg.hydra.job.override_dirname = get_overrides_dirname(task, exclude_keys=list(dirname.exclude_keys), item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)
        return cfg


class Heartbeat:
    """Beats for the running trials every `interval` s from a thread whose CPU time the
    process clock of the trials leaves out."""

    def __init__(self, storage: RDBStorage, interval: int, trial_ids: list[int]):
        self.storage, self.interval, self.trial_ids = storage, interval, trial_ids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trashfire-heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        for trial_id in self.trial_ids:
            self.storage.record_heartbeat(trial_id)
        self._thread.start()
        exclude_thread_cpu(self._thread)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for trial_id in self.trial_ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception as err:  # a lost connection must not kill the trial; the next beat retries
                    log.warning("heartbeat for trial %d failed: %s", trial_id, err)


def last_of_each_key(lines: Sequence[str]) -> list[str]:
    """As on Hydra's command line, a later override of a key replaces an earlier one (the
    Optuna plugin would otherwise keep a fixed value over a later choice(...) of the key)."""
    last = {line.split("=", 1)[0].lstrip("+~"): line for line in lines}
    return list(last.values())


def grid_points(grid: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's choices, in a stable order."""
    return [dict(zip(grid, combination)) for combination in itertools.product(*grid.values())]


def point_key(params: dict[str, Any], names: Sequence[str]) -> tuple | None:
    if set(params) != set(names):
        return None
    return tuple((name, str(params[name])) for name in sorted(names))


def trial_params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A trial's parameters, also for a queued trial that has not suggested them yet."""
    return trial.params or dict(trial.system_attrs.get("fixed_params", {}))


def stale_trial_ids(storage: RDBStorage, study_id: int, grace: int) -> list[int]:
    """RUNNING trials whose last beat is older than `grace` s, and those that never beat
    (killed between pop and first beat) started longer ago than that.

    Not Optuna's `_get_stale_trial_ids`: it takes `timedelta.seconds` of (now - beat), so a
    beat committed after the reader's transaction began (a negative difference) reads as a
    day old, and a live trial of another sweeper is failed as stale."""
    from optuna.storages._rdb import models
    from sqlalchemy import func, orm

    with contextlib.closing(storage.scoped_session()) as session:
        now = session.execute(func.now()).scalar().replace(tzinfo=None)  # the database's clock, as the beats
        running = (session.query(models.TrialModel).options(orm.selectinload(models.TrialModel.heartbeats))
                   .filter(models.TrialModel.study_id == study_id, models.TrialModel.state == TrialState.RUNNING).all())
        stale = [trial.trial_id for trial in running if trial.heartbeats and now - trial.heartbeats[0].heartbeat > timedelta(seconds=grace)]
        cutoff = datetime.now() - timedelta(seconds=grace)  # datetime_start is the client's clock
        stale += [trial.trial_id for trial in running if not trial.heartbeats and trial.datetime_start is not None and trial.datetime_start < cutoff]
    return stale


def _fast_sqlite(engine: Any) -> None:
    """Write-ahead logging, synced at checkpoints: a commit (each trial attribute, each beat)
    stops costing an fsync, and readers stop blocking the writer. (SQLite on a network file
    system supports neither: use PostgreSQL there.)"""
    import sqlalchemy

    @sqlalchemy.event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    engine.dispose()  # pooled connections opened before the listener get it on reconnect


@contextlib.contextmanager
def one_write(storage: Any, trial_id: int) -> Iterator[None]:
    """Optuna's cache writes a running trial's update to the database at every parameter and
    attribute, a transaction each; within this block they are gathered into one."""
    if not isinstance(storage, _CachedStorage):
        yield
        return
    storage._flush_trial = lambda _trial_id: True  # the instance attribute shadows the method
    try:
        yield
    finally:
        del storage._flush_trial
    storage._flush_trial(trial_id)


def rdb_backend(study: optuna.Study) -> RDBStorage | None:
    """The study's RDB storage (Optuna wraps it in a cache), or None for an in-memory study."""
    storage = study._storage
    storage = getattr(storage, "_backend", storage)
    return storage if isinstance(storage, RDBStorage) else None


class ResumableOptunaSweeper(OptunaSweeperImpl):
    def __init__(self, *args: Any, heartbeat_interval: int, grace_period: int | None, poll_interval: float, trial_configs: str = "overrides", **kwargs: Any):
        super().__init__(*args, **kwargs)
        if heartbeat_interval <= 0:
            raise ValueError(f"hydra.sweeper.heartbeat_interval must be a positive whole number of seconds, got {heartbeat_interval}")
        self.heartbeat_interval = int(heartbeat_interval)
        self.grace_period = int(grace_period or 3 * heartbeat_interval)
        self.poll_interval = poll_interval
        self.trial_configs = trial_configs

    # --- set-up -------------------------------------------------------------------------
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        cached = HydraContext(config_loader=SweepConfigCache(hydra_context.config_loader), callbacks=hydra_context.callbacks)
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=cached, task_function=task_function)

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
        self._process_searchspace_config()
        space, fixed = create_params_from_overrides(last_of_each_key(self._parse_sweeper_params_config() + list(arguments)))
        if self.search_space_distributions:
            space = self.search_space_distributions | space
        return {k: v for k, v in space.items() if k not in fixed}, fixed

    def _is_grid(self) -> bool:
        return isinstance(self.sampler, functools.partial) and self.sampler.func == optuna.samplers.GridSampler

    def _storage(self) -> RDBStorage | None:
        if self.storage is None:
            return None
        url = str(self.storage)
        # RDBStorage creates Optuna's tables: two sweepers starting at once on a fresh
        # PostgreSQL database both create its enum types, and one fails on the catalogue's
        # unique index, so the creation is serialised too
        with study_lock(url, SCHEMA_LOCK):
            storage = RDBStorage(url, heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period)
        if url.startswith("sqlite"):
            _fast_sqlite(storage.engine)
        return storage

    def _study(self, storage: RDBStorage | None, directions: list[str], sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        if storage is None:
            log.warning("hydra.sweeper.storage is null: the study lives in memory and cannot resume")
            storage = optuna.storages.InMemoryStorage()
        with study_lock(self._url(), self.study_name or ""):
            try:
                return optuna.create_study(study_name=self.study_name, storage=storage, sampler=sampler, directions=directions, load_if_exists=True)
            except ValueError as err:
                if "direction" not in str(err):
                    raise
                raise ConfigError("hydra.sweeper.study_name", f"study {self.study_name!r} exists with other directions than {directions}; name a new study for these objectives") from None

    def _url(self) -> str | None:
        return None if self.storage is None else str(self.storage)

    # --- the sweep ----------------------------------------------------------------------
    def _check_directions(self, directions: list[str]) -> None:
        objective = self.config.get("objective")
        if objective is None:
            return
        n = len(objective) if OmegaConf.is_list(objective) else 1
        if n != len(directions):
            raise ConfigError("hydra.sweeper.direction", f"{len(directions)} direction(s) {directions} for {n} objective(s) {OmegaConf.to_container(objective) if n > 1 else objective}; give one per objective")

    def sweep(self, arguments: list[str]) -> None:
        if self.trial_configs not in TRIAL_CONFIGS:
            raise ConfigError("hydra.sweeper.trial_configs", f"got {self.trial_configs!r}; allowed: {', '.join(TRIAL_CONFIGS)}")
        space, fixed = self._search_space(arguments)
        directions = self._get_directions()
        self._check_directions(directions)
        storage = self._storage()
        grid = self._is_grid()
        if grid:
            choices = {name: self._to_grid_sampler_choices(dist) for name, dist in space.items()}
            sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler()  # queued trials carry their params
        else:
            sampler = self.sampler
        study = self._study(storage, directions, sampler)
        self._save_sweep_config()
        log.info("study %s in %s, sampler %s, directions %s", study.study_name, self._url() or "memory", "grid (queued)" if grid else type(sampler).__name__, directions)
        if grid:
            points = grid_points(choices)
            self._sweep_queue(study, space, fixed, directions, points)
        else:
            self._sweep_sampled(study, space, fixed, directions)
        self._save_results(study, directions)

    def _save_sweep_config(self) -> None:
        """The sweep's own config, as Hydra's basic sweeper keeps it: with a trial's
        overrides it gives the trial's config (`trial_configs: overrides`)."""
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")

    def _queue_grid(self, study: optuna.Study, points: list[dict[str, Any]]) -> int:
        """Queue the grid points that have no trial COMPLETE, RUNNING or WAITING (failed ones
        are retried); under the study lock, so that concurrent sweepers queue each once."""
        names = list(points[0]) if points else []
        with study_lock(self._url(), study.study_name):
            self._fail_stale(study, requeue=False)
            taken = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
            done = {point_key(trial_params(t), names) for t in study.get_trials(deepcopy=False) if t.state in taken}
            missing = [p for p in points if point_key(p, names) not in done]
            for point in missing:
                study.enqueue_trial(point)
        return len(missing)

    def _fail_stale(self, study: optuna.Study, requeue: bool) -> int:
        backend, storage = rdb_backend(study), study._storage
        if backend is None:
            return 0
        failed = []
        for trial_id in stale_trial_ids(backend, study._study_id, self.grace_period):
            try:
                storage.set_trial_user_attr(trial_id, "error", STALE_NOTE)
                if storage.set_trial_state(trial_id, TrialState.FAIL):
                    failed.append(storage.get_trial(trial_id))
            except RuntimeError:  # another sweeper finished or failed it meanwhile
                continue
        for trial in failed:
            log.warning("trial %d %s", trial.number, STALE_NOTE)
            if requeue:
                study.enqueue_trial(trial_params(trial))
        return len(failed)

    def _pop_queued(self, study: optuna.Study, n: int) -> list[optuna.Trial]:
        """Up to n queued trials, each moved to RUNNING by an atomic update (a trial another
        sweeper takes first is skipped)."""
        trials = []
        for trial_id in self._waiting_ids(study):
            if len(trials) == n:
                break
            try:
                popped = study._storage.set_trial_state(trial_id, TrialState.RUNNING)
            except RuntimeError:  # finished by another sweeper since the listing
                continue
            if popped:
                trials.append(optuna.Trial(study, trial_id))
        return trials

    @staticmethod
    def _waiting_ids(study: optuna.Study) -> list[int]:
        backend = rdb_backend(study)
        if backend is None:
            return [t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
        from optuna.storages._rdb import models  # one indexed query, not every trial of the study

        with contextlib.closing(backend.scoped_session()) as session:
            rows = session.query(models.TrialModel.trial_id).filter(models.TrialModel.study_id == study._study_id, models.TrialModel.state == TrialState.WAITING)
            return [row[0] for row in rows.order_by(models.TrialModel.trial_id)]

    def _sweep_queue(self, study, space, fixed, directions, points) -> None:
        queued = self._queue_grid(study, points)
        log.info("grid of %d points: %d queued by this run, %d already done", len(points), queued, self._count(study, TrialState.COMPLETE))
        batch_size = max(1, self.n_jobs)
        while True:
            trials = self._pop_queued(study, batch_size)
            if trials:
                self._run_batch(study, trials, space, fixed, directions)
                continue
            if not self._count(study, TrialState.RUNNING):
                break
            self._wait_for_others(study)

    def _sweep_sampled(self, study, space, fixed, directions) -> None:
        """`n_trials` is the study's total: trials done (complete, or failed with an error),
        running or queued count towards it, so a rerun and a second sweeper add only the rest."""
        with study_lock(self._url(), study.study_name):
            self._fail_stale(study, requeue=True)
        while True:
            trials = self._pop_queued(study, max(1, self.n_jobs))
            counted = self._count_failed(study) + sum(self._count(study, s) for s in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING))
            trials += [study.ask() for _ in range(min(max(1, self.n_jobs) - len(trials), self.n_trials - counted))]
            if trials:
                self._run_batch(study, trials, space, fixed, directions)
            elif self._count(study, TrialState.RUNNING):
                self._wait_for_others(study)
            else:
                break

    def _wait_for_others(self, study: optuna.Study) -> None:
        """Other sweepers' trials are running: wait, and take over those whose process died."""
        time.sleep(self.poll_interval)
        with study_lock(self._url(), study.study_name):
            self._fail_stale(study, requeue=True)

    @staticmethod
    def _count(study: optuna.Study, state: TrialState) -> int:
        return len(study.get_trials(deepcopy=False, states=(state,)))

    @staticmethod
    def _count_failed(study: optuna.Study) -> int:
        """Failed trials that ran to an error (stale ones are queued again instead)."""
        return sum(t.user_attrs.get("error") != STALE_NOTE for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))

    def _configure_trials(self, trials, space, fixed) -> list[tuple[str, ...]]:
        """Each trial's overrides; its parameters and the fixed (non-swept) overrides are
        recorded with the trial in one write, not one per parameter as Hydra's sweeper does."""
        overrides = []
        for trial in trials:
            with one_write(trial.study._storage, trial._trial_id):
                for name, distribution in space.items():
                    trial._suggest(name, distribution)
                if self.custom_search_space_extender:
                    self.custom_search_space_extender(self.config, trial)
                for name, value in fixed.items():
                    trial.set_user_attr(name, value)
            overrides.append(tuple(f"{name}={value}" for name, value in (dict(trial.params) | fixed).items()) + self._trial_hydra_overrides())
        return overrides

    def _trial_hydra_overrides(self) -> tuple[str, ...]:
        # Hydra writes three YAML files per trial (config, hydra, overrides): a tenth of a
        # tiny cell's cost here; `overrides` keeps only the last (see _save_trial_overrides)
        return ("hydra.output_subdir=null",) if self.trial_configs == "overrides" else ()

    def _save_trial_overrides(self, returns: Sequence[JobReturn]) -> None:
        if self.trial_configs != "overrides":
            return
        for ret in returns:
            if ret.hydra_cfg is None:  # the launcher failed before the job had a folder
                continue
            folder = Path(ret.hydra_cfg.hydra.runtime.output_dir) / ".hydra"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "overrides.yaml").write_text(yaml.safe_dump(list(ret.overrides), default_flow_style=False))

    def _run_batch(self, study, trials, space, fixed, directions) -> None:
        overrides = self._configure_trials(trials, space, fixed)
        backend = rdb_backend(study)
        beat = Heartbeat(backend, self.heartbeat_interval, [t._trial_id for t in trials]) if backend else contextlib.nullcontext()
        with beat:
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
        self.job_idx += len(returns)
        self._save_trial_overrides(returns)
        failures = sum(not self._tell(study, trial, ret, len(directions)) for trial, ret in zip(trials, returns))
        if failures / len(returns) > self.max_failure_rate:
            raise RuntimeError(f"{failures} of {len(returns)} trials failed, above hydra.sweeper.max_failure_rate={self.max_failure_rate}; see the errors above")

    def _tell(self, study: optuna.Study, trial: optuna.Trial, ret: JobReturn, n_objectives: int) -> bool:
        error = None
        values: list[float] | None = None
        if ret.status == JobStatus.FAILED:
            err = ret._return_value
            error = str(err) if type(err).__module__.startswith("trashfire") else f"{type(err).__name__}: {err}"
        else:
            returned = ret.return_value
            values = [float(v) for v in (returned if n_objectives > 1 else [returned])]
            if len(values) != n_objectives or any(math.isnan(v) for v in values):
                error, values = f"the trial returned {returned!r}; expected {n_objectives} number(s), none NaN", None
        try:
            if error is not None:
                study._storage.set_trial_user_attr(trial._trial_id, "error", error)
                study.tell(trial, state=TrialState.FAIL)
            else:
                study.tell(trial, values=values)
        except RuntimeError:  # another sweeper missed our beats, failed the trial as stale and queued it again
            if not study._storage.get_trial(trial._trial_id).state.is_finished():
                raise
            log.warning("trial %d was taken over by another sweeper (no heartbeat within hydra.sweeper.grace_period=%s s); "
                        "its queued copy gives the result", trial.number, self.grace_period)
        if error is not None:
            log.warning("trial %d failed (%s): %s", trial.number, " ".join(ret.overrides), error)
        return error is None

    def _save_results(self, study: optuna.Study, directions: list[str]) -> None:
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        failed = self._count(study, TrialState.FAIL)
        log.info("study %s: %d trials complete, %d failed", study.study_name, len(complete), failed)
        if not complete:
            results: dict[str, Any] = {"name": "optuna", "complete": 0, "failed": failed}
        elif len(directions) == 1:
            best = study.best_trial
            log.info("best value %s at %s", best.value, best.params)
            results = {"name": "optuna", "best_params": best.params, "best_value": best.value, "complete": len(complete), "failed": failed}
        else:
            front = [{"params": t.params, "values": t.values} for t in study.best_trials]
            log.info("%d Pareto-optimal trials", len(front))
            results = {"name": "optuna", "solutions": front, "complete": len(complete), "failed": failed}
        Path(self.config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), Path(self.config.hydra.sweep.dir) / "optimization_results.yaml")
