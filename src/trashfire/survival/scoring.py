"""Table I of the survival stage: each fitted model's scores on the training part (information
criteria, concordance over samples and within attack cells, calibration), the selected model's
on the test part, scored once after the selection (Harrell's C, Uno's C and the integrated
Brier score with intervals over the held-out trained models, within-cell concordance,
calibration), beside two baselines that rank samples by what their attack cell alone tells,
the verdict whether the selected model beats them, and the table's LaTeX and per-family
within-cell views."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.survival import concordance as C
from trashfire.survival import fitters as F
from trashfire.survival import held_out
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
    "test_concordance_low",
    "test_concordance_high",
    "test_uno_C",
    "test_uno_C_low",
    "test_uno_C_high",
    "test_IBS",
    "test_IBS_low",
    "test_IBS_high",
    "concordance_within",
    "test_concordance_within",
    "t0",
    "ICI",
    "test_ICI",
    "E50",
    "test_E50",
    "ibs_from",
    "tau",
]
INTERVAL_SCORES = ("test_concordance", "test_uno_C", "test_IBS")  # each with _low and _high: 95% over the held-out trained models
TEST_COLUMNS = [c for c in SCORE_COLUMNS if c.startswith("test_") or c in ("ibs_from", "tau")]  # the selected model's only
TRAIN_COLUMNS = [c for c in SCORE_COLUMNS if c not in TEST_COLUMNS]  # every fitted model's
CONVERGENCE_COLUMNS = ["converged", "gradient_norm", "newton_gain", "starts", "iterations"]  # survival.convergence: where each fit stopped
WITHIN_PAIRS = ["pairs_within", "test_pairs_within"]  # comparable pairs within attack cells, per part
KM_COLUMNS = ["km_median_abs_log_ratio", "km_share_flagged", "km_worst_cells"]  # per AFT fitter: its E[T] against Kaplan-Meier
FAMILY = "attack_family"
ALL_FAMILIES = "all"  # concordance_within.csv's row over every attack family
COX_NOTE = "AIC and BIC from the partial likelihood: comparable among Cox fits only"
CELL = "attack_hash"
BASELINE_NOTE = "a ranking of samples, not a survival model: no likelihood (AIC, BIC) and no survival probabilities (ICI, E50)"


def table_columns(columns) -> list[str]:
    """Table I's order: the scores (the cross-validated one after BIC), then the within-cell
    pairs and the per-family within-cell concordance (train, then test), the Kaplan-Meier
    check, anything else, the note."""
    cross_validated = sorted(c for c in columns if c.startswith("cv_") and c != "cv_folds") + ["cv_folds"] * ("cv_folds" in set(columns))
    scores = SCORE_COLUMNS[: SCORE_COLUMNS.index("BIC") + 1] + cross_validated + SCORE_COLUMNS[SCORE_COLUMNS.index("BIC") + 1 :]
    leading = ["fitter", "model", "status", "aft"] + scores + ["beats_baselines", "split_by", "penalizer", "optimiser", "attempts", *CONVERGENCE_COLUMNS]
    per_family = [c for prefix in ("", "test_") for c in sorted(columns) if c.startswith((f"{prefix}concordance_within[", f"{prefix}pairs_within["))]
    middle = WITHIN_PAIRS + per_family + KM_COLUMNS
    placed = set(leading) | set(middle) | {"note"}
    return leading + [c for c in middle if c in set(columns)] + sorted(set(columns) - placed) + ["note"]


def calibration_time(train: pd.DataFrame, quantile: float) -> float:
    """t0: a quantile of the training durations over samples."""
    return float(np.quantile(np.repeat(train[F.DURATION].to_numpy(), F.sample_weights(train)), quantile))


def t0_quantile(spec: Any, settings: Any) -> float:
    """The fitter's calibration time as a quantile of the training durations: its own, or the stage's."""
    return spec.get("t0_quantile") or settings.t0_quantile


def train_scores(
    fit: F.Fit, train: pd.DataFrame, t0: float, ax=None, calibrated: tuple[pd.DataFrame, str] | None = None, ranked: tuple[pd.DataFrame, str] | None = None
) -> dict[str, Any]:
    """One row of Table I on the training part (in-sample; AIC also selects the cure model); a
    score that cannot be computed is NaN with its reason in `note`. `calibrated`: the rows ICI
    and E50 read and how they were drawn (`score_sample.calibration_rows`); `ranked`: the rows
    the concordances read (`score_sample.concordance_rows`); default all."""
    row: dict[str, Any] = F.information_criteria(fit, train)
    fit.criteria = dict(row)  # the one AIC: Table I's, which also selects the cure model
    row |= {"n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum()), "t0": t0}
    notes = list(fit.warnings) + ([COX_NOTE] if fit.is_cox else [])
    ranking_of = _ranking_once(fit)
    concordance_part, drawn = ranked or (train, "")
    row["concordance"] = _guarded(notes, "concordance", lambda rows: C.ranking_concordance(rows, ranking_of(rows)), concordance_part)
    row |= within_cell_scores(notes, "", concordance_part, ranking_of)
    if drawn:
        notes.append(f"concordance, concordance_within {drawn}")
    calibration_part, sampled = calibrated or (train, "")
    ici_e50 = _guarded(notes, "ICI/E50", F.calibration, fit, calibration_part, t0, ax)
    row["ICI"], row["E50"] = ici_e50 if isinstance(ici_e50, tuple) else (math.nan, math.nan)
    if sampled:
        notes.append(f"ICI/E50 {sampled}")
    return row | {"note": "; ".join(notes)}


def test_scores(
    fit: F.Fit, train: pd.DataFrame, test: pd.DataFrame, t0: float, score_range, ax=None, calibrated: tuple[pd.DataFrame, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The selected model's scores on the test part, computed once after the selection: Harrell's
    C, Uno's C and the integrated Brier score (IPCW from the training part's censoring, over
    survival.score_range) each with its 95% interval over the held-out trained models
    (survival.held_out), the within-cell concordance, and ICI and E50 at the training t0 (on
    `calibrated`'s rows where given: `score_sample.calibration_rows`). Returns the columns and the notes on what could not be scored."""
    notes: list[str] = []
    ranking_of = _ranking_once(fit)
    row = concordance_with_interval(notes, "test_concordance", lambda: held_out.harrell_pairs(test, ranking_of(test)), test)
    row |= within_cell_scores(notes, "test_", test, ranking_of)
    at = _guarded(notes, "test IPCW scores", held_out.horizon, train, test, score_range)
    if isinstance(at, held_out.Horizon):
        row |= {"ibs_from": float(at.times[0]) if len(at.times) else math.nan, "tau": at.tau}
        row |= concordance_with_interval(notes, "test_uno_C", lambda: held_out.uno_pairs(test, ranking_of(test), at), test)
        row |= _interval(notes, "test_IBS", lambda: brier_over_units(fit, test, at))
    calibration_part, sampled = calibrated or (test, "")
    ici_e50 = _guarded(notes, "test_ICI/E50", F.calibration, fit, calibration_part, t0, ax)
    row["test_ICI"], row["test_E50"] = ici_e50 if isinstance(ici_e50, tuple) else (math.nan, math.nan)
    if sampled:
        notes.append(f"test ICI/E50 {sampled}")
    units = test[held_out.UNIT].nunique() if held_out.UNIT in test else 0
    if units < 2:
        notes.append(f"test intervals: {units} held-out trained model (survival data's {held_out.UNIT}); an interval over them needs 2")
    return row, notes


