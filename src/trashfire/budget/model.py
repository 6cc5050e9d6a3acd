"""Budget sufficiency from the standing samples' margins (docs/design.md, "Budget sufficiency").

What share of an attack cell's samples would a budget `factor` times larger break beyond those
it broke? The samples that matter stand at the end of the budget, and how near the budget left
each to failing is its adversarial margin there (`margin_at_budget`: the true-class logit
minus the best other at the returned example). A calibration rerun (trashfire.budget.reruns:
a seeded share of the model cells attacked again at the larger budget) says which of its
standing samples broke; per attack family, a logistic regression of that on the log margin,
the attack's strength (min-max scaled within the family) and the defence learns P(breaks
later | standing), and a cell's estimate is the sum of its standing samples' probabilities
over its samples.

The 95% interval is predictive, for the share the larger budget would actually break: each of
`draws` bootstraps resamples the calibration's model cells (its clusters) and refits, which
carries the model's uncertainty, and then draws each standing sample's outcome from its
probability, which carries the cell's own binomial uncertainty; the interval is the 2.5 and
97.5 percentiles of the simulated shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.special import expit

MARGIN_FLOOR = 1e-3  # a standing sample's margin at or below 0 (a defended decision still right) reads as this
PENALTY = 1e-2  # ridge on the slopes: a calibration with no break at some level stays finite
NEWTON_STEPS = 50
STRENGTH_LEVELS = 8  # a family with at most this many strengths gets a column per strength
CHUNK_ROWS = 50_000  # standing samples per chunk of the simulation: rows x draws floats


def logistic(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None, penalty: float = PENALTY) -> np.ndarray:
    """Coefficients of a logistic regression of y on x (its first column the intercept, not
    penalised) by Newton-Raphson with a ridge `penalty` on the rest, each step halved until
    the penalised log-likelihood rises (a rare event far out in a covariate cannot throw it)."""
    weights = np.ones(len(y)) if weights is None else weights
    ridge = np.full(x.shape[1], penalty)
    ridge[0] = 0.0
    beta = np.zeros(x.shape[1])
    mean = np.clip(np.average(y, weights=weights) if weights.sum() else 0.5, 1e-6, 1 - 1e-6)
    beta[0] = np.log(mean / (1 - mean))

    def objective(b: np.ndarray) -> float:
        eta = x @ b
        return float(weights @ (y * eta - np.logaddexp(0.0, eta)) - 0.5 * ridge @ b**2)

    current = objective(beta)
    for _ in range(NEWTON_STEPS):
        p = expit(x @ beta)
        gradient = x.T @ (weights * (y - p)) - ridge * beta
        hessian = (x * (weights * p * (1 - p))[:, None]).T @ x + np.diag(ridge) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hessian, gradient)
        for _ in range(30):
            trial = objective(beta + step)
            if trial >= current - 1e-12 * max(1.0, abs(current)):  # relative: the objective is a sum over rows
                break
            step /= 2
        beta, improvement, current = beta + step, trial - current, trial
        # converged when the step is at rounding level: stopping on the improvement (1e-10) left
        # beta agreeing across CPUs to ~1e-7 only, and estimate's draws `random < p` flip whole
        # samples on such differences (issue 58); Newton's quadratic convergence makes the few
        # more steps cheap
        if np.abs(step).max() < 1e-10 * max(1.0, float(np.abs(beta).max())) or improvement <= 0:
            break
    return beta


@dataclass(frozen=True)
class Design:
    """How a family's samples become the regression's columns. The strength: a column per
    level past the first where the calibration saw at most STRENGTH_LEVELS of them (a grid's
    eps: the share breaking later need not be monotone in it), else min-max scaled on the
    calibration's range; none where it saw one. The defence: a column per level past the first (a defence the
    calibration never saw reads as that first one)."""

    strengths: tuple[float, ...]  # the levels with a column; empty: scaled
    strength_low: float
    strength_span: float
    defences: tuple[str, ...]

    @classmethod
    def of(cls, calibration: pd.DataFrame) -> Design:
        strength = calibration["strength"].astype(float)
        levels = sorted(strength.unique())
        defences = sorted(calibration["defence"].astype(str).unique())
        return cls(
            tuple(levels[1:]) if len(levels) <= STRENGTH_LEVELS else (),
            float(strength.min()),
            float(strength.max() - strength.min()),
            tuple(defences[1:]),
        )

    @property
    def columns(self) -> list[str]:
        strength = [f"strength_{v:g}" for v in self.strengths] if self.strengths else ["strength"] * (self.strength_span > 0)
        return ["intercept", "log_margin_at_budget", *strength, *(f"defence_{d}" for d in self.defences)]

    def matrix(self, samples: pd.DataFrame) -> np.ndarray:
        margin = np.log(np.maximum(samples["margin_at_budget"].to_numpy(float), MARGIN_FLOOR))
        value = samples["strength"].to_numpy(float)
        if self.strengths:
            strength = [np.isclose(value, level).astype(float) for level in self.strengths]
        else:  # one strength: no column
            strength = [(value - self.strength_low) / self.strength_span] if self.strength_span > 0 else []
        defence = samples["defence"].astype(str).to_numpy()
        dummies = [(defence == level).astype(float) for level in self.defences]
        return np.column_stack([np.ones(len(samples)), margin, *strength, *dummies])


@dataclass(frozen=True)
class FamilyModel:
    """One attack family's fit and its cluster-bootstrap refits (`draws` rows)."""

    design: Design
    coefficients: np.ndarray
    draws: np.ndarray
    calibration_samples: int
    calibration_breaks: int
    calibration_models: int

    def probability(self, samples: pd.DataFrame, coefficients: np.ndarray | None = None) -> np.ndarray:
        """P(breaks within the larger budget | standing), per sample (a column per coefficient row)."""
        beta = self.coefficients if coefficients is None else coefficients
        return expit(self.design.matrix(samples) @ beta.T)


