"""What each section of report.html shows, as plain data for its template
(templates/sections/<section>.html.j2): the findings with their verdicts, the validity flags,
the headline metrics with their meanings, the run, and the folded tables. Text is formatted
here and escaped by the templates; numbers come from the recorded tables and
trashfire.metrics.summaries."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.core.stage import Artefacts
from trashfire.metrics import registry, summaries, validity
from trashfire.report.captions import TABLE_CAPTIONS
from trashfire.report.formatting import format_value, interval_text, number, p_text, spread_text
from trashfire.report.inputs import card_paths, card_row
from trashfire.survival import analysis as survival_analysis
from trashfire.tables.worst_case import measured

PAPERS = {"001": "EVP", "002": "brittle-score", "003": "TRASHFIRE", "004": "normalised AUC"}
# verdict -> (badge class, word in the count sentence)
VERDICTS = {
    "holds": ("v-holds", "hold"),
    "contradicted": ("v-contradicted", "contradicted"),
    "inconclusive": ("v-inconclusive", "inconclusive"),
    "not testable": ("v-not-testable", "not testable"),
}
FINDING_COLUMNS = set(schema.FINDINGS[: schema.FINDINGS.index("detail") + 1])  # a findings.csv from before issue 59 lacks the rest
BRITTLE_FINDING = "002_brittle_negative"  # metrics.json's per-seed correlations belong beside it
LEFT_OUT = "left out of R, EVP, the brittle correlations and the headline means"

# Headline metrics come from the registry (trashfire.metrics.registry.HEADLINE): in its order,
# each with its plain sentence; a metric of metrics.json it does not know (an older run's) is
# still shown, after these, without a sentence. Counts go to the Run line, findings and
# per-seed tests to the Findings section.


# A table's rows on the page are bounded, so that the page stays a few MB at 10^5 attack cells:
# at most MAX_ROWS rows and about TABLE_CHARS characters of cell text each (its first rows in
# the table's order); every row is in the table's CSV, which the page links. The default's
# longest table (E[T] against Kaplan-Meier, one row per attack cell) has 924.
MAX_ROWS = 2000
TABLE_CHARS = 400_000


@dataclass(frozen=True)
class Table:
    """A table as the page prints it: column names, and per row each cell's text and whether it
    is text (left-aligned) rather than a number (right-aligned, so that digits line up); `total`
    is how many rows the table has, of which `rows` are the first (MAX_ROWS, TABLE_CHARS)."""

    columns: list[str]
    rows: list[list[tuple[str, bool]]]
    total: int = 0

    @property
    def cut(self) -> bool:
        return self.total > len(self.rows)


@dataclass(frozen=True)
class Folded:
    """A long table behind its name and size, so that the page reads top to bottom in a
    minute: its table, or why there is none (`missing`)."""

    key: str
    title: str
    rows: int
    caption: str
    table: Table | None = None
    missing: str | None = None
    source: str | None = None  # the CSV beside the page with every row (relative to report.html)


@dataclass(frozen=True)
class Listing:
    """A heading over a list of plain sentences, between the folded tables."""

    heading: str
    lines: list[str]


def table_of(table: pd.DataFrame, total: int | None = None) -> Table:
    """A table's cells with 3-4 significant digits, its first rows within the page's bounds
    (MAX_ROWS, TABLE_CHARS); `total`: its rows where `table` holds only the first of them."""
    rows, chars = [], 0
    for _, row in table.head(MAX_ROWS).iterrows():
        rows.append([(format_value(v), isinstance(v, str)) for v in row.values])
        chars += sum(len(text) + 3 for text, _ in rows[-1])  # + quotes and comma: the row as JSON
        if chars > TABLE_CHARS:
            rows.pop()
            break
    return Table([str(c) for c in table.columns], rows, len(table) if total is None else total)


def drop_empty(table: pd.DataFrame) -> pd.DataFrame:
    """Label columns with nothing in them (pretrained_on without fine-tuning) only take room."""
    empty = [c for c in table.columns if table[c].isna().all() or (table[c].astype(str) == "").all()]
    return table.drop(columns=empty)


def folded(key: str, title: str, rows: int, caption: str, shows: Table | str, source: str | None = None) -> Folded:
    """A Folded of a table, or of the reason there is none."""
    if isinstance(shows, Table):
        return Folded(key, title, rows, caption, table=shows, source=source)
    return Folded(key, title, rows, caption, missing=shows, source=source)


def rows_of(table: pd.DataFrame | None) -> int:
    return 0 if table is None else len(table)


# --- Findings


def verdict_count(verdicts: pd.Series) -> str:
    """'7 hold, 0 contradicted, 2 inconclusive, 1 not testable', any unknown verdict after."""
    counts = verdicts.astype(str).value_counts()
    known = [f"{counts.get(v, 0)} {'holds' if counts.get(v, 0) == 1 and v == 'holds' else word}" for v, (_, word) in VERDICTS.items()]
    other = [f"{n} {v}" for v, n in counts.items() if v not in VERDICTS]
    return ", ".join(known + other)


def measured_text(row: pd.Series) -> str:
    """'12.6 [10.9, 14.3], p = 0.004 (Holm 0.02), n = 12 trained models, smallest effect 0.05,
    detects 0.08'; '—' where nothing was measured."""
    value, lo, hi, p, n = (number(row.get(k)) for k in ("value", "lo", "hi", "p", "n"))
    adjusted, smallest, detects = (number(row.get(k)) for k in ("p_adjusted", "smallest_effect", "detectable"))
    measured = f"{value:.3g}" if np.isfinite(value) else "—"
    if np.isfinite(lo) and np.isfinite(hi):
        measured += f" [{lo:.3g}, {hi:.3g}]"
    units = row.get("units") if isinstance(row.get("units"), str) and row.get("units") else "units"
    parts = [measured]
    if np.isfinite(p):
        parts.append(p_text(p) + (f" (Holm {adjusted:.2g})" if np.isfinite(adjusted) else ""))
    parts += [f"n = {int(n)} {units}"] if np.isfinite(n) else []
    parts += [f"smallest effect {smallest:.3g}"] if np.isfinite(smallest) else []
    parts += [f"detects {detects:.3g} at 80% power"] if np.isfinite(detects) else []
    return ", ".join(parts)


