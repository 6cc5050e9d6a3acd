"""What every figure shares: saving in the configured formats (PNG, PDF), violins, panel grids, a colour per defence,
and the model cells of a panel (one line each, capped, with its legend label and colour)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import cbook, mlab
from matplotlib.lines import Line2D

from trashfire.core import schema
from trashfire.core.records import atomic_path
from trashfire.report.formatting import cell_label, defence_order, epochs_text, format_value

# A model cell without its seed: the lines of the per-cell figures average over seeds.
LINE_KEY = schema.SEEDLESS_LABELS
MAX_LINES = 10  # more lines than this in one panel cannot be told apart


class Skipped(Exception):
    """A figure with nothing to draw; the message says why and lands in the report."""


# ---------------------------------------------------------------------------------------------
# Drawing helpers


@dataclass(frozen=True)
class FigureFolder:
    """Where the figures go, and in which formats (`report.formats`; png first, which the report embeds)."""

    path: Path
    formats: tuple[str, ...] = ("png", "pdf")


def save_figure(fig, folder: FigureFolder, stem: str) -> list[Path]:
    paths = []
    for suffix in folder.formats:
        path = folder.path / f"{stem}.{suffix}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix, dpi=130, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def defence_colours(defences: Iterable[str]) -> dict[str, str]:
    return {d: f"C{i % 10}" for i, d in enumerate(defence_order(defences))}


def violin(ax, values: np.ndarray, x: float, colour: str, width: float, log: bool = False) -> None:
    """One violin of per-cell values with the cells as dots. On a log axis the density is
    estimated on log10 values, so that the violin is not squashed into one end. A group
    with one value, or with all values equal, has no density and is drawn as its dots only."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return
    shown = np.log10(values) if log else values
    if len(values) >= 2 and np.ptp(shown) > 0:
        vpstats = cbook.violin_stats(shown, lambda data, coords: mlab.GaussianKDE(data, "scott").evaluate(coords))
        if log:
            for stat in vpstats:
                for key in ("coords", "mean", "median", "min", "max"):
                    stat[key] = 10 ** np.asarray(stat[key])
        parts = ax.violin(vpstats, positions=[x], widths=width, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(colour)
            body.set_edgecolor(colour)
            body.set_alpha(0.3)
    jitter = np.random.default_rng(0).uniform(-width / 8, width / 8, len(values))
    ax.scatter(x + jitter, values, s=9, color=colour, alpha=0.8, linewidths=0, zorder=3)


def group_ticks(ax, labels: list[str]) -> None:
    long = any(len(str(label)) > 8 for label in labels) or len(labels) > 4
    ax.set_xticks(range(len(labels)), labels, rotation=25 if long else 0, ha="right" if long else "center")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.grid(axis="y", alpha=0.3)


def panel_grid(rows: int, columns: int, width: float = 4.3, height: float = 3.4, **kwargs):
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False, **kwargs)
    return fig, axes


def hide_unused(axes) -> None:
    for ax in axes.flat:
        if not ax.has_data():
            ax.set_visible(False)


# ---------------------------------------------------------------------------------------------
# The model cells of a panel


def line_labels(lines: pd.DataFrame) -> list[str]:
    """cell_label for each line, with the learning rate added where labels would collide."""
    labels = [cell_label(row) for _, row in lines.iterrows()]
    if len(set(labels)) < len(labels):
        labels = [f"{label} · lr {format_value(row['lr'])}" for label, (_, row) in zip(labels, lines.iterrows())]
    return labels


def sorted_lines(table: pd.DataFrame) -> pd.DataFrame:
    """The distinct model cells (seed left out) of a table, control first."""
    lines = table[LINE_KEY].drop_duplicates().copy()
    lines["_control_last"] = lines["defence"] != "none"
    order = ["dataset", "model", "depth", "epochs", "lr", "_control_last", "defence", "defence_value", "pretrained_on"]
    return lines.sort_values(order).drop(columns="_control_last").reset_index(drop=True)


IMPORTED_EPOCHS = -1.0  # below every trained cell's: a tie goes to the longest-trained


def capped_lines(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """At most MAX_LINES lines: past that, the model, depth and epochs with the most cells (the
    richest defence comparison, the one the papers draw; the longest-trained on a tie), cut at
    MAX_LINES. The note says so."""
    lines = sorted_lines(table)
    if len(lines) <= MAX_LINES:
        return lines, ""
    known = lines["epochs"].astype(float).fillna(IMPORTED_EPOCHS)  # an imported model's NaN epochs would drop out of the groups
    sizes = lines.assign(_epochs=known).groupby(["model", "depth", "_epochs"], sort=False).size()
    model, depth, epochs = max(sizes.index, key=lambda key: (sizes[key], key[2]))  # max keeps the first of equals
    kept = lines[(lines["model"] == model) & (lines["depth"] == depth) & (known == epochs)].head(MAX_LINES)
    return kept, f"{len(kept)} of {len(lines)} cells shown: {model} · {epochs_text(None if epochs == IMPORTED_EPOCHS else epochs)}"


def line_rows(table: pd.DataFrame, line: pd.Series) -> pd.DataFrame:
    """The rows of one model cell, every seed (compared as text: NaN labels match NaN)."""
    mask = np.logical_and.reduce([table[k].astype(str) == str(line[k]) for k in LINE_KEY])
    return table[mask]


def panels_by_dataset_and_family(table: pd.DataFrame) -> tuple[list[str], list[str]]:
    return sorted(table["dataset"].unique()), sorted(table["attack_family"].unique())


def line_panels(table: pd.DataFrame) -> dict[tuple[str, str], tuple[pd.DataFrame, list[str], str]]:
    """Per (data set, attack family) panel: its model cells (capped), their labels and the cap note."""
    panels = {}
    for (dataset, family), panel in table.groupby(["dataset", "attack_family"], sort=True):
        lines, note = capped_lines(panel)
        panels[(dataset, family)] = (lines, line_labels(lines), note)
    return panels


def label_colours(panels: dict) -> dict[str, tuple]:
    """One colour per model-cell label across the figure, so one legend serves every panel."""
    labels = list(dict.fromkeys(label for _, labels, _ in panels.values() for label in labels))
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20").colors
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def figure_legend(fig, colours: dict[str, tuple], extra: list | None = None) -> None:
    handles = [Line2D([], [], color=c, marker="o", ms=3, label=label) for label, c in colours.items()] + (extra or [])
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, title="model cell (mean over seeds)")
