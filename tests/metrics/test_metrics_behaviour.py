"""Behaviours of the metric functions and the registry's readers that a mutation run (`make mutation`) showed untested:
each expected value is computed by hand in the comment beside it."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.conftest import DROP, config_refusal
from trashfire import metrics
from trashfire.core import schema
from trashfire.core.checks import run_registered
from trashfire.core.config import compose
from trashfire.core.errors import ConfigError
from trashfire.metrics import checks as metrics_checks
from trashfire.metrics import registry, validity

# 001's Table I: tau(K) = 1/K + w sqrt(K - 1) / K at w = 0.5
TABLE_I = [(2, 0.75), (5, 0.4), (10, 0.25), (100, 0.01 + 0.5 * math.sqrt(99) / 100), (1000, 0.001 + 0.5 * math.sqrt(999) / 1000)]


# accuracy


def test_accuracy_is_the_share_of_correct_predictions_not_of_errors():
    # 3 of 4 right: 0.75 (the error rate would be 0.25)
    assert metrics.accuracy([1, 2, 3, 4], [1, 2, 3, 0]) == 0.75
    assert metrics.accuracy([0, 1, 2], [0, 1, 2]) == 1.0
    assert metrics.accuracy([0, 1, 2], [1, 2, 0]) == 0.0


# the normalised robustness AUC


def test_robustness_auc_on_an_interval_that_does_not_start_at_zero():
    # f = [1, .8, .4, .2] at eps [0, 1, 2, 3]; on [1, 3]: grid [1, 2, 3], f [.8, .4, .2];
    # area (.8 + .4) / 2 + (.4 + .2) / 2 = .9; R = .9 / (f(1) (3 - 1)) = .9 / 1.6 = .5625
    eps, acc = [0, 1, 2, 3], [1.0, 0.8, 0.4, 0.2]
    assert metrics.robustness_auc(eps, acc, 1.0, 3.0) == pytest.approx(0.5625)
    # interpolated ends: [.5, 2.5]: grid [.5, 1, 2, 2.5], f [.9, .8, .4, .3];
    # area .5 (1.7) / 2 + (1.2) / 2 + .5 (.7) / 2 = .425 + .6 + .175 = 1.2; R = 1.2 / (.9 * 2) = 2/3
    assert metrics.robustness_auc(eps, acc, 0.5, 2.5) == pytest.approx(2 / 3)
    # a flat curve keeps all of its accuracy wherever the interval lies: R = 1
    assert metrics.robustness_auc(eps, [0.6] * 4, 1.0, 2.0) == pytest.approx(1.0)


def test_robustness_auc_of_a_curve_that_falls_to_zero_at_its_next_point():
    # f = [1, 0] on [0, 1]: area .5, R = .5 / (1 * 1); only f(eps0) must be > 0
    assert metrics.robustness_auc([0, 1], [1.0, 0.0], 0.0, 1.0) == pytest.approx(0.5)


def test_robustness_auc_refuses_an_interval_outside_the_measured_range():
    eps, acc = [0.0, 1.0, 2.0, 3.0], [1.0, 0.8, 0.4, 0.2]
    with pytest.raises(ValueError, match=r"\[1.0, 4.0\] lies outside the measured eps range \[0.0, 3.0\]"):
        metrics.robustness_auc(eps, acc, 1.0, 4.0)  # eps1 beyond the last point
    with pytest.raises(ValueError, match=r"outside the measured eps range \[1.0, 3.0\]"):
        metrics.robustness_auc(eps[1:], acc[1:], 0.5, 2.0)  # eps0 before the first point


def test_robustness_auc_names_the_zero_start_value():
    with pytest.raises(ValueError, match=r"f\(0.0\) = 0.0"):
        metrics.robustness_auc([0.0, 1.0], [0.0, 1.0], 0.0, 1.0)


# the curve checks shared by EVP and the AUC


@pytest.mark.parametrize(
    "eps, acc",
    [
        ([0, 1, 2], [1.0, 0.5]),  # lengths differ
        ([[0, 1], [2, 3]], [[1.0, 0.5], [0.4, 0.3]]),  # two-dimensional, though matching
        ([0], [1.0]),  # one point
    ],
)
def test_a_curve_needs_matching_one_dimensional_arrays_of_two_points(eps, acc):
    with pytest.raises(ValueError, match="^a curve needs matching 1-d eps and performance arrays of at least two points$"):
        metrics.evp(eps, acc, tau=0.1)


def test_a_curve_with_a_repeated_eps_is_refused():
    with pytest.raises(ValueError, match="^eps must be strictly increasing$"):
        metrics.evp([0, 1, 1, 2], [1.0, 0.8, 0.7, 0.5], tau=0.1)


# EVP


def test_evp_counts_a_performance_exactly_at_tau_as_viable():
    # g = P where P >= tau: [1, .5] on x [0, 1] with tau = .5: (1 + .5) / 2 = .75
    assert metrics.evp([0, 1], [1.0, 0.5], tau=0.5) == pytest.approx(0.75)


def test_evp_names_the_first_eps_when_the_grid_does_not_start_at_zero():
    with pytest.raises(ValueError, match="got 0.1"):
        metrics.evp([0.1, 0.2], [0.5, 0.4], tau=0.1)


# the viability and degeneracy thresholds


def test_viability_table_defaults_to_001s_table_i():
    table = metrics.viability_table([k for k, _ in TABLE_I])
    assert [k for k, _ in table] == [k for k, _ in TABLE_I]
    assert [tau for _, tau in table] == pytest.approx([tau for _, tau in TABLE_I])
    # another effect size: w = 1 for K = 10: .1 + 3 / 10
    assert metrics.viability_table([10], w=1.0) == [(10, pytest.approx(0.4))]


def test_degeneracy_threshold_defaults_to_tau_of_k_at_w_one_half():
    for k, tau in TABLE_I:
        assert metrics.degeneracy_threshold(k, None) == pytest.approx(tau)
    assert metrics.degeneracy_threshold(10, None, w=1.0) == pytest.approx(0.4)


def test_degeneracy_threshold_a_fixed_tau_then_a_margin_over_chance():
    assert metrics.degeneracy_threshold(10, None, tau=0.3) == 0.3  # a fixed tau replaces tau(K)
    assert metrics.degeneracy_threshold(10, 0.05) == pytest.approx(0.15)  # chance .1 + margin
    assert metrics.degeneracy_threshold(4, 0.05, tau=0.9) == pytest.approx(0.3)  # a margin wins over tau


def test_viability_threshold_names_the_key_it_refuses():
    with pytest.raises(ConfigError) as refused:
        metrics.viability_threshold(1)
    assert refused.value.key == "n_classes"


# the interval of a mean over seeds


def test_the_mean_interval_is_students_t_at_95_percent_by_default():
    values = np.arange(10.0)
    mean, lo, hi = metrics.mean_interval(values)
    half = stats.t.ppf(0.975, 9) * values.std(ddof=1) / math.sqrt(10)
    assert (mean, lo, hi) == pytest.approx((4.5, 4.5 - half, 4.5 + half))
    _, lo50, hi50 = metrics.mean_interval(values, level=0.5)
    assert hi50 - lo50 == pytest.approx(2 * stats.t.ppf(0.75, 9) * values.std(ddof=1) / math.sqrt(10))


def test_the_mean_interval_leaves_nans_out_and_gives_none_from_one_value():
    mean, lo, hi = metrics.mean_interval([1.0, math.nan, 3.0])
    assert mean == 2.0 and (lo, hi) == pytest.approx((2.0 - stats.t.ppf(0.975, 1), 2.0 + stats.t.ppf(0.975, 1)))
    one = metrics.mean_interval([5.0])
    assert one[0] == 5.0 and math.isnan(one[1]) and math.isnan(one[2])
    same = metrics.mean_interval([0.3, 0.3, 0.3])  # no spread: no interval, not one of zero width
    assert same[0] == pytest.approx(0.3) and math.isnan(same[1]) and math.isnan(same[2])


def test_the_log_mean_interval_is_the_geometric_mean_with_the_logs_t_interval():
    mean, lo, hi = metrics.mean_interval([1.0, 2.0, 8.0], log=True)
    interval = stats.ttest_1samp(np.log([1.0, 2.0, 8.0]), 0.0).confidence_interval()
    assert (mean, lo, hi) == pytest.approx((2.0 * 16 ** (1 / 3) / 2, math.exp(interval.low), math.exp(interval.high)))


# what the registry's headline entries read
# aft_comparison.csv: the selected model, two baselines and an unselected AFT model
COMPARISON = pd.DataFrame(
    {
        "fitter": ["weibull", "lognormal", "runtime_baseline", "failure_share_baseline"],
        "selected": [True, "False", False, False],
        "test_concordance": [0.8, 0.7, 0.6, 0.55],
        "test_ICI": [0.05, 0.06, np.nan, np.nan],
        "beats_baselines": ["True", "False", "", ""],
        "test_concordance_within": [0.66, 0.6, 0.5, 0.5],
        "test_concordance_within[fgm linf]": [0.7, 0.1, 0.5, 0.5],
        "test_concordance_within[pgd l2]": [0.62, 0.1, 0.5, 0.5],
        "km_median_abs_log_ratio": [0.1, 0.2, np.nan, np.nan],
        "km_share_flagged": [0.25, 0.5, np.nan, np.nan],
        "km_worst_cells": ["fgm linf, none, digits = 2.5; pgd l2, conf, digits = 0.5", "", "", ""],
        "split_by": ["train_hash"] * 4,
    }
)


def test_the_survival_headline_reads_the_selected_model_and_the_baselines():
    headline = registry.survival_headline(COMPARISON)
    assert all(name.startswith("survival_") for name in headline) and len(headline) == 13
    assert headline["survival_model"] == "weibull" and headline["survival_missing_reason"] is None
    assert (headline["survival_test_concordance"], headline["survival_test_ici"]) == (0.8, 0.05)
    assert headline["survival_beats_baselines"] is True
    assert headline["survival_runtime_baseline_test_concordance"] == 0.6
    assert headline["survival_failure_share_baseline_test_concordance"] == 0.55
    assert headline["survival_test_concordance_within"] == 0.66
    assert headline["survival_test_concordance_within_by_family"] == {"fgm linf": 0.7, "pgd l2": 0.62}
    assert (headline["survival_km_median_abs_log_ratio"], headline["survival_km_share_flagged"]) == (0.1, 0.25)
    assert headline["survival_km_worst_cells"] == {"fgm linf, none, digits": 2.5, "pgd l2, conf, digits": 0.5}
    assert headline["survival_split_by"] == "train_hash"


def test_without_a_selected_model_the_survival_headline_is_empty_not_an_error():
    """No model gives E[T] (survival/status.json says why): every survival headline is null or
    empty, and the scores NaN, so that the rest of metrics.json is written."""
    headline = registry.survival_headline(COMPARISON.assign(selected=False))
    assert headline["survival_model"] is None and headline["survival_beats_baselines"] is False
    assert math.isnan(headline["survival_test_concordance"]) and math.isnan(headline["survival_km_share_flagged"])
    assert headline["survival_test_concordance_within_by_family"] == {} and headline["survival_km_worst_cells"] == {}
    assert headline["survival_runtime_baseline_test_concordance"] == 0.6  # the baselines do not depend on a model
    nothing_fitted = pd.DataFrame(columns=["fitter", "model", "aft", "status", "note", "split_by", "selected"])
    assert math.isnan(registry.survival_headline(nothing_fitted)["survival_runtime_baseline_test_concordance"])


def test_a_table_i_from_before_a_score_reads_nan_and_a_missing_baseline_too():
    old = COMPARISON.drop(columns=["km_share_flagged"]).iloc[:2]
    assert math.isnan(registry.selected_score(old, "km_share_flagged"))
    assert math.isnan(registry.baseline_concordance(old, "runtime_baseline"))


def test_degenerate_cells_per_model_hash():
    experiments = pd.DataFrame({"model_hash": ["a", "a", "b"], "degenerate": [1, 1, 0]})
    flags = registry.degenerate_cells(experiments)
    assert flags.to_dict() == {"a": True, "b": False} and flags.dtype == bool
    unflagged = registry.degenerate_cells(pd.DataFrame({"model_hash": ["a", "a", "b"]}))  # timing flagged none
    assert unflagged.to_dict() == {"a": False, "b": False} and unflagged.dtype == bool


def test_decomposition_by_depth_averages_the_sound_undefended_cells():
    trash = pd.DataFrame(
        {
            "dataset": ["digits"] * 5,
            "attack_family": ["fgm linf"] * 5,
            "depth": [8.0, 8.0, 14.0, 14.0, 8.0],
            "defence": ["none", "none", "none", "conf", "none"],
            "degenerate": [False, False, False, False, True],
            "E_Q": [2.0, 4.0, 5.0, 100.0, 100.0],
            "E_G": [1.0, 1.0, 2.0, 100.0, 100.0],
            "flops_per_query": [10.0, 10.0, 20.0, 0.0, 0.0],
        }
    )
    assert registry.decomposition_by_depth(trash) == {
        "digits": {
            "fgm linf": {
                "8": {"E_Q": 3.0, "E_G": 1.0, "flops_per_query": 10.0},
                "14": {"E_Q": 5.0, "E_G": 2.0, "flops_per_query": 20.0},
            }
        }
    }
    for column in ("defence", "dataset", "attack_family", "depth"):
        assert registry.decomposition_by_depth(trash.drop(columns=[column])) == {}, column
    assert registry.decomposition_by_depth(None) == {}


def test_eps_survival_means_per_data_set_and_family():
    eps = pd.DataFrame(
        {
            "dataset": ["digits", "digits", "digits", "mnist"],
            "attack_family": ["fgm linf"] * 3 + ["pgd l2"],
            "area": [0.2, 0.4, 0.9, 0.5],
            "degenerate": [False, False, True, False],
        }
    )
    assert registry.eps_survival_means(eps) == {"digits": {"fgm linf": pytest.approx(0.3)}, "mnist": {"pgd l2": 0.5}}


def test_trash_by_clock_is_the_median_over_sound_cells_on_each_clock():
    trash = pd.DataFrame({"trash_adv_wall": [1.0, 3.0, 10.0, 100.0], "trash_adv_flops": [2.0] * 4, "degenerate": [False, False, False, True]})
    assert registry.trash_by_clock(trash) == {"flops": 2.0, "wall": 3.0}
    assert registry.trash_by_clock(None) == {}


def test_spearman_by_dataset_leaves_rows_without_both_scores_out():
    brittle = pd.DataFrame(
        {
            "dataset": ["digits"] * 5,
            "brittle_score": [0.1, 0.2, 0.3, 0.4, np.nan],
            "robust_acc": [0.9, 0.7, 0.8, 0.1, 0.5],
            "other": [np.nan] * 5,  # a column with no value never drops a row
            "degenerate": False,
        }
    )
    assert registry.spearman_by_dataset(brittle) == {"digits": {"rho": pytest.approx(-0.8), "p": pytest.approx(0.2), "n": 4}}


# the validity flags' probes, read from a benign record


def probe(**values) -> pd.Series:
    return pd.Series({"grad_zero_share": 0.0, "grad_nonfinite_share": 0.0, "query_repeats": 5} | values)


def test_gradients_are_masked_when_zero_and_non_finite_shares_together_pass_the_share():
    assert validity.gradients_masked(probe(grad_zero_share=0.3, grad_nonfinite_share=0.3), share=0.5) == (
        True,
        "30% of samples with zero and 30% with non-finite input gradients",
    )
    assert validity.gradients_masked(probe(grad_zero_share=0.25, grad_nonfinite_share=0.25), share=0.5)[0] is False  # at the share
    assert validity.gradients_masked(probe(grad_zero_share=0.6), share=0.5)[0] is True
    assert validity.gradients_masked(probe(grad_nonfinite_share=0.6), share=0.5)[0] is True
    for missing in ("grad_zero_share", "grad_nonfinite_share"):
        tripped, seen = validity.gradients_masked(probe().drop(missing), share=0.5)
        assert tripped is None and seen == "not checked: the benign record has no gradient probe (rerun the attack stage)", missing


def test_randomised_when_the_scores_change_beyond_float_noise():
    changed = probe(query_output_change=0.2, query_flip_share=0.1, acc_query_sd=0.012, acc_query_range=0.03)
    assert validity.randomised(changed) == (
        True,
        "scores change by up to 0.2 over 5 queries; 10% of samples change label, accuracy SD 0.012, range 0.03: one attack run is one draw, evaluate with EOT",
    )
    assert validity.randomised(probe(query_output_change=1e-5)) == (False, "the same scores over 5 queries")  # at the default tolerance
    assert validity.randomised(probe(query_output_change=2e-5))[0] is True
    assert validity.randomised(probe(query_output_change=0.2), output_tol=0.5)[0] is False
    tripped, seen = validity.randomised(probe())
    assert tripped is None and seen == "not checked: the benign record has no repeated-query probe (rerun the attack stage)"


def test_a_probe_value_that_is_no_number_reads_as_not_checked():
    assert validity.gradients_masked(probe(grad_zero_share="n/a"), share=0.5)[0] is None
    assert validity.gradients_masked(probe(grad_zero_share=None), share=0.5)[0] is None


def curve(family: str, attack: str, eps: list[float], acc: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"attack_family": family, "attack": attack, "eps": eps, "acc": acc})


def test_non_monotone_reports_the_largest_rise_over_the_families():
    curves = pd.concat([curve("b fam", "fgm", [0, 1, 2, 3], [0.9, 0.3, 0.5, 0.4]), curve("a fam", "pgd", [0, 1, 2], [0.9, 0.2, 0.3])])
    # rises over the running minimum: b .2 (0.3 at eps 1 -> 0.5 at eps 2), a .1
    assert validity.non_monotone(curves, rise_tol=0.05) == (True, "b fam: 0.30 at eps 1 -> 0.50 at eps 2")
    assert validity.non_monotone(curves, rise_tol=0.2) == (False, "no rise above 0.2 over 2 curve(s)")  # at the tolerance
    # equal rises: the first family in name order is reported
    tied = pd.concat([curve("b fam", "fgm", [0, 1, 2], [0.9, 0.2, 0.3]), curve("a fam", "pgd", [0, 1, 2], [0.9, 0.4, 0.5])])
    assert validity.non_monotone(tied, rise_tol=0.05) == (True, "a fam: 0.40 at eps 1 -> 0.50 at eps 2")
    assert validity.non_monotone(curves.iloc[:0], rise_tol=0.05) == (None, "not checked: no eps attack family")


def test_largest_eps_not_breaking_reads_white_box_attacks_above_zero_eps():
    curves = pd.concat(
        [
            curve("fgm linf", "fgm", [0, 1, 2], [0.9, 0.5, 0.3]),
            curve("pgd linf", "pgd", [0, 1, 2], [0.9, 0.2, 0.1]),
            curve("square linf", "square", [0, 1, 2], [0.9, 0.0, 0.0]),  # black-box: not read
        ]
    )
    assert validity.largest_eps_not_breaking(curves, ["square"], near_zero=0.05) == (
        True,
        "accuracy at the largest eps: pgd linf 0.10 at eps 2; fgm linf 0.30 at eps 2",
    )
    assert validity.largest_eps_not_breaking(curves, ["square"], near_zero=0.1)[0] is False  # at near_zero
    benign_only = curve("fgm linf", "fgm", [0], [0.9])
    assert validity.largest_eps_not_breaking(benign_only, [], near_zero=0.05) == (None, "not checked: no white-box eps attack family")


def test_the_summary_leaves_degenerate_cells_out():
    # the degenerate cell is checked and clean: counting it instead of the others gives 0 of 1
    table = pd.DataFrame({"degenerate": [False, "True", "false"]} | {name: [True, False, None] for name in schema.VALIDITY_FLAGS})
    assert validity.validity_summary(table) == {name: {"tripped": 1, "checked": 1} for name in schema.VALIDITY_FLAGS}


def validity_cells(model_hash: str, acc_by_attack: dict[str, list[float]], eps=(0.1, 0.2, 0.3), **probes) -> pd.DataFrame:
    """Attack cells of one undefended linf model cell as experiments.csv has them (test_validity's, without torch)."""
    from trashfire.metrics.aggregate import with_family

    rows = [{"attack": a, "attack_value": e, "attack_value_standardised": e, "acc_adv": acc} for a, accs in acc_by_attack.items() for e, acc in zip(eps, accs)]
    labels = {"train_hash": f"t{model_hash}", "dataset": "digits", "pretrained_on": "", "seed": 0, "model": "mlp", "depth": 2, "epochs": 1, "lr": 0.01}
    labels |= {"defence": "none", "defence_param": "", "defence_value": 0, "norm": "inf", "attack_param": "eps", "attack_units": "standardised"}
    probe = {"grad_zero_share": 0.0, "grad_nonfinite_share": 0.0, "query_repeats": 5, "query_output_change": 0.0, "query_flip_share": 0.0}
    probe |= {"acc_query_sd": 0.0, "acc_query_range": 0.0} | probes
    kinds = {"black_box": False, "minimal": False}  # white-box eps attacks, as timing reads them from the attack's option
    table = pd.DataFrame(rows).assign(
        model_hash=model_hash, pixel_std=1.0, n_classes=10, acc_ben_attack_subset=0.9, degenerate=False, **labels, **probe, **kinds
    )
    return with_family(table)


def test_the_validity_table_names_each_cells_tripped_flags_in_the_experiments_order():

    from trashfire.metrics.aggregate import eps_curves

    settings = validity.tolerances(compose([]))
    tripped = validity_cells("b", {"fgm": [0.5, 0.2, 0.25]}, grad_zero_share=0.9, query_output_change=0.5)
    clean = validity_cells("a", {"pgd": [0.0]}, eps=(0.1,))  # one attack cell
    experiments = pd.concat([tripped, clean])
    table = validity.validity_table(experiments, eps_curves(experiments), settings)
    assert table["model_hash"].tolist() == ["b", "a"] and table["train_hash"].tolist() == ["tb", "ta"]
    assert table["flags"].tolist() == ["non_monotone, gradients_masked, randomised, largest_eps_not_breaking", ""]
    assert table["randomised"].tolist() == [True, False] and list(table.columns) == schema.VALIDITY


# Spearman's rho (core.stats, used by the findings, the brittle-score and survival in eps)


def test_spearman_is_nan_when_either_column_is_constant_and_scipys_otherwise():
    from scipy import stats as scipy_stats

    from trashfire.core.stats import spearman

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy would warn on a constant column; ours says NaN quietly
        assert all(math.isnan(v) for v in spearman([1, 2, 3, 4], [5, 5, 5, 5]))
        assert all(math.isnan(v) for v in spearman([5, 5, 5, 5], [1, 2, 3, 4]))
    # a column whose range is exactly 1 is no constant column: rho of x = (0, 0.5, 1, 0.2) against y
    x, y = [0.0, 0.5, 1.0, 0.2], [1.0, 3.0, 4.0, 2.0]
    assert spearman(x, y) == pytest.approx(tuple(scipy_stats.spearmanr(x, y)))  # rho = 1: same order
    assert spearman(y, x)[0] == pytest.approx(1.0)


def test_spearman_reads_a_missing_value_as_nan_not_as_an_error():
    from trashfire.core.stats import spearman

    # a record's unknown value reaches the table as None: rho is then NaN, as scipy's propagation gives
    assert all(math.isnan(v) for v in spearman([1, None, 3, 4], [1.0, 2.0, 3.0, 4.0]))
    assert all(math.isnan(v) for v in spearman([1.0, 2.0, 3.0, 4.0], [1, 2, None, 4]))


# the metrics section's config checks (trashfire.metrics.checks, which `validate` runs): a bad
# value is refused with one line naming its key and what is allowed; a value on an allowed
# bound passes

MAKE_PARAMS = "missing; compose params.yaml with `make params`"
REMOVED = "removed: an attack's option says it ({}); compose params.yaml again with `make params`"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"viability.w": 0}, "viability.w: got 0; must be a finite number > 0"),
        ({"viability.tau": 0}, "viability.tau: got 0; must be a finite number in (0, 1]"),
        ({"viability.tau": 1.5}, "viability.tau: got 1.5; must be a finite number in (0, 1]"),
        ({"metrics.evp.tau_grid": 1}, "metrics.evp.tau_grid: got 1; must be an integer >= 2"),
        ({"metrics.evp.table_classes": []}, "metrics.evp.table_classes: must be a non-empty list (an empty grid runs nothing)"),
        ({"metrics.evp.table_classes": [2, 1]}, "metrics.evp.table_classes: got 1; must be an integer >= 2"),  # each K is checked
        ({"metrics.auc.units": "percent"}, "metrics.auc.units: got 'percent'; allowed: standardised, pixel"),
        ({"metrics.auc.eps0": -0.1}, "metrics.auc.eps0: got -0.1; must be a finite number >= 0"),
        ({"metrics.auc.eps0": 0.1, "metrics.auc.eps1": 0.1}, "metrics.auc.eps1: got 0.1; must be a finite number > 0.1"),  # an empty interval
        ({"metrics.trash.eps_max": 0}, "metrics.trash.eps_max: got 0; must be a finite number > 0"),
        ({"timing.degenerate": DROP}, f"timing.degenerate: {MAKE_PARAMS}"),
        ({"timing.degenerate.margin": 1.5}, "timing.degenerate.margin: got 1.5; must be a finite number in [0, 1]"),
        ({"metrics.findings": DROP}, f"metrics.findings: {MAKE_PARAMS}"),
        ({"metrics.findings.alpha": 0}, "metrics.findings.alpha: got 0; must be a finite number in (0, 1)"),
        ({"metrics.findings.alpha": 1}, "metrics.findings.alpha: got 1; must be a finite number in (0, 1)"),
        ({"metrics.findings.seed": -1}, "metrics.findings.seed: got -1; must be an integer >= 0"),
        (
            {"metrics.findings.smallest": DROP},
            "metrics.findings.smallest: missing; give each of " + ", ".join(metrics_checks.SMALLEST_EFFECTS) + " a positive number",
        ),
        ({"metrics.findings.smallest.004_r_rises_with_epochs": 0}, "metrics.findings.smallest.004_r_rises_with_epochs: got 0; must be a finite number > 0"),
        (
            {"metrics.findings.smallest.004_r_rises_with_epochs": DROP},
            "metrics.findings.smallest.004_r_rises_with_epochs: got None; must be a finite number > 0",
        ),
        (
            {"metrics.findings.margin.003_depth_speed": 0.1},
            "metrics.findings.margin.003_depth_speed: is no claim's; allowed: 003_depth_queries, 004_pretraining_effect",
        ),
        (
            {"metrics.findings.bootstrap": 2000},
            "metrics.findings.bootstrap: was removed: intervals over seeds are Student's t intervals over independent units (issue 59); drop the key",
        ),
        (
            {"metrics.trash.bootstrap": 2000},
            "metrics.trash.bootstrap: was removed: intervals over seeds are Student's t intervals over independent units (issue 59); drop the key",
        ),
        ({"timing.eps_survival": DROP}, f"timing.eps_survival: {MAKE_PARAMS}"),
        ({"timing.eps_survival.minimal": ["deepfool"]}, "timing.eps_survival.minimal: " + REMOVED.format("minimal: true in the attack's option")),
        ({"timing.eps_survival.minimal_units": "percent"}, "timing.eps_survival.minimal_units: got 'percent'; allowed: standardised, pixel"),
        ({"timing.eps_survival.minimal_eps_max": 0}, "timing.eps_survival.minimal_eps_max: got 0; must be a finite number > 0"),
        ({"metrics.validity": DROP}, f"metrics.validity: {MAKE_PARAMS}"),
        ({"metrics.validity.rise_tol": 1.5}, "metrics.validity.rise_tol: got 1.5; must be a finite number in [0, 1]"),
        ({"metrics.validity.black_box_tol": -0.1}, "metrics.validity.black_box_tol: got -0.1; must be a finite number in [0, 1]"),
        ({"metrics.validity.gradient_share": 2}, "metrics.validity.gradient_share: got 2; must be a finite number in [0, 1]"),
        ({"metrics.validity.near_zero": None}, "metrics.validity.near_zero: got None; must be a finite number in [0, 1]"),
        ({"metrics.validity.bracket_tol": DROP}, "metrics.validity.bracket_tol: got None; must be a finite number in [0, 1]"),
        ({"metrics.validity.square_tol": 1.5}, "metrics.validity.square_tol: got 1.5; must be a finite number in [0, 1]"),
        (
            {"metrics.validity.black_box": ["square"]},
            "metrics.validity.black_box: " + REMOVED.format("black_box: true/false in the attack's option, else ART's declaration of its class"),
        ),
        # R integrates up to eps1: fgm's pixel grid ends at 0.3
        ({"metrics.auc.eps1": 0.5}, "metrics.auc.eps1: 0.5 exceeds the largest eps 0.3 of attack.fgm (pixel units); lower it or extend the grid"),
        # every eps grid in the auc's units is checked, not only the first attack's
        (
            {"metrics.auc.eps1": 0.5, "attack.fgm.units": "standardised"},
            "metrics.auc.eps1: 0.5 exceeds the largest eps 0.3 of attack.pgd (pixel units); lower it or extend the grid",
        ),
        # an attack that states no units is in standardised units
        (
            {"metrics.auc.units": "standardised", "metrics.auc.eps1": 5.0, "attack.fgm.units": DROP},
            "metrics.auc.eps1: 5.0 exceeds the largest eps 0.3 of attack.fgm (standardised units); lower it or extend the grid",
        ),
    ],
)
def test_a_bad_metrics_setting_is_refused_in_one_line_naming_its_key(changes, line):
    assert config_refusal(run_registered, changes) == f"config error: {line}"


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the defaults: tau, margin, eps_max and minimal_eps_max unset, eps1 0.3 the end of fgm's and pgd's pixel grids
        # each value on its closed bound
        {"viability.tau": 1, "metrics.evp.tau_grid": 2, "metrics.evp.table_classes": [2], "metrics.auc.eps0": 0, "timing.degenerate.margin": 0}
        | {"metrics.findings.seed": 0}
        | {f"metrics.validity.{key}": 0 for key in ("rise_tol", "black_box_tol", "gradient_share", "near_zero")},
        {"timing.degenerate.margin": 1, "metrics.trash.eps_max": 0.01, "timing.eps_survival.minimal_eps_max": 0.01}
        | {f"metrics.validity.{key}": 1 for key in ("rise_tol", "black_box_tol", "gradient_share", "near_zero")},
        {"metrics.auc.eps1": None},  # R over the whole measured range
        # the standardised eps grids are checked per data set later; deepfool's standardised grid is no eps grid
        {"metrics.auc.units": "standardised", "metrics.auc.eps1": 5.0},
    ],
)
def test_metrics_settings_on_their_allowed_bounds_pass(changes):
    assert config_refusal(run_registered, changes) is None


