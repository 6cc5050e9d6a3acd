"""The survival stage's settings, light: the scores a fitted model is selected by (`Score`:
its name in `survival.select_by`, its direction and its column of Table I), the label
columns a train/test split keeps together, and the optimisers a retry may use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    name: str  # as survival.select_by names it
    higher_is_better: bool
    column: str  # Table I's (aft_comparison.csv) column that holds it


# in the order the validator lists them; calibration errors and information criteria are
# smaller for a better model, concordance larger
SCORES = (
    Score("test_ICI", higher_is_better=False, column="test_ICI"),
    Score("ICI", higher_is_better=False, column="ICI"),
    Score("test_E50", higher_is_better=False, column="test_E50"),
    Score("E50", higher_is_better=False, column="E50"),
    Score("AIC", higher_is_better=False, column="AIC"),
    Score("BIC", higher_is_better=False, column="BIC"),
    Score("test_concordance", higher_is_better=True, column="test_concordance"),
    Score("concordance", higher_is_better=True, column="concordance"),
)
SCORE_NAMES = tuple(score.name for score in SCORES)
SPLIT_GROUPS = ("train_hash", "model_hash", "attack_hash")  # survival data label columns a split keeps together
OPTIMISERS = ("BFGS", "L-BFGS-B", "SLSQP", "CG", "TNC")  # scipy methods that use lifelines' gradient


def score(name: str) -> Score:
    """The selection score of that name (the validator has checked it is one)."""
    return next(s for s in SCORES if s.name == name)
