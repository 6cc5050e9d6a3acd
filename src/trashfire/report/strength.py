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
        )
    missing = None if ranking is not None else "no norm with two or more attacks (or a run from before optimality.csv: rerun `dvc repro`)"
    grid = check_table(check)
    return {
        "lead": LEAD,
        "ranking": None if ranking is None else table_of(ranking),
        "missing": missing,
        "check": check_sentence(check),
        "check_table": None if grid is None else table_of(grid),
        "per_cell": folded,
    }
