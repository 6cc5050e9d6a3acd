"""Optuna sweeps that resume and share a study: the logic behind the `trashfire` Hydra sweeper
(`hydra/sweeper=trashfire`, see hydra_plugins/trashfire_sweeper). Built on Hydra's public
Sweeper plugin interface and Optuna's public API (enqueue/add_trials, ask/tell, storages).

A plain ask/tell loop asks `n_trials` new trials on every run, so a rerun repeats a finished
grid, a killed run leaves its trial RUNNING for ever, and two processes on one study may pick
the same grid point. Here:

- Grid sampler: every point of the grid is queued once in the study, a WAITING trial that
  carries its parameters (under a lock held on the storage, so concurrent sweepers queue it
  once between them), and every sweeper takes queued trials until none is left. Taking one is
  the storage's atomic WAITING -> RUNNING update, so no point runs twice. A rerun queues only
  the points with no COMPLETE trial (failed ones again).
- Other samplers: `n_trials` is the study's total; a rerun runs what is missing.
- Each running trial beats a heartbeat beside the study, stamped by the storage's own clock
  (a table in the database, files beside a journal); a trial whose process died (no beat for
  `grace_period` s) is marked FAIL, with the user attribute `error`, and queued again (Optuna's
  RetryHeartbeatStaleTrialCallback) by whichever sweeper sees it first. A sweeper waits for
  the trials other processes are running, so every sweeper returns once the whole grid is done.
- A trial that raises or returns NaN is marked FAIL with its error as the user attribute
  `error`, and the sweep goes on (up to `max_failure_rate` of a batch).

Storages (`hydra.sweeper.storage`): an SQLAlchemy URL (SQLite, PostgreSQL, ...), a journal
file (`journal:///abs/path/optuna.log`, `journal://relative/optuna.log` or a path ending in
`.log`: Optuna's JournalStorage, for clusters with a shared file system and no database), or
null (in memory, no resume).

Why not Optuna's own RDB heartbeat: it marks a stale trial FAIL before any hook could record
why (a finished trial takes no attribute), ignores a trial that never beat, does not exist for
journals, and keeps its beats out of the public API.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import itertools
import logging
import math
import os
import pickle
import re
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from textwrap import dedent
from typing import Any

import optuna
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, InMemoryStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from trashfire.core.clocks import exclude_thread_cpu
from trashfire.core.errors import ConfigError

log = logging.getLogger(__name__)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # RetryHeartbeatStaleTrialCallback, stable as used here

STALE_NOTE = "stale: its process stopped beating (killed?); queued again"
SCHEMA_LOCK = "optuna schema"  # its own study_lock key (a study of that name would only share the wait)
JOURNAL_SCHEME = "journal://"
DIRECTIONS = ("minimize", "maximize")


# --- where a study lives ----------------------------------------------------------------------
def journal_file(spec: str | None) -> Path | None:
    """The journal file a storage setting names (`journal:///abs/file.log`,
    `journal://relative/file.log`, or a path ending in `.log`), or None for a URL."""
    if not spec:
        return None
    if spec.startswith(JOURNAL_SCHEME):
        return Path(spec[len(JOURNAL_SCHEME) :])
    if "://" not in spec and spec.endswith(".log"):
        return Path(spec)
    return None


class _WalConnection(sqlite3.Connection):
    """Write-ahead logging, synced at checkpoints: a commit (each trial, each beat) stops
    costing an fsync, and readers stop blocking the writer. (SQLite on a network file system
    supports neither: use PostgreSQL or a journal file there.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute("PRAGMA journal_mode=WAL")
        self.execute("PRAGMA synchronous=NORMAL")


def engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy engine arguments for a study's database."""
    if url.startswith("sqlite") and ":memory:" not in url:
        return {"connect_args": {"factory": _WalConnection}}
    return {}


def optuna_storage(spec: str | None) -> BaseStorage:
    """Optuna's storage for a `hydra.sweeper.storage` setting: a journal file, an SQLAlchemy
    URL, or null (in memory). Also what tests and scripts open a study with."""
    if spec is None:
        return InMemoryStorage()
    journal = journal_file(spec)
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(journal)))
    return RDBStorage(spec, engine_kwargs=engine_kwargs(spec))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def study_lock(url: str | None, study_name: str) -> Iterator[None]:
    """A lock across processes and machines for one study, released when its holder dies:
    a file lock beside an SQLite database or a journal file, an advisory lock on PostgreSQL."""
    if url is None or url == "sqlite:///:memory:":
        yield
        return
    journal = journal_file(url)
    if journal is not None or url.startswith("sqlite:///"):
        with _file_lock((journal or Path(url[len("sqlite:///") :])).with_suffix(".lock")):
            yield
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


