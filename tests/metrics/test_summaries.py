"""The report's numbers (metrics/summaries.py) on hand-made tables: each expected value is
worked out in the comment beside it."""

import math

import numpy as np
import pandas as pd
import pytest

from trashfire.metrics import summaries


def test_wilson_interval_of_8_in_10_is_the_textbook_one():
    # z = 1.95996; centre (0.8 + z^2/20) / (1 + z^2/10) = 0.71674; half 0.22658
    assert summaries.wilson_interval(8, 10) == pytest.approx((0.490162, 0.943318), abs=1e-6)
    # at 90%: z = 1.64485, the interval narrows to (0.5408, 0.9314)
    assert summaries.wilson_interval(8, 10, level=0.9) == pytest.approx((0.540793, 0.931442), abs=1e-6)
    # 0 in 4 stays inside [0, 1]: (0, z^2/4 / (1 + z^2/4)) = (0, 0.4899)
    assert summaries.wilson_interval(0, 4) == pytest.approx((0.0, 0.489891), abs=1e-6)


@pytest.mark.parametrize("n", [0, -1, math.nan])
def test_wilson_interval_of_no_samples_is_nan(n):
    assert all(math.isnan(v) for v in summaries.wilson_interval(0, n))


def test_pooled_accuracy_weights_each_cell_by_its_samples():
    # 0.5 of 2 and 1.0 of 6: 7 right of 8 = 0.875, not the cells' mean 0.75
    acc, lo, hi = summaries.pooled_accuracy(pd.Series([0.5, 1.0]), pd.Series([2, 6]))
    assert acc == 0.875 and (lo, hi) == summaries.wilson_interval(7, 8)
    assert all(math.isnan(v) for v in summaries.pooled_accuracy(pd.Series([0.5]), pd.Series([0])))


def test_paired_spearman_uses_the_rows_where_both_columns_have_a_value():
    x = pd.Series([1.0, 2.0, np.nan, 3.0, 4.0])
    y = pd.Series([2.0, 4.0, 1.0, np.nan, 8.0])
    rho, p, n = summaries.paired_spearman(x, y)  # rows 0, 1, 4: the same order, rho 1
    assert (rho, n) == (pytest.approx(1.0), 3) and p == pytest.approx(0.0, abs=1e-9)
    few = summaries.paired_spearman(x.iloc[:2], y.iloc[:2])
    assert math.isnan(few[0]) and math.isnan(few[1]) and few[2] == 2


def test_degenerate_models_lists_each_flagged_model_cell_once():
    experiments = pd.DataFrame({"model_hash": ["a", "a", "b", "c"], "degenerate": [True, True, "false", "TRUE"]})
    assert summaries.degenerate_models(experiments)["model_hash"].tolist() == ["a", "c"]  # text flags too
    assert summaries.degenerate_models(experiments.drop(columns="model_hash")).index.tolist() == [0, 1, 3]
    assert summaries.degenerate_models(experiments.drop(columns="degenerate")).empty
    assert list(summaries.degenerate_models(experiments.iloc[:0]).columns) == ["model_hash", "degenerate"]


def test_distinct_counts_say_none_for_a_missing_column():
    table = pd.DataFrame({"seed": [0, 1, 1], "model": ["r8", "r8", "r8"]})
    assert summaries.distinct_counts(table, ["seed", "model", "depth"]) == {"seed": 2, "model": 1, "depth": None}


def trash_rows(**columns) -> pd.DataFrame:
    keys = {"dataset": "digits", "model": "r8", "epochs": 1, "defence": "none", "defence_value": np.nan, "attack_family": "pgd linf"}
    return pd.DataFrame([keys | {"trash_adv_flops": f, "trash_adv_wall": w} for f, w in ((1.0, 10.0), (3.0, 20.0), (8.0, 90.0))]).assign(**columns)


