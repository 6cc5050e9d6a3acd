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
    with warnings.catch_warnings(), np.errstate(all="warn"):  # numpy warns here whatever another library set
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
    from tests.metrics.test_findings import check, depth_tables

    for attack in ("fgm", "pgd"):
        tables = depth_tables(0.5)
        tables["trash"] = tables["trash"][tables["trash"]["attack"] == attack]
        result = check("003_depth_not_proportional", **tables)
        assert result.verdict == F.HOLDS and result.value == pytest.approx(0.5), attack


def test_depth_not_proportional_is_inconclusive_when_the_interval_holds_one():
    from tests.metrics.test_findings import check, table

    models = {"model": ["cifar_resnet8", "cifar_resnet14", "cifar_resnet20", "cifar_resnet32"], "depth": [8, 14, 20, 32]}
    t_train = [1.0, 2.0, 4.0, 8.0]
    trash = table("trash", **models, model_hash=["a", "b", "c", "d"], t_train=t_train, E_T=[1.0, 1.0, 8.0, 4.0])
    result = check("003_depth_not_proportional", trained=table("trained", **models, t_train=t_train), trash=trash)
    assert result.lo < 1 < result.hi and result.verdict == F.INCONCLUSIVE, (result.lo, result.hi)


# 003's time findings: what findings.csv says of them


def test_the_time_findings_name_their_test_and_what_they_need_when_not_testable():
    empty = F.Tables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    found = {f.id: f for f in F.check_findings(empty, resamples=10, seed=0)}
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
    from tests.metrics.test_findings import check, decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    deeper = check("003_deeper_trains_longer", **tables)
    assert deeper.test == "Spearman rho of depth and t_train over 3 undefended trained models (cifar_resnet at epochs=1)"
    proportional = check("003_depth_not_proportional", **tables)
    assert proportional.test.endswith("bootstrap over models (3 models, cifar_resnet at epochs=1)")
    assert proportional.detail.startswith("E[T] ~ t_train^0.5 over 3 models")
    latency = check("003_depth_latency_not_queries", **tables)
    assert latency.test.endswith("bootstrap over models (3 models, cifar_resnet at epochs=1)")


def test_depth_latency_on_the_compute_clock_reads_flops_per_query():
    from tests.metrics.test_findings import decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    given = F.Tables(tables["trained"], pd.DataFrame(), tables["trash"], pd.DataFrame(), clock="flops")
    [found] = [f for f in F.check_findings(given, resamples=100, seed=0) if f.id == "003_depth_latency_not_queries"]
    assert found.verdict == F.HOLDS and "FLOPs per query ~ depth^1.3" in found.detail


def test_depth_latency_reads_undefended_fgm_or_pgd_cells_only():
    from tests.metrics.test_findings import check, decomposition_tables

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
    from tests.metrics.test_findings import check, decomposition_tables

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


# what a reader of findings.csv sees: each finding's test and detail, verbatim


def test_slope_needs_a_variance_strictly_above_its_floor():
    # x = m -+ 2^-20: variance 2^-39, which is exactly 1e-12 x their sum of squares (about 1.82)
    at_floor = np.array([0.9536733627314568, 0.9536752700800896])
    assert np.isnan(F.slope(at_floor, np.array([0.0, 1.0])))
    # on a scale below 1 the floor is 1e-12 itself: a variance of 1.62e-12 is a slope
    np.testing.assert_allclose(F.slope(np.array([0.0, 1.8e-6]), np.array([0.0, 1.8e-6])), 1.0)


def test_a_trash_finding_names_its_attack_and_geometric_mean():
    from tests.metrics.test_findings import check, table

    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0]))
    assert found.test == "geometric mean of TRASH over undefended FGM cells, bootstrap of mean log TRASH"
    # log-means of the resamples {2, 2}, {2, 8}, {8, 8}: the interval runs from 2 to 8
    assert found.detail == "geometric mean TRASH 4 over 2 cells, 95% CI [2, 8]"
    missing = check("003_trash_above_one_pgd", trash=table("trash", trash_adv=[2.0, 8.0]))
    assert missing.test == "geometric mean of TRASH over undefended PGD cells, bootstrap of mean log TRASH"
    assert missing.detail == "needs undefended PGD TRASH cells: add pgd to attack"


