"""The record and table schema shared by every stage.

So far: which columns are measured on a clock or the machine, and so differ between two
runs of one config (the determinism and differential tests leave exactly these out).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

# t_train, t_attack ...: seconds per sample; E_T and the per-sample durations: the survival
# clock; TRASH and the failure rates f_adv/f_ben divide by them
CLOCK_PREFIXES = ("t_", "E_T", "trash_", "f_adv", "f_ben", "duration")
MACHINE_COLUMNS = ("device", "threads")
CLOCK_SECTIONS = ("times_per_sample_seconds", "survival_and_trash")  # a card's timed parts
CLOCK_METRICS = ("trash_", "survival_")  # metrics.json: TRASH and the survival fits on durations
CLOCK_FINDINGS = "003"  # TRASHFIRE's claims are about times


def is_timed(column: str) -> bool:
    return column.startswith(CLOCK_PREFIXES) or column in MACHINE_COLUMNS


def untimed_table(table: pd.DataFrame) -> pd.DataFrame:
    """`table` without the columns measured on the clock or the machine."""
    return table.drop(columns=[c for c in table.columns if is_timed(str(c))])


def untimed_record(record: Any) -> Any:
    """A JSON record (a card, metrics.json) without its timed keys, at any depth."""
    if isinstance(record, dict):
        return {k: untimed_record(v) for k, v in record.items() if not (is_timed(k) or k in CLOCK_SECTIONS or k.startswith(CLOCK_METRICS + (CLOCK_FINDINGS,)))}
    if isinstance(record, list):
        return [untimed_record(v) for v in record]
    return record