def score_selected(
    comparison: pd.DataFrame,
    fit: F.Fit | None,
    train: pd.DataFrame,
    test: pd.DataFrame,
    t0: float,
    score_range,
    ax=None,
    calibrated=None,
    scored: tuple[dict[str, Any], list[str]] | None = None,
) -> pd.DataFrame:
    """Table I with the selected model's test scores (`test_scores`, or `scored` where they were
    computed already: the one time the test split scores a model), its notes added to its
    row's, and whether it beats the baselines."""
    comparison = comparison.copy()
    if fit is not None:
        scores, notes = test_scores(fit, train, test, t0, score_range, ax, calibrated) if scored is None else scored
        row = comparison.index[comparison["fitter"] == fit.name][0]
        for key, value in scores.items():
            comparison.loc[row, key] = value
        earlier = comparison.loc[row, "note"]
        comparison.loc[row, "note"] = "; ".join(note for note in [earlier if isinstance(earlier, str) else "", *notes] if note)
    comparison = with_baseline_verdict(comparison)
    return comparison.reindex(columns=table_columns(comparison.columns))


def _ranking_once(fit: F.Fit):
    """ranking_of(rows): the fit's ranking of a part's rows, predicted once for every score of
    that part (a cure model's costs a hypergeometric function per row)."""
    ranked: dict[int, np.ndarray] = {}

    def ranking_of(rows: pd.DataFrame) -> np.ndarray:
        if id(rows) not in ranked:
            ranked[id(rows)] = C.survival_ranking(fit, F.covariates_of(rows))
        return ranked[id(rows)]

    return ranking_of


