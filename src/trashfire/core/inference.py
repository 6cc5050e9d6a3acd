"""How a verdict is reached (DESIGN.md, "Inference"; issue 59): one owner for the intervals,
tests, multiplicity correction, equivalence and power that the findings, the TRASH/EVP/R
summaries and the reproduction page use.

Every function takes one value per independent unit (a trained model, or a (configuration,
seed) unit) whose cells were averaged within it first: cells of one trained model are not
independent, and counting them as such made intervals about sqrt(cells) too narrow.
- A mean over units: Student's t interval and test (scipy), which covers at any n for normal
  values and close to it for skewed ones (bench/inference_calibration.py measures it). A
  percentile bootstrap over 3 values covers at most 75% (1 - 2 x 0.5^3) and is not used.
- A mean of a bounded value (1 - Kendall's tau): a score interval with the units' dispersion
  (quasi-binomial), which covers where a t interval did not near the bound.
- A slope over units: ordinary least squares with its t interval (n - 2 degrees of freedom).
- A rank correlation over units: Spearman's rho, its p by an exact permutation test where the
  permutations are few and by 9,999 random ones otherwise, its interval by Fisher's z with
  Fieller's standard error 1.06 / sqrt(n - 3); none where every unit lies in one order (|rho| =
  1: a time on the compute clock that depth fixes), where Fisher's z is infinite.
- A difference from a published mean (the reproduction page): Welch's t, the paper's mean an
  estimate over its own seeds; of two independent estimates: Welch-Satterthwaite.
- Equivalence (a claim of no effect, a reproduction that agrees): two one-sided tests (TOST)
  against +-margin; its p is the larger of the two.
- Many claims: Holm's step-down adjustment (equal to statsmodels', tested).
- Power: the smallest effect the run detects at 80% power (two-sided, at the level given: the
  noncentral t), and about the units a study would need to detect an effect of a given size.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from trashfire.core.stats import significant

LEVEL = 0.95
POWER = 0.8
SPEARMAN_SE = 1.06  # Fieller, Hartley and Pearson (1957): var(atanh rho_s) ~ 1.06 / (n - 3)
MOST_UNITS = 100_000  # units_needed looks no further
EXACT_PERMUTATIONS = 40_320  # 8!: up to 8 units every pairing is enumerated
NAN = math.nan


@dataclass(frozen=True)
class Estimate:
    """One statistic over `n` independent units: its value, two-sided `level` interval, standard
    error and degrees of freedom (on Fisher's z scale for a correlation), and the two-sided p of
    `value == null`. NaN where n is too small for it."""

    value: float
    lo: float
    hi: float
    se: float
    df: float
    n: int
    p: float
    null: float
    method: str  # "t", "ols" or "spearman"

    def one_sided_p(self, sign: int) -> float:
        """p of the test that the statistic lies on the `sign` side of its null (+1: above)."""
        if not np.isfinite(self.p):
            return NAN
        above = (self.value - self.null) * sign > 0
        return self.p / 2 if above else 1 - self.p / 2


def _scipy_stats():
    from scipy import stats  # a third of a second: paid by the callers that test

    return stats


def finite(values) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return values[np.isfinite(values)]


def constant(values: np.ndarray) -> bool:
    """Equal to 9 significant digits: units equal but for rounding have no spread (issue 58)."""
    return bool(np.ptp(significant(values)) == 0)


def mean_over_units(values, null: float = 0.0, level: float = LEVEL) -> Estimate:
    """The mean of one value per unit, Student's t interval and the two-sided t test of `null`."""
    values = finite(values)
    n = len(values)
    mean = float(values.mean()) if n else NAN
    if n < 2:
        return Estimate(mean, NAN, NAN, NAN, NAN, n, NAN, null, "t")
    stats = _scipy_stats()
    if constant(values):  # every unit equal: no spread to build an interval or a test on (not one of zero width)
        return Estimate(mean, NAN, NAN, NAN, n - 1, n, NAN, null, "t")
    se = float(values.std(ddof=1) / math.sqrt(n))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean - null) / se, n - 1))
    return Estimate(mean, mean - half, mean + half, se, n - 1, n, p, null, "t")


