"""The findings' and verdicts' building blocks on hand-computed values: the verdict rule at its
edges (adjusted p against alpha, the effect against its smallest effect of interest, the
equivalence margin), Holm over the claims, and what findings.csv says of each claim."""

import math

import numpy as np
import pandas as pd
import pytest

from tests.metrics.test_findings import SETTINGS, check, decomposition_tables, depth_tables, table
from trashfire.core import inference
from trashfire.metrics import findings as F
from trashfire.metrics import verdicts as V


def claim(kind=V.DIRECTIONAL, sign=+1, effect=0.3, smallest=0.1, p=0.01, detectable=0.2, se=0.2) -> V.Tested:
    found = F.finding("001_adv_train_raises_evp", "test", 6, effect, effect - 0.1, effect + 0.1, p, V.INCONCLUSIVE, "detail", "units")
    return V.Tested(found, kind, sign, effect, smallest, se, "t", p, detectable)


@pytest.mark.parametrize(
    "effect, adjusted, verdict, why",
    [
        (0.3, 0.01, V.HOLDS, "at least the smallest effect of interest"),
        (0.1, 0.01, V.HOLDS, "at least"),  # exactly the smallest effect counts
        (0.05, 0.01, V.INCONCLUSIVE, "too small"),  # significant, below what counts
        (0.3, 0.05, V.INCONCLUSIVE, "underpowered"),  # p must be below alpha, not at it
        (-0.3, 0.01, V.CONTRADICTED, "the opposite way"),
        (-0.05, 0.01, V.INCONCLUSIVE, "too small"),
    ],
)
def test_a_directional_claim_holds_when_the_adjusted_test_rejects_and_the_effect_counts(effect, adjusted, verdict, why):
    found = V.decide(claim(effect=effect), adjusted, 0.05, 4)
    assert found.verdict == verdict and why in found.detail
    assert found.p == 0.01 and found.p_adjusted == adjusted


def test_a_claimed_fall_holds_on_its_own_side():
    assert V.decide(claim(sign=-1, effect=-0.3), 0.01, 0.05, 1).verdict == V.HOLDS
    assert V.decide(claim(sign=-1, effect=0.3), 0.01, 0.05, 1).verdict == V.CONTRADICTED


def test_an_inconclusive_claim_says_how_many_units_would_settle_it():
    found = V.decide(claim(effect=0.3, se=0.2), 0.2, 0.05, 4)
    # 6 units with se 0.2: (z_{1 - 0.05/8} + z_0.8)^2 x 6 x (0.2 / 0.3)^2, and Guenther's z^2 / 2
    needed = inference.units_from_se(0.3, 0.2, 6, 0.05 / 4)
    assert needed == pytest.approx(6 * ((2.4977 + 0.8416) * 0.2 / 0.3) ** 2 + 2.4977**2 / 2, rel=1e-3)
    assert found.units_to_settle == pytest.approx(needed) and f"about {math.ceil(needed)} units would settle it" in found.detail


def test_an_effect_below_what_counts_says_more_units_would_show_it_too_small():
    found = V.decide(claim(effect=0.05, detectable=0.4), 0.3, 0.05, 4)
    assert found.verdict == V.INCONCLUSIVE and "more units would show it too small" in found.detail


@pytest.mark.parametrize(
    "kind, adjusted, p_beyond, verdict",
    [
        (V.EQUIVALENCE, 0.01, 0.9, V.HOLDS),  # the equivalence test rejects
        (V.EQUIVALENCE, 0.9, 0.001, V.CONTRADICTED),  # the effect lies past the margin: 0.004 < 0.05
        (V.EQUIVALENCE, 0.9, 0.02, V.INCONCLUSIVE),  # 0.02 x 4 claims is not below alpha
        (V.EQUIVALENCE, 0.2, 0.5, V.INCONCLUSIVE),
        (V.BELOW, 0.9, 0.001, V.CONTRADICTED),
    ],
)
def test_a_claim_of_no_effect_holds_on_its_equivalence_test_and_is_contradicted_past_its_margin(kind, adjusted, p_beyond, verdict):
    tested = V.Tested(claim().finding, kind, +1, 0.3, 0.1, 0.2, "t", 0.5, 0.2, p_beyond)
    assert V.decide(tested, adjusted, 0.05, 4).verdict == verdict


