"""How strong each attack is, against the best any attack found (docs/attacks.md).

From attack_distances.parquet (trashfire.tables.distances: each sample's smallest successful eps
per attack family, pixel units):
- **the ensemble**, per model cell and norm: each sample's minimal eps over every attack of
  the norm that attacked it (0 when wrong at the first query; inf when none broke it, then
  censored at the farthest any search reached). Where the smallest comes from a grid attack the
  sample's threshold is only known to lie in (eps_lower, eps] (interval-censored); where a
  minimal or example-returning attack found it, it is exact.
- **optimality** (AttackBench: Cinà, Rony, Pintor et al., AAAI 2025, its `analysis/plot.py`),
  per model cell, norm and attack, on the samples that attack attacked: with d* the ensemble's
  eps per sample, M the largest finite d*, and rho(eps) a robust-accuracy curve (the share of
  samples whose eps exceeds it),
      optimality = 1 - (area(rho_attack) - area(rho*)) / (clean_acc * M - area(rho*)),
  areas over [0, M]. 1: the attack found the ensemble's best on every sample; 0: it broke
  nothing below M. The areas of the step curves are exact (the mean of min(d, M) over the
  samples); AttackBench integrates the curve's points with the trapezoid rule. A grid
  attack's distance is its grid eps, so its optimality includes the grid's resolution.
- **the grid check**: at each eps of each grid family, the robust accuracy read from the
  ensemble's per-sample eps against the cell's own (experiments' acc_adv). They differ by
  exactly the samples the cell left standing that another attack broke at that eps or below
  (`n_below`); a sample the cell broke that the ensemble calls robust (`n_above`) would be a
  bug, and the tests hold it at 0.
- **the ensemble's curves**: robust accuracy against eps from the per-sample values, on the
  norm's grid and `points` evenly spaced eps up to its largest, as curves.csv rows of the
  pseudo-attack `ensemble` (R and EVP follow from them as from any curve); an interval-censored
  sample's failure is spread evenly over its interval, as the trapezoid rule reads a grid
  family's curve, so the ensemble's R is at most each family's (`standing_share`).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.core.groups import group_order, split
from trashfire.core.schema import norm_label

ENSEMBLE = schema.ENSEMBLE
OPTIMALITY = ["model_hash", "dataset", "norm", "attack", "attack_family", "n", "optimality", "area", "best_area", "clean_acc", "eps_max", "note"]
RANKING = ["dataset", "norm", "attack_family", "n_cells", "optimality_mean", "optimality_min", "optimality_max", "rank"]


def optimality(attack_eps: np.ndarray, best_eps: np.ndarray) -> tuple[float, float, float, float, float]:
    """AttackBench's optimality of one attack on its samples: (optimality, its area, the
    ensemble's, clean accuracy, M); NaN where the ensemble broke none of them."""
    finite = best_eps[np.isfinite(best_eps)]
    if not len(finite) or finite.max() <= 0:
        return np.nan, np.nan, np.nan, float(np.mean(best_eps > 0)), np.nan
    m = float(finite.max())
    clean = float(np.mean(best_eps > 0))
    best_area = float(np.mean(np.minimum(best_eps, m)))
    area = float(np.mean(np.minimum(attack_eps, m)))
    room = clean * m - best_area
    value = 1.0 if room <= 0 else 1 - (area - best_area) / room
    return float(np.clip(value, 0.0, 1.0)), area, best_area, clean, m