def bounded_mean(values, low: float, high: float, null: float = 0.0, level: float = LEVEL) -> Estimate:
    """The mean of one value per unit that lies in [low, high] (1 - Kendall's tau in [0, 2]),
    with a score interval: (mean - mu)^2 <= t^2 phi (mu - low)(high - mu) / n, solved for mu,
    where phi = s^2 / ((mean - low)(high - mean)) is the units' dispersion (quasi-binomial).
    A value near its bound is skewed and of few levels (most seeds rank alike, a few differ by
    one pair); there Student's t interval covered 0.87-0.92 at 5 and 10 seeds, and this one
    0.95-0.99 (bench/inference_calibration.py). Its test of `null` stays Student's t (Wald): a score
    test has no variance at a bound, so it would reject 0 on any unit off it. Near the bound the
    interval may then exclude the null while the test does not reject: the test is the verdict's."""
    values = finite(values)
    n, width = len(values), high - low
    mean = float(values.mean()) if n else NAN
    if n < 2 or constant(values):
        return Estimate(mean, NAN, NAN, NAN, max(n - 1, 0) or NAN, n, NAN, null, "t")
    stats = _scipy_stats()
    m = (mean - low) / width  # on [0, 1]
    spread = float(values.var(ddof=1)) / width**2
    dispersion = spread / max(m * (1 - m), np.finfo(float).tiny)
    q = float(stats.t.ppf(0.5 + level / 2, n - 1)) ** 2 * dispersion / n
    centre, half = (2 * m + q) / (2 * (1 + q)), math.sqrt(max((2 * m + q) ** 2 - 4 * (1 + q) * m * m, 0.0)) / (2 * (1 + q))
    t = mean_over_units(values, null, level)  # the test: Student's t (Wald), see the docstring
    return Estimate(mean, low + width * (centre - half), low + width * (centre + half), t.se, t.df, n, t.p, null, "t")


def welch_difference(values, published_mean: float, published_sd: float, published_n: int, level: float = LEVEL) -> Estimate:
    """Our mean over units minus a published mean over the paper's own units (its SD over
    `published_n` of them): Welch's t, as the published mean is an estimate too. The test is of
    a difference of 0."""
    values = finite(values)
    n = len(values)
    if n < 2 or not (published_sd >= 0 and published_n >= 2):
        return Estimate(float(values.mean()) - published_mean if n else NAN, NAN, NAN, NAN, NAN, n, NAN, 0.0, "t")
    ours, theirs = float(values.var(ddof=1)) / n, published_sd**2 / published_n
    return difference_of(float(values.mean()), math.sqrt(ours), n - 1, published_mean, math.sqrt(theirs), published_n - 1, level, n)


def difference_of(a: float, a_se: float, a_df: float, b: float, b_se: float, b_df: float, level: float = LEVEL, n: int = 0) -> Estimate:
    """a - b of two independent estimates with their standard errors: Welch-Satterthwaite's
    degrees of freedom (inf: a normal estimate), the t interval and the test of 0."""
    va, vb = a_se**2, b_se**2
    se = math.sqrt(va + vb)
    if not (np.isfinite(se) and se > 0):
        return Estimate(a - b, NAN, NAN, NAN, NAN, n, NAN, 0.0, "t")
    share = sum(v**2 / df for v, df in ((va, a_df), (vb, b_df)) if v > 0 and np.isfinite(df))
    df = (va + vb) ** 2 / share if share > 0 else math.inf
    stats = _scipy_stats()
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    p = float(2 * stats.t.sf(abs(a - b) / se, df))
    return Estimate(a - b, a - b - half, a - b + half, se, df, n, p, 0.0, "t")


