"""Each sample's smallest successful perturbation per attack, and robust accuracy against the
attack's work (docs/attacks.md, "Minimal eps" and "Optimality").

`reports/attack_distances.parquet` (timing): one row per model cell, norm, attack family and
attacked sample: the smallest eps at which that attack broke it, in [0, 1] pixel units of the
norm (l0: pixels), as far as it can tell:
- a minimal-norm or minimal-perturbation attack (its option's `minimal: true`: FMN, DDN,
  DeepFool): the norm of its returned example where it broke the sample (`kind` exact);
- an eps-grid attack (`attack_param` eps: FGM, PGD, AutoAttack): the smallest grid eps whose
  cell broke it; the sample's own threshold lies in (`eps_lower`, `eps`], the grid eps below
  and that one (`kind` grid, interval-censored);
- any other attack (HopSkipJump, Threshold, Pixel: a budget, not an eps): the norm of its
  returned example where it broke the sample (`kind` exact).
A sample wrong at the first query has eps 0; one the attack never broke has eps inf and
`reach`, how far its search got (a grid's largest eps, a minimal attack's last point).

`reports/query_curves.csv` (timing): per model cell, norm, attack family and eps (the norm's
grid eps and `timing.query_eps`), robust accuracy against the attack's work in
passes (forward queries + input gradients, the per-sample clock): the share of its samples
not broken at that eps within that many passes, at every pass count where it steps. A
fixed-eps cell at that eps reads its samples' clocks; a minimal-norm attack reads the step at
which its smallest norm first fell to eps or below (`norm_by_step`: step i has cost i + 1
queries and i gradients); any other attack, the passes its search had spent when it ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire.core import schema
from trashfire.core.groups import groups, repeated_labels
from trashfire.core.records import write_csv, write_table
from trashfire.core.schema import Outcomes, norm_label
from trashfire.core.stage import Artefacts

EXACT, GRID = "exact", "grid"
DISTANCES = ["model_hash", "dataset", "norm", "attack", "attack_family", "kind", "position", "eps_lower", "eps", "event", "reach"]
ENSEMBLE_COLUMNS = ["model_hash", "dataset", "norm", "position", "eps_lower", "eps", "event", "reach", "kind", "best_by", "n_attacks"]
GRID_CHECK = ["model_hash", "dataset", "norm", "attack_family", "eps", "n", "acc_grid", "acc_minimal", "n_below", "n_above", "agrees"]
QUERY_CURVES = ["model_hash", "dataset", "norm", "attack", "attack_family", "eps", "passes", "acc", "n"]
NORM_ARRAYS = {"inf": "norm_linf", "2": "norm_l2", "1": "norm_l1", "0": "norm_l0"}


def _labels(experiments: pd.DataFrame) -> pd.DataFrame:
    cells = experiments[experiments["attack"] != schema.WORST_CASE]
    norms = cells["norm"].map(norm_label)
    return cells.assign(norm=norms, attack_family=schema.attack_family(cells["attack"], norms))


def to_pixel_units(values: np.ndarray, norm: str, units: str, pixel_std: float) -> np.ndarray:
    """A norm on `units`' scale in [0, 1] pixel units (l0 counts pixels: no scale)."""
    return values if norm == "0" else schema.to_pixel(values, units, pixel_std)