# --- heartbeats -------------------------------------------------------------------------------
class SqlBeats:
    """Heartbeats of a study's running trials in a table of its database (`trashfire_heartbeats`),
    each stamped by the database's clock, as is the `now` their ages are taken against, so
    the age is signed and free of the sweepers' clocks."""

    TABLE = "trashfire_heartbeats"

    def __init__(self, url: str, study_name: str):
        import sqlalchemy as sa

        self.study_name = study_name
        self.engine = sa.create_engine(url, **engine_kwargs(url))
        metadata = sa.MetaData()
        self.table = sa.Table(
            self.TABLE,
            metadata,
            sa.Column("study_name", sa.String(512), primary_key=True),
            sa.Column("number", sa.Integer, primary_key=True),
            sa.Column("beat", sa.DateTime(timezone=True), nullable=False),
        )
        with study_lock(url, SCHEMA_LOCK):  # two sweepers creating it at once on PostgreSQL collide
            metadata.create_all(self.engine)

    def _rows(self, numbers: Sequence[int]):
        return (self.table.c.study_name == self.study_name) & self.table.c.number.in_(list(numbers))

    def beat(self, numbers: Sequence[int]) -> None:
        import sqlalchemy as sa

        if not numbers:
            return
        for attempt in (1, 2):
            try:
                with self.engine.begin() as connection:
                    have = set(connection.execute(sa.select(self.table.c.number).where(self._rows(numbers))).scalars())
                    if have:
                        connection.execute(sa.update(self.table).where(self._rows(sorted(have))).values(beat=sa.func.now()))
                    for number in sorted(set(numbers) - have):
                        connection.execute(sa.insert(self.table).values(study_name=self.study_name, number=number, beat=sa.func.now()))
                return
            except sa.exc.IntegrityError:  # another sweeper inserted one of them meanwhile: update it
                if attempt == 2:
                    raise

    def ages(self, numbers: Sequence[int]) -> dict[int, timedelta]:
        """Each beaten trial's age, now - beat, both by the database's clock (negative for a beat
        committed after this reader's transaction began)."""
        import sqlalchemy as sa

        if not numbers:
            return {}
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(self.table.c.number, self.table.c.beat, sa.func.now()).where(self._rows(numbers))).all()
        return {number: _utc(now) - _utc(beat) for number, beat, now in rows}

    def forget(self, numbers: Sequence[int]) -> None:
        import sqlalchemy as sa

        if numbers:
            with self.engine.begin() as connection:
                connection.execute(sa.delete(self.table).where(self._rows(numbers)))


def _utc(stamp: datetime) -> datetime:
    """A database time without a zone: PostgreSQL's timestamptz values come with one (both the
    beat and `now`), SQLite's CURRENT_TIMESTAMP is UTC without one."""
    return stamp if stamp.tzinfo is None else stamp.astimezone(UTC).replace(tzinfo=None)


