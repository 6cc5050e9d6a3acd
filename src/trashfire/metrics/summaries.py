"""The numbers the report shows beside the recorded tables, computed from them: pooled
accuracies with their Wilson intervals, rank correlations of two columns, the degenerate
model cells, TRASH per clock, a model cell's curves averaged over its seeds, the eps interval
of R and a data set's default tau. The report package draws and renders them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from trashfire.core import schema
from trashfire.core.stats import spearman


def wilson_interval(successes: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: unlike the normal approximation it
    stays inside [0, 1] and is sensible at accuracies near 0 or 1."""
    if not n > 0:
        return math.nan, math.nan
    z = stats.norm.ppf(0.5 + level / 2)
    p = successes / n
    denominator = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denominator
    return centre - half, centre + half


def pooled_accuracy(accuracy: pd.Series, n_samples: pd.Series) -> tuple[float, float, float]:
    """Accuracy over every examined sample of a group of cells, with its 95% Wilson interval."""
    n = float(n_samples.sum())
    correct = float((accuracy * n_samples).sum())
    if not n > 0:
        return math.nan, math.nan, math.nan
    return (correct / n, *wilson_interval(correct, n))


def paired_spearman(x: pd.Series, y: pd.Series) -> tuple[float, float, int]:
    """Spearman's rho and its p over the rows where both columns have a value, and how many
    rows that is; rho and p are NaN for fewer than 3 rows or a constant column."""
    keep = x.notna() & y.notna()
    n = int(keep.sum())
    if n < 3:
        return math.nan, math.nan, n
    return (*spearman(x[keep], y[keep]), n)


def degenerate_models(experiments: pd.DataFrame) -> pd.DataFrame:
    """The model cells timing flagged degenerate (benign accuracy not above chance by the
    margin), one row each."""
    if "degenerate" not in experiments or experiments.empty:
        return experiments.iloc[:0]
    flagged = experiments[experiments["degenerate"].astype(str).str.lower() == "true"]  # bool, or text in an odd CSV
    return flagged.drop_duplicates("model_hash") if "model_hash" in flagged else flagged


def distinct_counts(table: pd.DataFrame, columns: list[str]) -> dict[str, int | None]:
    """How many distinct values each column has; None for a column the table lacks."""
    return {column: table[column].nunique() if column in table else None for column in columns}


def trash_by_clock(trash: pd.DataFrame) -> pd.DataFrame | None:
    """TRASH on every clock side by side: the median over seeds and strengths per data set,
    model, defence and attack family, sound cells only; None where the table has no rows or
    no TRASH column."""
    columns = [f"trash_adv_{c}" for c in schema.CLOCKS if f"trash_adv_{c}" in trash]
    if trash.empty or not columns:
        return None
    rows = trash[~trash["degenerate"].astype(bool)] if "degenerate" in trash else trash
    keys = ["dataset", "model", "epochs", "defence", "defence_value", "attack_family"]
    return rows.groupby(keys, dropna=False)[columns].median().reset_index()


def seed_mean(rows: pd.DataFrame, x: str, column: str) -> pd.Series:
    """One model cell's `column` averaged over its seeds at each value of `x`."""
    return rows.groupby(x)[column].mean()


def seed_mean_accuracy(rows: pd.DataFrame, axis: str) -> pd.DataFrame:
    """One model cell's accuracy curve over its seeds at each configured eps (pixel eps differs
    by a split's std, so its mean is the x): the mean and SD of the accuracy and of the
    normalised accuracy, and the number of seeds."""
    return (
        rows.groupby("eps")
        .agg(
            x=(axis, "mean"),
            acc=("acc", "mean"),
            acc_sd=("acc", "std"),
            norm=("acc_norm", "mean"),
            norm_sd=("acc_norm", "std"),
            seeds=("acc", "count"),
        )
        .sort_values("x")
    )


def seed_mean_survival(rows: pd.DataFrame, grid: bool) -> tuple[np.ndarray, np.ndarray]:
    """One model cell's survival-in-eps curve averaged over seeds: at the grid's eps, or (a
    minimal attack, whose steps differ per seed) each seed's step function read on the union
    of their steps."""
    xs = np.unique(rows["eps"].to_numpy(float))
    if not grid:
        xs = np.unique(np.concatenate([xs, np.linspace(0.0, xs.max(), 200)]))
    # one sort for every seed, then each seed's slice: a pandas sort per seed costs a
    # millisecond, which hundreds of seeds per line multiply into most of the figure's time
    seeds = pd.factorize(rows["model_hash"])[0]
    eps, survival = rows["eps"].to_numpy(float), rows["survival"].to_numpy(float)
    order = np.lexsort((eps, seeds))
    starts = np.flatnonzero(np.diff(seeds[order], prepend=-1))
    values = []
    for start, end in zip(starts, [*starts[1:], len(order)]):
        seed = order[start:end]
        at = np.searchsorted(eps[seed], xs, side="right") - 1
        values.append(survival[seed][np.clip(at, 0, None)])
    return xs, np.mean(values, axis=0)


def r_interval(robustness: pd.DataFrame, panel: pd.DataFrame, dataset: str, family: str, units: str) -> tuple[float, float] | None:
    """The [eps0, eps1] that R integrates over for a data set and attack family (the median
    over its cells), in eps `units`; None where R has no interval or it cannot be converted
    to those units (`panel`, the family's curves, carries the data set's pixel std)."""
    rows = robustness[(robustness["dataset"] == dataset) & (robustness["attack_family"] == family)]
    rows = rows.dropna(subset=["eps0", "eps1"])
    if rows.empty:
        return None
    eps0, eps1 = rows["eps0"].median(), rows["eps1"].median()
    given = str(rows["auc_units"].iloc[0])
    if given != units:
        pixel_std = panel["pixel_std"].dropna()
        if pixel_std.empty:
            return None
        eps0, eps1 = (schema.convert_eps(eps, given, units, pixel_std.median()) for eps in (eps0, eps1))
    return (float(eps0), float(eps1)) if np.isfinite([eps0, eps1]).all() else None


def default_tau(tau_table: pd.DataFrame, dataset: str) -> tuple[float, int] | None:
    """tau(K) and K of a data set from the tau table, if it lists the data set."""
    rows = tau_table[tau_table["source"].astype(str) == dataset] if "source" in tau_table else tau_table.iloc[:0]
    if rows.empty:
        return None
    return float(rows["tau"].iloc[0]), int(rows["n_classes"].iloc[0])
