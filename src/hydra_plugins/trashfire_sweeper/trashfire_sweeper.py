"""The `trashfire` Hydra sweeper: Hydra's Optuna sweeper made resumable and safe to share
between processes (`hydra/sweeper=trashfire`; the logic is in trashfire.sweep). Hydra finds
plugins only under the `hydra_plugins` package, hence this thin module."""


import logging
import sys
from dataclasses import dataclass
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
from omegaconf import DictConfig


logging.getLogger("alembic").setLevel(logging.WARNING)  # "setup plugin" INFO lines when optuna imports it


@dataclass
class TrashfireSweeperConf(OptunaSweeperConf):
    _target_: str = "hydra_plugins.trashfire_sweeper.trashfire_sweeper.TrashfireSweeper"
    n_jobs: int = 1                       # trials per batch (the launcher runs a batch)
    max_failure_rate: float = 1.0         # failed trials are recorded and the sweep goes on
    heartbeat_interval: int = 10          # s between a running trial's beats in the storage
    grace_period: Optional[int] = None    # s without a beat before a trial counts as dead (3 beats)
    poll_interval: float = 5.0            # s between looks at other sweepers' running trials
    trial_configs: str = "overrides"      # per trial folder: .hydra/overrides.yaml, or Hydra's "full" .hydra/


ConfigStore.instance().store(group="hydra/sweeper", name="trashfire", node=TrashfireSweeperConf, provider="trashfire")


class TrashfireSweeper(Sweeper):
    def __init__(self, sampler: Any, direction: Any, storage: Optional[Any], study_name: Optional[str], n_trials: int, n_jobs: int,
                 max_failure_rate: float, search_space: Optional[DictConfig], custom_search_space: Optional[str], params: Optional[DictConfig],
                 heartbeat_interval: int, grace_period: Optional[int], poll_interval: float, trial_configs: str = "overrides") -> None:
        from trashfire.sweep import ResumableOptunaSweeper

        self.sweeper = ResumableOptunaSweeper(
            sampler, direction, storage, study_name, n_trials, n_jobs, max_failure_rate, search_space, custom_search_space, params,
            heartbeat_interval=heartbeat_interval, grace_period=grace_period, poll_interval=poll_interval,
            trial_configs=trial_configs,
        )

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        from trashfire.core.errors import TrashfireError

        try:
            return self.sweeper.sweep(arguments)
        except TrashfireError as err:  # one line and exit 2, as every trashfire command
            print(f"trashfire.experiment: {err}", file=sys.stderr)
            sys.exit(err.exit_code)
