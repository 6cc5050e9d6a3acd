"""Every metric the pipeline reports, registered once: its name, how it is computed from the
aggregate's tables, and what it means in one plain sentence.

The aggregate stage computes what is registered here and the report shows it, so adding a
metric touches two files: its definition, a pure function in `trashfire.metrics`, and one
entry here. A metric with a setting reads it from `Results.settings` (the `metrics` section
of the config): the setting is a key in conf/metrics/default.yaml and the definition sits
in the entry itself, two files again.
- `HEADLINE`: a value of reports/metrics.json (a number, a text, or a dict of tests), shown in
  report.html's headline table with its meaning in the order registered (`section="run"`:
  on the report's Run line instead; `"findings"`: beside the findings; `"tables"`: in
  metrics.json only, the report shows its table).
- `CURVE_METRICS`: a column of robustness.csv, one value per model cell and eps attack family
  computed from its accuracy-eps curve and viability threshold tau; it also lands in each
  card's evp_and_auc section and the report's robustness table, with its meaning in that
  table's caption. A degenerate model cell gets NaN.

For example, the worst accuracy under attack as a headline metric, and the accuracy at a
curve's largest eps as a column of robustness.csv:

    # src/trashfire/metrics/__init__.py
    def worst_accuracy(accuracies: Sequence[float]) -> float:  # the lowest accuracy of the cells
        return float(np.min(accuracies))

    # src/trashfire/metrics/registry.py, an entry of HEADLINE (or of CURVE_METRICS)
    Metric("acc_adv_min", lambda r: metrics.worst_accuracy(non_degenerate(r.experiments)["acc_adv"]),
           "the lowest accuracy under attack over the non-degenerate attack cells"),
    CurveMetric("acc_at_eps_max", lambda curve, tau: metrics.worst_accuracy(curve["acc"].iloc[-1:]),
                "the accuracy at the largest eps of the curve"),

tests/metrics/test_aggregate.py registers both and follows them to metrics.json, robustness.csv, the
cards and report.html.

Words: a *degenerate* model cell is one whose benign accuracy does not exceed chance by the
margin (`metrics.degenerate`, flagged by the timing stage); `non_degenerate(table)` keeps the
others' rows, over which every headline mean is taken (the report calls them sound). A worst
case is *carried by* the attack with the lowest robust accuracy among those it combines. An
EVP curve *reaches nonviability* where its accuracy falls below tau within the eps grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trashfire import metrics
from trashfire.core.schema import CLOCKS, LATENCY, Finding
from trashfire.core.stats import spearman
from trashfire.metrics import findings, validity
from trashfire.survival import epsilon, expected_time

SECTIONS = ("headline", "run", "findings", "validity", "tables")


@dataclass(frozen=True)
class Results:
    """The aggregate's tables a headline metric is computed from: experiments.csv (with its
    attack_family), trash.csv, robustness.csv, brittle.csv, the survival stage's
    aft_comparison.csv, the checked findings, eps_survival.csv and the validity flags (validity.csv)."""

    experiments: pd.DataFrame | None = None
    trash: pd.DataFrame | None = None
    robustness: pd.DataFrame | None = None
    brittle: pd.DataFrame | None = None
    comparison: pd.DataFrame | None = None
    findings: tuple[Finding, ...] = ()
    validity: pd.DataFrame | None = None
    eps_survival: pd.DataFrame | None = None
    settings: Any = None  # the config's `metrics` section: a metric's own settings (conf/metrics/default.yaml)
    worst_case: pd.DataFrame | None = None  # experiments.csv's worst-case rows (trashfire.tables.worst_case)
    survival_reason: str | None = None  # why no survival model gives E[T] (survival/status.json), None where one does


@dataclass(frozen=True)
class Metric:
    """A headline metric: metrics.json's `name` = `compute(results)`; `meaning` is the report's
    sentence for it; `section` where the report shows it (SECTIONS)."""

    name: str
    compute: Callable[[Results], Any]
    meaning: str = ""
    section: str = "headline"


@dataclass(frozen=True)
class CurveMetric:
    """A per-cell metric: robustness.csv's column `name` = `compute(curve, tau)` per model cell
    and eps family. `curve` holds that cell's curves.csv rows from the benign point (eps = 0)
    up: eps (configured units), eps_standardised, eps_pixel, acc and acc_norm; tau is its
    viability threshold. `on_arrays`, where given, is the same metric from the curve's
    eps_standardised and acc as arrays (at 10^5 attack cells a frame per curve costs more than
    the metric); without it the aggregate hands `compute` the frame."""

    name: str
    compute: Callable[[pd.DataFrame, float], float]
    meaning: str
    on_arrays: Callable[[np.ndarray, np.ndarray, float], float] | None = None


# ---------------------------------------------------------------------------------------------
# What the entries read


def non_degenerate(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of non-degenerate model cells."""
    return table[~table["degenerate"].astype(bool)] if "degenerate" in table else table


