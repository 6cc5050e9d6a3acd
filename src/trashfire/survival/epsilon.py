"""Survival in eps: how large a perturbation each sample withstands, per model cell and attack
family, as a Kaplan-Meier curve "share of samples still standing against eps" and the area
under it up to eps_max, normalised by eps_max (1: nobody breaks within eps_max).

A sample's "time" is the smallest perturbation that broke it (`trashfire.tables.eps_samples`:
a search over an eps grid's cells, or a minimal-perturbation attack's norm).

The grid is coarse, and the true threshold of a sample broken first at eps_k lies somewhere in
(eps_{k-1}, eps_k]: interval-censored. Every sample of a model cell shares one grid, so the
nonparametric MLE for these intervals (lifelines' `fit_interval_censoring`, with the intervals
half-open) equals, at the grid points, the right-censored Kaplan-Meier estimate with each
event at its grid point eps_k, and between grid points it is not identified (tests hold the
equality). We fit that Kaplan-Meier estimate, and bound the area by where the mass could sit:
`area_hi` with each failure at eps_k (the KM step function itself), `area_lo` with each
failure just above eps_{k-1}; `area` is their midpoint, which is the trapezoid rule over the
grid, the rule EVP and R apply to accuracy over the same grid. For a minimal attack the times
are exact: the bounds coincide. The median eps is the KM median (on a grid: the first grid
point at which half the samples are broken; NaN when more than half survive eps_max).

The per-sample table (`reports/eps_survival_data.parquet`) is written by `timing`
(`trashfire.tables.eps_samples`), which reads every cell's outcome arrays anyway; the curves,
areas and their rank correlation with EVP and R here, by `aggregate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.core.groups import group_order, split
from trashfire.core.stats import spearman
from trashfire.tables.eps_samples import ENSEMBLE, GRID, MINIMAL  # noqa: F401  (the search labels, also this module's API)

# ---------------------------------------------------------------------------------------------
# Kaplan-Meier curves and their areas


@dataclass(frozen=True)
class KaplanMeier:
    """The Kaplan-Meier estimate of P(a sample withstands eps), as lifelines' KaplanMeierFitter
    holds it: `event_table` (removed, observed, censored, entrance, at_risk by event_at, 0
    first) and `survival_function_` (KM_estimate by timeline). Computed here in numpy with
    lifelines' arithmetic (S = exp(cumsum(log(1 - d/n)))): a lifelines fit costs 23 ms, and the
    aggregate stage fits about 600 of them (each model cell's families and ensembles); the tests
    hold both tables equal to lifelines' on data with ties, zeros and censoring."""

    event_table: pd.DataFrame
    survival_function_: pd.DataFrame


def km_arrays(eps: Sequence[float], event: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The Kaplan-Meier estimate as arrays, per time of its timeline (0 first): the time, the
    samples removed there, the deaths, those at risk, and the estimate."""
    durations, observed = np.asarray(eps, dtype=float), np.asarray(event, dtype=int).astype(bool)
    times, index = np.unique(durations, return_inverse=True)
    removed = np.bincount(index, minlength=len(times))
    deaths = np.bincount(index, weights=observed, minlength=len(times)).astype(int)
    if not len(times) or times[0] > 0:  # lifelines' timeline starts at 0
        times, removed, deaths = np.concatenate([[0.0], times]), np.concatenate([[0], removed]), np.concatenate([[0], deaths])
    at_risk = len(durations) - np.concatenate([[0], np.cumsum(removed)[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.exp(np.cumsum(np.log(1 - deaths / at_risk)))
    return times, removed, deaths, at_risk, estimate


def kaplan_meier(eps: Sequence[float], event: Sequence[int]) -> KaplanMeier:
    times, removed, deaths, at_risk, estimate = km_arrays(eps, event)
    entrance = np.zeros(len(times), dtype=int)
    entrance[0] = len(np.asarray(eps))
    table = pd.DataFrame(
        {"removed": removed, "observed": deaths, "censored": removed - deaths, "entrance": entrance, "at_risk": at_risk}, index=pd.Index(times, name="event_at")
    )
    return KaplanMeier(table, pd.DataFrame({"KM_estimate": estimate}, index=pd.Index(times, name="timeline")))


def step_values(fitter, eps: np.ndarray) -> np.ndarray:
    """The Kaplan-Meier step function (right-continuous) at `eps`, read off the fitted table."""
    curve = fitter.survival_function_.iloc[:, 0]
    return _step_at(curve.index.to_numpy(float), curve.to_numpy(float), eps)


def _step_at(times: np.ndarray, estimate: np.ndarray, eps: np.ndarray) -> np.ndarray:
    at = np.searchsorted(times, eps, side="right") - 1
    return estimate[np.clip(at, 0, None)]


def survival_summary(fitter, eps_max: float, grid: Sequence[float] | None = None) -> dict:
    """n, events, failures at 0, the normalised area over [0, eps_max] with its bounds, and
    the median eps (NaN when the curve stays above 1/2 within eps_max) of one fitted cell.
    With a `grid` (every event at a grid point, censoring at eps_max), area_hi is the step
    function's area (each threshold at its grid point), area_lo puts each threshold just above
    the grid point below, and area is their midpoint, the trapezoid rule; without, the times
    are exact and the three agree. area_hi is lifelines' restricted mean over eps_max (tested)."""
    table = fitter.event_table
    curve = fitter.survival_function_.iloc[:, 0]
    counts = {"n": int(table["at_risk"].iloc[0]), "events": int(table["observed"].sum()), "events_at_zero": int(table["observed"].get(0.0, 0))}
    return counts | _areas(curve.index.to_numpy(float), curve.to_numpy(float), eps_max, grid)


def _areas(times: np.ndarray, estimate: np.ndarray, eps_max: float, grid: Sequence[float] | None) -> dict:
    """survival_summary's eps_max, areas and median from the estimate's arrays."""
    knots = np.unique(np.concatenate([[0.0], np.asarray(grid if grid is not None else times, dtype=float), [eps_max]]))
    knots = knots[(knots >= 0) & (knots <= eps_max)]
    values, widths = _step_at(times, estimate, knots), np.diff(knots)
    hi = float(np.sum(values[:-1] * widths)) / eps_max
    lo = float(np.sum(values[1:] * widths)) / eps_max if grid is not None else hi
    # lifelines' median is the first step with S <= 1/2; S is exp(cumsum(log)), whose last bits
    # are the CPU's exp and log: where exactly half the samples have broken, rounding chose
    # that step or the next (issue 58), so 1/2 is reached to 1e-12
    reached = times[estimate <= 0.5 + 1e-12]
    median = float(reached[0]) if len(reached) else np.inf
    return {
        "eps_max": eps_max,
        "area": (lo + hi) / 2,
        "area_lo": lo,
        "area_hi": hi,
        "median_eps": median if np.isfinite(median) and median <= eps_max else np.nan,
    }


def curve_points(fitter, eps_max: float, grid: Sequence[float] | None = None) -> pd.DataFrame:
    """The curve at eps = 0, the grid's eps (or every time the estimate steps at) and eps_max."""
    curve = fitter.survival_function_.iloc[:, 0]
    points, survival = _points(curve.index.to_numpy(float), curve.to_numpy(float), eps_max, grid)
    return pd.DataFrame({"eps": points, "survival": survival})


def _points(times: np.ndarray, estimate: np.ndarray, eps_max: float, grid: Sequence[float] | None) -> tuple[np.ndarray, np.ndarray]:
    shown = np.asarray(grid if grid is not None else times, dtype=float)
    points = np.unique(np.concatenate([[0.0], shown[(shown >= 0) & (shown <= eps_max)], [eps_max]]))
    return points, _step_at(times, estimate, points)


CELL_KEYS = ["model_hash", "attack", "norm"]  # a model cell's family in eps_survival_data.csv


def survival_tables(data: pd.DataFrame, experiments: pd.DataFrame, degenerate: pd.Series | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """eps_survival.csv (per model cell and family: its labels, units, n, events, eps_max, the
    area with its bounds, the median eps, nonmonotone samples, degenerate) and
    eps_survival_curves.csv (its Kaplan-Meier curve's points) from eps_survival_data.parquet.
    A grid family's curve points are the grid's eps (the estimate is not identified between
    them); a minimal family's every step. The estimates are fitted on each group's arrays
    (one pass over the sorted table), the tables built once at the end."""
    if data.empty:
        return pd.DataFrame(columns=schema.EPS_SURVIVAL), pd.DataFrame(columns=schema.EPS_SURVIVAL_CURVES)
    degenerate = degenerate if degenerate is not None else pd.Series(dtype=bool)
    order, starts = group_order(data, CELL_KEYS, dropna=True)
    heads = data.iloc[order[starts]].reset_index(drop=True)
    eps, lower, event = (split(data[c].to_numpy(), order, starts) for c in ("eps", "eps_lower", "event"))
    grids = family_grids(experiments)
    summaries, points = [], []
    for i, (model_hash, attack, norm, search, eps_max) in enumerate(zip(*(heads[c] for c in [*CELL_KEYS, "search", "eps_max"]))):
        summary, curve = _fit_family(eps[i], lower[i], event[i], float(eps_max), search, grids.get((model_hash, attack, norm)) if search == GRID else None)
        summaries.append(summary)
        points.append(curve)
    labels = experiments.drop_duplicates("model_hash").set_index("model_hash")[schema.MODEL_LABELS]
    keys = pd.concat(
        [heads[["model_hash"]], labels.loc[heads["model_hash"]].reset_index(drop=True), heads[["attack", "norm", "attack_family", "search", "units"]]], axis=1
    )
    nonmonotone = np.add.reduceat(data["nonmonotone"].astype(bool).to_numpy()[order].astype(int), starts)
    flagged = [bool(degenerate.get(h, False)) for h in heads["model_hash"]]
    table = pd.concat([keys, pd.DataFrame(summaries)], axis=1).assign(n_nonmonotone=nonmonotone, degenerate=flagged)
    sizes = [len(p) for p, _ in points]
    curves = keys.loc[np.repeat(np.arange(len(keys)), sizes)].reset_index(drop=True)
    curves = curves.assign(eps=np.concatenate([p for p, _ in points]), survival=np.concatenate([s for _, s in points]))
    return table[schema.EPS_SURVIVAL], curves[schema.EPS_SURVIVAL_CURVES]


def _fit_family(eps, lower, event, eps_max: float, search: str, grid) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """One model cell and family's summary (survival_summary's) and curve points."""
    times, _, deaths, at_risk, estimate = km_arrays(eps, event)
    at_zero = deaths[times == 0.0]
    summary = {"n": int(at_risk[0]), "events": int(deaths.sum()), "events_at_zero": int(at_zero[0]) if len(at_zero) else 0}
    summary |= _areas(times, estimate, eps_max, grid)
    if search == ENSEMBLE:  # intervals: the lower bound puts each failure at its interval's lower end
        low_times, *_, low_estimate = km_arrays(lower, event)
        low = _areas(low_times, low_estimate, eps_max, None)["area_hi"]
        summary |= {"area_lo": low, "area": (low + summary["area_hi"]) / 2}
    return summary, _points(times, estimate, eps_max, grid)


def family_grids(experiments: pd.DataFrame) -> dict[tuple, list[float]]:
    """Each (model_hash, attack, norm)'s attack values, distinct and sorted."""
    cells = experiments[["model_hash", "attack", "norm", "attack_value"]].assign(norm=experiments["norm"].astype(str))
    order, starts = group_order(cells, CELL_KEYS, dropna=True)
    heads = cells.iloc[order[starts]]
    values = split(cells["attack_value"].to_numpy(), order, starts)
    return {key: sorted(set(v)) for key, v in zip(zip(*(heads[c] for c in CELL_KEYS)), values)}


# ---------------------------------------------------------------------------------------------
# Against EVP and R


RANKED = {"evp": "EVP", "auc_R": "R"}  # robustness.csv's columns the area is ranked against


def spearman_against(eps_survival: pd.DataFrame | None, robustness: pd.DataFrame | None) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Per data set and attack family with EVP and R (robustness.csv: the eps families),
    Spearman's rank correlation over model cells of the eps-survival area with each of them:
    the same cells, degenerate ones left out (their EVP and R are NaN), as are cells without a
    finite value. {dataset: {family: {"evp": {rho, p, n}, "auc_R": {...}}}}; rho is NaN below 3
    cells or on constant input."""
    if eps_survival is None or robustness is None or eps_survival.empty or robustness.empty:
        return {}
    both = against(eps_survival, robustness)
    result: dict = {}
    for (dataset, family), group in both.groupby(["dataset", "attack_family"], sort=True):
        result.setdefault(str(dataset), {})[str(family)] = {column: _spearman(group["area"], group[column]) for column in RANKED}
    return result


def against(eps_survival: pd.DataFrame, robustness: pd.DataFrame) -> pd.DataFrame:
    """The sound model cells' areas beside their EVP and R (robustness.csv), per family."""
    sound = eps_survival[~eps_survival["degenerate"].astype(bool)]
    return sound.merge(robustness[["model_hash", "attack_family", *RANKED]], on=["model_hash", "attack_family"], how="inner")


def _spearman(x: pd.Series, y: pd.Series) -> dict[str, float]:
    keep = np.isfinite(x.to_numpy(float)) & np.isfinite(y.to_numpy(float))
    rho, p = spearman(x[keep], y[keep])
    return {"rho": rho, "p": p, "n": int(keep.sum())}
