"""Waiting on submitit's SLURM jobs with a deadline: a job that SLURM no longer runs and that
left no result is *lost* (cancelled, past its time limit, out of memory, its node failed, or
preempted), and its trial is queued again by the sweeper (trashfire.sweep.sweeper).

submitit alone waits for ever on such a job where the cluster keeps no accounting: its state
comes from `sacct`, which fails there, so the job stays UNKNOWN, and UNKNOWN counts as not
finished. Here a job's state comes from `sacct` (through submitit) where it answers, and
otherwise from `scontrol show job`, which knows a job for `MinJobAge` seconds after it ended;
a job neither knows is gone. A job that is ended or gone for `lost_after_s` seconds without
its result file is lost (the wait covers a shared file system that shows the file late).
Pending and running jobs are waited for as long as SLURM holds them: its time limit bounds a
running job, and a queue's wait is the cluster's to decide.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from trashfire.core.errors import TrashfireError

log = logging.getLogger(__name__)

# states of a job SLURM still holds (squeue's, scontrol's); any other is an end
LIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
)
GONE = "GONE"  # neither sacct nor scontrol knows the job any more


class JobLost(TrashfireError):
    """A trial's SLURM job ended without a result; the sweeper queues the trial again."""

    def __init__(self, job_id: str, state: str, log_path: str | None = None):
        self.job_id, self.state = job_id, state
        why = "SLURM no longer knows it (no accounting to ask)" if state == GONE else f"state {state}"
        where = f"; its log: {log_path}" if log_path else ""
        super().__init__(f"SLURM job {job_id} ended without a result ({why}){where}")


def scontrol_state(job_id: str) -> str:
    """A job's state from `scontrol show job` (an array task as `<array>_<task>`): its
    JobState, or GONE where SLURM has forgotten the job (or the command fails)."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("scontrol show job %s failed: %s", job_id, err)
        return GONE
    for field in shown.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return GONE


def accounting_answers() -> bool:
    """Whether `sacct` answers here: on a cluster without accounting it fails at once
    ('Slurm accounting storage is disabled'), and asking it for each look only adds noise."""
    try:
        return subprocess.run(["sacct", "--noheader", "--jobs", "1"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def state_reader(accounting: bool) -> Callable[[Any], str]:
    """A job's state: from sacct through submitit where accounting answers (the first word:
    'CANCELLED by 0' is CANCELLED), scontrol's where it does not or sacct says UNKNOWN."""

    def state_of(job: Any) -> str:
        state = str(job.state).split()[0].upper() if accounting and job.state else "UNKNOWN"
        return scontrol_state(str(job.job_id)) if state == "UNKNOWN" else state

    return state_of


def wait_for_jobs(
    jobs: Sequence[Any],
    lost_after_s: float,
    poll_s: float,
    state_of: Callable[[Any], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Any]:
    """Each job's result (its JobReturn), or a JobLost for a job that ended without one, in
    the jobs' order; returns once every job has one or the other."""
    state_of = state_of or state_reader(accounting_answers())
    outcomes: list[Any] = [None] * len(jobs)
    pending = dict(enumerate(jobs))
    ended_since: dict[int, float] = {}
    while pending:
        for index, job in list(pending.items()):
            if job.paths.result_pickle.exists():
                outcomes[index] = _result(job)
                del pending[index]
                continue
            state = state_of(job)
            if state in LIVE_STATES or state == "UNKNOWN":
                ended_since.pop(index, None)
                continue
            since = ended_since.setdefault(index, clock())
            if clock() - since >= lost_after_s:
                outcomes[index] = JobLost(str(job.job_id), state, str(job.paths.stdout))
                log.warning("%s", outcomes[index])
                del pending[index]
        if pending:
            sleep(poll_s)
    return outcomes


def _result(job: Any) -> Any:
    """The job's JobReturn; a JobLost where submitit stopped the trial at its time limit (it
    raises UncompletedJobError in the trial on SLURM's signal `signal_delay_s` before the
    limit, when it may not requeue the job: `max_num_timeout`); submitit's own error where the
    job failed outside the task, which Hydra's run_job would have caught."""
    from submitit.core.utils import UncompletedJobError

    try:
        outcome = job.results()[0]
    except Exception as err:  # noqa: BLE001 - handed to the sweeper, which records it with the trial
        return err
    if isinstance(getattr(outcome, "_return_value", None), UncompletedJobError):
        return JobLost(str(job.job_id), "TIMEOUT", str(job.paths.stdout))
    return outcome
