"""Each metric against values computed by hand."""

import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from omegaconf import OmegaConf

from trashfire import metrics
from trashfire.core.errors import ConfigError
from trashfire.survival.fitters import fit_one
from trashfire.survival.scoring import train_scores


@pytest.mark.parametrize(
    "k, expected",
    [
        (2, 0.5 + 0.5 * 1 / 2),  # 0.75
        (5, 0.2 + 0.5 * 2 / 5),  # 0.4
        (10, 0.1 + 0.5 * 3 / 10),  # 0.25
        (100, 0.01 + 0.5 * math.sqrt(99) / 100),  # ~0.0597
        (1000, 0.001 + 0.5 * math.sqrt(999) / 1000),  # ~0.0168
    ],
)
def test_viability_threshold_matches_cohens_w(k, expected):
    assert metrics.viability_threshold(k) == pytest.approx(expected)


def test_viability_threshold_table_values():
    assert metrics.viability_threshold(2) == pytest.approx(0.75)
    assert metrics.viability_threshold(10) == pytest.approx(0.25)
    assert metrics.viability_threshold(100) == pytest.approx(0.0597, abs=1e-4)
    with pytest.raises(ConfigError, match="K >= 2"):
        metrics.viability_threshold(1)


def test_evp_all_viable_is_the_trapezoid_area():
    # eps scaled by eps_max=2 -> [0, .5, 1]; area = .5*(1+.8)/2 + .5*(.8+.6)/2 = .45 + .35
    assert metrics.evp([0, 1, 2], [1.0, 0.8, 0.6], tau=0.25) == pytest.approx(0.8)


def test_evp_zeroes_points_below_tau_and_counts_recovery():
    # g = [0.9, 0, 0.5]; x = [0, .5, 1]: .5*(.9+0)/2 + .5*(0+.5)/2 = .225 + .125
    assert metrics.evp([0, 0.5, 1.0], [0.9, 0.2, 0.5], tau=0.3) == pytest.approx(0.35)


def test_evp_needs_benign_point():
    with pytest.raises(ValueError, match="eps_0 = 0"):
        metrics.evp([0.1, 0.2], [0.5, 0.4], tau=0.1)


def test_robustness_auc_hand_computed():
    # f = 1 - eps on [0, 1]: area 0.5, f(0) * 1 = 1 -> R = 0.5
    assert metrics.robustness_auc([0, 0.5, 1.0], [1.0, 0.5, 0.0], 0.0, 1.0) == pytest.approx(0.5)
    # interpolated end point: [0, 0.5] of f = [0.8, 0.4 at 1] -> f(.5) = .6; area .35; / (.8 * .5)
    assert metrics.robustness_auc([0, 1.0], [0.8, 0.4], 0.0, 0.5) == pytest.approx(0.35 / 0.4)


def test_robustness_auc_rejects_zero_start_and_empty_interval():
    with pytest.raises(ValueError, match=r"f\(eps0\) > 0"):
        metrics.robustness_auc([0, 1], [0.0, 0.0], 0.0, 1.0)
    with pytest.raises(ValueError, match="eps1 > eps0"):
        metrics.robustness_auc([0, 1], [1.0, 0.5], 0.5, 0.5)


def test_trash_failure_rate_and_benign_trash():
    assert metrics.trash(t_train=0.02, expected_survival=0.004) == pytest.approx(5.0)
    assert metrics.failure_rate(0.75, 0.01) == pytest.approx(25.0)
    # benign: 0.02 s per training sample; a failure every 1/(1-0.9) = 10 queries of 1 ms
    assert metrics.trash_benign(0.02, 0.9, 0.001) == pytest.approx(2.0)
    assert metrics.accuracy([1, 2, 3, 4], [1, 2, 0, 0]) == 0.5


def test_bic_counts_every_coefficient_on_a_small_weighted_weibull_fit(conf_dir):
    data = pd.DataFrame(
        {
            "duration": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 2.5, 3.5],
            "event": [1, 1, 0, 1, 1, 0, 1, 1],
            "weight": [2, 1, 1, 3, 1, 1, 2, 1],
            "x": [0.1, 0.4, 0.3, 0.8, 0.9, 0.5, 0.2, 0.7],
        }
    )
    spec = OmegaConf.create({"fitter": {"_target_": "lifelines.WeibullAFTFitter", "penalizer": 0.0}, "aft": True})
    fit = fit_one("weibull", spec, data)
    # Weibull AFT: lambda_ (x, Intercept) and rho_ (Intercept): k = 3; n = 12 weighted samples
    assert len(fit.fitter.params_) == 3
    expected = -2 * fit.fitter.log_likelihood_ + 3 * math.log(12)
    _, ax = plt.subplots()
    row = train_scores(fit, data, t0=3.0, ax=ax)
    plt.close("all")
    assert (row["k"], row["n"], row["n_events"]) == (3, 12, 10)
    assert row["BIC"] == pytest.approx(expected)
    assert metrics.bic(-10.0, 3, math.e**2) == pytest.approx(26.0)