def optimality_table(distances: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per model cell, norm and attack family (of a norm with two or more families). One pass
    over the sorted tables: each family's samples and its cell's ensemble as arrays, the
    ensemble's eps looked up by position (no frame per family)."""
    ensemble_eps = _by_cell(best)
    order, starts = group_order(distances, ["model_hash", "norm", "attack_family"], dropna=True)
    heads = distances.iloc[order[starts]]
    keys = list(zip(heads["model_hash"], heads["norm"]))
    families = Counter(keys)  # the families of each model cell and norm
    positions, eps = split(distances["position"].to_numpy(), order, starts), split(distances["eps"].to_numpy(float), order, starts)
    rows = []
    for i, (key, family, dataset, attack) in enumerate(zip(keys, heads["attack_family"], heads["dataset"], heads["attack"])):
        if families[key] < 2:
            continue
        cell_positions, cell_eps = ensemble_eps[key]
        found = cell_positions.get_indexer(positions[i])
        d_star = np.where(found >= 0, cell_eps[found], np.nan)
        attack_eps = eps[i]
        value, area, best_area, clean, m = optimality(attack_eps, d_star)
        note = "" if np.isfinite(value) else "the ensemble broke none of its samples: no optimality"
        if np.any((d_star == 0) & (attack_eps > 0)):  # a deterministic model's first query is every attack's
            note = "samples wrong at one attack's first query and not at this one's (a randomised model): optimality clipped to [0, 1]"
        rows.append(
            {"model_hash": key[0], "dataset": dataset, "norm": key[1], "attack": attack, "attack_family": family, "n": len(attack_eps)}
            | {"optimality": value, "area": area, "best_area": best_area, "clean_acc": clean, "eps_max": m, "note": note}
        )
    return pd.DataFrame(rows, columns=OPTIMALITY)


def _by_cell(best: pd.DataFrame) -> dict[tuple, tuple[pd.Index, np.ndarray]]:
    """The ensemble's samples per (model_hash, norm): their positions (an index to look them
    up in) and eps (trashfire.tables.distances.best_by_cell's, as arrays)."""
    order, starts = group_order(best, ["model_hash", "norm"], dropna=True)
    heads = best.iloc[order[starts]]
    positions, eps = split(best["position"].to_numpy(), order, starts), split(best["eps"].to_numpy(float), order, starts)
    return {key: (pd.Index(p), e) for key, p, e in zip(zip(heads["model_hash"], heads["norm"]), positions, eps)}


def ranking(table: pd.DataFrame) -> pd.DataFrame:
    """Per data set, norm and family: its optimality over the model cells (mean, min, max),
    ranked within the norm (1: closest to the ensemble's best)."""
    if table.empty:
        return pd.DataFrame(columns=RANKING)
    grouped = table.dropna(subset=["optimality"]).groupby(["dataset", "norm", "attack_family"])["optimality"]
    summary = grouped.agg(n_cells="count", optimality_mean="mean", optimality_min="min", optimality_max="max").reset_index()
    summary["rank"] = summary.groupby(["dataset", "norm"])["optimality_mean"].rank(ascending=False, method="min").astype(int)
    return summary.sort_values(["dataset", "norm", "rank"])[RANKING].reset_index(drop=True)


def standing_share(lower: np.ndarray, upper: np.ndarray, eps_values: np.ndarray) -> np.ndarray:
    """Robust accuracy at each eps from per-sample thresholds: an exact one (lower == upper)
    stands while eps is below it; an interval-censored one, (lower, upper] from a grid attack,
    falls linearly across its interval, its failure spread evenly over it. So at the grid's
    eps the share is exact, and between them the curve is the trapezoid rule's, as R and EVP
    read a grid family's curve: the ensemble's R is then at most each family's. A sample wrong
    at the first query (0) stands at no eps."""
    eps = np.asarray(eps_values, dtype=float)[:, None]
    exact = lower[None, :] >= upper[None, :]
    width = np.where(exact, 1.0, (upper - lower)[None, :])
    with np.errstate(invalid="ignore"):  # inf / inf for a sample nobody broke: it stands, below
        spread = np.clip((upper[None, :] - eps) / width, 0.0, 1.0)
    point = (upper[None, :] > eps * (1 + 1e-9)) & (upper[None, :] > 0)  # a grid eps rounds on its way to pixel units
    return np.where(exact, point, np.where(np.isfinite(upper)[None, :], spread, 1.0)).mean(axis=1)


def ensemble_curves(best: pd.DataFrame, curves: pd.DataFrame, points: int) -> pd.DataFrame:
    """curves.csv rows of the pseudo-attack `ensemble` per model cell and norm that has an eps
    grid and two or more attack families: robust accuracy from the per-sample eps at the grid's eps and `points` evenly spaced
    ones up to its largest (pixel units). Each cell's grid curves are found by one lookup (a
    filter of curves.csv per cell grows with the square of the cells)."""
    grid_curves = curves[curves["attack"] != schema.WORST_CASE]
    labels = grid_curves["norm"].map({norm: norm_label(norm) for norm in grid_curves["norm"].dropna().unique()})
    own_rows = grid_curves.groupby([grid_curves["model_hash"], labels], sort=False).indices
    eps_pixel = grid_curves["eps_pixel"].to_numpy(float)
    chosen = best[best["n_attacks"] >= 2]
    order, starts = group_order(chosen, ["model_hash", "norm"], dropna=True)
    heads = chosen.iloc[order[starts]]
    lower, upper = split(chosen["eps_lower"].to_numpy(float), order, starts), split(chosen["eps"].to_numpy(float), order, starts)
    templates, norms, grids, accs = [], [], [], []
    for i, key in enumerate(zip(heads["model_hash"], heads["norm"])):
        where = own_rows.get(key)
        if where is None:
            continue
        mine = eps_pixel[where]
        largest = np.nanmax(mine) if not np.isnan(mine).all() else np.nan  # pandas' max: NaN left out
        eps_values = np.unique(np.concatenate([mine, np.linspace(0, largest, points)]))
        templates.append(where[0]), norms.append(key[1]), grids.append(eps_values)
        accs.append(standing_share(lower[i], upper[i], eps_values))
    if not templates:
        return pd.DataFrame(columns=schema.CURVES)
    sizes = [len(e) for e in grids]
    table = grid_curves.iloc[np.repeat(templates, sizes)].reset_index(drop=True)
    eps_values, acc = np.concatenate(grids), np.concatenate(accs)
    starting = np.repeat([a[0] for a in accs], sizes)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc_norm = np.where(starting > 0, acc / starting, np.nan)
    families = np.repeat([schema.attack_family(ENSEMBLE, norm) for norm in norms], sizes)
    table = table.assign(
        eps=eps_values, eps_pixel=eps_values, acc=acc, eps_standardised=eps_values / table["pixel_std"].astype(float).to_numpy(), acc_norm=acc_norm
    )
    return table.assign(attack=ENSEMBLE, attack_family=families)[schema.CURVES]


def ensemble_at_grid(curves: pd.DataFrame) -> pd.DataFrame:
    """The ensemble's robust accuracy per model cell and norm at its grid attacks' eps (pixel
    units): the cards' table (model_hash, norm, eps_pixel, acc)."""
    mine = curves[curves["attack"] == ENSEMBLE]
    grid = curves[~curves["attack"].isin([ENSEMBLE, schema.WORST_CASE])]
    if mine.empty:
        return pd.DataFrame(columns=["model_hash", "norm", "eps_pixel", "acc"])
    points = grid.assign(norm=grid["norm"].map(norm_label))[["model_hash", "norm", "eps_pixel"]].round({"eps_pixel": 9}).drop_duplicates()
    table = mine.assign(norm=mine["norm"].map(norm_label)).round({"eps_pixel": 9})
    return table.merge(points, on=["model_hash", "norm", "eps_pixel"])[["model_hash", "norm", "eps_pixel", "acc"]]
