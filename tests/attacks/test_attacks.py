"""All six attack families through the attack stage on a tiny model: each runs, stays within
its budget, and its per-sample outcomes agree with its accuracy; PGD's accuracy does not
rise with eps."""

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, tiny_overrides
from trashfire.attacks import campaign
from trashfire.attacks.art_attacks import art_classifier, build_attack
from trashfire.attacks.samples import budget_subset
from trashfire.core.config import compose, validate
from trashfire.core.grid import UNDEFENDED, attack_cells
from trashfire.core.records import read_json, read_npz
from trashfire.data.datasets import load_split
from trashfire.models import training
from trashfire.stages import attack, prepare, train

FAMILIES = ["fgm", "pgd", "deepfool", "pixel", "threshold", "hsj"]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """A 3-layer CNN on 400 digits, attacked once by every family with a small budget."""
    tmp = tmp_path_factory.mktemp("attacks")
    cfg = validate(
        compose(
            tiny_overrides(
                tmp,
                "model=[cnn3]",
                "defence=[none]",
                f"attack=[{','.join(FAMILIES)}]",
                "train.epochs=[3]",
                "attack.fgm.norms=[inf,1,2]",
                "attack.fgm.values=[0.5]",
                "attack.pgd.norms=[inf,1,2]",
                "attack.pgd.values=[0.5]",
                "attack.deepfool.values=[3]",
                "attack.deepfool.max_iter=3",
                "attack.pixel.values=[4]",
                "attack.pixel.max_iter=2",
                "attack.pixel.samples=6",
                "attack.threshold.values=[16]",
                "attack.threshold.max_iter=2",
                "attack.threshold.samples=6",
                "attack.hsj.values=[50]",
                "attack.hsj.max_iter=2",
                "attack.hsj.samples=6",
                "attack.hsj.kwargs.init_eval=10",
                "attack.hsj.kwargs.init_size=20",
            ),
            conf=ROOT / "conf",
        )
    )
    prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    return cfg


def outcomes_of(cfg):
    for cell in attack_cells(cfg):
        record = read_json(campaign.attack_record_path(cfg.paths.attacks, cell.hash))
        yield cell, record, read_npz(campaign.outcomes_path(cfg.paths.attacks, cell.hash))


def test_every_family_runs_and_its_outcomes_agree_with_its_accuracy(attacked):
    seen = set()
    for cell, record, out in outcomes_of(attacked):
        seen.add((cell.attack, cell.norm))
        assert record["acc_adv"] == pytest.approx(np.mean(out["y_pred_adv"] == out["y_true"]))
        assert record["n_attack"] == len(out["y_true"]) == (6 if cell.attack in ("pixel", "threshold", "hsj") else 20)
        assert record["t_attack_process"] > 0 and record["t_attack_wall"] > 0
    assert seen == {("fgm", n) for n in ("inf", "1", "2")} | {("pgd", n) for n in ("inf", "1", "2")} | {
        ("deepfool", "2"),
        ("pixel", "0"),
        ("threshold", "inf"),
        ("hsj", "2"),
    }


def test_perturbations_stay_within_each_attacks_budget(attacked):
    split = load_split(attacked.paths.processed, attacked, "digits", 0)
    clip_low, clip_high = split.clip_values
    for cell, _, out in outcomes_of(attacked):
        if cell.attack in ("fgm", "pgd"):
            norm = out[{"inf": "norm_linf", "1": "norm_l1", "2": "norm_l2"}[cell.norm]]
            assert norm.max() <= cell.value * (1 + 1e-4) + 1e-5, (cell.attack, cell.norm)
        elif cell.attack == "threshold":  # th of 255 levels of the clip range
            assert out["norm_linf"].max() <= cell.value / 255 * (clip_high - clip_low) + 1e-4
        elif cell.attack == "pixel":  # th pixels (one channel here)
            assert out["norm_l0"].max() <= cell.value


