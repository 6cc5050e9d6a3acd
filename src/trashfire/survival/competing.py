"""Competing risks across a composite's components: which component of AutoAttack (APGD-CE,
APGD-T, FAB-T, Square) breaks the samples, and when.

In a composite's cells each failure has a cause, the component that broke the sample
(`broken_by` in the survival data; "first_query": wrong before any component ran). The
cumulative incidence of cause k, F_k(t) = P(T <= t, broken by k), is lifelines'
`AalenJohansenFitter` on the cell's samples (the composite's budget censors the rest). The
incidences at the budget sum to the composite's failure share, 1 - KM(t*): each cause's share
of the failures. A component runs on the samples the ones before it left standing, so the
components' failures come in the composite's order; the table orders them by their earliest
failure.

A black-box component (Square) that breaks more samples than the white-box components before it
carries the evaluation: their gradients mislead them (gradient masking), and the validity flag
`black_box_carries` (trashfire.metrics.validity) says so.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from lifelines import AalenJohansenFitter, KaplanMeierFitter

from trashfire.core.records import write_csv
from trashfire.survival.figures import competing_risks_figure, save
from trashfire.survival.fitters import DURATION, EVENT, sample_weights

log = logging.getLogger(__name__)

CAUSE = "broken_by"


def composite_rows(data: pd.DataFrame) -> pd.DataFrame:
    """The rows of the cells where some sample names the component that broke it."""
    if CAUSE not in data:
        return data.iloc[:0]
    named = data[CAUSE].fillna("").astype(str).ne("")
    return data[data["attack_hash"].isin(data.loc[named, "attack_hash"])]


def causes(part: pd.DataFrame) -> list[str]:
    """The causes of the failures in `part`, by their earliest failure (the composite's order)."""
    first = part[part[EVENT] == 1].groupby(CAUSE)[DURATION].min().sort_values(kind="stable")  # a composite names every failure's cause
    return list(first.index)


def incidence_fits(part: pd.DataFrame, seed: int = 0) -> tuple[dict[str, AalenJohansenFitter], float]:
    """Per cause an Aalen-Johansen fit of its cumulative incidence, and the failure share at
    the budget (1 - the Kaplan-Meier survival after the last time).

    lifelines jitters every failure time, up or down, where failures tie: here by a tenth of the
    smallest gap between distinct times, so that no failure passes another time. A sample
    censored at a failure's time was at risk at that failure (the usual convention): every censored
    sample leaves half a gap later, which passes no other time, so that no failure jittered up passes it (a failure at the budget's
    last check, beside the samples standing there, would otherwise have only itself at risk)."""
    durations = part[DURATION].to_numpy(float)
    weights = sample_weights(part).astype(float)
    order = causes(part)
    codes = np.zeros(len(part), dtype=int)
    for code, cause in enumerate(order, start=1):
        codes[(part[EVENT].to_numpy() == 1) & (part[CAUSE].astype(str).to_numpy() == cause)] = code
    gaps = np.diff(np.unique(durations))
    gap = float(gaps.min()) if gaps.size else 1.0
    at_risk_order = np.where(codes == 0, durations + gap / 2, durations)  # half a gap passes no other time
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lifelines' note that it jitters ties
        for code, cause in enumerate(order, start=1):
            fits[cause] = AalenJohansenFitter(jitter_level=gap / 10, seed=seed).fit(at_risk_order, codes, event_of_interest=code, weights=weights)
    failed = 1.0 - float(KaplanMeierFitter().fit(durations, codes > 0, weights=weights).survival_function_.iloc[-1, 0])
    return fits, failed


def competing_table(data: pd.DataFrame, cell: str, labels: list[str]) -> pd.DataFrame:
    """Per composite attack cell (`cell` column; its `labels` kept) and cause, in the composite's
    order: the samples it broke, its cumulative incidence at the budget with lifelines' 95%
    interval, the cell's failure share, and the cause's share of the failures."""
    rows = []
    for name, part in composite_rows(data).groupby(cell, sort=True):
        fits, failed = incidence_fits(part)
        weights = sample_weights(part)
        for order, (cause, fit) in enumerate(fits.items(), start=1):
            band = fit.confidence_interval_cumulative_density_  # by position: lifelines 0.30 names its lower bound "upper" and its upper "lower"
            incidence = float(fit.cumulative_density_.iloc[-1, 0])
            rows.append(
                {
                    cell: name,
                    **part.iloc[0][labels].to_dict(),
                    "component": cause,
                    "order": order,
                    "samples": int(weights.sum()),
                    "broken": int(weights[(part[EVENT] == 1) & (part[CAUSE].astype(str) == cause)].sum()),
                    "incidence": incidence,
                    "incidence_low": float(band.iloc[-1, 0]),
                    "incidence_high": float(band.iloc[-1, 1]),
                    "failure_share": failed,
                    "share_of_failures": incidence / failed,  # a cause has a failure: failed > 0
                }
            )
    return pd.DataFrame(rows, columns=[cell, *labels, *COMPETING_COLUMNS])


COMPETING_COLUMNS = ["component", "order", "samples", "broken", "incidence", "incidence_low", "incidence_high", "failure_share", "share_of_failures"]


def incidence_curves(data: pd.DataFrame, group: list[str]) -> dict[tuple, dict[str, pd.Series]]:
    """Per group of composite cells (e.g. defence and eps pooled over seeds): each cause's
    cumulative incidence curve on the pooled samples."""
    curves = {}
    for key, part in composite_rows(data).groupby(group, sort=True):
        fits, _ = incidence_fits(part)
        curves[key if isinstance(key, tuple) else (key,)] = {cause: fit.cumulative_density_.iloc[:, 0] for cause, fit in fits.items()}
    return curves


COMPETING_LABELS = ["model_hash", "attack_family", "defence", "dataset"]


def write_competing_risks(data: pd.DataFrame, out: Path, unit: float, unit_name: str) -> None:
    """A composite's cells : competing_risks.csv, per attack cell and
    component its cumulative incidence at the budget, and competing_risks.png, the incidence
    curves per attack family and defence. Without a composite cell, neither (older ones removed)."""
    table = competing_table(data, "attack_hash", COMPETING_LABELS)
    if table.empty:
        for name in ("competing_risks.csv", "competing_risks.png"):
            (out / name).unlink(missing_ok=True)
        return
    write_csv(table, out / "competing_risks.csv")
    clock_data = data.assign(**{DURATION: data[DURATION] * unit})
    save(competing_risks_figure(incidence_curves(clock_data, ["attack_family", "defence"]), unit_name), out / "competing_risks.png")
    shares = table.groupby("component")["share_of_failures"].median()
    log.info(
        "competing risks in %d composite cells: median share of the failures by component: %s",
        table["attack_hash"].nunique(),
        ", ".join(f"{c} {v:.2f}" for c, v in shares.items()),
    )