class FileBeats:
    """Heartbeats beside a journal file (`<journal>.beats/<study>/<trial number>`), each a
    file's modification time, set by the file system (on NFS: the server's clock); `now` is a
    file created there at reading time, so the age is signed and free of the hosts' clocks."""

    def __init__(self, journal: Path, study_name: str):
        self.folder = journal.with_name(journal.name + ".beats") / urllib.parse.quote(study_name, safe="")
        self.folder.mkdir(parents=True, exist_ok=True)

    def beat(self, numbers: Sequence[int]) -> None:
        for number in numbers:
            (self.folder / str(number)).touch()

    def ages(self, numbers: Sequence[int]) -> dict[int, timedelta]:
        with tempfile.NamedTemporaryFile(dir=self.folder, prefix=".now-") as probe:
            now = os.fstat(probe.fileno()).st_mtime
        ages = {}
        for number in numbers:
            with contextlib.suppress(FileNotFoundError):
                ages[number] = timedelta(seconds=now - (self.folder / str(number)).stat().st_mtime)
        return ages

    def forget(self, numbers: Sequence[int]) -> None:
        for number in numbers:
            (self.folder / str(number)).unlink(missing_ok=True)


Beats = SqlBeats | FileBeats


def stale_trials(running: Sequence[FrozenTrial], ages: dict[int, timedelta], grace: int, now: datetime | None = None) -> list[FrozenTrial]:
    """RUNNING trials whose last beat is older than `grace` s (a signed age: a beat newer than
    the reader's clock is fresh, not a day old as Optuna 2's `timedelta.seconds` made it), and
    those that never beat (killed between taking the trial and its first beat) started longer
    ago than that; `datetime_start` is the taking client's clock, as `now` is this one's."""
    limit = timedelta(seconds=grace)
    cutoff = (now or datetime.now()) - limit
    return [t for t in running if (ages[t.number] > limit if t.number in ages else t.datetime_start is not None and t.datetime_start < cutoff)]


class Heartbeat:
    """Beats for the running trials at once and then every `interval` s, from a thread whose
    CPU time the process clock of the trials leaves out."""

    def __init__(self, beats: Beats, interval: int, numbers: list[int]):
        self.beats, self.interval, self.numbers = beats, interval, numbers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trashfire-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.beats.beat(self.numbers)
        self._thread.start()
        exclude_thread_cpu(self._thread)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beats.beat(self.numbers)
            except Exception as err:  # a lost connection must not kill the trials; the next beat retries
                log.warning("heartbeat for trials %s failed: %s", self.numbers, err)


# --- the search space -------------------------------------------------------------------------
def last_of_each_key(lines: Sequence[str]) -> list[str]:
    """As on Hydra's command line, a later override of a key replaces an earlier one (a fixed
    value in hydra.sweeper.params would otherwise win over a later choice(...) of the key)."""
    last = {line.split("=", 1)[0].lstrip("+~"): line for line in lines}
    return list(last.values())


def _encoded(override: Override) -> list[Any]:
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    for value in values:
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise ConfigError(override.get_key_element(), f"a sweep's values must be str, int, float, bool or null; got {value!r}")
    return values


def distribution_of(override: Override) -> BaseDistribution | str:
    """Optuna's distribution for a sweep override, in Hydra's override grammar, or the value of
    a fixed one: choice(a, b) is categorical; range(start, stop[, step]) is the integers (or
    floats) from start up to, not including, stop (as Hydra's own sweepers read it; shuffled:
    categorical); interval(low, high) is uniform over [low, high], ints if both bounds are, and
    tag(log, interval(...)) log-uniform."""
    if not override.is_sweep_override():
        return override.get_value_element_as_str()
    value = override.value()
    if override.is_choice_sweep():
        assert isinstance(value, ChoiceSweep)
        return CategoricalDistribution(_encoded(override))
    if override.is_range_sweep():
        assert isinstance(value, RangeSweep)
        values = _encoded(override)
        if value.shuffle or not values:
            return CategoricalDistribution(values)
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            return FloatDistribution(float(value.start), float(values[-1]), step=float(value.step))
        return IntDistribution(int(value.start), int(values[-1]), step=int(value.step))
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log_scale)
        return FloatDistribution(float(value.start), float(value.end), log=log_scale)
    raise ConfigError(override.get_key_element(), f"{override.input_line!r}: the trashfire sweeper takes choice(...), range(...) and interval(...)")