def test_a_trash_of_zero_is_left_out_of_the_geometric_mean():
    from tests.metrics.test_findings import check, table

    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[0.0, 4.0]))
    assert found.verdict == F.NOT_TESTABLE
    assert found.test == "geometric mean of TRASH over undefended FGM cells, bootstrap of mean log TRASH"
    assert found.detail == "needs >= 2 undefended FGM cells with positive TRASH; found 1: more models or split.seeds=[0,1,2]"


def test_numbers_held_in_object_columns_still_count():
    # pandas keeps object dtype for a column concatenated from frames that lacked it
    from tests.metrics.test_findings import check, decomposition_tables, table

    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0]).astype({"trash_adv": object}))
    assert found.value == pytest.approx(4.0)
    tables = decomposition_tables(0.0, 1.3)
    tables["trash"] = tables["trash"].assign(depth=tables["trash"]["depth"].astype(object))
    assert check("003_depth_latency_not_queries", **tables).verdict == F.HOLDS


def test_depth_not_proportional_leaves_out_models_without_positive_times():
    from tests.metrics.test_findings import check, depth_tables

    tables = depth_tables(0.5)
    trash = tables["trash"]
    for column in ("E_T", "t_train"):
        zero = trash.assign(**{column: np.where(trash["model_hash"] == "a", 0.0, trash[column])})
        left = check("003_depth_not_proportional", trained=tables["trained"], trash=zero)
        assert left.verdict == F.NOT_TESTABLE and "found 2" in left.detail, column
        assert left.test == "slope of log E[T] on log t_train over undefended models of one family (FGM, PGD), bootstrap over models"


def test_depth_not_proportional_is_inconclusive_when_e_t_grows_as_training_time():
    from tests.metrics.test_findings import check, depth_tables

    # E[T] = t_train: every bootstrap slope is exactly 1, neither below nor above it
    found = check("003_depth_not_proportional", **depth_tables(1.0))
    assert (found.lo, found.hi) == (1.0, 1.0) and found.verdict == F.INCONCLUSIVE


def test_depth_latency_not_testable_names_its_test():
    from tests.metrics.test_findings import check, decomposition_tables

    tables = decomposition_tables(0.0, 1.3)
    trash = tables["trash"]
    left = check("003_depth_latency_not_queries", trained=tables["trained"], trash=trash[trash["model_hash"] != "a"])
    assert left.verdict == F.NOT_TESTABLE and left.test.startswith("slopes of log E[queries to failure] and of log latency per query on log depth")


@pytest.mark.parametrize(
    "queries, latency, verdict",
    [
        ([6.0, 6.0, 6.0], [1.0, 1.2, 1.4], F.HOLDS),  # latency grows slower than depth: still latency
        ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], F.INCONCLUSIVE),  # neither grows: both slopes exactly 0
        # queries as many as the latency's FLOPs at the two shallow models and collapsing at the
        # deepest: the resamples of the shallow two alone (6 of 27) differ by exactly 0, so the
        # interval of latency minus queries starts at 0 and is not above it
        ([1e6, 2e6, 1.0], [1e6, 2e6, 3e6], F.INCONCLUSIVE),
    ],
)
def test_depth_latency_verdict_at_the_edges_of_its_intervals(queries, latency, verdict):
    from tests.metrics.test_findings import check, depth_tables

    tables = depth_tables(0.5)
    trash = tables["trash"].assign(E_Q=queries * 2, flops_per_query=latency * 2)
    assert check("003_depth_latency_not_queries", trained=tables["trained"], trash=trash).verdict == verdict