def concordance_with_interval(notes: list[str], key: str, pairs, part: pd.DataFrame) -> dict[str, float]:
    """A concordance (`pairs()`: each row's concordant and comparable pairs) with its interval
    over the part's trained models; NaN where it cannot be scored, the reason in `notes`."""
    return _interval(notes, key, lambda: held_out.over_units(*pairs(), part.get(held_out.UNIT), pairs=True))


def brier_over_units(fit: F.Fit, part: pd.DataFrame, at: held_out.Horizon):
    """The integrated Brier score of the part's samples with its interval over trained models."""
    weights = F.sample_weights(part)
    return held_out.over_units(held_out.brier_losses(fit, part, at) * weights, weights, part.get(held_out.UNIT))


def _interval(notes: list[str], key: str, estimate) -> dict[str, float]:
    try:
        return held_out.with_interval(key, estimate())
    except Exception as err:  # no comparable pair, too few times in the part's follow-up ...
        notes.append(f"{key}: {type(err).__name__}: {F.first_line(err)}")
        return {key: math.nan, f"{key}_low": math.nan, f"{key}_high": math.nan}


def within_cell_scores(notes: list[str], prefix: str, part: pd.DataFrame, ranking_of) -> dict[str, float]:
    """Table I's within-cell concordance of one part (`prefix` "" for train, "test_"): Harrell's
    C with only the pairs within one attack cell compared, pooled over the cells by their
    pairs, overall (`concordance_within`, with its `pairs_within`) and per attack family
    (`concordance_within[<family>]`, `pairs_within[<family>]`: a family whose cells' samples
    fail at one step has few pairs, and a figure from a few dozen is noise). `ranking_of(part)` ranks the rows (higher = longer
    survival). A ranking that is constant within each cell (the baselines) scores 0.5."""
    key = f"{prefix}concordance_within"
    try:
        counts = C.concordance_counts(part[F.DURATION], ranking_of(part), part[F.EVENT], F.sample_weights(part), part[CELL])
    except Exception as err:  # e.g. a ranking that cannot be predicted
        notes.append(f"{key}: {type(err).__name__}: {F.first_line(err)}")
        return {key: math.nan}
    row = {key: _pooled(counts), f"{prefix}pairs_within": float(counts["pairs"].sum())}
    if counts["pairs"].sum() == 0:
        notes.append(f"{key}: no comparable pair within an attack cell")
    if FAMILY in part:
        families = part.groupby(CELL)[FAMILY].first().reindex(counts.index)
        for family, group in counts.groupby(families, sort=True):
            row |= {f"{key}[{family}]": _pooled(group), f"{prefix}pairs_within[{family}]": float(group["pairs"].sum())}
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
            values = {f"{p}{what}": row.get(f"{p}{what}{suffix}", math.nan) for p in ("", "test_") for what in ("concordance_within", "pairs_within")}
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


