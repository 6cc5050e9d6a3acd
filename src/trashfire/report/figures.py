"""Stage `figures`: every paper figure (PNG and PDF) and a single self-contained HTML report,
drawn from the tables `aggregate`, `timing` and `survival` recorded, so that a plotting change
never re-runs an experiment.

The report (reports/report.html) puts what a reader needs first: the papers' claims tested on
this run (findings.csv) with their verdicts, the headline metrics each with a plain sentence of
what it means, the run's size and its degenerate cells, the figures with how to read them, and
the long tables folded away.

Figures (reports/figures/): accuracy by attack and defence and TRASH by depth and defence
(TRASHFIRE Fig. 1, 4), EVP against the viability threshold and against the number of eps
intervals (EVP paper Fig. 7, 8), accuracy and normalised accuracy against eps (normalised-AUC
paper Fig. 2, 4), brittle-score against robust accuracy (brittle-score paper Fig. 4), and
survival in eps: Kaplan-Meier curves of the samples still standing against eps and their area
against EVP and R.
A figure with nothing to draw is skipped, and the report says why.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import cbook, mlab
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator
from omegaconf import DictConfig
from scipy import stats

from trashfire.core import schema
from trashfire.core.errors import DataError
from trashfire.core.records import atomic_path
from trashfire.metrics import registry, validity
from trashfire.survival import analysis as survival_analysis
from trashfire.survival import epsilon
from trashfire.tables.experiments import read_experiments

log = logging.getLogger(__name__)

# The tables aggregate writes; any of them missing means aggregate has not run.
AGGREGATE_TABLES = ("trash", "trash_summary", "robustness", "tau_table", "evp_tau", "evp_convergence", "auc_table", "curves")
# A model cell without its seed: the lines of the per-cell figures average over seeds.
LINE_KEY = schema.SEEDLESS_LABELS
MAX_LINES = 10  # more lines than this in one panel cannot be told apart

# Every figure as (title, what it shows, how to read it), in the order the report shows them:
# the cost ratio first (the headline), then accuracy, EVP, R, brittleness, the survival model.
CAPTIONS = {
    "trash_by_depth_and_defence": (
        "TRASH by depth, defence and attack family (TRASHFIRE Fig. 4)",
        "TRASH score (training time over expected time to failure) by model depth and defence, benign and adversarial, and adversarial by attack family, on a log axis; violins over cells.",
        "points above the dashed red line at 1 are models cheaper to break than to train; a defence that works sits lower than the undefended violin; a rise with depth means training cost grows faster than the adversary's.",
    ),
    "accuracy_by_attack_and_defence": (
        "Accuracy by defence and attack family (TRASHFIRE Fig. 1)",
        "Benign accuracy by defence, adversarial accuracy by defence and by attack family: violins over cells, diamonds the pooled accuracy over every attacked sample with its 95% Wilson interval.",
        "the drop from the benign panel to the adversarial ones is what the attacks take; a defence helps where its adversarial violin sits above the undefended one; diamonds whose intervals do not overlap differ beyond sampling noise.",
    ),
    "accuracy_eps_curves": (
        "Accuracy against attack strength eps (normalised-AUC paper Fig. 2, 4)",
        "Accuracy (top) and accuracy normalised by the benign accuracy (bottom) against eps in pixel units, mean over seeds with a ±1 SD band; the shaded interval is the one R integrates over.",
        "a curve that stays high for longer is more robust; the bottom row removes differences in benign accuracy, and the area under it over the shaded interval, relative to the interval, is R.",
    ),
    "eps_survival_curves": (
        "Survival in ε: the share of samples still standing against the perturbation size",
        "Kaplan-Meier estimate of the share of attacked samples not yet broken against ε, one panel per data set and attack family, one line per model cell (mean over seeds). Grid families (FGM, PGD): each sample's smallest grid ε that broke it, in the attack's units, points at the grid's ε; minimal-perturbation attacks (DeepFool): the norm of each sample's adversarial example, in its own norm and units, as steps. The legend gives each line's normalised area up to the panel's largest ε.",
        "a line that stays high for longer withstands larger perturbations; its area over the panel's ε range is the table's `area` (1: nobody breaks); a start below 1 at ε = 0 is the samples wrong before any perturbation; linf grid and l2 DeepFool panels are in different norms and do not compare across panels.",
    ),
    "eps_survival_vs_evp_r": (
        "Area under the ε-survival curve against EVP and R",
        "Per eps attack family (rows), the normalised area under each model cell's ε-survival curve against its EVP (left) and R (right), one colour per defence, with Spearman's rank correlation over the sound model cells.",
        "all three come from one attack grid, so a strong positive ρ is expected; points below the trend are cells whose accuracy curve overstates them (samples broken at a small ε but standing at a larger one: the table's n_nonmonotone), and a negative ρ would be a finding to explain.",
    ),
    "evp_vs_tau": (
        "EVP against the viability threshold τ (EVP paper Fig. 7)",
        "Expected viable performance against the viability threshold tau, one line per model cell (mean over seeds); the dotted line is the default tau(K) of the data set.",
        "read each line at the dotted default τ: higher means viable accuracy against stronger attacks; lines that cross rank the models differently at different thresholds.",
    ),
    "evp_convergence": (
        "EVP against the number of eps intervals (EVP paper Fig. 8)",
        "EVP on nested sub-grids of the recorded eps grid against the number of eps intervals.",
        "a line flat at its right end means the eps grid is fine enough for that EVP; a line still moving there means a finer grid would change it.",
    ),
    "brittle_vs_robust_acc": (
        "Brittle-score against robust accuracy (brittle-score paper Fig. 4)",
        "Brittle-score against robust accuracy, one colour per defence, with Spearman's rank correlation per data set over the trained models (filled); predict-time defences (hollow) wrap a trained model's outputs and are outside the paper's claim.",
        "the paper expects the filled points to fall from top left to bottom right (ρ < 0); a ρ near 0 or a large p means no such relation in this run; hollow points far left of their model's filled point are a wrapper that lowers the brittle-score without adding robustness.",
    ),
    "kaplan_meier": (
        "Kaplan-Meier survival per attack family and defence",
        "Kaplan-Meier survival of the attacked samples per attack family and defence (solid) and the selected survival model's predicted survival of the same samples (dashed).",
        "each curve is the share of samples not yet misclassified after that much adversary compute; lower and further left is broken sooner; dashed close to solid means the survival model behind E[T] fits.",
    ),
    "coefficients": (
        "Coefficients of the selected survival model (TRASHFIRE Fig. 3)",
        "Coefficients of the selected survival model with 95% intervals, thick cluster-robust (clusters: the train/test split's groups, trained models by default), thin naive.",
        "an interval clear of 0 is an effect beyond noise; above 0 a longer time to failure (more robust), below 0 a shorter one; dummies are against their reference level, covariates per +1 SD.",
    ),
    "calibration": (
        "Calibration of every survival model (TRASHFIRE Fig. 2)",
        "Calibration of every survival model on the training and test splits: observed against predicted failure probability.",
        "a red curve on the dashed diagonal is perfectly calibrated; above it the model predicts too few failures, below it too many; ICI is the mean distance from the diagonal, and the test panels are the ones that count.",
    ),
}


class Skipped(Exception):
    """A figure with nothing to draw; the message says why and lands in the report."""


# ---------------------------------------------------------------------------------------------
# Reading the recorded tables


def read_table(reports: Path, name: str, *, stage: str = "aggregate", required: bool = True) -> pd.DataFrame | None:
    """A recorded CSV with label columns kept as strings and empty labels as ''. A required
    table that is missing is the user's to produce: one line naming the stage to run."""
    path = reports / name
    if not path.is_file():
        if required:
            raise DataError(f"{path} not found; run `dvc repro {stage}` first")
        return None
    try:
        # round_trip: pandas' default parser can move a float by one ulp, which turns near-equal
        # accuracies into ties and the figures' Spearman rho away from aggregate's
        table = pd.read_csv(path, dtype=schema.TEXT_COLUMNS, float_precision="round_trip")
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise DataError(f"corrupt table {path}: {str(err).splitlines()[0]}; rerun `dvc repro {stage}`") from None
    labels = [c for c in ("pretrained_on", "defence_param") if c in table]
    return table.fillna({c: "" for c in labels})


