"""Normalised-AUC paper Fig. 2 and 4: accuracy and normalised accuracy against eps."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.patches import Patch

from trashfire.core import schema
from trashfire.metrics.summaries import r_interval, seed_mean_accuracy
from trashfire.report.figures.common import FigureFolder, LinePanel, Skipped, figure_legend, label_colours, line_panels, panel_grid, save_figure


def eps_axis(panel: pd.DataFrame) -> tuple[str, str]:
    """The units of a panel's eps axis and its label: pixel units as the normalised-AUC paper
    plots them, or the standardised units the model sees where the records predate the pixel
    std (pixel eps is then unknown)."""
    if panel[schema.eps_column("pixel")].notna().all():
        return "pixel", "ε (pixel units, images in [0, 1])"
    return "standardised", "ε (standardised units; pixel std not recorded)"


def curve_lines(ax_raw, ax_norm, panel: LinePanel, colours: dict, axis: str) -> None:
    """Mean over seeds at each configured eps (pixel eps differs by a split's std), ±1 SD band."""
    for label, rows in zip(panel.labels, panel.rows):
        points = seed_mean_accuracy(rows, axis)
        for ax, y, sd in ((ax_raw, "acc", "acc_sd"), (ax_norm, "norm", "norm_sd")):
            ax.plot(points["x"], points[y], color=colours[label], lw=1.4, marker="o", ms=3)
            if points["seeds"].max() >= 2:
                ax.fill_between(points["x"], points[y] - points[sd], points[y] + points[sd], color=colours[label], alpha=0.15, lw=0)


def curves_figure(curves: pd.DataFrame, robustness: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """Normalised-AUC paper Fig. 2 and Fig. 4: raw (top) and normalised (bottom) accuracy
    against eps, a column per data set and attack family."""
    if curves.empty:
        raise Skipped("curves.csv has no rows (no attack with an eps grid)")
    panels = line_panels(curves)
    colours = label_colours(panels)
    fig, axes = panel_grid(2, len(panels), height=3.6)
    shaded = False
    for c, ((dataset, family), lines) in enumerate(panels.items()):
        panel = curves[(curves["dataset"] == dataset) & (curves["attack_family"] == family)]
        ax_raw, ax_norm = axes[0, c], axes[1, c]
        units, xlabel = eps_axis(panel)
        curve_lines(ax_raw, ax_norm, lines, colours, schema.eps_column(units))
        interval = r_interval(robustness, panel, dataset, family, units)
        for ax in (ax_raw, ax_norm):
            if interval:
                ax.axvspan(*interval, color="grey", alpha=0.15, lw=0)
                shaded = True
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        span = f"R over ε ∈ [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "no R interval"
        ax_raw.set_title("\n".join(filter(None, [f"{dataset} · {family}", span, lines.note and f"({lines.note})"])), fontsize=10)
        ax_raw.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("accuracy")
    axes[1, 0].set_ylabel("accuracy / accuracy at ε = 0")
    fig.suptitle("Accuracy (top) and normalised accuracy (bottom) against attack strength ε; band: ±1 SD over seeds")
    fig.tight_layout()
    figure_legend(fig, colours, [Patch(color="grey", alpha=0.3, label="ε interval of R")] if shaded else [])
    return save_figure(fig, folder, "accuracy_eps_curves")
