"""Kaplan-Meier curves of every group at once (trashfire.survival.km) against lifelines'
KaplanMeierFitter fitted to each group alone: survival function, plateau, restricted mean."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from lifelines import KaplanMeierFitter
from lifelines.statistics import logrank_test
from lifelines.utils import restricted_mean_survival_time

from trashfire.survival.km import grouped_km, logrank


@pytest.fixture(scope="module")
def cells():
    """40 groups of 1 to 60 rows: tied times, weights, a group whose every sample fails, one
    with no failure, and integer step counts as the attack clock gives."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 60, 40)
    group = np.repeat([f"cell{k:02d}" for k in range(40)], sizes)
    duration = rng.integers(1, 12, len(group)).astype(float)
    event = (rng.uniform(size=len(group)) < 0.6).astype(int)
    event[group == "cell03"] = 1
    event[group == "cell04"] = 0
    weight = rng.integers(1, 4, len(group))
    return pd.DataFrame({"cell": group, "duration": duration, "event": event, "weight": weight})


def per_group(cells):
    for name, part in cells.groupby("cell", sort=True):
        yield name, part, KaplanMeierFitter().fit(part["duration"], part["event"], weights=part["weight"])


def test_every_groups_curve_is_lifelines(cells):
    curves = grouped_km(cells["cell"], cells["duration"], cells["event"], cells["weight"])
    for position, (name, _, reference) in enumerate(per_group(cells)):
        assert curves.labels[position] == name
        steps = curves.group == position
        expected = reference.survival_function_.iloc[1:, 0]  # lifelines' first row is S(0) = 1
        np.testing.assert_allclose(curves.time[steps], expected.index.to_numpy(float))
        np.testing.assert_allclose(curves.survival[steps], expected.to_numpy(), rtol=1e-12, atol=1e-15)


def test_plateaus_and_restricted_means_are_lifelines(cells):
    curves = grouped_km(cells["cell"], cells["duration"], cells["event"], cells["weight"])
    budgets = pd.Series({name: float(k % 13) + 0.5 for k, name in enumerate(curves.labels)})  # inside, between and past the steps
    plateau, means = curves.plateau(), curves.restricted_mean(budgets)
    for name, _, reference in per_group(cells):
        assert plateau[name] == pytest.approx(reference.survival_function_.iloc[-1, 0], rel=1e-12, abs=1e-15)
        assert means[name] == pytest.approx(restricted_mean_survival_time(reference, t=budgets[name]), rel=1e-9), name
    assert plateau["cell03"] == 0.0 and plateau["cell04"] == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_the_log_rank_test_is_lifelines(seed):
    """Tied times within and across the groups, censoring, rows standing for several samples, a
    time at which one sample is left at risk."""
    rng = np.random.default_rng(seed)
    n = 300
    durations = rng.integers(1, 40, n).astype(float)
    events, weights, first = rng.random(n) < 0.6, rng.integers(1, 4, n), rng.random(n) < 0.4
    durations[np.argmax(durations)] = 99.0  # the last sample alone at risk
    expected = logrank_test(durations[first], durations[~first], events[first], events[~first], weights_A=weights[first], weights_B=weights[~first])
    statistic, p = logrank(durations, events, weights, first)
    assert statistic == pytest.approx(expected.test_statistic, rel=1e-10) and p == pytest.approx(expected.p_value, rel=1e-9)
