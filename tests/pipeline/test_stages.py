"""Each stage's function on a tiny real config, end to end, and the per-cell caches."""

import json
import shutil
import warnings
from dataclasses import fields
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from lifelines.calibration import survival_probability_calibration
from omegaconf import OmegaConf

from tests.conftest import tiny_config
from tests.report.test_figures import STEMS as FIGURE_STEMS
from trashfire.attacks import campaign
from trashfire.brittle.spec import BrittleRecord
from trashfire.core import schema
from trashfire.core.grid import attack_cells, model_cells, training_cells
from trashfire.core.records import read_npz, read_table
from trashfire.core.schema import AttackRecord, Outcomes, TrainRecord
from trashfire.data.datasets import load_split
from trashfire.models import training
from trashfire.stages import aggregate, attack, brittle, budget, certify, figures, prepare, survival, timing, train
from trashfire.survival import analysis, scoring
from trashfire.survival import fitters as F
from trashfire.survival.split import split_groups


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """prepare -> train -> attack on the tiny grid, once per module: the folder it ran in."""
    folder = tmp_path_factory.mktemp("attacked")
    cfg = tiny_config(folder)
    for stage in (prepare, train, attack):
        run_as_declared(stage, cfg)
    return folder


@pytest.fixture
def pipeline(attacked, tiny_cfg, tmp_path):
    """The tiny grid after prepare -> train -> attack, a copy of its own; returns the config."""
    shutil.copytree(attacked, tmp_path, dirs_exist_ok=True)
    return tiny_cfg


def files_under(root: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()}


def run_as_declared(stage, cfg):
    """Run `stage` and check it against its STAGE: every declared input is there before it
    runs, every declared output after, and it wrote nothing outside what it declared (DVC
    would neither track nor restore it)."""
    root = Path(cfg.paths.reports).parent
    missing = [str(path) for path in stage.STAGE.inputs(cfg) if not path.exists()]
    assert not missing, f"{stage.STAGE.name} runs before its declared inputs exist: {missing}"
    before = files_under(root)
    result = stage.run(cfg)
    outputs = stage.STAGE.outputs(cfg)
    absent = [str(path) for path in outputs if not path.exists()]
    assert not absent, f"{stage.STAGE.name} did not write its declared outputs {absent}"
    written = [path for path, stamp in files_under(root).items() if before.get(path) != stamp]
    undeclared = [str(path) for path in written if not any(path == out or out in path.parents for out in outputs)]
    assert not undeclared, f"{stage.STAGE.name} wrote what it does not declare: {undeclared[:5]}"
    return result


def test_prepare_splits_and_standardises_with_training_statistics(tiny_cfg):
    folder = prepare.run(tiny_cfg)[0]
    meta = np.load(folder / "split_0.npz")
    labels = np.load(folder / "labels.npy")
    assert len(meta["train"]) == 320 and len(meta["test"]) == 80
    assert set(meta["train"]).isdisjoint(meta["test"])
    assert set(meta["attack"]) <= set(meta["test"])
    assert np.bincount(labels[meta["attack"]], minlength=10).tolist() == [2] * 10
    images = np.load(folder / "images.npy")[meta["train"]] / 16.0
    assert meta["mean"] == pytest.approx([images.mean()]) and meta["std"] == pytest.approx([images.std()])


def test_train_records_both_clocks_and_is_cached(tiny_cfg):
    prepare.run(tiny_cfg)
    records = train.run(tiny_cfg)
    assert {r["defence"] for r in records} == {"none", "gauss_in"}
    for record in records:
        assert set(record) == {f.name for f in fields(TrainRecord)} and record["weights_bytes"] > 0  # the schema's keys
        assert record["n_train"] == 320 and 0 <= record["acc_ben"] <= 1
        for quantity in ("t_train", "t_predict"):
            assert record[f"{quantity}_process"] > 0 and record[f"{quantity}_wall"] > 0

    def weight_stamps():
        return sorted(p.stat().st_mtime_ns for p in Path(tiny_cfg.paths.models).glob("*.pt"))

    stamps = weight_stamps()
    train.run(tiny_cfg)  # everything cached: nothing is rewritten
    assert weight_stamps() == stamps


