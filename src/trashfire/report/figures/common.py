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
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from trashfire.core import schema
from trashfire.core.records import atomic_path
from trashfire.report.formatting import cell_label, defence_order, epochs_text, format_value

# A model cell without its seed: the lines of the per-cell figures average over seeds.
LINE_KEY = schema.SEEDLESS_LABELS
MAX_LINES = 10  # more lines than this in one panel cannot be told apart
# Past these, a panel draws distributions, not cells: a violin's dots give way to its quartile
# box, a scatter's points to a hexbin density with each defence's median. The default's largest
# violin has 264 cells and its scatter panels 66 points: drawn cell by cell, as they always were.
MAX_DOTS = 300
MAX_POINTS = 300


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


KDE_POINTS = 2000  # a violin's density from at most this many values: its cost is values x 100 points


def kde_sample(values: np.ndarray) -> np.ndarray:
    """At most KDE_POINTS values spread evenly over the quantiles of `values`: the same shape,
    at a cost that does not grow with the cells (10^5 values cost a second per violin)."""
    if len(values) <= KDE_POINTS:
        return values
    return np.quantile(values, np.linspace(0, 1, KDE_POINTS))


def violin(ax, values: np.ndarray, x: float, colour: str, width: float, log: bool = False, dots: bool = True) -> None:
    """One violin of per-cell values, with the cells as dots (`dots`) or, where they are too
    many to tell apart, the quartiles as a box and the median as a white bar. On a log axis
    the density is estimated on log10 values, so that the violin is not squashed into one
    end. A group with one value, or with all values equal, has no density and is drawn as
    its dots (or its box) only."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return
    shown = np.log10(values) if log else values
    if len(values) >= 2 and np.ptp(shown) > 0:
        vpstats = cbook.violin_stats(shown, lambda data, coords: mlab.GaussianKDE(kde_sample(data), "scott").evaluate(coords))
        if log:
            for stat in vpstats:
                for key in ("coords", "mean", "median", "min", "max"):
                    stat[key] = 10 ** np.asarray(stat[key])
        parts = ax.violin(vpstats, positions=[x], widths=width, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(colour)
            body.set_edgecolor(colour)
            body.set_alpha(0.3)
    if dots:
        jitter = np.random.default_rng(0).uniform(-width / 8, width / 8, len(values))
        ax.scatter(x + jitter, values, s=9, color=colour, alpha=0.8, linewidths=0, zorder=3)
        return
    low, median, high = np.percentile(values, [25, 50, 75])
    ax.add_patch(Rectangle((x - width / 10, low), width / 5, high - low, facecolor=colour, edgecolor="black", lw=0.6, zorder=3))
    ax.hlines(median, x - width / 10, x + width / 10, color="white", lw=1.5, zorder=4)


def few_enough(groups: Iterable[int], most: int) -> bool:
    """Whether every group of a panel is small enough to draw its cells one by one."""
    return max(groups, default=0) <= most


def defence_points(ax, x: pd.Series, y: pd.Series, colour: str, hollow: bool = False, label: str | None = None) -> None:
    """One defence's cells of a scatter panel, a point each."""
    face = "none" if hollow else colour
    ax.scatter(x, y, s=28, label=label, alpha=0.85, facecolors=face, edgecolors=colour)


def defence_median(ax, x: pd.Series, y: pd.Series, colour: str, hollow: bool = False, label: str | None = None) -> None:
    """One defence's cells of a crowded scatter panel: their median, with bars over the quartiles of each axis."""
    keep = np.isfinite(x.to_numpy(float)) & np.isfinite(y.to_numpy(float))
    if not keep.any():
        return
    (x0, mx, x1), (y0, my, y1) = np.percentile(x[keep], [25, 50, 75]), np.percentile(y[keep], [25, 50, 75])
    face = "white" if hollow else colour
    bars = {"xerr": [[mx - x0], [x1 - mx]], "yerr": [[my - y0], [y1 - my]], "capsize": 2, "lw": 1.2}
    ax.errorbar(mx, my, fmt="o", ms=7, color=colour, mfc=face, mec=colour, zorder=4, label=label, **bars)


DENSITY = LinearSegmentedColormap.from_list("density", ["#e0e0e0", "#404040"])  # a bin of one cell still shows


def density(ax, x: pd.Series, y: pd.Series) -> None:
    """Every cell of a crowded scatter panel as a grey hexbin (log counts): where the cells lie, not one mark each."""
    keep = np.isfinite(x.to_numpy(float)) & np.isfinite(y.to_numpy(float))
    if keep.any():
        ax.hexbin(x[keep], y[keep], gridsize=35, bins="log", cmap=DENSITY, mincnt=1, linewidths=0)


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


def panels_by_dataset_and_family(table: pd.DataFrame) -> tuple[list[str], list[str]]:
    return sorted(table["dataset"].unique()), sorted(table["attack_family"].unique())


def text_keys(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """Each row's model-cell labels as text, so that NaN matches NaN."""
    return list(zip(*(frame[k].astype(str) for k in LINE_KEY)))


def rows_by_line(panel: pd.DataFrame, lines: pd.DataFrame) -> list[pd.DataFrame]:
    """The rows of each of `lines` in `panel` (every seed; none where the panel lacks it), found
    in one pass over the panel: comparing each line's labels with every row's would take
    lines x rows string compares."""
    ids = panel.groupby(LINE_KEY, dropna=False, sort=False).ngroup().to_numpy()
    first = ~pd.Series(ids).duplicated().to_numpy()
    line_id = dict(zip(text_keys(panel[first]), ids[first]))
    positions = pd.Series(ids).groupby(ids).indices
    return [panel.iloc[positions.get(line_id.get(key), [])] for key in text_keys(lines)]


@dataclass(frozen=True)
class LinePanel:
    """A panel's model cells (capped), their legend labels, the cap's note and each cell's rows."""

    lines: pd.DataFrame
    labels: list[str]
    note: str
    rows: list[pd.DataFrame]


def line_panels(table: pd.DataFrame) -> dict[tuple[str, str], LinePanel]:
    """Per (data set, attack family) panel: its model cells (capped), their labels, the cap note and rows."""
    panels = {}
    for (dataset, family), panel in table.groupby(["dataset", "attack_family"], sort=True):
        lines, note = capped_lines(panel)
        panels[(dataset, family)] = LinePanel(lines, line_labels(lines), note, rows_by_line(panel, lines))
    return panels


def label_colours(panels: dict) -> dict[str, tuple]:
    """One colour per model-cell label across the figure, so one legend serves every panel."""
    labels = list(dict.fromkeys(label for panel in panels.values() for label in panel.labels))
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20").colors
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def figure_legend(fig, colours: dict[str, tuple], extra: list | None = None) -> None:
    handles = [Line2D([], [], color=c, marker="o", ms=3, label=label) for label, c in colours.items()] + (extra or [])
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, title="model cell (mean over seeds)")
