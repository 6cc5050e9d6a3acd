"""The label block: the fields that tell one model cell from another, declared once as the
records' base (`ModelLabels`), the label lists every table builds on, and the attack-family
label with its identifier."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import pandas as pd


def without(columns: Iterable[str], *dropped: str) -> list[str]:
    """`columns` in their order, less `dropped`."""
    return [c for c in columns if c not in dropped]


@dataclass(frozen=True, kw_only=True)
class TrainedLabels:
    """A trained cell's labels: the data set, what it was fine-tuned from (None: from scratch;
    a schema-1 record without it too), the permutation seed, the architecture and its
    depth, the training length and learning rate."""

    dataset: str
    pretrained_on: str | None = None
    seed: int
    model: str
    depth: int
    epochs: int
    lr: float


@dataclass(frozen=True, kw_only=True)
class ModelLabels(TrainedLabels):
    """A model cell's label block (a trained cell and the defence it is trained or evaluated
    with: the grid's name, param and value), declared once: the train, attack and brittle
    records inherit it. Keyword-only, so that a record's own required fields may follow the
    defaulted `pretrained_on`; on disk the keys are sorted, so where a field is declared
    changes no file."""

    defence: str
    defence_param: Any
    defence_value: Any


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


TRAINED_LABELS = field_names(TrainedLabels)
# A model cell: the label block of every record and table, in this order.
MODEL_LABELS = field_names(ModelLabels)
DEFENCE_LABELS = without(MODEL_LABELS, *TRAINED_LABELS)
# A model cell without its seed: one line of a figure, one row over seeds.
SEEDLESS_LABELS = without(MODEL_LABELS, "seed")
# A model cell's configuration as a claim compares it: no seed, no defence, and no depth (the
# model's name fixes it). Two cells sharing it differ only in what the claim compares.
CONFIGURATION = without(TRAINED_LABELS, "seed", "depth")
# An attack cell: the attack, its norm, the attacked parameter and its value (configured units).
ATTACK_LABELS = ["attack", "norm", "attack_param", "attack_value"]
# experiments.csv's `attack` of the worst case per sample over a model cell's attacks at one
# norm and eps (trashfire.tables.worst_case); no attack option may take the name
WORST_CASE = "worst_case"
# curves.csv's and robustness.csv's `attack` of the curve read off each sample's smallest eps
# over every attack of a norm (trashfire.metrics.optimality); no attack option may take it
ENSEMBLE = "ensemble"


def cell_labels(trained: Any, defence: Mapping[str, Any]) -> dict[str, Any]:
    """The label block of a model cell, in MODEL_LABELS order: the trained cell's labels from
    `trained` (a `grid.TrainCell` or a `TrainRecord`, both have them as attributes) and the
    defence from `defence` (a grid defence: name, param, value). The train, attack and brittle
    records all carry this block."""
    return {key: getattr(trained, key) for key in TRAINED_LABELS} | {
        "defence": defence["name"],
        "defence_param": defence["param"],
        "defence_value": defence["value"],
    }


# ---------------------------------------------------------------------------------------------
# Attack families


def attack_family(attack: Any, norm: Any) -> Any:
    """The attack-family label: an attack with one norm, 'fgm linf', 'pgd l2', 'pixel l0'.
    Tables, cards, figures and the report group by it. Takes strings or Series."""
    if isinstance(attack, pd.Series) or isinstance(norm, pd.Series):
        return pd.Series(attack).astype(str) + " l" + pd.Series(norm).astype(str)
    return f"{attack} l{norm}"


def norm_label(norm: Any) -> str:
    """A norm as the attack options name it: 'inf', '2', '1', '0' (a table read back has 2.0)."""
    text = str(norm)
    return text if text == "inf" else str(int(float(text)))


def family_identifier(family: str) -> str:
    """An attack-family label as an identifier, for where a name must be one (the survival
    data's dummy columns: attack_fgm_inf): attack and norm joined by '_', 'fgm linf' ->
    'fgm_inf', 'pgd l2' -> 'pgd_2'."""
    attack, separator, norm = str(family).rpartition(" l")
    return f"{attack}_{norm}" if separator else str(family)
