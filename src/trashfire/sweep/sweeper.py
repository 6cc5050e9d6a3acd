"""ResumableOptunaSweeper: the grid queued once in the study and taken trial by trial, or
`n_trials` as the study's total; each batch of trials beating its heartbeat while it runs,
stale trials of dead sweepers queued again, and failures recorded with their error (see
trashfire.sweep for the whole design)."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
import yaml
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, InMemoryStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from trashfire.core.errors import ConfigError
from trashfire.sweep.compose import SweepConfigCache
from trashfire.sweep.heartbeat import QUEUED_AGAIN, STALE_NOTE, Beats, FileBeats, Heartbeat, SqlBeats, stale_trials
from trashfire.sweep.slurm import JobLost
from trashfire.sweep.space import directions_of, grid_choices, grid_points, last_of_each_key, point_key, search_space, suggest, trial_params
from trashfire.sweep.storage import SCHEMA_LOCK, journal_file, optuna_storage, study_lock

log = logging.getLogger(__name__)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # RetryHeartbeatStaleTrialCallback, stable as used here

TRIAL_CONFIGS = ("overrides", "full")


def slurm_job_id() -> str | None:
    """The SLURM job this process runs in, as squeue and scontrol name it (`<array>_<task>`
    for an array task, as submitit does), or None outside SLURM."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


class ResumableOptunaSweeper(Sweeper):
    def __init__(
        self,
        *,
        sampler: Any,
        direction: Any,
        storage: Any | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        custom_search_space: str | None,
        params: DictConfig | None,
        heartbeat_interval: int,
        grace_period: int | None,
        poll_interval: float,
        trial_configs: str = "overrides",
        max_retries: int = 3,
    ):
        if heartbeat_interval <= 0:
            raise ValueError(f"hydra.sweeper.heartbeat_interval must be a positive whole number of seconds, got {heartbeat_interval}")
        if not 0.0 <= max_failure_rate <= 1.0:
            raise ValueError(f"hydra.sweeper.max_failure_rate must be in [0, 1], got {max_failure_rate}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"hydra.sweeper.max_retries must be a whole number >= 0, got {max_retries!r}")
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
        self.max_retries = max_retries
        self._last_stale_look = time.monotonic()  # the queueing looked just now
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
            objectives = OmegaConf.to_container(objective) if n > 1 else objective
            raise ConfigError(
                "hydra.sweeper.direction", f"{len(directions)} direction(s) {directions} for {n} objective(s) {objectives}; give one per objective"
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
            note = self._retry_note(trial, STALE_NOTE) if requeue else STALE_NOTE
            try:
                storage.set_trial_user_attr(trial_id, "error", note)
                if storage.set_trial_state_values(trial_id, TrialState.FAIL):
                    failed.append(trial)
            except UpdateFinishedTrialError:  # its sweeper finished it meanwhile
                continue
        self.beats.forget([t.number for t in failed])
        for trial in failed:
            log.warning("trial %d %s", trial.number, STALE_NOTE)
            if requeue:
                self._queue_again(study, trial)
        return len(failed)

    def _retry_note(self, trial: FrozenTrial, note: str) -> str:
        """`note` (which ends in QUEUED_AGAIN) as it stands where the trial has retries left,
        or saying it stays failed."""
        retries = len(trial.system_attrs.get("retry_history", []))  # RetryHeartbeatStaleTrialCallback's record
        if retries < self.max_retries:
            return note
        return note.removesuffix(QUEUED_AGAIN) + f"; not queued again: retried {retries} times already (hydra.sweeper.max_retries={self.max_retries})"

    def _queue_again(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """A WAITING copy of a failed trial with its parameters and failed_trial /
        retry_history, unless it was retried max_retries times already; without the attributes
        of its failed run (its error, the SLURM job it ran in)."""
        again = copy.copy(trial)
        again.user_attrs = {k: v for k, v in trial.user_attrs.items() if k not in ("error", "slurm_job_id")}
        RetryHeartbeatStaleTrialCallback(max_retry=self.max_retries)(study, again)

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
        self._last_stale_look = time.monotonic()  # the queueing failed the stale trials just now
        log.info("grid of %d points: %d queued by this run, %d already done", len(points), queued, complete)
        batch_size = max(1, self.n_jobs)
        candidates: list[int] = []
        while True:
            trials = self._pop_queued(study, candidates, batch_size)
            if trials:
                self._run_batch(study, trials, space, fixed, directions)
                candidates = self._take_over_stale(study, candidates)
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

    def _take_over_stale(self, study: optuna.Study, candidates: list[int]) -> list[int]:
        """Between batches, once a grace period: queue again the trials whose sweeper died
        (killed mid-trial: scancel, a time limit) and take them first, so that a busy sweeper
        retries a killed trial within minutes, not after the whole queue. The candidates as
        they were where none is stale."""
        now = time.monotonic()
        if self.beats is None or now - self._last_stale_look < self.grace_period:
            return candidates
        self._last_stale_look = now
        with study_lock(self._url(), study.study_name):
            if not self._fail_stale(study, requeue=True):
                return candidates
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        return [t.number for t in sorted(waiting, key=lambda t: ("failed_trial" not in t.system_attrs, t.number))]

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
        """A failed trial that ran to an error (a stale or lost one is queued again instead)."""
        return trial.state == TrialState.FAIL and not str(trial.user_attrs.get("error", "")).endswith(QUEUED_AGAIN)

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
            if slurm_job_id():  # this sweeper runs in a SLURM job (tools/slurm/sweepers.sbatch), and so its trials
                trial.set_user_attr("slurm_job_id", slurm_job_id())
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
        """Record the trial's result, or its error; a trial whose SLURM job was lost is
        failed and queued again (`max_retries`). True where it completed."""
        error = None
        values: list[float] | None = None
        self._record_job(trial, ret)
        try:
            returned = ret.return_value  # a failed job's raises its exception
        except JobLost as err:
            return self._lost(study, trial, err)
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

    def _record_job(self, trial: optuna.Trial, ret: JobReturn) -> None:
        """The SLURM job a trial ran in, as the user attribute `slurm_job_id` (where this
        sweeper's launcher submits SLURM jobs: the job's id as submitit saw it in the job)."""
        if getattr(self.launcher, "_EXECUTOR", None) == "slurm" and ret.hydra_cfg is not None:
            with contextlib.suppress(Exception):  # a trial whose job is lost has no hydra config
                trial.set_user_attr("slurm_job_id", str(ret.hydra_cfg.hydra.job.id))

    def _lost(self, study: optuna.Study, trial: optuna.Trial, err: JobLost) -> bool:
        """Fail a trial whose SLURM job ended without a result and queue it again. Counts as
        no failure of the batch (the cluster's, not the trial's) unless it is retried no more."""
        storage, trial_id = self.optuna_storage, self._trial_id(trial.number)
        note = self._retry_note(storage.get_trial(trial_id), f"lost: {err}{QUEUED_AGAIN}")
        try:
            storage.set_trial_user_attr(trial_id, "slurm_job_id", err.job_id)
            storage.set_trial_user_attr(trial_id, "error", note)
            failed = storage.set_trial_state_values(trial_id, TrialState.FAIL)  # atomic: one of two sweepers fails it
        except UpdateFinishedTrialError:
            failed = False
        if not failed:  # another sweeper failed it as stale meanwhile, and queued it again
            log.warning("trial %d was taken over by another sweeper; its queued copy gives the result", trial.number)
            return True
        log.warning("trial %d %s", trial.number, note)
        self._queue_again(study, self.optuna_storage.get_trial(trial_id))
        return note.endswith(QUEUED_AGAIN)

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
