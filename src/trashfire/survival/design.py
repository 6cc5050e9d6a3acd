"""A survival design without its n x p matrix: every covariate but the per-sample ones
(`data.SAMPLE_COVARIATES`: the benign margin) is a property of the sample's attack cell, so
X = [C[cell], S] up to the order of its columns, with C one row per distinct cell-level row and
S the per-sample columns.

The Newton fits take three products of X, each a sum over rows that the cells collapse:
- X b = (C b_c)[cell] + S b_s;
- X' v = [C' bincount(cell, v), S' v];
- X_k' diag(h) X_l = [[C_k' diag(bincount(cell, h)) C_l, C_k' bincount(cell, h S_l)],
  [bincount-by-cell of h S_k then C_l, S_k' diag(h) S_l]].
So a Newton step of a model with K linear predictors costs O(n K^2) elementwise work and
O(cells p^2), not O(n p^2): at 10^7 samples a cure model's Hessian was 38 GFLOP a step. The
sums are the dense ones in another order: equal to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class GroupedDesign:
    """X = [cells[cell], rows] with its columns in `columns`' order: `cells` (m x p_c) the
    cell-level columns, `cell` (n,) each row's cell, `rows` (n x p_s) the per-row columns,
    `columns` (p_c + p_s,) where each of [cells, rows]'s columns sits in X."""

    cells: np.ndarray
    cell: np.ndarray
    rows: np.ndarray
    columns: np.ndarray

    @classmethod
    def of(cls, cells: np.ndarray, cell: np.ndarray, rows: np.ndarray | None = None, columns: np.ndarray | None = None) -> GroupedDesign:
        cell = np.asarray(cell, dtype=np.intp)
        cells = np.asarray(cells, dtype=float).reshape(-1, np.shape(cells)[-1] if np.ndim(cells) > 1 else 1)
        rows = np.zeros((len(cell), 0)) if rows is None else np.asarray(rows, dtype=float).reshape(len(cell), -1)
        width = cells.shape[1] + rows.shape[1]
        return cls(cells, cell, rows, np.arange(width) if columns is None else np.asarray(columns, dtype=np.intp))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.cell), len(self.columns)

    @property
    def split(self) -> int:
        """How many of [cells, rows]'s columns are cell-level."""
        return self.cells.shape[1]

    def __len__(self) -> int:
        return len(self.cell)

    def dense(self) -> np.ndarray:
        """The n x p matrix itself (tests, and small data)."""
        out = np.empty(self.shape)
        out[:, self.columns] = np.hstack([self.cells[self.cell], self.rows])
        return out

    def __matmul__(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=float)[self.columns]
        return (self.cells @ b[: self.split])[self.cell] + self.rows @ b[self.split :]

    def per_cell(self, v: np.ndarray) -> np.ndarray:
        """Sum of v over each cell's rows."""
        return np.bincount(self.cell, weights=v, minlength=len(self.cells))

    def t_dot(self, v: np.ndarray) -> np.ndarray:
        """X' v."""
        out = np.empty(len(self.columns))
        out[self.columns] = np.concatenate([self.cells.T @ self.per_cell(v), self.rows.T @ v])
        return out

    def gram(self, h: np.ndarray, other: GroupedDesign | None = None) -> np.ndarray:
        """X' diag(h) Y (Y = `other` over the same rows and cells, else X itself)."""
        other = self if other is None else other
        top_left = (self.cells.T * self.per_cell(h)) @ other.cells
        top_right = (
            self.cells.T @ np.stack([self.per_cell(h * column) for column in other.rows.T], axis=1) if other.rows.shape[1] else np.zeros((self.split, 0))
        )
        bottom_left = (
            np.stack([self.per_cell(h * column) for column in self.rows.T], axis=0) @ other.cells if self.rows.shape[1] else np.zeros((0, other.split))
        )
        out = np.empty((len(self.columns), len(other.columns)))
        out[np.ix_(self.columns, other.columns)] = np.block([[top_left, top_right], [bottom_left, (self.rows.T * h) @ other.rows]])
        return out


def t_dot(X, v: np.ndarray) -> np.ndarray:
    """X' v of a dense design or a grouped one."""
    return X.t_dot(v) if isinstance(X, GroupedDesign) else X.T @ v


KEY_SEED = 20260  # the random projection that keys the cell-level rows (any; fixed so that a fit repeats)


def grouped(frames: list[pd.DataFrame], per_row: set[str], most_cells: float = 0.25) -> list[GroupedDesign] | None:
    """The designs `frames` (one per linear predictor, over the same rows) as GroupedDesigns
    over one grouping of their rows by every column not named in `per_row`; None where that
    grouping leaves more than `most_cells` of the rows (nothing to gain), or the rows' keys (a
    random projection of the cell-level columns, sorted once) collide."""
    names = sorted({name for frame in frames for name in frame.columns if name not in per_row})
    if not names:
        return None
    cell_level = np.column_stack([next(frame[name] for frame in frames if name in frame.columns).to_numpy(float) for name in names])
    key = cell_level @ np.random.default_rng(KEY_SEED).normal(size=len(names))
    _, first, cell = np.unique(key, return_index=True, return_inverse=True)
    if len(first) > most_cells * len(key):
        return None
    cells = cell_level[first]
    if not all(np.array_equal(cells[cell, j], cell_level[:, j]) for j in range(len(names))):  # two distinct rows, one key
        return None
    position = {name: j for j, name in enumerate(names)}
    designs = []
    for frame in frames:
        at_cell = [i for i, name in enumerate(frame.columns) if name not in per_row]
        at_row = [i for i, name in enumerate(frame.columns) if name in per_row]
        rows = frame.iloc[:, at_row].to_numpy(float) if at_row else None
        designs.append(GroupedDesign.of(cells[:, [position[frame.columns[i]] for i in at_cell]], cell, rows, at_cell + at_row))
    return designs
