"""Stage `budget`: is each attack's budget large enough? (docs/design.md, "Budget sufficiency")

1. The calibration reruns (trashfire.budget.reruns): per family in `budget.calibrate`
   (attack option -> share of model cells), that share of the model cells attacked again at
   `factor` times the family's budget, into `budget_reruns/` (cells cached by hash, as the
   attack stage caches its own).
2. Per calibrated family, the logistic model of "breaks within the larger budget" given a
   standing sample's `margin_at_budget` (trashfire.budget.model), fitted on those reruns.
3. `budget/sufficiency.csv`: per attack cell of a family with a budget (max_iter), its
   samples, broken share, whether it is a calibration cell and the share its rerun broke
   beyond the run's (`observed`), and the model's `still_breakable` with its 95% predictive
   interval; `budget/families.csv`: per family, the mean estimated and observed shares and
   the family's verdict with its reason (`budget_too_small`).

A family's budget is too small where a cell's observed share, or the lower bound of its
estimate, exceeds `budget.share`; an image-by-image black-box search of fewer
than `budget.min_search_iter` iterations that is not calibrated is too small for
that reason alone, said once for the family.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire.attacks.spec import engine_of
from trashfire.attacks.store import attack_record_path, benign_path, outcomes_path
from trashfire.budget import reruns
from trashfire.budget.model import FamilyModel, estimate, fit_family
from trashfire.core import schema
from trashfire.core.errors import DataError
from trashfire.core.grid import AttackCell, attack_cells
from trashfire.core.records import atomic_path, read_json, read_npz, write_csv
from trashfire.core.stage import Artefacts

log = logging.getLogger(__name__)

CELL_COLUMNS = [
    "attack_hash",
    "model_hash",
    "attack",
    "norm",
    "attack_family",
    "attack_value",
    "defence",
    "max_iter",
    "factor",
    "samples",
    "broken",
    "standing",
    "calibration",
    "observed",
    "still_breakable",
    "still_breakable_low",
    "still_breakable_high",
]


def calibrated_shares(cfg: DictConfig) -> dict[str, float]:
    """The families to calibrate that this grid attacks with (others are skipped, with a note)."""
    shares = {}
    for name, share in (cfg.budget.get("calibrate") or {}).items():
        if name in cfg.attack:
            shares[name] = float(share)
        else:
            log.info("budget.calibrate.%s: no attack %s in this grid, nothing to calibrate", name, name)
    return shares


def check(cfg: DictConfig, artefacts: Artefacts) -> pd.DataFrame:
    """Run the calibration reruns, fit, and write sufficiency.csv and families.csv; returns
    the per-cell table."""
    settings = cfg.budget
    factor, seed, draws = float(settings.factor), int(settings.seed), int(settings.draws)
    shares = calibrated_shares(cfg)
    pairs = reruns.calibration_pairs(cfg, shares, factor, seed)  # a bad family is a ConfigError here, before any compute
    rerun_folder = artefacts.output("budget_reruns")
    rerun_folder.mkdir(parents=True, exist_ok=True)  # DVC's output, also where nothing is calibrated
    if pairs:
        from trashfire.attacks.campaign import attack_grid  # torch and ART load only when there is something to rerun

        share_benign_records(pairs, artefacts.input("attacks"), rerun_folder)
        rerun_artefacts = Artefacts(
            "budget", reads={"processed": artefacts.input("processed"), "models": artefacts.input("models")}, writes={"attacks": rerun_folder}
        )
        attack_grid(reruns.larger_budget_config(cfg, factor, shares), rerun_artefacts, cells=[p.larger for p in pairs], desc="budget reruns")
    cells = [cell for cell in attack_cells(cfg) if cell.spec.get("max_iter") is not None]
    samples = standing_samples(cells, artefacts.input("attacks"))
    calibration = calibration_samples(pairs, samples, rerun_folder)
    table = cell_table(cells, samples, calibration, {pair.run.hash for pair in pairs}, factor)
    models = {}
    for name in shares:
        family = calibration[calibration["attack"] == name]
        if family.empty:
            continue
        model = models[name] = fit_family(family, draws, seed)
        log.info(
            "budget: %s calibrated on %d standing samples of %d model cells, %d broken by %gx the budget",
            name,
            model.calibration_samples,
            model.calibration_models,
            model.calibration_breaks,
            factor,
        )
        table = with_estimates(table, samples, model, name, seed)
    out = artefacts.output("budget")
    out.mkdir(parents=True, exist_ok=True)
    write_csv(table[CELL_COLUMNS], out / "sufficiency.csv")
    write_csv(family_table(cfg, table, models, shares), out / "families.csv")
    return table


def share_benign_records(pairs: list[reruns.Pair], run_folder: Path, rerun_folder: Path) -> None:
    """The run's benign record of each calibration model cell, copied where the reruns look
    for it: the same model on the same images, so the reruns do not evaluate and probe it again."""
    for model_hash in sorted({pair.run.model.hash for pair in pairs}):
        source, target = benign_path(run_folder, model_hash), benign_path(rerun_folder, model_hash)
        if source.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(target) as tmp:
                shutil.copyfile(source, tmp)


def read_cell(folder: Path, cell: AttackCell) -> tuple[dict, dict[str, np.ndarray]]:
    record_file, arrays_file = attack_record_path(folder, cell.hash), outcomes_path(folder, cell.hash)
    if not record_file.is_file() or not arrays_file.is_file():
        raise DataError(f"{record_file}: no record of attack cell {cell.attack} {cell.norm} {cell.value:g}; run the attack stage first")
    return read_json(record_file), read_npz(arrays_file)


def standing_samples(cells: list[AttackCell], folder: Path) -> pd.DataFrame:
    """Every sample of `cells` with its cell's labels, its event and its margin at the budget."""
    parts = []
    for cell in cells:
        record, arrays = read_cell(folder, cell)
        if "margin_at_budget" not in arrays:
            raise DataError(f"{outcomes_path(folder, cell.hash)}: outcome arrays without margin_at_budget, written before it was kept; rerun the attack stage")
        parts.append(
            pd.DataFrame(
                {
                    "attack_hash": cell.hash,
                    "model_hash": cell.model.hash,
                    "attack": cell.attack,
                    "norm": cell.norm,
                    "attack_value": cell.value,
                    "defence": record["defence"],
                    "max_iter": int(cell.spec["max_iter"]),
                    "position": arrays["position"],
                    "event": arrays["event"].astype(bool),
                    "margin_at_budget": arrays["margin_at_budget"],
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["attack_hash", "attack", "event", "margin_at_budget", "position"])
    return frame.assign(strength=frame["attack_value"]) if len(frame) else frame.assign(strength=[])


def calibration_samples(pairs: list[reruns.Pair], samples: pd.DataFrame, rerun_folder: Path) -> pd.DataFrame:
    """The standing samples of the calibration cells (from `samples`, the run's), each with
    `breaks_later`: its rerun broke it."""
    by_cell = dict(tuple(samples.groupby("attack_hash", sort=False))) if len(samples) else {}
    parts = []
    for pair in pairs:
        run = by_cell[pair.run.hash]
        _, larger = read_cell(rerun_folder, pair.larger)
        if not np.array_equal(run["position"].to_numpy(), larger["position"]):
            raise DataError(f"{outcomes_path(rerun_folder, pair.larger.hash)}: its samples are not the run's; delete budget_reruns and rerun")
        standing = ~run["event"].to_numpy(dtype=bool)
        parts.append(
            run.loc[standing, ["attack_hash", "model_hash", "attack", "defence", "strength", "margin_at_budget"]].assign(
                breaks_later=larger["event"].astype(bool)[standing].astype(int)
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["attack_hash", "attack", "breaks_later"])


def cell_table(cells: list[AttackCell], samples: pd.DataFrame, calibration: pd.DataFrame, rerun: set[str], factor: float) -> pd.DataFrame:
    """Per cell: labels, samples, broken and standing shares, and the observed share of the
    calibration cells (`rerun`: the breaks their rerun added, over the cell's samples)."""
    if samples.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    by_cell = samples.groupby("attack_hash", sort=False)
    table = by_cell[["model_hash", "attack", "norm", "attack_value", "defence", "max_iter"]].first()
    table["samples"] = by_cell.size()
    table["broken"] = by_cell["event"].mean()
    table["standing"] = 1.0 - table["broken"]
    table["attack_family"] = schema.attack_family(table["attack"], table["norm"])
    table["factor"] = factor
    breaks = calibration.groupby("attack_hash")["breaks_later"].sum() if len(calibration) else pd.Series(dtype=float)
    table["calibration"] = table.index.isin(list(rerun))
    table["observed"] = (breaks.reindex(table.index).fillna(0.0) / table["samples"]).where(table["calibration"])
    for column in ("still_breakable", "still_breakable_low", "still_breakable_high"):
        table[column] = np.nan
    return table.rename_axis("attack_hash").reset_index()


def with_estimates(table: pd.DataFrame, samples: pd.DataFrame, model: FamilyModel, name: str, seed: int) -> pd.DataFrame:
    mine = table["attack"] == name
    own = table.loc[mine].set_index("attack_hash")["samples"]
    standing = samples[(samples["attack"] == name) & ~samples["event"]]
    estimates = estimate(model, standing, own, seed)
    for column in estimates:
        table.loc[mine, column] = estimates[column].reindex(table.loc[mine, "attack_hash"]).to_numpy()
    return table


def too_small(table: pd.DataFrame, share: float) -> pd.Series:
    """Per cell: its rerun broke more than `share` of its samples, or (not rerun) the lower
    bound of its estimate exceeds `share`; NaN where neither is known."""
    observed = table["observed"] > share
    estimated = table["still_breakable_low"] > share
    known = table["observed"].notna() | table["still_breakable_low"].notna()
    return observed.where(table["observed"].notna(), estimated).where(known)


def family_table(cfg: DictConfig, table: pd.DataFrame, models: dict[str, FamilyModel], shares: dict[str, float]) -> pd.DataFrame:
    """Per attack family with a budget: its cells, the mean estimated and observed shares, and
    whether its budget is too small, with the reason."""
    share, minimum = float(cfg.budget.share), int(cfg.budget.min_search_iter)
    rows = []
    flags = too_small(table, share)
    for (name, family), cells in table.groupby(["attack", "attack_family"], sort=True):
        spec = cfg.attack[name]
        max_iter = int(spec.max_iter)
        search = engine_of(spec) in ("per_image", "sequence")
        tripped = flags[cells.index].dropna()
        model = models.get(name)
        row = {
            "attack": name,
            "attack_family": family,
            "max_iter": max_iter,
            "cells": len(cells),
            "calibrated": model is not None,
            "calibration_cells": int(cells["calibration"].sum()),
            "calibration_samples": model.calibration_samples if model else 0,
            "calibration_breaks": model.calibration_breaks if model else 0,
            "estimated": cells["still_breakable"].mean(),
            "observed": cells["observed"].mean(),
            "cells_too_small": int(tripped.sum()),
        }
        if model is not None:
            row["budget_too_small"] = bool(tripped.any())
            row["reason"] = (
                f"{int(tripped.sum())} of {len(tripped)} cells would lose more than {share:.0%} of their samples to a budget {cfg.budget.factor:g}x larger"
                if tripped.any()
                else f"no cell would lose more than {share:.0%} of its samples to a budget {cfg.budget.factor:g}x larger"
            )
        elif search and max_iter < minimum:
            row["budget_too_small"] = True
            row["reason"] = (
                f"a black-box search of {max_iter} iterations (fewer than budget.min_search_iter = {minimum}): too few for its robust accuracy to mean much; "
                f"calibrate it (budget.calibrate.{name}: a share of the model cells) to measure how much a larger budget breaks"
            )
        else:
            row["budget_too_small"] = None
            row["reason"] = f"not checked: {name} is not calibrated (budget.calibrate.{name}: a share of the model cells)"
        rows.append(row)
    return pd.DataFrame(rows)
