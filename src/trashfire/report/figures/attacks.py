"""How strong the attacks are: robust accuracy against the attack's work (forward queries +
input gradients, the per-sample clock), AttackBench's accuracy-against-queries view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from trashfire.report.figures.common import FigureFolder, Skipped, hide_unused, panel_grid, save_figure


def panel_eps(curves: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Per data set and norm, the eps its panel shows: the middle of the eps read there."""
    chosen = {}
    for key, panel in curves.groupby(["dataset", "norm"], sort=True):
        values = np.sort(panel["eps"].unique())
        chosen[key] = float(values[(len(values) - 1) // 2])
    return chosen


def mean_curve(panel: pd.DataFrame, grid: np.ndarray) -> np.ndarray:
    """The mean over model cells of each cell's step curve (accuracy after p passes) at `grid`."""
    values = []
    for _, cell in panel.groupby("model_hash"):
        at = np.searchsorted(cell["passes"].to_numpy(), grid, side="right") - 1
        values.append(cell["acc"].to_numpy()[np.clip(at, 0, None)])
    return np.mean(values, axis=0)


def queries_figure(query_curves: pd.DataFrame | None, experiments: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """One panel per data set and norm at one eps: each attack family's robust accuracy against
    its passes, the mean over the undefended model cells (seeds and depths)."""
    if query_curves is None or query_curves.empty:
        raise Skipped("query_curves.csv has no rows (no attack cells)")
    undefended = experiments.loc[experiments["defence"] == "none", "model_hash"].unique()
    curves = query_curves[query_curves["model_hash"].isin(undefended)]
    if curves.empty:
        raise Skipped("no undefended model cell in query_curves.csv")
    chosen = panel_eps(curves)
    fig, axes = panel_grid(1, len(chosen), width=5.0, height=3.8)
    families = sorted(curves["attack_family"].unique())
    colours = {family: f"C{i % 10}" for i, family in enumerate(families)}
    for ax, ((dataset, norm), eps) in zip(axes[0], chosen.items()):
        panel = curves[(curves["dataset"] == dataset) & (curves["norm"].astype(str) == norm) & np.isclose(curves["eps"], eps)]
        largest = int(panel["passes"].max())
        grid = np.unique(np.concatenate([[0], np.geomspace(1, max(largest, 1), 200).round()]))
        for family, lines in panel.groupby("attack_family", sort=True):
            ax.step(grid, mean_curve(lines, grid), where="post", color=colours[family], lw=1.5)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("passes per sample (forward queries + input gradients)")
        ax.set_ylabel("robust accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{dataset} · l{norm} at eps {eps:.3g} (pixel units)", fontsize=10)
        ax.grid(alpha=0.3)
    hide_unused(axes)
    fig.suptitle("Robust accuracy against the attack's work (undefended models, mean over model cells)")
    fig.tight_layout()
    handles = [Line2D([], [], color=c, label=family) for family, c in colours.items()]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, title="attack family")
    return save_figure(fig, folder, "accuracy_vs_queries")