def slope_over_units(x, y, null: float = 0.0, level: float = LEVEL) -> Estimate:
    """The least-squares slope of y on x over units, its t interval and the test of `null`."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = len(x)
    if n < 3 or constant(x):
        return Estimate(NAN, NAN, NAN, NAN, NAN, n, NAN, null, "ols")
    if constant(y):  # a constant: its slope is 0 exactly (least squares gives +-1e-17 as the mean rounds)
        return Estimate(0.0, 0.0, 0.0, 0.0, n - 2, n, 1.0 if null == 0 else 0.0, null, "ols")
    stats = _scipy_stats()
    fit = stats.linregress(x, y)
    slope, se = float(fit.slope), float(fit.stderr)
    if not se > 1e-12 * abs(slope):  # an exact line: no residual to test against
        differs = bool(significant([slope])[0] != significant([null])[0])
        return Estimate(slope, slope, slope, 0.0, n - 2, n, 0.0 if differs else 1.0, null, "ols")
    half = float(stats.t.ppf(0.5 + level / 2, n - 2)) * se
    p = float(2 * stats.t.sf(abs(slope - null) / se, n - 2))
    return Estimate(slope, slope - half, slope + half, se, n - 2, n, p, null, "ols")


def rank_correlation(x, y, level: float = LEVEL, seed: int = 0) -> Estimate:
    """Spearman's rho over units; p of rho == 0 by permutation (exact up to 8 units), the
    interval by Fisher's z with Fieller's standard error (on the z scale in `se`)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = significant(x[keep]), significant(y[keep])
    n = len(x)
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Estimate(NAN, NAN, NAN, NAN, NAN, n, NAN, 0.0, "spearman")
    stats = _scipy_stats()
    rx, ry = (stats.rankdata(v) for v in (x, y))
    rx, ry = (rx - rx.mean()) / np.linalg.norm(rx - rx.mean()), (ry - ry.mean()) / np.linalg.norm(ry - ry.mean())
    rho = float(rx @ ry)  # Pearson's r of the ranks (ties averaged): Spearman's rho, as scipy's
    permuted = spearman_permutations(rx, ry, seed)
    p = (
        float(np.mean(np.abs(permuted) >= abs(rho) - 1e-12))
        if len(permuted) < 9_999
        else float((1 + np.sum(np.abs(permuted) >= abs(rho) - 1e-12)) / (1 + len(permuted)))
    )
    se = SPEARMAN_SE / math.sqrt(n - 3)
    if significant([abs(rho)])[0] == 1.0:  # every unit in one order: Fisher's z is infinite, no interval (not one of zero width)
        return Estimate(float(np.sign(rho)), NAN, NAN, se, NAN, n, p, 0.0, "spearman")
    z, half = math.atanh(rho), float(stats.norm.ppf(0.5 + level / 2)) * se
    return Estimate(rho, math.tanh(z - half), math.tanh(z + half), se, NAN, n, p, 0.0, "spearman")


def spearman_permutations(rx: np.ndarray, ry: np.ndarray, seed: int, resamples: int = 9_999) -> np.ndarray:
    """rho under every pairing of the (centred, normed) ranks where they are at most
    EXACT_PERMUTATIONS (the exact null distribution: p counts the observed pairing too), else
    under `resamples` random pairings (p = (1 + beyond) / (1 + resamples))."""
    n = len(rx)
    if math.factorial(n) <= EXACT_PERMUTATIONS:
        orders = np.array(list(itertools.permutations(range(n))))
    else:
        orders = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (resamples, 1)), axis=1)
    return ry[orders] @ rx


