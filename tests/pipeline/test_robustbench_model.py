"""model=robustbench through the pipeline: a RobustBench zoo architecture with random weights
saved where RobustBench keeps them, on local files in CIFAR-10's format, imported by the train
stage with robustbench's own load_model (no network), then attacked, timed, fitted and
aggregated like any model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from lifelines import KaplanMeierFitter

from tests.conftest import tiny_config
from tests.data.test_datasets import write_cifar
from tests.pipeline.test_stages import run_as_declared
from trashfire.core.records import read_table
from trashfire.models import robustbench as rb
from trashfire.stages import aggregate, attack, brittle, budget, certify, figures, prepare, survival, timing, train

NAME = "Wong2020Fast"  # the zoo's PreAct ResNet-18: among its cheapest on a CPU
# slow (`make test-slow`): a ResNet-18 through seven stages takes 20 s of the 8 minutes the
# fast suite is held to; the loading and the wrapper are tested fast in tests/models/test_robustbench.py
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def robustbench_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("robustbench")
    write_cifar(folder / "cifar", n_per_batch=20)
    torch.manual_seed(0)
    net = rb.zoo_entry("model.robustbench", NAME, "cifar10", "Linf")["model"]()
    checkpoint = rb.checkpoint_path(folder / "zoo", NAME, "cifar10", "Linf")
    checkpoint.parent.mkdir(parents=True)
    torch.save({"state_dict": net.state_dict()}, checkpoint)
    info = folder / "model_info" / "cifar10" / "Linf" / f"{NAME}.json"  # RobustBench's own figures of the model
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"clean_acc": "83.34", "autoattack_acc": "43.21", "eps": "8/255"}))
    cfg = tiny_config(
        folder,
        "data=[cifar10]",
        f"data.cifar10.root={folder / 'cifar'}",
        "data.cifar10.verify=false",
        "model=[robustbench]",
        f"model.robustbench.kwargs.name={NAME}",
        f"model.robustbench.kwargs.model_dir={folder / 'zoo'}",
        f"model.robustbench.model_info={folder / 'model_info'}",
        "defence=[none]",
        "attack=[pgd]",
        "attack.pgd.units=pixel",
        "attack.pgd.values=[0.0313725]",  # 8/255, where RobustBench measured it
        "metrics.auc.eps1=null",
        "attack.pgd.batch_size=8",
        "split.n_attack=6",
        "brittle.n_samples=5",
        "brittle.lime_samples=20",
        "brittle.perturbations_per_eval=20",
    )
    for stage in (prepare, train, attack, certify, budget, brittle, timing, survival):
        run_as_declared(stage, cfg)
    summary = run_as_declared(aggregate, cfg)
    run_as_declared(figures, cfg)
    return folder / "reports", folder / "models", summary


def test_the_checkpoint_is_imported_with_its_training_cost_unknown(robustbench_run):
    _, models, _ = robustbench_run
    [record] = [json.loads(path.read_text()) for path in models.glob("*.json")]
    assert record["model"] == "robustbench" and record["checkpoint"].endswith(f"zoo/cifar10/Linf/{NAME}.pt")
    assert record["t_train_source"] == "unknown" and record["t_train_process"] is None and record["t_train_wall"] is None
    assert 0 <= record["acc_ben"] <= 1


def test_kaplan_meier_at_the_full_budget_is_the_attacks_robust_accuracy(robustbench_run):
    """The survival data and the attack's accuracy are two readings of one set of outcomes."""
    reports, _, _ = robustbench_run
    data = read_table(reports / "survival_data.parquet")
    experiments = pd.read_csv(reports / "experiments.csv").set_index("attack_hash")
    for cell, rows in data.groupby("attack_hash"):
        km = KaplanMeierFitter().fit(rows["duration"], rows["event"], weights=rows["weight"])
        standing = float(km.survival_function_at_times(rows["duration"].max()).iloc[0])
        assert standing == pytest.approx(experiments.loc[cell, "acc_adv"], abs=1e-12)


def test_aggregate_runs_on_it_and_says_why_there_is_no_trash(robustbench_run):
    reports, _, summary = robustbench_run
    assert summary["n_attack_cells"] == 1
    trash = pd.read_csv(reports / "trash.csv")
    assert trash["t_train"].isna().all() and trash["trash_adv"].isna().all()
    assert summary["survival_missing_reason"].startswith("no survival model could be fitted")  # one model: nothing to split


def test_its_card_and_the_report_set_robustbenchs_accuracies_beside_ours(robustbench_run):
    reports, _, _ = robustbench_run
    [card] = [json.loads(path.read_text()) for path in (reports / "cards").glob("*.json")]
    beside = card["provenance"]["reported"]
    assert beside["theirs"]["clean_acc"] == pytest.approx(0.8334) and beside["theirs"]["robust_acc"] == pytest.approx(0.4321)
    experiments = pd.read_csv(reports / "experiments.csv")
    assert beside["ours"] == {"clean_acc": experiments["acc_ben"].iloc[0], "robust_acc": experiments["acc_adv"].iloc[0], "robust_attack": "pgd inf"}
    report = " ".join((reports / "report.html").read_text().split())
    assert "publisher / ours" in report and f"0.833 / {experiments['acc_ben'].iloc[0]:.3f}" in report
