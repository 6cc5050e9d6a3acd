"""The worst case per sample: over every attack of a model cell at one norm and eps, a sample is
robust only if no attack broke it (AutoAttack's rule, applied to the whole grid).

experiments.csv gets one `worst_case` row per model cell, norm and eps that two or more
eps-bounded attacks share (`attack_param: eps`). Its outcome counts are the per-sample
minimum over those attacks, on the samples they all attacked (the same attack subset, matched
by position). It names the attack that carried it (`carried_by`: the single attack with the
lowest robust accuracy, ties joined by a comma) and how many samples that attack left standing
that another broke (`n_beyond_carrier`). A worst case has no clock of its own: its timed and
failure-clock columns are empty, and the survival data, TRASH and the validity flags read only
the attacks' own rows (`measured`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import pandas as pd

from trashfire.core.groups import groups
from trashfire.core.schema import ENSEMBLE, MODEL_LABELS, WORST_CASE, Outcomes

# the model cell's columns a worst-case row copies from its attacks' rows
COPIED = [*MODEL_LABELS, "norm", "attack_param", "attack_value", "n_train", "n_classes", "acc_ben", "attack_units"]
# optional record fields: a column only where some record has one (AttackRecord.row)
COPIED_IF_PRESENT = ["acc_ben_attack_subset", "attack_value_standardised", "pixel_std", "device", "train_hash", "model_hash", "degenerate"]
GROUP = ["model_hash", "norm", "attack_units", "attack_value"]


def measured(experiments: pd.DataFrame) -> pd.DataFrame:
    """The rows of attacks that ran: a table less its worst-case rows (and the ensemble's
    curves, in curves.csv and robustness.csv)."""
    return experiments[~experiments["attack"].isin([WORST_CASE, ENSEMBLE])]


def worst_case_rows(experiments: pd.DataFrame, outcomes: dict[str, Outcomes]) -> pd.DataFrame:
    """One worst-case row per model cell, norm and eps of two or more eps-bounded attacks."""
    bounded = experiments[experiments["attack_param"] == "eps"].drop_duplicates("attack_hash")
    read = [*COPIED, *COPIED_IF_PRESENT, "attack", "attack_hash"]  # a group's own copy of these, not of every column (10^5 groups)
    columns = {name: bounded[name].to_numpy() for name in dict.fromkeys(read) if name in bounded}
    rows = []
    for positions in groups(bounded, GROUP, sort=False):
        attacks = columns["attack"][positions]
        if len(set(attacks)) > 1:  # as Series.nunique counts them: the attack names are never missing
            cells = {name: values[positions] for name, values in columns.items()}
            rows.append(worst_case_row(cells, [outcomes[h] for h in cells["attack_hash"]]))
    return pd.DataFrame([row for row in rows if row is not None])


def worst_case_row(cells: Mapping[str, np.ndarray], outcomes: list[Outcomes]) -> dict | None:
    """The worst case of one model cell at one norm and eps, from its attack cells' columns and
    per-sample outcomes (in the same order); None where the attacks share no sample."""
    shared = Outcomes.shared_positions(outcomes)
    rows = [o.rows_at(shared) for o in outcomes]
    survived = correct_by_position(outcomes, "y_pred_adv", rows)  # samples x attacks: right after each
    if not survived.size:
        return None
    robust = survived.all(axis=1)
    right_before = correct_by_position(outcomes, "y_pred_ben", rows).all(axis=1)  # the first query of a randomised model can differ per attack
    acc = survived.mean(axis=0)
    strongest = np.flatnonzero(np.isclose(acc, acc.min()))
    carriers, names = sorted(set(cells["attack"][strongest])), ", ".join(sorted(set(cells["attack"])))
    row = {column: cells[column][0] for column in COPIED} | {column: cells[column][0] for column in COPIED_IF_PRESENT if column in cells}
    return row | {
        "attack": WORST_CASE,
        "n_attack": len(robust),
        "n_failed": int((~robust).sum()),
        "n_misclassified_before": int((~right_before).sum()),
        "n_broken": int((right_before & ~robust).sum()),
        "n_survived": int((right_before & robust).sum()),  # as an attack's row counts it: right before and after
        "acc_adv": float(robust.mean()),
        "attack_hash": combined_hash(cells["attack_hash"]),
        "carried_by": ", ".join(carriers),
        "n_beyond_carrier": int(survived[:, strongest[0]].sum() - robust.sum()),
        "attacks": names,
        "evaluation": f"worst case per sample over {names}, {len(robust)} images, eps {row['attack_value']:g} ({row['attack_units']}, l{row['norm']})",
    }


def correct_by_position(outcomes: list[Outcomes], predicted: str, rows: list[np.ndarray]) -> np.ndarray:
    """Samples x attacks (in order): its `predicted` labels were right, on the positions every
    attack attacked (`rows`: each attack's rows at them), in the order of position."""
    return np.column_stack([(getattr(o, predicted) == o.y_true)[at] for o, at in zip(outcomes, rows)])


def combined_hash(attack_hashes: pd.Series) -> str:
    """The worst case's identifier: a hash of its attack cells' hashes, whatever their order."""
    return hashlib.sha256(",".join(sorted(attack_hashes)).encode()).hexdigest()[:16]
