"""The survival stage's settings, light: the scores a fitted model is selected by (`Score`:
its name in `survival.select_by`, which is also its column of Table I, its direction and what
cross-validation measures for it), the select_by names that were replaced, the label columns a
train/test split keeps together, and the optimisers a retry may use. A new selection score is
one entry of SCORES whose name is a column of Table I (aft_comparison.csv): the config check,
the selection and cross-validation read it from there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    name: str  # as survival.select_by names it, and Table I's (aft_comparison.csv) column that holds it
    higher_is_better: bool
    measure: str = ""  # what each held-out fold measures (survival.validation); "": in-sample, no cross-validation


# in the order the validator lists them; calibration errors, the Brier score and information
# criteria are smaller for a better model, concordance larger. Never a test-split score: the
# selection must not see the split the selected model is then judged on
SCORES = (
    Score("cv_ICI", higher_is_better=False, measure="ICI"),
    Score("cv_E50", higher_is_better=False, measure="E50"),
    Score("cv_IBS", higher_is_better=False, measure="IBS"),
    Score("cv_uno_C", higher_is_better=True, measure="uno_C"),
    Score("cv_concordance", higher_is_better=True, measure="concordance"),
    Score("AIC", higher_is_better=False),
    Score("BIC", higher_is_better=False),
)
# select_by names before issue 59: the test split's scores peeked at it, the training split's
# scored a model on the rows it was fitted to; each became the same score cross-validated
REPLACED = {
    "test_ICI": "cv_ICI",
    "ICI": "cv_ICI",
    "test_E50": "cv_E50",
    "E50": "cv_E50",
    "test_concordance": "cv_concordance",
    "concordance": "cv_concordance",
}
SPLIT_GROUPS = ("train_hash", "model_hash", "attack_hash")  # survival data label columns a split keeps together
OPTIMISERS = ("BFGS", "L-BFGS-B", "SLSQP", "CG", "TNC")  # scipy methods that use lifelines' gradient


def score_names() -> tuple[str, ...]:
    """What survival.select_by may name, in SCORES' order."""
    return tuple(score.name for score in SCORES)


def score(name: str) -> Score:
    """The selection score of that name (the validator has checked it is one)."""
    return next(s for s in SCORES if s.name == name)
