"""Another CPU, simulated: inputs moved by what another CPU's rounding could move them (a few
ulps, or 1e-15 relative noise), for the tests that assert a result does not hang on which CPU
computed its inputs (issue 58)."""

from __future__ import annotations

import numpy as np

RELATIVE_NOISE = 1e-15  # a few ulps of float64 (its epsilon is 2.2e-16)
TRIALS = 20


def perturbed(values, rng: np.random.Generator, relative: float = RELATIVE_NOISE) -> np.ndarray:
    """`values` times (1 + relative noise), element by element."""
    values = np.asarray(values, float)
    return values * (1.0 + relative * rng.standard_normal(values.shape))


def perturbed_symmetric(matrix, rng: np.random.Generator, relative: float = RELATIVE_NOISE) -> np.ndarray:
    """A symmetric matrix perturbed as `perturbed`, kept symmetric (as every covariance is)."""
    noisy = perturbed(matrix, rng, relative)
    return np.triu(noisy) + np.triu(noisy, 1).T


def nudged(values, ulps: int, rng: np.random.Generator) -> np.ndarray:
    """Each element moved up or down by up to `ulps` units in the last place (np.nextafter)."""
    values = np.array(values, float)
    steps = rng.integers(-ulps, ulps + 1, values.shape)
    for _ in range(ulps):
        values = np.where(steps > 0, np.nextafter(values, np.inf), np.where(steps < 0, np.nextafter(values, -np.inf), values))
        steps = steps - np.sign(steps)
    return values
