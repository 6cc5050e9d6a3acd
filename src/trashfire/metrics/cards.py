"""One JSON card per trained cell, in the spirit of 002's model cards: what a user of that
model needs to judge its robustness and its cost, with every model cell (predict-time
defence) built on it, each flagged `degenerate` where its benign accuracy is at chance.
Cards of cells no longer in the grid are removed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.core.groups import ByKey
from trashfire.core.records import cell_file, write_json
from trashfire.metrics.registry import curve_metric_names

# A card's sections, each a column set of the schema: the training configuration
# (CARD_TRAINING), its times (CARD_TIMES); per model cell its defence (CARD_DEFENCE), attacks
# (CARD_ATTACK: each robust accuracy beside what measured it, `evaluation`), its worst case per
# sample per norm and eps (CARD_WORST_CASE), TRASH per attack family (CARD_FAMILY), and per eps
# family the per-curve metrics of the registry with R (schema.card_robustness).


def card(
    train_hash: str,
    experiments: pd.DataFrame | ByKey,
    trash: pd.DataFrame,
    robustness: pd.DataFrame,
    brittle: pd.DataFrame,
    flags: pd.DataFrame | None = None,
    worst_case: pd.DataFrame | None = None,
    reported: dict[str, dict[str, Any]] | None = None,
    ensemble: pd.DataFrame | None = None,
    optimality: pd.DataFrame | None = None,
    certified: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """`reported`: per model option, what its publisher reports of it (trashfire.core.external.reported);
    `ensemble`: the ensemble's robust accuracy per model cell, norm and grid eps, and
    `optimality` each attack's (trashfire.metrics.optimality). Each table may be a ByKey of it
    (write_cards': the cell's rows by lookup)."""
    rows = _own(experiments, train_hash, "train_hash")
    first = rows.iloc[0]
    figures = (reported or {}).get(first["model"])
    return {
        "train_hash": train_hash,
        "training": _plain(first[schema.CARD_TRAINING]),
        "times_per_sample": _plain(first.reindex(schema.CARD_TIMES)),  # FLOPs on the compute clock, seconds on the others
        "provenance": provenance(first) | ({"reported": beside_reported(rows, figures)} if figures else {}),
        "model_cells": [
            _model_cell(group, trash, robustness, brittle, flags, worst_case)
            | _strength(group["model_hash"].iloc[0], ensemble, optimality)
            | _bracket(group["model_hash"].iloc[0], certified)
            for _, group in rows.groupby("model_hash", sort=False)
        ],
    }


def _bracket(model_hash: str, certified: pd.DataFrame | None) -> dict[str, Any]:
    """The certified floor and attacked ceiling of the smoothed classifier per l2 eps (the
    certify stage's), or "no certificate" for a cell without one."""
    if certified is None:
        return {}
    mine = _own(certified, model_hash)
    if mine.empty:
        return {"certified": "no certificate"}
    return {
        "certified": [
            {
                "eps": _number(r.eps),
                "units": "pixel",
                "norm": "2",
                "certified_acc": _number(r.certified_acc),
                "attacked_acc": _number(r.attacked_acc),
                "bracket": _number(r.bracket),
            }
            for r in mine.itertuples()
        ]
    }


def _strength(model_hash: str, ensemble: pd.DataFrame | None, optimality: pd.DataFrame | None) -> dict[str, Any]:
    """How strong the attacks were on this model cell: the ensemble's robust accuracy per norm
    and eps (each sample broken by any attack of the norm at that eps or below), and each
    attack's optimality against it."""
    if ensemble is None and optimality is None:
        return {}
    mine = _own(ensemble, model_hash) if ensemble is not None else pd.DataFrame()
    ranked = _own(optimality, model_hash) if optimality is not None else pd.DataFrame()
    return {
        "ensemble": [{"norm": r.norm, "eps": _number(r.eps_pixel), "units": "pixel", "acc": _number(r.acc)} for r in mine.itertuples()],
        "optimality": [{"attack_family": r.attack_family, "n": int(r.n), "optimality": _number(r.optimality)} for r in ranked.itertuples()],
    }


def provenance(row: pd.Series) -> dict[str, Any]:
    """Who trained the model and where its t_train comes from: measured by our train stage, or
    supplied with an imported model (trashfire.core.external), which we evaluate only."""
    source = row.get("t_train_source")
    if not isinstance(source, str) or not source:
        return {"trained_by": "trashfire", "t_train_source": "measured", "t_train": "measured by trashfire's train stage on both clocks"}
    return {
        "trained_by": (
            "not trashfire: an external model imported from its checkpoint (model.<name>.checkpoint) and evaluated as it is; its epochs and lr are unknown"
        ),
        "t_train_source": source,
        "t_train": f"supplied, not measured: from {_source_text(source)}",
    }


def beside_reported(rows: pd.DataFrame, figures: dict[str, Any]) -> dict[str, Any]:
    """The publisher's clean and robust accuracy beside ours: the undefended model's benign
    accuracy on our test split, and its lowest robust accuracy over the attacks run at the
    publisher's norm and eps (pixel units), with the attack that gave it; null where we ran
    none there."""
    undefended = rows[rows["defence"] == "none"]
    ours: dict[str, Any] = {"clean_acc": _number(undefended["acc_ben"].iloc[0]) if len(undefended) else None, "robust_acc": None, "robust_attack": None}
    if figures.get("eps") is not None and len(undefended) and "attack_units" in undefended:
        same = (undefended["attack_units"] == "pixel") & np.isclose(undefended["attack_value"].astype(float), figures["eps"], rtol=1e-4, atol=0)
        if figures.get("norm") is not None:
            same &= undefended["norm"].astype(str) == str(figures["norm"])
        if same.any():
            worst = undefended[same].loc[undefended.loc[same, "acc_adv"].idxmin()]
            ours |= {"robust_acc": _number(worst["acc_adv"]), "robust_attack": f"{worst['attack']} {worst['norm']}"}
    return {"theirs": dict(figures), "ours": ours}


def _source_text(source: str) -> str:
    kind, _, where = source.partition(":")
    return f"the training log {where}" if kind == "log" else "the config (model.<name>.t_train)"


def _model_cell(
    rows: pd.DataFrame, trash: pd.DataFrame, robustness: pd.DataFrame, brittle: pd.DataFrame, flags: pd.DataFrame | None, worst_case: pd.DataFrame | None
) -> dict[str, Any]:
    model_hash = rows["model_hash"].iloc[0]
    first = rows.iloc[0]
    mine = _own(brittle, model_hash)
    return {
        "model_hash": model_hash,
        "defence": _plain(first[schema.CARD_DEFENCE]),
        "acc_ben": _number(first["acc_ben"]),
        "degenerate": _flag(first.get("degenerate", False)),
        "t_predict": _number(first["t_predict"]),
        "brittle_score": _number(mine["brittle_score"].iloc[0]) if len(mine) else None,
        "brittle_ri_percent": _number(mine["brittle_ri"].iloc[0]) if len(mine) else None,
        "attacks": _records(rows.reindex(columns=schema.CARD_ATTACK)),
        "worst_case": _worst_case(worst_case, model_hash),
        "survival_and_trash": _records(_own(trash, model_hash).reindex(columns=schema.CARD_FAMILY)),
        "evp_and_auc": _records(_own(robustness, model_hash)[schema.card_robustness(curve_metric_names())]),
        "validity": _validity(flags, model_hash),
    }


def _worst_case(worst_case: pd.DataFrame | None, model_hash: str) -> list[dict[str, Any]]:
    """The cell's robust accuracy in the worst case per sample, per norm and eps
    (trashfire.tables.worst_case), each with what measured it and the attack that carried it."""
    if worst_case is None or worst_case.empty:
        return []
    mine = _own(worst_case, model_hash).reindex(columns=schema.CARD_WORST_CASE)
    return [r | {"n_beyond_carrier": int(r["n_beyond_carrier"])} for r in _records(mine)]  # a count, read back as float beside the attacks' NaN


def _validity(flags: pd.DataFrame | None, model_hash: str) -> dict[str, Any] | None:
    """Each validity flag of the cell: tripped (true/false, null where this run cannot check
    it) and what was seen (trashfire.metrics.validity)."""
    mine = _own(flags, model_hash) if flags is not None else None
    if mine is None or mine.empty:
        return None
    row = mine.iloc[0]
    # a flag the run could not check (no cell it applies to) has no column: null
    return {"tripped": row["flags"] or "none"} | {
        name: {"tripped": _number(row.get(name)), "seen": row.get(f"{name}_detail")} for name in schema.VALIDITY_FLAGS
    }


def write_cards(folder: Path, experiments: pd.DataFrame, *tables: pd.DataFrame | None, **named: Any) -> list[Path]:
    """A card per trained cell of `experiments`, from the tables `card` takes after it."""
    folder.mkdir(parents=True, exist_ok=True)
    # each table's rows per cell by one lookup: a filter per card grows with the square of the cells
    tables = tuple(_by_model(t) for t in tables)
    named = {name: _by_model(t) for name, t in named.items()}
    trained = ByKey(experiments, "train_hash")
    written = []
    for train_hash in experiments["train_hash"].unique():
        path = cell_file(folder, train_hash, ".json")
        write_json(path, card(train_hash, trained, *tables, **named))
        written.append(path)
    for stale in set(folder.glob("*.json")) - set(written):
        stale.unlink()
    return written


def _by_model(table: Any) -> Any:
    return ByKey(table, "model_hash") if isinstance(table, pd.DataFrame) and "model_hash" in table else table


def _own(table: pd.DataFrame | ByKey, key: str, column: str = "model_hash") -> pd.DataFrame:
    """A table's rows of one cell: looked up where write_cards indexed the table, else filtered."""
    return table.rows(key) if isinstance(table, ByKey) else table[table[column] == key]


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row as _plain makes it (iterrows' values: a row of `.values`, each item as Python's)."""
    return [dict(zip(table.columns, map(_number, row))) for row in table.to_numpy().tolist()]


def _flag(value: Any) -> bool:
    """timing's `degenerate`: the cell is at chance, so its R, EVP and brittle-score say nothing
    and the headline leaves it out. Compared as text: bool(NaN) and bool("False") are True."""
    return str(value).strip().lower() == "true"


def _plain(row: pd.Series) -> dict[str, Any]:
    return {key: _number(value) for key, value in row.items()}


def _number(value: Any) -> Any:
    """JSON has no NaN: missing values are null; numpy scalars become Python numbers."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