def budget_rows(*rows: tuple[str, float, float], **columns) -> pd.DataFrame:
    """Attack cells of one model cell: (attack, standardised eps, acc_adv), linf, 100 samples."""
    table = pd.DataFrame(rows, columns=["attack", "attack_value_standardised", "acc_adv"])
    return table.assign(attack_param="eps", norm="linf", n_attack=100, **columns)


def test_black_box_stronger_reads_the_widest_gap_and_trips_only_beyond_the_tolerance():
    # two shared budgets: at 0.1 square beats pgd by 0.25, at 0.2 it trails by 0.125
    rows = budget_rows(("pgd", 0.1, 0.5), ("square", 0.1, 0.25), ("pgd", 0.2, 0.25), ("square", 0.2, 0.375))
    tripped, seen = validity.black_box_stronger(rows, ["square"], tol=0.125)
    assert tripped is True and seen == "at norm linf, eps 0.1 (standardised), 100 samples: black-box 0.25, white-box 0.50"
    # a gap of exactly the tolerance (0.5 - 0.25, exact in binary) is within it
    assert validity.black_box_stronger(rows, ["square"], tol=0.25)[0] is False


def test_black_box_stronger_takes_budgets_equal_to_float_noise_as_one_budget():
    # pixel eps converted to standardised units differ in the 10th decimal between attacks
    rows = budget_rows(("pgd", 0.1 + 3e-10, 0.5), ("square", 0.1, 0.25))
    assert validity.black_box_stronger(rows, ["square"], tol=0.05)[0] is True