def test_past_the_margin_is_a_one_sided_test_against_the_margin_not_against_zero():
    """A gain of 0.06 against a margin of 0.05 is significant against 0 but not past 0.05: the
    claim of no gain is not contradicted (issue 59's family-wise check counted such rows)."""
    gains = [0.02, 0.10, 0.03, 0.09, 0.05, 0.07]
    estimate = inference.mean_over_units(gains)
    tested = V.tested(claim().finding, estimate, V.BELOW, +1, 0.05, alpha=0.05)
    assert estimate.p < 0.01 and tested.p_beyond > 0.2 and V.decide(tested, 0.9, 0.05, 10).verdict == V.INCONCLUSIVE


def test_adjust_leaves_not_testable_findings_and_gives_untested_claims_no_adjusted_p():
    untestable = F.untestable("004_pretraining_effect", "test", "needs pretrained cells")
    no_test = V.Tested(claim().finding, V.DIRECTIONAL, +1, 0.3, 0.1, math.nan, "t", math.nan, math.nan)
    first, second = V.adjust([untestable, no_test], 0.05)
    assert first.verdict == V.NOT_TESTABLE and second.verdict == V.INCONCLUSIVE and "no test: its 6 units are all equal" in second.detail


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
    bare = F.on_clock(F.Tables(pd.DataFrame({"t_train": [1.0]}), pd.DataFrame(), pd.DataFrame(), pd.DataFrame()), "wall")
    assert bare.trained["t_train"].isna().all()


def test_with_keys_gives_from_scratch_cells_an_empty_pretrained_on():
    keyed = F.with_keys(pd.DataFrame({"pretrained_on": [None, "cifar10"]}))
    assert keyed["pretrained_on"].tolist() == ["", "cifar10"]
    assert F.with_keys(pd.DataFrame({"x": [1]}))["pretrained_on"].tolist() == [""]


@pytest.mark.parametrize("seed, label", [(0, "0"), (2.0, "2"), (np.int64(3), "3"), ("s1", "s1"), (1.5, "1.5")])
def test_seed_labels_drop_a_float_columns_point_zero(seed, label):
    assert F.seed_label(seed) == label


def test_a_predict_time_defence_is_its_undefended_trained_model():
    rows = pd.DataFrame({"defence": ["none", "gauss_out", "adv_train"], "defence_value": ["", 0.1, 0.2]})
    trained = F.trained_model(rows, {"gauss_out": "predict", "adv_train": "train"})
    assert trained["trained_defence"].tolist() == ["none", "none", "adv_train"] and trained["trained_value"].tolist() == ["", "", "0.2"]


def test_r_rises_counts_one_unit_per_trained_model_with_its_predict_time_defences_averaged():
    """Two seeds of one configuration, each evaluated undefended and behind a predict-time
    wrapper and attacked by two families: 2 units, not 8 pairs of cells."""
    rows = []
    for seed, rise in ((0, 0.10), (1, 0.06)):
        for defence in ("none", "gauss_out"):
            for family in ("fgm linf", "pgd linf"):
                rows += [(seed, defence, family, 1, 0.40), (seed, defence, family, 10, 0.40 + rise)]
    seed, defence, family, epochs, r = map(list, zip(*rows))
    robustness = table("robustness", seed=seed, defence=defence, attack_family=family, epochs=epochs, auc_R=r)
    given = F.Tables(pd.DataFrame(), robustness, pd.DataFrame(), pd.DataFrame(), defence_stages={"gauss_out": "predict"})
    [found] = [f for f in F.check_findings(given, SETTINGS) if f.id == "004_r_rises_with_epochs"]
    assert found.n == 2 and found.value == pytest.approx(0.08) and found.units == "trained-model (configuration, seed) units"


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


