"""bench/inference_calibration.py on one setting with few simulations: it returns every test's
rates, and it tells the project's t interval from a broken one (a percentile bootstrap over
3 seeds' cells, which counts correlated cells of one trained model as independent)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.paths import bench_script

SETTING_ARGS = (3, 0.9, "normal")  # 3 seeds, cells of a trained model correlated 0.9: where counting cells misleads most


@pytest.fixture(scope="module")
def bench():
    return bench_script("inference_calibration")


def pooled_cells_bootstrap(cells: np.ndarray, resamples: int = 999) -> tuple[float, float, float]:
    """The broken reference: a percentile bootstrap of the mean over every cell of every seed."""
    values = cells.ravel()
    rng = np.random.default_rng(0)
    means = rng.choice(values, size=(resamples, len(values))).mean(axis=1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def test_one_setting_gives_each_tests_rates(bench):
    setting = bench.Setting(*SETTING_ARGS)
    chosen = ("003_trash_above_one_fgm", "001_adv_train_raises_evp", "004_pretraining_effect")
    figures = bench.run_setting(setting, 60, seed=0, tests=chosen, family=False)
    assert set(figures["tests"]) == set(chosen)
    for id in chosen:
        for scenario in bench.TESTS[id].scenarios:
            found = figures["tests"][id][scenario.name]
            assert found["simulations"] == 60 and found["units"] == (9 if id.startswith("003") else 3)  # 003's unit: a model of 3 depths
            assert sum(found["verdicts"].values()) == 60 and "not testable" not in found["verdicts"]
            expected = {"false_rejection": bool(scenario.errors), "power": scenario.power, "coverage": scenario.covered}
            for key, present in expected.items():
                assert (key in found) == present
                assert not present or 0.0 <= found[key] <= 1.0
    # the project's t interval over 3 units covers its true mean (0.95 expected; 60 draws)
    assert figures["tests"]["001_adv_train_raises_evp"]["null"]["coverage"] >= 0.85
    assert 0.0 <= figures["summary"]["coverage"] <= 1.0


def test_the_family_null_gives_check_findings_verdicts_and_each_tests_own(bench):
    setting = bench.Setting(*SETTING_ARGS)
    # compare_every=1: each draw's composed verdicts are checked against check_findings itself
    result = bench.simulate_family(setting, 3, seed=0, compare_every=1)
    assert result["simulations"] == 3 and 0 <= result["any_error"] <= 3
    assert set(result["verdicts"]) == set(result["tests"]) == set(bench.TESTS)
    for scenarios in result["tests"].values():
        [found] = scenarios.values()
        assert sum(found["verdicts"].values()) == 3 and "not testable" not in found["verdicts"]


def test_the_bench_tells_the_t_interval_from_a_bootstrap_over_cells(bench):
    setting = bench.Setting(*SETTING_ARGS)
    broken = bench.simulate_summary(setting, 300, seed=0, interval=pooled_cells_bootstrap)
    project = bench.simulate_summary(setting, 300, seed=0)
    assert broken["covered"] / 300 < 0.8
    assert project["covered"] / 300 >= 0.9


def test_a_rate_beyond_its_target_fails_the_first_stage_and_names_its_recheck(bench):
    setting = bench.Setting(*SETTING_ARGS)
    entry = {
        "tests": {"001_adv_train_raises_evp": {"null": {"false_rejection": 0.2, "coverage": 0.5, "truth": 0.0}}},
        "family": {"rate": 0.3},
        "summary": {"coverage": 0.95},
    }
    missed = bench.failures({setting.label: entry}, (setting,), 1000, seed=7)
    lines = [m.line for m in missed]
    assert len(missed) == 3
    assert any("false rejections 0.200" in m for m in lines) and any("coverage 0.500" in m for m in lines) and any("family-wise" in m for m in lines)
    # each is rechecked on four times the draws, from the streams of the next seed
    assert {(m.recheck.kind, m.recheck.sims, m.recheck.seed) for m in missed} == {("test", 4000, 8), ("family", 4000, 8)}


def test_a_recheck_judges_fresh_draws_at_their_own_n(bench):
    setting = bench.Setting(*SETTING_ARGS)
    # a first stage that (as if by chance) saw 003_trash_above_one_fgm reject too often
    entry = {"tests": {"003_trash_above_one_fgm": {"null": {"false_rejection": 0.5, "truth": 0.0}}}}
    [missed] = bench.failures({setting.label: entry}, (setting,), 30, seed=0)
    lines, failed, figures = bench.recheck([missed], (setting,), 30, seed=0, workers=1)
    found = figures[setting.label]["tests"]["003_trash_above_one_fgm"]["null"]
    assert found["simulations"] == 120
    assert len(lines) == 1 and "at 120 fresh simulations" in lines[0]
    assert bool(failed) == (found["false_rejection"] > bench.error_ceiling(120))
    # its true rate is far below 5% (0.0008 at 1000 draws per setting): the recheck clears it
    assert not failed


def test_an_earlier_first_stage_is_rechecked_without_being_drawn_again(bench, tmp_path):
    import json
    import subprocess
    import sys

    grid = bench.settings()
    passing = {
        "tests": {"003_trash_above_one_fgm": {"null": {"false_rejection": 0.0, "coverage": 0.95, "truth": 1.0, "units": 9, "simulations": 30}}},
        "family": {"rate": 0.0, "any_verdict_rate": 0.0},
        "summary": {"coverage": 0.95},
    }
    figures = {s.label: json.loads(json.dumps(passing)) for s in grid}
    figures[grid[2].label]["tests"]["003_trash_above_one_fgm"]["null"]["false_rejection"] = 0.5  # past its target, as if by chance
    earlier = tmp_path / "first.json"
    earlier.write_text(json.dumps({"machine": {"commit": "x"}, "simulations": 30, "seed": 0, "seconds": 1.0, "skew_sigma": 1.0, "settings": figures}))
    out = tmp_path / "out.json"
    script = [sys.executable, str(bench.__file__), "--first-stage", str(earlier), "--json", str(out), "--workers", "1"]
    done = subprocess.run(script, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert len(result["first_stage_failures"]) == 1 and "at 120 fresh simulations" in result["rechecks"][0] and result["failures"] == []
    assert result["first_stage_from"]["file"] == str(earlier)
    # a file that is not this bench's output: one line naming it, a non-zero exit
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    refused = subprocess.run([*script[:3], str(bad)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "not a --json of this bench" in refused.stderr.strip().splitlines()[-1]
