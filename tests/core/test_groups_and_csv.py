"""core.groups (a table's groups without a frame per group) and core.csvtext (to_csv's bytes,
written faster): each against the pandas call it stands in for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trashfire.core.csvtext import write_csv
from trashfire.core.groups import ByKey, group_order, split

AWKWARD = pd.DataFrame(
    {
        "float": [0.1, np.nan, -0.0, 0.0, 1e-5, 1e16, 0.1 + 0.2, np.inf, -np.inf, 123456.789],
        "int": [1, 2, 3, -4, 0, 10**12, 5, 6, 7, 8],
        "bool": [True, False] * 5,
        "text": ["a", "b,c", 'q"uote', "line\nbreak", "", None, np.nan, "x", " sp ", "é"],
        "mixed": [1, 1.0, True, None, np.nan, np.float64(0.5), "1", [2.5, "a,b"], False, (0, [1])],
        "float32": np.arange(10, dtype=np.float32) / 3,
        "uint": np.arange(10, dtype=np.uint8),
    }
)


@pytest.mark.parametrize("table", [AWKWARD, AWKWARD.iloc[:0], AWKWARD[["text"]], pd.DataFrame(), AWKWARD.assign(category=pd.Categorical(["u", "v"] * 5))])
def test_write_csv_writes_to_csvs_bytes(tmp_path, table):
    """Floats as numpy renders them (-0.0, 1e-05, inf), missing values bare, the csv writer's
    quoting, 1, 1.0 and True apart in one object column; other dtypes fall back to pandas."""
    table.to_csv(tmp_path / "pandas.csv", index=False)
    write_csv(table, tmp_path / "ours.csv")
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def test_groups_come_in_groupbys_order_with_their_rows_in_table_order():
    table = pd.DataFrame({"a": ["y", "x", None, "x", "y", "x"], "b": [1.0, 2.0, 3.0, 2.0, np.nan, 1.0], "v": range(6)})
    for dropna in (True, False):
        order, starts = group_order(table, ["a", "b"], dropna=dropna)
        expected = [group["v"].tolist() for _, group in table.groupby(["a", "b"], dropna=dropna)]
        assert [part.tolist() for part in split(table["v"].to_numpy(), order, starts)] == expected
    by_a = ByKey(table, "a")
    assert by_a.rows("x").equals(table[table["a"] == "x"]) and by_a.rows("z").empty and "y" in by_a
