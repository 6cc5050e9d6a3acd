"""Fixtures of the survival tests that several modules share (a module's own fixture of the
same name takes precedence)."""

import pytest

from tests.conftest import ROOT
from tests.survival.test_survival_stage import per_sample_data
from trashfire.core.config import compose, validate
from trashfire.survival import analysis
from trashfire.survival.split import split_groups


@pytest.fixture(scope="module")
def settings():
    """The default configuration's survival settings."""
    return validate(compose([], conf=ROOT / "conf")).survival


@pytest.fixture(scope="module")
def parts():
    """The train and test parts of 15 trained models' samples with a shared frailty each."""
    return analysis.usable_covariates(*split_groups(per_sample_data(n_models=15, frailty=0.3), "train_hash", 0.2, 0))
