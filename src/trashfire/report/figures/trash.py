"""TRASHFIRE Fig. 4: TRASH by model depth, defence and attack family, on a log axis."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from trashfire.report.figures.common import MAX_DOTS, FigureFolder, Skipped, defence_colours, few_enough, group_ticks, save_figure, violin
from trashfire.report.formatting import format_value


def positive_finite(values: pd.Series) -> tuple[pd.Series, int]:
    """The values a log axis can show, and how many were dropped."""
    keep = np.isfinite(values) & (values > 0)
    return values[keep], int((~keep).sum())


def depth_label(cells: pd.DataFrame, depth) -> str:
    models = ", ".join(sorted(cells.loc[cells["depth"] == depth, "model"].astype(str).unique()))
    return f"{format_value(depth)} layers\n({models})"


def plain_number(value: float, _position=None) -> str:
    """0.01, 3, 200 rather than 10^-2, 3x10^0: TRASH is read against 1."""
    return f"{value:g}"


def few_decades(ax) -> bool:
    """Label the minor ticks of a log axis only when it spans too few decades to have majors."""
    low, high = ax.get_ylim()
    return low > 0 and high / low < 30


def trash_panel(ax, cells: pd.DataFrame, column: str, by: str, colours: dict[str, str] | None) -> int:
    """Violins of one TRASH column per `by` group, one per defence within a group when
    colours are given; returns how many values the log axis could not show."""
    groups = sorted(cells[by].unique())
    defences = list(colours) if colours else [None]
    width = 0.8 / len(defences)
    dots = few_enough(cells.groupby([by, "defence"] if colours else by).size(), MAX_DOTS)
    dropped = 0
    for x, group in enumerate(groups):
        for i, defence in enumerate(defences):
            part = cells[(cells[by] == group) & ((cells["defence"] == defence) if defence else True)]
            values, n_dropped = positive_finite(part[column].astype(float))
            dropped += n_dropped
            offset = (i - (len(defences) - 1) / 2) * width
            violin(ax, values.to_numpy(), x + offset, colours[defence] if defence else "C7", width * 0.9, log=True, dots=dots)
    labels = [depth_label(cells, g) for g in groups] if by == "depth" else groups
    group_ticks(ax, labels)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: plain_number(v) if few_decades(ax) else ""))
    ax.axhline(1.0, color="tab:red", ls="--", lw=1)
    ax.set_xlabel("model depth" if by == "depth" else "attack family")
    return dropped


def trash_figure(trash: pd.DataFrame, folder: FigureFolder) -> list[Path]:
    """TRASHFIRE Fig. 4: benign and adversarial TRASH by depth with a violin per defence, and
    adversarial TRASH by attack family; log axis, a dashed line at 1."""
    if trash.empty:
        raise Skipped("trash.csv has no rows")
    if not np.isfinite(pd.to_numeric(trash["trash_adv"], errors="coerce")).any():
        raise Skipped("no attack cell has a TRASH: no survival model gave E[T] (why: Survival models, below, and survival/status.json)")
    benign = trash.drop_duplicates("model_hash")  # trash_ben does not depend on the attack
    colours = defence_colours(trash["defence"])
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
    panels = (
        (axes[0], benign, "trash_ben", "depth", colours, "benign TRASH, by depth and defence"),
        (axes[1], trash, "trash_adv", "depth", colours, "adversarial TRASH, by depth and defence"),
        (axes[2], trash, "trash_adv", "attack_family", None, "adversarial TRASH, by attack family"),
    )
    for ax, cells, column, by, panel_colours, title in panels:
        dropped = trash_panel(ax, cells, column, by, panel_colours)
        ax.set_title(title + (f"\n({dropped} non-positive or non-finite dropped)" if dropped else ""), fontsize=10)
    axes[0].set_ylabel("TRASH = t_train / E[T] (per sample, one clock)")
    handles = [Patch(color=c, alpha=0.5, label=d) for d, c in colours.items()]
    handles.append(Line2D([], [], color="tab:red", ls="--", label="1: as cheap to break as to train"))
    axes[2].legend(handles=handles, title="defence", loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.suptitle("TRASH score by model depth, defence and attack family (> 1: cheaper to break than to train)")
    fig.tight_layout()
    return save_figure(fig, folder, "trash_by_depth_and_defence")
