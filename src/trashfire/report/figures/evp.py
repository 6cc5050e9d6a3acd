"""EVP paper Fig. 7 and 8: EVP against the viability threshold tau and against the number of eps intervals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from trashfire.metrics.summaries import default_tau, seed_mean
from trashfire.report.figures.common import (
    FigureFolder,
    Skipped,
    figure_legend,
    hide_unused,
    label_colours,
    line_panels,
    panel_grid,
    panels_by_dataset_and_family,
    save_figure,
)


def evp_line_figure(
    table: pd.DataFrame, x: str, xlabel: str, title: str, stem: str, folder: FigureFolder, decorate: Callable | None = None, extra: list | None = None
) -> list[Path]:
    """One panel per data set (rows) and attack family (columns), one line per model cell
    with EVP averaged over seeds at each x."""
    datasets, families = panels_by_dataset_and_family(table)
    panels = line_panels(table)
    colours = label_colours(panels)
    fig, axes = panel_grid(len(datasets), len(families))
    for (dataset, family), panel in panels.items():
        ax = axes[datasets.index(dataset), families.index(family)]
        for label, rows in zip(panel.labels, panel.rows):
            points = seed_mean(rows, x, "evp")
            ax.plot(points.index, points.to_numpy(), color=colours[label], lw=1.4, marker="o" if len(points) < 15 else None, ms=3)
        subtitle = decorate(ax, dataset) if decorate else ""
        ax.set_title("\n".join(filter(None, [f"{dataset} · {family}", subtitle, panel.note and f"({panel.note})"])), fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("EVP (expected viable accuracy)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    hide_unused(axes)
    fig.suptitle(title)
    fig.tight_layout()
    figure_legend(fig, colours, extra)
    return save_figure(fig, folder, stem)


def evp_tau_figure(evp_tau: pd.DataFrame, tau_table: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """EVP paper Fig. 7: EVP against the viability threshold tau."""
    if evp_tau.empty:
        raise Skipped("evp_tau.csv has no rows (no attack with an eps grid)")

    def mark_default(ax, dataset) -> str:
        found = default_tau(tau_table, dataset)
        if not found:
            return ""
        tau, k = found
        ax.axvline(tau, color="black", ls=":", lw=1.2)
        return f"default τ(K={k}) = {tau:.3f}"

    marker = [Line2D([], [], color="black", ls=":", label="default τ(K) of the data set")]
    return evp_line_figure(
        evp_tau,
        "tau",
        "viability threshold τ (accuracy)",
        "Expected viable performance against the viability threshold τ",
        "evp_vs_tau",
        folder,
        mark_default,
        marker,
    )


def evp_convergence_figure(evp_convergence: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """EVP paper Fig. 8: EVP on nested sub-grids against the number of eps intervals."""
    if evp_convergence.empty:
        raise Skipped("evp_convergence.csv has no rows (no attack with an eps grid)")

    def integer_ticks(ax, dataset) -> str:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        return ""

    return evp_line_figure(
        evp_convergence,
        "n_intervals",
        "number of eps intervals in the grid",
        "Convergence of EVP as the eps grid gets finer (rightmost point: the full grid)",
        "evp_convergence",
        folder,
        integer_ticks,
    )