def test_findings_metrics_carry_the_interval_p_adjusted_p_units_and_clock():
    found = F.Finding("003_trash_above_one_fgm", "003", "claim", "test", 4, 2.0, 1.5, 2.5, 0.01, F.HOLDS, "detail", clock="wall", units="models")
    found = F.replace(found, p_adjusted=0.04, smallest_effect=0.0953, detectable=0.3, units_to_settle=math.nan)
    assert F.findings_metrics([found]) == {
        "003_trash_above_one_fgm": {
            "verdict": F.HOLDS,
            "value": 2.0,
            "lo": 1.5,
            "hi": 2.5,
            "p": 0.01,
            "p_adjusted": 0.04,
            "smallest_effect": 0.0953,
            "detectable": 0.3,
            "units_to_settle": None,
            "n": 4,
            "units": "models",
            "clock": "wall",
        }
    }


def test_an_empty_findings_frame_keeps_its_header():
    assert list(F.findings_frame([]).columns)[:12] == ["id", "paper", "claim", "test", "n", "value", "lo", "hi", "p", "verdict", "detail", "clock"]


def test_depth_not_proportional_reads_fgm_or_pgd_cells_alone():
    for attack in ("fgm", "pgd"):
        tables = depth_tables(0.5)
        tables["trash"] = tables["trash"][tables["trash"]["attack"] == attack]
        result = check("003_depth_not_proportional", **tables)
        assert result.verdict == F.HOLDS and result.value == pytest.approx(0.5), attack


def test_depth_not_proportional_is_inconclusive_when_the_interval_holds_one():
    models = {"model": ["cifar_resnet8", "cifar_resnet14", "cifar_resnet20", "cifar_resnet32"], "depth": [8, 14, 20, 32]}
    t_train = [1.0, 2.0, 4.0, 8.0]
    trash = table("trash", **models, model_hash=["a", "b", "c", "d"], t_train=t_train, E_T=[1.0, 1.0, 8.0, 4.0])
    result = check("003_depth_not_proportional", trained=table("trained", **models, t_train=t_train), trash=trash)
    assert result.lo < 1 < result.hi and result.verdict == F.INCONCLUSIVE, (result.lo, result.hi)


def test_depth_not_proportional_is_inconclusive_when_e_t_grows_as_training_time():
    found = check("003_depth_not_proportional", **depth_tables(1.0))  # a slope of exactly 1: no difference at all
    assert (found.lo, found.hi) == (1.0, 1.0) and found.p == 1.0 and found.verdict == F.INCONCLUSIVE


def test_the_time_findings_name_their_test_and_what_they_need_when_not_testable():
    empty = F.Tables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    found = {f.id: f for f in F.check_findings(empty, SETTINGS)}
    assert found["003_deeper_trains_longer"].test.startswith("Spearman rho of depth and t_train over undefended trained models")
    assert found["003_depth_not_proportional"].test.startswith("slope b of log E[T] on log t_train over undefended trained models")
    assert found["003_depth_latency_not_queries"].test.startswith("slopes of log E[queries to failure] (TOST within the margin)")
    for id in ("003_deeper_trains_longer", "003_depth_not_proportional", "003_depth_latency_not_queries"):
        assert found[id].detail.startswith(F.NEEDS_DEPTHS), id


def test_the_time_findings_name_their_models_when_testable():
    tables = decomposition_tables(0.0, 1.3)
    proportional = check("003_depth_not_proportional", **tables)
    assert proportional.test.endswith("(3 models, cifar_resnet at epochs=1)") and proportional.detail.startswith("E[T] ~ t_train^0.5 over 3 trained models")
    latency = check("003_depth_latency_not_queries", **tables)
    assert latency.test.endswith("(3 models, cifar_resnet at epochs=1)")


def test_depth_latency_on_the_compute_clock_reads_flops_per_query():
    tables = decomposition_tables(0.0, 1.3)
    given = F.Tables(tables["trained"], pd.DataFrame(), tables["trash"], pd.DataFrame(), clock="flops")
    [found] = [f for f in F.check_findings(given, SETTINGS) if f.id == "003_depth_latency_not_queries"]
    assert found.verdict == F.HOLDS and "FLOPs per query ~ depth^1.3" in found.detail


def test_depth_latency_reads_undefended_fgm_or_pgd_cells_only():
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


def test_a_trash_finding_names_its_attack_and_what_it_needs():
    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0], seed=[0, 1]))
    assert found.test.startswith("geometric mean of TRASH over undefended trained models (FGM cells")
    assert found.detail.startswith("geometric mean TRASH 4 over 2 undefended trained models, 95% t interval")
    assert "(tested on the log scale: its smallest and detectable effects are logs)" in found.detail
    missing = check("003_trash_above_one_pgd", trash=table("trash", trash_adv=[2.0, 8.0]))
    assert missing.detail == "needs undefended PGD TRASH cells: add pgd to attack"


