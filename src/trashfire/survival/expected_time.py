"""E[T] per attack cell and the Kaplan-Meier side of the survival stage: each cell's budget t*,
every AFT model's restricted mean to it, the model that feeds TRASH (`select`), the check of its
E[T] against the Kaplan-Meier restricted mean of the cell's samples, and the Kaplan-Meier
curves, the model's predicted curves and the log-rank tests of each defence against none."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
from lifelines import KaplanMeierFitter

from trashfire.core import schema
from trashfire.core.errors import DataError
from trashfire.survival import fitters as F
from trashfire.survival.km import grouped_km, logrank
from trashfire.survival.newton import ROW_BLOCK, in_row_blocks
from trashfire.survival.scoring import CELL, FAMILY, KM_COLUMNS, cell_means, table_columns
from trashfire.survival.spec import score

KM_WORST = 5  # cells listed as the worst of the Kaplan-Meier check
REFERENCE_DEFENCE = "none"
CURVE_POINTS = 120  # time points of the predicted survival curves drawn over Kaplan-Meier
CURVE_SAMPLES = 200_000  # rows a predicted curve averages per (attack family, defence) at most: the figure's line, not a score
CURVE_ROWS = (
    1 << 14
)  # samples predicted at once for those curves: (120 times, rows) arrays of 16 MB, under glibc's 32 MB mmap threshold (at 1 << 17, 126 MB each, page-faulted fresh per block)


logger = logging.getLogger(__name__)


def cell_budgets(data: pd.DataFrame) -> pd.Series:
    """t* per attack cell, its budget: the largest censoring time among its samples, or, where
    no sample of the cell was censored, the cell's largest duration."""
    longest = data.groupby(CELL)[F.DURATION].max()
    censored = data[data[F.EVENT] == 0].groupby(CELL)[F.DURATION].max()
    return censored.reindex(longest.index).fillna(longest)


def expected_times(fits: dict[str, F.Fit], data: pd.DataFrame, aft: list[str], budgets: pd.Series, known: dict[str, pd.Series] | None = None) -> pd.DataFrame:
    """E_T_<fitter> per attack cell from every fitted AFT model (`expected_time_of`; `known`:
    those already computed, by fitter)."""
    known = known or {}
    columns = {f"E_T_{name}": known[name] if name in known else expected_time_of(fits[name], data, budgets) for name in aft if name in fits}
    return pd.DataFrame(columns, index=budgets.index)


def expected_time_of(fit: F.Fit, data: pd.DataFrame, budgets: pd.Series) -> pd.Series:
    """One model's E[T] per attack cell: 003's restricted mean int_0^{t*} S(u | x) du with t*
    the cell's budget (`cell_budgets`: its largest censoring time, or its largest duration when
    none of its samples was censored), averaged over the cell's samples (their covariates,
    such as the margin, differ)."""
    t_star = data[CELL].map(budgets).to_numpy(float)
    return cell_means(data, in_row_blocks(lambda rows, until: F.restricted_mean(fit, rows, until), F.covariates_of(data), t_star))


def expected_time_table(times: pd.DataFrame, budgets: pd.Series, fit: F.Fit, data: pd.DataFrame) -> pd.DataFrame:
    """expected_times.csv: per attack cell E_T (the selected model's restricted mean, what TRASH
    uses), E_T_unrestricted (its mean E[T | x], over the cell's samples; inf or NaN where the
    model has none), t_star, the selected fitter and every AFT model's E_T_<fitter>."""
    unrestricted = cell_means(data, F.expected_time(fit, F.covariates_of(data))).reindex(times.index)
    leading = pd.DataFrame({"E_T": times[f"E_T_{fit.name}"], "E_T_unrestricted": unrestricted, "t_star": budgets.reindex(times.index), "fitter": fit.name})
    return pd.concat([leading, times], axis=1).rename_axis(CELL).reset_index()


