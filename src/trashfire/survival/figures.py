"""The survival stage's figures: calibration curves of every fitter on train and test
(TRASHFIRE Fig. 2), coefficient plots with cluster-robust and naive 95% intervals, dummies and
covariates in separate panels (Fig. 3), and Kaplan-Meier curves per attack family and defence
with the selected model's predicted survival beside them."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from trashfire.core.records import atomic_path
from trashfire.tables.survival_data import DUMMY_SOURCES, NUMERIC_COVARIATES

FITTERS_PER_ROW = 2
DUMMY_LABELS = {"attack": "Atk", "defence": "Def", "data": "Data"}

# The figures' look, in one place (the tests check what the figures show: panels, bars, lines, titles)
REASON_TEXT = {"x": 0.5, "y": 0.5, "ha": "center", "va": "center", "fontsize": 8}  # an unfitted model's panel
PANEL_TITLE = {"fontsize": 10}
OBSERVED = {"color": "tab:red"}  # lifelines draws the smoothed observed curve in red
NAIVE_BARS = {"fmt": "none", "ecolor": "tab:gray", "elinewidth": 0.8, "capsize": 2}  # thin
ROBUST_BARS = {"fmt": "none", "ecolor": "tab:blue", "elinewidth": 2.2}  # thick
ESTIMATE = {"marker": "o", "ls": "none", "color": "tab:blue"}
ZERO_LINE = {"color": "k", "ls": "--", "lw": 0.8}
GRID = {"alpha": 0.3}
LEGEND = {"fontsize": 7}


def calibration_grid(names: list[str]):
    """A train and a test panel per fitter, two fitters to a row."""
    rows = math.ceil(len(names) / FITTERS_PER_ROW)
    columns = 2 * min(len(names), FITTERS_PER_ROW)
    fig, grid = plt.subplots(rows, columns, figsize=(4.6 * columns, 4.0 * rows), squeeze=False)
    axes = {name: (grid.flat[2 * i], grid.flat[2 * i + 1]) for i, name in enumerate(names)}
    for ax in grid.flat[2 * len(names) :]:
        ax.set_visible(False)
    return fig, axes


UNSELECTED = "not scored on the test split: only the selected model is, once, after the selection"


def finish_calibration(fig, axes: dict, comparison: pd.DataFrame, unit: str = "s"):
    """Titles with each panel's ICI; a fitter without a fit gets its reason instead of a curve,
    and one not selected says why its test panel is empty."""
    for _, row in comparison[comparison["fitter"].isin(list(axes))].iterrows():  # baselines have no panel
        for ax, part in zip(axes[row["fitter"]], ("train", "test")):
            if row["status"] != "fitted" or not ax.lines:
                ax.cla()
                ax.set_axis_off()
                unselected = part == "test" and row["status"] == "fitted" and not bool(row.get("selected", False))
                reason = row["note"] if row["status"] != "fitted" else UNSELECTED if unselected else "no calibration curve (see the table's note)"
                ax.text(s=textwrap.fill(str(reason), 40)[:600], transform=ax.transAxes, **REASON_TEXT)
                ax.set_title(f"{row['model']} ({part}): {row['status']}")
                continue
            prefix = "test_" if part == "test" else ""
            ax.set_title(f"{row['model']} ({part}): ICI {row[f'{prefix}ICI']:.3f}, E50 {row[f'{prefix}E50']:.3f}", **PANEL_TITLE)
            ax.set_xlabel("predicted P(T <= t0)")  # lifelines prints t0 with %d: 0 for sub-second t0
            ax.set_ylabel("observed P(T <= t0), smoothed", **OBSERVED)
            if ax.get_legend():
                ax.get_legend().remove()
    t0 = comparison["t0"].dropna()
    span = f"t0 = {t0.min():.3g} {unit}" if t0.nunique() <= 1 else f"t0 = {t0.min():.3g} to {t0.max():.3g} {unit}"
    fig.suptitle(f"Calibration at {span}: observed (red, smoothed) vs predicted failure probability; dashed = perfect; bars = predictions")
    fig.tight_layout()
    return fig


def coefficient_figure(coefficients: pd.DataFrame, label: str, is_cox: bool):
    """Fig. 3: dummies (effect of the level against the reference) on the left, covariates
    (effect of +1 SD, so that times and epochs share an axis) on the right; thick bars the
    cluster-robust 95% intervals, thin bars the naive ones."""
    primary = coefficients[coefficients["covariate"] != "Intercept"]
    if not primary.empty:
        primary = primary[primary["param"] == primary["param"].value_counts().idxmax()]
    is_dummy = ~primary["covariate"].isin(NUMERIC_COVARIATES)
    effect = "log hazard ratio" if is_cox else "effect on log survival time"
    panels = (
        (primary[is_dummy], False, f"dummies: {effect} vs reference level"),
        (primary[~is_dummy], True, f"covariates: {effect} per +1 SD"),
    )
    height = 0.32 * max(len(primary), 8) + 1.5
    fig, axes = plt.subplots(1, 2, figsize=(12, height))
    for ax, (part, per_sd, title) in zip(axes, panels):
        y = np.arange(len(part))
        scale = part["sd"] if per_sd else 1.0
        coef, lower, upper = ((part[c] * scale).to_numpy(float) for c in ("coef", "lower", "upper"))
        ax.errorbar(coef, y, xerr=[coef - lower, upper - coef], **NAIVE_BARS)
        if "lower_robust" in part:
            low, high = ((part[c] * scale).to_numpy(float) for c in ("lower_robust", "upper_robust"))
            ax.errorbar(coef, y, xerr=[np.nan_to_num(coef - low), np.nan_to_num(high - coef)], **ROBUST_BARS)
        ax.plot(coef, y, **ESTIMATE)
        ax.set_yticks(y, [_pretty(c) for c in part["covariate"]])
        ax.axvline(0, **ZERO_LINE)
        ax.set_title(title, **PANEL_TITLE)
        ax.set_xlabel("coefficient x SD, 95% CI" if per_sd else "coefficient, 95% CI")
        ax.grid(axis="x", **GRID)
    positive = "higher hazard" if is_cox else "longer survival"
    fig.suptitle(f"{label}: coefficients (> 0: {positive}); 95% intervals: thick cluster-robust, thin naive")
    fig.tight_layout()
    return fig


# past KM_DRAWN_POINTS steps a Kaplan-Meier curve is drawn at the steps where it crosses a
# multiple of KM_DRAWN_STEP (a third of a pixel of a panel's height): at 10^7 samples a curve of a
# million steps took seconds to draw and gigabytes the stage held on to
KM_DRAWN_POINTS, KM_DRAWN_STEP = 20_000, 1e-3


def plot_kaplan_meier(ax, fitter, color) -> None:
    """A Kaplan-Meier curve (lifelines' fit, or `km.Steps`) without its interval: as lifelines
    draws it, or, past KM_DRAWN_POINTS steps (or not lifelines'), its steps where it crosses a
    multiple of KM_DRAWN_STEP (within KM_DRAWN_STEP of the curve everywhere)."""
    curve = fitter.survival_function_
    if len(curve) <= KM_DRAWN_POINTS and hasattr(fitter, "plot_survival_function"):
        fitter.plot_survival_function(ax=ax, ci_show=False, color=color)
        return
    values = curve.iloc[:, 0].to_numpy(float)
    kept = np.unique(np.r_[0, np.flatnonzero(np.diff(np.floor(values / KM_DRAWN_STEP))) + 1, len(values) - 1])
    ax.step(curve.index.to_numpy(float)[kept], values[kept], where="post", color=color, label=fitter._label)


def kaplan_meier_figure(km_fits: dict, predicted: dict, label: str | None, unit: str = "s"):
    """One panel per attack family: the Kaplan-Meier estimate per defence (`km_fits[(family,
    defence)]`, lifelines fitters) and the model's predicted survival of the same samples
    (`predicted[(family, defence)]` = (times, curve)) dashed in the defence's colour; time on a
    log axis, as budgets differ by orders of magnitude between models."""
    families = sorted({family for family, _ in km_fits})
    defences = sorted({defence for _, defence in km_fits}, key=lambda d: (d != "none", d))
    colours = {d: plt.get_cmap("tab10")(i % 10) for i, d in enumerate(defences)}
    columns = min(3, len(families))
    rows = math.ceil(len(families) / columns)
    fig, grid = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    for ax, family in zip(grid.flat, families):
        for defence in defences:
            if (family, defence) not in km_fits:
                continue
            plot_kaplan_meier(ax, km_fits[(family, defence)], colours[defence])
            if (family, defence) in predicted:
                times, curve = predicted[(family, defence)]
                ax.plot(times, curve, ls="--", color=colours[defence], label=f"{defence} ({label})")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide within a decade
        ax.set_ylim(0, 1.02)
        ax.set_title(family)
        ax.set_xlabel(f"adversary's work per sample ({unit})")
        ax.set_ylabel("P(not yet misclassified)")
        ax.legend(**LEGEND)
    for ax in grid.flat[len(families) :]:
        ax.set_visible(False)
    model = f"the {label} model's prediction for the same samples (dashed)" if label else "no model's prediction (no survival model was selected)"
    fig.suptitle(f"Kaplan-Meier survival per defence (solid) and {model}")
    fig.tight_layout()
    return fig


def competing_risks_figure(curves: dict[tuple, dict[str, pd.Series]], unit: str = "s"):
    """One panel per (attack family, defence) of a composite (`curves[(family, defence)]`, each
    cause's cumulative incidence: survival.competing.incidence_curves), the causes stacked in
    the composite's order so that the top edge is the failure share; time on a log axis."""
    keys = sorted(curves, key=lambda k: (k[0], k[1] != "none", k[1]))
    names = list(dict.fromkeys(cause for key in keys for cause in curves[key]))
    colours = {cause: plt.get_cmap("tab10")(i % 10) for i, cause in enumerate(names)}
    columns = min(3, len(keys))
    rows = math.ceil(len(keys) / columns)
    fig, grid = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows), squeeze=False)
    for ax, key in zip(grid.flat, keys):
        times = np.unique(np.concatenate([curve.index.to_numpy(float) for curve in curves[key].values()]))
        stacked = np.vstack([curve.reindex(times, method="ffill").fillna(0.0).to_numpy() for curve in curves[key].values()])
        ax.stackplot(times, stacked, labels=list(curves[key]), colors=[colours[c] for c in curves[key]], step="post", alpha=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.02)
        ax.set_title(" / ".join(str(k) for k in key), **PANEL_TITLE)
        ax.set_xlabel(f"adversary's work per sample ({unit})")
        ax.set_ylabel("cumulative incidence of failure")
        ax.grid(**GRID)
        ax.legend(loc="upper left", **LEGEND)
    for ax in grid.flat[len(keys) :]:
        ax.set_visible(False)
    fig.suptitle("Which component breaks the samples (Aalen-Johansen, stacked in the composite's order; top edge: the failure share)")
    fig.tight_layout()
    return fig


def _pretty(covariate: str) -> str:
    for kind in DUMMY_SOURCES:
        if covariate.startswith(f"{kind}_") and covariate not in NUMERIC_COVARIATES:
            return f"{DUMMY_LABELS[kind]}: {covariate.removeprefix(kind + '_')}"
    return covariate


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), dpi=110)
    plt.close(fig)