def baseline_rows(train: pd.DataFrame, test: pd.DataFrame, ranked: tuple[pd.DataFrame, str] | None = None) -> list[dict[str, Any]]:
    """Table I rows of the baselines: Harrell's C over samples on each half, as for the models
    (on test with its interval over trained models; on train on `ranked`'s rows, as the
    models', where given); no likelihood or calibration scores. They are not fitted, so
    scoring them on the test split selects nothing."""
    rows = []
    concordance_part, drawn = ranked or (train, "")
    for name, (label, knows, scores) in BASELINES.items():
        notes = [f"baseline: {knows}", BASELINE_NOTE] + ([f"concordance, concordance_within {drawn}"] if drawn else [])
        row: dict[str, Any] = {"fitter": name, "model": label, "status": "baseline", "aft": False}
        row |= {"n": float(F.sample_weights(train).sum()), "n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum())}
        row["concordance"] = _guarded(notes, "concordance", lambda p: C.ranking_concordance(p, scores(p)), concordance_part)  # noqa: B023 -- called at once
        row |= within_cell_scores(notes, "", concordance_part, scores)
        row |= concordance_with_interval(notes, "test_concordance", lambda: held_out.harrell_pairs(test, scores(test)), test)  # noqa: B023 -- called at once
        row |= within_cell_scores(notes, "test_", test, scores)
        rows.append(row | {"note": "; ".join(notes)})
    return rows


def within_summary(comparison: pd.DataFrame) -> str:
    """Each row's test concordance within attack cells, for the log."""
    return ", ".join(f"{row['model']} {row['test_concordance_within']:.4f}" for _, row in comparison.iterrows() if "test_concordance_within" in row)


def with_baseline_verdict(comparison: pd.DataFrame) -> pd.DataFrame:
    """`beats_baselines` per fitted model scored on the test part (the selected one): its test
    concordance above every baseline's (a baseline without a score cannot be beaten); empty for
    the other rows."""
    baselines = comparison.loc[comparison["status"] == "baseline", "test_concordance"].to_numpy(float)
    fitted = (comparison["status"] == "fitted") & comparison["test_concordance"].notna()
    beats = comparison["test_concordance"].to_numpy(float)[:, None] > baselines[None, :]
    verdict = pd.Series(beats.all(axis=1) & (len(baselines) > 0), index=comparison.index, dtype=object)
    return comparison.assign(beats_baselines=verdict.where(fitted, None))


def baseline_verdicts(comparison: pd.DataFrame) -> list[str]:
    """One sentence per model scored on the test part (the selected one): whether it beats both
    baselines on test concordance."""
    baselines = comparison[comparison["status"] == "baseline"].set_index("model")["test_concordance"]
    bar = ", ".join(f"{model} {value:.4f}" for model, value in baselines.items())
    lines = []
    for _, row in comparison[(comparison["status"] == "fitted") & comparison["test_concordance"].notna()].iterrows():
        verb = "beats" if row["beats_baselines"] is not None and bool(row["beats_baselines"]) else "does not beat"
        lines.append(f"{row['model']} {verb} both baselines on test concordance ({row['test_concordance']:.4f}; {bar})")
    return lines


# --- Table I in LaTeX ----------------------------------------------------------------------


def latex_table(comparison: pd.DataFrame, test_size: float, chosen_by: str = "survival.chosen") -> str:
    """Table I's layout: AIC, BIC, the cross-validated selection score, concordance, ICI and E50
    (train and test), and on test Uno's C and the integrated Brier score, each test score of
    the three with its 95% interval in brackets, per model and baseline; '--' where a score is
    missing, with the reason as a footnote; `chosen_by` says how the selected model was chosen."""
    cross_validated = [c for c in comparison if c.startswith("cv_") and c != "cv_folds"]
    columns = {
        "AIC": "AIC",
        "BIC": "BIC",
        **{c: f"CV {MEASURE_LABELS.get(c.removeprefix('cv_'), c.removeprefix('cv_'))}" for c in cross_validated},
        "concordance": "Concordance",
        "test_concordance": "Test Concordance",
        "test_uno_C": "Test Uno's C",
        "test_IBS": "Test IBS",
        "concordance_within": "Within-cell Concordance",
        "test_concordance_within": "Test Within-cell Concordance",
        "ICI": "ICI",
        "test_ICI": "Test ICI",
        "E50": "E50",
        "test_E50": "Test E50",
    }
    shown = comparison.assign(**{key: with_interval_text(comparison, key) for key in INTERVAL_SCORES if key in comparison})
    table = shown.set_index("model").reindex(columns=list(columns)).rename(columns=columns)
    table.index.name = None
    # concordance to 3 decimals: a model and a baseline often differ in the third
    formats = {
        c: "{:.3g}" if c in ("AIC", "BIC") else "{:.3f}" if any(w in c for w in ("Concordance", "Uno", "IBS")) else "{:.2f}"
        for c in table
        if table[c].dtype != object
    }
    notes = [*row_notes(comparison), *selection_notes(comparison, chosen_by)]
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
        judged = comparison[(comparison["status"] == "fitted") & comparison["beats_baselines"].notna()]
        losers = judged.loc[~judged["beats_baselines"].eq(True), "model"]
        if len(losers):
            notes.append(f"Test concordance not above both baselines: {', '.join(losers)}")
    by = comparison["split_by"].iloc[0] if "split_by" in comparison and len(comparison) else "train_hash"
    split = f"training ({100 * (1 - test_size):.0f}%) and test ({100 * test_size:.0f}%) groups of samples by {by}"
    caption = f"Survival models compared on the {_latex_escape(split)}. " + " ".join(_latex_escape(n.rstrip(".")) + "." for n in notes)
    styler = table.style.format(formats, na_rep="--").format_index(escape="latex")
    layout = "l" + "r" * len(table.columns)  # the scores with their intervals are text: right-aligned as the numbers
    return (
        styler.to_latex(hrules=True, position_float="centering", caption=caption, label="tab:survival-models", column_format=layout)
        + "% needs \\usepackage{booktabs}\n"
    )


MEASURE_LABELS = {"concordance": "Concordance", "uno_C": "Uno's C"}  # a cross-validated score's label in the LaTeX table (else its own name)


def with_interval_text(comparison: pd.DataFrame, key: str, digits: int = 3) -> pd.Series:
    """A test score and its interval as text, "0.857 [0.840, 0.871]"; None where unscored."""
    low, high = comparison.get(f"{key}_low"), comparison.get(f"{key}_high")
    texts = []
    for index, value in comparison[key].items():
        if pd.isna(value):
            texts.append(None)
            continue
        bounds = (low[index], high[index]) if low is not None and high is not None else (math.nan, math.nan)
        interval = f" [{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]" if not any(pd.isna(b) for b in bounds) else ""
        texts.append(f"{value:.{digits}f}{interval}")
    return pd.Series(texts, index=comparison.index, dtype=object)


def row_notes(comparison: pd.DataFrame) -> list[str]:
    """Footnotes on rows without scores of a fitted model: failed, baseline, skipped; Cox's AIC."""
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
    return notes


def selection_notes(comparison: pd.DataFrame, chosen_by: str) -> list[str]:
    """How the selected model was chosen (`chosen_by`), and that it alone is scored on the test split."""
    selected = comparison.loc[comparison["selected"].eq(True), "model"] if "selected" in comparison else pd.Series(dtype=object)
    if not len(selected):
        return []
    return [
        f"Selected: {selected.iloc[0]} ({chosen_by}); only it is scored on the test split, with 95% intervals over the held-out trained models; "
        "IBS is the integrated Brier score (lower is better), Uno's C the concordance weighted by the inverse censoring probability"
    ]


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}"}


def _latex_escape(text: str) -> str:
    r"""One pass, so that no escape is escaped again (`\` gives `\textbackslash{}`, not `\textbackslash\{\}`)."""
    return "".join(LATEX_SPECIAL.get(char, char) for char in text)