def test_black_box_stronger_says_what_to_add_when_no_budget_is_shared():
    rows = budget_rows(("pgd", 0.1, 0.5), ("square", 0.3, 0.25))
    assert validity.black_box_stronger(rows, ["square"], tol=0.05) == (
        None,
        "not checked: no black-box attack shares a norm, eps and sample count with a white-box one (add square at a white-box grid and samples)",
    )


def test_an_experiments_table_without_black_box_leaves_every_attacks_kind_unknown():
    experiments = pd.DataFrame({"attack": ["pgd", "square", "pgd"]})  # from before the attack properties
    assert validity.attack_kinds(experiments) == ([], ["pgd", "square"])
    stated = experiments.assign(black_box=[False, True, False])
    assert validity.attack_kinds(stated) == (["square"], [])


def test_the_unchecked_detail_names_every_attack_of_unknown_kind():
    from trashfire.metrics.aggregate import with_family

    cells = pd.concat([validity_cells("m1", {"pgd": [0.5, 0.3, 0.1]}), validity_cells("m1", {"square": [0.5, 0.3, 0.1]})])
    cells = cells.drop(columns="black_box", errors="ignore")
    curves = with_family(cells).assign(eps=lambda t: t["attack_value"], acc=lambda t: t["acc_adv"])
    settings = {
        "rise_tol": 0.05,
        "black_box_tol": 0.05,
        "gradient_share": 0.5,
        "near_zero": 0.05,
        "square_tol": 0.002,
        "budget_share": 0.02,
        "bracket_tol": 0.1,
    }
    row = validity.validity_table(cells, curves, settings).iloc[0]
    assert row["black_box_stronger"] is None
    assert row["black_box_stronger_detail"] == "not checked: the experiments table does not say whether pgd, square is black-box (rerun the attack stage)"