def worst_case_means(worst_case: pd.DataFrame | None) -> dict[str, float]:
    """Mean worst-case robust accuracy over the non-degenerate model cells, per norm and eps ('linf eps 0.1')."""
    rows = non_degenerate(worst_case) if worst_case is not None else pd.DataFrame()
    if rows.empty:
        return {}
    means = rows.groupby(["norm", "attack_units", "attack_value"], sort=True)["acc_adv"].mean()
    return {f"l{norm} eps {value:g} {units}": float(mean) for (norm, units, value), mean in means.items()}


def carried_by_counts(worst_case: pd.DataFrame | None) -> dict[str, int]:
    """Over the non-degenerate worst-case cells, how many each attack (or tie of attacks) carried:
    had the lowest robust accuracy of the attacks the worst case combines (`carried_by`)."""
    rows = non_degenerate(worst_case) if worst_case is not None else pd.DataFrame()
    return {} if rows.empty else {str(k): int(v) for k, v in rows["carried_by"].value_counts().sort_index().items()}


def degenerate_cells(experiments: pd.DataFrame) -> pd.Series:
    """Per model hash, whether the timing stage flagged the cell degenerate."""
    if "degenerate" not in experiments:
        return pd.Series(False, index=experiments["model_hash"].unique())
    return experiments.groupby("model_hash")["degenerate"].first().astype(bool)


def reaches_nonviability(robustness: pd.DataFrame) -> pd.Series:
    """The EVP curves that fall below tau within the grid (the others' EVP is a lower bound)."""
    return robustness["reaches_nonviability"].astype(bool)


def spearman_by_dataset(brittle: pd.DataFrame) -> dict[str, dict[str, float]]:
    """002 Fig. 4's rank correlation of brittle-score and robust accuracy, within each data set,
    over 002's population (trained models: predict-time defences and degenerate cells left out)."""
    result = {}
    for dataset, group in findings.trained_models_only(non_degenerate(brittle)).dropna(subset=["brittle_score", "robust_acc"]).groupby("dataset"):
        rho, p = spearman(group["brittle_score"], group["robust_acc"])
        result[dataset] = {"rho": rho, "p": p, "n": len(group)}
    return result


def eps_survival_means(eps_survival: pd.DataFrame | None) -> dict[str, dict[str, float]]:
    """The mean eps-survival area per data set and attack family over the non-degenerate model cells."""
    if eps_survival is None or eps_survival.empty:
        return {}
    means: dict = {}
    for (dataset, family), area in non_degenerate(eps_survival).groupby(["dataset", "attack_family"])["area"].mean().items():
        means.setdefault(str(dataset), {})[str(family)] = float(area)
    return means


def trash_by_clock(trash: pd.DataFrame) -> dict[str, float]:
    """The median TRASH over the non-degenerate cells on each clock of trash.csv."""
    rows = non_degenerate(trash) if trash is not None else pd.DataFrame()
    return {clock: float(rows[f"trash_adv_{clock}"].dropna().median()) for clock in CLOCKS if f"trash_adv_{clock}" in rows}


