"""The grouped design (trashfire.survival.design) against its dense matrix: every product the
Newton fits take, on cells of unequal size, with and without per-row columns, in any column
order; and a fit past ROW_BLOCK rows, whose products go by cell and whose start is fitted on a
sample of the rows, reaching the dense fit's optimum."""

import numpy as np
import pandas as pd
import pytest

from trashfire.survival.cure import WeibullCureFitter
from trashfire.survival.design import GroupedDesign, grouped, t_dot
from trashfire.survival.gengamma import GeneralizedGammaAFTFitter
from trashfire.survival.newton import weighted_gram
from trashfire.survival.newton_fit import start_rows


def designs(rows: int, shuffled: bool = False):
    rng = np.random.default_rng(rows)
    cell = rng.integers(0, 7, size=200)
    cells = np.column_stack([np.ones(7), rng.normal(size=(7, 3)), rng.integers(0, 2, size=7)])
    columns = rng.permutation(5 + rows) if shuffled else None
    return GroupedDesign.of(cells, cell, rng.normal(size=(200, rows)) if rows else None, columns), rng


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("rows", [0, 1, 2])
def test_every_product_equals_the_dense_matrix_one(rows, shuffled):
    design, rng = designs(rows, shuffled)
    dense = design.dense()
    assert design.shape == dense.shape
    b, v, h = rng.normal(size=dense.shape[1]), rng.normal(size=200), rng.uniform(0.1, 2, size=200)
    np.testing.assert_allclose(design @ b, dense @ b, rtol=1e-12)
    np.testing.assert_allclose(t_dot(design, v), dense.T @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(weighted_gram(design, h, design), (dense.T * h) @ dense, rtol=1e-12, atol=1e-12)


def test_a_cross_product_of_two_designs_over_the_same_rows():
    """A multi-predictor model's Hessian blocks X_k' diag(h) X_l: the location's covariates
    against an intercept-only scale."""
    location, rng = designs(1, shuffled=True)
    scale = GroupedDesign.of(np.ones((7, 1)), location.cell)
    h = rng.uniform(0.1, 2, size=200)
    np.testing.assert_allclose(location.gram(h, scale), (location.dense().T * h) @ scale.dense(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(scale.gram(h, location), (scale.dense().T * h) @ location.dense(), rtol=1e-12, atol=1e-12)


def test_grouping_frames_finds_the_cells_and_keeps_each_frames_columns():
    rng = np.random.default_rng(3)
    cell = rng.integers(0, 9, size=400)
    level = rng.normal(size=9)
    frame = pd.DataFrame({"depth": level[cell], "margin": rng.normal(size=400), "Intercept": 1.0})
    both = grouped([frame, frame[["Intercept"]]], {"margin"})
    assert both is not None and len(both[0].cells) == 9 and both[0].cell.max() == 8
    np.testing.assert_array_equal(both[0].dense(), frame.to_numpy())
    np.testing.assert_array_equal(both[1].dense(), frame[["Intercept"]].to_numpy())
    assert grouped([frame.assign(depth=rng.normal(size=400))], {"margin"}) is None  # every row its own cell: nothing to gain


def cell_study(seed=0, cells=40, per_cell=100):
    """Cell-level covariates (a numeric one, a dummy) and a per-sample margin; Weibull times
    with a cured share, censored at each cell's budget."""
    rng = np.random.default_rng(seed)
    cell = np.repeat(np.arange(cells), per_cell)
    strength, dummy = rng.uniform(0, 1, cells), (np.arange(cells) % 3 == 0).astype(float)
    margin = rng.gamma(2.0, 1.0, cells * per_cell)
    frame = pd.DataFrame({"attack_strength": strength[cell], "attack_pgd": dummy[cell], "margin": margin})
    latency = np.exp(0.5 + 1.2 * frame.attack_strength - 0.5 * frame.attack_pgd + 0.2 * margin) * rng.weibull(1.3, len(cell))
    cured = rng.uniform(size=len(cell)) < 0.2 + 0.3 * frame.attack_pgd
    budget = np.exp(2.5 + rng.uniform(0, 0.5, cells))[cell]
    failed = ~cured & (latency <= budget)
    return frame.assign(duration=np.where(failed, latency, budget), event=failed.astype(int))


@pytest.mark.parametrize("fitter", [WeibullCureFitter, GeneralizedGammaAFTFitter], ids=lambda c: c.__name__)
def test_a_fit_by_cells_from_a_sampled_start_reaches_the_dense_fits_optimum(fitter, monkeypatch):
    data = cell_study()
    dense = fitter(penalizer=0.001).fit(data, "duration", "event")
    monkeypatch.setattr("trashfire.survival.newton_fit.ROW_BLOCK", 512)  # 4,000 rows in 40 cells: by cell
    calls = []
    monkeypatch.setattr(GroupedDesign, "t_dot", lambda self, v, original=GroupedDesign.t_dot: calls.append(1) or original(self, v))
    starts = []  # past ROW_BLOCK rows the start (log-normal, plain Weibull) is fitted on a sample of them
    module = "trashfire.survival." + ("cure" if fitter is WeibullCureFitter else "gengamma")
    monkeypatch.setattr(f"{module}.start_rows", lambda df, columns, original=start_rows: starts.append(len(original(df, columns))) or original(df, columns))
    by_cells = fitter(penalizer=0.001).fit(data, "duration", "event")
    assert calls and starts == [512]  # the grouped products ran, from a start on 512 of the 4,000 rows
    if fitter is WeibullCureFitter:  # Newton on every row from its optimum on 512 of them: 7 -> 4 steps (the generalised gamma's log-normal start is as near)
        assert by_cells.newton_iterations < dense.newton_iterations
    assert by_cells.log_likelihood_ == pytest.approx(dense.log_likelihood_, rel=1e-10)
    pd.testing.assert_series_equal(by_cells.params_, dense.params_, atol=1e-6, rtol=1e-6)
    # the generalised gamma's likelihood is flat along its shapes: two points within the gradient
    # tolerance differ in their Hessian's inverse by 2e-5 (the products themselves agree to 1e-12, above)
    pd.testing.assert_series_equal(by_cells.standard_errors_, dense.standard_errors_, rtol=1e-4)
