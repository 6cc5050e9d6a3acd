"""Table I of the survival stage: each fitted model's scores on the training and test parts
(information criteria, concordance over samples and within attack cells, calibration) beside
two baselines that rank samples by what their attack cell alone tells, the verdict whether a
model beats them, and the table's LaTeX and per-family within-cell views."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.survival import fitters as F
from trashfire.survival.convergence import CONVERGED_GAIN

SCORE_COLUMNS = [
    "log_likelihood",
    "k",
    "n",
    "n_events",
    "AIC",
    "BIC",
    "concordance",
    "test_concordance",
    "concordance_within",
    "test_concordance_within",
    "t0",
    "ICI",
    "test_ICI",
    "E50",
    "test_E50",
]
CONVERGENCE_COLUMNS = ["converged", "gradient_norm", "newton_gain", "starts", "iterations"]  # survival.convergence: where each fit stopped
WITHIN_PAIRS = ["pairs_within", "test_pairs_within"]  # comparable pairs within attack cells, per part
KM_COLUMNS = ["km_median_abs_log_ratio", "km_share_flagged", "km_worst_cells"]  # per AFT fitter: its E[T] against Kaplan-Meier
FAMILY = "attack_family"
ALL_FAMILIES = "all"  # concordance_within.csv's row over every attack family
COX_NOTE = "AIC and BIC from the partial likelihood: comparable among Cox fits only"
CELL = "attack_hash"
BASELINE_NOTE = "a ranking of samples, not a survival model: no likelihood (AIC, BIC) and no survival probabilities (ICI, E50)"


def table_columns(columns) -> list[str]:
    """Table I's order: the scores, then the within-cell pairs and the per-family within-cell
    concordance (train, then test), the Kaplan-Meier check, anything else, the note."""
    leading = ["fitter", "model", "status", "aft"] + SCORE_COLUMNS + ["beats_baselines", "split_by", "penalizer", "optimiser", "attempts", *CONVERGENCE_COLUMNS]
    per_family = [c for prefix in ("", "test_") for c in sorted(columns) if c.startswith(f"{prefix}concordance_within[")]
    middle = WITHIN_PAIRS + per_family + KM_COLUMNS
    placed = set(leading) | set(middle) | {"note"}
    return leading + [c for c in middle if c in set(columns)] + sorted(set(columns) - placed) + ["note"]


def score(fit: F.Fit, train: pd.DataFrame, test: pd.DataFrame, t0: float, axes: tuple) -> dict[str, Any]:
    """One row of Table I; a score that cannot be computed is NaN with its reason in `note`."""
    row: dict[str, Any] = F.information_criteria(fit, train)
    fit.criteria = dict(row)  # the one AIC: Table I's, which also selects the cure model
    row |= {"n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum()), "t0": t0}
    notes = list(fit.warnings) + ([COX_NOTE] if fit.is_cox else [])
    for prefix, part, ax in (("", train, axes[0]), ("test_", test, axes[1])):
        ranked = {}  # the part's ranking, predicted once for both concordances (a cure model's costs a hypergeometric function per row)

        def ranking_of(rows, ranked=ranked):
            if "ranking" not in ranked:
                ranked["ranking"] = F.survival_ranking(fit, F.covariates_of(rows))
            return ranked["ranking"]

        row[f"{prefix}concordance"] = _guarded(notes, f"{prefix}concordance", lambda rows: F.ranking_concordance(rows, ranking_of(rows)), part)
        row |= within_cell_scores(notes, prefix, part, ranking_of)
        ici_e50 = _guarded(notes, f"{prefix}ICI/E50", F.calibration, fit, part, t0, ax)
        row[f"{prefix}ICI"], row[f"{prefix}E50"] = ici_e50 if isinstance(ici_e50, tuple) else (math.nan, math.nan)
    row["note"] = "; ".join(notes)
    return row


def within_cell_scores(notes: list[str], prefix: str, part: pd.DataFrame, ranking_of) -> dict[str, float]:
    """Table I's within-cell concordance of one part (`prefix` "" for train, "test_"): Harrell's
    C with only the pairs within one attack cell compared, pooled over the cells by their
    pairs, overall (`concordance_within`, with its `pairs_within`) and per attack family
    (`concordance_within[<family>]`). `ranking_of(part)` ranks the rows (higher = longer
    survival). A ranking that is constant within each cell (the baselines) scores 0.5."""
    key = f"{prefix}concordance_within"
    try:
        counts = F.concordance_counts(part[F.DURATION], ranking_of(part), part[F.EVENT], F.sample_weights(part), part[CELL])
    except Exception as err:  # e.g. a ranking that cannot be predicted
        notes.append(f"{key}: {type(err).__name__}: {F.first_line(err)}")
        return {key: math.nan}
    row = {key: _pooled(counts), f"{prefix}pairs_within": float(counts["pairs"].sum())}
    if counts["pairs"].sum() == 0:
        notes.append(f"{key}: no comparable pair within an attack cell")
    if FAMILY in part:
        families = part.groupby(CELL)[FAMILY].first().reindex(counts.index)
        row |= {f"{key}[{family}]": _pooled(group) for family, group in counts.groupby(families, sort=True)}
    return row


def _pooled(counts: pd.DataFrame) -> float:
    pairs = counts["pairs"].sum()
    return float(counts["concordant"].sum() / pairs) if pairs > 0 else math.nan


def concordance_within_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """concordance_within.csv: Table I's within-cell concordance, one row per fitter or baseline
    and attack family (first `all`, every family pooled), train and test side by side."""
    families = sorted({c[c.index("[") + 1 : -1] for c in comparison if c.startswith(("concordance_within[", "test_concordance_within["))})
    rows = []
    for _, row in comparison.iterrows():
        for family in [ALL_FAMILIES, *families]:
            suffix = "" if family == ALL_FAMILIES else f"[{family}]"
            values = {f"{p}concordance_within": row.get(f"{p}concordance_within{suffix}", math.nan) for p in ("", "test_")}
            rows.append({"fitter": row["fitter"], "model": row["model"], "status": row["status"], FAMILY: family, **values})
    return pd.DataFrame(rows, columns=schema.CONCORDANCE_WITHIN)


def _guarded(notes: list[str], what: str, function, *args):
    try:
        return function(*args)
    except Exception as err:  # e.g. a test part without events, a calibration spline that fails
        notes.append(f"{what}: {type(err).__name__}: {F.first_line(err)}")  # a blank message gives the type's name
        return math.nan


def cell_means(data: pd.DataFrame, values: np.ndarray) -> pd.Series:
    """The mean of a per-row value over each attack cell's samples (an infinite one stays so)."""
    weights = pd.Series(F.sample_weights(data).astype(float), index=data.index)
    frame = pd.DataFrame({"v": np.asarray(values, float) * weights, "w": weights, CELL: data[CELL]})
    sums = frame.groupby(CELL)[["v", "w"]].sum()
    return sums["v"] / sums["w"]


