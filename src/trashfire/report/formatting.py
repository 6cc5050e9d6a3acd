"""Numbers and labels as the report and the figures print them: 3-4 significant digits, a
mean with its interval or SD over seeds, a p-value, a model cell's name in a legend, the
defences with the undefended control first."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

ONE_SEED = "n/a (1 seed)"


def format_value(value) -> str:
    """3-4 significant digits for numbers, '' for missing, the text for anything else."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    return str(value)


def number(value) -> float:
    """A float, NaN for anything missing or not a number (a CSV cell, a JSON null)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def p_text(p: float) -> str:
    return f"p = {p:.2g}" if p >= 1e-4 else "p < 0.0001"


def interval_text(mean: float, lo: float, hi: float, seeds: float) -> str:
    """A mean and its interval over seeds; from one seed the interval is n/a, never [x, x]."""
    if not np.isfinite(mean):
        return ""
    if seeds < 2:
        return f"{mean:.3g} [{ONE_SEED}]"
    return f"{mean:.3g} [{lo:.3g}, {hi:.3g}]"


def spread_text(mean: float, sd: float, seeds: float) -> str:
    """A mean ± its SD over seeds; from one seed the SD is n/a."""
    if not np.isfinite(mean):
        return ""
    if seeds < 2:
        return f"{mean:.3g} ± {ONE_SEED}"
    return f"{mean:.3g} ± {sd:.2g}"


def spearman_text(rho: float, p: float, n: int) -> str:
    """A rank correlation of trashfire.metrics.summaries.paired_spearman in a figure's title."""
    if n < 3:
        return f"Spearman: n < 3 (n = {n})"
    if not np.isfinite(rho):
        return f"Spearman: undefined, constant input (n = {n})"
    return f"Spearman ρ = {rho:.3f}, {p_text(p)} (n = {n})"


def defence_order(defences: Iterable[str]) -> list[str]:
    """The undefended control first, so that it sits leftmost and keeps its colour."""
    unique = sorted(set(defences))
    return sorted(unique, key=lambda d: (d != "none", d))


def epochs_text(epochs) -> str:
    """'10 ep', or 'imported' for an external model, whose training we do not know."""
    return "imported" if format_value(epochs) == "" else f"{format_value(epochs)} ep"


def cell_label(row) -> str:
    """'resnet18 · conf 0.5 · 1 ep': what tells one model cell from another in a legend."""
    defence = "no defence" if row["defence"] == "none" else f"{row['defence']} {format_value(row['defence_value'])}"
    parts = [str(row["model"]), defence, epochs_text(row["epochs"])]
    if row.get("pretrained_on", ""):
        parts.append(f"from {row['pretrained_on']}")
    return " · ".join(parts)