def decomposition_by_depth(trash: pd.DataFrame) -> dict:
    """{data set: {attack family: {depth: {E_Q, flops_per_query, seconds_per_query_<clock>}}}}
    over the non-degenerate undefended cells."""
    if trash is None or not {"defence", "dataset", "attack_family", "depth"} <= set(trash):
        return {}
    rows = non_degenerate(trash)
    rows = rows[rows["defence"] == "none"]
    columns = [c for c in ("E_Q", "E_G", *LATENCY) if c in rows]
    out: dict = {}
    for (dataset, family, depth), group in rows.groupby(["dataset", "attack_family", "depth"]):
        out.setdefault(str(dataset), {}).setdefault(str(family), {})[str(int(depth))] = {c: float(group[c].mean()) for c in columns}
    return out


def selected_survival(comparison: pd.DataFrame) -> pd.Series:
    """The survival model whose E[T] feeds TRASH: aft_comparison.csv's selected row; empty
    where none was selected (survival/status.json says why)."""
    selected = comparison[comparison["selected"].astype(str).str.lower() == "true"]
    return selected.iloc[0] if len(selected) else pd.Series(dtype=object)


def baseline_concordance(comparison: pd.DataFrame, baseline: str) -> float:
    scores = comparison.set_index("fitter").get("test_concordance", pd.Series(dtype=float))  # none where nothing was fitted
    return float(scores.get(baseline, np.nan))


def selected_score(comparison: pd.DataFrame, column: str) -> float:
    """A score of the selected survival model; NaN where Table I has no such column or no
    model was selected."""
    value = selected_survival(comparison).get(column)
    return float(value) if value is not None else float("nan")


