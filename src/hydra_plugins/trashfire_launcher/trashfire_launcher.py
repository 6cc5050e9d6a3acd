"""The `trashfire_slurm` Hydra launcher (`hydra/launcher=trashfire_slurm`, chosen by
`launcher=slurm`): Hydra's submitit SLURM launcher, with its settings, whose wait has a
deadline. A job that ended without a result (scancel, time limit, out of memory, node
failure) comes back as trashfire.sweep.slurm.JobLost after `lost_after_s` seconds, and the
sweeper queues its trial again, where Hydra's launcher would wait for ever on a cluster
without accounting. The logic is in trashfire.sweep.slurm; this module stays thin so that
Hydra's plugin scan stays quick."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher, log

OWN_SETTINGS = ("lost_after_s", "poll_s")


@dataclass
class TrashfireSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.trashfire_launcher.trashfire_launcher.TrashfireSlurmLauncher"
    lost_after_s: int = 120  # s a job may be ended, or unknown to SLURM, without its result before its trial is lost
    poll_s: float = 5.0  # s between looks at the jobs' results and states


ConfigStore.instance().store(group="hydra/launcher", name="trashfire_slurm", node=TrashfireSlurmConf, provider="trashfire")


class TrashfireSlurmLauncher(SlurmLauncher):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.lost_after_s = float(self.params.pop("lost_after_s"))
        self.poll_s = float(self.params.pop("poll_s"))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Hydra's launch (submitit's executor, one job array per batch), then the wait of
        trashfire.sweep.slurm: a lost job's JobReturn is FAILED with a JobLost."""
        import submitit

        from trashfire.sweep.slurm import wait_for_jobs

        assert self.config is not None and job_overrides
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"], slurm_max_num_timeout=self.params["max_num_timeout"])
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k not in init_keys})
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*job_params))
        outcomes = wait_for_jobs(jobs, self.lost_after_s, self.poll_s)
        return [
            outcome if isinstance(outcome, JobReturn) else JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=outcome)
            for outcome, overrides in zip(outcomes, job_overrides)
        ]
