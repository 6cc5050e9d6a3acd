"""The papers' claims on hand-made tables: each finding holds, is contradicted and is not testable
where it should be, with a few statistics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from trashfire.metrics import findings as F

LABELS = {
    "dataset": "digits",
    "pretrained_on": None,
    "seed": 0,
    "model": "resnet18",
    "depth": 18,
    "epochs": 1,
    "lr": 0.05,
    "defence": "none",
    "degenerate": False,
}
DEFAULTS = {
    "trained": LABELS | {"t_train": 1.0, "acc_ben": 0.9},
    "robustness": LABELS
    | {"attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "acc_ben": 0.9, "evp": 1.0, "auc_R": 0.5, "reaches_nonviability": True},
    "trash": LABELS | {"attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "t_train": 1.0, "E_T": 0.01, "trash_adv": 2.0},
    "brittle": LABELS | {"brittle_score": 0.5, "robust_acc": 0.5},
}
IDS = [
    "003_deeper_trains_longer",
    "003_depth_not_proportional",
    "003_depth_latency_not_queries",
    "003_trash_above_one_fgm",
    "003_trash_above_one_pgd",
    "001_adv_train_raises_evp",
    "001_evp_ranks_differently",
    "002_brittle_negative",
    "002_adv_train_lowers_brittle",
    "004_r_rises_with_epochs",
    "004_pretraining_effect",
]


def table(kind: str, **columns) -> pd.DataFrame:
    """A table of `kind` from a few columns (lists give rows, scalars repeat); the rest default."""
    n = max(len(v) for v in columns.values() if isinstance(v, list))
    rows = pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in columns.items()})
    for k, v in DEFAULTS[kind].items():
        if k not in rows:
            rows[k] = [v] * n
    hash_column = "train_hash" if kind == "trained" else "model_hash"
    if hash_column not in rows:
        rows[hash_column] = [f"h{i}" for i in range(n)]
    return rows


def check(finding_id: str, **tables) -> F.Finding:
    given = F.Tables(**{k: tables.get(k, pd.DataFrame()) for k in ("trained", "robustness", "trash", "brittle")})
    [result] = [f for f in F.check_findings(given, resamples=500, seed=0) if f.id == finding_id]
    assert result.verdict in F.VERDICTS
    return result


def assert_not_testable(result: F.Finding, hint: str):
    assert result.verdict == "not testable"
    assert result.n == 0 and math.isnan(result.value)
    assert hint in result.detail


# --- 003_deeper_trains_longer ------------------------------------------------------------------

CIFAR = {"model": ["cifar_resnet8", "cifar_resnet14", "cifar_resnet20"] * 3, "depth": [8, 14, 20] * 3, "seed": [0] * 3 + [1] * 3 + [2] * 3}


def test_deeper_trains_longer_holds_and_is_contradicted():
    t = [d + 0.1 * s for d, s in zip(CIFAR["depth"], CIFAR["seed"])]
    result = check("003_deeper_trains_longer", trained=table("trained", **CIFAR, t_train=t))
    # Depth ranks tie in threes (2, 5, 8) against t_train's 1..9: Pearson of the ranks = sqrt(0.9).
    assert result.verdict == "holds" and result.value == pytest.approx(math.sqrt(0.9)) and result.n == 9
    result = check("003_deeper_trains_longer", trained=table("trained", **CIFAR, t_train=[-x for x in t]))
    assert result.verdict == "contradicted" and result.value == pytest.approx(-math.sqrt(0.9))


def test_deeper_trains_longer_rho_by_hand():
    # ranks (1,2,3,4) vs (1,3,2,4): sum d^2 = 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8; too few to be significant.
    trained = table("trained", model=["m8", "m14", "m20", "m32"], depth=[8, 14, 20, 32], t_train=[1.0, 3.0, 2.0, 4.0])
    result = check("003_deeper_trains_longer", trained=trained)
    assert result.value == pytest.approx(0.8) and result.n == 4 and result.verdict == "inconclusive"


def test_deeper_trains_longer_picks_the_family_and_epochs_with_most_depths():
    # resnet has 2 depths (ignored); of cifar_resnet's epochs, 10 covers 3 depths, 1 only one.
    trained = table(
        "trained",
        model=["resnet18", "resnet34", "cifar_resnet8", "cifar_resnet14", "cifar_resnet20", "cifar_resnet8", "cifar_resnet8"],
        depth=[18, 34, 8, 14, 20, 8, 8],
        epochs=[1, 1, 10, 10, 10, 1, 10],
        t_train=[9.0, 0.1, 1.0, 2.0, 3.0, 100.0, 1.1],
        seed=[0, 0, 0, 0, 0, 0, 1],
    )
    result = check("003_deeper_trains_longer", trained=trained)
    assert result.n == 4 and "cifar_resnet at epochs=10" in result.detail


def test_deeper_trains_longer_not_testable_with_two_depths():
    trained = table("trained", model=["resnet18", "resnet34"], depth=[18, 34], t_train=[1.0, 2.0])
    assert_not_testable(check("003_deeper_trains_longer", trained=trained), "model=[cifar_resnet8")


def test_degenerate_trained_models_are_excluded():
    # With them, shallow models would train for 100 s and deep ones for 0.01 s: rho < 0.
    t = [d + 0.1 * s for d, s in zip(CIFAR["depth"], CIFAR["seed"])]
    trained = table(
        "trained",
        model=CIFAR["model"] + ["cifar_resnet8"] * 6 + ["cifar_resnet20"] * 6,
        depth=CIFAR["depth"] + [8] * 6 + [20] * 6,
        t_train=t + [100.0] * 6 + [0.01] * 6,
        degenerate=[False] * 9 + [True] * 12,
    )
    result = check("003_deeper_trains_longer", trained=trained)
    assert result.verdict == "holds" and result.n == 9
    included = check("003_deeper_trains_longer", trained=trained.assign(degenerate=False))
    assert included.verdict != "holds"


# --- 003_depth_not_proportional ----------------------------------------------------------------

THREE = {"model": ["cifar_resnet8", "cifar_resnet14", "cifar_resnet20"], "depth": [8, 14, 20]}


def depth_tables(power: float, attack: str = "fgm"):
    t_train = [1.0, 2.0, 4.0]
    trained = table("trained", **THREE, t_train=t_train)
    # Two attack rows per model, averaged per model before the fit.
    trash = table(
        "trash",
        model=THREE["model"] * 2,
        depth=THREE["depth"] * 2,
        model_hash=["a", "b", "c"] * 2,
        attack=[attack] * 3 + ["pgd" if attack == "fgm" else attack] * 3,
        t_train=t_train * 2,
        E_T=[t**power for t in t_train] * 2,
    )
    return {"trained": trained, "trash": trash}


def test_depth_not_proportional_slope_by_hand():
    result = check("003_depth_not_proportional", **depth_tables(0.5))
    # log E_T = 0.5 log t_train exactly, so every bootstrap slope is 0.5 too.
    assert result.value == pytest.approx(0.5) and result.n == 3
    assert result.lo == pytest.approx(0.5) and result.hi == pytest.approx(0.5)
    assert result.verdict == "holds"


def test_depth_not_proportional_contradicted_when_E_T_outgrows_training_time():
    result = check("003_depth_not_proportional", **depth_tables(2.0))
    assert result.verdict == "contradicted" and result.value == pytest.approx(2.0)


def test_depth_not_proportional_not_testable_without_fgm_or_pgd():
    assert_not_testable(check("003_depth_not_proportional", **depth_tables(0.5, attack="deepfool")), "attack=[fgm,pgd]")
    assert_not_testable(check("003_depth_not_proportional"), "model=[cifar_resnet8")


# --- 003_depth_latency_not_queries --------------------------------------------------------------


def decomposition_tables(queries_power: float, latency_power: float):
    """E[queries] ~ depth^queries_power and latency ~ depth^latency_power, exactly."""
    tables = depth_tables(0.5)
    depth = np.array(THREE["depth"] * 2, dtype=float)
    tables["trash"] = tables["trash"].assign(
        E_Q=(depth / 8) ** queries_power * 6.0, flops_per_query=(depth / 8) ** latency_power * 1e6, seconds_per_query_process=(depth / 8) * 1e-4
    )
    return tables


def test_depth_raises_the_latency_not_the_queries_by_hand():
    result = check("003_depth_latency_not_queries", **decomposition_tables(0.0, 1.3))
    # every bootstrap slope is exact: queries 0, latency 1.3
    assert result.value == pytest.approx(0.0, abs=1e-12) and result.lo == pytest.approx(0.0, abs=1e-12)
    assert result.verdict == "holds" and "depth^1.3" in result.detail and "FLOPs per query" in result.detail


def test_depth_raising_the_queries_more_than_the_latency_contradicts_it():
    result = check("003_depth_latency_not_queries", **decomposition_tables(1.5, 0.5))
    assert result.verdict == "contradicted" and result.value == pytest.approx(1.5)


def test_robust_and_slower_is_not_latency_alone():
    # both rise: the queries' slope is above 0, so depth buys robustness too
    assert check("003_depth_latency_not_queries", **decomposition_tables(0.5, 1.5)).verdict == "contradicted"


def test_fewer_queries_without_slower_queries_is_not_latency():
    # queries fall with depth and latency stays flat: the latency slope is not above 0
    assert check("003_depth_latency_not_queries", **decomposition_tables(-1.0, 0.0)).verdict == "inconclusive"


def test_time_findings_run_on_every_other_clock_with_its_columns():
    tables = decomposition_tables(0.0, 1.3)
    trash = tables["trash"].assign(t_train_process=tables["trash"]["t_train"], E_T_process=tables["trash"]["E_T"] ** 4, trash_adv_process=0.5)
    given = F.Tables(
        trained=tables["trained"].assign(t_train_process=tables["trained"]["t_train"]),
        robustness=pd.DataFrame(),
        trash=trash,
        brittle=pd.DataFrame(),
        clock="flops",
    )
    results = {f.id: f for f in F.check_findings(given, resamples=500, seed=0, other_clocks=("process",))}
    assert results["003_depth_not_proportional"].clock == "flops" and results["003_depth_not_proportional"].verdict == "holds"
    # on the process clock E[T] ~ t_train^2: the same claim is contradicted there, and both are shown
    on_process = results["003_depth_not_proportional@process"]
    assert on_process.clock == "process" and on_process.verdict == "contradicted" and on_process.value == pytest.approx(2.0)
    assert "process seconds per query" in results["003_depth_latency_not_queries@process"].detail
    assert results["001_adv_train_raises_evp"].clock == ""  # no time in it: tested once


# --- 003_trash_above_one_* ----------------------------------------------------------------------


def test_trash_geometric_mean_of_2_and_8_is_4_and_holds():
    result = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0]))
    assert result.value == pytest.approx(4.0) and result.n == 2
    assert result.lo >= 2.0 - 1e-9 and result.hi <= 8.0 + 1e-9
    assert result.verdict == "holds"


def test_trash_pgd_contradicted_and_other_attacks_and_defences_ignored():
    trash = table("trash", attack=["pgd", "pgd", "fgm", "pgd"], trash_adv=[0.1, 0.5, 100.0, 100.0], defence=["none", "none", "none", "fsq"])
    result = check("003_trash_above_one_pgd", trash=trash)
    assert result.verdict == "contradicted" and result.value == pytest.approx(math.sqrt(0.05)) and result.n == 2


def test_trash_not_testable_without_the_attack():
    assert_not_testable(check("003_trash_above_one_pgd", trash=table("trash", trash_adv=[2.0, 8.0])), "add pgd to attack")


def test_trash_not_testable_without_a_trash_names_what_is_missing_on_the_clock():
    """Cells of the attack without a TRASH: an unknown t_train (what to give) or a missing E[T]."""
    no_t_train = table("trash", attack="pgd", t_train=[np.nan, np.nan], trash_adv=np.nan)
    given = F.Tables(trained=pd.DataFrame(), robustness=pd.DataFrame(), trash=no_t_train, brittle=pd.DataFrame(), clock="flops")
    [result] = [f for f in F.check_findings(given, resamples=100, seed=0) if f.id == "003_trash_above_one_pgd"]
    assert_not_testable(result, "needs a TRASH for the undefended PGD cells: their t_train is unknown on the flops clock")
    assert "give model.<name>.t_train.flops" in result.detail and result.test == check("003_trash_above_one_pgd", trash=no_t_train.assign(trash_adv=2.0)).test
    no_e_t = table("trash", attack="pgd", E_T=[np.nan, np.nan], trash_adv=np.nan)
    assert_not_testable(check("003_trash_above_one_pgd", trash=no_e_t), "their E[T] is missing on the configured clock")


def test_degenerate_trash_rows_are_excluded():
    # With the two degenerate cells the geometric mean would be (2 * 8 * 1e-6 * 1e-6) ** 0.25 < 1.
    trash = table("trash", trash_adv=[2.0, 8.0, 1e-6, 1e-6], degenerate=[False, False, True, True])
    result = check("003_trash_above_one_fgm", trash=trash)
    assert result.verdict == "holds" and result.value == pytest.approx(4.0) and result.n == 2


# --- 001_adv_train_raises_evp ------------------------------------------------------------------


def evp_table(none, adv, reaches=True):
    seeds = list(range(len(none)))
    return table(
        "robustness",
        seed=seeds + seeds[: len(adv)],
        defence=["none"] * len(none) + ["adv_train"] * len(adv),
        evp=list(none) + list(adv),
        reaches_nonviability=[True] * len(none) + (reaches if isinstance(reaches, list) else [reaches] * len(adv)),
    )


def test_adv_train_raises_evp_paired_mean_by_hand():
    result = check("001_adv_train_raises_evp", robustness=evp_table([1.0, 1.0, 1.0], [2.0, 2.5, 3.0], reaches=[True, False, True]))
    assert result.value == pytest.approx(1.5) and result.n == 3 and result.verdict == "holds"
    assert "1 of 3 adv_train curves do not reach non-viability" in result.detail


def test_adv_train_raises_evp_contradicted():
    result = check("001_adv_train_raises_evp", robustness=evp_table([2.0, 2.5, 3.0], [1.0, 1.0, 1.1]))
    assert result.verdict == "contradicted"


def test_adv_train_raises_evp_not_testable_without_adv_train():
    assert_not_testable(check("001_adv_train_raises_evp", robustness=evp_table([1.0, 2.0], [])), "add adv_train")


# --- 001_evp_ranks_differently -----------------------------------------------------------------


def ranking_table(acc, evp, seeds=(0, 1), noise=0.01):
    models = ["resnet18", "resnet34", "resnet50"]
    rows = [(m, s, a + noise * s, e + noise * s) for m, a, e in zip(models, acc, evp) for s in seeds]
    m, s, a, e = map(list, zip(*rows))
    return table("robustness", model=m, seed=s, acc_ben=a, evp=e)


def test_evp_ranks_differently_holds_when_orders_reverse_beyond_noise():
    result = check("001_evp_ranks_differently", robustness=ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0]))
    assert result.verdict == "holds" and result.n == 3 and result.value == pytest.approx(-1.0)
    assert result.detail.startswith("3 of 3 pairs ordered oppositely beyond")


def test_evp_ranks_differently_contradicted_when_orders_agree():
    result = check("001_evp_ranks_differently", robustness=ranking_table([0.9, 0.8, 0.7], [3.0, 2.0, 1.0]))
    assert result.verdict == "contradicted" and result.value == pytest.approx(1.0)


def test_evp_ranks_differently_inconclusive_within_seed_noise():
    result = check("001_evp_ranks_differently", robustness=ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0], noise=5.0))
    assert result.verdict == "inconclusive"


def test_evp_ranks_differently_not_testable_with_one_seed_or_two_configurations():
    one_seed = ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0], seeds=(0,))
    assert_not_testable(check("001_evp_ranks_differently", robustness=one_seed), "split.seeds=[0,1,2]")
    two = ranking_table([0.9, 0.8, 0.7], [1.0, 2.0, 3.0])
    two = two[two["model"] != "resnet50"]
    assert_not_testable(check("001_evp_ranks_differently", robustness=two), ">= 3 configurations")


# --- 002_brittle_negative ----------------------------------------------------------------------


def test_brittle_negative_holds_with_per_seed_detail():
    brittle = table("brittle", brittle_score=[1.0, 2, 3, 4, 5, 6], robust_acc=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], seed=[0, 0, 0, 1, 1, 1])
    result = check("002_brittle_negative", brittle=brittle)
    assert result.verdict == "holds" and result.value == pytest.approx(-1.0) and result.n == 6
    assert "per seed: 0: -1.00, 1: -1.00" in result.detail and "agrees" in result.detail


def test_brittle_negative_leaves_predict_time_defences_out_and_says_what_they_do():
    # the trained models fall with robust accuracy; an output-noise wrapper has a low score and no robustness
    brittle = table(
        "brittle",
        brittle_score=[3.0, 2, 1, 0.5, 0.4],
        robust_acc=[0.2, 0.4, 0.6, 0.2, 0.2],
        seed=0,
        defence_stage=["none", "train", "train", "predict", "predict"],
    )
    result = check("002_brittle_negative", brittle=brittle)
    assert result.n == 3 and result.value == pytest.approx(-1.0)
    assert "with the 2 predict-time defended cells too: rho" in result.detail
    assert F.brittle_spearman_per_seed(brittle)["0"]["n"] == 3


def test_brittle_negative_contradicted():
    brittle = table("brittle", brittle_score=[1.0, 2, 3, 4, 5, 6], robust_acc=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert check("002_brittle_negative", brittle=brittle).verdict == "contradicted"


def test_brittle_negative_not_testable_with_two_rows_or_a_constant_column():
    assert_not_testable(check("002_brittle_negative", brittle=table("brittle", brittle_score=[1.0, 2.0])), ">= 3")
    constant = table("brittle", brittle_score=[1.0, 2.0, 3.0], robust_acc=0.5)
    assert_not_testable(check("002_brittle_negative", brittle=constant), ">= 3")


def test_brittle_spearman_per_seed_by_hand():
    brittle = table("brittle", seed=[0, 0, 0, 1, 1, 1, 1, 2, 2], brittle_score=[1.0, 2, 3, 1, 2, 3, 4, 1, 2], robust_acc=[3.0, 2, 1, 1, 3, 2, 4, 1, 2])
    per_seed = F.brittle_spearman_per_seed(brittle)
    assert set(per_seed) == {"0", "1", "2"}
    assert per_seed["0"]["rho"] == pytest.approx(-1.0) and per_seed["0"]["n"] == 3
    assert per_seed["1"]["rho"] == pytest.approx(0.8) and per_seed["1"]["n"] == 4
    assert per_seed["2"] == {"rho": None, "p": None, "n": 2}


# --- 002_adv_train_lowers_brittle --------------------------------------------------------------


def brittle_pairs(none, adv):
    seeds = list(range(len(none)))
    return table("brittle", seed=seeds + seeds[: len(adv)], defence=["none"] * len(none) + ["adv_train"] * len(adv), brittle_score=list(none) + list(adv))


def test_adv_train_lowers_brittle_holds_with_paired_mean():
    result = check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.8, 0.9, 0.7], [0.3, 0.5, 0.4]))
    assert result.verdict == "holds" and result.value == pytest.approx(-0.4) and result.n == 3


def test_adv_train_lowers_brittle_contradicted():
    result = check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.3, 0.5, 0.4], [0.8, 0.9, 0.7]))
    assert result.verdict == "contradicted"


def test_adv_train_lowers_brittle_not_testable():
    assert_not_testable(check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.3, 0.5], [])), "add adv_train")
    assert_not_testable(check("002_adv_train_lowers_brittle", brittle=brittle_pairs([0.3, 0.5], [0.1])), "found 1")


# --- 004_r_rises_with_epochs -------------------------------------------------------------------


def epochs_table(first, last, middle=0.0):
    seeds = list(range(len(first)))
    return table(
        "robustness", seed=seeds * 3, epochs=[1] * len(first) + [5] * len(first) + [10] * len(first), auc_R=list(first) + [middle] * len(first) + list(last)
    )


def test_r_rises_with_epochs_uses_largest_minus_smallest():
    result = check("004_r_rises_with_epochs", robustness=epochs_table([0.44, 0.40, 0.42], [0.55, 0.50, 0.52]))
    assert result.verdict == "holds" and result.value == pytest.approx(0.1033333) and result.n == 3


def test_r_rises_with_epochs_contradicted():
    result = check("004_r_rises_with_epochs", robustness=epochs_table([0.55, 0.50, 0.52], [0.44, 0.40, 0.42], 1.0))
    assert result.verdict == "contradicted"


def test_r_rises_with_epochs_not_testable_with_one_epoch_value():
    robustness = table("robustness", seed=[0, 1, 2], auc_R=[0.4, 0.5, 0.6])
    assert_not_testable(check("004_r_rises_with_epochs", robustness=robustness), "train.epochs=[6,10]")


def test_r_rises_with_epochs_names_what_it_found_when_not_testable():
    """The epochs the cells had, or the R they lacked: the real reason, not only the grid's."""
    one_epoch = table("robustness", seed=[0, 1, 2], epochs=6, auc_R=[0.4, 0.5, 0.6])
    assert_not_testable(check("004_r_rises_with_epochs", robustness=one_epoch), "found epochs 6 per otherwise equal cell")
    without_r = table("robustness", seed=[0, 1, 0, 1], epochs=[1, 1, 2, 2], auc_R=np.nan)
    assert_not_testable(check("004_r_rises_with_epochs", robustness=without_r), "epochs 1, 2 found, and no cell has an R")
    no_r_column = without_r.drop(columns="auc_R")
    assert_not_testable(check("004_r_rises_with_epochs", robustness=no_r_column), "epochs 1, 2 found, and no cell has an R")
    unknown_epochs = table("robustness", seed=[0, 1], epochs=np.nan, auc_R=[0.4, 0.5])
    assert_not_testable(check("004_r_rises_with_epochs", robustness=unknown_epochs), "no cell with known epochs: imported models' training is unknown")