def search_space(lines: Sequence[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """The swept parameters' distributions and the fixed overrides, from override lines."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(lines)):
        found = distribution_of(override)
        if isinstance(found, BaseDistribution):
            space[override.get_key_element()] = found
        else:
            fixed[override.get_key_element()] = found
    return space, fixed


def grid_choices(name: str, distribution: BaseDistribution) -> list[Any]:
    """A grid axis: a categorical's choices, a stepped range's values."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, (IntDistribution, FloatDistribution)) and distribution.step is not None and not distribution.log:
        n = round((distribution.high - distribution.low) / distribution.step) + 1
        return [distribution.low + i * distribution.step for i in range(n)]
    raise ConfigError(f"hydra.sweeper.params.{name}", "the grid sampler needs discrete values: choice(...) or range(...), not interval(...)")


def grid_points(grid: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's choices, in a stable order."""
    return [dict(zip(grid, combination)) for combination in itertools.product(*grid.values())]


def point_key(params: dict[str, Any], names: Sequence[str]) -> tuple | None:
    if set(params) != set(names):
        return None
    return tuple((name, str(params[name])) for name in sorted(names))


def trial_params(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's parameters, also for a trial queued by `enqueue_trial` that has not suggested them."""
    return trial.params or dict(trial.system_attrs.get("fixed_params", {}))


def suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """Trial.suggest_* for a distribution."""
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    raise TypeError(f"no suggest_* for {distribution!r}")


def directions_of(direction: Any) -> list[str]:
    """`hydra.sweeper.direction`: one direction or a list, each minimize or maximize."""
    listed = list(direction) if OmegaConf.is_list(direction) or isinstance(direction, (list, tuple)) else [direction]
    names = [str(getattr(d, "name", d)).lower() for d in listed]
    bad = [n for n in names if n not in DIRECTIONS]
    if bad or not names:
        raise ConfigError(
            "hydra.sweeper.direction",
            f"got {OmegaConf.to_container(direction) if OmegaConf.is_config(direction) else direction!r}; each must be minimize or maximize",
        )
    return names


# --- Hydra's composition, cached --------------------------------------------------------------
def apply_value_overrides(overrides: Sequence[Override], cfg: DictConfig) -> None:
    """Value overrides (key=value, +key=value, ++key=value, ~key) applied to a composed config,
    as Hydra's config loader applies them (hydra/_internal/config_loader_impl.py, MIT)."""
    for override in overrides:
        if override.package is not None:
            raise ConfigCompositionException(
                f"Override {override.input_line} looks like a config group override, but config group '{override.key_or_group}' does not exist."
            )
        key = override.key_or_group
        value = override.value()
        try:
            if override.is_delete():
                config_val = OmegaConf.select(cfg, key, throw_on_missing=False)
                if config_val is None:
                    raise ConfigCompositionException(f"Could not delete from config. '{override.key_or_group}' does not exist.")
                if value is not None and value != config_val:
                    raise ConfigCompositionException(f"Could not delete from config. The value of '{override.key_or_group}' is {config_val} and not {value}.")
                last_dot = key.rfind(".")
                with open_dict(cfg):
                    if last_dot == -1:
                        del cfg[key]
                    else:
                        node = OmegaConf.select(cfg, key[0:last_dot])
                        del node[key[last_dot + 1 :]]
            elif override.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is None or isinstance(value, (dict, list)):
                    OmegaConf.update(cfg, key, value, merge=True, force_add=True)
                else:
                    assert override.input_line is not None
                    raise ConfigCompositionException(
                        dedent(f"""\
                        Could not append to config. An item is already at '{override.key_or_group}'.
                        Either remove + prefix: '{override.input_line[1:]}'
                        Or add a second + to add or override '{override.key_or_group}': '+{override.input_line}'
                        """)
                    )
            elif override.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as ex:
                    raise ConfigCompositionException(
                        f"Could not override '{override.key_or_group}'.\nTo append to your config use +{override.input_line}"
                    ) from ex
        except OmegaConfBaseException as ex:
            raise ConfigCompositionException(f"Error merging override {override.input_line}") from ex


def overrides_dirname(overrides: Sequence[Override], exclude_keys: Sequence[str], item_sep: str, kv_sep: str) -> str:
    """`hydra.job.override_dirname`, as Hydra's config loader builds it."""
    lines = sorted(o.input_line for o in overrides if o.key_or_group not in exclude_keys)
    return re.sub(pattern="[=]", repl=kv_sep, string=item_sep.join(lines))


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
        self._groups: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loader", "_composed", "_parsed", "_parser", "_groups"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __reduce__(self):
        """Launchers that ship the loader to worker processes (joblib, submitit) ship Hydra's
        own: a worker composes its one trial and has nothing to cache."""
        return copy.copy, (self._loader,)

    def _is_value_override(self, override: Override) -> bool:
        if override.is_hydra_override() or override.is_sweep_override():
            return False
        return isinstance(override.value(), dict) or not self._is_group(override.key_or_group)

    def _is_group(self, key: str) -> bool:
        """Whether a config group of that name exists in any config source (as Hydra's
        repository asks its sources)."""
        if key not in self._groups:
            self._groups[key] = any(source.is_group(key) for source in self._loader.get_sources())
        return self._groups[key]

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
        apply_value_overrides(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]
        dirname = cfg.hydra.job.config.override_dirname
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            cfg.hydra.job.override_dirname = overrides_dirname(task, exclude_keys=list(dirname.exclude_keys), item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)
        return cfg


# --- the sweeper ------------------------------------------------------------------------------
class ResumableOptunaSweeper(Sweeper):
    def __init__(
        self,
        sampler: Any,
        direction: Any,
        storage: Any | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        custom_search_space: str | None,
        params: DictConfig | None,
        *,
        heartbeat_interval: int,
        grace_period: int | None,
        poll_interval: float,
        trial_configs: str = "overrides",
    ):
        if heartbeat_interval <= 0:
            raise ValueError(f"hydra.sweeper.heartbeat_interval must be a positive whole number of seconds, got {heartbeat_interval}")
        if not 0.0 <= max_failure_rate <= 1.0:
            raise ValueError(f"hydra.sweeper.max_failure_rate must be in [0, 1], got {max_failure_rate}")
        self.sampler, self.direction, self.storage, self.study_name = sampler, direction, storage, study_name
        self.n_trials, self.n_jobs, self.max_failure_rate, self.params = n_trials, n_jobs, max_failure_rate, params
        self.custom_search_space_extender: Callable[[DictConfig, optuna.Trial], None] | None = None
        if custom_search_space:
            from hydra.utils import instantiate

            self.custom_search_space_extender = instantiate({"_target_": custom_search_space, "_partial_": True})
        self.heartbeat_interval = int(heartbeat_interval)
        self.grace_period = int(grace_period or 3 * heartbeat_interval)
        self.poll_interval = poll_interval
        self.trial_configs = trial_configs
        self.job_idx = 0
        self.beats: Beats | None = None
        self.optuna_storage: BaseStorage | None = None  # the study's storage, also for updates by trial id
        self.study_id: int | None = None

    # --- set-up -------------------------------------------------------------------------
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.job_idx = 0
        self.config = config
        self.hydra_context = hydra_context
        cached = HydraContext(config_loader=SweepConfigCache(hydra_context.config_loader), callbacks=hydra_context.callbacks)
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=cached, task_function=task_function)

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
        configured = [f"{k!s}={v}" for k, v in self.params.items()] if self.params else []
        space, fixed = search_space(last_of_each_key(configured + list(arguments)))
        return {k: v for k, v in space.items() if k not in fixed}, fixed

    def _is_grid(self) -> bool:
        return isinstance(self.sampler, functools.partial) and self.sampler.func == optuna.samplers.GridSampler

    def _url(self) -> str | None:
        return None if self.storage is None else str(self.storage)

    def _open_storage(self) -> BaseStorage:
        url = self._url()
        if url is None:
            log.warning("hydra.sweeper.storage is null: the study lives in memory and cannot resume")
            return InMemoryStorage()
        if journal_file(url) is not None:
            return optuna_storage(url)
        # RDBStorage creates Optuna's tables: two sweepers starting at once on a fresh
        # PostgreSQL database both create its enum types, and one fails on the catalogue's
        # unique index, so the creation is serialised too
        with study_lock(url, SCHEMA_LOCK):
            try:
                return optuna_storage(url)
            except RuntimeError as err:
                if "storage upgrade" not in str(err):
                    raise
                raise ConfigError(
                    "hydra.sweeper.storage", f"{url} holds studies of an older Optuna; upgrade its schema once: optuna storage upgrade --storage {url}"
                ) from None

    def _open_beats(self, study_name: str) -> Beats | None:
        url = self._url()
        if url is None or url == "sqlite:///:memory:":
            return None  # no other process sees the study
        journal = journal_file(url)
        return FileBeats(journal, study_name) if journal is not None else SqlBeats(url, study_name)

    def _study(self, storage: BaseStorage, directions: list[str], sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        with study_lock(self._url(), self.study_name or ""):
            study = optuna.create_study(study_name=self.study_name, storage=storage, sampler=sampler, directions=directions, load_if_exists=True)
        if [d.name.lower() for d in study.directions] != directions:
            raise ConfigError(
                "hydra.sweeper.study_name", f"study {study.study_name!r} exists with other directions than {directions}; name a new study for these objectives"
            )
        return study

    # --- the sweep ----------------------------------------------------------------------
    def _check_directions(self, directions: list[str]) -> None:
        objective = self.config.get("objective")
        if objective is None:
            return
        n = len(objective) if OmegaConf.is_list(objective) else 1
        if n != len(directions):
            raise ConfigError(
                "hydra.sweeper.direction",
                f"{len(directions)} direction(s) {directions} for {n} objective(s) {OmegaConf.to_container(objective) if n > 1 else objective}; give one per objective",
            )

    def sweep(self, arguments: list[str]) -> None:
        if self.trial_configs not in TRIAL_CONFIGS:
            raise ConfigError("hydra.sweeper.trial_configs", f"got {self.trial_configs!r}; allowed: {', '.join(TRIAL_CONFIGS)}")
        space, fixed = self._search_space(arguments)
        directions = directions_of(self.direction)
        self._check_directions(directions)
        grid = self._is_grid()
        if grid:
            choices = {name: grid_choices(name, dist) for name, dist in space.items()}
            sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler()  # queued trials carry their params
        else:
            sampler = self.sampler
        self.optuna_storage = self._open_storage()
        study = self._study(self.optuna_storage, directions, sampler)
        self.study_id = self.optuna_storage.get_study_id_from_name(study.study_name)
        self.beats = self._open_beats(study.study_name)
        self._save_sweep_config()
        log.info(
            "study %s in %s, sampler %s, directions %s",
            study.study_name,
            self._url() or "memory",
            "grid (queued)" if grid else type(sampler).__name__,
            directions,
        )
        if grid:
            self._sweep_queue(study, space, fixed, directions, grid_points(choices))
        else:
            self._sweep_sampled(study, space, fixed, directions)
        self._save_results(study, directions)

    def _save_sweep_config(self) -> None:
        """The sweep's own config, as Hydra's basic sweeper keeps it: with a trial's
        overrides it gives the trial's config (`trial_configs: overrides`)."""
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")

    def _trial_id(self, number: int) -> int:
        return self.optuna_storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def _queue_grid(self, study: optuna.Study, points: list[dict[str, Any]], space: dict[str, BaseDistribution], fixed: dict[str, str]) -> tuple[int, int]:
        """Queue the grid points that have no trial COMPLETE, RUNNING or WAITING (failed ones
        are retried), each a WAITING trial carrying its parameters and the fixed overrides;
        under the study lock, so that concurrent sweepers queue each once. Returns how many
        it queued and how many trials were complete."""
        names = list(points[0]) if points else []
        with study_lock(self._url(), study.study_name):
            self._fail_stale(study, requeue=False)
            trials = study.get_trials(deepcopy=False)
            taken = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
            done = {point_key(trial_params(t), names) for t in trials if t.state in taken}
            missing = [p for p in points if point_key(p, names) not in done]
            study.add_trials([optuna.trial.create_trial(state=TrialState.WAITING, params=p, distributions=space, user_attrs=fixed) for p in missing])
        return len(missing), sum(t.state == TrialState.COMPLETE for t in trials)

    def _fail_stale(self, study: optuna.Study, requeue: bool) -> int:
        """Mark the study's stale trials FAIL with STALE_NOTE (queued again if `requeue`)."""
        if self.beats is None:
            return 0
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return 0
        storage, failed = self.optuna_storage, []
        for trial in stale_trials(running, self.beats.ages([t.number for t in running]), self.grace_period):
            trial_id = self._trial_id(trial.number)
            try:
                storage.set_trial_user_attr(trial_id, "error", STALE_NOTE)
                if storage.set_trial_state_values(trial_id, TrialState.FAIL):
                    failed.append(trial)
            except UpdateFinishedTrialError:  # its sweeper finished it meanwhile
                continue
        self.beats.forget([t.number for t in failed])
        retry = RetryHeartbeatStaleTrialCallback()
        for trial in failed:
            log.warning("trial %d %s", trial.number, STALE_NOTE)
            if requeue:
                again = copy.copy(trial)
                again.user_attrs = {k: v for k, v in trial.user_attrs.items() if k != "error"}
                retry(study, again)  # a WAITING copy with its parameters, and failed_trial / retry_history
        return len(failed)

    def _pop_queued(self, study: optuna.Study, candidates: list[int], n: int) -> list[optuna.Trial]:
        """Up to n queued trials from `candidates` (numbers of WAITING trials when listed), each
        moved to RUNNING by the storage's atomic update (one another sweeper took is skipped)."""
        trials = []
        while candidates and len(trials) < n:
            trial_id = self._trial_id(candidates.pop(0))
            try:
                if self.optuna_storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                    trials.append(optuna.Trial(study, trial_id))
            except UpdateFinishedTrialError:  # finished by another sweeper since the listing
                continue
        return trials

    def _sweep_queue(self, study, space, fixed, directions, points) -> None:
        queued, complete = self._queue_grid(study, points, space, fixed)
        log.info("grid of %d points: %d queued by this run, %d already done", len(points), queued, complete)
        batch_size = max(1, self.n_jobs)
        candidates: list[int] = []
        while True:
            trials = self._pop_queued(study, candidates, batch_size)
            if trials:
                self._run_batch(study, trials, space, fixed, directions)
                continue
            # every listed trial is taken: list again (one listing per round: reading a big
            # queue costs a second), for trials other sweepers queued again meanwhile
            listed = study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            candidates = [t.number for t in listed if t.state == TrialState.WAITING]
            if candidates:
                continue
            if not listed:
                break
            self._wait_for_others(study)

    def _sweep_sampled(self, study, space, fixed, directions) -> None:
        """`n_trials` is the study's total: trials done (complete, or failed with an error),
        running or queued count towards it, so a rerun and a second sweeper add only the rest.
        `ask` takes a queued trial first (one whose sweeper died, queued again)."""
        with study_lock(self._url(), study.study_name):
            self._fail_stale(study, requeue=True)
        batch_size = max(1, self.n_jobs)
        while True:
            trials = study.get_trials(deepcopy=False)
            waiting = sum(t.state == TrialState.WAITING for t in trials)
            counted = sum(t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING) or self._failed_by_error(t) for t in trials)
            n = min(batch_size, waiting + max(0, self.n_trials - counted))
            if n:
                self._run_batch(study, [study.ask(space) for _ in range(n)], space, fixed, directions)
            elif any(t.state == TrialState.RUNNING for t in trials):
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
    def _failed_by_error(trial: FrozenTrial) -> bool:
        """A failed trial that ran to an error (a stale one is queued again instead)."""
        return trial.state == TrialState.FAIL and trial.user_attrs.get("error") != STALE_NOTE

    def _configure_trials(self, trials: list[optuna.Trial], space, fixed) -> list[tuple[str, ...]]:
        """Each trial's overrides. Parameters not yet in the trial are suggested (a queued
        trial carries its own); the fixed (non-swept) overrides are recorded as user attributes
        where the trial does not have them already (a queued trial carries those of the run
        that queued it)."""
        overrides = []
        for trial in trials:
            for name, distribution in space.items():
                if name not in trial.params:
                    suggest(trial, name, distribution)
            if self.custom_search_space_extender:
                self.custom_search_space_extender(self.config, trial)
            recorded = trial.user_attrs
            for name, value in fixed.items():
                if recorded.get(name) != value:
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
        numbers = [t.number for t in trials]
        beat = Heartbeat(self.beats, self.heartbeat_interval, numbers) if self.beats else contextlib.nullcontext()
        with beat:
            overrides = self._configure_trials(trials, space, fixed)
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
        self.job_idx += len(returns)
        self._save_trial_overrides(returns)
        failures = sum(not self._tell(study, trial, ret, len(directions)) for trial, ret in zip(trials, returns))
        if self.beats:
            self.beats.forget(numbers)
        if failures / len(returns) > self.max_failure_rate:
            raise RuntimeError(
                f"{failures} of {len(returns)} trials failed, above hydra.sweeper.max_failure_rate={self.max_failure_rate}; see the errors above"
            )

    def _tell(self, study: optuna.Study, trial: optuna.Trial, ret: JobReturn, n_objectives: int) -> bool:
        error = None
        values: list[float] | None = None
        try:
            returned = ret.return_value  # a failed job's raises its exception
        except Exception as err:  # noqa: BLE001 - any error of the trial is recorded with it
            error = str(err) if type(err).__module__.startswith("trashfire") else f"{type(err).__name__}: {err}"
        else:
            assert ret.status == JobStatus.COMPLETED
            values = [float(v) for v in (returned if n_objectives > 1 else [returned])]
            if len(values) != n_objectives or any(math.isnan(v) for v in values):
                error, values = f"the trial returned {returned!r}; expected {n_objectives} number(s), none NaN", None
        try:
            if error is not None:
                trial.set_user_attr("error", error)
            # finished already: another sweeper missed our beats, failed it as stale and queued
            # it again (a trial is finished by its own sweeper, or as stale, only)
            told = study.tell(trial, values=values, state=TrialState.FAIL if error is not None else TrialState.COMPLETE, skip_if_finished=True)
            taken_over = told.user_attrs.get("error") == STALE_NOTE
        except UpdateFinishedTrialError:  # finished between the check and the update: the same
            taken_over = True
        if taken_over:
            log.warning(
                "trial %d was taken over by another sweeper (no heartbeat within hydra.sweeper.grace_period=%s s); its queued copy gives the result",
                trial.number,
                self.grace_period,
            )
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