def distance_table(experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    """attack_distances.parquet from the experiments table and the cells' outcome arrays (built as
    columns, one frame at the end; a family's labels once, repeated there)."""
    columns: dict[str, list] = {name: [] for name in PER_SAMPLE}
    labels: dict[str, list] = {name: [] for name in PER_FAMILY}
    cells = _labels(experiments)
    values = cell_columns(cells)
    for rows in groups(cells, ["model_hash", "attack", "norm"], dropna=True):
        first = rows[0]
        norm = values["norm"][first]
        arrays = [Outcomes.of(outcomes_by_hash[h]) for h in values["attack_hash"][rows]]
        if values["attack_param"][first] == "eps":
            samples, units = grid_distances(values["attack_value"][rows].astype(float), arrays), str(values["attack_units"][first])
        else:
            samples, units = example_distances(arrays, norm), "standardised"
        for column in ("eps_lower", "eps", "reach"):
            samples[column] = to_pixel_units(samples[column], norm, units, float(values["pixel_std"][first]))
        for name in PER_SAMPLE:
            columns[name].append(samples[name])
        kind = samples["kind"][0] if len(samples["kind"]) else None  # a family without samples repeats its labels no time
        for name in PER_FAMILY:
            labels[name].append(kind if name == "kind" else values[name][first])
    if not columns["position"]:
        return pd.DataFrame(columns=DISTANCES)
    counts = [len(position) for position in columns["position"]]
    table = pd.DataFrame(
        {name: repeated_labels(labels[name], counts) if name in PER_FAMILY else np.concatenate(columns[name]) for name in DISTANCES}, copy=False
    )
    return table.astype({"position": int, "eps_lower": float, "eps": float, "event": int, "reach": float})


PER_FAMILY = ["model_hash", "dataset", "norm", "attack", "attack_family", "kind"]
PER_SAMPLE = [name for name in DISTANCES if name not in PER_FAMILY]


def cell_columns(cells: pd.DataFrame) -> dict[str, np.ndarray]:
    """An experiments table's columns as arrays, the optional ones (pixel_std, attack_units) filled
    as a row's `.get` reads them, for work per group on arrays instead of a frame per group."""
    defaults = {"pixel_std": np.nan, "attack_units": "standardised"}
    return {name: cells[name].to_numpy() for name in cells.columns} | {
        name: np.full(len(cells), default, dtype=object) for name, default in defaults.items() if name not in cells
    }


def grid_distances(eps: Sequence[float], cells: Sequence[Outcomes]) -> dict[str, np.ndarray]:
    """One grid family's cells (at `eps`): per sample of the positions they all attacked, the
    smallest grid eps that broke it and the grid eps below (0 when wrong at the first query)."""
    order = np.argsort(eps)
    grid, cells = np.asarray(eps, dtype=float)[order], [cells[i] for i in order]
    positions = _shared(cells)
    broken = np.stack([np.asarray(c.event, bool)[_rows(c, positions)] for c in cells])
    first = cells[0]
    at_zero = np.asarray(first.y_pred_ben)[_rows(first, positions)] != np.asarray(first.y_true)[_rows(first, positions)]
    event = at_zero | broken.any(0)
    index = broken.argmax(0)
    below = np.concatenate([[0.0], grid[:-1]])
    upper = np.where(at_zero, 0.0, np.where(event, grid[index], np.inf))
    lower = np.where(at_zero, 0.0, np.where(event, below[index], grid[-1]))
    return _samples(positions, GRID, lower, upper, event, np.full(len(positions), grid[-1]))


def example_distances(cells: Sequence[Outcomes], norm: str) -> dict[str, np.ndarray]:
    """A family whose strength is no eps: per sample, the smallest norm of a returned example
    that broke it over its cells (standardised; 0 when wrong at the first query), and the
    largest norm any cell reached where none did."""
    positions = _shared(cells)
    sizes, broken = [], []
    for cell in cells:
        rows = _rows(cell, positions)
        size = np.asarray(cell[NORM_ARRAYS[norm]], dtype=float)[rows]
        wrong_first = np.asarray(cell.y_pred_ben)[rows] != np.asarray(cell.y_true)[rows]
        sizes.append(np.where(wrong_first, 0.0, size))
        broken.append(np.asarray(cell.event, bool)[rows] | wrong_first)
    sizes, broken = np.stack(sizes), np.stack(broken)
    event = broken.any(0)
    found = np.where(broken, sizes, np.inf).min(0)
    return _samples(positions, EXACT, found, found, event, sizes.max(0))


def _samples(positions: np.ndarray, kind: str, eps_lower: np.ndarray, eps: np.ndarray, event: np.ndarray, reach: np.ndarray) -> dict[str, np.ndarray]:
    """One family's per-sample columns of attack_distances."""
    return {
        "position": positions,
        "kind": np.full(len(positions), kind, dtype=object),
        "eps_lower": eps_lower,
        "eps": eps,
        "event": event.astype(int),
        "reach": reach,
    }


def _shared(cells: Sequence[Outcomes]) -> np.ndarray:
    return np.sort(Outcomes.shared_positions(cells))


def _rows(cell: Outcomes, positions: np.ndarray) -> np.ndarray:
    return cell.rows_at(positions)


# --- the ensemble: each sample's smallest eps over every attack of a norm ---


def ensemble(distances: pd.DataFrame) -> pd.DataFrame:
    """Per model cell, norm and sample: the smallest eps over the attack families (exact before
    grid on a tie, then the first in the table), with that family's lower end, the farthest
    reach of any, and how many families the norm has (`n_attacks`: an ensemble of one is that
    attack, and the tables of survival in eps and the curves leave it out). Rows sorted by
    model cell, data set, norm and position, as groupby sorts them; a row with a missing label
    left out. Sorted on integer ranks of the labels: grouping 10^7 rows on their text in
    pandas took most of the distance tables' time."""
    if distances.empty:
        return pd.DataFrame(columns=ENSEMBLE_COLUMNS)
    (model, model_levels), (dataset, dataset_levels), (norm, norm_levels) = (_ranked(distances[key]) for key in ("model_hash", "dataset", "norm"))
    eps, position = distances["eps"].to_numpy(float), distances["position"].to_numpy(np.int64)
    kind, kind_levels = _ranked(distances["kind"])
    exact_last = (kind != np.searchsorted(kind_levels, EXACT) if EXACT in kind_levels else np.ones(len(kind), bool)).astype(np.int8)
    labelled = np.flatnonzero((model >= 0) & (dataset >= 0) & (norm >= 0))
    keys = (model, dataset, norm, position)
    order = _sorted_rows(keys, eps, exact_last, labelled)
    if not len(order):
        return pd.DataFrame(columns=ENSEMBLE_COLUMNS)
    starts = np.flatnonzero(np.concatenate([[True], np.any([key[order][1:] != key[order][:-1] for key in keys], axis=0)]))
    best_rows = order[starts]
    reach = distances["reach"].to_numpy(float)
    farthest = np.maximum(reach, np.where(np.isfinite(eps), eps, 0.0))[order]  # NaN where the reach is: fmax.reduceat skips it, as groupby's max
    family, family_levels = _ranked(distances["attack_family"])
    best = pd.DataFrame(
        {
            "model_hash": model_levels[model[best_rows]],
            "dataset": dataset_levels[dataset[best_rows]],
            "norm": norm_levels[norm[best_rows]],
            "position": position[best_rows],
            "eps_lower": distances["eps_lower"].to_numpy(float)[best_rows],
            "eps": eps[best_rows],
            "event": np.isfinite(eps[best_rows]).astype(int),
            "reach": np.fmax.reduceat(farthest, starts) if len(starts) else np.zeros(0),
            "kind": kind_levels[kind[best_rows]],
            "best_by": family_levels[family[best_rows]],
            "n_attacks": _families_per_norm(model, norm, family)[model[best_rows], norm[best_rows]],
        }
    )
    return best[ENSEMBLE_COLUMNS]


def _ranked(labels: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each row's rank among its column's labels in sorted order (-1: missing), and the labels
    in that order."""
    if isinstance(labels.dtype, pd.CategoricalDtype):
        codes, levels = labels.cat.codes.to_numpy(np.int64), labels.cat.categories.to_numpy(object)
    else:
        codes, levels = pd.factorize(labels.to_numpy(object))
        levels = np.asarray(levels, dtype=object)
    by_label = np.argsort(levels, kind="stable")
    rank = np.empty(len(levels), dtype=np.int64)
    rank[by_label] = np.arange(len(levels))
    return np.where(codes >= 0, rank[np.maximum(codes, 0)] if len(levels) else -1, -1), levels[by_label]


def _sorted_rows(keys: tuple[np.ndarray, ...], eps: np.ndarray, exact_last: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    """The labelled rows sorted by `keys`, then by eps (NaN last) and exact before grid, then
    by their place in the table (a stable sort)."""
    return labelled[np.lexsort((exact_last[labelled], eps[labelled], *(key[labelled] for key in reversed(keys))))]


def _families_per_norm(model: np.ndarray, norm: np.ndarray, family: np.ndarray) -> np.ndarray:
    """How many attack families each (model rank, norm rank) has: a table indexed by the two."""
    shape = (model.max(initial=-1) + 1, norm.max(initial=-1) + 1, family.max(initial=-1) + 1)
    known = (model >= 0) & (norm >= 0) & (family >= 0)
    present = np.unique(np.ravel_multi_index((model[known], norm[known], family[known]), shape))
    model_norm = np.unravel_index(present, shape)[:2]
    counts = np.zeros(shape[:2], dtype=int)
    np.add.at(counts, model_norm, 1)
    return counts


def best_by_cell(best: pd.DataFrame) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """The ensemble's (positions, eps) per (model_hash, norm), in the order of position."""
    found = {}
    model_hash, norm, position, eps = (best[name].to_numpy() for name in ("model_hash", "norm", "position", "eps"))
    for rows in groups(best, ["model_hash", "norm"], dropna=True):
        order = rows[np.argsort(position[rows], kind="stable")]
        found[model_hash[rows[0]], norm[rows[0]]] = position[order], eps[order].astype(float)
    return found


def eps_at(lookup: tuple[np.ndarray, np.ndarray], positions: np.ndarray) -> np.ndarray:
    """The ensemble's eps at `positions` (NaN where it has no row: a sample no attack of the norm attacked)."""
    known, eps = lookup
    where = np.minimum(np.searchsorted(known, positions), max(len(known) - 1, 0))
    return np.where(known[where] == positions, eps[where], np.nan) if len(known) else np.full(len(positions), np.nan)


def grid_check(experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes], best: pd.DataFrame) -> pd.DataFrame:
    """minimal_eps_check.csv: each grid cell's robust accuracy (its own per-sample verdicts)
    against the one the ensemble's per-sample eps give at its eps, on its samples: they differ
    by exactly `n_below`, the samples it left standing that some attack broke at that eps or
    below; `n_above` (it broke them, the ensemble calls them robust) must be 0."""
    cells = _labels(experiments)
    cells = cells[cells["attack_param"] == "eps"]
    lookup = best_by_cell(best)
    rows = []
    for eps_pixel, model_hash, dataset, norm, family, attack_hash in zip(
        _pixel_eps(cells), *(cells[name] for name in ("model_hash", "dataset", "norm", "attack_family", "attack_hash"))
    ):
        outcomes = Outcomes.of(outcomes_by_hash[attack_hash])
        positions = outcomes.positions()
        d_star = eps_at(lookup[model_hash, norm], positions)
        eps = float(eps_pixel)
        standing_cell = ~np.asarray(outcomes.event, bool)
        standing_best = d_star > eps * (1 + 1e-9)  # a grid eps rounds on its way to pixel units
        n = len(positions)
        below, above = int((standing_cell & ~standing_best).sum()), int((~standing_cell & standing_best).sum())
        acc_grid, acc_minimal = float(standing_cell.mean()), float(standing_best.mean())
        rows.append(
            {"model_hash": model_hash, "dataset": dataset, "norm": norm, "attack_family": family, "eps": eps, "n": n}
            | {"acc_grid": acc_grid, "acc_minimal": acc_minimal, "n_below": below, "n_above": above}
            | {"agrees": bool(above == 0 and below == round((acc_grid - acc_minimal) * n))}
        )
    return pd.DataFrame(rows, columns=GRID_CHECK)


# --- robust accuracy against the work spent ---


def query_curves(experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes], extra_eps: Mapping[str, Sequence[float]]) -> pd.DataFrame:
    """query_curves.csv: per model cell, norm, family and eps of the norm's grid (pixel units)
    and `extra_eps` (by norm label, pixel units), robust accuracy at each pass count it steps.
    Built as columns, one frame at the end: a frame per curve cost most of the timing stage."""
    cells = _labels(experiments)
    cells = cells.assign(eps_pixel=_pixel_eps(cells))
    grids: dict[tuple, set] = {}
    for key, eps in zip(zip(cells["model_hash"], cells["norm"]), cells["eps_pixel"].where(cells["attack_param"] == "eps")):
        grids.setdefault(key, set()).update([] if np.isnan(eps) else [eps])
    columns: dict[str, list] = {name: [] for name in QUERY_CURVES}  # a curve's labels and n once, repeated at the end
    lengths: list[int] = []
    values = cell_columns(cells)
    for rows in groups(cells, ["model_hash", "norm", "attack"], dropna=True):
        first = rows[0]
        model_hash, norm = values["model_hash"][first], values["norm"][first]
        read = _family_reader({name: column[rows] for name, column in values.items()}, outcomes_by_hash, norm)
        for eps in sorted(grids[model_hash, norm] | {float(e) for e in extra_eps.get(norm, [])}):
            curve = read(eps)
            if curve is None:
                continue
            passes, acc, n = curve
            labels = (model_hash, values["dataset"][first], norm, values["attack"][first], values["attack_family"][first], eps)
            for name, value in zip(QUERY_CURVES[:6], labels):
                columns[name].append(value)
            columns["passes"].append(passes)
            columns["acc"].append(acc)
            columns["n"].append(n)
            lengths.append(len(passes))
    if not columns["passes"]:
        return pd.DataFrame(columns=QUERY_CURVES)
    per_curve = {*QUERY_CURVES[:6], "n"}
    table = pd.DataFrame(
        {
            name: np.repeat(np.array(parts, dtype=object if name != "n" else None), lengths) if name in per_curve else np.concatenate(parts)
            for name, parts in columns.items()
        }
    )
    return table.astype({"eps": float, "passes": int, "acc": float, "n": int})[QUERY_CURVES]


