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


def card(train_hash: str, *tables: pd.DataFrame | None, **optional: Any) -> dict[str, Any]:
    """One trained cell's card from the tables `CardTables` takes (in its order, or by name):
    `reported`: per model option, what its publisher reports of it
    (trashfire.core.external.reported); `ensemble`: the ensemble's robust accuracy per model
    cell, norm and grid eps, and `optimality` each attack's (trashfire.metrics.optimality)."""
    return CardTables(*tables, **optional).card(train_hash)


class CardTables:
    """The tables a card reads, each turned into its sections per cell once (a card is then
    lookups: a filter of every table per card grows with the square of the cells)."""

    def __init__(
        self,
        experiments: pd.DataFrame,
        trash: pd.DataFrame,
        robustness: pd.DataFrame,
        brittle: pd.DataFrame,
        flags: pd.DataFrame | None = None,
        worst_case: pd.DataFrame | None = None,
        reported: dict[str, dict[str, Any]] | None = None,
        ensemble: pd.DataFrame | None = None,
        optimality: pd.DataFrame | None = None,
        certified: pd.DataFrame | None = None,
    ):
        self.trained = ByKey(experiments, "train_hash")
        self.trainings = _first_rows(experiments, "train_hash", [*schema.CARD_TRAINING, *schema.CARD_TIMES, "model", "t_train_source"])
        self.model_cells = _model_cells(experiments)
        self.reported = reported or {}
        self.attacks = _by_cell(experiments, _records(experiments.reindex(columns=schema.CARD_ATTACK)))
        self.trash = _by_cell(trash, _records(trash.reindex(columns=schema.CARD_FAMILY)))
        self.robustness = _by_cell(robustness, _records(robustness[schema.card_robustness(curve_metric_names())]))
        first = brittle.drop_duplicates("model_hash")
        self.brittle = {h: (_number(s), _number(ri)) for h, s, ri in zip(first["model_hash"], first["brittle_score"], first["brittle_ri"])}
        self.validity = _validity(flags)
        self.worst_case = _worst_case(worst_case)
        self.ensemble = None if ensemble is None else _by_cell(ensemble, _ensemble_points(ensemble))
        self.optimality = None if optimality is None else _by_cell(optimality, _rankings(optimality))
        self.certified = None if certified is None else _by_cell(certified, _brackets(certified))

    def card(self, train_hash: str) -> dict[str, Any]:
        first = self.trainings.loc[train_hash]
        figures = self.reported.get(first["model"])
        return {
            "train_hash": train_hash,
            "training": _plain(first[schema.CARD_TRAINING]),
            "times_per_sample": _plain(first.reindex(schema.CARD_TIMES)),  # FLOPs on the compute clock, seconds on the others
            "provenance": provenance(first) | ({"reported": beside_reported(self.trained.rows(train_hash), figures)} if figures else {}),
            "model_cells": [self.model_cell(head) for head in self.model_cells[train_hash]],
        }

    def model_cell(self, head: dict[str, Any]) -> dict[str, Any]:
        """One model cell's section: its head (_model_cells') and the tables' rows of it."""
        model_hash = head["model_hash"]
        score, ri = self.brittle.get(model_hash, (None, None))
        return (
            head
            | {
                "brittle_score": score,
                "brittle_ri_percent": ri,
                "attacks": self.attacks.get(model_hash, []),
                "worst_case": self.worst_case.get(model_hash, []),
                "survival_and_trash": self.trash.get(model_hash, []),
                "evp_and_auc": self.robustness.get(model_hash, []),
                "validity": self.validity.get(model_hash),
            }
            | self.strength(model_hash)
            | self.bracket(model_hash)
        )

    def strength(self, model_hash: str) -> dict[str, Any]:
        """How strong the attacks were on this model cell: the ensemble's robust accuracy per
        norm and eps (each sample broken by any attack of the norm at that eps or below), and
        each attack's optimality against it."""
        if self.ensemble is None and self.optimality is None:
            return {}
        return {"ensemble": (self.ensemble or {}).get(model_hash, []), "optimality": (self.optimality or {}).get(model_hash, [])}

    def bracket(self, model_hash: str) -> dict[str, Any]:
        """The certified floor and attacked ceiling of the smoothed classifier per l2 eps (the
        certify stage's), or "no certificate" for a cell without one."""
        if self.certified is None:
            return {}
        return {"certified": self.certified.get(model_hash, "no certificate")}


