"""A study no survival model can be fitted to, or that leaves survival out, still gets every
metric that needs no E[T]: the survival stage writes what needs no model and why it fitted
none, aggregate marks TRASH and the findings on E[T] not testable with that reason, and the
report names it."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import tiny_config
from tests.pipeline.test_reproduction import reproduce_module
from tests.pipeline.test_stages import run_as_declared
from trashfire.stages import aggregate, attack, brittle, budget, certify, figures, prepare, survival, timing, train

E_T_FINDINGS = ("003_trash_above_one_fgm", "003_depth_not_proportional")


def run_downstream(cfg) -> dict:
    for stage in (certify, budget, brittle, timing, survival):
        run_as_declared(stage, cfg)
    summary = run_as_declared(aggregate, cfg)
    run_as_declared(figures, cfg)
    return summary


def report_text(reports: Path) -> str:
    return " ".join((reports / "report.html").read_text().split())


@pytest.fixture(scope="module")
def fgsm_one_model(tmp_path_factory):
    """FGSM alone on one trained model (the tiny grid, undefended): every sample breaks at its
    one step or stands, and the survival split by trained model has one group to split."""
    folder = tmp_path_factory.mktemp("fgsm_one_model")
    cfg = tiny_config(folder, "attack=[fgm]", "defence=[none]")
    for stage in (prepare, train, attack):
        run_as_declared(stage, cfg)
    return cfg, run_downstream(cfg), folder / "reports"


def test_an_fgsm_study_no_survival_model_fits_still_gets_r_evp_and_accuracies(fgsm_one_model):
    cfg, summary, reports = fgsm_one_model
    status = json.loads((reports / "survival" / "status.json").read_text())
    assert status["selected"] is None and "needs at least 2" in status["reason"]
    assert (reports / "survival" / "kaplan_meier.png").is_file() and (reports / "survival" / "logrank.csv").is_file()
    expected = pd.read_csv(reports / "survival" / "expected_times.csv")
    assert len(expected) == 2 and expected["E_T"].isna().all() and (expected["t_star"] > 0).all()  # both FGM strengths, each its budget
    robustness = pd.read_csv(reports / "robustness.csv")
    assert robustness["auc_R"].notna().all() and robustness["evp"].notna().all()
    assert pd.read_csv(reports / "brittle.csv")["brittle_score"].notna().all()
    assert summary["auc_R_mean"] > 0 and 0 < summary["acc_ben_mean"] <= 1 and summary["acc_adv_mean"] is not None
    assert summary["survival_model"] is None and summary["survival_missing_reason"] == status["reason"]
    assert math.isnan(summary["survival_test_concordance"])
    trash = pd.read_csv(reports / "trash.csv")
    assert trash["trash_adv"].isna().all() and trash["t_train"].notna().all()


def test_the_findings_on_e_t_name_why_it_is_missing(fgsm_one_model):
    _, summary, reports = fgsm_one_model
    findings = pd.read_csv(reports / "findings.csv").set_index("id")
    reason = summary["survival_missing_reason"]
    for finding in E_T_FINDINGS:
        assert findings.loc[finding, "verdict"] == "not testable", finding
    assert reason in findings.loc["003_trash_above_one_fgm", "detail"]
    assert "no survival model gives E[T]" in findings.loc["003_trash_above_one_fgm", "detail"]


def test_the_report_names_why_trash_is_missing(fgsm_one_model):
    _, summary, reports = fgsm_one_model
    text = report_text(reports)
    assert (
        f"No survival model gives E[T], so TRASH and the findings on it are not testable; every other metric stands: {summary['survival_missing_reason']}"
        in text
    )
    assert "no attack cell has a TRASH" in text  # the TRASH figure says why it is not drawn
    assert not (reports / "figures" / "trash_by_depth_and_defence.png").exists()


def test_survival_left_out_by_config_is_said_so(fgsm_one_model, tmp_path):
    """`survival.fitters: []`: no model is fitted, on purpose."""
    shutil.copytree(fgsm_one_model[2].parent, tmp_path, dirs_exist_ok=True)
    cfg = tiny_config(tmp_path, "attack=[fgm]", "defence=[none]", "survival.fitters=[]")
    run_as_declared(survival, cfg)
    summary = run_as_declared(aggregate, cfg)
    run_as_declared(figures, cfg)
    assert summary["survival_missing_reason"] == "survival.fitters is empty: no survival model was asked for"
    assert pd.read_csv(tmp_path / "reports" / "survival" / "aft_comparison.csv").empty
    assert "survival.fitters is empty" in report_text(tmp_path / "reports")


def test_a_runs_summary_keeps_r_per_seed_the_findings_and_accuracies_as_strict_json(fgsm_one_model):
    """What bench/reproduce.py keeps of a study without survival models (004's kind)."""
    _, _, reports = fgsm_one_model
    kept = reproduce_module().summarise(reports)
    text = json.dumps(kept, allow_nan=False)  # NaN would not be JSON
    assert kept["r"] and all(row["auc_R"] is not None for row in kept["r"])
    assert {f["id"] for f in kept["findings"]} >= {"004_r_rises_with_epochs", "003_trash_above_one_fgm"}
    assert 0 < kept["benign_accuracy"]["min"] <= 1
    assert all(len(row["image_scores"]) == len(row["positions"]) for row in kept["brittle"])
    assert json.loads(text) == kept