def test_text(test: dict) -> str:
    """A Spearman test from metrics.json ({rho, p, n}) as 'ρ = -0.171, p = 0.19, n = 60'."""
    rho, p, n = number(test.get("rho")), number(test.get("p")), number(test.get("n"))
    parts = [f"ρ = {rho:.3g}" if np.isfinite(rho) else "ρ undefined"]
    return ", ".join(parts + ([p_text(p)] if np.isfinite(p) else []) + ([f"n = {int(n)}"] if np.isfinite(n) else []))


SEEDS_LISTED = 10  # past this many seeds, their tests are summed up: a line per 100s of seeds reads as noise


def per_seed_text(per_seed) -> str:
    """metrics.json's brittle_spearman_per_seed on one line: a pooled rho can hide seeds that
    disagree. Past SEEDS_LISTED seeds, the range and median of rho and how many seeds reject."""
    tests = {seed: test for seed, test in per_seed.items() if isinstance(test, dict)} if isinstance(per_seed, dict) else {}
    if not tests:
        return ""
    if len(tests) <= SEEDS_LISTED:
        seeds = "; ".join(f"seed {seed}: {test_text(test)}" for seed, test in tests.items())
        return f"Per seed, brittle-score against robust accuracy: {seeds}."
    rho = np.array([number(test.get("rho")) for test in tests.values()])
    rejects = sum(number(test.get("p")) < 0.05 for test in tests.values())
    rho = rho[np.isfinite(rho)]
    spread = f"ρ from {rho.min():.3g} to {rho.max():.3g}, median {np.median(rho):.3g}" if len(rho) else "ρ undefined in every seed"
    return f"Per seed ({len(tests)} seeds), brittle-score against robust accuracy: {spread}; p < 0.05 in {rejects} of {len(tests)}."