def test_trash_by_clock_is_the_median_of_the_sound_cells_per_clock():
    # the third cell is degenerate: medians of (1, 3) and (10, 20); the missing defence value is a key
    table = summaries.trash_by_clock(trash_rows(degenerate=[False, False, True]))
    assert table.to_dict("records") == [
        {"dataset": "digits", "model": "r8", "epochs": 1, "defence": "none", "defence_value": pytest.approx(np.nan, nan_ok=True)}
        | {"attack_family": "pgd linf", "trash_adv_flops": 2.0, "trash_adv_wall": 15.0}
    ]
    assert summaries.trash_by_clock(trash_rows())["trash_adv_flops"].tolist() == [3.0]  # no flag column: every cell
    assert summaries.trash_by_clock(trash_rows().drop(columns=["trash_adv_flops", "trash_adv_wall"])) is None
    assert summaries.trash_by_clock(trash_rows().iloc[:0]) is None


def seeds() -> pd.DataFrame:
    # two seeds of one model cell; pixel eps differs by the split's std
    return pd.DataFrame(
        {
            "model_hash": ["s0", "s0", "s1", "s1"],
            "eps": [0.2, 0.1, 0.1, 0.2],
            "eps_pixel": [0.06, 0.03, 0.05, 0.1],
            "acc": [0.2, 0.6, 0.4, 0.4],
            "acc_norm": [0.25, 0.75, 0.5, 0.5],
        }
    )


def test_seed_means_are_taken_at_each_eps_and_sorted_by_their_x():
    assert summaries.seed_mean(seeds(), "eps", "acc").to_dict() == pytest.approx({0.1: 0.5, 0.2: 0.3})
    curve = summaries.seed_mean_accuracy(seeds(), "eps_pixel")
    # eps 0.1: x (0.03 + 0.05)/2, acc 0.5 with SD of (0.6, 0.4) = 0.1414; eps 0.2: x 0.08, acc 0.3
    assert curve.index.tolist() == [0.1, 0.2] and curve["x"].tolist() == pytest.approx([0.04, 0.08])
    assert curve["acc"].tolist() == pytest.approx([0.5, 0.3]) and curve["acc_sd"].tolist() == pytest.approx([0.141421, 0.141421], abs=1e-6)
    assert curve["norm"].tolist() == pytest.approx([0.625, 0.375]) and curve["norm_sd"].tolist() == pytest.approx([0.176777, 0.176777], abs=1e-6)
    assert curve["seeds"].tolist() == [2, 2]
    reversed_x = summaries.seed_mean_accuracy(seeds().assign(eps_pixel=[0.01, 0.09, 0.09, 0.01]), "eps_pixel")
    assert reversed_x.index.tolist() == [0.2, 0.1]  # ordered by x, not by eps


def test_seed_mean_survival_on_a_grid_and_on_each_seeds_own_steps():
    rows = pd.DataFrame({"model_hash": ["s0", "s0", "s1", "s1"], "eps": [0.0, 0.5, 0.0, 1.0], "survival": [1.0, 0.4, 1.0, 0.2]})
    xs, mean = summaries.seed_mean_survival(rows, grid=True)
    # at 0 both 1; at 0.5 s0 0.4 and s1 still 1 (its step is at 1.0); at 1.0 0.4 and 0.2
    assert xs.tolist() == [0.0, 0.5, 1.0] and mean.tolist() == pytest.approx([1.0, 0.7, 0.3])
    xs, mean = summaries.seed_mean_survival(rows, grid=False)
    # 200 points on [0, 1] (steps of 1/199), plus the measured 0.5, which they miss
    assert len(xs) == 201 and xs[0] == 0.0 and xs[-1] == 1.0 and 0.5 in xs
    assert mean[xs < 0.5].tolist() == pytest.approx([1.0] * int((xs < 0.5).sum()))
    assert mean[(xs >= 0.5) & (xs < 1.0)] == pytest.approx(0.7) and mean[-1] == pytest.approx(0.3)


def robustness(units: str = "pixel") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "dataset": ["digits", "digits", "digits", "mnist"],
            "attack_family": ["pgd linf", "pgd linf", "pgd linf", "pgd linf"],
            "eps0": [0.0, 0.0, np.nan, 0.5],
            "eps1": [0.2, 0.4, 0.9, 0.9],
            "auc_units": units,
        }
    )