def _pixel_eps(cells: pd.DataFrame) -> np.ndarray:
    if cells.empty:
        return np.zeros(0)
    units = cells["attack_units"] if "attack_units" in cells else "standardised"
    return schema.to_pixel(cells["attack_value"].astype(float), units, cells["pixel_std"]).round(12).to_numpy(float)


def _family_reader(family: Mapping[str, np.ndarray], outcomes_by_hash: Mapping[str, Outcomes], norm: str):
    """A function of eps (pixel units): one family's robust accuracy against passes there, or
    None where it says nothing (a fixed-eps family without a cell at that eps). `family`: its
    cells' columns (`cell_columns`)."""
    pixel_std = float(family["pixel_std"][0])
    if family["attack_param"][0] == "eps":
        cell_eps, hashes = family["eps_pixel"].astype(float), family["attack_hash"]

        def at_grid(eps: float):
            matches = np.flatnonzero(np.isclose(cell_eps, eps))
            if not len(matches):
                return None
            cell = Outcomes.of(outcomes_by_hash[hashes[matches[0]]])
            passes = np.asarray(cell.queries) + np.asarray(cell.gradients)
            return step_curve(np.where(np.asarray(cell.event, bool), passes, np.inf), _budget(cell))

        return at_grid
    # every cell of the family (its strengths) is a run of its own: the longest run's curve
    # (the last by strength, as sort_values orders them: quicksort, a missing strength last)
    strength = family["attack_value"].astype(float)
    known, missing = np.flatnonzero(~np.isnan(strength)), np.flatnonzero(np.isnan(strength))
    strongest = family["attack_hash"][np.concatenate([known[np.argsort(strength[known], kind="quicksort")], missing])[-1]]
    cell = Outcomes.of(outcomes_by_hash[strongest])
    wrong_first = np.asarray(cell.y_pred_ben) != np.asarray(cell.y_true)
    spent = np.asarray(cell.queries) + np.asarray(cell.gradients)

    def anywhere(eps: float):
        standardised = eps if norm == "0" else eps / pixel_std
        if cell.norm_by_step is not None:
            reached = np.asarray(cell.norm_by_step) <= standardised
            first_step = np.where(reached.any(1), reached.argmax(1), -1)
            return step_curve(np.where(first_step >= 0, 2 * first_step + 1, np.inf), 2 * reached.shape[1] - 1)
        size = np.where(wrong_first, 0.0, np.asarray(cell[NORM_ARRAYS[norm]], dtype=float))
        broken = (np.asarray(cell.event, bool) & (size <= standardised)) | wrong_first
        return step_curve(np.where(broken, np.where(wrong_first, 1, spent), np.inf), _budget(cell))

    return anywhere