def finding_row(row: pd.Series, beside: str = "") -> dict:
    """A claim's verdict badge, paper, claim and test, what was measured and the detail."""
    paper = format_value(row["paper"])
    clock = row.get("clock")  # NaN: a claim without time in it
    return {
        "badge": VERDICTS.get(str(row["verdict"]), ("v-other", ""))[0],
        "verdict": str(row["verdict"]),
        "paper": f"{paper} {PAPERS.get(paper, '')}".strip(),
        "claim": format_value(row["claim"]),
        "on": f" (on the {clock} clock)" if isinstance(clock, str) and clock else "",
        "test": format_value(row["test"]),
        "measured": measured_text(row),
        "detail": format_value(row["detail"]),
        "beside": beside,
    }


def settle_text(row: pd.Series, seeds: int) -> str:
    """About how many seeds would settle an inconclusive claim at the effect seen: its
    units_to_settle, in seeds where the claim's units grow with them (n units from `seeds`)."""
    needed, n = number(row.get("units_to_settle")), number(row.get("n"))
    if row.get("verdict") != "inconclusive" or not (np.isfinite(needed) and np.isfinite(n) and n > 0):
        return ""
    units = row.get("units") if isinstance(row.get("units"), str) and row.get("units") else "units"
    per_seed = n / seeds if seeds else math.nan
    in_seeds = f"about {math.ceil(needed / per_seed)} seeds" if np.isfinite(per_seed) and per_seed > 0 else f"about {math.ceil(needed)} {units}"
    return f"{row['id']}: {in_seeds} (this run: {seeds} seeds, {int(n)} {units}; about {math.ceil(needed)} {units} needed)"


def settle_sentence(findings: pd.DataFrame, seeds: int) -> str:
    """The Findings' closing sentence: what would settle each inconclusive claim."""
    parts = [text for _, row in findings.iterrows() if (text := settle_text(row, seeds))]
    if not parts:
        return ""
    return "At the effects seen, the inconclusive claims would be settled (at 80% power, Holm's level) by " + "; ".join(parts) + "."


def findings_section(findings: pd.DataFrame, metrics: dict, degenerate: pd.DataFrame, seeds: int = 0) -> dict:
    """One row per claim of the four papers tested on this run, after a count of the verdicts;
    metrics.json's per-seed brittle tests beside their finding, or after the table; then how
    many seeds would settle each inconclusive claim."""
    per_seed = per_seed_text(metrics.get("brittle_spearman_per_seed"))
    if findings.empty or not FINDING_COLUMNS <= set(findings):
        return {"missing": "findings.csv has no findings in its expected columns; rerun `dvc repro aggregate`", "per_seed": per_seed}
    claims = findings[~findings["id"].astype(str).str.contains("@") & findings["p_adjusted"].notna()] if "p_adjusted" in findings else findings.iloc[:0]
    return {
        "verdicts": verdict_count(findings["verdict"]),
        "claims": len(claims),
        "left_out": f" {len(degenerate)} degenerate model cell(s) {LEFT_OUT} (see Run)." if len(degenerate) else "",
        "rows": [finding_row(row, per_seed if row["id"] == BRITTLE_FINDING else "") for _, row in findings.iterrows()],
        "per_seed": "" if BRITTLE_FINDING in set(findings["id"]) else per_seed,
        "settle": settle_sentence(findings[~findings["id"].astype(str).str.contains("@")], seeds),
    }


# --- Validity, headline and run


def validity_section(flags: pd.DataFrame, metrics: dict, budget_families: pd.DataFrame | None = None, check: pd.DataFrame | None = None) -> dict:
    """Per flag, how many sound model cells tripped it of those checked, the budget check per
    attack family (its estimated and observed shares, its verdict once with the reason),
    then the cells that tripped any flag, with what was seen."""
    counts = metrics.get("validity_flags") or {}
    rows = [(name, f"{c.get('tripped', 0)} of {c.get('checked', 0)}", validity.MEANINGS[name]) for name, c in counts.items() if name in validity.MEANINGS]
    budget = budget_table(budget_families, check)
    tripped = flags[flags["flags"].fillna("").astype(str).str.len() > 0]
    if tripped.empty:
        return {"rows": rows, "budget": budget, "cells": None}
    seen = tripped.apply(lambda r: "; ".join(f"{name}: {r[f'{name}_detail']}" for name in str(r["flags"]).split(", ")), axis=1)
    listing = drop_empty(tripped[[c for c in schema.REPORT_CELL if c in tripped]].assign(flags=tripped["flags"], seen=seen)).reset_index(drop=True)
    caption = f"{len(tripped)} model cell(s) tripped at least one flag"
    return {
        "rows": rows,
        "budget": budget,
        "cells": Folded("validity-cells", caption, len(listing), "what each flag saw, per model cell", table_of(listing), source="validity.csv"),
    }