# --- 004_pretraining_effect --------------------------------------------------------------------


def pretrained_table(scratch, pretrained):
    seeds = list(range(len(scratch)))
    return table(
        "robustness",
        seed=seeds + seeds[: len(pretrained)],
        pretrained_on=[None] * len(scratch) + ["cifar10"] * len(pretrained),
        auc_R=list(scratch) + list(pretrained),
    )


def test_pretraining_effect_holds_when_no_gain():
    # d = (-0.05, +0.05, 0.0): the interval straddles 0, which is what the null claim expects.
    result = check("004_pretraining_effect", robustness=pretrained_table([0.5, 0.5, 0.5], [0.45, 0.55, 0.5]))
    assert result.verdict == "holds" and result.value == pytest.approx(0.0) and result.lo < 0 < result.hi


def test_pretraining_effect_contradicted_by_a_gain():
    result = check("004_pretraining_effect", robustness=pretrained_table([0.4, 0.45, 0.5], [0.6, 0.6, 0.65]))
    assert result.verdict == "contradicted" and result.lo > 0


def test_pretraining_effect_not_testable_without_pretrained_cells():
    assert_not_testable(check("004_pretraining_effect", robustness=pretrained_table([0.4, 0.5], [])), "train.pretrained_on")


# --- Output ------------------------------------------------------------------------------------


