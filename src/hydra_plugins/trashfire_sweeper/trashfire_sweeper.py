"""The `trashfire` Hydra sweeper: Optuna sweeps that resume and are safe to share between
processes (`hydra/sweeper=trashfire`; the logic is in trashfire.sweep), with its sampler
configs (`hydra/sweeper/sampler=grid|tpe|random|cmaes|nsgaii|qmc|gp`). Hydra finds plugins
only under the `hydra_plugins` package, hence this thin module; it imports no Optuna, so
that Hydra's plugin scan stays quick."""

import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import MISSING, DictConfig

logging.getLogger("alembic").setLevel(logging.WARNING)  # "setup plugin" INFO lines when optuna imports it


# --- samplers: Optuna's, instantiated by Hydra (https://optuna.readthedocs.io/en/stable/reference/samplers/)
@dataclass
class SamplerConfig:
    _target_: str = MISSING


@dataclass
class GridSamplerConfig(SamplerConfig):
    """Every point of hydra.sweeper.params (choice(...), range(...)) once, queued in the study."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True  # the sweeper reads the grid from the params


@dataclass
class TPESamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.TPESampler"
    seed: int | None = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: bool | None = None
    group: bool = False
    constant_liar: bool = True


@dataclass
class RandomSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.RandomSampler"
    seed: int | None = None


@dataclass
class CmaEsSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: int | None = None
    sigma0: float | None = None
    n_startup_trials: int = 1
    restart_strategy: str | None = None
    popsize: int | None = None
    inc_popsize: int = -1
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False


@dataclass
class NSGAIISamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: int | None = None
    population_size: int = 50
    mutation_prob: float | None = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class QMCSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.QMCSampler"
    seed: int | None = None
    qmc_type: str = "sobol"
    scramble: bool = False


@dataclass
class GPSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.GPSampler"
    seed: int | None = None
    n_startup_trials: int = 10
    deterministic_objective: bool = False


SAMPLERS = {
    "grid": GridSamplerConfig,
    "tpe": TPESamplerConfig,
    "random": RandomSamplerConfig,
    "cmaes": CmaEsSamplerConfig,
    "nsgaii": NSGAIISamplerConfig,
    "qmc": QMCSamplerConfig,
    "gp": GPSamplerConfig,
}


@dataclass
class TrashfireSweeperConf:
    _target_: str = "hydra_plugins.trashfire_sweeper.trashfire_sweeper.TrashfireSweeper"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConfig = MISSING
    direction: Any = "minimize"  # minimize or maximize, or a list of them (one per objective)
    storage: Any | None = None  # SQLAlchemy URL, journal file (journal:///path/optuna.log), or null (in memory)
    study_name: str | None = None
    n_trials: int = 20  # the study's total (samplers other than grid)
    n_jobs: int = 1  # trials per batch (the launcher runs a batch)
    max_failure_rate: float = 1.0  # failed trials are recorded and the sweep goes on
    params: Any | None = None  # key: choice(...) | range(...) | interval(...) | tag(log, interval(...)) | a fixed value
    custom_search_space: str | None = None  # dotted path of a callable(cfg, trial) that suggests more parameters
    heartbeat_interval: int = 10  # s between a running trial's beats in the storage
    grace_period: int | None = None  # s without a beat before a trial counts as dead (3 beats)
    poll_interval: float = 5.0  # s between looks at other sweepers' running trials
    trial_configs: str = "overrides"  # per trial folder: .hydra/overrides.yaml, or Hydra's "full" .hydra/
    max_retries: int = 3  # times a trial whose process died (stale) or whose SLURM job was lost is queued again


ConfigStore.instance().store(group="hydra/sweeper", name="trashfire", node=TrashfireSweeperConf, provider="trashfire")
for _name, _node in SAMPLERS.items():
    ConfigStore.instance().store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="trashfire")


class TrashfireSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        """Hydra instantiates this with TrashfireSweeperConf's fields, by name: they are
        handed on as they are, so the sweeper's settings are named once, in that dataclass
        (and the engine's keyword-only signature, which refuses a name it does not know)."""
        from trashfire.sweep import ResumableOptunaSweeper

        self.sweeper = ResumableOptunaSweeper(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> None:
        from trashfire.core.errors import TrashfireError

        try:
            return self.sweeper.sweep(arguments)
        except TrashfireError as err:  # one line and exit 2, as every trashfire command
            print(f"trashfire.experiment: {err}", file=sys.stderr)
            sys.exit(err.exit_code)