PANEL = pd.DataFrame({"pixel_std": [0.3, 0.3, 0.3], "eps_standardised": [0.0, 0.5, 1.0], "eps_pixel": [0.0, 0.15, 0.3]})  # curves.csv carries the pixel std


def test_r_interval_is_the_median_interval_in_the_asked_units():
    # digits' rows with both ends: eps1 0.2 and 0.4, median 0.3; in standardised units / 0.3
    assert summaries.r_interval(robustness(), PANEL, "digits", "pgd linf", "pixel") == pytest.approx((0.0, 0.3))
    assert summaries.r_interval(robustness(), PANEL, "digits", "pgd linf", "standardised") == pytest.approx((0.0, 1.0))
    assert summaries.r_interval(robustness("standardised"), PANEL, "digits", "pgd linf", "pixel") == pytest.approx((0.0, 0.09))


def test_r_interval_is_none_without_an_interval_or_a_pixel_std():
    assert summaries.r_interval(robustness(), PANEL, "digits", "fgm linf", "pixel") is None
    no_std = PANEL.assign(pixel_std=np.nan)  # a standardised-unit table of a data set without one
    assert summaries.r_interval(robustness(), no_std, "digits", "pgd linf", "standardised") is None
    open_end = robustness().assign(eps1=np.inf)
    assert summaries.r_interval(open_end, PANEL, "digits", "pgd linf", "pixel") is None


def test_default_tau_reads_the_data_sets_row():
    table = pd.DataFrame({"source": ["digits", "cifar10"], "tau": [0.25, 0.2], "n_classes": [10.0, 10.0]})
    assert summaries.default_tau(table, "cifar10") == (0.2, 10)
    assert summaries.default_tau(table, "mnist") is None
    assert summaries.default_tau(table.drop(columns="source"), "digits") is None


def test_one_sample_has_an_interval_too():
    # 1 of 1: centre (1 + z^2/2) / (1 + z^2) = 0.6029, half z sqrt(z^2/4) / (1 + z^2) = 0.3971
    assert summaries.wilson_interval(1, 1) == pytest.approx((0.206549, 1.0), abs=1e-6)
    assert summaries.pooled_accuracy(pd.Series([1.0]), pd.Series([1])) == pytest.approx((1.0, 0.206549, 1.0), abs=1e-6)


def test_degenerate_models_gives_one_row_per_model_cell_whatever_its_attacks():
    experiments = pd.DataFrame({"model_hash": ["a", "a"], "attack": ["fgm", "pgd"], "degenerate": [True, True]})
    assert summaries.degenerate_models(experiments)["attack"].tolist() == ["fgm"]


def test_seed_mean_survival_reads_a_seed_before_its_first_step_at_its_first_value():
    # s1's curve starts at eps 0.5: at 0 it reads its first value (1.0), not its last (0.2)
    rows = pd.DataFrame({"model_hash": ["s0", "s0", "s1", "s1"], "eps": [0.0, 1.0, 0.5, 1.0], "survival": [1.0, 0.4, 1.0, 0.2]})
    xs, mean = summaries.seed_mean_survival(rows, grid=True)
    assert xs.tolist() == [0.0, 0.5, 1.0] and mean.tolist() == pytest.approx([1.0, 1.0, 0.3])
    xs, _ = summaries.seed_mean_survival(rows, grid=False)
    assert xs[1] == pytest.approx(1 / 199)  # 200 points from 0 to the largest eps


def test_r_interval_keeps_rows_with_other_columns_missing_and_reads_a_single_row():
    table = robustness().assign(note=[np.nan, "x", "x", "x"])  # a column R's interval does not read
    assert summaries.r_interval(table, PANEL, "digits", "pgd linf", "pixel") == pytest.approx((0.0, 0.3))
    assert summaries.r_interval(robustness(), PANEL, "mnist", "pgd linf", "pixel") == pytest.approx((0.5, 0.9))  # one row