def test_the_paired_findings_name_their_test_and_pairs():
    from tests.metrics.test_findings import brittle_pairs, check, epochs_table, evp_table

    evp = evp_table([1.0, 1.0], [2.0, 4.0]).drop(columns="reaches_nonviability")
    raised = check("001_adv_train_raises_evp", robustness=evp)
    assert raised.test == "paired bootstrap of EVP(adv_train) - EVP(none) over matching cells"
    # without the column no curve is known to stop short of non-viability
    assert raised.detail == (
        "mean difference +2 over 2 pairs of adv_train/none cells, 95% CI [+1, +3]; 0 of 2 adv_train curves do not reach "
        "non-viability, so their EVP is a lower bound set by the attack's strength grid"
    )
    assert check("001_adv_train_raises_evp", robustness=evp_table([1.0], [])).test == raised.test
    lowered = check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.5, 0.5], [0.4, 0.2]))
    assert lowered.test == "paired bootstrap of brittle_score(adv_train) - brittle_score(none) over matching model cells"
    assert lowered.detail == "mean difference -0.2 over 2 pairs of adv_train/none model cells, 95% CI [-0.3, -0.1]"
    assert check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.5], [])).test == lowered.test
    rises = check("004_r_rises_with_epochs", robustness=epochs_table([0.44, 0.40], [0.55, 0.50]))
    assert rises.test == "paired bootstrap of R(largest epochs) - R(smallest epochs) within otherwise equal cells"


def test_evp_ranks_differently_names_its_test_and_what_it_needs():
    from tests.metrics.test_findings import check, ranking_table

    test = (
        "pairs of configurations within each data set and attack family ordered oppositely by acc_ben and "
        "EVP beyond their seed standard errors; value = size-weighted mean Kendall tau-b"
    )
    assert check("001_evp_ranks_differently", robustness=ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0])).test == test
    one_seed = check("001_evp_ranks_differently", robustness=ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0], seeds=(0,)))
    assert (one_seed.test, one_seed.detail) == (test, "needs >= 2 seeds: split.seeds=[0,1,2] (no seed standard error with one seed)")
    two = ranking_table([0.9, 0.8], [1.0, 2.0])
    two_configurations = check("001_evp_ranks_differently", robustness=two)
    assert two_configurations.test == test
    assert two_configurations.detail == (
        "needs >= 3 configurations of one data set and attack family, e.g. model=[resnet18,resnet34] with defence=[none,gauss_in]"
    )


def test_evp_ranks_differently_weighs_each_groups_tau_by_its_size():
    from tests.metrics.test_findings import table

    # FGM: 3 configurations ranked oppositely (tau -1); PGD: 4 ranked alike (tau +1)
    groups = [("fgm linf", [0.9, 0.8, 0.7], [1.0, 2.0, 3.0]), ("pgd linf", [0.9, 0.8, 0.7, 0.6], [4.0, 3.0, 2.0, 1.0])]
    rows = [(family, f"resnet{i}", s, a + 0.01 * s, e + 0.01 * s) for family, acc, evp in groups for i, (a, e) in enumerate(zip(acc, evp)) for s in (0, 1)]
    family, model, seed, acc, evp = map(list, zip(*rows))
    robustness = table("robustness", attack_family=family, model=model, seed=seed, acc_ben=acc, evp=evp)
    found = F.evp_ranks_differently(F.Tables(pd.DataFrame(), robustness, pd.DataFrame(), pd.DataFrame()))
    assert found.value == pytest.approx((3 * -1 + 4 * 1) / 7)


def test_brittle_negative_names_its_test_and_says_how_the_seeds_agree():
    from tests.metrics.test_findings import check, table

    agreeing = table("brittle", brittle_score=[1.0, 2, 3, 4, 5, 6], robust_acc=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], seed=[0, 0, 0, 1, 1, 1])
    found = check("002_brittle_negative", brittle=agreeing)
    assert (
        found.test == "Spearman rho of brittle_score and robust_acc over 6 model cells without a predict-time defence (002's trained models), pooled over seeds"
    )
    assert found.detail.endswith("; per seed: 0: -1.00, 1: -1.00; the sign agrees across seeds")
    differing = agreeing.assign(robust_acc=[0.9, 0.8, 0.7, 0.4, 0.5, 0.6])
    assert check("002_brittle_negative", brittle=differing).detail.endswith("; per seed: 0: -1.00, 1: 1.00; the sign differs across seeds")
    # two cells a seed: no seed has a rho of its own, the pooled four have one
    pooled = check("002_brittle_negative", brittle=agreeing.iloc[1:5].assign(seed=[0, 0, 1, 1]))
    assert pooled.n == 4 and pooled.detail.endswith("; per seed: none; no seed has >= 3 cells")
    too_few = check("002_brittle_negative", brittle=agreeing.iloc[:2])
    assert too_few.verdict == F.NOT_TESTABLE
    assert (
        too_few.test
        == "Spearman rho of brittle_score and robust_acc over 2 model cells without a predict-time defence (002's trained models), pooled over seeds"
    )