def equivalence_p(estimate: Estimate, margin: float) -> float:
    """TOST: p of |statistic - null| < margin, the larger of the two one-sided tests' p
    (Schuirmann 1987); for a correlation on Fisher's z scale."""
    if not (np.isfinite(estimate.se) and margin > 0):
        return NAN
    stats = _scipy_stats()
    if estimate.method == "spearman":
        z, low, high = math.atanh(estimate.value), math.atanh(-margin), math.atanh(margin)
        return float(max(stats.norm.sf((z - low) / estimate.se), stats.norm.cdf((z - high) / estimate.se)))
    if estimate.se == 0:
        return 0.0 if abs(estimate.value - estimate.null) < margin else 1.0
    shifted = estimate.value - estimate.null
    lower = stats.t.sf((shifted + margin) / estimate.se, estimate.df)
    upper = stats.t.cdf((shifted - margin) / estimate.se, estimate.df)
    return float(max(lower, upper))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest of m times (m - k + 1), made
    non-decreasing and at most 1 (statsmodels' multipletests(method="holm") gives the same, tested;
    it runs the garbage collector on every call, which a simulation of thousands of tables pays
    for). NaN stays NaN and is no claim."""
    pvalues = np.asarray(pvalues, dtype=float)
    adjusted = np.full(len(pvalues), NAN)
    tested = np.flatnonzero(np.isfinite(pvalues))
    order = tested[np.argsort(pvalues[tested], kind="stable")]
    m = len(order)
    adjusted[order] = np.minimum(np.maximum.accumulate(pvalues[order] * (m - np.arange(m))), 1.0)
    return adjusted


def detectable(estimate: Estimate, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest |effect| the run detects with probability `power` by a two-sided test at
    `alpha`, given its standard error: the noncentrality at which the noncentral t rejects with
    that probability, times se (exact for a t test at any df; the normal approximation
    (t_{1-alpha/2} + t_power) x se gives 77% power at 3 units); for a correlation, on Fisher's z
    scale and back."""
    if not np.isfinite(estimate.se):
        return NAN
    stats = _scipy_stats()
    if estimate.method == "spearman":
        return math.tanh((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * estimate.se)
    if estimate.se == 0:
        return 0.0
    return noncentrality(float(estimate.df), alpha, power) * estimate.se


@functools.lru_cache(maxsize=4096)
def noncentrality(df: float, alpha: float, power: float) -> float:
    """The shift at which the two-sided t test at `alpha` on `df` degrees of freedom rejects with
    probability `power` (the noncentral t); it depends on nothing else, so it is solved once."""
    from scipy.optimize import brentq

    stats = _scipy_stats()
    critical = stats.t.ppf(1 - alpha / 2, df)

    def short_of(shift: float) -> float:
        rejects = stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)
        return (rejects if np.isfinite(rejects) else 1.0) - power  # scipy's nct gives NaN far out, where it rejects always

    return float(brentq(short_of, 0.0, 1e3))


def units_needed(effect: float, spread: float, alpha: float = 0.05, power: float = POWER, method: str = "t") -> float:
    """About how many units a two-sided test at `alpha` needs to detect `effect` with
    probability `power`: for a mean, `spread` the SD between units, the n at which the one-sample
    t test's power reaches `power` (Guenther's approximation of the noncentral t's answer, which
    statsmodels' TTestPower solves for slowly); for a correlation (`method` "spearman"), Fisher's
    z with Fieller's variance. NaN where `effect` is 0 or unknown; past MOST_UNITS, MOST_UNITS."""
    effect, spread = abs(float(effect)), float(spread)
    if not (np.isfinite(effect) and effect > 0):
        return NAN
    if method == "spearman":
        stats = _scipy_stats()
        z = math.atanh(min(effect, 1 - 1e-9))
        return 3 + SPEARMAN_SE * ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / z) ** 2
    if not (np.isfinite(spread) and spread > 0):
        return 2.0
    return units_from_se(effect, spread, 1, alpha, power)  # one unit's standard error is the spread between units


def units_from_se(distance: float, se: float, n: int, alpha: float = 0.05, power: float = POWER) -> float:
    """About how many units a two-sided test at `alpha` needs to tell `distance` with
    probability `power`, from a run of `n` units whose statistic has standard error `se` (it
    shrinks as 1 / sqrt(units)): n ((z_{1-alpha/2} + z_power) se / distance)^2 + z^2 / 2
    (Guenther's (1981) correction towards the noncentral t's answer, within a fraction of a unit
    of statsmodels' TTestPower from 3 units up, at no solver's cost)."""
    from scipy.special import ndtri  # the normal quantile, without scipy.stats' per-call overhead

    if not (np.isfinite(distance) and distance > 0 and np.isfinite(se) and se > 0):
        return NAN
    z = ndtri(1 - alpha / 2)
    return float(min(max(n * ((z + ndtri(power)) * se / distance) ** 2 + z**2 / 2, 2.0), MOST_UNITS))
