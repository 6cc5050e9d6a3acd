"""Another CPU, simulated (issue 58): each decision the rounding audit found, with its inputs
moved by what another CPU's rounding could move them (a few ulps, or 1e-15 relative noise),
gives the same outcome, within a tolerance where the outcome is a float. The covariance draws'
own test is in tests/survival/test_survival_cure.py (test_parameter_draws_do_not_hang_on_rounding).

Each case's old code failed it on some inputs (named in its docstring); bit-equality is asserted
only where the code makes the bits equal by construction (a tie made exact by `significant`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.helpers.rounding import TRIALS, nudged, perturbed
from tests.metrics.test_findings import SETTINGS
from trashfire.budget import model as budget
from trashfire.core import inference
from trashfire.core.stats import significant, spearman
from trashfire.metrics import findings
from trashfire.metrics.validity import non_monotone
from trashfire.metrics.verdicts import INCONCLUSIVE, adjust
from trashfire.survival import newton
from trashfire.survival.concordance import harrell_c
from trashfire.survival.epsilon import kaplan_meier, survival_summary


def test_significant_makes_values_equal_but_for_rounding_equal_and_keeps_real_differences():
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 3, 200) * rng.choice([-1, 1], 200)
    for _ in range(TRIALS):
        np.testing.assert_array_equal(significant(perturbed(values, rng)), significant(values))
    apart = np.array([1.0, 1.0 + 1e-7, 1e5, 1e5 * (1 + 1e-7), -3.0, -3.0 * (1 + 1e-7)])
    assert len(np.unique(significant(apart))) == 6
    assert np.array_equal(significant([0.0, np.inf, -np.inf]), [0.0, np.inf, -np.inf]) and np.isnan(significant([np.nan])).all()


def test_a_newton_step_on_a_near_singular_hessian_does_not_hang_on_rounding():
    """The step was Cholesky's where it succeeded and the floored eigen decomposition's where
    it did not: on a Hessian singular but for rounding, the two differ by orders of magnitude."""
    rng = np.random.default_rng(1)
    factor = rng.normal(size=(6, 5))
    hessian, gradient = factor @ factor.T, rng.normal(size=6)  # rank 5 of 6
    step = newton._newton_step(gradient, hessian)
    for _ in range(TRIALS):
        moved = perturbed(hessian, rng)
        np.testing.assert_allclose(newton._newton_step(gradient, (moved + moved.T) / 2), step, rtol=1e-6)
    well = factor @ factor.T + np.eye(6)
    np.testing.assert_allclose(newton._newton_step(gradient, well), np.linalg.solve(well, gradient), rtol=1e-10)


def test_newton_takes_a_step_that_rounding_makes_look_worse():
    """Where every evaluation's sum rounds differently, a trial step near the optimum can come out
    1e-14 worse though it is better: the old test (1e-15 slack) halved every such step into
    NotConverged on the CPU whose rounding fell that way."""
    hessian, optimum = np.array([[2.0, 0.3], [0.3, 1.0]]), np.array([0.5, -0.25])
    start = optimum + np.array([3e-9, -2e-9])  # its gradient just above GRADIENT_TOLERANCE

    def noisy(params):
        offset = params - optimum
        rounding = 0.0 if np.array_equal(params, start) else 1e-14  # every other point rounds up
        return 1.0 + 0.5 * offset @ hessian @ offset + rounding, hessian @ offset, hessian

    params, *_ = newton.minimise(noisy, start)
    np.testing.assert_allclose(params, optimum, atol=1e-12)


def test_the_budget_calibrations_logistic_fit_does_not_hang_on_rounding():
    """It stopped when the likelihood rose by less than 1e-10, which left its coefficients
    agreeing across CPUs to ~1e-7 only; the draws `random < p` that follow flip whole samples on
    such differences. Now it stops at a step of rounding size: equal to 1e-9."""
    rng = np.random.default_rng(2)
    x = np.column_stack([np.ones(3000), rng.normal(size=(3000, 3))])
    y = (rng.random(3000) < 1 / (1 + np.exp(-(x @ [-0.5, 1.0, -0.7, 0.2])))).astype(float)
    beta = budget.logistic(x, y)
    for _ in range(TRIALS):
        np.testing.assert_allclose(budget.logistic(perturbed(x, rng), y), beta, rtol=0, atol=1e-9)


def test_concordance_of_tied_rankings_does_not_hang_on_rounding():
    """Rows of equal covariates rank equal only if X @ b gives them equal bits, which BLAS does
    not promise (it depends on the row's place in the matrix and on the CPU's kernel). Taken to
    9 significant digits, as survival_ranking does, they tie; unrounded, each ulp counts."""
    rng = np.random.default_rng(3)
    durations, events, weights = rng.integers(1, 12, 400).astype(float), rng.random(400) < 0.7, np.ones(400)
    ranking = np.exp(rng.integers(0, 5, 400) * 0.37)  # five levels: heavy ties
    exact = harrell_c(durations, ranking, events, weights)
    unrounded = set()
    for _ in range(TRIALS):
        moved = nudged(ranking, 2, rng)
        assert harrell_c(durations, significant(moved), events, weights) == pytest.approx(exact, abs=1e-12)
        unrounded.add(harrell_c(durations, moved, events, weights))
    assert max(abs(c - exact) for c in unrounded) > 0.005  # what rounding did to the unrounded ranking


def test_spearman_of_a_column_constant_but_for_rounding_is_undefined_and_ties_stay_ties():
    rng = np.random.default_rng(4)
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    flat = np.full(6, 1.0 / 3.0)  # a flat curve's R, equal on every model but for rounding
    tied = np.array([0.2, 0.2, 0.5, 0.5, 0.9, 0.9])
    rho, _ = spearman(x, tied)
    for _ in range(TRIALS):
        assert np.isnan(spearman(x, nudged(flat, 2, rng))[0])
        assert spearman(x, nudged(tied, 2, rng))[0] == pytest.approx(rho, abs=1e-12)


def test_the_slope_of_a_constant_is_zero_however_it_rounds():
    """003's queries-on-depth slope where every model withstands the same queries: its log was
    +-1e-31 as rounding fell, and the sign decided holds or contradicted."""
    rng = np.random.default_rng(5)
    x = np.log(np.repeat([8.0, 14.0, 20.0], 3))
    for _ in range(TRIALS):
        flat = inference.slope_over_units(x, nudged(np.full(9, np.log(7.0)), 2, rng))
        assert (flat.value, flat.se, flat.p) == (0.0, 0.0, 1.0)
    assert inference.slope_over_units(x, 2 * x).value == pytest.approx(2.0)


def test_a_difference_at_rounding_level_is_no_effect():
    """Two flat curves' R differ by +-1e-16 as rounding falls: no claim holds or is contradicted on it."""
    rng = np.random.default_rng(6)
    for _ in range(TRIALS):
        differences = pd.Series(nudged(np.zeros(6), 1, rng) + rng.choice([-1, 1], 6) * 1e-16)
        found = findings.mean_claim("004_r_rises_with_epochs", "test", differences, +1, "004_r_rises_with_epochs", SETTINGS, "units", "rise")
        [decided] = adjust([found], SETTINGS.alpha)
        assert decided.verdict == INCONCLUSIVE and abs(decided.value) < 1e-15


