"""A Hydra callback that holds chosen trials for a while, so that a test can cancel or time out
a job while its trial runs: `+hydra.callbacks.slow._target_=tests.slurm.slow_trial.SlowTrial`
with `match` (the overrides a trial must all have, e.g. `[model=mlp2,defence=fsq]`), `seconds`, `at` (`start`:
before the trial computes anything; `end`: after it recorded every cell, before it reports)
and `once` (a marker file: only the first attempt is held)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback


class SlowTrial(Callback):
    def __init__(self, match: list[str], seconds: float, at: str = "start", once: str | None = None) -> None:
        self.match, self.seconds, self.at, self.once = list(match), float(seconds), at, once

    def _hold(self, when: str) -> None:
        if when != self.at or not set(self.match) <= set(HydraConfig.get().overrides.task):
            return
        if self.once is not None:
            try:
                os.close(os.open(Path(self.once), os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return  # held once already: a later attempt runs through
        until = time.monotonic() + self.seconds
        while time.monotonic() < until:
            try:
                time.sleep(until - time.monotonic())
            except Exception:  # noqa: BLE001, S112 - submitit's timeout signal raises here; a held trial ignores it, as a busy one would be unable to answer it, until SLURM kills it
                continue

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self._hold("start")

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        self._hold("end")
