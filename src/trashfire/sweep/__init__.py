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

Modules: sweeper (ResumableOptunaSweeper: queue, take, run and tell trials), storage (where a
study lives, and the lock across processes that serialises queueing), heartbeat (the running
trials' beats and which trials are stale), space (the search space from Hydra's override
grammar, and the grid), compose (Hydra's composition of a trial's config, cached).
"""

from trashfire.sweep.sweeper import ResumableOptunaSweeper  # the plugin's and bench/sweep_overhead's entry

__all__ = ["ResumableOptunaSweeper"]
