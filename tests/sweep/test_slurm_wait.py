"""The SLURM launcher's wait (trashfire.sweep.slurm) and what the sweeper does with a lost job,
on stand-in jobs and a fake clock: a job that ended without its result is lost after
`lost_after_s`, a pending or running one is waited for, a trial stopped by submitit's timeout
signal is lost too, and a lost trial is queued again until `max_retries`; a busy sweeper
takes over a dead sweeper's trial between its batches, first. The same paths on a real
cluster: tests/slurm/test_cluster.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from submitit.core.utils import UncompletedJobError

from trashfire.sweep.slurm import GONE, JobLost, wait_for_jobs
from trashfire.sweep.sweeper import ResumableOptunaSweeper


@dataclass
class Paths:
    result_pickle: Path
    stdout: Path


@dataclass
class StandIn:
    """A submitit job as the wait sees it: its id, result file, and what results() gives."""

    job_id: str
    folder: Path
    states: list[str] = field(default_factory=list)  # one per look; the last one stays
    outcome: object = None

    @property
    def paths(self) -> Paths:
        return Paths(self.folder / f"{self.job_id}_result.pkl", self.folder / f"{self.job_id}.out")

    def results(self):
        return [self.outcome]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def wait(jobs, lost_after_s=10.0, finish: dict | None = None):
    """Run the wait with each job's states in turn; `finish`: {job id: look at which its
    result file appears}."""
    clock, looks = Clock(), {job.job_id: 0 for job in jobs}

    def state_of(job):
        looks[job.job_id] += 1
        if finish and looks[job.job_id] >= finish.get(job.job_id, 10**9):
            job.paths.result_pickle.touch()
        return job.states[min(looks[job.job_id], len(job.states)) - 1]

    return wait_for_jobs(jobs, lost_after_s, poll_s=1.0, state_of=state_of, clock=clock, sleep=clock.sleep), clock.now


def test_a_job_that_ended_without_its_result_is_lost_after_the_deadline_and_a_running_one_is_waited_for(tmp_path):
    done = JobReturn(overrides=["a=1"], status=JobStatus.COMPLETED, _return_value=0.5)
    running = StandIn("4_0", tmp_path, ["PENDING"] * 3 + ["RUNNING"] * 40, outcome=done)
    timed_out = StandIn("4_1", tmp_path, ["RUNNING", "TIMEOUT"])
    forgotten = StandIn("4_2", tmp_path, ["RUNNING", GONE])
    outcomes, elapsed = wait([running, timed_out, forgotten], lost_after_s=10.0, finish={"4_0": 30})
    assert outcomes[0] is done
    assert [type(o) for o in outcomes[1:]] == [JobLost, JobLost]
    assert str(outcomes[1]) == f"SLURM job 4_1 ended without a result (state TIMEOUT); its log: {tmp_path / '4_1.out'}"
    assert str(outcomes[2]).startswith("SLURM job 4_2 ended without a result (SLURM no longer knows it (no accounting to ask))")
    assert 28 <= elapsed <= 31  # the running job's 30 looks, a second apart; the lost ones 10 s after they ended


def test_a_result_that_appears_within_the_deadline_is_taken_not_lost(tmp_path):
    """A shared file system may show the result file after SLURM reports the job COMPLETED."""
    done = JobReturn(overrides=["a=1"], status=JobStatus.COMPLETED, _return_value=1.0)
    late = StandIn("5", tmp_path, ["RUNNING", "COMPLETED"], outcome=done)
    outcomes, _ = wait([late], lost_after_s=10.0, finish={"5": 6})
    assert outcomes == [done]


def test_a_trial_stopped_by_submitits_timeout_signal_is_lost_and_a_trials_own_error_is_not(tmp_path):
    """submitit raises UncompletedJobError in the trial on SLURM's signal before the time limit
    (when it may not requeue); Hydra's run_job records it as the job's failure."""
    signalled = StandIn("6_0", tmp_path, ["RUNNING"], outcome=JobReturn(status=JobStatus.FAILED, _return_value=UncompletedJobError("timed-out too many times")))
    failing = StandIn("6_1", tmp_path, ["RUNNING"], outcome=JobReturn(status=JobStatus.FAILED, _return_value=ValueError("bad cell")))
    for job in (signalled, failing):
        job.paths.result_pickle.touch()
    outcomes, _ = wait([signalled, failing])
    assert isinstance(outcomes[0], JobLost) and outcomes[0].state == "TIMEOUT"
    assert outcomes[1] is failing.outcome


def a_sweeper(**settings) -> ResumableOptunaSweeper:
    defaults = {
        "sampler": None,
        "direction": "minimize",
        "storage": None,
        "study_name": "s",
        "n_trials": 1,
        "n_jobs": 1,
        "max_failure_rate": 1.0,
        "custom_search_space": None,
        "params": None,
        "heartbeat_interval": 1,
        "grace_period": None,
        "poll_interval": 0.1,
        "max_retries": 1,
    }
    return ResumableOptunaSweeper(**(defaults | settings))


@pytest.fixture
def sweeper_on_a_study():
    sweeper = a_sweeper()
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s")
    sweeper.optuna_storage, sweeper.study_id = storage, storage.get_study_id_from_name("s")
    study.add_trial(
        optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, params={"x": 1.0}, distributions={"x": optuna.distributions.FloatDistribution(0, 2)})
    )
    return sweeper, study


def take(sweeper, study) -> optuna.Trial:
    (queued,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    (trial,) = sweeper._pop_queued(study, [queued.number], 1)
    return trial


def test_a_lost_trial_is_queued_again_until_max_retries(sweeper_on_a_study):
    sweeper, study = sweeper_on_a_study
    assert sweeper._lost(study, take(sweeper, study), JobLost("7_0", "TIMEOUT")) is True
    first = study.trials[0]
    assert first.state == optuna.trial.TrialState.FAIL and first.user_attrs == {
        "slurm_job_id": "7_0",
        "error": "lost: SLURM job 7_0 ended without a result (state TIMEOUT); queued again",
    }
    again = take(sweeper, study)  # the copy: its parameters, none of the lost run's attributes
    assert again.params == {"x": 1.0} and study.trials[1].user_attrs == {} and study.trials[1].system_attrs["failed_trial"] == 0
    assert sweeper._lost(study, again, JobLost("8_0", GONE)) is False  # max_retries=1: retried once already
    assert study.trials[1].user_attrs["error"].endswith("; not queued again: retried 1 times already (hydra.sweeper.max_retries=1)")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2


def test_a_busy_sweeper_takes_over_a_dead_sweepers_trial_between_batches_and_runs_it_first(tmp_path):
    """A sweeper killed mid-trial (its SLURM job cancelled) stops beating; another, still
    working through the queue, queues the trial again at its next look (once a grace period)
    and puts the copy ahead of the points it had listed."""
    import os

    from trashfire.sweep.heartbeat import FileBeats
    from trashfire.sweep.storage import optuna_storage

    journal = tmp_path / "optuna.log"
    storage = optuna_storage(f"journal://{journal}")
    study = optuna.create_study(storage=storage, study_name="s")
    x = optuna.distributions.FloatDistribution(0, 9)
    study.add_trials([optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, params={"x": float(i)}, distributions={"x": x}) for i in range(4)])
    sweeper = a_sweeper(storage=f"journal://{journal}", grace_period=5, max_retries=3)
    sweeper.optuna_storage, sweeper.study_id, sweeper.beats = storage, storage.get_study_id_from_name("s"), FileBeats(journal, "s")
    (killed,) = sweeper._pop_queued(study, [0], 1)  # the dead sweeper's trial: it beat once, 60 s ago
    sweeper.beats.beat([killed.number])
    os.utime(sweeper.beats.folder / "0", (os.path.getmtime(sweeper.beats.folder / "0") - 60,) * 2)

    assert sweeper._take_over_stale(study, [2, 3]) == [2, 3]  # within a grace period of its last look: no look
    sweeper._last_stale_look -= 5
    assert sweeper._take_over_stale(study, [2, 3]) == [4, 1, 2, 3]  # the copy first, then the queue as listed
    copy = study.trials[4]
    assert copy.params == {"x": 0.0} and copy.system_attrs["failed_trial"] == 0
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