def _budget(cell: Outcomes) -> int:
    return int((np.asarray(cell.queries) + np.asarray(cell.gradients)).max(initial=1))


def step_curve(passes_to_break: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Robust accuracy after p passes, at p = 0 and at every p where a sample breaks, and at
    the budget: (p, 1 - share(broken within p passes), n)."""
    n = len(passes_to_break)
    finite = np.sort(passes_to_break[np.isfinite(passes_to_break)])
    points = np.unique(np.concatenate([[0], finite, [max(budget, finite.max(initial=0))]]))
    broken = np.searchsorted(finite, points, side="right")
    return points.astype(int), (1 - broken / n) if n else np.full(len(points), np.nan), n


def write_distance_tables(cfg: DictConfig, artefacts: Artefacts, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> pd.DataFrame:
    """attack_distances.parquet and minimal_eps_check.csv; returns the ensemble (each sample's
    smallest eps per model cell and norm) for survival in eps. query_curves.csv is
    `write_query_curves`' (the timing stage makes it in the other process)."""
    distances = distance_table(experiments, outcomes_by_hash)
    best = ensemble(distances)
    write_table(distances, artefacts.output("attack_distances.parquet"))
    write_csv(grid_check(experiments, outcomes_by_hash, best), artefacts.output("minimal_eps_check.csv"))
    return best


def write_query_curves(cfg: DictConfig, artefacts: Artefacts, experiments: pd.DataFrame, outcomes_by_hash: Mapping[str, Outcomes]) -> None:
    """query_curves.csv, at the norms' grid eps and `timing.query_eps`."""
    query_eps = {str(norm): list(values) for norm, values in (cfg.timing.get("query_eps") or {}).items()}
    write_csv(query_curves(experiments, outcomes_by_hash, query_eps), artefacts.output("query_curves.csv"))