def select(comparison: pd.DataFrame, times: pd.DataFrame, chosen: str | None, select_by: str) -> str:
    """The AFT model whose E[T] feeds TRASH: `chosen`, or the best by `select_by` among the
    fitted AFT models whose E[T] is finite for every cell; never a baseline, which has no E[T]."""
    finite = {c.removeprefix("E_T_"): bool(np.isfinite(times[c]).all() and (times[c] > 0).all()) for c in times}
    if chosen is not None:
        if chosen not in finite:
            raise DataError(f"survival.chosen = {chosen}: it did not fit (see aft_comparison.csv); choose another or set chosen: null")
        if not finite[chosen]:
            raise DataError(f"survival.chosen = {chosen}: its E[T] is infinite or undefined for some cells; choose another or set chosen: null")
        return chosen
    by = score(select_by)
    scored = comparison.assign(**{by.name: comparison.get(by.name, np.nan)})  # no AFT model fitted: no cross-validated column
    usable = scored[scored["fitter"].map(lambda name: finite.get(name, False))]
    candidates = usable.dropna(subset=[by.name])
    has_aic = "AIC" in usable and bool(usable["AIC"].notna().any())
    if candidates.empty and by.name != "AIC" and has_aic:
        # no fold scored any model (a grid too small to cross-validate): the training split's AIC, never the test split
        logger.warning("no fitted AFT model has a %s score (its folds could not be scored): selected by AIC on the training split", select_by)
        return select(comparison, times, None, "AIC")
    if candidates.empty:
        raise DataError(f"no fitted AFT model has a finite E[T] everywhere and a {select_by} score; see aft_comparison.csv, or name one in survival.chosen")
    best = candidates[by.name].idxmax() if by.higher_is_better else candidates[by.name].idxmin()
    return str(candidates.loc[best, "fitter"])


# --- E[T] against the Kaplan-Meier restricted mean -------------------------------------------


def km_restricted_means(data: pd.DataFrame, budgets: pd.Series) -> pd.Series:
    """Per attack cell, the Kaplan-Meier restricted mean of its samples to its budget t*
    (every cell's curve at once: trashfire.survival.km)."""
    return grouped_km(data[CELL], data[F.DURATION], data[F.EVENT], F.sample_weights(data)).restricted_mean(budgets)


def km_check_table(data: pd.DataFrame, expected: pd.Series, budgets: pd.Series, km: pd.Series, tolerance: float) -> pd.DataFrame:
    """km_check.csv: per attack cell, a model's E[T] (`expected`, by cell) against the
    Kaplan-Meier restricted mean of the cell's samples to the same t* (`km`); `flagged` where
    they differ by more than `tolerance` (|ratio - 1| > tolerance)."""
    weights = pd.Series(F.sample_weights(data).astype(float), index=data.index)
    labels = data.groupby(CELL, sort=True)[[c for c in (FAMILY, "defence", "dataset") if c in data]].first()
    counts = pd.DataFrame({"n": weights, "events": weights * data[F.EVENT]}).groupby(data[CELL], sort=True).sum()
    table = labels.join(counts.astype(int), how="outer").reindex(km.index)
    table["t_star"], table["E_T"], table["E_T_km"] = budgets.reindex(km.index), expected.reindex(km.index), km
    with np.errstate(divide="ignore", invalid="ignore"):
        table["ratio"] = table["E_T"] / table["E_T_km"]
        table["log_ratio"] = np.log(table["ratio"])
    table["flagged"] = ~((table["ratio"] - 1.0).abs() <= tolerance)  # a missing or infinite E[T] is flagged too
    return table.assign(tolerance=tolerance).rename_axis(CELL).reset_index().reindex(columns=schema.KM_CHECK)


def km_summary(check: pd.DataFrame) -> dict[str, Any]:
    """Table I's Kaplan-Meier check of one model: the median |log(E[T] / KM)| over cells, the
    share of cells flagged, and the KM_WORST cells furthest off as text."""
    worst = check.assign(off=check["log_ratio"].abs().fillna(np.inf)).sort_values("off", ascending=False, kind="stable").head(KM_WORST)
    return {
        "km_median_abs_log_ratio": float(check["log_ratio"].abs().median()),
        "km_share_flagged": float(check["flagged"].mean()),
        "km_worst_cells": "; ".join(f"{cell_label(row)} = {row['ratio']:.4g}" for _, row in worst.iterrows()),
    }


def cell_label(row: pd.Series) -> str:
    """An attack cell as the Kaplan-Meier check names it: its hash (family, defence, data set)."""
    labels = [str(row[c]) for c in (FAMILY, "defence", "dataset") if c in row and pd.notna(row[c])]
    return f"{row[CELL]} ({', '.join(labels)})" if labels else str(row[CELL])