# the bootstrap's seed: the same seed draws the same interval on every run, another seed another

SPREAD = [0.31, -1.72, 2.23, 4.15, -0.4, 1.1, 3.3, -2.6, 0.05, 5.2, -0.9, 1.7]


def test_a_paired_finding_draws_its_interval_with_the_given_seed():
    from trashfire.metrics import bootstrap_mean

    pairs = pd.DataFrame({"d": SPREAD})
    found = F.paired_finding("001_adv_train_raises_evp", "t", pairs, +1, 500, 7, "cells")
    # twelve spread differences: no other seed's draw gives the same interval
    assert (found.value, found.lo, found.hi) == bootstrap_mean(SPREAD, 500, 7)
    assert (found.lo, found.hi) != bootstrap_mean(SPREAD, 500, 0)[1:]


def spread_tables() -> F.Tables:
    """Six depths of one family with noisy times, queries and latencies (on the configured
    clock and on wall), and twelve spread pairs of EVP and brittle-score (adv_train/none) and of
    R (10/1 epochs, pretrained/from scratch): every bootstrap finding has a wide interval."""
    from tests.metrics.test_findings import brittle_pairs, evp_table, table

    depths = [8, 14, 20, 32, 44, 56]
    models = {"model": [f"cifar_resnet{d}" for d in depths], "depth": depths}
    t_train = [1.0, 1.9, 2.6, 4.4, 5.5, 7.9]
    trained = table("trained", **models, t_train=t_train, t_train_wall=t_train)
    times = {
        "t_train": t_train,
        "E_T": [0.010, 0.016, 0.013, 0.025, 0.021, 0.034],
        "trash_adv": [100.0, 118.7, 200.0, 176.0, 261.9, 232.3],
        "E_Q": [6.0, 5.1, 7.2, 6.4, 5.6, 6.9],
        "flops_per_query": [1.0e6, 1.9e6, 2.3e6, 4.1e6, 5.8e6, 6.6e6],
    }
    on_wall = {f"{c}_wall": times[c] for c in ("t_train", "E_T", "trash_adv")} | {"seconds_per_query_wall": [1.1, 1.7, 2.6, 3.9, 6.1, 6.4]}
    fgm = table("trash", **models, model_hash=list("abcdef"), **times, **on_wall)
    trash = pd.concat([fgm, fgm.assign(attack="pgd", attack_family="pgd linf")], ignore_index=True)
    none = [1.0 + 0.1 * i for i in range(len(SPREAD))]
    seeds = list(range(len(SPREAD)))
    robustness = pd.concat(
        [
            evp_table(none, [n + d for n, d in zip(none, SPREAD)]),
            table("robustness", seed=seeds, epochs=10, auc_R=[0.5 + d for d in SPREAD]),
            table("robustness", seed=seeds, pretrained_on="cifar10", auc_R=[0.5 - d for d in SPREAD]),
        ],
        ignore_index=True,
    )
    brittle = brittle_pairs(none, [n + d for n, d in zip(none, SPREAD)])
    return F.Tables(trained, robustness, trash, brittle)


def test_every_bootstrap_finding_follows_the_configured_seed():
    tables = spread_tables()
    first, again, other = ({f.id: f for f in F.check_findings(tables, resamples=500, seed=s, other_clocks=("wall",))} for s in (5, 5, 6))
    bootstrapped = [
        "003_depth_not_proportional",
        "003_depth_latency_not_queries",
        "003_trash_above_one_fgm",
        "003_trash_above_one_pgd",
        "001_adv_train_raises_evp",
        "002_adv_train_lowers_brittle",
        "004_r_rises_with_epochs",
        "004_pretraining_effect",
    ]
    for id in bootstrapped + [f"{id}@wall" for id in bootstrapped[:4]]:
        assert first[id].verdict != F.NOT_TESTABLE, id
        assert (first[id].lo, first[id].hi, first[id].detail) == (again[id].lo, again[id].hi, again[id].detail), id
        assert (first[id].lo, first[id].hi) != (other[id].lo, other[id].hi), id