def _first_rows(experiments: pd.DataFrame, key: str, columns: list[str]) -> pd.DataFrame:
    """Each `key`'s first row of experiments.csv, of the `columns` it has, indexed by key."""
    first = experiments.drop_duplicates(key)
    return first[[c for c in dict.fromkeys(columns) if c in first]].set_index(first[key])


def _model_cells(experiments: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Per trained cell, its model cells' heads (hash, defence, benign accuracy, degenerate,
    prediction time, from each one's first row) in the order they first appear."""
    first = experiments.drop_duplicates("model_hash")
    defences = [{k: _number(v) for k, v in d.items()} for d in first[schema.CARD_DEFENCE].to_dict("records")]  # _plain's values
    degenerate = first["degenerate"] if "degenerate" in first else pd.Series(False, index=first.index)
    heads: dict[str, list[dict[str, Any]]] = {}
    for train_hash, model_hash, defence, acc, flag, t_predict in zip(
        first["train_hash"], first["model_hash"], defences, first["acc_ben"], degenerate, first["t_predict"]
    ):
        head = {"model_hash": model_hash, "defence": defence, "acc_ben": _number(acc), "degenerate": _flag(flag), "t_predict": _number(t_predict)}
        heads.setdefault(train_hash, []).append(head)
    return heads


def _by_cell(table: pd.DataFrame, records: list[Any]) -> dict[str, list[Any]]:
    """Each row's record (in table order) gathered per model hash."""
    cells: dict[str, list[Any]] = {}
    for model_hash, record in zip(table["model_hash"], records):
        cells.setdefault(model_hash, []).append(record)
    return cells


def _ensemble_points(ensemble: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"norm": n, "eps": _number(e), "units": "pixel", "acc": _number(a)} for n, e, a in zip(ensemble["norm"], ensemble["eps_pixel"], ensemble["acc"])]


def _rankings(optimality: pd.DataFrame) -> list[dict[str, Any]]:
    columns = zip(optimality["attack_family"], optimality["n"], optimality["optimality"])
    return [{"attack_family": f, "n": int(n), "optimality": _number(o)} for f, n, o in columns]


def _brackets(certified: pd.DataFrame) -> list[dict[str, Any]]:
    columns = zip(certified["eps"], certified["certified_acc"], certified["attacked_acc"], certified["bracket"])
    return [
        {"eps": _number(e), "units": "pixel", "norm": "2", "certified_acc": _number(c), "attacked_acc": _number(a), "bracket": _number(b)}
        for e, c, a, b in columns
    ]


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


def _worst_case(worst_case: pd.DataFrame | None) -> dict[str, list[dict[str, Any]]]:
    """Per model cell, its robust accuracy in the worst case per sample, per norm and eps
    (trashfire.tables.worst_case), each with what measured it and the attack that carried it."""
    if worst_case is None or worst_case.empty:
        return {}
    records = _records(worst_case.reindex(columns=schema.CARD_WORST_CASE))
    return _by_cell(worst_case, [r | {"n_beyond_carrier": int(r["n_beyond_carrier"])} for r in records])  # a count, read back as float beside the attacks' NaN


def _validity(flags: pd.DataFrame | None) -> dict[str, dict[str, Any]]:
    """Per model cell, each validity flag: tripped (true/false, null where this run cannot
    check it) and what was seen (trashfire.metrics.validity)."""
    if flags is None or flags.empty:
        return {}
    first = flags.drop_duplicates("model_hash")
    # a flag the run could not check (no cell it applies to) has no column: null
    values = {
        c: first[c].tolist() if c in first else [None] * len(first) for c in ["flags", *schema.VALIDITY_FLAGS, *(f"{n}_detail" for n in schema.VALIDITY_FLAGS)]
    }
    return {
        model_hash: {"tripped": values["flags"][i] or "none"}
        | {name: {"tripped": _number(values[name][i]), "seen": values[f"{name}_detail"][i]} for name in schema.VALIDITY_FLAGS}
        for i, model_hash in enumerate(first["model_hash"])
    }


def write_cards(folder: Path, experiments: pd.DataFrame, *tables: pd.DataFrame | None, **named: Any) -> list[Path]:
    """A card per trained cell of `experiments`, from the tables `card` takes after it."""
    folder.mkdir(parents=True, exist_ok=True)
    indexed = CardTables(experiments, *tables, **named)
    written = []
    for train_hash in experiments["train_hash"].unique():
        path = cell_file(folder, train_hash, ".json")
        write_json(path, indexed.card(train_hash))
        written.append(path)
    for stale in set(folder.glob("*.json")) - set(written):
        stale.unlink()
    return written


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row as _plain makes it of iterrows' Series (a row of `.values`, each item as Python's)."""
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
