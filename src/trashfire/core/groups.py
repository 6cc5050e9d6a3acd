"""Groups of a table's rows without a frame per group: at 10^5 attack cells, a stage that
filters a large table once per cell (`table[table["model_hash"] == h]`) or builds a frame per
group spends its time there, quadratic or nearly so. These lay the groups out once."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd


def group_order(frame: pd.DataFrame, keys: Sequence[str], dropna: bool = False, sort: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The row positions that lay `frame`'s groups by `keys` one after another, in groupby's
    order (keys sorted, or with `sort=False` in the order each first appears; within a group,
    the rows in their order), and where each group starts in them. `dropna` as groupby's: True
    leaves rows with a missing key out."""
    numbers = frame.groupby(list(keys), sort=sort, dropna=dropna).ngroup()
    codes = numbers.fillna(-1).to_numpy().astype(np.int64)  # ngroup gives the rows it leaves out NaN
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    changes = np.flatnonzero(np.diff(codes[order])) + 1
    return order, np.concatenate([[0], changes]).astype(int) if len(order) else np.zeros(0, dtype=int)


def groups(frame: pd.DataFrame, keys: Sequence[str], dropna: bool = False, sort: bool = True) -> list[np.ndarray]:
    """The row positions of each of `frame`'s groups by `keys`, in group_order's order."""
    order, starts = group_order(frame, keys, dropna, sort)
    return np.split(order, starts[1:]) if len(order) else []


def labels_at(labels: Sequence, rows: np.ndarray) -> pd.Categorical | np.ndarray:
    """`labels` (one per cell or group) at `rows`: text as a categorical of it (a code per row,
    not a Python string: 10^7 rows), which trashfire.core.records.write_table writes as the
    same text; other labels as an array of them."""
    values = pd.Series(labels)
    codes, levels = pd.factorize(values)
    if levels.inferred_type != "string":
        return values.to_numpy()[rows]
    return pd.Categorical.from_codes(codes[rows], levels)


def repeated_labels(labels: Sequence, counts: Sequence[int]) -> pd.Categorical | np.ndarray:
    """Each group's label repeated over its `counts` rows (`labels_at`)."""
    return labels_at(labels, np.repeat(np.arange(len(counts)), counts))


def split(values: np.ndarray, order: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
    """`values` (one per row) cut into its groups (group_order's)."""
    return np.split(np.asarray(values)[order], starts[1:])


class ByKey:
    """A table's rows per value of one column (or of a Series beside it), each looked up in
    O(1) (a frame per key is built when asked for, its rows in the table's order, as a filter
    `frame[frame[column] == key]` gives them); a key without rows gets the table's empty frame."""

    def __init__(self, frame: pd.DataFrame, column: str | pd.Series):
        self.frame = frame
        self.positions = frame.groupby(column, sort=False).indices if len(frame) else {}

    @property
    def empty(self) -> bool:
        return self.frame.empty

    def rows(self, key: Hashable) -> pd.DataFrame:
        where = self.positions.get(key)
        return self.frame.iloc[:0] if where is None else self.frame.iloc[where]

    def __contains__(self, key: Hashable) -> bool:
        return key in self.positions