def test_pgd_accuracy_does_not_rise_with_eps(attacked):
    split = load_split(attacked.paths.processed, attacked, "digits", 0)
    cell = attack_cells(attacked)[0].model.train
    model = training.load_weights(attacked.paths.models, cell, split)
    classifier = art_classifier(model, split, dict(UNDEFENDED), torch.device("cpu"))
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    correct = []
    for eps in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6):
        spec = {
            "target": "art.attacks.evasion.ProjectedGradientDescent",
            "norm": "inf",
            "param": "eps",
            "value": eps,
            "max_iter": 10,
            "step_scale": 2.5,
            "batch_size": 100,
            "kwargs": {"num_random_init": 0, "verbose": False},
        }
        x_adv = build_attack(classifier, spec).generate(x=x, y=y)
        correct.append(int((classifier.predict(x_adv).argmax(1) == y).sum()))
    assert all(later <= earlier + 1 for earlier, later in zip(correct, correct[1:])), correct
    assert correct[-1] < correct[0]


def test_budget_subset_takes_classes_in_turn():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    assert budget_subset(labels, 4).tolist() == [0, 1, 3, 5]
    assert budget_subset(labels, None).tolist() == list(range(8))


def test_shared_durations_sum_to_the_cells_attack_time_on_both_clocks(attacked):
    for cell, record, out in outcomes_of(attacked):
        n = record["n_attack"]
        # The process clock counts the compute threads' CPU time at the kernel's scheduler
        # tick (4 ms at 250 Hz), so the laps agree with the cell's time to 1% or two ticks;
        # the bookkeeping before the first and after the last lap is no sample's (about
        # 0.1 ms of CPU). On the wall clock that bookkeeping lasts as long as the process is
        # preempted (the suite runs a worker per core), so the laps are at most the cell's
        # time, and most of it (tests/attacks/test_engine.py holds the sharing itself to the bit).
        process = out["duration_process_shared"].sum()
        assert process == pytest.approx(n * record["t_attack_process"], rel=0.01, abs=8e-3), (cell.attack, cell.norm)
        wall, total = out["duration_wall_shared"].sum(), n * record["t_attack_wall"]
        assert 0.5 * total <= wall <= total * (1 + 1e-9), (cell.attack, cell.norm, wall, total)
        assert out["duration_wall"].min() > 0
        assert record["n_events"] == out["event"].sum()
        np.testing.assert_array_equal(out["event"], out["y_pred_adv"] != out["y_true"])


def test_black_box_searches_count_their_queries_and_stand_apart_per_image(attacked):
    for cell, _record, out in outcomes_of(attacked):
        if cell.attack not in ("pixel", "threshold", "hsj"):
            continue
        searched = out["y_pred_ben"] == out["y_true"]
        assert (out["failure_step"][searched] > 0).all() and (out["failure_step"][~searched] == 0).all()
        assert len(np.unique(out["duration_wall_shared"][searched])) == searched.sum()  # one search, one time
        assert (out["queries"][searched] == out["failure_step"][searched] + 2).all()  # its search, the first query and the verification
        assert (out["gradients"] == 0).all()  # black-box: forward passes only


def test_a_model_cells_torch_cells_share_one_rate_and_price_the_same_work_alike(attacked):
    """The compute clock on the attack stage: a censored PGD sample's work is the same exact
    count in every PGD cell of a model cell (its budget), and, priced at the model cell's one
    rate per algorithm, the same seconds; a black-box search's seconds are its FLOPs at its
    cell's search rate."""
    rates, budgets, seconds = {}, set(), set()
    for cell, record, out in outcomes_of(attacked):
        if record["engine"] == "torch":
            rates.setdefault(cell.attack, []).append(record["rates"]["steps"])
            np.testing.assert_allclose(out["duration_wall"], out["flops"] * record["rates"]["steps"]["wall"], rtol=1e-12)
        if cell.attack == "pgd":  # every norm: the same max_iter
            censored = ~out["event"]
            budgets |= set(zip(out["queries"][censored], out["gradients"][censored], out["flops"][censored]))
            seconds |= set(out["duration_process"][censored].round(15))
        if cell.attack in ("pixel", "threshold", "hsj"):
            assert record["rates"]["search"]["source"] == "laps" and record["rates"]["search"]["units"] == (out["y_pred_ben"] == out["y_true"]).sum()
        assert out["flops"].min() >= record["flops_forward"]  # every sample took at least its first query
    assert all(len({str(r) for r in group}) == 1 for group in rates.values()), rates  # one rate per algorithm
    assert all(group[0]["source"].startswith(("model cell", "calibration")) for group in rates.values())
    assert len(budgets) == 1 and next(iter(budgets))[:2] == (11, 10)  # PGD-10: the first query, ten steps, the last check
    assert len(seconds) <= 1
