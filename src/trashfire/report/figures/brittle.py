"""Brittle-score paper Fig. 4: brittle-score against robust accuracy."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from trashfire.metrics.summaries import paired_spearman
from trashfire.report.figures.common import (
    MAX_POINTS,
    FigureFolder,
    Skipped,
    defence_colours,
    defence_median,
    defence_points,
    density,
    panel_grid,
    save_figure,
)
from trashfire.report.formatting import spearman_text


def brittle_figure(brittle: pd.DataFrame | None, folder: FigureFolder) -> list[Path]:
    """Brittle-score paper Fig. 4: brittle-score against robust accuracy, one panel per data set:
    a point per model cell, or past MAX_POINTS cells a density with each defence's median."""
    if brittle is None:
        raise Skipped("brittle.csv not found (run `dvc repro brittle`)")
    if brittle.empty or not {"brittle_score", "robust_acc"} <= set(brittle):
        raise Skipped("brittle.csv has no brittle-scores (no brittle records)")
    brittle = brittle.dropna(subset=["brittle_score", "robust_acc"])
    if brittle.empty:
        raise Skipped("brittle.csv has no cell with both a brittle-score and a robust accuracy")
    datasets = sorted(brittle["dataset"].unique())
    colours = defence_colours(brittle["defence"])
    fig, axes = panel_grid(1, len(datasets), width=5.0, height=4.2)
    for ax, dataset in zip(axes[0], datasets):
        panel = brittle[brittle["dataset"] == dataset]
        wrapped = panel["defence_stage"].eq("predict") if "defence_stage" in panel else pd.Series(False, index=panel.index)
        degenerate = panel["degenerate"].astype(str).str.lower().eq("true") if "degenerate" in panel else False
        crowded = len(panel) > MAX_POINTS
        if crowded:
            density(ax, panel["brittle_score"], panel["robust_acc"])
        for defence, colour in colours.items():
            part = panel[panel["defence"] == defence]
            if not part.empty:  # predict-time defences hollow: 002's correlation is over trained models
                hollow = bool(wrapped[part.index].any())
                label = defence + (" (predict-time)" if hollow else "")
                draw = defence_median if crowded else defence_points
                draw(ax, part["brittle_score"], part["robust_acc"], colour, hollow, label)
        models = panel[~(wrapped | degenerate)]  # the finding's population
        ax.set_title(f"{dataset}, trained models (filled)\n{spearman_text(*paired_spearman(models['brittle_score'], models['robust_acc']))}", fontsize=10)
        ax.set_xlabel("brittle-score (mean |LIME weight| per feature)")
        attacks = ", ".join(sorted(panel["robust_attack"].astype(str).unique()))
        ax.set_ylabel(f"robust accuracy\nunder {attacks}")
        ax.grid(alpha=0.3)
        ax.legend(title="defence" + (": median, quartile bars;\ngrey: density of cells" if crowded else ""), fontsize=8, title_fontsize=8 if crowded else None)
    fig.suptitle("Brittle-score against robust accuracy (the paper expects a negative correlation)")
    fig.tight_layout()
    return save_figure(fig, folder, "brittle_vs_robust_acc")
