"""Each sample's smallest successful perturbation, per model cell and attack family: the
per-sample table of survival in eps (`reports/eps_survival_data.parquet`), which the timing
stage writes from every cell's outcome arrays; `trashfire.survival.epsilon` fits its
Kaplan-Meier curves (aggregate).

- eps-grid attacks (FGM, PGD: `attack_param` eps): a per-sample search over the recorded
  cells of one model cell and family, matched by attack-subset `position`. The sample's time
  is the smallest grid eps whose cell broke it (event within that cell's budget); a sample
  wrong at the first query (the benign prediction of the smallest-eps cell) fails at 0; one
  no cell broke is censored at the grid's largest eps. Units: the attack's configured ones
  (`attack_units`).
- minimal-perturbation attacks (an attack option's `minimal: true`, DeepFool; experiments.csv's
  `minimal` column): the attack walks
  until the sample breaks, so the norm of its returned example (the family's norm, measured on
  the standardised scale the model sees) is the time of an event, and, for a sample it never
  broke, the censoring time (its search got that far without success). A sample wrong at the
  first query fails at 0. With several cells (strengths) in the family, the smallest
  successful norm over them counts. Converted to `minimal_units` (pixel by default: l2 over
  [0, 1] images, `schema.to_pixel`), never drawn beside the linf grid curves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.core.groups import groups
from trashfire.core.schema import Outcomes
from trashfire.tables.distances import cell_columns

log = logging.getLogger(__name__)

GRID, MINIMAL = "grid", "minimal"  # how a family's times were found: the `search` column
ENSEMBLE = "ensemble"  # each sample's smallest eps over every attack of a norm (exact or interval)


# ---------------------------------------------------------------------------------------------
# Each sample's smallest successful perturbation


def matched_positions(outcomes: Sequence[Outcomes]) -> np.ndarray:
    """The attack-subset positions every cell attacked (cells with another `samples` budget
    attack other subsets; a sample's search needs all of its cells)."""
    return Outcomes.shared_positions(outcomes)


def _rows(outcomes: Outcomes, positions: np.ndarray) -> np.ndarray:
    return outcomes.rows_at(positions)


def grid_search(eps: Sequence[float], outcomes: Sequence[Outcomes]) -> pd.DataFrame:
    """Per sample of one model cell and eps family (cells at `eps`, any order): position,
    eps_lower (the largest eps known not to break it), eps (the smallest grid eps that broke it;
    0 when wrong at the first query; the largest eps when none did), event, and nonmonotone
    (broken at some eps but standing at a larger one: the accuracy curve then overstates it)."""
    return pd.DataFrame(grid_columns(eps, outcomes))


def grid_columns(eps: Sequence[float], outcomes: Sequence[Outcomes]) -> dict[str, np.ndarray]:
    """grid_search's columns, as arrays."""
    order = np.argsort(eps)
    grid = np.asarray(eps, dtype=float)[order]
    cells = [Outcomes.of(outcomes[i]) for i in order]
    positions = matched_positions(cells)
    broken = np.stack([np.asarray(c.event, dtype=bool)[_rows(c, positions)] for c in cells])
    first_cell = cells[0]
    rows = _rows(first_cell, positions)
    at_zero = np.asarray(first_cell.y_pred_ben)[rows] != np.asarray(first_cell.y_true)[rows]
    event = at_zero | broken.any(axis=0)
    first = np.where(at_zero, 0, broken.argmax(axis=0))
    below = np.concatenate([[0.0], grid[:-1]])
    times = np.where(event, grid[first], grid[-1])
    lower = np.where(event, below[first], grid[-1])
    times, lower = np.where(at_zero, 0.0, times), np.where(at_zero, 0.0, lower)
    later = np.arange(len(grid))[:, None] >= first[None, :]
    nonmonotone = event & (later & ~broken).any(axis=0)
    return {"position": positions, "eps_lower": lower, "eps": times, "event": event.astype(int), "nonmonotone": nonmonotone}


def norm_array(norm: str) -> str:
    """The outcome array of a norm: 'inf' -> norm_linf, '2' -> norm_l2."""
    return f"norm_l{norm}"


def minimal_search(outcomes: Sequence[Outcomes], norm: str, scale: float = 1.0) -> pd.DataFrame:
    """Per sample of one model cell and minimal-perturbation family: the norm of the returned
    example times `scale` (a unit conversion), the smallest over the cells that broke it
    (event), else the largest the searches reached (censored); 0 when wrong at the first query."""
    return pd.DataFrame(minimal_columns(outcomes, norm, scale))


def minimal_columns(outcomes: Sequence[Outcomes], norm: str, scale: float = 1.0) -> dict[str, np.ndarray]:
    """minimal_search's columns, as arrays."""
    cells = [Outcomes.of(o) for o in outcomes]
    positions = matched_positions(cells)
    sizes, broken = [], []
    for cell in cells:
        rows = _rows(cell, positions)
        event = np.asarray(cell.event, dtype=bool)[rows]
        size = np.asarray(cell[norm_array(norm)], dtype=float)[rows] * scale
        before = event & (np.asarray(cell.failure_step)[rows] == 0)
        sizes.append(np.where(before, 0.0, size))  # the first query breaks it before any perturbation
        broken.append(event)
    sizes, broken = np.stack(sizes), np.stack(broken)
    event = broken.any(axis=0)
    times = np.where(event, np.where(broken, sizes, np.inf).min(axis=0), sizes.max(axis=0))
    return {"position": positions, "eps_lower": times, "eps": times, "event": event.astype(int), "nonmonotone": np.zeros(len(positions), dtype=bool)}


def sample_table(
    experiments: pd.DataFrame,
    outcomes_by_hash: Mapping[str, Outcomes],
    minimal_units: str = "pixel",
    minimal_eps_max: float | None = None,
) -> pd.DataFrame:
    """eps_survival_data.parquet: one row per sample of each model cell and family that has an
    eps grid (attack_param eps) or is a minimal-perturbation attack (experiments' `minimal`
    column, from the attack's option), with the family's eps_max: the grid's largest eps, or
    for a minimal family `minimal_eps_max`, else the largest time over the data set's model
    cells (one upper end for every cell, so that their areas compare)."""
    if experiments.empty:
        return pd.DataFrame(columns=schema.EPS_SURVIVAL_DATA)
    if "minimal" not in experiments:
        raise KeyError("the experiments table has no `minimal` column (an attack's property, added by timing's attack_properties)")
    cells = experiments.assign(
        norm=experiments["norm"].astype(str),
        attack_family=schema.attack_family(experiments["attack"], experiments["norm"]),
        minimal=experiments["minimal"].map(lambda value: str(value).lower() == "true"),
    )
    chosen = cells[(cells["attack_param"] == "eps") | cells["minimal"]]
    columns = cell_columns(chosen)
    parts, labels = [], []
    for rows in groups(chosen, ["model_hash", "attack", "norm"], dropna=True):
        first = rows[0]
        norm = columns["norm"][first]
        arrays = [outcomes_by_hash[h] for h in columns["attack_hash"][rows]]
        if columns["minimal"][first]:
            units, search = minimal_units, MINIMAL
            samples = minimal_columns(arrays, norm, schema.convert_eps(1.0, "standardised", units, float(columns["pixel_std"][first])))
            eps_max = np.nan if minimal_eps_max is None else float(minimal_eps_max)
        else:
            units, search = str(columns["attack_units"][first]), GRID
            samples = grid_columns(columns["attack_value"][rows].astype(float), arrays)
            eps_max = float(pd.Series(columns["attack_value"][rows]).max())
        parts.append(samples)
        labels.append(
            (columns["model_hash"][first], columns["dataset"][first], columns["attack"][first], norm, columns["attack_family"][first], search, units, eps_max)
        )
    if not parts:
        return pd.DataFrame(columns=schema.EPS_SURVIVAL_DATA)
    samples = pd.DataFrame({name: np.concatenate([part[name] for part in parts]) for name in parts[0]})
    table = with_group_labels(samples, labels, [len(part["position"]) for part in parts])
    unknown = table["eps"].isna()
    if unknown.any():
        log.warning("%d samples without a pixel std (older attack records) left out of the eps survival", int(unknown.sum()))
        table = table[~unknown]
    pooled = table.groupby(["dataset", "attack_family"])["eps"].transform("max")
    table["eps_max"] = table["eps_max"].fillna(pooled)
    return table[schema.EPS_SURVIVAL_DATA].reset_index(drop=True)


GROUP_LABELS = ["model_hash", "dataset", "attack", "norm", "attack_family", "search", "units", "eps_max"]


def with_group_labels(table: pd.DataFrame, labels: list[tuple], sizes: list[int]) -> pd.DataFrame:
    """`table` (groups' rows one after another, `sizes` each) with each group's `labels`
    (GROUP_LABELS) as columns: added once, not per group (a column added to a frame per group
    cost most of the timing stage at 10^4 cells)."""
    columns = list(zip(*labels))
    added = {name: np.repeat(np.array(values, dtype=float if name == "eps_max" else object), sizes) for name, values in zip(GROUP_LABELS, columns)}
    return table.assign(**added)


def ensemble_samples(best: pd.DataFrame, experiments: pd.DataFrame) -> pd.DataFrame:
    """eps_survival_data.parquet's rows of the ensemble (trashfire.tables.distances.ensemble), per
    model cell and norm of two or more attack families, in pixel units: the event at the smallest eps any attack broke the
    sample at, exact where a minimal (or example-returning) attack found it, in (eps_lower,
    eps] where a grid attack did; a sample no attack broke is censored at the farthest any
    search reached. eps_max: the largest grid eps of the norm (pixel units), else the largest
    time over the data set's model cells."""
    best = best[best["n_attacks"] >= 2]
    if best.empty:
        return pd.DataFrame(columns=schema.EPS_SURVIVAL_DATA)
    event = best["event"].astype(bool)
    table = best.assign(
        attack=schema.ENSEMBLE,
        attack_family=f"{schema.ENSEMBLE} l" + best["norm"].astype(str),
        search=ENSEMBLE,
        units="pixel",
        eps=best["eps"].where(event, best["reach"]),
        eps_lower=best["eps_lower"].where(event, best["reach"]),
        nonmonotone=False,
    )
    grid = experiments[experiments["attack_param"] == "eps"]
    largest = {}
    if not grid.empty:
        pixel = schema.to_pixel(grid["attack_value"].astype(float), grid.get("attack_units", "standardised"), grid["pixel_std"])
        norms = grid["norm"].map(schema.norm_label)
        largest = pixel.groupby([grid["dataset"], norms]).max().to_dict()
    pooled = table.groupby(["dataset", "norm"])["eps"].transform("max")
    table["eps_max"] = [largest.get((d, n), p) for d, n, p in zip(table["dataset"], table["norm"], pooled)]
    return table[schema.EPS_SURVIVAL_DATA].reset_index(drop=True)
