"""TRASHFIRE Fig. 1: benign and adversarial accuracy by defence and by attack family."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from trashfire.core import schema
from trashfire.metrics.summaries import pooled_accuracy
from trashfire.report.figures.common import MAX_DOTS, FigureFolder, Skipped, defence_colours, few_enough, group_ticks, save_figure, violin
from trashfire.report.formatting import defence_order
from trashfire.tables.worst_case import measured


def accuracy_panel(ax, cells: pd.DataFrame, by: str, accuracy: str, title: str, colours: dict[str, str] | None) -> bool:
    """Violins of per-cell accuracy per `by` group with the pooled accuracy; whether its cells are dots."""
    groups = defence_order(cells[by]) if by == "defence" else sorted(cells[by].unique())
    dots = few_enough(cells.groupby(by).size(), MAX_DOTS)
    for x, group in enumerate(groups):
        part = cells[cells[by] == group]
        colour = colours[group] if colours else "C7"
        violin(ax, part[accuracy].dropna().to_numpy(), x, colour, width=0.7, dots=dots)
        pooled, lo, hi = pooled_accuracy(part[accuracy], part["n_attack"])
        # at an accuracy of exactly 0 or 1 Wilson's bound lands a rounding error past it
        ax.errorbar(x, pooled, yerr=[[max(pooled - lo, 0.0)], [max(hi - pooled, 0.0)]], fmt="D", color="black", ms=5, capsize=4, zorder=4)
    group_ticks(ax, groups)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(by.replace("_", " "))
    return dots


def accuracy_figure(experiments: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """TRASHFIRE Fig. 1: benign accuracy by defence, adversarial accuracy by defence and by attack family."""
    if experiments.empty:
        raise Skipped("experiments.csv has no rows")
    cells = experiments.assign(attack_family=schema.attack_family(experiments["attack"], experiments["norm"]))
    benign = cells.drop_duplicates("model_hash")  # one benign measurement per model cell
    colours = defence_colours(cells["defence"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharey=True)
    dots = [accuracy_panel(axes[0], benign, "defence", "acc_ben_attack_subset", f"benign, by defence ({len(benign)} model cells)", colours)]
    attacked = measured(cells)  # the worst case per sample gets its own family on the right, not a second vote per defence
    dots.append(accuracy_panel(axes[1], attacked, "defence", "acc_adv", f"adversarial, by defence ({len(attacked)} attack cells)", colours))
    dots.append(
        accuracy_panel(axes[2], cells, "attack_family", "acc_adv", "adversarial, by attack family\n(worst_case: per sample, over a cell's attacks)", None)
    )
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_ylabel("accuracy (fraction correct)")
    handles = [
        Patch(color="C7", alpha=0.4, label="violin" + (" + dots" if any(dots) else "") + ": per-cell accuracy"),
        *([] if all(dots) else [Patch(facecolor="C7", edgecolor="black", label=f"box: quartiles, median (over {MAX_DOTS} cells: no dots)")]),
        Line2D([], [], marker="D", color="black", ls="", label="pooled accuracy, 95% Wilson interval"),
    ]
    axes[2].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.suptitle("Benign and adversarial accuracy of every cell, by defence and by attack family")
    fig.tight_layout()
    return save_figure(fig, folder, "accuracy_by_attack_and_defence")
