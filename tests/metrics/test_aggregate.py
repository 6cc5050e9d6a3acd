"""The aggregate's metrics on hand-made cells, each against values computed by hand."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats

from trashfire import metrics
from trashfire.core import schema
from trashfire.metrics import aggregate as aggregation
from trashfire.metrics.cards import write_cards

LABELS = {
    "dataset": "digits",
    "pretrained_on": None,
    "seed": 0,
    "model": "resnet18",
    "depth": 18,
    "epochs": 1,
    "lr": 0.05,
    "defence": "none",
    "defence_param": None,
    "defence_value": 0.0,
}
EVP = OmegaConf.create({"w": 0.5, "tau": None})
PIXEL_AUC = OmegaConf.create({"units": "pixel", "eps0": 0.0, "eps1": 0.3})


def attack_rows(model_hash="m0", eps=(0.5, 1.0), acc=(0.6, 0.2), acc_ben=0.8, pixel_std=0.4, **labels):
    """One model cell's FGM linf cells: eps in standardised units."""
    base = (
        LABELS
        | labels
        | {
            "model_hash": model_hash,
            "train_hash": f"t{model_hash}",
            "attack": "fgm",
            "norm": "inf",
            "attack_param": "eps",
            "attack_units": "standardised",
            "n_classes": 10,
            "n_attack": 100,
            "acc_ben": acc_ben,
            "acc_ben_attack_subset": acc_ben,
            "pixel_std": pixel_std,
        }
    )
    return [base | {"attack_value": e, "attack_value_standardised": e, "acc_adv": a, "attack_hash": f"{model_hash}-{e}"} for e, a in zip(eps, acc)]


def experiments(*cells):
    return aggregation.with_family(pd.DataFrame([row for cell in cells for row in cell]))


def test_curves_start_at_the_benign_point_in_three_units_and_normalise():
    curves = aggregation.eps_curves(experiments(attack_rows()))
    assert list(curves["eps_standardised"]) == [0.0, 0.5, 1.0]
    assert list(curves["eps_pixel"]) == pytest.approx([0.0, 0.2, 0.4])
    assert list(curves["acc"]) == [0.8, 0.6, 0.2]
    assert list(curves["acc_norm"]) == pytest.approx([1.0, 0.75, 0.25])
    assert set(curves["attack_family"]) == {"fgm linf"}


def test_auc_over_a_pixel_interval_converts_by_the_training_std():
    # eps_pixel [0, .2, .4], acc [.8, .6, .2]; f(.3) = .4 by interpolation
    # area = .2 (.8 + .6) / 2 + .1 (.6 + .4) / 2 = .19; R = .19 / (.8 * .3)
    row = aggregation.robustness_table(aggregation.eps_curves(experiments(attack_rows())), EVP, PIXEL_AUC).iloc[0]
    assert row["auc_R"] == pytest.approx(0.19 / 0.24)
    assert row["auc_S"] == pytest.approx(1 - 0.19 / 0.24)
    standardised = OmegaConf.create({"units": "standardised", "eps0": 0.0, "eps1": 0.75})  # = 0.3 / 0.4
    same = aggregation.robustness_table(aggregation.eps_curves(experiments(attack_rows())), EVP, standardised).iloc[0]
    assert same["auc_R"] == pytest.approx(row["auc_R"])
    # tau(10) = .25: g = [.8, .6, 0] on x = [0, .5, 1] -> .5 (1.4) / 2 + .5 (.6) / 2
    assert row["tau"] == pytest.approx(0.25) and row["evp"] == pytest.approx(0.5)


def test_auc_notes_a_cell_it_cannot_score_instead_of_failing():
    zero = attack_rows(acc_ben=0.0, acc=(0.0, 0.0))
    short = attack_rows("m1", eps=(0.25, 0.5))  # reaches eps_pixel 0.2 < 0.3
    unknown = attack_rows("m2", pixel_std=float("nan"))
    table = aggregation.robustness_table(aggregation.eps_curves(experiments(zero, short, unknown)), EVP, PIXEL_AUC).set_index("model_hash")
    assert table["auc_R"].isna().all()
    assert "f(eps0) > 0" in table.loc["m0", "note"]
    assert "outside the measured eps range" in table.loc["m1", "note"]
    assert "pixel_std not recorded" in table.loc["m2", "note"]


def test_evp_over_thresholds_steps_down_at_each_measured_accuracy():
    # eps [0, .5, 1], P [.9, .2, .5]: tau 0 -> all viable (.275 + .175); .3 -> g [.9, 0, .5]; .6 -> g [.9, 0, 0]
    values = metrics.evp_over_thresholds([0, 0.5, 1.0], [0.9, 0.2, 0.5], [0.0, 0.3, 0.6, 0.95])
    assert values == pytest.approx([0.45, 0.35, 0.225, 0.0])


def test_evp_dips_below_tau_and_recovers_over_four_intervals():
    # P falls below tau = .42 at eps 2, recovers at eps 3, falls again at 4: g = [1, .9, 0, .45, 0]
    # on x = [0, .25, .5, .75, 1]: .25 (.95 + .45 + .225 + .225) = .4625
    assert metrics.evp([0, 1, 2, 3, 4], [1.0, 0.9, 0.3, 0.45, 0.4], tau=0.42) == pytest.approx(0.4625)


def test_evp_convergence_on_nested_subgrids():
    # P = [1, .9, .5, .45, .4] on eps 0..4, all viable:
    # 1 interval [0, 4]: (1 + .4) / 2 = .7; 2 intervals [0, 2, 4]: .5 (1.5) / 2 + .5 (.9) / 2 = .6;
    # 4 intervals: .25 (.95 + .7 + .475 + .425) = .6375
    points = metrics.evp_convergence([0, 1, 2, 3, 4], [1.0, 0.9, 0.5, 0.45, 0.4], tau=0.1)
    assert [n for n, _ in points] == [1, 2, 4]
    assert [v for _, v in points] == pytest.approx([0.7, 0.6, 0.6375])


def test_tau_table_reproduces_001_table_i():
    table = aggregation.tau_table([2, 5, 10, 100, 1000], 0.5, {"digits": 10, "cifar100": 100})
    paper = table[table["source"] == "001 Table I"].set_index("n_classes")["tau"]
    # 75%, 40%, 25%, 6%, 1.7% as printed (rounded there)
    assert paper.round(3).to_dict() == {2: 0.75, 5: 0.4, 10: 0.25, 100: 0.06, 1000: 0.017}
    assert table.set_index("source").loc["cifar100", "tau"] == pytest.approx(0.01 + 0.5 * math.sqrt(99) / 100)


def test_trash_summary_bootstraps_over_seeds():
    trash = pd.DataFrame(
        [
            LABELS
            | {
                "model_hash": f"m{s}",
                "seed": s,
                "attack": "fgm",
                "norm": "inf",
                "attack_family": "fgm linf",
                "trash_adv": t,
                "trash_ben": 1.0,
                "f_ben": 1.0,
                "f_adv": 2.0,
            }
            for s, t in ((0, 2.0), (1, 4.0))
        ]
    )
    row = aggregation.trash_summary(trash).iloc[0]
    assert row["n_seeds"] == 2 and row["trash_adv_mean"] == pytest.approx(math.sqrt(8.0))  # the geometric mean of 2 and 4
    # two seeds: mean log (log 2 + log 4) / 2 +- t(0.975, 1) x (log 2 / 2), far wider than the two values
    half = stats.t.ppf(0.975, 1) * math.log(2) / 2
    assert (row["trash_adv_lo"], row["trash_adv_hi"]) == pytest.approx((math.sqrt(8) * math.exp(-half), math.sqrt(8) * math.exp(half)))
    assert np.isnan(row["trash_ben_lo"]) and np.isnan(row["trash_ben_hi"])  # both seeds' 1.0: no spread, no interval
    one = metrics.mean_interval([5.0])  # one seed: no interval
    assert one[0] == 5.0 and np.isnan(one[1]) and np.isnan(one[2])