def test_the_median_eps_where_exactly_half_break_is_that_eps_for_every_sample_size():
    """lifelines' curve is exp(cumsum(log)): at exactly one half it came out 0.4999999999999997
    for some sample sizes and above 0.5 for others (24 of the even n up to 200), and the median
    jumped to the next eps; the CPU's exp and log decide those bits."""
    for n in range(2, 202, 2):
        eps = np.where(np.arange(n) < n // 2, 0.1, 0.3)
        summary = survival_summary(kaplan_meier(eps, np.r_[np.ones(n // 2), np.zeros(n - n // 2)]), 0.3, grid=[0.1, 0.2, 0.3])
        assert summary["median_eps"] == 0.1, n


@pytest.mark.parametrize("n", [50, 100, 200, 300])
def test_a_rise_of_exactly_the_tolerance_is_not_flagged_at_any_accuracy(n):
    """rise_tol 0.02 means "more than 2 of 100": a rise of exactly 2 of 100 computed as
    0.020000000000000018 at most accuracy levels and was flagged there."""
    rise = round(0.02 * n)
    for low in range(0, n - rise, 7):
        curve = pd.DataFrame({"attack_family": "pgd", "eps": [0.0, 0.1, 0.2], "acc": [(low + 10) / n, low / n, (low + rise) / n]})
        assert non_monotone(curve, 0.02)[0] is False
        curve.loc[2, "acc"] = (low + rise + 1) / n
        assert non_monotone(curve, 0.02)[0] is True
