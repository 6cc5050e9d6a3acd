"""Each fitted model's own outputs beyond Table I: the E[T] per attack cell of every AFT model
(expected_times.csv's E_T_<fitter> columns), and every cure model's cured fractions
(cure_fractions.csv), budget sufficiency (budget_sufficiency.csv) and breakable means.

None of them depends on which model is selected, so the stage computes them as each fit
arrives (`ModelOutputs.add`), while the fits still to come run in their workers: at 10^7
samples they were two of the survival stage's minutes after the last fit. Where a fit's
outputs were not computed on arrival (a caller without `add`), the writers compute them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trashfire.core.records import write_csv
from trashfire.survival import fitters as F
from trashfire.survival.cure import budget_sufficiency, cure_table
from trashfire.survival.expected_time import CELL, expected_time_of
from trashfire.survival.newton import in_row_blocks

log = logging.getLogger("trashfire.survival.analysis")  # the survival stage's log, where its lines were before they moved here

CURE_LABELS = ["attack_family", "defence", "dataset"]


def cure_fits(fits: dict[str, F.Fit]) -> dict[str, F.Fit]:
    """The fits of cure models (survival.cure), by name."""
    return {name: fit for name, fit in fits.items() if getattr(fit.fitter, "cure_model", False)}


def selected_cure(fits: dict[str, F.Fit]) -> str | None:
    """The cure model of lowest AIC (Table I's: unpenalised, on the training split they share;
    the first of equals), or None without one: it gives the budget flag and E_T_breakable."""
    cures = cure_fits(fits)
    return min(cures, key=lambda name: _table_aic(cures[name])) if cures else None


def _table_aic(fit: F.Fit) -> float:
    """Table I's AIC of a scored fit; lifelines' (penalised) only for a fit never scored."""
    return fit.criteria.get("AIC", fit.fitter.AIC_)


def in_clock_units(table: pd.DataFrame, unit: float, columns) -> pd.DataFrame:
    """`table` with its time `columns` from the fitting unit back to the clock's."""
    return table.assign(**{c: table[c] * unit for c in columns if c in table})


def cure_fraction_rows(name: str, fit: F.Fit, data: pd.DataFrame) -> pd.DataFrame:
    return cure_table(fit.fitter, data, CELL, CURE_LABELS).assign(fitter=name)


def sufficiency_rows(name: str, fit: F.Fit, data: pd.DataFrame, budgets: pd.Series, settings: Any) -> pd.DataFrame:
    return budget_sufficiency(fit.fitter, data, CELL, CURE_LABELS, budgets, settings.factor, settings.draws, settings.seed).assign(
        fitter=name, factor=settings.factor
    )


@dataclass
class ModelOutputs:
    """Each model's outputs, computed as its fit arrives (`add`): E_T per cell of the models in
    `aft`, cure fractions and budget sufficiency of the cure models; on `data` (every sample),
    with the cells' `budgets` and the budget stage's `budget.factor`, `draws` and `seed`."""

    data: pd.DataFrame
    budgets: pd.Series
    aft: list[str]
    budget: Any
    times: dict[str, pd.Series] = field(default_factory=dict)
    fractions: dict[str, pd.DataFrame] = field(default_factory=dict)
    sufficiency: dict[str, pd.DataFrame] = field(default_factory=dict)

    def add(self, name: str, fit: F.Fit) -> None:
        if name in self.aft:
            self.times[name] = expected_time_of(fit, self.data, self.budgets)
        if getattr(fit.fitter, "cure_model", False):
            self.fractions[name] = cure_fraction_rows(name, fit, self.data)
            self.sufficiency[name] = sufficiency_rows(name, fit, self.data, self.budgets, self.budget)


def write_cure_fractions(fits: dict[str, F.Fit], data: pd.DataFrame, path: Path, unit: float = 1.0, known: dict[str, pd.DataFrame] | None = None) -> None:
    """Each cure model's cured share per attack cell beside the cell's Kaplan-Meier plateau, with
    the breakable samples' mean time E_T_breakable (`survival.cure.cure_table`; times from the
    fitting `unit` back to the clock's), and the median |difference| per attack family in the log.
    `known`: tables already computed (`ModelOutputs.fractions`). Without a cure model among the
    fits, no file (an older one is removed)."""
    known = known or {}
    tables = [known[name] if name in known else cure_fraction_rows(name, fit, data) for name, fit in cure_fits(fits).items()]
    if not tables:
        path.unlink(missing_ok=True)
        return
    table = pd.concat(tables, ignore_index=True)
    columns = ["fitter", CELL, *CURE_LABELS, "samples", "km_plateau", "cured_fraction", "difference", "E_T_breakable"]
    write_csv(in_clock_units(table[columns], unit, ["E_T_breakable"]), path)  # E[T_u] in the clock's unit
    for name, part in table.groupby("fitter", sort=False):
        medians = part["difference"].abs().groupby(part["attack_family"]).median()
        log.info(
            "%s: cured share against the Kaplan-Meier plateau per cell, median |difference| by family: %s",
            name,
            ", ".join(f"{f} {v:.3f}" for f, v in medians.items()),
        )


SUFFICIENCY_COLUMNS = [
    "fitter",
    "selected",
    CELL,
    *CURE_LABELS,
    "samples",
    "budget",
    "factor",
    "broken",
    "one_step",
    "still_breakable",
    "still_breakable_low",
    "still_breakable_high",
]


def write_budget_sufficiency(
    fits: dict[str, F.Fit], data: pd.DataFrame, budgets: pd.Series, path: Path, settings: Any, unit: float = 1.0, known: dict[str, pd.DataFrame] | None = None
) -> None:
    """Each cure model's share per attack cell that a budget `settings.factor` times larger
    would still break (`survival.cure.budget_sufficiency`), budgets back in the clock's unit;
    `selected` marks the rows of the cure model of lowest AIC, which the budget flag reads.
    `known`: tables already computed (`ModelOutputs.sufficiency`). Without a cure model among
    the fits, no file (an older one is removed)."""
    chosen, known = selected_cure(fits), known or {}
    tables = [
        (known[name] if name in known else sufficiency_rows(name, fit, data, budgets, settings)).assign(selected=name == chosen)
        for name, fit in cure_fits(fits).items()
    ]
    if not tables:
        path.unlink(missing_ok=True)
        return
    write_csv(in_clock_units(pd.concat(tables, ignore_index=True)[SUFFICIENCY_COLUMNS], unit, ["budget"]), path)


def with_breakable_means(expected: pd.DataFrame, fits: dict[str, F.Fit], data: pd.DataFrame) -> pd.DataFrame:
    """expected_times.csv with E_T_breakable, the selected cure model's mean time to failure of
    the breakable samples per attack cell (survival.cure), where one was fitted."""
    name = selected_cure(fits)
    if name is None:
        return expected
    breakable = in_row_blocks(lambda rows: fits[name].fitter.predict_expectation_breakable(rows).to_numpy(float), F.covariates_of(data))
    means = pd.Series(breakable).groupby(data[CELL].to_numpy()).mean()
    return expected.assign(E_T_breakable=expected[CELL].map(means))