def budget_table(families: pd.DataFrame | None, check: pd.DataFrame | None = None) -> Table | None:
    """budget/families.csv as the report shows it: per attack family, its budget, its
    calibration, the mean share of a cell's samples a budget `factor` x larger would break
    (estimated; observed on the calibration reruns), beside it the mean share the ensemble of
    every attack of its norm broke beyond it at the same eps (minimal_eps_check.csv), and the
    verdict with its reason."""
    if families is None or families.empty:
        return None
    beyond = pd.Series(dtype=float) if check is None or check.empty else (check["n_below"] / check["n"]).groupby(check["attack_family"]).mean()
    shown = pd.DataFrame(
        {
            "attack family": families["attack_family"],
            "max_iter": families["max_iter"],
            "calibration": [
                f"{int(c)} of {int(n)} cells, {int(b)} of {int(s)} standing broke" if c else "none"
                for c, n, b, s in zip(families["calibration_cells"], families["cells"], families["calibration_breaks"], families["calibration_samples"])
            ],
            "estimated share": families["estimated"].map(lambda v: "" if pd.isna(v) else f"{v:.2%}"),
            "observed share": families["observed"].map(lambda v: "" if pd.isna(v) else f"{v:.2%}"),
            "ensemble broke beyond": families["attack_family"].map(beyond).map(lambda v: "" if pd.isna(v) else f"{v:.2%}"),
            "budget too small": families["budget_too_small"].map(lambda v: "not checked" if pd.isna(v) else ("yes" if str(v).lower() == "true" else "no")),
            "why": families["reason"],
        }
    )
    return table_of(shown)


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
    an empty one a row with nothing to show (a test with no data set to run on)."""
    if isinstance(value, dict) and not value:
        return [(name, "—", meaning)]
    if isinstance(value, dict) and "rho" not in value:
        return [row for key, inner in value.items() for row in metric_rows(f"{name} · {key}", inner, meaning)]
    return [(name, metric_value(value), meaning)]


def headline_rows(metrics: dict) -> list[tuple[str, str, str]]:
    """The headline metrics as (name, value, meaning): the registry's in its order, then any
    other of metrics.json; what the run, findings, validity and tables sections show is left out."""
    meanings = registry.meanings()
    elsewhere = registry.in_section("run") + registry.in_section("findings") + registry.in_section("validity") + registry.in_section("tables")
    shown = {k: v for k, v in metrics.items() if k not in elsewhere}
    order = [k for k in meanings if k in shown] + sorted(k for k in shown if k not in meanings)
    return [row for key in order for row in metric_rows(key, shown[key], meanings.get(key, ""))]


def degenerate_cells(experiments: pd.DataFrame) -> pd.DataFrame:
    """The degenerate model cells (trashfire.metrics.summaries.degenerate_models) as the page lists them."""
    flagged = summaries.degenerate_models(experiments)
    if flagged.empty:
        return flagged
    return drop_empty(flagged[[c for c in schema.REPORT_DEGENERATE if c in flagged]]).reset_index(drop=True)


def run_section(metrics: dict, experiments: pd.DataFrame, degenerate: pd.DataFrame) -> dict:
    """What was run, in one line: a reader judges every number above against it; then the
    degenerate model cells."""
    counts = {k: "?" if n is None else n for k, n in summaries.distinct_counts(experiments, ["train_hash", "seed", "model_hash"]).items()}
    datasets = ", ".join(sorted(experiments["dataset"].astype(str).unique())) if "dataset" in experiments else "?"
    line = (
        f"{datasets}: {counts['train_hash']} trained cells over {counts['seed']} seeds → {counts['model_hash']} model cells "
        f"(with predict-time defences) → {len(experiments)} attack cells (attack × strength); "
        f"{len(degenerate)} degenerate"
    )
    if "n_evp_curves" in metrics:
        line += f"; {metrics['n_evp_curves']} EVP curves, {metrics.get('n_evp_curves_short_of_nonviability', '?')} still viable at the largest eps"
    if "clock" in metrics:
        line += f"; times on the {metrics['clock']} clock"
    return {"line": line, "degenerate": None if degenerate.empty else table_of(degenerate)}


# --- Folded tables


def trash_clocks_table(trash: pd.DataFrame) -> Table | str:
    """TRASH on every clock side by side (trashfire.metrics.summaries.trash_by_clock)."""
    table = summaries.trash_by_clock(trash)
    if table is None:
        return "trash.csv has no rows or no TRASH column"
    return table_of(drop_empty(table))


def depth_table(decomposition: pd.DataFrame) -> Table | str:
    if decomposition.empty:
        return "depth_decomposition.csv has no rows (it needs undefended models)"
    return table_of(drop_empty(decomposition))


def trash_summary_table(summary: pd.DataFrame) -> Table | str:
    if summary.empty:
        return "trash_summary.csv has no rows"
    shown = summary.assign(
        trash_adv=[interval_text(*v) for v in summary[["trash_adv_mean", "trash_adv_lo", "trash_adv_hi", "n_seeds"]].to_numpy(float)],
        trash_ben=[interval_text(*v) for v in summary[["trash_ben_mean", "trash_ben_lo", "trash_ben_hi", "n_seeds"]].to_numpy(float)],
    )
    columns = schema.REPORT_SUMMARY + ["attack_family", "n_seeds", "trash_adv", "trash_ben", "E_T_mean", "censored_share_mean", "f_ben_mean", "f_adv_mean"]
    return table_of(drop_empty(shown[[c for c in columns if c in shown]]))  # a summary written before E_T_mean lacks it


def auc_table(auc: pd.DataFrame) -> Table | str:
    if auc.empty:
        return "auc_table.csv has no rows (no attack with an eps grid)"
    shown = auc.assign(
        R=[spread_text(*v) for v in auc[["R_mean", "R_sd", "n_seeds"]].to_numpy(float)],
        S=[spread_text(*v) for v in auc[["S_mean", "S_sd", "n_seeds"]].to_numpy(float)],
    )
    columns = schema.REPORT_SUMMARY + ["attack_family", "n_seeds", "R", "S"]
    return table_of(drop_empty(shown[columns]))


def robustness_table(robustness: pd.DataFrame) -> Table | str:
    if robustness.empty:
        return "robustness.csv has no rows (no attack with an eps grid)"
    columns = schema.report_robustness(registry.curve_metric_names())
    return table_of(drop_empty(robustness[[c for c in columns if c in robustness]]))


def worst_case_table(experiments: pd.DataFrame) -> Table | str:
    """Each worst case beside its attacks' own robust accuracies, one column per attack."""
    worst = experiments[experiments["attack"] == schema.WORST_CASE]
    keys = ["model_hash", "norm", "attack_units", "attack_value"]
    attacks = measured(experiments)
    own = attacks[attacks["attack_param"] == "eps"].pivot_table(index=keys, columns="attack", values="acc_adv", aggfunc="first")
    shown = worst.rename(columns={"acc_adv": "worst_case", "attack_value": "eps", "n_beyond_carrier": "beyond_carrier"})
    shown = shown.merge(own, left_on=[*keys[:3], "eps"], right_index=True, how="left")  # drop_empty drops an attack in no worst case
    columns = [*schema.REPORT_CELL, "norm", "eps", "worst_case", "carried_by", "beyond_carrier", *own.columns]
    return table_of(drop_empty(shown[columns]))