def none_if_missing(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def within_by_family(comparison: pd.DataFrame) -> dict[str, float]:
    """The selected model's test concordance within attack cells, per attack family."""
    row = selected_survival(comparison)
    prefix = "test_concordance_within["
    return {str(c)[len(prefix) : -1]: float(row[c]) for c in comparison if str(c).startswith(prefix) and c in row}


def km_worst_cells(comparison: pd.DataFrame) -> dict[str, float]:
    """The attack cells whose selected-model E[T] is furthest from their Kaplan-Meier restricted
    mean: {cell (family, defence, data set): E[T] / KM}."""
    return expected_time.worst_cells(selected_survival(comparison).get("km_worst_cells"))


# ---------------------------------------------------------------------------------------------
# The registry


HEADLINE: list[Metric] = [
    # the run's size: the report's Run line
    Metric("n_train_cells", lambda r: int(r.experiments["train_hash"].nunique()), section="run"),
    Metric("n_model_cells", lambda r: int(r.experiments["model_hash"].nunique()), section="run"),
    Metric("n_attack_cells", lambda r: int(len(r.experiments)), section="run"),
    Metric("n_degenerate_model_cells", lambda r: int(degenerate_cells(r.experiments).sum()), section="run"),
    Metric("clock", lambda r: str(r.experiments["clock"].iloc[0]), section="run"),
    Metric("n_evp_curves", lambda r: int(r.robustness["evp"].notna().sum()), section="run"),
    Metric("n_evp_curves_short_of_nonviability", lambda r: int((r.robustness["evp"].notna() & ~reaches_nonviability(r.robustness)).sum()), section="run"),
    # the headline, in reading order; means and medians leave degenerate model cells out
    Metric(
        "trash_adv_median",
        lambda r: float(non_degenerate(r.trash)["trash_adv"].dropna().median()),
        "median over attack cells of training time / expected time to adversarial failure; above 1 a model is cheaper to break than to train",
    ),
    Metric(
        "trash_adv_share_above_1",
        lambda r: float((non_degenerate(r.trash)["trash_adv"] > 1).mean()),
        "share of attack cells whose TRASH exceeds 1, i.e. where breaking the model costs less compute than training it",
    ),
    Metric(
        "trash_adv_median_by_clock",
        lambda r: trash_by_clock(r.trash),
        "the median TRASH on every clock side by side: flops (the model's work, comparable between machines) and process and wall seconds (this machine's prices of that work)",
    ),
    Metric(
        "depth_decomposition",
        lambda r: decomposition_by_depth(r.trash),
        "per data set, attack family and depth (undefended models): E[queries to failure] (what the model resists) beside the FLOPs and seconds per query (what each query costs); 003 says depth raises the second, not the first",
        section="tables",
    ),
    Metric(
        "trash_ben_median",
        lambda r: float(non_degenerate(r.trash)["trash_ben"].dropna().median()),
        "the same ratio for benign failures: training time over the expected time until an unattacked input is misclassified",
    ),
    Metric(
        "acc_ben_mean",
        lambda r: float(non_degenerate(r.experiments).drop_duplicates("model_hash")["acc_ben"].mean()),
        "mean benign test accuracy of the model cells: how good the models are without an adversary",
    ),
    Metric(
        "acc_adv_mean",
        lambda r: float(non_degenerate(r.experiments)["acc_adv"].mean()),
        "mean accuracy under attack over every attack cell (all attacks, strengths and defences)",
    ),
    Metric(
        "robust_acc_worst_case",
        lambda r: worst_case_means(r.worst_case),
        "per norm and eps, the mean over model cells of the robust accuracy in the worst case per sample: a sample counts as robust only if no attack at that norm and eps broke it (AutoAttack's rule over the whole grid)",
    ),
    Metric(
        "worst_case_carried_by",
        lambda r: carried_by_counts(r.worst_case),
        "how many worst-case cells (model cell, norm, eps) each attack carried: it alone reached the lowest robust accuracy (ties name every attack that did)",
    ),
    Metric(
        "evp_mean",
        lambda r: float(r.robustness.loc[reaches_nonviability(r.robustness), "evp"].mean()),
        "mean expected viable performance: area under accuracy against eps (scaled to [0, 1]) counting accuracy only while it is at least τ; higher keeps useful accuracy against stronger attacks",
    ),
    Metric(
        "evp_mean_short_of_nonviability",
        lambda r: float(r.robustness.loc[~reaches_nonviability(r.robustness), "evp"].mean()),
        "mean EVP of the curves still viable at the largest eps tried: a lower bound set by the eps grid; empty when every curve reaches non-viability",
    ),
    Metric(
        "auc_R_mean",
        lambda r: float(r.robustness["auc_R"].mean()),
        "mean normalised robustness AUC R: accuracy over the eps interval relative to benign accuracy; 1 loses nothing, 0 loses everything at once",
    ),
    Metric(
        "brittle_score_mean",
        lambda r: float(non_degenerate(r.brittle)["brittle_score"].mean()),
        "mean brittle-score: mean |LIME weight| per superpixel; higher means the model leans harder on single image regions",
    ),
    Metric(
        "brittle_spearman",
        lambda r: spearman_by_dataset(r.brittle),
        "Spearman's rank correlation of brittle-score and robust accuracy over the trained models (predict-time defences left out); the brittle-score paper expects it negative",
    ),
    Metric(
        "eps_survival_area_mean",
        lambda r: eps_survival_means(r.eps_survival),
        "per data set and attack family, the mean over model cells of the area under the share of samples still standing against eps, up to the family's largest eps and over it: 1 means no sample breaks within that eps",
    ),
    Metric(
        "eps_survival_spearman",
        lambda r: epsilon.spearman_against(r.eps_survival, r.robustness),
        "per data set and eps attack family, Spearman's rank correlation over model cells of that area with EVP and with R, from the accuracy-eps curves of the same cells; expected strongly positive",
    ),
    Metric(
        "survival_model",
        lambda r: none_if_missing(selected_survival(r.comparison).get("fitter")),
        "the survival (AFT) model whose expected time to failure E[T] feeds TRASH, chosen by survival.select_by; null where none could be",
    ),
    Metric(
        "survival_missing_reason",
        lambda r: r.survival_reason,
        "why no survival model gives E[T] (then TRASH and the findings on it are not testable; every other metric stands); null where one does",
    ),
    Metric(
        "survival_test_concordance",
        lambda r: selected_score(r.comparison, "test_concordance"),
        "how well that model ranks held-out samples by time to failure: 0.5 is a coin toss, 1 is perfect",
    ),
    Metric(
        "survival_test_ici",
        lambda r: selected_score(r.comparison, "test_ICI"),
        "its calibration error on held-out samples: mean gap between predicted and observed failure probability (0 is perfect)",
    ),
    Metric(
        "survival_beats_baselines",
        lambda r: str(selected_survival(r.comparison).get("beats_baselines")).lower() == "true",
        "whether its held-out concordance beats both baselines below; if not, it adds nothing over knowing each cell's runtime or failure share",
    ),
    Metric(
        "survival_runtime_baseline_test_concordance",
        lambda r: baseline_concordance(r.comparison, "runtime_baseline"),
        "held-out concordance of ranking samples by their attack cell's mean runtime alone",
    ),
    Metric(
        "survival_failure_share_baseline_test_concordance",
        lambda r: baseline_concordance(r.comparison, "failure_share_baseline"),
        "held-out concordance of ranking samples by their attack cell's failure share alone",
    ),
    Metric(
        "survival_test_concordance_within",
        lambda r: selected_score(r.comparison, "test_concordance_within"),
        "the same ranking with only samples of one attack cell compared (pooled over cells): whether the model knows which samples of an attack fail first, not only which attacks are costly; the baselines are 0.5 here",
    ),
    Metric(
        "survival_test_concordance_within_by_family",
        lambda r: within_by_family(r.comparison),
        "that within-cell concordance per attack family; survival/concordance_within.csv gives each one's comparable pairs (a family whose cells' samples fail at one query count, such as a black-box attack on few samples, has a few dozen: noise, not a ranking worse than chance)",
    ),
    Metric(
        "survival_km_median_abs_log_ratio",
        lambda r: selected_score(r.comparison, "km_median_abs_log_ratio"),
        "median over attack cells of |log(E[T] / Kaplan-Meier restricted mean)| to the same budget: 0 means the model's E[T] matches the model-free estimate",
    ),
    Metric(
        "survival_km_share_flagged",
        lambda r: selected_score(r.comparison, "km_share_flagged"),
        "share of attack cells whose E[T] is off the Kaplan-Meier restricted mean by more than survival.km_check_tolerance (km_check.csv)",
    ),
    Metric(
        "survival_km_worst_cells",
        lambda r: km_worst_cells(r.comparison),
        "the attack cells furthest off, with E[T] / Kaplan-Meier restricted mean",
    ),
    Metric(
        "survival_split_by",
        lambda r: str(selected_survival(r.comparison).get("split_by", "")),
        "the unit the 80/20 train/test split holds out whole (train_hash: trained models)",
    ),
    # beside the findings
    Metric("brittle_spearman_per_seed", lambda r: findings.brittle_spearman_per_seed(non_degenerate(r.brittle)), section="findings"),
    Metric("findings", lambda r: findings.findings_metrics(list(r.findings)), section="findings"),
    Metric(
        "validity_flags",
        lambda r: validity.validity_summary(r.validity) if r.validity is not None else {},
        "per validity flag, over the sound model cells: how many could be checked and how many tripped it (validity.csv)",
        section="validity",
    ),
]

CURVE_METRICS: list[CurveMetric] = [
    CurveMetric(
        "evp",
        lambda curve, tau: metrics.evp(curve["eps_standardised"], curve["acc"], tau),
        "expected viable performance in [0, 1]: the area under accuracy against eps (scaled to [0, 1]) while accuracy is at least tau; higher keeps viable accuracy further",
        on_arrays=metrics.evp,
    ),
]


def headline(results: Results) -> dict[str, Any]:
    """metrics.json: every registered headline metric by name."""
    return {metric.name: metric.compute(results) for metric in HEADLINE}


def survival_headline(comparison: pd.DataFrame) -> dict[str, Any]:
    """The survival metrics alone: the selected model's scores, whether it beats both
    baselines on test concordance, the baselines' and the split's grouping column."""
    results = Results(comparison=comparison)
    return {metric.name: metric.compute(results) for metric in HEADLINE if metric.name.startswith("survival_")}


def in_section(section: str) -> list[str]:
    """The registered headline metrics the report shows in `section`, in order."""
    return [metric.name for metric in HEADLINE if metric.section == section]


def meanings() -> dict[str, str]:
    """The headline section's metrics in reading order, each with its sentence."""
    return {metric.name: metric.meaning for metric in HEADLINE if metric.section == "headline"}


def curve_metric_names() -> list[str]:
    return [metric.name for metric in CURVE_METRICS]


def curve_meanings() -> dict[str, str]:
    return {metric.name: metric.meaning for metric in CURVE_METRICS}
