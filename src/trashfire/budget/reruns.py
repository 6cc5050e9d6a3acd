"""The calibration reruns of the budget check (docs/design.md, "Budget sufficiency"): a seeded
share of the model cells attacked again by each calibrated family at `factor` times its
budget, so that the survival side can learn, from the project's own runs, which standing
samples a larger budget breaks.

A larger budget multiplies `max_iter` (iterations, or a search's generations); a torch loop
with a `step_scale` gets it multiplied too, so its step size (step_scale x eps / max_iter) is
the run's and its first max_iter steps are the run's steps (no random start), the rest
continuing them. A one-step attack (FGM: no max_iter) has no budget to multiply. The reruns
are attack cells like any other (cached by their own hash) in a folder of their own, so no
table of the run reads them.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trashfire.core.errors import ConfigError
from trashfire.core.grid import AttackCell, ModelCell, attack_cells, model_cells


def multiplied(option: Mapping[str, Any], factor: float) -> dict[str, Any] | None:
    """An attack option with its budget `factor` times larger, or None for one without
    `max_iter` (one step: nothing to multiply)."""
    if option.get("max_iter") is None:
        return None
    larger = copy.deepcopy(dict(option))
    larger["max_iter"] = int(round(int(option["max_iter"]) * factor))
    if option.get("step_scale") is not None:
        larger["step_scale"] = float(option["step_scale"]) * factor
    return larger


def larger_budget_config(cfg: DictConfig, factor: float, families: Iterable[str]) -> DictConfig:
    """`cfg` with only the attacks `families` (attack option names), each at `factor` times its
    budget; a family that is not in the grid, or has no budget to multiply, is a ConfigError."""
    larger = copy.deepcopy(cfg)
    attacks = {}
    for name in families:
        if name not in cfg.attack:
            raise ConfigError(f"budget.calibrate.{name}", f"no attack {name!r} in the grid; calibrate one of {', '.join(cfg.attack)}")
        option = multiplied(OmegaConf.to_container(cfg.attack[name], resolve=True), factor)
        if option is None:
            raise ConfigError(f"budget.calibrate.{name}", f"{name} has no max_iter: a one-step attack has no budget to multiply")
        attacks[name] = option
    with open_dict(larger):
        larger.attack = attacks
    return larger


def calibration_models(cfg: DictConfig, share: float, seed: int) -> set[str]:
    """A seeded `share` of the model cells (at least one), drawn within each defence so that
    every defence has its calibration cells: their hashes."""
    by_defence: dict[str, list[ModelCell]] = {}
    for model in model_cells(cfg):
        by_defence.setdefault(model.defence["name"], []).append(model)
    rng = random.Random(seed)
    chosen: set[str] = set()
    for defence in sorted(by_defence):
        models = sorted(by_defence[defence], key=lambda model: model.seed_key)  # a cache bump draws the same cells
        chosen |= {model.hash for model in rng.sample(models, max(1, round(share * len(models))))}
    return chosen


@dataclass(frozen=True)
class Pair:
    """An attack cell of the run and its rerun at the larger budget."""

    run: AttackCell
    larger: AttackCell


def calibration_pairs(cfg: DictConfig, shares: Mapping[str, float], factor: float, seed: int) -> list[Pair]:
    """Per calibrated family (`shares`: attack option -> share of model cells), its cells on
    that family's calibration models, each with its rerun cell."""
    pairs = []
    for name, share in shares.items():
        chosen = calibration_models(cfg, float(share), seed)
        larger = {key(cell): cell for cell in attack_cells(larger_budget_config(cfg, factor, [name]))}
        pairs += [Pair(cell, larger[key(cell)]) for cell in attack_cells(cfg) if cell.attack == name and cell.model.hash in chosen]
    return pairs


def key(cell: AttackCell) -> tuple:
    return cell.model.hash, cell.attack, cell.norm, cell.value
