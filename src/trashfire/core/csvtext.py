"""`DataFrame.to_csv(path, index=False)`, byte for byte, for long tables.

pandas formats every float of a table one by one and hands each row to the csv module; at 10^5
attack cells the aggregate stage's curve tables have millions of rows whose label columns
repeat one value per curve, and writing them took longer than computing them. Here each
column's distinct values are rendered once, exactly as pandas and the csv module render them
(floats by numpy's `astype(str)`, missing values as "", every other value by the csv writer
itself, quoted where it needs it), and the rows joined in chunks. A table of any other dtype,
or without plain unique column labels, is written by pandas.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

CHUNK = 100_000  # rows joined and written at a time
WRITER = {
    "delimiter": ",",
    "quotechar": '"',
    "quoting": csv.QUOTE_MINIMAL,
    "doublequote": True,
    "escapechar": None,
    "lineterminator": "\n",
}  # pandas' csv.writer


def write_csv(table: pd.DataFrame, path: str | Path) -> None:
    """`table.to_csv(path, index=False)`'s bytes."""
    if not _plain(table):
        table.to_csv(path, index=False)
        return
    fields = [column_fields(table.iloc[:, i]) for i in range(table.shape[1])]
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write(",".join(_render(list(table.columns))) + "\n")
        for start in range(0, len(table), CHUNK):
            rows = zip(*(f[start : start + CHUNK] for f in fields))
            out.write("".join([",".join(row) + "\n" for row in rows]))


def _plain(table: pd.DataFrame) -> bool:
    """Columns this module renders as pandas does: numpy floats, integers, booleans and
    objects, under unique string labels, two or more of them (alone in its row, an empty field
    is quoted: a table of one column is pandas' to write)."""
    labels = table.columns
    return (
        len(labels) > 1
        and labels.is_unique
        and all(isinstance(label, str) for label in labels)
        and all(isinstance(dtype, np.dtype) and dtype.kind in "fiubO" for dtype in table.dtypes)
    )


def column_fields(column: pd.Series) -> np.ndarray:
    """Each value of a column as its CSV field (an object array of str)."""
    values = column.to_numpy()
    if values.dtype.kind == "f":  # pandas: values.astype(str), NaN as ""
        missing = np.isnan(values)
        bits = values.view(f"i{values.itemsize}")  # distinct bit patterns: -0.0 is not 0.0
        distinct, where = np.unique(bits, return_inverse=True)
        text = distinct.view(values.dtype).astype(str).astype(object)
        fields = text[where.reshape(-1)]
        fields[missing] = ""
        return fields
    if values.dtype.kind in "iub":  # pandas: Python ints and bools, rendered by the csv writer
        distinct, where = np.unique(values, return_inverse=True)
        return np.asarray(_render(distinct.tolist()), dtype=object)[where.reshape(-1)]
    return _object_fields(values)


def _object_fields(values: np.ndarray) -> np.ndarray:
    """Objects: missing (pd.isna) as "", the rest by the csv writer. Distinct values are found
    by factorize where every value is a str (1, 1.0 and True would share one, and render apart)."""
    try:
        codes, distinct = pd.factorize(values)
    except TypeError:  # an unhashable value (a list)
        codes, distinct = None, []
    if codes is not None and all(isinstance(value, str) for value in distinct):
        text = np.asarray([*_render(list(distinct)), ""], dtype=object)
        return text[codes]  # code -1, missing: the "" at the end
    missing = pd.isna(values)
    rendered: dict[tuple, str] = {}
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = "" if missing[i] else _cached(rendered, value)
    return out


def _cached(rendered: dict[tuple, str], value) -> str:
    """The csv writer's field of one value, rendered once per value and type."""
    key = (type(value), value)
    try:
        if key not in rendered:
            rendered[key] = _render([value])[0]
        return rendered[key]
    except TypeError:  # unhashable (a list): rendered each time
        return _render([value])[0]


def _render(values: list) -> list[str]:
    """Each value as the csv writer writes it within a row of two or more fields (quoted where
    it holds a delimiter, quote or line break; an empty field bare)."""
    lines = _Lines()
    writer = csv.writer(lines, **WRITER)
    for value in values:
        writer.writerow([value, ""])  # a second field: alone, an empty string would be quoted
    return [line[:-2] for line in lines]  # less the "," and "\n" after it


class _Lines(list):
    """A file for the csv writer that keeps each row it writes (one write per row)."""

    write = list.append
