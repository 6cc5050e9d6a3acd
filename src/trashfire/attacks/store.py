"""Where the attack stage's records live: the attack, outcome and benign files of each cell
under reports/attacks, and what ART declares of each attack class (`declarations/`). Light,
so that the table stages (timing, aggregate, figures) find the records without loading
torch or ART."""

from __future__ import annotations

from pathlib import Path

from trashfire.core.records import cell_file


def attack_record_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".json")


def outcomes_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".npz")


def benign_path(folder: str | Path, model_hash: str) -> Path:
    return cell_file(Path(folder) / "benign", model_hash, ".json")


def declaration_path(folder: str | Path, target: str) -> Path:
    """What ART declares of an attack class (`trashfire.attacks.art_attacks.declaration`: its
    estimator requirements, whether they include input gradients), written by the attack
    stage for the tables, which do not load ART: <attacks>/declarations/<class path>.json."""
    return Path(folder) / "declarations" / f"{target}.json"