def bootstrap_slopes(x: np.ndarray, y: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """np.polyfit's slope on each resample of the models (NaN where a resample has one model)."""
    draws = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    return np.array([np.polyfit(x[i], y[i], 1)[0] if np.ptp(x[i]) > 0 else np.nan for i in draws])


def test_the_depth_findings_intervals_are_the_central_95_percent_of_slopes_over_resampled_models():
    tables = spread_tables()
    found = {f.id: f for f in F.check_findings(tables, resamples=300, seed=4)}
    trash = tables.trash[tables.trash["attack"] == "fgm"]  # one row a model: its PGD row is the same
    proportional = bootstrap_slopes(np.log(trash["t_train"].to_numpy()), np.log(trash["E_T"].to_numpy()), 300, 4)
    lo, hi = np.nanpercentile(proportional, [2.5, 97.5])
    assert (found["003_depth_not_proportional"].lo, found["003_depth_not_proportional"].hi) == pytest.approx((lo, hi), rel=1e-9)
    x = np.log(trash["depth"].to_numpy(float))
    queries = bootstrap_slopes(x, np.log(trash["E_Q"].to_numpy()), 300, 4)
    latency = bootstrap_slopes(x, np.log(trash["flops_per_query"].to_numpy()), 300, 4)
    latency_only = found["003_depth_latency_not_queries"]
    assert (latency_only.lo, latency_only.hi) == pytest.approx(tuple(np.nanpercentile(queries, [2.5, 97.5])), rel=1e-9)
    l_lo, l_hi = np.nanpercentile(latency, [2.5, 97.5])
    d_lo, d_hi = np.nanpercentile(latency - queries, [2.5, 97.5])
    assert latency_only.detail.endswith(f"([{l_lo:.3g}, {l_hi:.3g}]); latency minus queries [{d_lo:.3g}, {d_hi:.3g}]")


def test_the_epoch_and_pretraining_findings_name_their_test_and_pairs():
    from tests.metrics.test_findings import check, pretrained_table, table

    # two epoch counts are enough to compare the largest with the smallest
    two_epochs = table("robustness", seed=[0, 1, 0, 1], epochs=[1, 1, 10, 10], auc_R=[0.4, 0.4, 0.5, 0.7])
    rises = check("004_r_rises_with_epochs", robustness=two_epochs)
    assert rises.test == "paired bootstrap of R(largest epochs) - R(smallest epochs) within otherwise equal cells"
    assert rises.detail == "mean difference +0.2 over 2 pairs of cells at their largest and smallest epochs, 95% CI [+0.1, +0.3]"
    one_epoch = check("004_r_rises_with_epochs", robustness=two_epochs.assign(epochs=1))
    assert (one_epoch.verdict, one_epoch.test) == (F.NOT_TESTABLE, rises.test)
    pretrained = check("004_pretraining_effect", robustness=pretrained_table([0.5, 0.5], [0.5, 1.0]))
    assert pretrained.test == "paired bootstrap of R(pretrained) - R(from scratch) over matching cells"
    assert pretrained.detail == "mean difference +0.25 over 2 pairs of pretrained/from-scratch cells, 95% CI [+0, +0.5]"
    # a gain whose interval reaches down to 0 does not contradict "no gain"
    assert (pretrained.lo, pretrained.verdict) == (0.0, F.HOLDS)
    for scratch, pre in (([0.5, 0.5], []), ([0.5, 0.5], [0.6])):  # no pretrained cell, one pair
        too_few = check("004_pretraining_effect", robustness=pretrained_table(scratch, pre))
        assert (too_few.verdict, too_few.test) == (F.NOT_TESTABLE, pretrained.test)
