"""The report's section "How strong are the attacks?": each attack's optimality against the best
any attack of its norm found (AttackBench), the check of the grid against each sample's minimal
eps, and the certified floor where one exists (docs/attacks.md)."""

from __future__ import annotations

import pandas as pd

from trashfire.report.sections import Folded, drop_empty, table_of

LEAD = (
    "Every robust accuracy here is an upper bound: a sample no attack broke may be robust, or the attacks may be weak. Per model cell and norm, the "
    "ensemble is each sample's smallest eps that any attack of the norm broke it at (a minimal-norm attack's norm, a fixed-eps attack's grid eps). An "
    "attack's optimality (AttackBench: Cinà et al., AAAI 2025) is 1 minus the area between its robust-accuracy curve and the ensemble's, over the room "
    "the ensemble leaves: 1 is the ensemble's best on every sample, 0 is breaking nothing."
)


def ranking_table(ranking: pd.DataFrame | None) -> pd.DataFrame | None:
    if ranking is None or ranking.empty:
        return None
    return pd.DataFrame(
        {
            "dataset": ranking["dataset"],
            "norm": "l" + ranking["norm"].astype(str).str.replace(".0", "", regex=False),
            "rank": ranking["rank"],
            "attack family": ranking["attack_family"],
            "optimality (mean over model cells)": ranking["optimality_mean"].map(lambda v: f"{v:.3f}"),
            "range": [f"{lo:.2f} to {hi:.2f}" for lo, hi in zip(ranking["optimality_min"], ranking["optimality_max"])],
            "model cells": ranking["n_cells"],
        }
    )


def check_sentence(check: pd.DataFrame | None) -> str:
    """What the grid check found, in one sentence."""
    if check is None or check.empty:
        return "No grid attack cell: robust accuracy comes from the per-sample minimal eps alone."
    cells, below, above = len(check), int(check["n_below"].sum()), int(check["n_above"].sum())
    moved = int((check["n_below"] > 0).sum())
    verdict = "equals" if bool(check["agrees"].all()) else "does NOT equal (a bug: see minimal_eps_check.csv)"
    return (
        f"At each of the {cells} grid cells (family and eps), robust accuracy read from the per-sample minimal eps {verdict} the cell's own, less the "
        f"samples the cell left standing that some attack broke at that eps or below: {below} such samples in {moved} cells ({above} the other way)."
    )


def check_table(check: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per data set, norm, family and eps: the cells' mean robust accuracy, from the grid and
    from the minimal eps, and the samples another attack broke below."""
    if check is None or check.empty:
        return None
    grouped = check.groupby(["dataset", "norm", "attack_family", "eps"], sort=True)
    table = grouped.agg(
        cells=("n", "size"), samples=("n", "sum"), acc_grid=("acc_grid", "mean"), acc_minimal=("acc_minimal", "mean"), broken_below=("n_below", "sum")
    )
    return table.reset_index().rename(
        columns={"acc_grid": "robust acc, grid", "acc_minimal": "robust acc, minimal eps", "broken_below": "broken below by another"}
    )


NO_CERTIFICATE = (
    "No certificate in this run: certify.enabled is false (the default: its cost is beyond the default's time bound) or no model cell's "
    'defence declares smoothing: true (gauss_in). `make params ARGS="experiment=certified"` runs it.'
)


def bracket_table(certified: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per smoothing configuration (mean over seeds) and l2 eps: certified <= true <= attacked."""
    if certified is None or certified.empty:
        return None
    keys = ["dataset", "model", "epochs", "defence", "defence_value", "eps"]
    grouped = certified.groupby(keys, sort=True)
    table = grouped.agg(
        seeds=("seed", "nunique"),
        samples=("n_samples", "sum"),
        certified=("certified_acc", "mean"),
        attacked=("attacked_acc", "mean"),
        bracket=("bracket", "mean"),
        widest=("bracket", "max"),
        n=("n", "first"),
    ).reset_index()
    return table.rename(
        columns={"defence_value": "sigma", "eps": "eps (l2, pixel)", "certified": "certified acc", "attacked": "attacked acc", "widest": "widest bracket"}
    )


def bracket_sentence(certified: pd.DataFrame | None, experiments: pd.DataFrame) -> str:
    if certified is None or certified.empty:
        return NO_CERTIFICATE
    above = int((certified["certified_acc"] > certified["attacked_acc"] + 1e-12).sum())
    others = sorted(set(experiments["defence"]) - set(certified["defence"]))
    order = "certified <= attacked in every cell and eps" if above == 0 else f"certified ABOVE attacked in {above} cell(s) and eps: a bug, see certified.csv"
    rest = f" Model cells of {', '.join(others)}: no certificate (randomized smoothing certifies a model trained with Gaussian noise)." if others else ""
    return (
        "Randomized smoothing (Cohen et al. 2019): per Gauss-in cell, CERTIFY's certified l2 accuracy is a floor and the smoothed classifier's accuracy "
        f"under SmoothAdv's EOT attack a ceiling; the true robust accuracy lies between ({order}).{rest}"
    )


def attacks_section(tables: dict) -> dict:
    ranking = ranking_table(tables.get("optimality_ranking"))
    check = tables.get("minimal_eps_check")
    per_cell = tables.get("optimality")
    folded = None
    if per_cell is not None and not per_cell.empty:
        shown = drop_empty(per_cell[["model_hash", "dataset", "norm", "attack_family", "n", "optimality", "clean_acc", "eps_max", "note"]])
        folded = Folded(
            "table-optimality",
            "Optimality per model cell",
            len(shown),
            "optimality.csv: each attack against the ensemble of its norm, per model cell; eps_max in pixel units",
            table_of(shown),
            source="optimality.csv",
        )
    missing = None if ranking is not None else "no norm with two or more attacks (or a run from before optimality.csv: rerun `dvc repro`)"
    grid = check_table(check)
    certified = tables.get("certified")
    brackets = bracket_table(certified)
    return {
        "bracket": bracket_sentence(certified, tables["experiments"]),
        "bracket_table": None if brackets is None else table_of(brackets),
        "lead": LEAD,
        "ranking": None if ranking is None else table_of(ranking),
        "missing": missing,
        "check": check_sentence(check),
        "check_table": None if grid is None else table_of(grid),
        "per_cell": folded,
    }
