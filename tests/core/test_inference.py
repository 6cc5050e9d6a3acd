"""trashfire.core.inference against the references it stands for: scipy's t test and interval,
its linear regression, an enumeration of Spearman's permutation distribution, statsmodels' TOST
and Holm, and the power its detectable effect and units claim, computed by the noncentral t."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import DescrStatsW

from trashfire.core import inference

VALUES = np.array([0.31, 0.12, 0.45, 0.27, 0.38, 0.05])


def test_a_mean_over_units_is_scipys_t_test_and_interval():
    estimate = inference.mean_over_units(VALUES, null=0.1)
    reference = stats.ttest_1samp(VALUES, 0.1)
    interval = stats.ttest_1samp(VALUES, 0.0).confidence_interval(0.95)
    assert (estimate.value, estimate.p, estimate.n, estimate.df) == pytest.approx((VALUES.mean(), reference.pvalue, 6, 5), rel=1e-9)
    assert (estimate.lo, estimate.hi) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert estimate.one_sided_p(+1) == pytest.approx(stats.ttest_1samp(VALUES, 0.1, alternative="greater").pvalue, rel=1e-9)
    assert estimate.one_sided_p(-1) == pytest.approx(stats.ttest_1samp(VALUES, 0.1, alternative="less").pvalue, rel=1e-9)


def test_one_unit_gives_no_interval_and_no_test():
    one = inference.mean_over_units([0.4, np.nan])
    assert one.value == 0.4 and one.n == 1 and all(math.isnan(x) for x in (one.lo, one.hi, one.p, one.se))


def test_a_slope_over_units_is_the_least_squares_slope_with_its_t_interval():
    rng = np.random.default_rng(0)
    x = np.log(np.repeat([8.0, 14.0, 20.0], 3))
    y = 0.4 * x + rng.normal(0, 0.1, 9)
    estimate = inference.slope_over_units(x, y, null=1.0)
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, 7) * fit.stderr
    assert (estimate.value, estimate.lo, estimate.hi, estimate.df) == pytest.approx((fit.slope, fit.slope - half, fit.slope + half, 7), rel=1e-9)
    assert estimate.p == pytest.approx(2 * stats.t.sf(abs(fit.slope - 1.0) / fit.stderr, 7), rel=1e-9)
    flat = inference.slope_over_units(x, np.full(9, np.log(7.0)))
    assert (flat.value, flat.se, flat.p) == (0.0, 0.0, 1.0)


def test_spearmans_p_is_its_exact_permutation_distribution_up_to_eight_units():
    x, y = np.array([1.0, 2, 3, 4, 5, 6, 7]), np.array([2.0, 1, 4, 3, 7, 5, 6])
    estimate = inference.rank_correlation(x, y)
    rho = stats.spearmanr(x, y).statistic
    every = [stats.spearmanr(x, y[list(order)]).statistic for order in itertools.permutations(range(7))]
    assert estimate.value == pytest.approx(rho, rel=1e-12)
    assert estimate.p == pytest.approx(np.mean(np.abs(every) >= abs(rho) - 1e-12), rel=1e-12)
    z, se = math.atanh(rho), 1.06 / math.sqrt(4)
    assert (estimate.lo, estimate.hi) == pytest.approx((math.tanh(z - 1.959964 * se), math.tanh(z + 1.959964 * se)), rel=1e-6)


def test_spearmans_p_from_random_pairings_past_eight_units_is_close_to_the_exact_one():
    rng = np.random.default_rng(1)
    x = np.repeat([8.0, 14.0, 20.0], 4)
    y = x / 10 + rng.normal(0, 0.6, 12)
    estimate = inference.rank_correlation(x, y, seed=3)
    reference = stats.permutation_test((x,), lambda a: stats.spearmanr(a, y).statistic, permutation_type="pairings", n_resamples=20_000, rng=5)
    assert estimate.p == pytest.approx(reference.pvalue, abs=0.02)


def test_equivalence_is_statsmodels_tost():
    estimate = inference.mean_over_units(VALUES - 0.25)
    reference = DescrStatsW(VALUES - 0.25).ttost_mean(-0.2, 0.2)
    assert inference.equivalence_p(estimate, 0.2) == pytest.approx(reference[0], rel=1e-9)
    assert inference.equivalence_p(estimate, 0.01) > 0.5  # a margin far inside the spread: no equivalence


def test_holm_is_statsmodels_and_leaves_untested_claims_out():
    pvalues = [0.01, np.nan, 0.04, 0.03, 0.2]
    adjusted = inference.holm(pvalues)
    expected = multipletests([0.01, 0.04, 0.03, 0.2], method="holm")[1]
    assert math.isnan(adjusted[1]) and adjusted[[0, 2, 3, 4]] == pytest.approx(expected)
    assert adjusted[0] == pytest.approx(0.04)  # 4 tested claims: 4 x 0.01


def test_the_detectable_effect_is_detected_with_80_percent_power():
    """At the detectable effect, the two-sided t test at 5% rejects 80% of the time (noncentral t)."""
    for n in (3, 5, 10):
        estimate = inference.mean_over_units(np.linspace(-1, 1, n))
        effect = inference.detectable(estimate)
        critical, shift = stats.t.ppf(0.975, n - 1), effect / estimate.se
        power = stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift)
        assert power == pytest.approx(0.8, abs=0.02), n


def test_the_units_needed_detect_the_effect_with_80_percent_power():
    n = inference.units_needed(0.5, 1.0)
    critical = stats.t.ppf(0.975, n - 1)
    power = stats.nct.sf(critical, n - 1, 0.5 * math.sqrt(n)) + stats.nct.cdf(-critical, n - 1, 0.5 * math.sqrt(n))
    assert 30 < n < 40 and power == pytest.approx(0.8, abs=0.005)
    assert n == pytest.approx(TTestPower().solve_power(effect_size=0.5, alpha=0.05, power=0.8), abs=0.5)  # statsmodels' solver
    assert math.isnan(inference.units_needed(0.0, 1.0))
    spearman = inference.units_needed(0.5, math.nan, method="spearman")
    assert spearman == pytest.approx(3 + 1.06 * ((1.959964 + 0.841621) / math.atanh(0.5)) ** 2, rel=1e-5)


def test_a_bounded_mean_has_the_score_interval_whose_ends_solve_its_equation():
    """Each end mu of bounded_mean's interval solves (mean - mu)^2 = t^2 phi (mu - low)(high - mu) / n
    (phi: the units' variance over (mean - low)(high - mean)), and the ends bracket the mean."""
    values = np.array([0.0, 0.0, 1 / 6, 0.0, 1 / 3])
    low, high = 0.0, 2.0
    estimate = inference.bounded_mean(values, low, high)
    n, mean, variance = len(values), values.mean(), values.var(ddof=1)
    phi = variance / ((mean - low) * (high - mean))
    t2 = stats.t.ppf(0.975, n - 1) ** 2
    for mu in (estimate.lo, estimate.hi):
        assert (mean - mu) ** 2 == pytest.approx(t2 * phi * (mu - low) * (high - mu) / n, rel=1e-9)
    assert low < estimate.lo < mean < estimate.hi < high and estimate.value == pytest.approx(mean)


def test_a_bounded_mean_reaches_further_from_its_bound_than_the_t_interval():
    """Nine seeds ranking alike and one off by a pair: the t interval ends at 0.054 and misses a
    true mean of 0.064 that such a draw is common under; the score interval reaches past it."""
    values = np.array([0.0] * 9 + [1 / 6])
    score, t = inference.bounded_mean(values, 0.0, 2.0), inference.mean_over_units(values)
    assert t.hi < 0.064 < score.hi and score.lo > 0.0
    assert (score.p, score.se, score.df) == (t.p, t.se, t.df)  # the test stays Student's t


def test_a_bounded_mean_of_equal_units_has_no_interval():
    estimate = inference.bounded_mean([0.0, 0.0, 0.0], 0.0, 2.0)
    assert estimate.value == 0.0 and all(math.isnan(x) for x in (estimate.lo, estimate.hi, estimate.p))


def test_a_difference_from_a_published_mean_is_welchs_t():
    """Ours over 3 seeds against a paper's mean 0.438 (SD 0.02 over 20 seeds): SE^2 = 0.04^2/3 +
    0.02^2/20, Welch's df 2.15249, as scipy's ttest_ind_from_stats gives it."""
    ours = np.array([0.40, 0.44, 0.48])
    estimate = inference.welch_difference(ours, 0.438, 0.02, 20)
    reference = stats.ttest_ind_from_stats(ours.mean(), ours.std(ddof=1), 3, 0.438, 0.02, 20, equal_var=False)
    assert estimate.value == pytest.approx(0.002) and estimate.df == pytest.approx(2.15249, rel=1e-5)
    assert estimate.p == pytest.approx(reference.pvalue, rel=1e-9)
    assert estimate.hi - estimate.value == pytest.approx(stats.t.ppf(0.975, estimate.df) * math.sqrt(0.04**2 / 3 + 0.02**2 / 20), rel=1e-9)
    assert math.isnan(inference.welch_difference([0.5], 0.438, 0.02, 20).lo)


def test_a_rank_correlation_of_one_has_no_interval_rather_than_one_of_zero_width():
    """t_train on the compute clock is a function of depth: rho is 1 exactly and Fisher's z
    infinite; the permutation p stands (3 depths x 3 seeds: 2 x (3!)^3 of the 9! pairings give
    |rho| = 1, p = 0.0012, here from 9,999 random pairings)."""
    depth = np.repeat([8.0, 14.0, 20.0], 3)
    estimate = inference.rank_correlation(depth, depth * 1e6)
    assert estimate.value == 1.0 and math.isnan(estimate.lo) and math.isnan(estimate.hi)
    assert estimate.p == pytest.approx(2 * 6**3 / math.factorial(9), abs=0.001)