def test_no_model_cell_gives_an_empty_validity_table_with_its_columns():
    experiments = pd.DataFrame(columns=["model_hash", "attack", "black_box"])
    table = validity.validity_table(experiments, pd.DataFrame(columns=["model_hash"]), {})
    assert table.empty and list(table.columns) == schema.VALIDITY


def test_largest_eps_not_breaking_lists_tied_families_in_the_curves_order():
    # 20 white-box families, tied in pairs of accuracy at their largest eps: the detail lists them
    # by accuracy, ties in the order the curves came in (stable sorts; numpy's quicksort is not
    # stable beyond 16 rows), so two runs of one table word it alike
    families = [f"f{i:02d}" for i in range(20)]
    curves = pd.concat([curve(name, "fgm", [0, 1, 2], [0.9, 0.5, 0.1 if i % 2 else 0.2]) for i, name in enumerate(families)])
    order = families[1::2] + families[0::2]
    seen = "; ".join(f"{name} {0.1 if name in families[1::2] else 0.2:.2f} at eps 2" for name in order)
    assert validity.largest_eps_not_breaking(curves, [], near_zero=0.05) == (True, f"accuracy at the largest eps: {seen}")


def test_black_box_stronger_on_a_table_without_sample_counts_compares_every_cell():
    # a table from before n_attack was recorded: one sample count (0, unknown) for all cells
    rows = budget_rows(("pgd", 0.1, 0.5), ("square", 0.1, 0.25)).drop(columns="n_attack")
    assert validity.black_box_stronger(rows, ["square"], tol=0.05) == (True, "at norm linf, eps 0.1 (standardised), 0 samples: black-box 0.25, white-box 0.50")


def test_decomposition_by_depth_names_the_depths_of_a_table_with_only_its_keys():
    # no E_Q, FLOPs or latency column (an attack family whose costs were not recorded): the
    # depths are still listed, with nothing measured under them
    keys_only = pd.DataFrame({"defence": ["none"], "dataset": ["digits"], "attack_family": ["pgd linf"], "depth": [8]})
    assert registry.decomposition_by_depth(keys_only) == {"digits": {"pgd linf": {"8": {}}}}