def read_metrics(reports: Path) -> dict:
    path = reports / "metrics.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} not found; run `dvc repro aggregate` first") from None
    except json.JSONDecodeError as err:
        raise DataError(f"corrupt {path}: {err}; rerun `dvc repro aggregate`") from None


def read_tables(reports: Path) -> dict[str, pd.DataFrame | None]:
    """Every table the figures and the report need; brittle.csv and findings.csv are optional
    (the brittle stage may not have run; an older aggregate wrote no findings)."""
    if not (reports / "experiments.csv").is_file():
        raise DataError(f"{reports / 'experiments.csv'} not found; run `dvc repro timing` first")
    experiments = read_experiments(reports).fillna({"pretrained_on": "", "defence_param": ""})
    tables = {"experiments": experiments}
    tables |= {name: read_table(reports, f"{name}.csv") for name in AGGREGATE_TABLES}
    tables["brittle"] = read_table(reports, "brittle.csv", required=False)
    tables["eps_survival"] = read_table(reports, "eps_survival.csv", required=False)  # runs from before survival in eps have none
    tables["eps_survival_curves"] = read_table(reports, "eps_survival_curves.csv", required=False)
    tables["findings"] = read_table(reports, "findings.csv", required=False)  # runs from before findings have none
    tables["validity"] = read_table(reports, "validity.csv", required=False)  # nor from before the validity flags
    tables["depth_decomposition"] = read_table(reports, "depth_decomposition.csv", required=False)  # nor from before the compute clock
    tables["survival"] = read_table(reports, "survival/aft_comparison.csv", stage="survival")
    tables["logrank"] = read_table(reports, "survival/logrank.csv", stage="survival", required=False)
    # survival runs from before the within-cell concordance and the Kaplan-Meier check have neither
    tables["concordance_within"] = read_table(reports, "survival/concordance_within.csv", stage="survival", required=False)
    tables["km_check"] = read_table(reports, "survival/km_check.csv", stage="survival", required=False)
    return tables


# ---------------------------------------------------------------------------------------------
# Statistics


def wilson_interval(successes: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: unlike the normal approximation it
    stays inside [0, 1] and is sensible at accuracies near 0 or 1."""
    if not n > 0:
        return math.nan, math.nan
    z = stats.norm.ppf(0.5 + level / 2)
    p = successes / n
    denominator = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denominator
    return centre - half, centre + half


def pooled_accuracy(accuracy: pd.Series, n_samples: pd.Series) -> tuple[float, float, float]:
    """Accuracy over every examined sample of a group of cells, with its 95% Wilson interval."""
    n = float(n_samples.sum())
    correct = float((accuracy * n_samples).sum())
    if not n > 0:
        return math.nan, math.nan, math.nan
    return (correct / n, *wilson_interval(correct, n))


def spearman_text(x: pd.Series, y: pd.Series) -> str:
    keep = x.notna() & y.notna()
    if keep.sum() < 3:
        return f"Spearman: n < 3 (n = {int(keep.sum())})"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: rho is NaN, said below
        rho, p = stats.spearmanr(x[keep], y[keep])
    if not np.isfinite(rho):
        return f"Spearman: undefined, constant input (n = {int(keep.sum())})"
    return f"Spearman ρ = {rho:.3f}, {p_text(p)} (n = {int(keep.sum())})"


# ---------------------------------------------------------------------------------------------
# Drawing helpers


def save_figure(fig, folder: Path, stem: str) -> list[Path]:
    paths = []
    for suffix in ("png", "pdf"):
        path = folder / f"{stem}.{suffix}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix, dpi=130, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def defence_order(defences: Iterable[str]) -> list[str]:
    """The undefended control first, so that it sits leftmost and keeps its colour."""
    unique = sorted(set(defences))
    return sorted(unique, key=lambda d: (d != "none", d))


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
# Labels for model cells


def format_value(value) -> str:
    """3-4 significant digits for numbers, '' for missing, the text for anything else."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    return str(value)


def cell_label(row) -> str:
    """'resnet18 · conf 0.5 · 1 ep': what tells one model cell from another in a legend."""
    defence = "no defence" if row["defence"] == "none" else f"{row['defence']} {format_value(row['defence_value'])}"
    parts = [str(row["model"]), defence, epochs_text(row["epochs"])]
    if row.get("pretrained_on", ""):
        parts.append(f"from {row['pretrained_on']}")
    return " · ".join(parts)


def epochs_text(epochs) -> str:
    """'10 ep', or 'imported' for an external model, whose training we do not know."""
    return "imported" if format_value(epochs) == "" else f"{format_value(epochs)} ep"


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


# ---------------------------------------------------------------------------------------------
# Figure 1: accuracy (TRASHFIRE Fig. 1)


def accuracy_panel(ax, cells: pd.DataFrame, by: str, accuracy: str, title: str, colours: dict[str, str] | None) -> None:
    groups = defence_order(cells[by]) if by == "defence" else sorted(cells[by].unique())
    for x, group in enumerate(groups):
        part = cells[cells[by] == group]
        colour = colours[group] if colours else "C7"
        violin(ax, part[accuracy].dropna().to_numpy(), x, colour, width=0.7)
        pooled, lo, hi = pooled_accuracy(part[accuracy], part["n_attack"])
        # at an accuracy of exactly 0 or 1 Wilson's bound lands a rounding error past it
        ax.errorbar(x, pooled, yerr=[[max(pooled - lo, 0.0)], [max(hi - pooled, 0.0)]], fmt="D", color="black", ms=5, capsize=4, zorder=4)
    group_ticks(ax, groups)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(by.replace("_", " "))


def accuracy_figure(experiments: pd.DataFrame, folder: Path) -> list[Path]:
    """TRASHFIRE Fig. 1: benign accuracy by defence, adversarial accuracy by defence and by attack family."""
    if experiments.empty:
        raise Skipped("experiments.csv has no rows")
    cells = experiments.assign(attack_family=schema.attack_family(experiments["attack"], experiments["norm"]))
    benign = cells.drop_duplicates("model_hash")  # one benign measurement per model cell
    colours = defence_colours(cells["defence"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharey=True)
    accuracy_panel(axes[0], benign, "defence", "acc_ben_attack_subset", f"benign, by defence ({len(benign)} model cells)", colours)
    accuracy_panel(axes[1], cells, "defence", "acc_adv", f"adversarial, by defence ({len(cells)} attack cells)", colours)
    accuracy_panel(axes[2], cells, "attack_family", "acc_adv", "adversarial, by attack family", None)
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].set_ylabel("accuracy (fraction correct)")
    handles = [
        Patch(color="C7", alpha=0.4, label="violin + dots: per-cell accuracy"),
        Line2D([], [], marker="D", color="black", ls="", label="pooled accuracy, 95% Wilson interval"),
    ]
    axes[2].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.suptitle("Benign and adversarial accuracy of every cell, by defence and by attack family")
    fig.tight_layout()
    return save_figure(fig, folder, "accuracy_by_attack_and_defence")


# ---------------------------------------------------------------------------------------------
# Figure 2: TRASH (TRASHFIRE Fig. 4)


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
    dropped = 0
    for x, group in enumerate(groups):
        for i, defence in enumerate(defences):
            part = cells[(cells[by] == group) & ((cells["defence"] == defence) if defence else True)]
            values, n_dropped = positive_finite(part[column].astype(float))
            dropped += n_dropped
            offset = (i - (len(defences) - 1) / 2) * width
            violin(ax, values.to_numpy(), x + offset, colours[defence] if defence else "C7", width * 0.9, log=True)
    labels = [depth_label(cells, g) for g in groups] if by == "depth" else groups
    group_ticks(ax, labels)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: plain_number(v) if few_decades(ax) else ""))
    ax.axhline(1.0, color="tab:red", ls="--", lw=1)
    ax.set_xlabel("model depth" if by == "depth" else "attack family")
    return dropped


def trash_figure(trash: pd.DataFrame, folder: Path) -> list[Path]:
    """TRASHFIRE Fig. 4: benign and adversarial TRASH by depth with a violin per defence, and
    adversarial TRASH by attack family; log axis, a dashed line at 1."""
    if trash.empty:
        raise Skipped("trash.csv has no rows")
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