def robustness_caption() -> str:
    """How to read robustness.csv, with the meaning of each per-curve metric of the registry."""
    meanings = "; ".join(f"{name}, {meaning}" for name, meaning in registry.curve_meanings().items())
    return f"{TABLE_CAPTIONS['robustness']} {meanings}."


def listed(table: pd.DataFrame | None, name: str, stage: str, columns: list[str], why_empty: str = "") -> Table | str:
    """An optional table's report columns, or why there is nothing to show."""
    if table is None:
        return f"{name} not found (run `dvc repro {stage}`)"
    if table.empty:
        return f"{name} has no rows{why_empty}"
    return table_of(drop_empty(table[[c for c in columns if c in table]]))


def cards_table(artefacts: Artefacts) -> Table | str:
    """The first MAX_ROWS cards (the page shows no more): reading 10^4 cards for a table cut
    to its first rows would be most of the page's time."""
    paths = card_paths(artefacts)
    if not paths:
        return "no model cards in cards/"
    return table_of(drop_empty(pd.DataFrame([card_row(p, artefacts.input("cards").parent) for p in paths[:MAX_ROWS]])), total=len(paths))


def baseline_sentences(comparison: pd.DataFrame, missing_reason: str | None = None) -> list[str]:
    """Whether the model scored on the test split (the selected one) beats both baselines; first,
    where no model gives E[T], why."""
    missing = (
        [f"No survival model gives E[T], so TRASH and the findings on it are not testable; every other metric stands: {missing_reason}."]
        if missing_reason
        else []
    )
    if "status" in comparison and not comparison["status"].isin(["fitted", "baseline"]).any():
        return missing or ["The survival table holds no fitted model."]
    needed = {"status", "model", "test_concordance", "beats_baselines"}
    if not needed <= set(comparison):
        return ["The survival table has no baselines; rerun `dvc repro survival`."]
    baselines = comparison[comparison["status"] == "baseline"]
    bar = " and ".join(f"{row['model'].lower()} {format_value(row['test_concordance'])}" for _, row in baselines.iterrows())
    lines = missing
    for _, row in comparison[(comparison["status"] == "fitted") & comparison["test_concordance"].notna()].iterrows():
        verdict = "beats both baselines" if str(row["beats_baselines"]).lower() == "true" else "does not beat both baselines"
        lines.append(f"{row['model']} {verdict} on test concordance: {format_value(row['test_concordance'])} against {bar}.")
    return lines