def test_a_trash_of_zero_is_left_out_of_the_geometric_mean():
    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[0.0, 4.0], seed=[0, 1]))
    assert found.verdict == F.NOT_TESTABLE
    assert found.detail == "needs >= 2 undefended trained models with a positive FGM TRASH; found 1: split.seeds=[0,1,2]"


def test_numbers_held_in_object_columns_still_count():
    # pandas keeps object dtype for a column concatenated from frames that lacked it
    found = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0], seed=[0, 1]).astype({"trash_adv": object}))
    assert found.value == pytest.approx(4.0)
    tables = decomposition_tables(0.0, 1.3)
    tables["trash"] = tables["trash"].assign(depth=tables["trash"]["depth"].astype(object))
    assert check("003_depth_latency_not_queries", **tables).verdict == F.HOLDS


def test_depth_not_proportional_leaves_out_models_without_positive_times():
    tables = depth_tables(0.5)
    trash = tables["trash"]
    for column in ("E_T", "t_train"):
        zero = trash.assign(**{column: np.where(trash["model_hash"] == "a", 0.0, trash[column])})
        left = check("003_depth_not_proportional", trained=tables["trained"], trash=zero)
        assert left.verdict == F.NOT_TESTABLE and "found 2" in left.detail, column


def test_evp_ranks_differently_weighs_each_groups_tau_by_its_size():
    # FGM: 3 configurations ranked oppositely (tau -1); PGD: 4 ranked alike (tau +1), in each seed
    groups = [("fgm linf", [0.9, 0.8, 0.7], [1.0, 2.0, 3.0]), ("pgd linf", [0.9, 0.8, 0.7, 0.6], [4.0, 3.0, 2.0, 1.0])]
    rows = [(family, f"resnet{i}", s, a + 0.01 * s, e + 0.01 * s) for family, acc, evp in groups for i, (a, e) in enumerate(zip(acc, evp)) for s in (0, 1)]
    family, model, seed, acc, evp = map(list, zip(*rows))
    robustness = table("robustness", attack_family=family, model=model, seed=seed, acc_ben=acc, evp=evp)
    found = check("001_evp_ranks_differently", robustness=robustness)
    assert found.value == pytest.approx(1 - (3 * -1 + 4 * 1) / 7)


def test_brittle_negative_names_its_test_and_says_how_the_seeds_agree():
    agreeing = table("brittle", brittle_score=[1.0, 2, 3, 4, 5, 6], robust_acc=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], seed=[0, 0, 0, 1, 1, 1])
    found = check("002_brittle_negative", brittle=agreeing)
    assert found.test.startswith("Spearman rho of brittle_score and robust_acc over 6 trained models")
    assert "; per seed: 0: -1.00, 1: -1.00; the sign agrees across seeds; Holm-adjusted p" in found.detail
    differing = agreeing.assign(robust_acc=[0.9, 0.8, 0.7, 0.4, 0.5, 0.6])
    assert "; per seed: 0: -1.00, 1: 1.00; the sign differs across seeds;" in check("002_brittle_negative", brittle=differing).detail
    pooled = check("002_brittle_negative", brittle=agreeing.iloc[1:5].assign(seed=[0, 0, 1, 1]))
    assert pooled.n == 4 and "; per seed: none; no seed has >= 3 cells;" in pooled.detail
    assert check("002_brittle_negative", brittle=agreeing.iloc[:3]).verdict == F.NOT_TESTABLE


def test_the_permutation_tests_follow_the_configured_seed_past_eight_units():
    rng = np.random.default_rng(2)
    brittle = table("brittle", brittle_score=list(rng.normal(size=12)), robust_acc=list(rng.normal(size=12)), seed=list(range(12)))
    given = F.Tables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), brittle)
    first, again, other = ({f.id: f for f in F.check_findings(given, F.replace(SETTINGS, seed=s))}["002_brittle_negative"] for s in (5, 5, 6))
    assert first.p == again.p and first.p != other.p