def test_auc_table_mean_and_sd_across_seeds():
    robustness = pd.DataFrame(
        [
            LABELS | {"model_hash": f"m{s}", "seed": s, "attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "auc_R": r, "auc_S": 1 - r}
            for s, r in ((0, 0.6), (1, 0.8))
        ]
    )
    row = aggregation.auc_table(robustness).iloc[0]
    assert (row["n_seeds"], row["R_mean"], row["S_mean"]) == (2, pytest.approx(0.7), pytest.approx(0.3))
    assert row["R_sd"] == pytest.approx(math.sqrt(0.02)) and row["S_sd"] == pytest.approx(math.sqrt(0.02))


def test_relative_improvement_against_the_undefended_model():
    assert metrics.relative_improvement(0.5, 0.1) == pytest.approx(80.0)
    assert metrics.relative_improvement(0.5, 0.6) == pytest.approx(-20.0)
    assert math.isnan(metrics.relative_improvement(0.0, 0.1))
    brittle = pd.DataFrame(
        [LABELS | {"model_hash": h, "defence": d, "brittle_score": b} for h, d, b in (("a", "none", 0.5), ("b", "conf", 0.1), ("c", "fsq", 0.6))]
        + [LABELS | {"model_hash": "d", "seed": 1, "defence": "conf", "brittle_score": 0.2}]
    )
    exp = experiments(attack_rows("a", acc=(0.5, 0.3)), attack_rows("b", acc=(0.9, 0.7)))
    exp = pd.concat([exp, exp.assign(attack="pgd", attack_family="pgd linf", acc_adv=exp["acc_adv"] - 0.1)])
    robust = OmegaConf.create({"attack": "pgd", "norm": "inf", "eps": None})
    table = aggregation.brittle_table(brittle, exp, robust).set_index("model_hash")
    assert table.loc[["a", "b", "c"], "brittle_ri"].tolist() == pytest.approx([0.0, 80.0, -20.0])
    assert math.isnan(table.loc["d", "brittle_ri"])  # no undefended model with seed 1
    assert table.loc["a", "robust_acc"] == pytest.approx(0.3) and table.loc["b", "robust_acc"] == pytest.approx(0.7)
    at_one = aggregation.robust_accuracy(exp, OmegaConf.create({"attack": "pgd", "norm": "inf", "eps": 1.0}))
    assert at_one["a"] == pytest.approx(0.2)


def test_spearman_within_each_dataset():
    brittle = pd.DataFrame(
        {"dataset": ["digits"] * 4 + ["mnist"] * 2, "brittle_score": [0.1, 0.2, 0.3, 0.4, 0.1, 0.2], "robust_acc": [0.9, 0.7, 0.5, 0.1, 0.3, 0.2]}
    )
    result = aggregation.spearman_by_dataset(brittle)
    assert result["digits"]["rho"] == pytest.approx(-1.0) and result["digits"]["n"] == 4
    assert math.isnan(result["mnist"]["rho"])  # fewer than three cells


def test_cards_hold_each_model_cell_and_drop_stale_ones(tmp_path):
    exp = experiments(attack_rows("a"), attack_rows("b", defence="conf"))
    exp = exp.assign(
        train_hash="t0",
        t_train=0.01,
        t_train_process=0.01,
        t_train_wall=0.02,
        clock="process",
        n_train=1000,
        t_predict=1e-4,
        t_attack=1e-3,
        t_attack_process=1e-3,
        t_attack_wall=2e-3,
    )
    trash = aggregation.trash_table(exp, pd.DataFrame({"attack_hash": exp["attack_hash"], "E_T": 0.002}), None)
    robustness = aggregation.robustness_table(aggregation.eps_curves(exp), EVP, PIXEL_AUC)
    brittle = pd.DataFrame({"model_hash": ["a", "b"], "brittle_score": [0.4, 0.1], "brittle_ri": [0.0, 75.0]})
    (tmp_path / "gone.json").write_text("{}")
    [path] = write_cards(tmp_path, exp, trash, robustness, brittle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t0.json"]
    card = json.loads(path.read_text())
    assert card["training"]["model"] == "resnet18" and card["times_per_sample"]["t_train"] == 0.01
    cells = {c["defence"]["defence"]: c for c in card["model_cells"]}
    assert cells["conf"]["brittle_ri_percent"] == 75.0 and cells["none"]["acc_ben"] == 0.8
    assert [a["acc_adv"] for a in cells["none"]["attacks"]] == [0.6, 0.2]
    assert cells["none"]["survival_and_trash"][0]["trash_adv"] == pytest.approx(0.01 / 0.002)
    assert cells["none"]["evp_and_auc"][0]["auc_R"] == pytest.approx(0.19 / 0.24)
    assert np.isfinite(cells["none"]["evp_and_auc"][0]["evp"])


DEGENERATE, VIABILITY = OmegaConf.create({"margin": None}), OmegaConf.create({"w": 0.5, "tau": None})


def test_a_constant_predictor_is_flagged_degenerate_and_left_out_of_r_evp_and_brittle_summaries():
    from trashfire.tables.experiments import flag_degenerate

    # a constant function on 10 balanced classes: benign accuracy 0.1 <= tau(10) = 0.25, and no
    # attack lowers it much: its flat curve would read as R ~ 1, "perfectly robust"
    constant = attack_rows("const", acc_ben=0.1, acc=(0.1, 0.1), seed=0)
    sound = [attack_rows(f"m{i}", acc_ben=0.9, acc=(0.5 - 0.1 * i, 0.1), seed=i) for i in range(3)]
    table = flag_degenerate(experiments(constant, *sound).assign(clock="process"), DEGENERATE, VIABILITY)
    assert table.groupby("model_hash")["degenerate"].first().to_dict() == {"const": True, "m0": False, "m1": False, "m2": False}
    degenerate = aggregation.degenerate_cells(table)
    robustness = aggregation.robustness_table(aggregation.eps_curves(table), EVP, PIXEL_AUC, degenerate).set_index("model_hash")
    assert np.isnan(robustness.loc["const", "evp"]) and np.isnan(robustness.loc["const", "auc_R"])
    assert "degenerate" in robustness.loc["const", "note"] and robustness["auc_R"].drop("const").notna().all()
    brittle = pd.DataFrame(
        {
            "model_hash": ["const", "m0", "m1", "m2"],
            "dataset": "digits",
            "seed": [0, 0, 1, 2],
            "brittle_score": [0.0, 0.1, 0.2, 0.3],
            "robust_acc": [1.0, 0.9, 0.5, 0.1],
        }
    )
    brittle["degenerate"] = brittle["model_hash"].map(degenerate)
    assert aggregation.spearman_by_dataset(brittle)["digits"] == pytest.approx({"rho": -1.0, "p": 0.0, "n": 3})
    trash = pd.DataFrame({"model_hash": ["const", "m0", "m1", "m2"], "trash_adv": [100.0, 1.0, 2.0, 3.0], "trash_ben": 1.0})
    trash["degenerate"] = trash["model_hash"].map(degenerate)
    comparison = pd.DataFrame({"fitter": ["weibull"], "selected": [True], "test_concordance": [0.8], "test_ICI": [0.01]})
    summary = aggregation.headline(table, trash, robustness.reset_index(), brittle, comparison)
    assert summary["n_degenerate_model_cells"] == 1
    assert summary["acc_ben_mean"] == pytest.approx(0.9) and summary["trash_adv_median"] == pytest.approx(2.0)
    assert summary["brittle_score_mean"] == pytest.approx(0.2)


def test_a_margin_over_chance_sets_the_degeneracy_threshold():
    from trashfire.tables.experiments import flag_degenerate

    cells = experiments(attack_rows("weak", acc_ben=0.3), attack_rows("fine", acc_ben=0.7)).assign(clock="process")
    default = flag_degenerate(cells, DEGENERATE, VIABILITY).groupby("model_hash")["degenerate"].first()
    strict = flag_degenerate(cells, OmegaConf.create({"margin": 0.5}), VIABILITY).groupby("model_hash")["degenerate"].first()
    assert not default["weak"] and not default["fine"]  # both above tau(10) = 0.25
    assert strict["weak"] and not strict["fine"]  # 1/10 + 0.5 = 0.6: at or below is degenerate


def test_an_evp_curve_still_viable_at_its_largest_eps_says_so_and_is_averaged_apart():
    viable = attack_rows("robust", acc_ben=0.9, acc=(0.8, 0.6))  # 0.6 >= tau(10) at eps 1.0
    broken = attack_rows("weak", acc_ben=0.9, acc=(0.5, 0.1))
    table = aggregation.robustness_table(aggregation.eps_curves(experiments(viable, broken)), EVP, PIXEL_AUC).set_index("model_hash")
    assert not table.loc["robust", "reaches_nonviability"] and table.loc["weak", "reaches_nonviability"]
    assert aggregation.SHORT_OF_NONVIABILITY in table.loc["robust", "note"]
    assert aggregation.SHORT_OF_NONVIABILITY not in str(table.loc["weak", "note"])
    cells = experiments(viable, broken).assign(clock="process", degenerate=False)
    comparison = pd.DataFrame({"fitter": ["weibull"], "selected": [True], "test_concordance": [0.8], "test_ICI": [0.01]})
    brittle = pd.DataFrame({"model_hash": ["robust", "weak"], "dataset": "digits", "seed": 0, "brittle_score": [0.1, 0.2], "robust_acc": [0.6, 0.1]})
    trash = pd.DataFrame({"model_hash": ["robust", "weak"], "trash_adv": [1.0, 2.0], "trash_ben": 1.0})
    summary = aggregation.headline(cells, trash, table.reset_index(), brittle, comparison)
    assert summary["evp_mean"] == pytest.approx(table.loc["weak", "evp"])
    assert summary["evp_mean_short_of_nonviability"] == pytest.approx(table.loc["robust", "evp"])
    assert summary["n_evp_curves_short_of_nonviability"] == 1


def test_metrics_json_has_no_nan():
    from trashfire.metrics.aggregate import without_nan

    summary = {"evp_mean_short_of_nonviability": float("nan"), "per_seed": {"0": {"rho": np.float64("nan"), "n": 3}}, "xs": [1.0, float("inf")]}
    assert without_nan(summary) == {"evp_mean_short_of_nonviability": None, "per_seed": {"0": {"rho": None, "n": 3}}, "xs": [1.0, None]}


def test_headline_json_is_a_dozen_flat_keys_of_metrics_json():
    """What `dvc exp show` shows per experiment: flat scalars a terminal's table holds."""
    from trashfire.metrics.aggregate import headline_summary

    summary = {
        "acc_ben_mean": 0.9,
        "acc_adv_mean": 0.4,
        "evp_mean": 0.3,
        "auc_R_mean": 0.5,
        "trash_adv_median_by_clock": {"flops": 1.6, "process": 0.7, "wall": 0.6},
        "survival_test_concordance": 0.91,
        "findings": {"a": {"verdict": "holds"}, "b": {"verdict": "holds"}, "c": {"verdict": "not testable"}, "d": {"verdict": "contradicted"}},
        "n_train_cells": 30,
    }
    head = headline_summary(summary)
    assert head == {
        "acc_ben": 0.9,
        "acc_adv": 0.4,
        "evp": 0.3,
        "auc_R": 0.5,
        "trash_flops": 1.6,
        "trash_process": 0.7,
        "trash_wall": 0.6,
        "survival_c_test": 0.91,
        "findings_holds": 2,
        "findings_contradicted": 1,
        "findings_inconclusive": 0,
        "findings_not_testable": 1,
    }


# --- the metric registry: a metric is its definition and one entry ----------------------------


def worst_accuracy(acc_adv) -> float:
    """A throwaway definition: the lowest accuracy under attack."""
    return float(np.min(acc_adv))


def test_a_registered_metric_reaches_metrics_json_the_tables_the_cards_and_the_report(tmp_path, monkeypatch):

    from tests.core.test_schema import record_run, tiny
    from trashfire.core import schema
    from trashfire.metrics import registry
    from trashfire.report.formatting import format_value
    from trashfire.report.page import report_html
    from trashfire.stages import aggregate, figures
    from trashfire.tables.worst_case import measured

    cfg = tiny(tmp_path, "defence=[none,conf]")
    reports = record_run(cfg)
    headline = registry.Metric(
        "acc_adv_min",
        lambda r: worst_accuracy(registry.non_degenerate(r.experiments)["acc_adv"]),
        "the lowest accuracy under attack over the sound attack cells",
    )
    per_curve = registry.CurveMetric(
        "acc_at_eps_max", lambda curve, tau: worst_accuracy(curve["acc"].iloc[-1:]), "the accuracy at the largest eps of the curve"
    )
    monkeypatch.setattr(registry, "HEADLINE", registry.HEADLINE + [headline])
    monkeypatch.setattr(registry, "CURVE_METRICS", registry.CURVE_METRICS + [per_curve])
    aggregate.run(cfg)

    experiments = measured(pd.read_csv(reports / "experiments.csv"))  # the metric reads the attacks' rows
    assert json.loads((reports / "metrics.json").read_text())["acc_adv_min"] == pytest.approx(experiments["acc_adv"].min())
    robustness = pd.read_csv(reports / "robustness.csv")
    assert list(robustness.columns) == schema.robustness_columns(["evp", "acc_at_eps_max"])
    curves = pd.read_csv(reports / "curves.csv")
    last = curves.groupby(["model_hash", "attack_family"])["acc"].last()
    assert robustness.set_index(["model_hash", "attack_family"])["acc_at_eps_max"].to_dict() == pytest.approx(last.to_dict())
    card = json.loads(sorted((reports / "cards").glob("*.json"))[0].read_text())
    assert "acc_at_eps_max" in card["model_cells"][0]["evp_and_auc"][0]
    # each model cell's card holds its worst case per sample, one entry per eps FGM and PGD share
    written = pd.read_csv(reports / "experiments.csv")
    cell = card["model_cells"][0]
    mine = written[(written["attack"] == schema.WORST_CASE) & (written["model_hash"] == cell["model_hash"])]
    assert len(mine) > 0 and [w["acc_adv"] for w in cell["worst_case"]] == pytest.approx(mine["acc_adv"].tolist())
    # and metrics.json's headline robust accuracy is their mean per eps over the sound cells
    worst = written[(written["attack"] == schema.WORST_CASE) & ~written["degenerate"].astype(bool)]
    expected = {f"l{n} eps {v:g} {u}": m for (n, u, v), m in worst.groupby(["norm", "attack_units", "attack_value"])["acc_adv"].mean().items()}
    assert json.loads((reports / "metrics.json").read_text())["robust_acc_worst_case"] == pytest.approx(expected) and expected

    page = report_html(figures.STAGE.resolved(cfg), []).read_text()
    headline_html = page[page.index('<h2 id="headline">') : page.index('<h2 id="run">')]
    row = next(r for r in headline_html.split("<tr>") if ">acc_adv_min<" in r)
    assert f">{format_value(experiments['acc_adv'].min())}<" in row and "the lowest accuracy under attack" in row
    table = page[page.index('<details id="table-robustness">') :]
    assert "<th>acc_at_eps_max</th>" in table and "acc_at_eps_max, the accuracy at the largest eps of the curve" in table


def test_expected_time_on_every_clock_by_hand():
    """E[T] = compute until failure x the cell's seconds per FLOP: from the process clock it
    was fitted on to FLOPs and to wall seconds; E[queries] and the latency per query beside."""
    from trashfire.metrics.aggregate import expected_on_clocks

    cells = pd.DataFrame(
        {
            "clock": ["process"],
            "E_T": [2e-3],
            "seconds_per_flop_process": [1e-10],
            "seconds_per_flop_wall": [2e-10],
            "queries_mean": [5.0],
            "gradients_mean": [4.0],
            "flops_forward": [2e6],
        }
    )
    out = expected_on_clocks(cells).iloc[0]
    assert out["E_T_process"] == 2e-3  # the fitted clock's own E[T], untouched
    assert out["E_T_flops"] == pytest.approx(2e7) and out["E_T_wall"] == pytest.approx(4e-3)
    assert out["E_Q"] == 5.0 and out["E_G"] == 4.0 and out["flops_per_query"] == 2e6  # the model's forward, whatever the attack
    assert out["seconds_per_query_process"] == pytest.approx(2e-4) and out["seconds_per_query_wall"] == pytest.approx(4e-4)
    on_flops = expected_on_clocks(cells.assign(clock="flops", E_T=2e7)).iloc[0]
    assert on_flops["E_T_flops"] == 2e7 and on_flops["E_T_process"] == pytest.approx(2e-3)


# --- the stage on a recorded run: what aggregate reads and writes ---------------------------


def recorded_run(tmp_path, *overrides):
    """The tiny grid's hand-made records over three seeds and three defences (one trained, one
    at predict time), E[T] doubling and tripling with the seed, and the gauss_in model cell of
    seed 2 flagged degenerate by timing."""
    from tests.core.test_schema import record_run, tiny

    cfg = tiny(tmp_path, "defence=[none,gauss_in,conf]", "split.seeds=[0,1,2]", *overrides)
    reports = record_run(cfg)
    experiments = pd.read_csv(reports / "experiments.csv")
    flagged = experiments.loc[(experiments["defence"] == "gauss_in") & (experiments["seed"] == 2), "model_hash"].iloc[0]
    experiments.assign(degenerate=experiments["model_hash"] == flagged).to_csv(reports / "experiments.csv", index=False)
    expected = experiments[["attack_hash"]].assign(E_T=0.01 * (1 + experiments["seed"]))
    expected.to_csv(reports / "survival" / "expected_times.csv", index=False)
    return cfg, reports, flagged


def test_the_stage_flags_a_degenerate_model_cell_in_every_table_and_names_each_defence_stage(tmp_path):
    from trashfire.stages import aggregate

    cfg, reports, flagged = recorded_run(tmp_path)
    summary = aggregate.run(cfg)
    for name in ("trash.csv", "robustness.csv", "brittle.csv", "eps_survival.csv"):
        table = pd.read_csv(reports / name)
        assert table.groupby("model_hash")["degenerate"].all().to_dict() == {h: h == flagged for h in table["model_hash"].unique()}, name
    robustness = pd.read_csv(reports / "robustness.csv").set_index("model_hash")
    assert robustness.loc[flagged, "auc_R"].isna().all() and robustness["auc_R"].drop(flagged).notna().all()
    assert summary["n_degenerate_model_cells"] == 1
    brittle = pd.read_csv(reports / "brittle.csv")
    assert brittle.groupby("defence")["defence_stage"].unique().map(list).to_dict() == {"none": ["none"], "gauss_in": ["train"], "conf": ["predict"]}


def test_the_stage_writes_what_it_declares_from_the_configured_settings_and_logs_its_headline(tmp_path, monkeypatch, caplog):
    from trashfire.metrics import registry
    from trashfire.stages import aggregate

    cfg, reports, _ = recorded_run(tmp_path, "metrics.trash.eps_max=0.5")
    # a registered metric reads its own setting from the metrics section
    monkeypatch.setattr(
        registry, "HEADLINE", registry.HEADLINE + [registry.Metric("evp_tau_grid", lambda r: r.settings.evp.tau_grid, "thresholds of EVP against tau")]
    )
    with caplog.at_level("INFO", logger="trashfire.metrics.aggregate"):
        summary = aggregate.run(cfg)
    assert [str(path) for path in aggregate.STAGE.outputs(cfg) if not path.exists()] == []
    assert json.loads((reports / "metrics.json").read_text())["evp_tau_grid"] == 101
    assert summary["eps_survival_area_mean"]["digits"].keys() == {"fgm linf", "pgd linf", "ensemble linf"} and summary["validity_flags"]

    trash = pd.read_csv(reports / "trash.csv")
    assert set(trash["eps_max"]) == {0.1}  # the grid's eps 1.0 lies beyond eps_max
    # the seeds' TRASH differ (E[T] grows with the seed): the interval is the t interval over seeds
    row = pd.read_csv(reports / "trash_summary.csv").query("defence == 'none' and attack == 'fgm'").iloc[0]
    seeds = trash.query("defence == 'none' and attack == 'fgm'")["trash_adv"]
    interval = stats.ttest_1samp(np.log(seeds), 0.0).confidence_interval()
    assert (row["trash_adv_lo"], row["trash_adv_hi"]) == pytest.approx((math.exp(interval.low), math.exp(interval.high)), rel=1e-6)
    findings = pd.read_csv(reports / "findings.csv", keep_default_na=False).set_index("id")
    assert findings.loc["002_brittle_negative", "verdict"] != "not testable"
    # the hand-made records give every model cell acc_ben 0.9: no ranking by accuracy to compare with
    assert findings.loc["001_evp_ranks_differently", "detail"].startswith("needs configurations whose acc_ben and EVP differ within a seed")
    # 003's time claims on the configured clock (the tiny grid's flops), then again on each other clock
    trash_claims = findings.filter(like="003_trash_above_one_fgm", axis=0)["clock"]
    assert trash_claims.to_dict() == {"003_trash_above_one_fgm": "flops", "003_trash_above_one_fgm@process": "process", "003_trash_above_one_fgm@wall": "wall"}
    assert "10,0.25,0.5,digits" in (reports / "tau_table.csv").read_text().splitlines()  # K a whole number
    card = json.loads(sorted((reports / "cards").glob("*.json"))[0].read_text())
    assert all(cell["validity"]["tripped"] for cell in card["model_cells"])

    [line, *found] = [r.getMessage() for r in caplog.records if r.name == "trashfire.metrics.aggregate"]
    assert line.startswith(f"n_train_cells={summary['n_train_cells']}, n_model_cells=9, ")
    assert f", auc_R_mean={summary['auc_R_mean']:.4g}, " in line and "findings=" not in line  # only the scalars
    assert found == [f"finding {id}: {row.verdict} ({row.detail})" for id, row in findings.iterrows()]


def timed_cells(**changes):
    """One model cell's two FGM cells (eps .5 and 1) fitted on the process clock, timed on all three."""
    cells = experiments(attack_rows()).assign(
        clock="process",
        t_train=0.01,
        t_train_process=0.01,
        t_train_wall=0.03,
        t_train_flops=3e8,
        t_predict=1e-4,
        t_attack=[1e-3, 4e-3],
        seconds_per_flop_process=1e-10,
        seconds_per_flop_wall=2e-10,
    )
    return cells.assign(**changes)


def test_trash_by_hand_on_every_clock_over_the_family_cells_up_to_eps_max():
    expected = pd.DataFrame({"attack_hash": ["m0-0.5", "m0-1.0"], "E_T": [2e-3, 4e-3]})
    row = aggregation.trash_table(timed_cells(), expected, None).iloc[0]
    # E[T] = 3e-3 s, 3e7 FLOPs, 6e-3 wall seconds (each cell priced at its rate, then averaged)
    assert row["E_T"] == pytest.approx(3e-3) and row["trash_adv"] == pytest.approx(0.01 / 3e-3)
    assert row["E_T_flops"] == pytest.approx(3e7) and row["trash_adv_flops"] == pytest.approx(10.0)
    assert row["E_T_wall"] == pytest.approx(6e-3) and row["trash_adv_wall"] == pytest.approx(5.0)
    assert row["trash_adv_process"] == pytest.approx(0.01 / 3e-3)
    # f_adv: (1 - .6) / 1e-3 and (1 - .2) / 4e-3, averaged; f_ben = (1 - .8) / 1e-4; trash_ben = t_train f_ben
    assert row["f_adv"] == pytest.approx(300.0) and row["f_ben"] == pytest.approx(2000.0) and row["trash_ben"] == pytest.approx(20.0)
    assert (row["acc_adv"], row["eps_max"]) == (pytest.approx(0.4), 1.0)
    up_to = aggregation.trash_table(timed_cells(), expected, 0.5).iloc[0]  # eps_max is inclusive
    assert (up_to["eps_max"], up_to["E_T"], up_to["trash_adv"]) == (0.5, 2e-3, pytest.approx(5.0))


def test_each_expected_time_stands_beside_the_share_of_its_samples_censored_at_the_budget():
    """The family's cells pooled: 10 of 50 and 30 of 50 samples unbroken at the budget are 40%
    censored; the summary over seeds gives its mean beside E[T]'s."""
    cells = timed_cells(n_events=[40, 20], n_censored=[10, 30])
    expected = pd.DataFrame({"attack_hash": ["m0-0.5", "m0-1.0"], "E_T": [2e-3, 4e-3]})
    row = aggregation.trash_table(cells, expected, None).iloc[0]
    assert row["censored_share"] == pytest.approx(0.4)
    assert aggregation.trash_table(cells, expected, 0.5).iloc[0]["censored_share"] == pytest.approx(0.2)
    summary = aggregation.trash_summary(aggregation.trash_table(cells, expected, None)).iloc[0]
    assert (summary["E_T_mean"], summary["censored_share_mean"]) == (pytest.approx(3e-3), pytest.approx(0.4))


def test_an_attack_cell_without_an_expected_time_still_counts_in_the_accuracy_and_the_grid():
    row = aggregation.trash_table(timed_cells(), pd.DataFrame({"attack_hash": ["m0-0.5"], "E_T": [2e-3]}), None).iloc[0]
    assert (row["acc_adv"], row["eps_max"], row["E_T"]) == (pytest.approx(0.4), 1.0, 2e-3)


def test_a_cell_without_priced_flops_keeps_its_expected_time_on_its_own_clock():
    from trashfire.metrics.aggregate import expected_on_clocks

    out = expected_on_clocks(pd.DataFrame({"clock": ["process"], "E_T": [2e-3]})).iloc[0]
    assert out["E_T_process"] == 2e-3 and np.isnan(out["E_T_flops"]) and np.isnan(out["E_T_wall"])
    assert expected_on_clocks(pd.DataFrame({"clock": [], "E_T": []})).empty  # no attack cell: no clock to read


def test_depth_decomposition_keeps_the_sound_undefended_cells_and_averages_their_seeds():
    base = {"dataset": "digits", "model": "resnet18", "depth": 18, "epochs": 1, "attack_family": "fgm linf"}
    rows = [
        base | {"model_hash": "a", "defence": "none", "degenerate": False, "E_Q": 4.0},
        base | {"model_hash": "b", "defence": "none", "degenerate": False, "E_Q": 6.0},
        base | {"model_hash": "c", "defence": "conf", "degenerate": False, "E_Q": 100.0},
        base | {"model_hash": "d", "defence": "none", "degenerate": True, "E_Q": 1000.0},
        base | {"model_hash": "e", "model": "imported", "epochs": None, "defence": "none", "degenerate": False, "E_Q": 8.0},  # epochs unknown
    ]
    columns = {c: 1.0 for c in schema.DEPTH_DECOMPOSITION if c not in ("n_model_cells", "E_Q", *base)}
    table = aggregation.depth_decomposition(pd.DataFrame([r | columns for r in rows]))
    assert table[["model", "n_model_cells", "E_Q"]].to_dict("records") == [
        {"model": "imported", "n_model_cells": 1, "E_Q": 8.0},
        {"model": "resnet18", "n_model_cells": 2, "E_Q": 5.0},
    ]
    empty = aggregation.depth_decomposition(pd.DataFrame([rows[2] | columns]))
    assert empty.empty and list(empty.columns) == schema.DEPTH_DECOMPOSITION


def test_trash_summary_is_the_t_interval_over_seeds_and_keeps_the_failure_rates():
    trash = pd.DataFrame(
        [
            LABELS | {"model_hash": f"m{s}", "seed": s, "attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "trash_adv": t}
            for s, t in ((0, 1.0), (1, 2.0), (2, 7.0))
        ]
    ).assign(trash_ben=1.0, f_ben=[1.0, 2.0, 3.0], f_adv=[4.0, 5.0, 9.0])
    row = aggregation.trash_summary(trash).iloc[0]
    interval = stats.ttest_1samp(np.log([1.0, 2.0, 7.0]), 0.0).confidence_interval()
    assert (row["trash_adv_lo"], row["trash_adv_hi"]) == pytest.approx((math.exp(interval.low), math.exp(interval.high)))
    assert (row["f_ben_mean"], row["f_adv_mean"]) == (2.0, 6.0)
    assert list(aggregation.trash_summary(trash.iloc[:0]).columns) == schema.TRASH_SUMMARY  # the header, even without cells


def test_curves_convert_pixel_grids_and_older_records_and_leave_a_zero_benign_point_unnormalised():
    pixel = experiments(attack_rows(eps=(0.2, 0.4), acc=(0.6, 0.2))).assign(attack_units="pixel")
    curves = aggregation.eps_curves(pixel)
    assert list(curves.columns) == schema.CURVES
    assert list(curves["eps_pixel"]) == [0.0, 0.2, 0.4] and list(curves["eps_standardised"]) == pytest.approx([0.0, 0.5, 1.0])
    # records from before attack_units and pixel_std: standardised eps, no pixel axis
    older = aggregation.eps_curves(experiments(attack_rows()).drop(columns=["attack_units", "pixel_std"]))
    assert list(older["eps_standardised"]) == [0.0, 0.5, 1.0] and older["eps_pixel"].isna().all()
    unitless = aggregation.eps_curves(experiments(attack_rows()).drop(columns="attack_units"))
    assert list(unitless["eps_pixel"]) == pytest.approx([0.0, 0.2, 0.4])
    zero = aggregation.eps_curves(experiments(attack_rows(acc_ben=0.0, acc=(0.1, 0.0))))
    assert zero["acc_norm"].isna().all()  # no benign accuracy to normalise by
    none = aggregation.eps_curves(experiments(attack_rows()).assign(attack_param="steps"))
    assert none.empty and list(none.columns) == schema.CURVES


def test_robustness_rows_carry_their_settings_and_say_why_a_curve_is_short_or_unscored():
    curves = aggregation.eps_curves(experiments(attack_rows(), attack_rows("m1", acc=(0.6, 0.25)), attack_rows("m2", acc=(0.7, 0.5))))
    open_ended = OmegaConf.create({"units": "pixel", "eps0": 0.0, "eps1": None})
    table = aggregation.robustness_table(curves, EVP, open_ended).set_index("model_hash")
    row = table.loc["m0"]
    assert (row["n_classes"], row["acc_ben"], row["tau"]) == (10, 0.8, 0.25)
    assert (row["auc_units"], row["eps0"], row["eps1"], row["degenerate"], row["note"]) == ("pixel", 0.0, 0.4, False, "")  # eps1: the largest eps
    # accuracy .25 at the largest eps equals tau(10): not below it, so still viable
    assert not table.loc["m1", "reaches_nonviability"]
    assert table.loc["m1", "note"] == f"{aggregation.SHORT_OF_NONVIABILITY} (accuracy 0.25 >= tau 0.25 at the largest eps)"
    short = aggregation.robustness_table(curves, EVP, OmegaConf.create({"units": "pixel", "eps0": 0.0, "eps1": 0.5})).set_index("model_hash")
    assert short.loc["m2", "note"].startswith(f"{aggregation.SHORT_OF_NONVIABILITY} (accuracy 0.50 >= tau 0.25 at the largest eps); ")
    fixed = aggregation.robustness_table(curves, OmegaConf.create({"w": 0.5, "tau": 0.55}), open_ended).set_index("model_hash")
    assert set(fixed["tau"]) == {0.55} and fixed["reaches_nonviability"].all()
    assert list(aggregation.robustness_table(curves, OmegaConf.create({"w": 1.0, "tau": None}), open_ended)["tau"]) == pytest.approx([0.4] * 3)
    unknown = aggregation.robustness_table(aggregation.eps_curves(experiments(attack_rows(pixel_std=float("nan")))), EVP, PIXEL_AUC)
    assert unknown.loc[0, "note"] == "pixel_std not recorded for this cell (an older attack record): delete reports/attacks and rerun"
    degenerate = aggregation.robustness_table(curves.query("model_hash == 'm0'"), EVP, PIXEL_AUC, pd.Series({"m0": True})).iloc[0]
    assert np.isnan(degenerate["evp"]) and degenerate["degenerate"] and degenerate["note"] == aggregation.DEGENERATE_NOTE
    empty = aggregation.robustness_table(curves.iloc[:0], EVP, PIXEL_AUC)
    assert list(empty.columns) == list(table.reset_index().columns)


def test_evp_over_tau_and_over_subgrids_per_curve_by_hand():
    curves = aggregation.eps_curves(experiments(attack_rows(), attack_rows("m1")))  # eps [0, .5, 1], acc [.8, .6, .2]
    over_tau = aggregation.evp_tau_table(curves, 3)
    assert list(over_tau.index) == list(range(6)) and list(over_tau.columns) == schema.EVP_TAU
    # tau 0: .5 (.8 + .6) / 2 + .5 (.6 + .2) / 2; tau .5: g = [.8, .6, 0]; tau 1: nothing viable
    assert over_tau.query("model_hash == 'm0'")[["tau", "evp"]].to_numpy().ravel().tolist() == pytest.approx([0.0, 0.55, 0.5, 0.5, 1.0, 0.0])
    converging = aggregation.evp_convergence_table(curves, EVP)
    assert list(converging.columns) == schema.EVP_CONVERGENCE
    # tau(10) = .25: one interval [0, 1] -> g = [.8, 0]: .4; two -> .35 + .15
    assert converging.query("model_hash == 'm1'")[["n_intervals", "evp", "tau"]].to_numpy().ravel().tolist() == pytest.approx([1, 0.4, 0.25, 2, 0.5, 0.25])
    for empty in (aggregation.evp_tau_table(curves.iloc[:0], 3), aggregation.evp_convergence_table(curves.iloc[:0], EVP)):
        assert empty.empty and list(empty.columns) in (schema.EVP_TAU, schema.EVP_CONVERGENCE)


# --- the small readers and tables around the stage ---------------------------------------------


def test_tau_table_labels_every_row_with_the_configured_effect_size():
    table = aggregation.tau_table([2, 10], 0.3, {"digits": 10})
    assert table.to_dict("list") == {
        "n_classes": [2, 10, 10],
        "tau": pytest.approx([0.5 + 0.3 * 0.5, 0.1 + 0.3 * 0.3, 0.1 + 0.3 * 0.3]),  # 1/K + w sqrt(K - 1) / K
        "w": [0.3, 0.3, 0.3],
        "source": ["001 Table I", "001 Table I", "digits"],
    }


def test_trained_models_keep_each_trainings_undefended_cell_else_its_train_time_defence():
    rows = [
        {"model_hash": "conf", "train_hash": "t0", "defence": "conf"},  # a predict-time wrapper of t0, listed first
        {"model_hash": "none", "train_hash": "t0", "defence": "none"},
        {"model_hash": "none", "train_hash": "t0", "defence": "none"},  # another attack cell of the same model
        {"model_hash": "gauss", "train_hash": "t1", "defence": "gauss_in"},
        {"model_hash": "gauss", "train_hash": "t1", "defence": "gauss_in"},
    ]
    trained = aggregation.trained_models(pd.DataFrame(rows).assign(acc_adv=[0.1, 0.2, 0.3, 0.4, 0.5]))
    assert trained.to_dict("records") == [
        {"model_hash": "none", "train_hash": "t0", "defence": "none", "acc_adv": 0.2},
        {"model_hash": "gauss", "train_hash": "t1", "defence": "gauss_in", "acc_adv": 0.4},
    ]


def test_a_missing_brittle_record_names_the_stage_to_run(tmp_path):
    from trashfire.core.errors import DataError

    with pytest.raises(DataError, match=r"brittle_scores.json not found; run the brittle stage first \(dvc repro brittle\)"):
        aggregation.read_brittle(tmp_path / "brittle_scores.json", ["m0"])
    (tmp_path / "brittle_scores.json").write_text('{"records": []}')  # scores of another grid's cells
    with pytest.raises(DataError, match=r"has no brittle-score of model cell m0 \(1 missing\); run the brittle stage"):
        aggregation.read_brittle(tmp_path / "brittle_scores.json", ["m0"])


def test_eps_survival_data_keeps_norms_as_text_and_names_the_stage_that_writes_it(tmp_path):
    from trashfire.core.errors import DataError
    from trashfire.core.records import write_table

    with pytest.raises(DataError, match=r"eps_survival_data.parquet not found; run `dvc repro timing` first"):
        aggregation.read_eps_survival_data(tmp_path / "eps_survival_data.parquet")
    write_table(pd.DataFrame({"model_hash": ["m0", "m0"], "attack": ["fgm", "pgd"], "norm": ["inf", "2"]}), tmp_path / "eps_survival_data.parquet")
    # read as numbers (a CSV's), "inf" and "2" would become inf and 2.0: families "fgm linf", "pgd l2.0"
    assert list(aggregation.read_eps_survival_data(tmp_path / "eps_survival_data.parquet")["norm"]) == ["inf", "2"]


def test_brittle_rows_name_the_robust_attack_and_leave_ri_out_when_the_undefended_reference_is_ambiguous():
    brittle = pd.DataFrame(
        [LABELS | {"model_hash": h, "defence": d, "brittle_score": b} for h, d, b in (("a", "none", 0.5), ("a2", "none", 0.4), ("b", "conf", 0.1))]
    )
    exp = experiments(attack_rows("a"), attack_rows("a2"), attack_rows("b"))
    over_grid = aggregation.brittle_table(brittle, exp, OmegaConf.create({"attack": "fgm", "norm": "inf", "eps": None}))
    # two undefended model cells of one training (say, a duplicated record): no single reference to improve on
    assert over_grid["brittle_ri"].isna().all()
    assert set(over_grid["robust_attack"]) == {"fgm linf, mean over its grid"}
    at_eps = aggregation.brittle_table(brittle, exp, OmegaConf.create({"attack": "fgm", "norm": 2, "eps": 0.5}))
    assert set(at_eps["robust_attack"]) == {"fgm l2, eps 0.5"}


def test_headline_carries_the_findings_the_eps_survival_areas_and_the_validity_flags():
    from trashfire.core.schema import Finding

    cells = experiments(attack_rows("a"), attack_rows("b")).assign(clock="process", degenerate=False)
    comparison = pd.DataFrame({"fitter": ["weibull"], "selected": [True], "test_concordance": [0.8], "test_ICI": [0.01]})
    brittle = pd.DataFrame({"model_hash": ["a", "b"], "dataset": "digits", "seed": 0, "brittle_score": [0.1, 0.2], "robust_acc": [0.6, 0.1]})
    trash = pd.DataFrame({"model_hash": ["a", "b"], "trash_adv": [1.0, 2.0], "trash_ben": 1.0})
    robustness = aggregation.robustness_table(aggregation.eps_curves(cells), EVP, PIXEL_AUC)
    checked = [Finding("003_trash_above_one_fgm", "003", "claim", "test", 2, 1.5, 1.0, 2.0, float("nan"), "inconclusive", "detail", "process")]
    areas = pd.DataFrame({"model_hash": ["a", "b"], "dataset": "digits", "attack_family": "fgm linf", "area": [0.2, 0.4], "degenerate": False})
    flags = pd.DataFrame([{"model_hash": h, "degenerate": False} | dict.fromkeys(schema.VALIDITY_FLAGS, False) for h in ("a", "b")]).assign(
        non_monotone=[True, None]
    )
    summary = aggregation.headline(cells, trash, robustness, brittle, comparison, checked, areas, flags)
    assert summary["findings"]["003_trash_above_one_fgm"] == {
        "verdict": "inconclusive",
        "value": 1.5,
        "lo": 1.0,
        "hi": 2.0,
        "p": None,
        "p_adjusted": None,
        "smallest_effect": None,
        "detectable": None,
        "units_to_settle": None,
        "n": 2,
        "units": "",
        "clock": "process",
    }
    assert summary["eps_survival_area_mean"] == {"digits": {"fgm linf": pytest.approx(0.3)}}
    assert summary["validity_flags"]["non_monotone"] == {"tripped": 1, "checked": 1}
    assert summary["validity_flags"]["randomised"] == {"tripped": 0, "checked": 2}


def test_findings_use_the_configured_test_settings_and_test_time_on_the_run_clock_then_on_each_other():
    cells = experiments(attack_rows("a")).assign(clock="process")
    trash = pd.DataFrame({"attack": "fgm", "defence": "none", "trash_adv": [2.0, 4.0, 8.0]}).assign(trash_adv_wall=lambda t: 2 * t["trash_adv"])
    trash = trash.assign(seed=[0, 1, 2])  # three undefended trained models
    # R rises from 1 to 5 epochs by .1 on seed 0 and by .2 on seed 1
    robustness = pd.DataFrame(
        [LABELS | {"seed": s, "epochs": e, "attack_family": "fgm linf", "auc_R": r} for s, e, r in ((0, 1, 0.4), (0, 5, 0.5), (1, 1, 0.5), (1, 5, 0.7))]
    )
    # ranks 1..5 against 5, 3, 4, 2, 1: rho = -0.9; of the 120 pairings 10 reach |rho| >= 0.9 (1 and -1
    # once each, 0.9 and -0.9 four times each): exact p = 1/12
    brittle = pd.DataFrame({"seed": 0, "brittle_score": [0.1, 0.2, 0.3, 0.4, 0.5], "robust_acc": [0.9, 0.7, 0.8, 0.4, 0.1]})
    conf = OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "metrics" / "default.yaml").findings
    settings = OmegaConf.merge(conf, {"alpha": 0.01})
    found = {f.id: f for f in aggregation.check_findings(cells, trash, robustness, brittle, settings)}
    assert {i: found[i].clock for i in found if i.startswith("003_trash_above_one_fgm")} == {
        "003_trash_above_one_fgm": "process",
        "003_trash_above_one_fgm@flops": "flops",
        "003_trash_above_one_fgm@wall": "wall",
    }
    assert found["003_trash_above_one_fgm"].value == pytest.approx(4.0)  # the geometric mean of 2, 4 and 8
    assert found["003_trash_above_one_fgm@wall"].value == pytest.approx(8.0)
    assert found["003_trash_above_one_fgm@flops"].verdict == "not testable"  # no trash_adv_flops
    interval = stats.ttest_1samp(np.log([2.0, 4.0, 8.0]), 0.0).confidence_interval()
    assert (found["003_trash_above_one_fgm"].lo, found["003_trash_above_one_fgm"].hi) == pytest.approx((math.exp(interval.low), math.exp(interval.high)))
    assert found["004_r_rises_with_epochs"].value == pytest.approx(0.15)
    brittle_found = found["002_brittle_negative"]
    assert brittle_found.value == pytest.approx(-0.9) and brittle_found.p == pytest.approx(1 / 12) and brittle_found.verdict == "inconclusive"  # p > alpha


def test_trash_summary_intervals_reach_past_the_values_at_three_seeds():
    """Issue 59: a percentile bootstrap over 3 seeds never reaches past the smallest and largest
    value, and so covers the mean at most 75% of the time; the t interval reaches past both."""
    values = [1.0, 2.0, 4.0]
    trash = pd.DataFrame(
        [LABELS | {"model_hash": f"m{s}", "seed": s, "attack": "fgm", "norm": "inf", "attack_family": "fgm linf", "trash_adv": t} for s, t in enumerate(values)]
    ).assign(trash_ben=values, f_ben=1.0, f_adv=1.0)
    row = aggregation.trash_summary(trash).iloc[0]
    assert row["trash_adv_lo"] < min(values) and row["trash_adv_hi"] > max(values)


def test_the_headline_robust_accuracy_is_the_worst_cases_mean_per_norm_and_eps_over_sound_cells():
    from trashfire.metrics import registry

    worst = pd.DataFrame(
        {
            "norm": ["inf", "inf", "inf", "inf", "2"],
            "attack_units": ["pixel"] * 4 + ["standardised"],
            "attack_value": [0.1, 0.1, 0.1, 0.3, 0.5],
            "acc_adv": [0.4, 0.6, 0.0, 0.05, 0.7],
            "degenerate": [False, False, True, False, False],  # the third is at chance: left out
            "carried_by": ["pgd", "autoattack", "pgd", "autoattack, pgd", "pgd"],
        }
    )
    means = registry.worst_case_means(worst)
    assert means == pytest.approx({"linf eps 0.1 pixel": 0.5, "linf eps 0.3 pixel": 0.05, "l2 eps 0.5 standardised": 0.7})
    assert list(means) == ["l2 eps 0.5 standardised", "linf eps 0.1 pixel", "linf eps 0.3 pixel"]  # sorted by norm, units, eps
    assert registry.carried_by_counts(worst) == {"autoattack": 1, "autoattack, pgd": 1, "pgd": 2}
    assert list(registry.carried_by_counts(worst)) == ["autoattack", "autoattack, pgd", "pgd"]
    for nothing in (None, worst.iloc[:0]):  # one attack per norm and eps: no worst case
        assert registry.worst_case_means(nothing) == {} and registry.carried_by_counts(nothing) == {}


def test_the_stage_reads_the_budget_check_and_competing_risks_tables_into_the_validity_flags(tmp_path):
    """budget/sufficiency.csv (the budget stage's) and competing_risks.csv (the survival
    stage's, written only for some configurations): where present they reach validity.csv,
    where absent the flags say why."""
    from trashfire.stages import aggregate

    cfg, reports, _ = recorded_run(tmp_path)
    experiments = pd.read_csv(reports / "experiments.csv")
    measured = experiments[experiments["attack"] != schema.WORST_CASE]  # a worst-case row is no attack cell
    short, composite = measured["model_hash"].iloc[0], measured["attack_hash"].iloc[-1]
    shares = np.where(experiments["model_hash"] == short, 0.05, 0.0)
    sufficiency = experiments[["attack_hash"]].assign(
        attack_family="pgd linf",
        attack_value=0.1,
        samples=100,
        factor=10.0,
        observed=np.nan,
        still_breakable=shares,
        still_breakable_low=shares,
        still_breakable_high=0.1,
    )
    (reports / "budget").mkdir()
    sufficiency.to_csv(reports / "budget" / "sufficiency.csv", index=False)
    experiments.assign(black_box_components=np.where(experiments["attack_hash"] == composite, "square", "")).to_csv(reports / "experiments.csv", index=False)
    competing = pd.DataFrame({"attack_hash": composite, "component": ["apgd_ce", "square"], "order": [1, 2], "broken": [1, 4], "samples": 100})
    competing.to_csv(reports / "survival" / "competing_risks.csv", index=False)
    aggregate.run(cfg)
    flags = pd.read_csv(reports / "validity.csv").set_index("model_hash")
    assert flags["budget_too_small"].to_dict() == {h: h == short for h in flags.index}
    carried = experiments.loc[experiments["attack_hash"] == composite, "model_hash"].iloc[0]
    assert flags.loc[carried, "black_box_carries"] == True, flags.loc[carried, "black_box_carries_detail"]  # noqa: E712 (read back from CSV)
    assert flags.loc[carried, "black_box_carries_detail"].startswith("square broke 4 of 100")

    for name in ("budget/sufficiency.csv", "survival/competing_risks.csv"):
        (reports / name).unlink()
    aggregate.run(cfg)
    flags = pd.read_csv(reports / "validity.csv").set_index("model_hash")
    assert (
        flags["budget_too_small"].isna().all()
        and flags.loc[carried, "black_box_carries_detail"] == "not checked: no competing_risks.csv (rerun the survival stage)"
    )


def test_trash_names_the_expected_time_it_uses():
    expected = pd.DataFrame({"attack_hash": ["m0-0.5", "m0-1.0"], "E_T": [2e-3, 4e-3], "fitter": "weibull"})
    assert aggregation.trash_table(timed_cells(), expected, None).iloc[0]["E_T_source"] == "weibull restricted mean to t*, all samples"
    assert aggregation.trash_table(timed_cells(), expected.drop(columns="fitter"), None).iloc[0]["E_T_source"] == ""  # an older table: unnamed


def test_the_stage_with_its_forked_workers_writes_what_one_process_writes(tmp_path, monkeypatch):
    """At a paper's size survival in eps and the cards are made by forked workers beside the
    rest: every table, card and metric is the same, byte for byte, and the workers are other
    processes than the stage's."""
    import os

    from trashfire.core import parallel
    from trashfire.stages import aggregate

    cfg, reports, _ = recorded_run(tmp_path)
    made_by, write_eps, cards = tmp_path / "made_by", aggregation.write_eps_survival, aggregation.write_cards

    def recorded(write):
        def wrapped(*args, **kwargs):
            with open(made_by, "a") as out:
                out.write(f"{write.__name__} {os.getpid()}\n")
            return write(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(aggregation, "write_eps_survival", recorded(write_eps))
    monkeypatch.setattr(aggregation, "write_cards", recorded(cards))
    monkeypatch.setattr(parallel, "torch_loaded", lambda: False)  # this process has loaded torch (other tests); the stage's has not
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    written = {}
    for fork_cells in (10**9, 0):  # one process, then the workers
        monkeypatch.setattr(aggregation, "FORK_CELLS", fork_cells)
        for output in aggregate.STAGE.outputs(cfg):  # each run writes every output afresh
            shutil.rmtree(output) if output.is_dir() else output.unlink(missing_ok=True)
        aggregate.run(cfg)
        written[fork_cells] = {str(path.relative_to(reports)): path.read_bytes() for path in sorted(reports.rglob("*")) if path.is_file()}
    assert written[0] == written[10**9] and "cards" in "".join(written[0]) and "eps_survival_curves.csv" in written[0]
    pids = [line.split() for line in made_by.read_text().splitlines()]
    assert [name for name, _ in pids] == ["write_eps_survival", "write_cards"] * 2
    assert {pid for _, pid in pids[:2]} == {str(os.getpid())} and str(os.getpid()) not in {pid for _, pid in pids[2:]}