def survival_tables(
    comparison: pd.DataFrame,
    logrank: pd.DataFrame | None,
    within: pd.DataFrame | None = None,
    km_check: pd.DataFrame | None = None,
    missing_reason: str | None = None,
) -> list[Folded | Listing]:
    """Table I folded, after one plain sentence on whether the selected model beats both
    baselines on test concordance (visible: it says whether E[T] is worth anything); the
    within-cell concordance; the Kaplan-Meier check of E[T], its summary in plain words; then
    the log-rank tests of each defence against none."""
    per_family = [c for c in comparison if "[" in str(c)] + [c for c in ("km_worst_cells",) if c in comparison]  # in the tables below
    blocks: list[Folded | Listing] = [
        Listing("Survival models against the two baselines", baseline_sentences(comparison, missing_reason)),
        Folded(
            "table-survival",
            "Survival model comparison (TRASHFIRE Table I)",
            len(comparison),
            TABLE_CAPTIONS["survival"],
            table_of(drop_empty(comparison.drop(columns=per_family))),
            source="survival/aft_comparison.csv",
        ),
    ]
    if within is not None and not within.empty:
        shown = within.pivot(index="model", columns="attack_family", values="test_concordance_within")
        families = ["all"] + sorted(c for c in shown.columns if c != "all")
        shown = shown.reindex(index=list(dict.fromkeys(within["model"])), columns=[c for c in families if c in shown.columns])
        blocks.append(
            Folded(
                "table-concordance-within",
                "Test concordance within attack cells, per attack family",
                len(shown),
                TABLE_CAPTIONS["concordance_within"],
                table_of(shown.rename_axis(None, axis=1).reset_index()),
                source="survival/concordance_within.csv",
            )
        )
    if km_check is not None and not km_check.empty:
        model = comparison.loc[comparison["selected"].astype(str).str.lower() == "true", "model"] if "selected" in comparison else pd.Series(dtype=str)
        lines = survival_analysis.km_sentences(km_check, str(model.iloc[0]) if len(model) else "the selected model")
        worst = km_check.assign(off=km_check["log_ratio"].abs().fillna(np.inf)).sort_values("off", ascending=False, kind="stable").drop(columns="off")
        blocks.append(Listing("E[T] against Kaplan-Meier", lines))
        blocks.append(
            Folded(
                "table-km-check",
                "E[T] against the Kaplan-Meier restricted mean per attack cell",
                len(worst),
                TABLE_CAPTIONS["km_check"],
                table_of(worst),
                source="survival/km_check.csv",
            )
        )
    if logrank is not None and not logrank.empty:
        blocks.append(
            Folded(
                "table-logrank",
                "Log-rank tests per attack family, each defence against none (weighted samples)",
                len(logrank),
                TABLE_CAPTIONS["logrank"],
                table_of(logrank),
                source="survival/logrank.csv",
            )
        )
    return blocks


