"""The survival data set (TRASHFIRE III and V-E) that the timing stage writes to
`reports/survival_data.csv` and the survival stage fits.

One row per attack cell and outcome, weighted by the number of samples with that outcome (the
compact form of one row per attacked sample; a count is never cast to a boolean):

| outcome of an attacked sample                   | duration                  | event |
| ----------------------------------------------- | ------------------------- | ----- |
| correct before, misclassified after the attack  | t_attack                  | 1     |
| correct before and after (survived)             | t_attack                  | 0     |
| misclassified already before the attack         | by the policy below       | 1     |

Durations are per-sample times of the cell on the configured clock. Policies:
- `misclassified_before_attack`: such a sample took no attack time, and lifelines takes no
  duration of 0. `attack_time` (default, TRASHFIRE's accounting) times its failure at the
  cell's t_attack: a batch attack spends that time on every sample, the ones already wrong
  included. `predict_time` times it at t_predict, the one query that a query-first adversary
  needs to find it; then a cell's failures split between t_predict and t_attack under one
  covariate vector, which no AFT model with cell-level covariates can represent (on the default
  grid test concordance fell from 0.89 to 0.61 and ICI rose tenfold). `drop` leaves them out
  (survival given a correct benign prediction).
- `nonpositive_durations`: a per-sample time <= 0 means the batch ran below the clock's
  resolution. `half_min` (default) sets it to half the smallest positive duration of the
  table; `drop` removes those rows. Either is logged with a count.

Covariates per cell: the configured numeric ones (epochs, depth, t_train, t_predict, acc_ben,
attack and defence strength min-max scaled within their family) and one-hot dummies for attack
family, defence and data set, each without its reference level. Constant and perfectly
collinear columns are dropped with a logged note.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import pandas as pd

from trashfire.errors import DataError

log = logging.getLogger("trashfire.survival_data")

ID_COLUMNS = ["attack_hash", "duration", "event", "weight"]
NUMERIC_COVARIATES = ("epochs", "depth", "lr", "n_train", "t_train", "t_predict", "acc_ben", "attack_strength", "defence_strength")
DEFAULT_COVARIATES = ("epochs", "depth", "t_train", "t_predict", "acc_ben", "attack_strength", "defence_strength")
DUMMY_SOURCES = {"attack": "attack_family", "defence": "defence", "data": "dataset"}
REFERENCE_LEVELS = {"defence": "none"}
BEFORE_ATTACK_POLICIES = ("predict_time", "attack_time", "drop")
NONPOSITIVE_POLICIES = ("half_min", "drop")


def outcome_counts(y_true: np.ndarray, y_pred_ben: np.ndarray, y_pred_adv: np.ndarray) -> dict[str, int]:
    """Per attack cell: samples wrong before the attack, broken by it, and survivors."""
    right_before = y_pred_ben == y_true
    return {
        "n_misclassified_before": int((~right_before).sum()),
        "n_broken": int((right_before & (y_pred_adv != y_true)).sum()),
        "n_survived": int((right_before & (y_pred_adv == y_true)).sum()),
    }


def survival_table(
    experiments: pd.DataFrame,
    covariates: Sequence[str] = DEFAULT_COVARIATES,
    dummies: Sequence[str] = tuple(DUMMY_SOURCES),
    misclassified_before_attack: str = "attack_time",
    nonpositive_durations: str = "half_min",
) -> pd.DataFrame:
    """The weighted survival rows of `experiments` (one row per attack cell, with the counts
    of `outcome_counts`), their covariates joined on."""
    cells = with_strengths(experiments)
    design = drop_degenerate(pd.concat([cells[list(covariates)].astype(float), dummy_columns(cells, dummies)], axis=1))
    rows = outcome_rows(cells, misclassified_before_attack)
    rows = fix_nonpositive(rows, nonpositive_durations)
    rows = rows.join(design, on="cell")
    rows = rows[rows["weight"] > 0].drop(columns="cell")
    return rows.sort_values(["attack_hash", "event", "duration"]).reset_index(drop=True)


def with_strengths(experiments: pd.DataFrame) -> pd.DataFrame:
    cells = experiments.reset_index(drop=True).copy()
    cells["attack_family"] = cells["attack"] + "_" + cells["norm"].astype(str)
    cells["attack_strength"] = minmax_within(cells["attack_value"].astype(float), cells["attack_family"])
    cells["defence_strength"] = minmax_within(cells["defence_value"].astype(float), cells["defence"])
    return cells


def outcome_rows(cells: pd.DataFrame, misclassified_before_attack: str) -> pd.DataFrame:
    """Up to three weighted rows per cell (see the module's table); `cell` indexes `cells`."""
    if misclassified_before_attack not in BEFORE_ATTACK_POLICIES:
        raise ValueError(f"misclassified_before_attack must be one of {BEFORE_ATTACK_POLICIES}")
    base = pd.DataFrame({"cell": cells.index, "attack_hash": cells["attack_hash"]})
    before = cells["n_misclassified_before"]
    broken = cells["n_broken"] + (before if misclassified_before_attack == "attack_time" else 0)
    parts = [
        base.assign(duration=cells["t_attack"], event=1, weight=broken),
        base.assign(duration=cells["t_attack"], event=0, weight=cells["n_survived"]),
    ]
    if misclassified_before_attack == "predict_time":
        parts.append(base.assign(duration=cells["t_predict"], event=1, weight=before))
    rows = pd.concat(parts, ignore_index=True)
    return rows.astype({"duration": float, "event": int, "weight": int})


def fix_nonpositive(rows: pd.DataFrame, policy: str) -> pd.DataFrame:
    bad = (rows["duration"] <= 0) & (rows["weight"] > 0)
    if not bad.any():
        return rows
    positive = rows.loc[rows["duration"] > 0, "duration"]
    if policy == "drop" or positive.empty:
        log.warning("survival data: dropping %d rows (%d samples) timed at <= 0 s, below the clock's resolution", bad.sum(), rows.loc[bad, "weight"].sum())
        return rows[~bad]
    floor = positive.min() / 2
    log.warning("survival data: %d rows (%d samples) timed at <= 0 s (below the clock's resolution) set to %.3g s, half the smallest measured duration", bad.sum(), rows.loc[bad, "weight"].sum(), floor)
    return rows.assign(duration=rows["duration"].where(~bad, floor))


def minmax_within(values: pd.Series, family: pd.Series) -> pd.Series:
    """Min-max scale within each family; a family with one value scales to 0."""
    low = values.groupby(family).transform("min")
    span = values.groupby(family).transform("max") - low
    return ((values - low) / span.where(span > 0)).fillna(0.0)


def dummy_columns(cells: pd.DataFrame, kinds: Sequence[str] = tuple(DUMMY_SOURCES)) -> pd.DataFrame:
    """One-hot attack family, defence and data set; each drops its reference level."""
    parts, references = [], []
    for kind in kinds:
        source = DUMMY_SOURCES[kind]
        levels = sorted(cells[source].unique())
        reference = REFERENCE_LEVELS.get(kind, levels[0])
        reference = reference if reference in levels else levels[0]
        references.append(f"{kind} {reference}")
        for level in levels:
            if level != reference:
                parts.append((cells[source] == level).astype(float).rename(f"{kind}_{level}"))
    log.info("survival data: dummies are read against the reference levels %s", ", ".join(references))
    return pd.concat(parts, axis=1) if parts else pd.DataFrame(index=cells.index)


def drop_degenerate(covariates: pd.DataFrame, weights: np.ndarray | None = None, where: str = "survival data") -> pd.DataFrame:
    """Drop constant columns, then each column that adds no rank beside an intercept and the
    columns kept before it (perfect collinearity), with a logged note. Rows with zero weight
    do not count."""
    if weights is not None:
        covariates = covariates[np.asarray(weights) > 0]
    kept: list[str] = []
    basis = np.ones((len(covariates), 1))
    for column in covariates.columns:
        values = covariates[column].to_numpy(dtype=float)
        if len(values) == 0 or np.ptp(values) == 0:
            log.info("%s: dropping covariate %s: it takes one value", where, column)
            continue
        scaled = (values - values.mean()) / values.std()
        candidate = np.column_stack([basis, scaled])
        if np.linalg.matrix_rank(candidate, tol=1e-8 * len(values)) < candidate.shape[1]:
            log.info("%s: dropping covariate %s: collinear with %s", where, column, ", ".join(["intercept", *kept]))
            continue
        basis, kept = candidate, kept + [column]
    return covariates[kept]


def diagnose(data: pd.DataFrame, source: str = "survival data") -> None:
    """Raise DataError naming what makes `data` unfit to fit a survival model."""
    missing = [c for c in ID_COLUMNS if c not in data]
    if missing:
        raise DataError(f"{source}: columns {missing} missing; rerun the timing stage")
    samples = int(data["weight"].sum())
    if samples == 0:
        raise DataError(f"{source}: no attacked samples; the attack grid produced nothing to fit")
    if not np.all(np.isfinite(data["duration"])) or (data["duration"] <= 0).any():
        raise DataError(f"{source}: durations must be finite and > 0 (lifelines' requirement); rebuild it with the timing stage")
    events = int(data.loc[data["event"] == 1, "weight"].sum())
    if events == 0:
        raise DataError(
            f"{source}: all {samples} attacked samples survived (no failure event, all censored); "
            "a survival model needs failures: strengthen the attacks or add attack families"
        )
