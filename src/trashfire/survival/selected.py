"""The selected model and what needs it alone: its test scores, its E[T] table and Kaplan-Meier
check, its curves over the Kaplan-Meier ones.

The selection reads the AFT fits only (`expected_time.select`: never a cure model, Cox PH or a
baseline), so the stage makes it as soon as every AFT fit is in (`Selection.of_aft_fits`),
while the cure and Cox fits still run in their worker: at 10^7 samples this work took the
survival stage's last two minutes. What needs no model at all (the Kaplan-Meier restricted
means per cell) is done while the first fit runs (`Selection.model_free`). The results are
the ones the stage computed after its last fit, in the same order of their sums.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from trashfire.core.errors import DataError
from trashfire.survival import fitters as F
from trashfire.survival.expected_time import (
    expected_time_table,
    expected_times,
    km_check_table,
    km_restricted_means,
    km_summaries,
    predicted_curves,
    select,
)
from trashfire.survival.score_sample import calibration_rows
from trashfire.survival.scoring import CELL, calibration_time, t0_quantile, test_scores

log = logging.getLogger("trashfire.survival.analysis")  # the survival stage's log


@dataclass
class Selection:
    """The stage's selection on `data` (train and test: `train`, `test`), with the cells'
    `budgets`, the AFT models' E[T] per cell as they arrived (`known`) and the calibration
    figure's `axes` (the selected model's test panel is drawn when it is scored)."""

    settings: Any
    data: pd.DataFrame
    train: pd.DataFrame
    test: pd.DataFrame
    budgets: pd.Series
    known: dict[str, pd.Series]
    axes: dict
    km: pd.Series | None = None
    done: bool = False
    name: str | None = None
    reason: str | None = None
    times: pd.DataFrame | None = None
    t0: float = math.nan  # the selected model's calibration time on the training part (NaN: none selected)
    scored: tuple[dict, list[str]] | None = None
    expected: pd.DataFrame | None = None
    check: pd.DataFrame | None = None
    summaries: dict[str, dict] = field(default_factory=dict)
    predicted: dict = field(default_factory=dict)

    @property
    def aft(self) -> list[str]:
        return [name for name in self.settings.fitters if self.settings.models[name].aft]

    def model_free(self) -> None:
        """The Kaplan-Meier restricted means per cell."""
        self.km = km_restricted_means(self.data, self.budgets)

    def of_aft_fits(self, comparison: pd.DataFrame, fits: dict[str, F.Fit]) -> None:
        """Select among the AFT fits (Table I's rows so far: every AFT one is in) and compute
        what the selected model alone gives; once."""
        if self.done:
            return
        self.done = True
        if self.km is None:
            self.model_free()
        settings = self.settings
        self.times = expected_times(fits, self.data, self.aft, self.budgets, self.known)
        try:
            self.name = select(comparison, self.times, settings.chosen, settings.select_by)
        except DataError as err:
            self.reason = str(err)
            log.warning("no survival model gives E[T], so TRASH is missing downstream: %s", self.reason)
        self.summaries = km_summaries(self.times, self.data, self.budgets, self.km, settings.km_check_tolerance)
        if self.name is None:
            return
        fit = fits[self.name]
        self.t0 = calibration_time(self.train, t0_quantile(settings.models[self.name], settings))  # once: a quantile of every training duration
        calibrated = calibration_rows(self.test, settings.get("score_samples"), int(settings.seed))
        self.scored = test_scores(fit, self.train, self.test, self.t0, tuple(settings.score_range), self.axes.get(self.name, (None, None))[1], calibrated)
        self.expected = expected_time_table(self.times, self.budgets, fit, self.data)
        self.check = km_check_table(self.data, self.expected.set_index(CELL)["E_T"], self.budgets, self.km, settings.km_check_tolerance)
        self.predicted = predicted_curves(fit, self.data)