def test_every_finding_not_testable_on_empty_tables_and_metrics_turn_nan_into_none():
    empty = F.Tables(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    results = F.check_findings(empty, resamples=500, seed=0)
    assert [f.id for f in results] == IDS
    assert {f.verdict for f in results} == {"not testable"}
    metrics = F.findings_metrics(results)
    assert list(metrics) == IDS
    assert all(m == {"verdict": "not testable", "value": None, "lo": None, "hi": None, "p": None, "n": 0} for m in metrics.values())
    frame = F.findings_frame(results)
    assert len(frame) == len(IDS) and list(frame.columns) == ["id", "paper", "claim", "test", "n", "value", "lo", "hi", "p", "verdict", "detail", "clock"]


def test_trash_above_one_says_the_trash_is_missing_not_the_attack():
    """FGM cells whose TRASH is NaN (an imported model without FLOPs on the compute clock):
    the reason is the unknown t_train, not a grid without FGM."""
    unknown = table("trash", trash_adv=[np.nan, np.nan], t_train=np.nan)
    assert_not_testable(check("003_trash_above_one_fgm", trash=unknown), "t_train is unknown on the configured clock")
    no_e_t = table("trash", trash_adv=[np.nan, np.nan], t_train=[1.0, 2.0])
    assert_not_testable(check("003_trash_above_one_fgm", trash=no_e_t), "E[T] is missing")


def test_findings_metrics_keeps_numbers():
    result = check("003_trash_above_one_fgm", trash=table("trash", trash_adv=[2.0, 8.0]))
    metric = F.findings_metrics([result])["003_trash_above_one_fgm"]
    assert metric["verdict"] == "holds" and metric["value"] == pytest.approx(4.0) and metric["p"] is None
    assert metric["n"] == 2 and isinstance(metric["lo"], float)


def test_bootstrap_is_seeded():
    trash = table("trash", trash_adv=list(np.linspace(0.5, 3.0, 7)))
    given = F.Tables(pd.DataFrame(), pd.DataFrame(), trash, pd.DataFrame())
    a, b = ({f.id: f for f in F.check_findings(given, resamples=500, seed=3)}["003_trash_above_one_fgm"] for _ in range(2))
    assert (a.lo, a.hi) == (b.lo, b.hi) and a.lo < a.hi  # an interval, not NaN = NaN