def tables_section(tables: dict, artefacts: Artefacts, survival_missing: str | None = None) -> list[Folded | Listing]:
    """Every long table, folded, in the order the page lists them."""
    t = tables
    worst = int((t["experiments"]["attack"] == schema.WORST_CASE).sum())  # none with a single attack per norm and eps: no table
    worst_case = (
        [
            folded(
                "table-worst-case",
                "Robust accuracy: the worst case per sample",
                worst,
                TABLE_CAPTIONS["worst_case"],
                worst_case_table(t["experiments"]),
                "experiments.csv",
            )
        ]
        if worst
        else []
    )
    return [
        *worst_case,
        folded(
            "table-tau",
            "Viability threshold τ(K) (EVP paper Table I)",
            rows_of(t["tau_table"]),
            TABLE_CAPTIONS["tau"],
            table_of(t["tau_table"]),
            "tau_table.csv",
        ),
        folded(
            "table-trash",
            "TRASH score over seeds",
            rows_of(t["trash_summary"]),
            TABLE_CAPTIONS["trash"],
            trash_summary_table(t["trash_summary"]),
            "trash_summary.csv",
        ),
        folded("table-trash-clocks", "TRASH on every clock", rows_of(t["trash"]), TABLE_CAPTIONS["trash_clocks"], trash_clocks_table(t["trash"]), "trash.csv"),
        folded(
            "table-depth",
            "E[T] by depth: queries to failure and latency per query (TRASHFIRE's depth claim)",
            rows_of(t["depth_decomposition"]),
            TABLE_CAPTIONS["depth"],
            depth_table(t["depth_decomposition"]),
            "depth_decomposition.csv",
        ),
        folded(
            "table-auc",
            "Normalised robustness AUC R and sensitivity S (normalised-AUC paper, appendix tables)",
            rows_of(t["auc_table"]),
            TABLE_CAPTIONS["auc"],
            auc_table(t["auc_table"]),
            "auc_table.csv",
        ),
        folded("table-robustness", "EVP and R per cell", rows_of(t["robustness"]), robustness_caption(), robustness_table(t["robustness"]), "robustness.csv"),
        folded(
            "table-brittle",
            "Brittle-score and relative improvement (brittle-score paper Table 1)",
            rows_of(t["brittle"]),
            TABLE_CAPTIONS["brittle"],
            listed(t["brittle"], "brittle.csv", "brittle", schema.REPORT_BRITTLE),
            "brittle.csv",
        ),
        folded(
            "table-eps-survival",
            "Survival in ε per cell",
            rows_of(t["eps_survival"]),
            TABLE_CAPTIONS["eps_survival"],
            listed(t["eps_survival"], "eps_survival.csv", "aggregate", schema.REPORT_EPS_SURVIVAL, " (no eps-grid or minimal-perturbation attack)"),
            "eps_survival.csv",
        ),
        *survival_tables(t["survival"], t["logrank"], t.get("concordance_within"), t.get("km_check"), survival_missing),
        folded("table-cards", "Model cards", len(card_paths(artefacts)), TABLE_CAPTIONS["cards"], cards_table(artefacts), "cards"),
    ]
