"""Survival in eps (trashfire.survival.epsilon): the Kaplan-Meier curves of the samples still
standing against eps, and their area against EVP and R."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from trashfire.metrics.summaries import paired_spearman, seed_mean_survival
from trashfire.report.figures.common import (
    MAX_POINTS,
    FigureFolder,
    Skipped,
    defence_colours,
    defence_median,
    density,
    figure_legend,
    hide_unused,
    label_colours,
    line_panels,
    panel_grid,
    rows_by_line,
    save_figure,
)
from trashfire.report.formatting import defence_order, spearman_text
from trashfire.survival import epsilon

NORM_NAMES = {"inf": "ℓ∞", "2": "ℓ2", "1": "ℓ1", "0": "ℓ0"}


def eps_survival_figure(curves: pd.DataFrame, table: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """The Kaplan-Meier curves of survival in eps: a panel per data set and attack family, a
    line per model cell (capped as the other per-cell figures), the area in the legend."""
    if curves.empty:
        raise Skipped("eps_survival_curves.csv has no rows (no eps-grid or minimal-perturbation attack)")
    panels = line_panels(curves)
    colours = label_colours(panels)
    columns = min(3, len(panels))
    fig, axes = panel_grid(math.ceil(len(panels) / columns), columns, width=5.0, height=3.9)
    for ax, ((dataset, family), lines) in zip(axes.flat, panels.items()):
        panel = curves[(curves["dataset"] == dataset) & (curves["attack_family"] == family)]
        areas = rows_by_line(table[(table["dataset"] == dataset) & (table["attack_family"] == family)], lines.lines)
        grid = str(panel["search"].iloc[0]) == "grid"
        for label, rows, cell_areas in zip(lines.labels, lines.rows, areas):
            xs, ys = seed_mean_survival(rows, grid)
            area = cell_areas["area"].mean()
            style = {"marker": "o", "ms": 3} if grid else {"drawstyle": "steps-post"}
            ax.plot(xs, ys, color=colours[label], lw=1.4, label=f"{area:.2f}", **style)
        norm = NORM_NAMES.get(str(panel["norm"].iloc[0]), f"ℓ{panel['norm'].iloc[0]}")
        how = "smallest grid ε that broke the sample" if grid else "norm of the adversarial example"
        ax.set_title("\n".join(filter(None, [f"{dataset} · {family}", how, lines.note and f"({lines.note})"])), fontsize=10)
        ax.set_xlabel(f"ε: {norm} perturbation, {panel['units'].iloc[0]} units")
        ax.set_ylabel("share of samples still standing")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(title="area", fontsize=7, title_fontsize=7, loc="lower left")  # grid curves fall to the right
    hide_unused(axes)
    fig.suptitle("Survival in ε (Kaplan-Meier): share of samples not yet broken against the perturbation size; mean over seeds")
    fig.tight_layout()
    figure_legend(fig, colours)
    return save_figure(fig, folder, "eps_survival_curves")


def defence_dots(ax, x: pd.Series, y: pd.Series, colour: str, label: str) -> None:
    ax.scatter(x, y, s=22, color=colour, alpha=0.85, label=label)


def eps_survival_scatter(table: pd.DataFrame, robustness: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """The area against EVP and R per eps family, over the sound model cells: a point each, or
    past MAX_POINTS cells in a panel a density with each defence's median."""
    both = epsilon.against(table, robustness) if not table.empty and not robustness.empty else pd.DataFrame()
    if both.empty:
        raise Skipped("no model cell has both an eps-survival area and EVP or R (no eps-grid attack)")
    rows = list(both.groupby(["dataset", "attack_family"], sort=True))
    colours = defence_colours(both["defence"])
    fig, axes = panel_grid(len(rows), len(epsilon.RANKED), width=4.6, height=3.8)
    for r, ((dataset, family), group) in enumerate(rows):
        for c, (column, name) in enumerate(epsilon.RANKED.items()):
            ax = axes[r, c]
            crowded = len(group) > MAX_POINTS
            if crowded:
                density(ax, group[column], group["area"])
            for defence in defence_order(group["defence"]):
                part = group[group["defence"] == defence]
                draw = defence_median if crowded else defence_dots
                draw(ax, part[column], part["area"], colours[defence], label=defence)
            ax.set_title(f"{dataset} · {family}\n{spearman_text(*paired_spearman(group[column], group['area']))}", fontsize=9)
            ax.set_xlabel(name)
            ax.set_ylabel("area under the ε-survival curve")
            ax.grid(alpha=0.3)
    crowded = any(len(group) > MAX_POINTS for _, group in rows)
    axes[0, -1].legend(title="defence" + (": median, quartile bars;\ngrey: density of cells" if crowded else ""), fontsize=7, title_fontsize=7)
    fig.suptitle("Area under the ε-survival curve against EVP and R, sound model cells")
    fig.tight_layout()
    return save_figure(fig, folder, "eps_survival_vs_evp_r")