def fit_family(calibration: pd.DataFrame, draws: int = 200, seed: int = 0) -> FamilyModel:
    """The logistic model of `breaks_later` over the calibration's standing samples (columns
    margin_at_budget, strength, defence, model_hash, breaks_later), with `draws` refits on
    its model cells resampled with replacement."""
    design = Design.of(calibration)
    x, y = design.matrix(calibration), calibration["breaks_later"].to_numpy(float)
    clusters = pd.factorize(calibration["model_hash"])[0]
    members = [np.flatnonzero(clusters == c) for c in range(clusters.max() + 1)]
    rng = np.random.default_rng(seed)
    refits = []
    for _ in range(draws):
        counts = np.bincount(rng.integers(0, len(members), len(members)), minlength=len(members))
        weights = np.zeros(len(y))
        for cluster, count in enumerate(counts):
            weights[members[cluster]] = count
        refits.append(logistic(x, y, weights))
    return FamilyModel(design, logistic(x, y), np.array(refits), len(y), int(y.sum()), len(members))


def estimate(model: FamilyModel, standing: pd.DataFrame, cells: pd.Series, seed: int = 0) -> pd.DataFrame:
    """Per cell of `cells` (attack_hash -> its samples): `still_breakable`, the expected share
    of its samples that the larger budget breaks (its standing samples in `standing`, with
    an attack_hash column), and the 95% predictive interval (`still_breakable_low`, `_high`)."""
    names = cells.index.to_numpy()
    codes = pd.Index(names).get_indexer(standing["attack_hash"])
    if (codes < 0).any():
        raise ValueError("standing samples of a cell that is not in `cells`")
    rng = np.random.default_rng(seed)
    expected = np.zeros(len(names))
    simulated = np.zeros((len(names), len(model.draws)))
    for chunk in np.array_split(np.arange(len(standing)), max(1, -(-len(standing) // CHUNK_ROWS))):
        part = standing.iloc[chunk]
        into_cells = sparse.csr_matrix((np.ones(len(chunk)), (codes[chunk], np.arange(len(chunk)))), shape=(len(names), len(chunk)))
        expected += into_cells @ model.probability(part)
        outcomes = rng.random((len(chunk), len(model.draws))) < model.probability(part, model.draws)
        simulated += into_cells @ outcomes.astype(float)
    samples = cells.to_numpy(float)
    low, high = np.percentile(simulated, [2.5, 97.5], axis=1) if len(model.draws) else (np.full(len(names), np.nan),) * 2
    return pd.DataFrame(
        {"still_breakable": expected / samples, "still_breakable_low": low / samples, "still_breakable_high": high / samples},
        index=pd.Index(names, name="attack_hash"),
    )