# ---------------------------------------------------------------------------------------------
# Figures 3, 4: EVP (EVP paper Fig. 7, 8)


def default_tau(tau_table: pd.DataFrame, dataset: str) -> tuple[float, int] | None:
    """tau(K) and K of a data set from the tau table, if it lists the data set."""
    rows = tau_table[tau_table["source"].astype(str) == dataset] if "source" in tau_table else tau_table.iloc[:0]
    if rows.empty:
        return None
    return float(rows["tau"].iloc[0]), int(rows["n_classes"].iloc[0])


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


def evp_line_figure(
    table: pd.DataFrame, x: str, xlabel: str, title: str, stem: str, folder: Path, decorate: Callable | None = None, extra: list | None = None
) -> list[Path]:
    """One panel per data set (rows) and attack family (columns), one line per model cell
    with EVP averaged over seeds at each x."""
    datasets, families = panels_by_dataset_and_family(table)
    panels = line_panels(table)
    colours = label_colours(panels)
    fig, axes = panel_grid(len(datasets), len(families))
    for (dataset, family), (lines, labels, note) in panels.items():
        ax = axes[datasets.index(dataset), families.index(family)]
        panel = table[(table["dataset"] == dataset) & (table["attack_family"] == family)]
        for label, (_, line) in zip(labels, lines.iterrows()):
            points = line_rows(panel, line).groupby(x)["evp"].mean()  # mean over seeds
            ax.plot(points.index, points.to_numpy(), color=colours[label], lw=1.4, marker="o" if len(points) < 15 else None, ms=3)
        subtitle = decorate(ax, dataset) if decorate else ""
        ax.set_title("\n".join(filter(None, [f"{dataset} · {family}", subtitle, note and f"({note})"])), fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("EVP (expected viable accuracy)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    hide_unused(axes)
    fig.suptitle(title)
    fig.tight_layout()
    figure_legend(fig, colours, extra)
    return save_figure(fig, folder, stem)


def evp_tau_figure(evp_tau: pd.DataFrame, tau_table: pd.DataFrame, folder: Path) -> list[Path]:
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


def evp_convergence_figure(evp_convergence: pd.DataFrame, folder: Path) -> list[Path]:
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


# ---------------------------------------------------------------------------------------------
# Figure 5: accuracy against eps (normalised-AUC paper Fig. 2, 4)


def eps_axis(panel: pd.DataFrame) -> tuple[str, str]:
    """The units of a panel's eps axis and its label: pixel units as the normalised-AUC paper
    plots them, or the standardised units the model sees where the records predate the pixel
    std (pixel eps is then unknown)."""
    if panel[schema.eps_column("pixel")].notna().all():
        return "pixel", "ε (pixel units, images in [0, 1])"
    return "standardised", "ε (standardised units; pixel std not recorded)"


def r_interval(robustness: pd.DataFrame, panel: pd.DataFrame, dataset: str, family: str, units: str) -> tuple[float, float] | None:
    """The [eps0, eps1] that R integrates over, in the panel's eps `units`; None where R has
    no interval or it cannot be converted to those units."""
    rows = robustness[(robustness["dataset"] == dataset) & (robustness["attack_family"] == family)]
    rows = rows.dropna(subset=["eps0", "eps1"])
    if rows.empty:
        return None
    eps0, eps1 = rows["eps0"].median(), rows["eps1"].median()
    given = str(rows["auc_units"].iloc[0])
    if given != units:
        # the data set's pixel std: the ratio of the curves' two axes
        attacked = panel[panel["eps_standardised"] > 0]
        ratios = (attacked["eps_pixel"] / attacked["eps_standardised"]).dropna()
        if ratios.empty:
            return None
        eps0, eps1 = (schema.convert_eps(eps, given, units, ratios.median()) for eps in (eps0, eps1))
    return (float(eps0), float(eps1)) if np.isfinite([eps0, eps1]).all() else None


def curve_lines(ax_raw, ax_norm, panel: pd.DataFrame, lines: pd.DataFrame, labels: list[str], colours: dict, axis: str) -> None:
    """Mean over seeds at each configured eps (pixel eps differs by a split's std), ±1 SD band."""
    for label, (_, line) in zip(labels, lines.iterrows()):
        points = (
            line_rows(panel, line)
            .groupby("eps")
            .agg(
                x=(axis, "mean"),
                acc=("acc", "mean"),
                acc_sd=("acc", "std"),
                norm=("acc_norm", "mean"),
                norm_sd=("acc_norm", "std"),
                seeds=("acc", "count"),
            )
            .sort_values("x")
        )
        for ax, y, sd in ((ax_raw, "acc", "acc_sd"), (ax_norm, "norm", "norm_sd")):
            ax.plot(points["x"], points[y], color=colours[label], lw=1.4, marker="o", ms=3)
            if points["seeds"].max() >= 2:
                ax.fill_between(points["x"], points[y] - points[sd], points[y] + points[sd], color=colours[label], alpha=0.15, lw=0)


def curves_figure(curves: pd.DataFrame, robustness: pd.DataFrame, folder: Path) -> list[Path]:
    """Normalised-AUC paper Fig. 2 and Fig. 4: raw (top) and normalised (bottom) accuracy
    against eps, a column per data set and attack family."""
    if curves.empty:
        raise Skipped("curves.csv has no rows (no attack with an eps grid)")
    panels = line_panels(curves)
    colours = label_colours(panels)
    fig, axes = panel_grid(2, len(panels), height=3.6)
    shaded = False
    for c, ((dataset, family), (lines, labels, note)) in enumerate(panels.items()):
        panel = curves[(curves["dataset"] == dataset) & (curves["attack_family"] == family)]
        ax_raw, ax_norm = axes[0, c], axes[1, c]
        units, xlabel = eps_axis(panel)
        curve_lines(ax_raw, ax_norm, panel, lines, labels, colours, schema.eps_column(units))
        interval = r_interval(robustness, panel, dataset, family, units)
        for ax in (ax_raw, ax_norm):
            if interval:
                ax.axvspan(*interval, color="grey", alpha=0.15, lw=0)
                shaded = True
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        span = f"R over ε ∈ [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "no R interval"
        ax_raw.set_title("\n".join(filter(None, [f"{dataset} · {family}", span, note and f"({note})"])), fontsize=10)
        ax_raw.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("accuracy")
    axes[1, 0].set_ylabel("accuracy / accuracy at ε = 0")
    fig.suptitle("Accuracy (top) and normalised accuracy (bottom) against attack strength ε; band: ±1 SD over seeds")
    fig.tight_layout()
    figure_legend(fig, colours, [Patch(color="grey", alpha=0.3, label="ε interval of R")] if shaded else [])
    return save_figure(fig, folder, "accuracy_eps_curves")


# ---------------------------------------------------------------------------------------------
# Survival in eps (trashfire.survival.epsilon)

NORM_NAMES = {"inf": "ℓ∞", "2": "ℓ2", "1": "ℓ1", "0": "ℓ0"}


def seed_mean_curve(rows: pd.DataFrame, grid: bool) -> tuple[np.ndarray, np.ndarray]:
    """One model cell's curve averaged over seeds: at the grid's eps, or (a minimal attack,
    whose steps differ per seed) each seed's step function read on the union of their steps."""
    xs = np.unique(rows["eps"].to_numpy(float))
    if not grid:
        xs = np.unique(np.concatenate([xs, np.linspace(0.0, xs.max(), 200)]))
    values = []
    for _, seed in rows.groupby("model_hash"):
        seed = seed.sort_values("eps")
        at = np.searchsorted(seed["eps"].to_numpy(float), xs, side="right") - 1
        values.append(seed["survival"].to_numpy(float)[np.clip(at, 0, None)])
    return xs, np.mean(values, axis=0)


def eps_survival_figure(curves: pd.DataFrame | None, table: pd.DataFrame | None, folder: Path) -> list[Path]:
    """The Kaplan-Meier curves of survival in eps: a panel per data set and attack family, a
    line per model cell (capped as the other per-cell figures), the area in the legend."""
    if curves is None or table is None:
        raise Skipped("eps_survival.csv not found (run `dvc repro aggregate`)")
    if curves.empty:
        raise Skipped("eps_survival_curves.csv has no rows (no eps-grid or minimal-perturbation attack)")
    panels = line_panels(curves)
    colours = label_colours(panels)
    columns = min(3, len(panels))
    fig, axes = panel_grid(math.ceil(len(panels) / columns), columns, width=5.0, height=3.9)
    for ax, ((dataset, family), (lines, labels, note)) in zip(axes.flat, panels.items()):
        panel = curves[(curves["dataset"] == dataset) & (curves["attack_family"] == family)]
        areas = table[(table["dataset"] == dataset) & (table["attack_family"] == family)]
        grid = str(panel["search"].iloc[0]) == "grid"
        for label, (_, line) in zip(labels, lines.iterrows()):
            xs, ys = seed_mean_curve(line_rows(panel, line), grid)
            area = line_rows(areas, line)["area"].mean()
            style = {"marker": "o", "ms": 3} if grid else {"drawstyle": "steps-post"}
            ax.plot(xs, ys, color=colours[label], lw=1.4, label=f"{area:.2f}", **style)
        norm = NORM_NAMES.get(str(panel["norm"].iloc[0]), f"ℓ{panel['norm'].iloc[0]}")
        how = "smallest grid ε that broke the sample" if grid else "norm of the adversarial example"
        ax.set_title("\n".join(filter(None, [f"{dataset} · {family}", how, note and f"({note})"])), fontsize=10)
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


def eps_survival_scatter(table: pd.DataFrame | None, robustness: pd.DataFrame, folder: Path) -> list[Path]:
    """The area against EVP and R per eps family, over the sound model cells."""
    if table is None:
        raise Skipped("eps_survival.csv not found (run `dvc repro aggregate`)")
    both = epsilon.against(table, robustness) if not table.empty and not robustness.empty else pd.DataFrame()
    if both.empty:
        raise Skipped("no model cell has both an eps-survival area and EVP or R (no eps-grid attack)")
    rows = list(both.groupby(["dataset", "attack_family"], sort=True))
    colours = defence_colours(both["defence"])
    fig, axes = panel_grid(len(rows), len(epsilon.RANKED), width=4.6, height=3.8)
    for r, ((dataset, family), group) in enumerate(rows):
        for c, (column, name) in enumerate(epsilon.RANKED.items()):
            ax = axes[r, c]
            for defence in defence_order(group["defence"]):
                part = group[group["defence"] == defence]
                ax.scatter(part[column], part["area"], s=22, color=colours[defence], alpha=0.85, label=defence)
            ax.set_title(f"{dataset} · {family}\n{spearman_text(group[column], group['area'])}", fontsize=9)
            ax.set_xlabel(name)
            ax.set_ylabel("area under the ε-survival curve")
            ax.grid(alpha=0.3)
    axes[0, -1].legend(title="defence", fontsize=7, title_fontsize=7)
    fig.suptitle("Area under the ε-survival curve against EVP and R, sound model cells")
    fig.tight_layout()
    return save_figure(fig, folder, "eps_survival_vs_evp_r")


# ---------------------------------------------------------------------------------------------
# Figure 6: brittle-score (brittle-score paper Fig. 4)


def brittle_figure(brittle: pd.DataFrame | None, folder: Path) -> list[Path]:
    """Brittle-score paper Fig. 4: brittle-score against robust accuracy, one panel per data set."""
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
        for defence, colour in colours.items():
            part = panel[panel["defence"] == defence]
            if not part.empty:  # predict-time defences hollow: 002's correlation is over trained models
                hollow = wrapped[part.index].any()
                ax.scatter(
                    part["brittle_score"],
                    part["robust_acc"],
                    s=28,
                    label=defence + (" (predict-time)" if hollow else ""),
                    alpha=0.85,
                    facecolors="none" if hollow else colour,
                    edgecolors=colour,
                )
        models = panel[~(wrapped | degenerate)]  # the finding's population
        ax.set_title(f"{dataset}, trained models (filled)\n{spearman_text(models['brittle_score'], models['robust_acc'])}", fontsize=10)
        ax.set_xlabel("brittle-score (mean |LIME weight| per feature)")
        attacks = ", ".join(sorted(panel["robust_attack"].astype(str).unique()))
        ax.set_ylabel(f"robust accuracy\nunder {attacks}")
        ax.grid(alpha=0.3)
        ax.legend(title="defence", fontsize=8)
    fig.suptitle("Brittle-score against robust accuracy (the paper expects a negative correlation)")
    fig.tight_layout()
    return save_figure(fig, folder, "brittle_vs_robust_acc")


# ---------------------------------------------------------------------------------------------
# The report: what held first, then what each headline number means, the run, the figures, and
# the long tables folded away, so that a researcher has the result in a minute.

PAPERS = {"001": "EVP", "002": "brittle-score", "003": "TRASHFIRE", "004": "normalised AUC"}
# verdict -> (badge class, word in the count sentence)
VERDICTS = {
    "holds": ("v-holds", "hold"),
    "contradicted": ("v-contradicted", "contradicted"),
    "inconclusive": ("v-inconclusive", "inconclusive"),
    "not testable": ("v-not-testable", "not testable"),
}
FINDING_COLUMNS = set(schema.FINDINGS) - {"clock"}  # findings.csv from before the compute clock has no clock
BRITTLE_FINDING = "002_brittle_negative"  # metrics.json's per-seed correlations belong beside it
LEFT_OUT = "left out of R, EVP, the brittle correlations and the headline means"

# Headline metrics come from the registry (trashfire.metrics.registry.HEADLINE): in its order,
# each with its plain sentence; a metric of metrics.json it does not know (an older run's) is
# still shown, after these, without a sentence. Counts go to the Run line, findings and
# per-seed tests to the Findings section.


def html_table(table: pd.DataFrame, css_class: str = "") -> str:
    """An escaped HTML table with 3-4 significant digits."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(table_cell(v) for v in row.values) + "</tr>" for _, row in table.iterrows())
    classes = f' class="{css_class}"' if css_class else ""
    return f'<div class="wide"><table{classes}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def table_cell(value) -> str:
    """Numbers right-aligned so that digits line up; text (labels, notes) left-aligned."""
    text = html.escape(format_value(value))
    return f'<td class="t">{text}</td>' if isinstance(value, str) else f"<td>{text}</td>"


def how_to_read(text: str) -> str:
    return f'<p class="howto"><b>How to read it:</b> {html.escape(text)}</p>'


def folded(key: str, title: str, rows: int, caption: str, content: str) -> str:
    """A long table behind its name and size, so that the page reads top to bottom in a minute."""
    size = f"{rows} rows" if rows else "nothing to show"
    return f'<details id="{key}"><summary>{html.escape(title)} <span class="size">({size})</span></summary>{how_to_read(caption)}{content}</details>'


ONE_SEED = "n/a (1 seed)"


def interval_text(mean: float, lo: float, hi: float, seeds: float) -> str:
    """A mean and its interval over seeds; from one seed the interval is n/a, never [x, x]."""
    if not np.isfinite(mean):
        return ""
    if seeds < 2:
        return f"{mean:.3g} [{ONE_SEED}]"
    return f"{mean:.3g} [{lo:.3g}, {hi:.3g}]"


def spread_text(mean: float, sd: float, seeds: float) -> str:
    """A mean ± its SD over seeds; from one seed the SD is n/a."""
    if not np.isfinite(mean):
        return ""
    if seeds < 2:
        return f"{mean:.3g} ± {ONE_SEED}"
    return f"{mean:.3g} ± {sd:.2g}"


def drop_empty(table: pd.DataFrame) -> pd.DataFrame:
    """Label columns with nothing in them (pretrained_on without fine-tuning) only take room."""
    empty = [c for c in table.columns if table[c].isna().all() or (table[c].astype(str) == "").all()]
    return table.drop(columns=empty)


def number(value) -> float:
    """A float, NaN for anything missing or not a number (a CSV cell, a JSON null)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def p_text(p: float) -> str:
    return f"p = {p:.2g}" if p >= 1e-4 else "p < 0.0001"


# --- Findings


def verdict_count(verdicts: pd.Series) -> str:
    """'7 hold, 0 contradicted, 2 inconclusive, 1 not testable', any unknown verdict after."""
    counts = verdicts.astype(str).value_counts()
    known = [f"{counts.get(v, 0)} {'holds' if counts.get(v, 0) == 1 and v == 'holds' else word}" for v, (_, word) in VERDICTS.items()]
    other = [f"{n} {v}" for v, n in counts.items() if v not in VERDICTS]
    return ", ".join(known + other)


def verdict_badge(verdict) -> str:
    css, _ = VERDICTS.get(str(verdict), ("v-other", ""))
    return f'<span class="verdict {css}">{html.escape(str(verdict))}</span>'


def measured_text(row: pd.Series) -> str:
    """'12.6 [10.9, 14.3], n = 12' or '0.949, p < 0.0001, n = 9'; '—' where nothing was measured."""
    value, lo, hi, p, n = (number(row.get(k)) for k in ("value", "lo", "hi", "p", "n"))
    measured = f"{value:.3g}" if np.isfinite(value) else "—"
    if np.isfinite(lo) and np.isfinite(hi):
        measured += f" [{lo:.3g}, {hi:.3g}]"
    parts = [measured] + ([p_text(p)] if np.isfinite(p) else []) + ([f"n = {int(n)}"] if np.isfinite(n) else [])
    return ", ".join(parts)


def test_text(test: dict) -> str:
    """A Spearman test from metrics.json ({rho, p, n}) as 'ρ = -0.171, p = 0.19, n = 60'."""
    rho, p, n = number(test.get("rho")), number(test.get("p")), number(test.get("n"))
    parts = [f"ρ = {rho:.3g}" if np.isfinite(rho) else "ρ undefined"]
    return ", ".join(parts + ([p_text(p)] if np.isfinite(p) else []) + ([f"n = {int(n)}"] if np.isfinite(n) else []))


def per_seed_text(per_seed) -> str:
    """metrics.json's brittle_spearman_per_seed on one line: a pooled rho can hide seeds that disagree."""
    if not isinstance(per_seed, dict) or not per_seed:
        return ""
    seeds = "; ".join(f"seed {seed}: {test_text(test)}" for seed, test in per_seed.items() if isinstance(test, dict))
    return f"Per seed, brittle-score against robust accuracy: {seeds}."


def finding_row(row: pd.Series, beside: str = "") -> str:
    paper = format_value(row["paper"])
    clock = row.get("clock")  # NaN: a claim without time in it
    on = f" (on the {clock} clock)" if isinstance(clock, str) and clock else ""
    claim = f'{html.escape(format_value(row["claim"]))}<div class="test">test{html.escape(on)}: {html.escape(format_value(row["test"]))}</div>'
    detail = html.escape(format_value(row["detail"])) + (f'<div class="test">{html.escape(beside)}</div>' if beside else "")
    cells = [verdict_badge(row["verdict"]), html.escape(f"{paper} {PAPERS.get(paper, '')}".strip()), claim, html.escape(measured_text(row)), detail]
    return "<tr>" + "".join(f'<td class="t">{cell}</td>' for cell in cells) + "</tr>"


def findings_table(findings: pd.DataFrame, per_seed: str) -> str:
    rows = "".join(finding_row(row, per_seed if row["id"] == BRITTLE_FINDING else "") for _, row in findings.iterrows())
    head = "".join(f"<th>{name}</th>" for name in ("verdict", "paper", "claim and test", "measured", "detail"))
    return f'<div class="wide"><table class="findings"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def findings_section(findings: pd.DataFrame | None, metrics: dict, degenerate: pd.DataFrame) -> str:
    """One row per claim of the four papers tested on this run, after a count of the verdicts."""
    per_seed = per_seed_text(metrics.get("brittle_spearman_per_seed"))
    aside = f'<p class="test">{html.escape(per_seed)}</p>' if per_seed else ""
    if findings is None:
        return not_computed("findings.csv not found (a run from before findings; rerun `dvc repro aggregate`)") + aside
    if findings.empty or not FINDING_COLUMNS <= set(findings):
        return not_computed("findings.csv has no findings in its expected columns; rerun `dvc repro aggregate`") + aside
    left_out = f" {len(degenerate)} degenerate model cell(s) {LEFT_OUT} (see Run)." if len(degenerate) else ""
    lead = f'<p class="lead">{len(findings)} claims of the four papers tested on this run: <b>{html.escape(verdict_count(findings["verdict"]))}</b>.{html.escape(left_out)}</p>'
    placed = BRITTLE_FINDING in set(findings["id"])
    return lead + findings_table(findings, per_seed) + ("" if placed else aside)


# --- Headline and run


def metric_value(value) -> str:
    if isinstance(value, dict):
        return test_text(value)
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, list):
        return json.dumps(value)
    return format_value(value) or "—"


def metric_rows(name: str, value, meaning: str) -> list[tuple[str, str, str]]:
    """A metric as (name, value, meaning) rows; a dict of tests (one per data set) gives one row each,
    an empty one a row with nothing to show (e.g. a survival run from before the metric)."""
    if isinstance(value, dict) and not value:
        return [(name, "—", meaning)]
    if isinstance(value, dict) and "rho" not in value:
        return [row for key, inner in value.items() for row in metric_rows(f"{name} · {key}", inner, meaning)]
    return [(name, metric_value(value), meaning)]


def headline_section(metrics: dict) -> str:
    meanings = registry.meanings()
    elsewhere = registry.in_section("run") + registry.in_section("findings") + registry.in_section("validity") + registry.in_section("tables")
    shown = {k: v for k, v in metrics.items() if k not in elsewhere}
    order = [k for k in meanings if k in shown] + sorted(k for k in shown if k not in meanings)
    rows = [row for key in order for row in metric_rows(key, shown[key], meanings.get(key, ""))]
    body = "".join(
        f'<tr><td class="t m">{html.escape(name)}</td><td class="v">{html.escape(value)}</td><td class="t">{html.escape(meaning)}</td></tr>'
        for name, value, meaning in rows
    )
    note = '<p class="test">Means and medians leave degenerate model cells out.</p>'
    return f'<div class="wide"><table class="headline"><tbody>{body}</tbody></table></div>{note}'


def validity_section(flags: pd.DataFrame | None, metrics: dict) -> str:
    """Per flag, how many sound model cells tripped it of those checked, then the cells that
    tripped any, with what was seen."""
    if flags is None:
        return not_computed("validity.csv not found (a run from before the validity flags; rerun `dvc repro aggregate`)")
    counts = metrics.get("validity_flags") or {}
    rows = "".join(
        f'<tr><td class="t m">{html.escape(name)}</td><td class="v">{c.get("tripped", 0)} of {c.get("checked", 0)}</td>'
        f'<td class="t">{html.escape(validity.MEANINGS[name])}</td></tr>'
        for name, c in counts.items()
        if name in validity.MEANINGS
    )
    lead = (
        '<p class="lead">Signs that an evaluation is fooled rather than the model robust, per model cell '
        "(tripped of checked, degenerate cells left out); a flag this run cannot check says why in validity.csv.</p>"
    )
    tripped = flags[flags["flags"].fillna("").astype(str).str.len() > 0]
    if tripped.empty:
        return lead + f'<div class="wide"><table class="headline"><tbody>{rows}</tbody></table></div><p>No model cell tripped a flag.</p>'
    seen = tripped.apply(lambda r: "; ".join(f"{name}: {r[f'{name}_detail']}" for name in str(r["flags"]).split(", ")), axis=1)
    listing = drop_empty(tripped[[c for c in schema.REPORT_CELL if c in tripped]].assign(flags=tripped["flags"], seen=seen)).reset_index(drop=True)
    caption = f"{len(tripped)} model cell(s) tripped at least one flag"
    return (
        lead
        + f'<div class="wide"><table class="headline"><tbody>{rows}</tbody></table></div>'
        + folded("validity-cells", caption, len(listing), "what each flag saw, per model cell", html_table(listing))
    )


def degenerate_cells(experiments: pd.DataFrame) -> pd.DataFrame:
    """The model cells timing flagged degenerate (benign accuracy not above chance by the margin), one row each."""
    if "degenerate" not in experiments or experiments.empty:
        return experiments.iloc[:0]
    flagged = experiments[experiments["degenerate"].astype(str).str.lower() == "true"]  # bool, or text in an odd CSV
    flagged = flagged.drop_duplicates("model_hash") if "model_hash" in flagged else flagged
    return drop_empty(flagged[[c for c in schema.REPORT_DEGENERATE if c in flagged]]).reset_index(drop=True)


def degenerate_text(degenerate: pd.DataFrame) -> str:
    if degenerate.empty:
        return "<p>Degenerate model cells: none (every model cell's benign accuracy exceeds chance by the margin).</p>"
    listing = html_table(degenerate)
    if len(degenerate) > 10:
        listing = f"<details><summary>{len(degenerate)} degenerate model cells</summary>{listing}</details>"
    return f'<p class="warn">{len(degenerate)} degenerate model cell(s): benign accuracy does not exceed chance (1/K) by the margin; {LEFT_OUT}.</p>{listing}'


def run_section(metrics: dict, experiments: pd.DataFrame, degenerate: pd.DataFrame) -> str:
    """What was run, in one line: a reader judges every number above against it."""
    count = lambda column: experiments[column].nunique() if column in experiments else "?"  # noqa: E731
    datasets = ", ".join(sorted(experiments["dataset"].astype(str).unique())) if "dataset" in experiments else "?"
    line = (
        f"{datasets}: {count('train_hash')} trained cells over {count('seed')} seeds → {count('model_hash')} model cells "
        f"(with predict-time defences) → {len(experiments)} attack cells (attack × strength); "
        f"{len(degenerate)} degenerate"
    )
    if "n_evp_curves" in metrics:
        line += f"; {metrics['n_evp_curves']} EVP curves, {metrics.get('n_evp_curves_short_of_nonviability', '?')} still viable at the largest eps"
    if "clock" in metrics:
        line += f"; times on the {metrics['clock']} clock"
    return f'<p class="lead">{html.escape(line)}.</p>{degenerate_text(degenerate)}'


# --- Folded tables


TABLE_CAPTIONS = {
    "tau": "τ(K) is the accuracy a K-class model must keep to count as viable (Cohen's w against chance 1/K); EVP counts accuracy only while it is at least τ.",
    "trash": "one row per model cell and attack family; TRASH = t_train / E[T] as mean [95% bootstrap interval over seeds]; above 1 the attack costs less than training; f is failures per unit of the clock (per second, or per FLOP on the compute clock).",
    "trash_clocks": "median TRASH over seeds and strengths on each clock: trash_adv_flops divides training FLOPs by the FLOPs spent until failure (the model's work: the same on any machine); the process and wall columns divide seconds by seconds, this machine's prices of the same work, so only they change between machines.",
    "depth": "per depth of the undefended models: E_Q, the queries to failure per sample (restricted to the budget: what the model resists), beside the latency per query in FLOPs and in seconds (what each query costs); E_T on each clock is roughly their product. TRASHFIRE says deeper models gain in E[T] through latency, not through queries (finding 003_depth_latency_not_queries).",
    "auc": "one row per model cell and attack family; R is the area under normalised accuracy over the eps interval (1 no loss, 0 lost at once), S = 1 − R, mean ± SD over seeds.",
    "robustness": "one row per trained seed, model cell and eps attack family; auc_R is the R of the table above for one seed; `note` says why a value is missing or only a lower bound. Per curve:",
    "brittle": "one row per model cell; a higher brittle-score means larger LIME weights per superpixel; R.I. is the % by which it is below the undefended model's; robust_acc is the accuracy under the named attack.",
    "survival": "one row per survival model and the two baselines; lower AIC/BIC fit better; concordance 0.5 is a coin toss, 1 perfect; ICI and E50 are calibration errors (lower is better); `selected` feeds E[T] into TRASH.",
    "logrank": "each defence against none within an attack family; a small p means the two survival curves differ.",
    "concordance_within": "held-out (test) concordance with only samples of one attack cell compared, pooled over cells by their comparable pairs, over every attack family (all) and per family: whether a model knows which samples of one attack fail first, beyond which attacks are costly; the baselines give every sample of a cell one score, 0.5 here by construction. Training values are in survival/concordance_within.csv.",
    "km_check": "one row per attack cell, furthest off first: E_T is the selected model's restricted mean to the cell's budget t_star (what TRASH uses), E_T_km the Kaplan-Meier restricted mean of the cell's samples to the same t_star, with no model; flagged where their ratio is off 1 by more than the tolerance (survival.km_check_tolerance). Flagged cells are misfitted by the model: compare its dashed curve with the Kaplan-Meier one, try another fitter (survival.chosen; Table I's km_ columns compare them), or read E_T_km for those cells.",
    "eps_survival": "one row per model cell and attack family with an eps grid (FGM, PGD) or a minimal perturbation (DeepFool); area is the normalised area under the share of samples still standing against eps up to eps_max (1: nobody breaks), area_lo and area_hi bound it where the grid leaves a sample's threshold between two grid points; median_eps is where half are broken (empty: more than half stand at eps_max); n_nonmonotone counts samples broken at some eps but standing at a larger one.",
    "cards": "one JSON card per trained model under reports/cards/, holding its model cells (predict-time defences) with their accuracy, attacks, TRASH, EVP and R; `degenerate` counts its cells at chance (no column: cards from before the flag).",
}


def trash_clocks_section(trash: pd.DataFrame) -> str:
    """TRASH on every clock side by side: the median over seeds and strengths per data set,
    model, defence and attack family."""
    columns = [f"trash_adv_{c}" for c in schema.CLOCKS if f"trash_adv_{c}" in trash]
    if trash.empty or not columns:
        return not_computed("trash.csv has no TRASH per clock (a run from before the compute clock; rerun `dvc repro aggregate`)")
    rows = trash[~trash["degenerate"].astype(bool)] if "degenerate" in trash else trash
    keys = ["dataset", "model", "epochs", "defence", "defence_value", "attack_family"]
    table = rows.groupby(keys, dropna=False)[columns].median().reset_index()
    return html_table(drop_empty(table))


def depth_section(decomposition: pd.DataFrame | None) -> str:
    if decomposition is None or decomposition.empty:
        return not_computed("depth_decomposition.csv has no rows (needs undefended models; a run from before the compute clock: rerun `dvc repro aggregate`)")
    return html_table(drop_empty(decomposition))


def trash_summary_section(summary: pd.DataFrame) -> str:
    if summary.empty:
        return not_computed("trash_summary.csv has no rows")
    shown = summary.assign(
        trash_adv=[interval_text(*v) for v in summary[["trash_adv_mean", "trash_adv_lo", "trash_adv_hi", "n_seeds"]].to_numpy(float)],
        trash_ben=[interval_text(*v) for v in summary[["trash_ben_mean", "trash_ben_lo", "trash_ben_hi", "n_seeds"]].to_numpy(float)],
    )
    columns = schema.REPORT_SUMMARY + ["attack_family", "n_seeds", "trash_adv", "trash_ben", "f_ben_mean", "f_adv_mean"]
    return html_table(drop_empty(shown[columns]))


def auc_section(auc: pd.DataFrame) -> str:
    if auc.empty:
        return not_computed("auc_table.csv has no rows (no attack with an eps grid)")
    shown = auc.assign(
        R=[spread_text(*v) for v in auc[["R_mean", "R_sd", "n_seeds"]].to_numpy(float)],
        S=[spread_text(*v) for v in auc[["S_mean", "S_sd", "n_seeds"]].to_numpy(float)],
    )
    columns = schema.REPORT_SUMMARY + ["attack_family", "n_seeds", "R", "S"]
    return html_table(drop_empty(shown[columns]))


def robustness_section(robustness: pd.DataFrame) -> str:
    if robustness.empty:
        return not_computed("robustness.csv has no rows (no attack with an eps grid)")
    columns = schema.report_robustness(registry.curve_metric_names())
    return html_table(drop_empty(robustness[[c for c in columns if c in robustness]]))


def robustness_caption() -> str:
    """How to read robustness.csv, with the meaning of each per-curve metric of the registry."""
    meanings = "; ".join(f"{name}, {meaning}" for name, meaning in registry.curve_meanings().items())
    return f"{TABLE_CAPTIONS['robustness']} {meanings}."


def eps_survival_section(table: pd.DataFrame | None) -> str:
    return listed(table, "eps_survival.csv", "aggregate", schema.REPORT_EPS_SURVIVAL, " (no eps-grid or minimal-perturbation attack)")


def brittle_section(brittle: pd.DataFrame | None) -> str:
    return listed(brittle, "brittle.csv", "brittle", schema.REPORT_BRITTLE)


def listed(table: pd.DataFrame | None, name: str, stage: str, columns: list[str], why_empty: str = "") -> str:
    """An optional table's report columns, or why there is nothing to show."""
    if table is None:
        return not_computed(f"{name} not found (run `dvc repro {stage}`)")
    if table.empty:
        return not_computed(f"{name} has no rows{why_empty}")
    return html_table(drop_empty(table[[c for c in columns if c in table]]))


def baseline_sentences(comparison: pd.DataFrame) -> list[str]:
    needed = {"status", "model", "test_concordance", "beats_baselines"}
    if not needed <= set(comparison):
        return ["The survival table has no baselines; rerun `dvc repro survival`."]
    baselines = comparison[comparison["status"] == "baseline"]
    bar = " and ".join(f"{row['model'].lower()} {format_value(row['test_concordance'])}" for _, row in baselines.iterrows())
    lines = []
    for _, row in comparison[comparison["status"] == "fitted"].iterrows():
        verdict = "beats both baselines" if str(row["beats_baselines"]).lower() == "true" else "does not beat both baselines"
        lines.append(f"{row['model']} {verdict} on test concordance: {format_value(row['test_concordance'])} against {bar}.")
    return lines


def card_row(path: Path, reports: Path) -> dict:
    """A card's training configuration, the defences of the model cells built on it and how
    many of them are degenerate (None for cards written before the flag)."""
    try:
        card = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        card = {}
    card = card if isinstance(card, dict) else {}
    training = card.get("training") if isinstance(card.get("training"), dict) else card
    cells = [c for c in card.get("model_cells", []) if isinstance(c, dict)] if isinstance(card.get("model_cells"), list) else []
    defences = {str(c["defence"].get("defence")) if isinstance(c.get("defence"), dict) else str(c.get("defence")) for c in cells}
    flagged = sum(c.get("degenerate") is True for c in cells) if any("degenerate" in c for c in cells) else None
    provenance = card.get("provenance") if isinstance(card.get("provenance"), dict) else {}  # cards before imports lack it
    return (
        {"card": str(path.relative_to(reports))}
        | {k: training.get(k) for k in schema.REPORT_CARD}
        | {"t_train": provenance.get("t_train_source", "measured")}
        | {"model cells": len(cells), "defences": ", ".join(defence_order(defences)), "degenerate": flagged}
    )


def card_paths(reports: Path) -> list[Path]:
    return sorted((reports / "cards").glob("*.json"))


def cards_section(reports: Path) -> str:
    paths = card_paths(reports)
    if not paths:
        return not_computed("no model cards in cards/")
    return html_table(drop_empty(pd.DataFrame([card_row(p, reports) for p in paths])))


def rows_of(table: pd.DataFrame | None) -> int:
    return 0 if table is None else len(table)


def survival_tables(comparison: pd.DataFrame, logrank: pd.DataFrame | None, within: pd.DataFrame | None = None, km_check: pd.DataFrame | None = None) -> str:
    """Table I folded, after one plain sentence per fitted model on whether it beats both
    baselines on test concordance (visible: it says whether E[T] is worth anything); the
    within-cell concordance; the Kaplan-Meier check of E[T], its summary in plain words; then
    the log-rank tests of each defence against none."""
    sentences = "".join(f"<li>{html.escape(line)}</li>" for line in baseline_sentences(comparison))
    per_family = [c for c in comparison if "[" in str(c)] + [c for c in ("km_worst_cells",) if c in comparison]  # in the tables below
    markup = f'<h3>Survival models against the two baselines</h3><ul class="compact">{sentences}</ul>' + folded(
        "table-survival",
        "Survival model comparison (TRASHFIRE Table I)",
        len(comparison),
        TABLE_CAPTIONS["survival"],
        html_table(drop_empty(comparison.drop(columns=per_family))),
    )
    if within is not None and not within.empty:
        shown = within.pivot(index="model", columns="attack_family", values="test_concordance_within")
        families = ["all"] + sorted(c for c in shown.columns if c != "all")
        shown = shown.reindex(index=list(dict.fromkeys(within["model"])), columns=[c for c in families if c in shown.columns])
        markup += folded(
            "table-concordance-within",
            "Test concordance within attack cells, per attack family",
            len(shown),
            TABLE_CAPTIONS["concordance_within"],
            html_table(shown.rename_axis(None, axis=1).reset_index()),
        )
    if km_check is not None and not km_check.empty:
        model = comparison.loc[comparison["selected"].astype(str).str.lower() == "true", "model"] if "selected" in comparison else pd.Series(dtype=str)
        lines = survival_analysis.km_sentences(km_check, str(model.iloc[0]) if len(model) else "the selected model")
        worst = km_check.assign(off=km_check["log_ratio"].abs().fillna(np.inf)).sort_values("off", ascending=False, kind="stable").drop(columns="off")
        markup += f'<h3>E[T] against Kaplan-Meier</h3><ul class="compact">{"".join(f"<li>{html.escape(line)}</li>" for line in lines)}</ul>'
        markup += folded(
            "table-km-check", "E[T] against the Kaplan-Meier restricted mean per attack cell", len(worst), TABLE_CAPTIONS["km_check"], html_table(worst)
        )
    if logrank is not None and not logrank.empty:
        markup += folded(
            "table-logrank",
            "Log-rank tests per attack family, each defence against none (weighted samples)",
            len(logrank),
            TABLE_CAPTIONS["logrank"],
            html_table(logrank),
        )
    return markup


def tables_section(tables: dict, reports: Path) -> str:
    t = tables
    return "".join(
        [
            folded("table-tau", "Viability threshold τ(K) (EVP paper Table I)", rows_of(t["tau_table"]), TABLE_CAPTIONS["tau"], html_table(t["tau_table"])),
            folded("table-trash", "TRASH score over seeds", rows_of(t["trash_summary"]), TABLE_CAPTIONS["trash"], trash_summary_section(t["trash_summary"])),
            folded("table-trash-clocks", "TRASH on every clock", rows_of(t["trash"]), TABLE_CAPTIONS["trash_clocks"], trash_clocks_section(t["trash"])),
            folded(
                "table-depth",
                "E[T] by depth: queries to failure and latency per query (TRASHFIRE's depth claim)",
                rows_of(t["depth_decomposition"]),
                TABLE_CAPTIONS["depth"],
                depth_section(t["depth_decomposition"]),
            ),
            folded(
                "table-auc",
                "Normalised robustness AUC R and sensitivity S (normalised-AUC paper, appendix tables)",
                rows_of(t["auc_table"]),
                TABLE_CAPTIONS["auc"],
                auc_section(t["auc_table"]),
            ),
            folded("table-robustness", "EVP and R per cell", rows_of(t["robustness"]), robustness_caption(), robustness_section(t["robustness"])),
            folded(
                "table-brittle",
                "Brittle-score and relative improvement (brittle-score paper Table 1)",
                rows_of(t["brittle"]),
                TABLE_CAPTIONS["brittle"],
                brittle_section(t["brittle"]),
            ),
            folded(
                "table-eps-survival",
                "Survival in ε per cell",
                rows_of(t["eps_survival"]),
                TABLE_CAPTIONS["eps_survival"],
                eps_survival_section(t["eps_survival"]),
            ),
            survival_tables(t["survival"], t["logrank"], t.get("concordance_within"), t.get("km_check")),
            folded("table-cards", "Model cards", len(card_paths(reports)), TABLE_CAPTIONS["cards"], cards_section(reports)),
        ]
    )


def not_computed(reason: str) -> str:
    return f'<p class="missing">not computed: {html.escape(reason)}</p>'


# --- Figures


def caption_for(path: Path) -> tuple[str, str, str]:
    """(title, what it shows, how to read it) of a figure."""
    if path.stem in CAPTIONS:
        return CAPTIONS[path.stem]
    if path.parent.name == "coefficients":
        sign = (
            "above 0 a higher hazard, i.e. earlier failure" if path.stem == "cox" else "above 0 a longer time to failure (more robust), below 0 a shorter one"
        )
        return (
            f"Coefficients of the {path.stem} survival model",
            "95% intervals (thick cluster-robust, thin naive): dummies against their reference level, covariates per +1 SD (TRASHFIRE Fig. 3).",
            f"an interval clear of 0 is an effect beyond noise: {sign}; a thick bar much wider than the thin one means samples of one model fail together.",
        )
    return path.stem.replace("_", " "), "a figure of the survival stage.", "see the survival stage's documentation."


def figure_order(path: Path) -> tuple[int, str]:
    """The order of CAPTIONS (the headline's story), then the per-model coefficient plots."""
    stems = list(CAPTIONS)
    rank = stems.index(path.stem) if path.stem in stems and path.parent.name != "coefficients" else len(stems)
    return rank, str(path)


def figure_block(path: Path, reports: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    name = html.escape(str(path.relative_to(reports)) if path.is_relative_to(reports) else path.name)
    title, shows, read = caption_for(path)
    return (
        f'<figure id="{figure_id(path)}"><h3>{html.escape(title)} <span class="size">{name}</span></h3>'
        f"<p>{html.escape(shows)}</p>{how_to_read(read)}"
        f'<img alt="{name}" src="data:image/png;base64,{data}"></figure>'
    )


def figure_id(path: Path) -> str:
    prefix = "fig-coef-" if path.parent.name == "coefficients" else "fig-"
    return html.escape(prefix + path.stem)


def figures_section(images: list[Path], reports: Path, skipped: dict[str, str] | None) -> str:
    """Every figure with its how-to-read caption; the per-model coefficient plots folded."""
    images = sorted(images, key=figure_order)
    main = [p for p in images if p.parent.name != "coefficients"]
    per_model = [p for p in images if p.parent.name == "coefficients"]
    links = " · ".join(f'<a href="#{figure_id(p)}">{html.escape(caption_for(p)[0])}</a>' for p in main)
    markup = f'<p class="test">{links}</p>' + "".join(figure_block(p, reports) for p in main)
    if per_model:
        markup += (
            f'<details><summary>Coefficients of every fitted survival model <span class="size">({len(per_model)} figures)</span>'
            f"</summary>{''.join(figure_block(p, reports) for p in per_model)}</details>"
        )
    return markup + "".join(f"<h3>{html.escape(stem)}</h3>{not_computed(reason)}" for stem, reason in (skipped or {}).items())


# --- The page


STYLE = """body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1280px;margin:1.2em auto;padding:0 1em;color:#222}
h1{margin:0 0 .2em;font-size:1.7em}h2{border-bottom:1px solid #ccc;margin:1.4em 0 .4em;font-size:1.3em}h3{margin:1.6em 0 .2em;font-size:1.05em}
nav{color:#555}nav a{margin-right:1.1em}
table{border-collapse:collapse;margin:.4em 0 .8em;font-size:.85em}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:right;vertical-align:top;max-width:30em}th{background:#f3f3f3;text-align:left}
td.t{text-align:left}.wide{overflow-x:auto}
table.findings{width:100%;font-size:.88em}table.findings td:nth-child(3){min-width:22em}table.findings td:nth-child(4){white-space:nowrap}
table.headline td{max-width:58em}table.headline td.m{font-family:ui-monospace,monospace;font-size:.95em;white-space:nowrap}
table.headline td.v{font-weight:600;white-space:nowrap}
.verdict{display:inline-block;padding:1px 9px;border-radius:9px;font-weight:600;white-space:nowrap;color:#fff}
.v-holds{background:#1a7f37}.v-contradicted{background:#cf222e}.v-inconclusive{background:#b07d00}.v-not-testable,.v-other{background:#6e7781}
.lead{font-size:1.05em;margin:.3em 0 .5em}.test{color:#666;font-size:.9em;margin:.15em 0}.size{color:#888;font-weight:normal;font-size:.85em}
.howto{color:#333;font-size:.92em;margin:.2em 0 .5em}.warn{color:#8a4b00}
details{margin:.35em 0;border:1px solid #e3e3e3;border-radius:4px;padding:.3em .7em}summary{cursor:pointer;font-weight:600}
figure{margin:0}ul.compact{margin:.2em 0 .5em;padding-left:1.4em;font-size:.92em}img{max-width:100%;border:1px solid #eee}.missing{color:#a33;font-style:italic}"""

SECTIONS = (
    ("findings", "Findings"),
    ("validity", "Validity flags"),
    ("headline", "Headline metrics"),
    ("run", "Run"),
    ("figures", "Figures"),
    ("tables", "Tables"),
)


def report_html(reports: Path, images: list[Path], skipped: dict[str, str] | None = None) -> Path:
    """One offline page: findings, headline metrics with their meaning, the run, every figure
    with how to read it, every table folded; images inlined as data URIs so that the page can
    be mailed or archived on its own."""
    reports = Path(reports)
    tables, metrics = read_tables(reports), read_metrics(reports)
    degenerate = degenerate_cells(tables["experiments"])
    content = {
        "findings": findings_section(tables["findings"], metrics, degenerate),
        "validity": validity_section(tables["validity"], metrics),
        "headline": headline_section(metrics),
        "run": run_section(metrics, tables["experiments"], degenerate),
        "figures": figures_section(images, reports, skipped),
        "tables": '<p class="test">Click a name to open its table.</p>' + tables_section(tables, reports),
    }
    toc = "".join(f'<a href="#{key}">{title}</a>' for key, title in SECTIONS)
    body = "".join(f'<h2 id="{key}">{title}</h2>{content[key]}' for key, title in SECTIONS)
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>trashfire report</title>'
        f"<style>{STYLE}</style></head><body><h1>trashfire report</h1><nav>Contents: {toc}</nav>{body}</body></html>\n"
    )
    path = reports / "report.html"
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# The stage


def draw_figures(tables: dict, folder: Path) -> tuple[list[Path], dict[str, str]]:
    """Every paper figure; one with nothing to draw is logged and its reason kept for the report."""
    drawings = {
        "accuracy_by_attack_and_defence": lambda: accuracy_figure(tables["experiments"], folder),
        "trash_by_depth_and_defence": lambda: trash_figure(tables["trash"], folder),
        "evp_vs_tau": lambda: evp_tau_figure(tables["evp_tau"], tables["tau_table"], folder),
        "evp_convergence": lambda: evp_convergence_figure(tables["evp_convergence"], folder),
        "accuracy_eps_curves": lambda: curves_figure(tables["curves"], tables["robustness"], folder),
        "brittle_vs_robust_acc": lambda: brittle_figure(tables["brittle"], folder),
        "eps_survival_curves": lambda: eps_survival_figure(tables["eps_survival_curves"], tables["eps_survival"], folder),
        "eps_survival_vs_evp_r": lambda: eps_survival_scatter(tables["eps_survival"], tables["robustness"], folder),
    }
    written, skipped = [], {}
    for stem, draw in drawings.items():
        try:
            written += draw()
        except Skipped as reason:
            log.info("skipped %s: %s", stem, reason)
            skipped[stem] = str(reason)
    return written, skipped


def survival_images(reports: Path) -> list[Path]:
    folder = reports / "survival"
    return sorted(folder.glob("*.png")) + sorted((folder / "coefficients").glob("*.png"))


def draw_report(cfg: DictConfig) -> list[Path]:
    reports = Path(cfg.paths.reports)
    folder = reports / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    tables = read_tables(reports)  # every missing input is reported before anything is drawn
    read_metrics(reports)
    written, skipped = draw_figures(tables, folder)
    drawn = [p for p in written if p.suffix == ".png"]
    written.append(report_html(reports, drawn + survival_images(reports), skipped))
    log.info("wrote %d figures (PNG and PDF) to %s and %s", len(drawn), folder, written[-1])
    return written