def worst_cells(text: Any) -> dict[str, float]:
    """Table I's `km_worst_cells` back as {cell: E[T] / KM}."""
    if not isinstance(text, str) or not text:
        return {}
    return {cell: float(ratio) for cell, ratio in (entry.rsplit(" = ", 1) for entry in text.split("; "))}


def with_km_check(comparison: pd.DataFrame, times: pd.DataFrame, data: pd.DataFrame, budgets: pd.Series, km: pd.Series, tolerance: float) -> pd.DataFrame:
    """Table I with each AFT model's Kaplan-Meier check (km_summary; empty for Cox PH and the
    baselines)."""
    return with_km_summaries(comparison, km_summaries(times, data, budgets, km, tolerance))


def km_summaries(times: pd.DataFrame, data: pd.DataFrame, budgets: pd.Series, km: pd.Series, tolerance: float) -> dict[str, dict[str, Any]]:
    """Each AFT model's km_summary, by fitter, from its E[T] per cell (`times`' E_T_<fitter>)."""
    return {column.removeprefix("E_T_"): km_summary(km_check_table(data, times[column], budgets, km, tolerance)) for column in times}


def with_km_summaries(comparison: pd.DataFrame, summaries: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Table I with the Kaplan-Meier check's columns (`km_summaries`; empty for Cox PH and the baselines)."""
    table = comparison.copy()
    for column in KM_COLUMNS:
        table[column] = table["fitter"].map(lambda name: summaries.get(name, {}).get(column))  # noqa: B023 -- called at once
    return table.reindex(columns=table_columns(table.columns))


def km_sentences(check: pd.DataFrame, model: str) -> list[str]:
    """km_check.csv in words, for the log and the report: how far the model's E[T] is from
    Kaplan-Meier, how many cells are flagged, the worst, and what to do about them."""
    if check.empty:
        return []
    flagged = check["flagged"].astype(str).str.lower() == "true"
    summary = km_summary(check.assign(flagged=flagged))
    lines = [
        f"{model}'s E[T] is within {float(check['tolerance'].iloc[0]):.0%} of the Kaplan-Meier restricted mean to the same budget in "
        f"{int((~flagged).sum())} of {len(check)} attack cells (median |log(E[T] / KM)| {summary['km_median_abs_log_ratio']:.3g}; 0 is a perfect match)"
    ]
    if flagged.any():
        lines.append(f"{int(flagged.sum())} cell(s) flagged; the furthest off (E[T] / KM): {summary['km_worst_cells']}")
        lines.append(
            "the model misfits the flagged cells: compare its dashed curve with the Kaplan-Meier one (kaplan_meier.png), try another fitter "
            "(survival.chosen; Table I's km_ columns compare them), add covariates, or use E_T_km for those cells"
        )
    return lines


# --- Kaplan-Meier curves and log-rank tests --------------------------------------------------


def logrank_table(data: pd.DataFrame) -> pd.DataFrame:
    """Per attack family, each defence's samples against the undefended ones (the weighted
    log-rank test, lifelines' `logrank_test`: `km.logrank`); a family without undefended
    samples has no rows."""
    rows = []
    needed = [c for c in (F.DURATION, F.EVENT, F.WEIGHT, "attack_family", "defence") if c in data]  # the groups copy these alone, not every column
    for family, samples in data[needed].groupby("attack_family", sort=True):
        reference = samples[samples["defence"] == REFERENCE_DEFENCE]
        if reference.empty:
            continue
        for defence, group in samples[samples["defence"] != REFERENCE_DEFENCE].groupby("defence", sort=True):
            both = pd.concat([group, reference])
            statistic, p = logrank(both[F.DURATION], both[F.EVENT], F.sample_weights(both), np.arange(len(both)) < len(group))
            rows.append(
                {
                    "attack_family": family,
                    "defence": defence,
                    "reference": REFERENCE_DEFENCE,
                    **_counts(group),
                    **{f"{k}_reference": v for k, v in _counts(reference).items()},
                    "test_statistic": statistic,
                    "p": p,
                }
            )
    columns = ["attack_family", "defence", "reference", "n", "events", "n_reference", "events_reference", "test_statistic", "p"]
    return pd.DataFrame(rows, columns=columns)


def _counts(samples: pd.DataFrame) -> dict[str, int]:
    weights = F.sample_weights(samples)
    return {"n": int(weights.sum()), "events": int(weights[samples[F.EVENT].to_numpy() == 1].sum())}


def kaplan_meier_fits(data: pd.DataFrame) -> dict:
    """(attack family, defence) -> the Kaplan-Meier estimate of its samples (weighted), for the
    figure: lifelines' KaplanMeierFitter, or past ROW_BLOCK rows the same curve of every group at
    once (`km.grouped_km`; lifelines' fits held 3.5 GB at 10^7 samples) as a `km.Steps`."""
    if len(data) > ROW_BLOCK:
        by = data.groupby(["attack_family", "defence"], sort=True)
        keys = list(by.size().index)  # in the order of ngroup's numbers
        labels = {code: f"{defence} (Kaplan-Meier)" for code, (_, defence) in enumerate(keys)}
        codes = by.ngroup().to_numpy()
        grouped = codes >= 0  # a row without a family or defence is in no group, as groupby leaves it
        curves = grouped_km(codes[grouped], data[F.DURATION].to_numpy()[grouped], data[F.EVENT].to_numpy()[grouped], F.sample_weights(data)[grouped]).curves(
            labels
        )
        return {keys[code]: curve for code, curve in curves.items()}
    fits = {}
    for (family, defence), samples in data.groupby(["attack_family", "defence"], sort=True):
        label = f"{defence} (Kaplan-Meier)"
        fits[(family, defence)] = KaplanMeierFitter().fit(samples[F.DURATION], samples[F.EVENT], weights=F.sample_weights(samples), label=label)
    return fits


def curve_rows(rows: np.ndarray, cap: int | None = None, seed: int = 0) -> np.ndarray:
    """The rows whose predictions a curve averages: all of them, or past `cap`, `cap` of them
    drawn without replacement (seeded). The curve is then an estimate of the group's
    mean curve, within about 0.5 / sqrt(cap) of it, a thousandth, invisible in the figure (a ratio
    estimate where rows carry unequal weights: nearly unbiased at that size)."""
    cap = CURVE_SAMPLES if cap is None else cap
    if len(rows) <= cap:
        return rows
    return np.random.default_rng(seed).choice(rows, cap, replace=False)


def predicted_curves(fit: F.Fit, data: pd.DataFrame, points: int = CURVE_POINTS) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(attack family, defence) -> (times, the model's survival curve averaged over those
    samples), on a log-spaced grid over the family's durations. The samples are predicted
    CURVE_ROWS at a time: lifelines' prediction holds several (times, rows) arrays, 1 GB each
    for a family of 10^6 samples. A group past CURVE_SAMPLES rows is averaged over that many
    of them, drawn at random (`curve_rows`)."""
    curves = {}
    covariates = F.covariates_of(data)
    by_group = data.groupby(["attack_family", "defence"], sort=True, dropna=False).indices  # a row without a defence is drawn with its family's
    for family, positions in sorted(data.groupby("attack_family", sort=True).indices.items()):  # the family's rows, not a copy of them
        durations = data[F.DURATION].to_numpy(float)[positions]
        grid = np.geomspace(durations.min(), durations.max(), points) if durations.max() > durations.min() else durations[:1]
        positions = np.sort(np.concatenate([curve_rows(rows) for (of, _), rows in by_group.items() if of == family]))  # the rows predicted
        weights = F.sample_weights(data).astype(float)[positions]
        defences = data["defence"].to_numpy()[positions]
        sums = {defence: np.zeros(len(grid)) for defence in sorted(set(defences))}
        for start in range(0, len(positions), CURVE_ROWS):
            rows = slice(start, start + CURVE_ROWS)
            survival = fit.fitter.predict_survival_function(covariates.iloc[positions[rows]], times=grid).to_numpy()  # (times, rows)
            for defence in sums:
                mine = defences[rows] == defence
                sums[defence] = sums[defence] + survival[:, mine] @ weights[rows][mine]
        for defence, total in sums.items():
            curves[(family, defence)] = (grid, total / weights[defences == defence].sum())
    return curves
