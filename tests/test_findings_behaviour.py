"""The findings' building blocks on hand-computed values: verdicts at the edges of their
intervals, the paired finding, the slope and the discordance counts (the mutation run,
`make mutation`, found these edges untested)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from trashfire.metrics import findings as F


@pytest.mark.parametrize(
    "lo, hi, sign, verdict",
    [
        (0.1, 0.3, +1, F.HOLDS),
        (-0.3, -0.1, +1, F.CONTRADICTED),
        (-0.5, 0.5, +1, F.INCONCLUSIVE),  # straddles 0
        (0.0, 1.0, +1, F.INCONCLUSIVE),  # touches 0: 0 is not excluded
        (-1.0, 0.0, +1, F.INCONCLUSIVE),
        (-0.3, -0.1, -1, F.HOLDS),  # a claimed fall
        (0.1, 0.3, -1, F.CONTRADICTED),
        (-0.5, 0.5, -1, F.INCONCLUSIVE),
        (-1.0, 0.0, -1, F.INCONCLUSIVE),
        (0.0, 1.0, -1, F.INCONCLUSIVE),
    ],
)
def test_an_interval_verdict_needs_the_whole_interval_on_one_side_of_zero(lo, hi, sign, verdict):
    assert F.interval_verdict(lo, hi, sign) == verdict


@pytest.mark.parametrize(
    "rho, p, verdict",
    [
        (0.5, 0.01, F.HOLDS),
        (-0.5, 0.01, F.CONTRADICTED),
        (0.5, 0.05, F.INCONCLUSIVE),  # p must be below alpha, not at it
        (0.0, 0.01, F.INCONCLUSIVE),  # no direction
        (math.nan, 0.01, F.INCONCLUSIVE),
    ],
)
def test_a_spearman_verdict_needs_a_significant_finite_rho(rho, p, verdict):
    assert F.spearman_verdict(rho, p, +1, alpha=0.05) == verdict


def test_a_paired_finding_of_two_pairs_by_hand():
    # d = [1, 3]: mean 2; resampled means 1, 2, 3 (chances 1/4, 1/2, 1/4): 95% interval [1, 3]
    found = F.paired_finding("001_adv_train_raises_evp", "paired bootstrap", pd.DataFrame({"d": [1.0, 3.0]}), +1, 2000, 0, "cells")
    assert (found.id, found.paper, found.claim) == ("001_adv_train_raises_evp", "001", "Adversarial training raises EVP.")
    assert (found.test, found.n, found.value, found.lo, found.hi) == ("paired bootstrap", 2, 2.0, 1.0, 3.0)
    assert math.isnan(found.p) and found.verdict == F.HOLDS
    assert found.detail == "mean difference +2 over 2 pairs of cells, 95% CI [+1, +3]"


def test_a_paired_finding_is_reproducible_and_appends_its_extra():
    pairs = pd.DataFrame({"d": [0.31, -1.72, 2.23, 4.15, -0.4]})
    first = F.paired_finding("001_adv_train_raises_evp", "t", pairs, +1, 500, 7, "cells", "; note")
    assert first == F.paired_finding("001_adv_train_raises_evp", "t", pairs, +1, 500, 7, "cells", "; note")
    assert first.detail.endswith("]; note") and first.verdict == F.INCONCLUSIVE


def test_a_paired_finding_of_one_pair_is_not_testable():
    found = F.paired_finding("001_adv_train_raises_evp", "paired bootstrap", pd.DataFrame({"d": [1.0]}), +1, 2000, 0, "cells")
    assert (found.verdict, found.test, found.n) == (F.NOT_TESTABLE, "paired bootstrap", 0)
    assert found.detail == "needs >= 2 pairs of cells; found 1"
    assert (found.paper, found.claim) == ("001", "Adversarial training raises EVP.")


def test_slope_is_least_squares_along_the_last_axis():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 4.0]])
    y = np.array([[2.0, 4.0, 6.0], [1.0, 0.0, 2.0]])
    # row 2: x mean 5/3, xc [-5/3, -2/3, 7/3], var 26/3; cov sum(xc y) = -5/3 + 14/3 = 3: slope 9/26
    np.testing.assert_allclose(F.slope(x, y), [2.0, 9 / 26])


def test_slope_of_a_constant_x_is_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(F.slope(np.array([1.0, 1.0, 1.0]), np.array([0.0, 1.0, 2.0])))


def test_slope_judges_constancy_on_each_rows_scale():
    # log times near -9.2 (0.1 ms) that differ by 5e-6: constant at their scale (var 1.25e-11
    # under 1e-12 x sum x^2 = 1.7e-10): NaN, not a slope of rounding noise
    near = np.array([-9.2, -9.2 + 5e-6])
    assert np.isnan(F.slope(near, np.array([0.0, 1.0])))
    # a row is judged on its own: beside a row of large x, a spread of 1e-4 is still a slope
    rows = np.array([[-9.2, -9.2 + 1e-4], [100.0, 200.0]])
    np.testing.assert_allclose(F.slope(rows, np.array([[0.0, 1.0], [0.0, 1.0]])), [1e4, 0.01], rtol=1e-6)


def configurations(acc, evp, acc_se, evp_se) -> pd.DataFrame:
    return pd.DataFrame({"acc_ben": acc, "evp": evp, "acc_ben_se": acc_se, "evp_se": evp_se})


def test_discordance_counts_opposite_orders_beyond_both_errors():
    # pairs (0,1): da .1, de -.3: opposite, but .1 is within sa .05 + .2; (0,2): da .2, de -.2:
    # opposite, but .2 is within se .01 + .3; (1,2): same order
    group = configurations([0.9, 0.8, 0.7], [0.2, 0.5, 0.4], [0.05, 0.2, 0.05], [0.01, 0.01, 0.3])
    assert F.discordance(group) == (3, 2, 0)
    group = configurations([0.9, 0.8, 0.7], [0.2, 0.5, 0.4], [0.01] * 3, [0.01] * 3)
    assert F.discordance(group) == (3, 2, 2)


def test_discordance_needs_a_difference_strictly_beyond_the_errors():
    # binary fractions, exact: a difference equal to the summed errors is not beyond them
    assert F.discordance(configurations([0.75, 0.5], [0.25, 0.75], [0.125, 0.125], [0.0625, 0.0625])) == (1, 1, 0)
    assert F.discordance(configurations([0.75, 0.5], [0.25, 0.75], [0.0625, 0.0625], [0.25, 0.25])) == (1, 1, 0)


def test_a_tie_is_not_an_opposite_order():
    assert F.discordance(configurations([0.8, 0.9], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0])) == (1, 0, 0)


def test_kendall_of_two_configurations_and_of_a_constant_column():
    assert F.kendall(pd.DataFrame({"acc_ben": [0.9, 0.8], "evp": [0.3, 0.5]})) == -1.0
    assert math.isnan(F.kendall(pd.DataFrame({"acc_ben": [0.5, 0.5, 0.5], "evp": [0.1, 0.2, 0.3]})))


# tables on another clock, keys and labels


def test_on_clock_swaps_in_the_clocks_columns_and_leaves_nan_where_it_has_none():
    trained = pd.DataFrame({"t_train": [1.0], "t_train_wall": [5.0]})
    trash = pd.DataFrame({"t_train": [1.0], "E_T": [0.1], "trash_adv": [10.0], "t_train_wall": [5.0], "E_T_wall": [0.2], "trash_adv_wall": [25.0]})
    tables = F.on_clock(F.Tables(trained, pd.DataFrame(), trash, pd.DataFrame(), clock="process"), "wall")
    assert tables.clock == "wall" and tables.trained["t_train"].tolist() == [5.0]
    assert tables.trash[["t_train", "E_T", "trash_adv"]].values.tolist() == [[5.0, 0.2, 25.0]]
    other = F.on_clock(F.Tables(trained, pd.DataFrame(), trash, pd.DataFrame()), "flops")  # no _flops columns
    assert other.trained["t_train"].isna().all() and other.trash[["t_train", "E_T", "trash_adv"]].isna().all().all()


def test_with_keys_gives_from_scratch_cells_an_empty_pretrained_on():
    assert F.with_keys(pd.DataFrame({"x": [1, 2]}))["pretrained_on"].tolist() == ["", ""]
    assert F.with_keys(pd.DataFrame({"pretrained_on": [None, "cifar10"]}))["pretrained_on"].tolist() == ["", "cifar10"]


@pytest.mark.parametrize("seed, label", [(0, "0"), (2.0, "2"), (np.int64(3), "3"), (1.5, "1.5"), ("s1", "s1")])
def test_seed_labels_drop_a_float_columns_point_zero(seed, label):
    assert F.seed_label(seed) == label


def test_mean_per_key_keeps_cells_whose_key_is_missing():
    df = pd.DataFrame({"pretrained_on": [None, None, "cifar10"], "evp": [0.2, 0.4, 0.9]})
    means = F.mean_per_key(df, ["pretrained_on"], "evp")
    assert len(means) == 2 and means["evp"].tolist() == pytest.approx([0.9, 0.3])


def test_config_stats_standard_error_over_seeds():
    # evp over seeds [.2, .4, .6]: sd .2, se .2 / sqrt(3)
    rows = pd.DataFrame({"model": ["m"] * 3, "seed": [0, 1, 2], "acc_ben": [0.9, 0.9, 0.9], "evp": [0.2, 0.4, 0.6]})
    out = F.config_stats(rows, ["model"]).iloc[0]
    assert out["evp"] == pytest.approx(0.4) and out["evp_se"] == pytest.approx(0.2 / math.sqrt(3))
    assert out["acc_ben_se"] == 0.0 and out["n_seeds"] == 3


def test_the_depth_series_breaks_ties_by_most_depths_then_name_and_most_depths_then_epochs():
    # zeta has 3 depths, alpha 2: zeta although alphabetically last; of zeta's epochs,
    # 5 covers 3 depths and 20 one: 5 although not the largest
    trained = pd.DataFrame(
        {
            "model": ["zeta1", "zeta2", "zeta3", "zeta1", "alpha1", "alpha2"],
            "depth": [1, 2, 3, 1, 1, 2],
            "epochs": [5, 5, 5, 20, 5, 5],
            "t_train": [1.0] * 6,
            "defence": ["none"] * 6,
        }
    )
    rows, what = F.depth_series(trained)
    assert what == "zeta at epochs=5" and sorted(rows["depth"]) == [1, 2, 3]
    rows, what = F.depth_series(trained[trained["defence"] == "adv_train"])
    assert rows.empty and what.endswith("; found no undefended trained models")


# what findings.csv and metrics.json receive


def test_findings_metrics_carry_the_interval_p_and_clock():
    found = F.Finding("003_trash_above_one_fgm", "003", "claim", "test", 4, 2.0, 1.5, 2.5, 0.01, F.HOLDS, "detail", clock="wall")
    assert F.findings_metrics([found]) == {
        "003_trash_above_one_fgm": {"verdict": F.HOLDS, "value": 2.0, "lo": 1.5, "hi": 2.5, "p": 0.01, "n": 4, "clock": "wall"}
    }


def test_an_empty_findings_frame_keeps_its_header():
    assert list(F.findings_frame([]).columns) == ["id", "paper", "claim", "test", "n", "value", "lo", "hi", "p", "verdict", "detail", "clock"]


def test_depth_not_proportional_reads_fgm_or_pgd_cells_alone():
    from tests.test_findings import check, depth_tables

    for attack in ("fgm", "pgd"):
        tables = depth_tables(0.5)
        tables["trash"] = tables["trash"][tables["trash"]["attack"] == attack]
        result = check("003_depth_not_proportional", **tables)
        assert result.verdict == F.HOLDS and result.value == pytest.approx(0.5), attack


def test_depth_not_proportional_is_inconclusive_when_the_interval_holds_one():
    from tests.test_findings import check, table

    models = {"model": ["cifar_resnet8", "cifar_resnet14", "cifar_resnet20", "cifar_resnet32"], "depth": [8, 14, 20, 32]}
    t_train = [1.0, 2.0, 4.0, 8.0]
    trash = table("trash", **models, model_hash=["a", "b", "c", "d"], t_train=t_train, E_T=[1.0, 1.0, 8.0, 4.0])
    result = check("003_depth_not_proportional", trained=table("trained", **models, t_train=t_train), trash=trash)
    assert result.lo < 1 < result.hi and result.verdict == F.INCONCLUSIVE, (result.lo, result.hi)


# 003's time findings: what findings.csv says of them


def test_the_time_findings_name_their_test_and_what_they_need_when_not_testable():
    empty = F.Tables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    found = {f.id: f for f in F.check_findings(empty, resamples=10)}
    assert found["003_deeper_trains_longer"].test == "Spearman rho of depth and t_train over undefended trained models of one architecture family"
    assert found["003_depth_not_proportional"].test == (
        "slope of log E[T] on log t_train over undefended models of one family (FGM, PGD), bootstrap over models"
    )
    assert found["003_depth_latency_not_queries"].test == (
        "slopes of log E[queries to failure] and of log latency per query on log depth, undefended FGM/PGD cells of one family, bootstrap over models"
    )
    for id in ("003_deeper_trains_longer", "003_depth_not_proportional", "003_depth_latency_not_queries"):
        assert found[id].detail.startswith(F.NEEDS_DEPTHS), id


def test_the_time_findings_name_their_test_with_its_models_when_testable():
    from tests.test_findings import check, decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    deeper = check("003_deeper_trains_longer", **tables)
    assert deeper.test == "Spearman rho of depth and t_train over 3 undefended trained models (cifar_resnet at epochs=1)"
    proportional = check("003_depth_not_proportional", **tables)
    assert proportional.test.endswith("bootstrap over models (3 models, cifar_resnet at epochs=1)")
    assert proportional.detail.startswith("E[T] ~ t_train^0.5 over 3 models")
    latency = check("003_depth_latency_not_queries", **tables)
    assert latency.test.endswith("bootstrap over models (3 models, cifar_resnet at epochs=1)")


def test_depth_latency_on_the_compute_clock_reads_flops_per_query():
    from tests.test_findings import decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    given = F.Tables(tables["trained"], pd.DataFrame(), tables["trash"], pd.DataFrame(), clock="flops")
    [found] = [f for f in F.check_findings(given, resamples=100) if f.id == "003_depth_latency_not_queries"]
    assert found.verdict == F.HOLDS and "FLOPs per query ~ depth^1.3" in found.detail


def test_depth_latency_reads_undefended_fgm_or_pgd_cells_only():
    from tests.test_findings import check, decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    trash = tables["trash"]
    for attack in ("fgm", "pgd"):
        alone = check("003_depth_latency_not_queries", trained=tables["trained"], trash=trash[trash["attack"] == attack])
        assert alone.verdict == F.HOLDS and alone.value == pytest.approx(0.0, abs=1e-12), attack
    # a DeepFool cell of each model whose queries rise with depth is left out of the means
    deepfool = trash.iloc[:3].assign(attack="deepfool", E_Q=[1.0, 100.0, 10000.0])
    mixed = check("003_depth_latency_not_queries", trained=tables["trained"], trash=pd.concat([trash, deepfool]))
    assert mixed.value == pytest.approx(0.0, abs=1e-12)


def test_depth_latency_leaves_out_models_without_positive_queries_or_latency():
    from tests.test_findings import check, decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    trash = tables["trash"]
    half = check("003_depth_latency_not_queries", trained=tables["trained"], trash=trash.assign(E_Q=0.5))  # under one query: still a model
    assert half.verdict == F.HOLDS
    for column in ("E_Q", "flops_per_query"):
        zero = trash.assign(**{column: np.where(trash["model_hash"] == "a", 0.0, trash[column])})
        left = check("003_depth_latency_not_queries", trained=tables["trained"], trash=zero)
        assert left.verdict == F.NOT_TESTABLE and "found 2" in left.detail, column


def test_brittle_spearman_per_seed_reports_p():
    brittle = pd.DataFrame({"seed": [0] * 4, "brittle_score": [0.1, 0.2, 0.3, 0.4], "robust_acc": [0.9, 0.7, 0.8, 0.1], "degenerate": False})
    [(seed, result)] = F.brittle_spearman_per_seed(brittle).items()
    # ranks [1, 2, 3, 4] and [4, 2, 3, 1]: d^2 = 9 + 0 + 0 + 9; rho = 1 - 6 (18) / (4 (15)) = -0.8
    assert seed == "0" and result["rho"] == pytest.approx(-0.8) and result["p"] == pytest.approx(0.2) and result["n"] == 4