# --- baselines -----------------------------------------------------------------------------


def cell_mean_runtime(part: pd.DataFrame) -> np.ndarray:
    """Each sample's score for the runtime baseline: the mean duration over the samples of its
    attack cell (the cell's attack time per sample)."""
    return _per_cell_mean(part, part[F.DURATION].to_numpy(float))


def cell_survival_share(part: pd.DataFrame) -> np.ndarray:
    """Each sample's score for the failure-share baseline: 1 - the share of its attack cell's
    samples in `part` that failed (a higher score ranks as longer survival)."""
    return 1.0 - _per_cell_mean(part, part[F.EVENT].to_numpy(float))


def _per_cell_mean(part: pd.DataFrame, values: np.ndarray) -> np.ndarray:
    return part[CELL].map(cell_means(part, values)).to_numpy(float)


# name -> (label in Table I, what it knows, its score of each sample: higher = longer survival)
BASELINES = {
    "runtime_baseline": ("Runtime baseline", "knows only each attack cell's mean attack runtime", cell_mean_runtime),
    "failure_share_baseline": ("Failure-share baseline", "knows only each attack cell's observed failure share", cell_survival_share),
}


def baseline_rows(train: pd.DataFrame, test: pd.DataFrame) -> list[dict[str, Any]]:
    """Table I rows of the baselines: Harrell's C over samples on each half, as for the models;
    no likelihood or calibration scores."""
    rows = []
    for name, (label, knows, scores) in BASELINES.items():
        notes = [f"baseline: {knows}", BASELINE_NOTE]
        row: dict[str, Any] = {"fitter": name, "model": label, "status": "baseline", "aft": False}
        row |= {"n": float(F.sample_weights(train).sum()), "n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum())}
        for prefix, part in (("", train), ("test_", test)):
            row[f"{prefix}concordance"] = _guarded(notes, f"{prefix}concordance", lambda p: F.ranking_concordance(p, scores(p)), part)  # noqa: B023 -- called at once
            row |= within_cell_scores(notes, prefix, part, scores)
        rows.append(row | {"note": "; ".join(notes)})
    return rows


def within_summary(comparison: pd.DataFrame) -> str:
    """Each row's test concordance within attack cells, for the log."""
    return ", ".join(f"{row['model']} {row['test_concordance_within']:.4f}" for _, row in comparison.iterrows() if "test_concordance_within" in row)


def with_baseline_verdict(comparison: pd.DataFrame) -> pd.DataFrame:
    """`beats_baselines` per fitted model: its test concordance above every baseline's (a
    baseline without a score cannot be beaten); empty for the other rows."""
    baselines = comparison.loc[comparison["status"] == "baseline", "test_concordance"].to_numpy(float)
    fitted = comparison["status"] == "fitted"
    beats = comparison["test_concordance"].to_numpy(float)[:, None] > baselines[None, :]
    verdict = pd.Series(beats.all(axis=1) & (len(baselines) > 0), index=comparison.index, dtype=object)
    return comparison.assign(beats_baselines=verdict.where(fitted, None))


def baseline_verdicts(comparison: pd.DataFrame) -> list[str]:
    """One sentence per fitted model: whether it beats both baselines on test concordance."""
    baselines = comparison[comparison["status"] == "baseline"].set_index("model")["test_concordance"]
    bar = ", ".join(f"{model} {value:.4f}" for model, value in baselines.items())
    lines = []
    for _, row in comparison[comparison["status"] == "fitted"].iterrows():
        verb = "beats" if row["beats_baselines"] is not None and bool(row["beats_baselines"]) else "does not beat"
        lines.append(f"{row['model']} {verb} both baselines on test concordance ({row['test_concordance']:.4f}; {bar})")
    return lines


# --- Table I in LaTeX ----------------------------------------------------------------------


def latex_table(comparison: pd.DataFrame, test_size: float) -> str:
    """Table I's layout: AIC, BIC, concordance, ICI and E50 (train and test) per model and
    baseline; '--' where a score is missing, with the reason as a footnote."""
    columns = {
        "AIC": "AIC",
        "BIC": "BIC",
        "concordance": "Concordance",
        "test_concordance": "Test Concordance",
        "concordance_within": "Within-cell Concordance",
        "test_concordance_within": "Test Within-cell Concordance",
        "ICI": "ICI",
        "test_ICI": "Test ICI",
        "E50": "E50",
        "test_E50": "Test E50",
    }
    table = comparison.set_index("model").reindex(columns=list(columns)).rename(columns=columns)
    table.index.name = None
    # concordance to 3 decimals: a model and a baseline often differ in the third
    formats = {c: "{:.3g}" if c in ("AIC", "BIC") else "{:.3f}" if "Concordance" in c else "{:.2f}" for c in table}
    notes = []
    for model, row in comparison.set_index("model").iterrows():
        if row["status"] == "failed":
            notes.append(f"{model}: every fit attempt failed (the reasons are in aft_comparison.csv)")
        elif row["status"] == "baseline":
            notes.append(f"{model}: {BASELINES[row['fitter']][1]}, {BASELINE_NOTE}")
        elif row["status"] != "fitted":
            notes.append(f"{model}: {row['note']}")
        elif COX_NOTE in str(row.get("note", "")):
            notes.append(f"{model}: {COX_NOTE}")
    if "concordance_within" in comparison:
        notes.append("Within-cell concordance compares only samples of one attack cell (the baselines rank a cell's samples alike: 0.5)")
    if "converged" in comparison:
        fitted = comparison[comparison["status"] == "fitted"]
        short = fitted.loc[fitted["converged"].eq(False), "model"]  # None: not checked (said in its note)
        restarted = fitted.loc[fitted["starts"].gt(1) & fitted["converged"].eq(True), "model"]
        if len(short):
            notes.append(f"Not at its optimum (a Newton step would still gain > {CONVERGED_GAIN:g} nats): {', '.join(short)}")
        if len(restarted):
            notes.append(f"Fitted again from a second start to reach its optimum: {', '.join(restarted)}")
    if "beats_baselines" in comparison:
        fitted = comparison[comparison["status"] == "fitted"]
        losers = fitted.loc[~fitted["beats_baselines"].eq(True), "model"]
        if len(losers):
            notes.append(f"Test concordance not above both baselines: {', '.join(losers)}")
    by = comparison["split_by"].iloc[0] if "split_by" in comparison and len(comparison) else "train_hash"
    split = f"training ({100 * (1 - test_size):.0f}%) and test ({100 * test_size:.0f}%) groups of samples by {by}"
    caption = f"Survival models compared on the {_latex_escape(split)}. " + " ".join(_latex_escape(n.rstrip(".")) + "." for n in notes)
    styler = table.style.format(formats, na_rep="--").format_index(escape="latex")
    return styler.to_latex(hrules=True, position_float="centering", caption=caption, label="tab:survival-models") + "% needs \\usepackage{booktabs}\n"


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}"}


def _latex_escape(text: str) -> str:
    r"""One pass, so that no escape is escaped again (`\` gives `\textbackslash{}`, not `\textbackslash\{\}`)."""
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)