def test_attack_outcomes_agree_with_accuracy_and_budgets(pipeline):
    for cell in attack_cells(pipeline):
        record = json.loads((campaign.attack_record_path(pipeline.paths.attacks, cell.hash)).read_text())
        outcomes = read_npz(campaign.outcomes_path(pipeline.paths.attacks, cell.hash))
        assert set(record) == {f.name for f in fields(AttackRecord)} | {"attack_value_standardised", schema.VERSION_KEY}  # the schema's keys, every one set
        assert None not in (record["engine"], record["n_events"], record["threads"]) and list(outcomes) == [
            name for name in Outcomes.ORDER if name not in ("broken_by", "norm_by_step")
        ]  # only a composite's cells name who broke a sample, only a minimal-norm attack's keep its norm by step
        assert record["acc_adv"] == pytest.approx(np.mean(outcomes["y_pred_adv"] == outcomes["y_true"]))
        assert record["t_attack_process"] > 0 and record["t_attack_wall"] > 0
        budget = {"inf": outcomes["norm_linf"], "2": outcomes["norm_l2"]}[cell.norm]
        assert budget.max() <= cell.value * (1 + 1e-4) + 1e-5


def test_attack_stage_reruns_only_new_cells(pipeline):
    assert attack.run(pipeline) == 0
    wider = OmegaConf.merge(pipeline, {"attack": {"pgd": {"values": [0.1, 0.3, 1.0]}}})
    assert attack.run(wider) == len(model_cells(pipeline))  # one new PGD eps per model cell
    assert all(training.is_cached(wider.paths.models, c) for c in training_cells(wider))


def test_downstream_stages_write_every_table_and_figure(pipeline, tmp_path):
    run_as_declared(certify, pipeline)
    run_as_declared(budget, pipeline)
    experiments, survival_data = run_as_declared(timing, pipeline)
    assert len(experiments) == len(attack_cells(pipeline))
    assert {"t_train", "t_predict", "t_attack", "t_attack_wall", "t_attack_process", "acc_adv", "train_hash"} <= set(experiments)
    # one row per attacked sample; its cell's events are the experiment row's
    # (the stage's in-memory rows hold their labels as categoricals: group by the labels present)
    assert survival_data.groupby("attack_hash", observed=True)["weight"].sum().eq(20).all() and survival_data["weight"].eq(1).all()
    assert len(survival_data) == experiments["n_attack"].sum() and set(survival_data["event"]) == {0, 1}
    events = survival_data.groupby("attack_hash", observed=True)["event"].sum()
    assert events.to_dict() == experiments.set_index("attack_hash")["n_events"].to_dict()
    counts = experiments[["n_misclassified_before", "n_broken", "n_survived"]].sum(axis=1)
    assert counts.eq(experiments["n_attack"]).all()
    comparison = run_as_declared(survival, pipeline)
    assert list(comparison["fitter"]) == [*pipeline.survival.fitters, *scoring.BASELINES]  # every configured fitter, then the baselines
    assert comparison["selected"].sum() == 1 and (comparison["split_by"] == "train_hash").all()
    assert run_as_declared(brittle, pipeline) == len(model_cells(pipeline))
    summary = run_as_declared(aggregate, pipeline)
    assert summary["n_attack_cells"] == len(experiments)
    assert summary["survival_split_by"] == "train_hash" and isinstance(summary["survival_beats_baselines"], bool)
    written = run_as_declared(figures, pipeline)
    reports = tmp_path / "reports"
    for name in (
        "experiments.csv",
        "survival_data.parquet",
        "trash.csv",
        "trash_summary.csv",
        "robustness.csv",
        "auc_table.csv",
        "tau_table.csv",
        "evp_tau.csv",
        "evp_convergence.csv",
        "curves.csv",
        "brittle.csv",
        "metrics.json",
        "headline.json",
        "report.html",
        "survival/aft_comparison.csv",
        "survival/aft_comparison.tex",
        "survival/calibration.png",
        "survival/coefficients.png",
        "survival/expected_times.csv",
        "survival/models.pkl",
        "survival/kaplan_meier.png",
        "survival/logrank.csv",
    ):
        assert (reports / name).is_file(), name
    for stem in FIGURE_STEMS:  # every figure, the survival-in-eps ones included
        assert (reports / "figures" / f"{stem}.png").is_file() and not (reports / "figures" / f"{stem}.pdf").exists(), stem  # report.formats=[png]
    assert (reports / "report.html") in written
    headline = json.loads((reports / "headline.json").read_text())  # what `dvc exp show` shows: metrics.json's headline
    assert headline["acc_ben"] == pytest.approx(summary["acc_ben_mean"])
    assert sum(count for key, count in headline.items() if key.startswith("findings_")) == len(summary["findings"])
    trash = pd.read_csv(reports / "trash.csv")
    assert np.allclose(trash["trash_adv"], trash["t_train"] / trash["E_T"])
    robustness = pd.read_csv(reports / "robustness.csv")
    # digits' pixel std is about 0.4 (of 16 levels): [0, 0.3] pixel units lies inside the grid's 1.0 standardised
    # a tiny model can be degenerate (near chance after one epoch): it has no R, and says why
    sound = ~robustness["degenerate"]
    assert robustness.loc[sound, "auc_R"].notna().all() and robustness["eps1"].eq(0.3).all(), robustness["note"].tolist()
    assert robustness.loc[~sound, "auc_R"].isna().all() and robustness.loc[~sound, "note"].str.contains("degenerate").all()
    for path in (reports / "brittle").glob("*.json"):
        assert set(json.loads(path.read_text())) == {f.name for f in fields(BrittleRecord)} | {schema.VERSION_KEY}  # the schema's keys
    cards = sorted((reports / "cards").glob("*.json"))
    assert len(cards) == len(training_cells(pipeline))
    card = json.loads(cards[0].read_text())
    assert {"brittle_score", "acc_ben", "attacks", "evp_and_auc", "survival_and_trash"} <= set(card["model_cells"][0])


