"""What the figures stage reads: the tables `timing`, `aggregate`, `brittle` and `survival`
recorded, metrics.json and the model cards. A required input that is missing is the user's to
produce: one line names the stage to run."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from pathlib import Path

import pandas as pd

from trashfire.core import schema
from trashfire.core.errors import DataError
from trashfire.core.stage import Artefacts
from trashfire.report.formatting import defence_order
from trashfire.tables.experiments import read_experiments

# The tables aggregate writes; any of them missing means aggregate has not run.
AGGREGATE_TABLES = ("trash", "trash_summary", "robustness", "tau_table", "evp_tau", "evp_convergence", "auc_table", "curves")


def read_table(artefacts: Artefacts, name: str, *, stage: str = "aggregate", required: bool = True) -> pd.DataFrame | None:
    """A recorded CSV with label columns kept as strings and empty labels as ''. A required
    table that is missing is the user's to produce: one line naming the stage to run."""
    path = artefacts.input(name)
    if not path.is_file():
        if required:
            _missing(path, stage)
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


def _missing(path: Path, stage: str) -> None:
    raise DataError(f"{path} not found; run `dvc repro {stage}` first")


def read_metrics(artefacts: Artefacts) -> dict:
    path = artefacts.input("metrics.json")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} not found; run `dvc repro aggregate` first") from None
    except json.JSONDecodeError as err:
        raise DataError(f"corrupt {path}: {err}; rerun `dvc repro aggregate`") from None


def table_specs() -> dict[str, tuple[str, str, bool]]:
    """Every table the figures and the report read beside experiments.csv (the figures
    stage's deps in dvc.yaml, so DVC makes each before it runs), in the order they are read:
    name -> (its path under reports/, the stage that writes it, whether it is required).
    brittle.csv is optional (the brittle stage may not have run), and so are the tables of
    how strong the attacks are (a run from before them has none, and the report says so)."""
    specs = {name: (f"{name}.csv", "aggregate", True) for name in AGGREGATE_TABLES}
    specs["brittle"] = ("brittle.csv", "aggregate", False)
    specs |= {name: (f"{name}.csv", "aggregate", True) for name in ("eps_survival", "eps_survival_curves", "findings", "validity", "depth_decomposition")}
    specs["survival"] = ("survival/aft_comparison.csv", "survival", True)
    # Table I's companions: the report shows those the survival stage wrote beside Table I
    specs |= {name: (f"survival/{name}.csv", "survival", False) for name in ("logrank", "concordance_within", "km_check")}
    specs["budget_families"] = ("budget/families.csv", "budget", False)
    for name, stage in (
        ("query_curves", "timing"),
        ("minimal_eps_check", "timing"),
        ("optimality", "aggregate"),
        ("optimality_ranking", "aggregate"),
        ("certified", "certify"),
    ):
        specs[name] = (f"{name}.csv", stage, False)
    return specs


def read_tables(artefacts: Artefacts, leave: Collection[str] = ()) -> dict[str, pd.DataFrame | None]:
    """Every table the figures and the report need (table_specs), but those in `leave`: a
    required one of them is only checked to be there, so that every missing input is reported
    before anything is drawn (`read_named` reads them)."""
    path = artefacts.input("experiments.csv")
    if not path.is_file():
        _missing(path, "timing")
    specs = table_specs()
    for name in leave:
        file, stage, required = specs[name]
        if required and not artefacts.input(file).is_file():
            _missing(artefacts.input(file), stage)
    experiments = read_experiments(path).fillna({"pretrained_on": "", "defence_param": ""})
    return {"experiments": experiments} | read_named(artefacts, [name for name in specs if name not in leave])


def read_named(artefacts: Artefacts, names: Iterable[str]) -> dict[str, pd.DataFrame | None]:
    """The tables `names` of table_specs."""
    specs = table_specs()
    return {name: read_table(artefacts, specs[name][0], stage=specs[name][1], required=specs[name][2]) for name in names}


def card_row(path: Path, base: Path) -> dict:
    """A card's training configuration, the defences of the model cells built on it and how
    many of them are degenerate."""
    try:
        card = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        card = {}
    card = card if isinstance(card, dict) else {}
    training = card.get("training") if isinstance(card.get("training"), dict) else card
    cells = [c for c in card.get("model_cells", []) if isinstance(c, dict)] if isinstance(card.get("model_cells"), list) else []
    defences = {str(c["defence"].get("defence")) if isinstance(c.get("defence"), dict) else str(c.get("defence")) for c in cells}
    flagged = sum(c.get("degenerate") is True for c in cells)
    provenance = card.get("provenance") if isinstance(card.get("provenance"), dict) else {}
    return (
        {"card": str(path.relative_to(base))}
        | {k: training.get(k) for k in schema.REPORT_CARD}
        | {"t_train": provenance.get("t_train_source", "measured")}
        | {"model cells": len(cells), "defences": ", ".join(defence_order(defences)), "degenerate": flagged}
        | beside_publisher(provenance.get("reported"))
    )


def beside_publisher(reported) -> dict:
    """An imported model's published clean and robust accuracy beside ours ("publisher / ours"):
    no columns for a model trashfire trained."""
    if not isinstance(reported, dict) or not isinstance(reported.get("theirs"), dict) or not isinstance(reported.get("ours"), dict):
        return {}
    theirs, ours = reported["theirs"], reported["ours"]

    def pair(key: str) -> str:
        return " / ".join("n/a" if side.get(key) is None else f"{side[key]:.3f}" for side in (theirs, ours))

    theirs_at = f"{theirs.get('attack') or 'their attack'} at eps {theirs['eps']:.4g}" if theirs.get("eps") is not None else "eps not given"
    ours_at = ours.get("robust_attack") or "none of ours at that eps"
    return {"clean acc, publisher / ours": pair("clean_acc"), "robust acc, publisher / ours": f"{pair('robust_acc')} ({theirs_at}; ours: {ours_at})"}


def card_paths(artefacts: Artefacts) -> list[Path]:
    return sorted(artefacts.input("cards").glob("*.json"))
