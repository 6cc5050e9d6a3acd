"""The survival stage's train/test split by group (a trained model for train_hash): every row
of one group on one side."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trashfire.core.errors import DataError
from trashfire.survival.newton import ROW_BLOCK


def split_groups(data: pd.DataFrame, by: str, test_size: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train/test by group: every row of one value of `by` (a trained model for train_hash) on
    one side, `test_size` of the groups (at least one, and one left to train on) to test. The
    labels stay in both parts; the fitters leave them aside."""
    is_test = held_out_rows(data, by, test_size, seed)
    return data[~is_test], data[is_test]


def split_in_one_copy(data: pd.DataFrame, by: str, test_size: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(data, train, test) as split_groups splits them; past ROW_BLOCK rows the parts are the two
    slices of one copy of the rows, training rows first, which stands for `data` from then on:
    the stage holds one copy of its rows, not two (10^7 samples: 2.6 GB)."""
    is_test = held_out_rows(data, by, test_size, seed)
    if len(data) <= ROW_BLOCK:
        return data, data[~is_test], data[is_test]
    whole = data.take(np.argsort(is_test.to_numpy(), kind="stable"))  # each part in its own order, as split_groups'
    training = int((~is_test).sum())
    return whole, whole.iloc[:training], whole.iloc[training:]


def held_out_rows(data: pd.DataFrame, by: str, test_size: float, seed: int) -> pd.Series:
    """Which rows split_groups puts in the test part."""
    if by not in data:
        raise DataError(f"survival data has no column {by!r} to split by (survival.split_by); rerun the timing stage")
    groups = np.sort(data[by].astype(str).unique())
    if len(groups) < 2:
        raise DataError(f"survival data holds {len(groups)} {by} group; a train/test split by {by} (survival.split_by) needs at least 2")
    rng = np.random.default_rng(seed)
    n_test = min(len(groups) - 1, max(1, round(test_size * len(groups))))
    return data[by].astype(str).isin(rng.choice(groups, size=n_test, replace=False))