def test_step_half_divides_the_learning_rate_by_ten_from_half_of_training():
    assert [training.scheduled_lr(0.1, "step_half", p) for p in (0.0, 0.49, 0.5, 0.99)] == pytest.approx([0.1, 0.1, 0.01, 0.01])
    assert training.scheduled_lr(0.1, "constant", 0.9) == 0.1


def test_a_step_decay_cell_trains_to_different_weights(tiny_cfg):
    prepare.run(tiny_cfg)
    decayed = OmegaConf.merge(tiny_cfg, {"train": {"lr_schedule": "step_half"}})
    split = load_split(tiny_cfg.paths.processed, tiny_cfg, "digits", 0)
    weights = {}
    for name, cfg in (("constant", tiny_cfg), ("step_half", decayed)):
        undefended = training_cells(cfg)[0]
        model, _ = training.train_cell(undefended, split, cfg, torch.device("cpu"))
        weights[name] = model.state_dict()
    assert any(not torch.equal(weights["constant"][k], weights["step_half"][k]) for k in weights["constant"] if k.endswith("weight"))


def test_ici_and_e50_on_real_per_sample_rows_equal_lifelines_calibration(pipeline):
    """On the survival data of a real attacked grid (the composed default, shrunk), our ICI
    and E50 are lifelines' `survival_probability_calibration` on the same rows."""
    timing.run(pipeline)
    data = read_table(Path(pipeline.paths.reports) / "survival_data.parquet")
    data["duration"] /= analysis.fit_unit(pipeline.clock)  # as the survival stage fits it
    train_part, _ = analysis.usable_covariates(*split_groups(data, "train_hash", 0.2, 0))
    frame = F.model_frame(train_part)
    assert len(frame) > 50 and frame[F.EVENT].sum() > 10
    t0 = analysis.calibration_time(frame, 0.5)
    for name in ("weibull", "loglogistic"):
        fit = F.fit_one(name, pipeline.survival.models[name], frame, pipeline.survival.retries)
        ours = F.calibration(fit, frame, t0)
        _, ax = plt.subplots()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, ici, e50 = survival_probability_calibration(fit.fitter, frame.drop(columns=F.WEIGHT), t0=t0, ax=ax)
        plt.close("all")
        assert ours == pytest.approx((ici, e50), abs=1e-6), name
