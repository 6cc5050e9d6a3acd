"""The reproduction page (bench/reproduce.py): our numbers beside the papers', with intervals
computed as its text says, verdicts that follow from them, and a page that is what the kept
runs give."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.paths import bench_script

ROOT = Path(__file__).resolve().parents[2]


def reproduce_module():
    return bench_script("reproduce")


@pytest.fixture(scope="module")
def reproduce():
    return reproduce_module()


def test_the_mean_interval_is_students_t_over_seeds(reproduce):
    interval = reproduce.mean_interval([0.40, 0.44, 0.48])
    # mean 0.44, SD 0.04, t(0.975, 2) = 4.302653: half-width 4.302653 * 0.04 / sqrt(3)
    assert interval.mean == pytest.approx(0.44)
    assert interval.hi - interval.mean == pytest.approx(0.0993655, abs=1e-6)
    assert interval.n == 3
    assert math.isnan(reproduce.mean_interval([0.5]).lo)


def test_the_difference_to_a_paper_is_welchs_with_the_papers_seeds(reproduce):
    diff = reproduce.welch_difference([0.40, 0.44, 0.48], 0.438, 0.02, 20)
    # SE^2 = 0.04^2/3 + 0.02^2/20 = 5.53333e-4; Welch df = 2.15249; t(0.975, 2.15249) = 4.02335
    assert diff.mean == pytest.approx(0.002)
    assert diff.hi - diff.mean == pytest.approx(4.02335 * math.sqrt(5.53333e-4), rel=1e-5)
    assert reproduce.difference_verdict(diff) == "agrees"
    far = reproduce.welch_difference([0.50, 0.51, 0.52, 0.50, 0.51], 0.438, 0.02, 20)
    assert reproduce.difference_verdict(far) == "differs: ours higher by 0.070"


def test_a_direction_only_claim_agrees_only_when_the_interval_excludes_zero_on_its_side(reproduce):
    Interval = reproduce.Interval
    assert reproduce.sign_verdict(Interval(-0.01, -0.02, -0.001, 200), -1) == "agrees"
    assert reproduce.sign_verdict(Interval(0.01, 0.001, 0.02, 200), -1) == "differs: the opposite direction"
    assert reproduce.sign_verdict(Interval(-0.01, -0.02, 0.001, 200), -1).startswith("inconclusive")


def test_the_brittle_gap_pairs_the_same_held_out_samples_whatever_their_order(reproduce):
    normal = {"positions": [3, 1, 2], "image_scores": [0.30, 0.10, 0.20]}
    robust = {"positions": [1, 2, 3, 9], "image_scores": [0.08, 0.15, 0.29, 5.0]}
    gap = reproduce.paired_gap(normal, robust)
    assert gap.n == 3  # sample 9 was not scored on the normal model
    assert gap.mean == pytest.approx(((0.08 - 0.10) + (0.15 - 0.20) + (0.29 - 0.30)) / 3)


def r_rows(epoch_values: dict[int, list[float]]) -> list[dict]:
    return [
        {"model": "lenet5", "defence": "none", "attack_family": "fgm linf", "epochs": epoch, "seed": seed, "auc_R": r, "acc_ben": 0.98}
        for epoch, values in epoch_values.items()
        for seed, r in enumerate(values)
    ]


def test_table_1_rows_compare_every_epoch_run_and_say_which_were_not(reproduce):
    run = {"r": r_rows({1: [0.43, 0.44, 0.45, 0.44, 0.44], 10: [0.60, 0.61, 0.60, 0.62, 0.61]})}
    lines = reproduce.table_004(run)
    by_epoch = {line.split("|")[1].strip(): line for line in lines[2:]}
    assert "| agrees |" in by_epoch["1"] and "0.440 [" in by_epoch["1"]
    assert "differs: ours higher by 0.109" in by_epoch["10"]
    assert all("not run" in by_epoch[e] for e in ("25", "50", "150", "300"))
    assert by_epoch["1"].endswith("| not measured |")


def test_table_1_sets_the_unclipped_fgsm_r_beside_ours_with_its_own_verdict(reproduce):
    unclipped = [{"seed": s, "epochs": 1, "auc_R_clipped": 0.55, "auc_R_unclipped": r} for s, r in enumerate([0.43, 0.44, 0.45, 0.44, 0.44])]
    run = {"r": r_rows({1: [0.55, 0.56, 0.55, 0.54, 0.55]}), "fgsm_unclipped": unclipped}
    [row] = [line for line in reproduce.table_004(run)[2:] if line.startswith("| 1 |")]
    assert "differs: ours higher by 0.112" in row and row.endswith("| 0.440 [0.431, 0.449], agrees |")


def test_the_claims_table_marks_a_verdict_that_differs_between_digits_and_mnist(reproduce):
    def finding(id, verdict):
        return {"id": id, "claim": f"claim {id}", "verdict": verdict, "value": 0.5, "clock": None}

    kept = {
        "default": {"findings": [finding("a", "holds"), finding("b", "holds"), finding("c@wall", "fails")]},
        "repro_004_mnist": {"findings": [finding("a", "fails"), finding("b", "not testable")]},
        "repro_002_mnist": {"findings": [finding("b", "holds")]},
    }
    rows = {line.split("`")[1]: line for line in reproduce.claims_table(kept)[2:]}
    assert set(rows) == {"a", "b"}  # another clock's copy of a finding is not a claim of its own
    assert rows["a"].endswith("| **yes** |") and "fails (0.5) (repro_004_mnist)" in rows["a"]
    assert rows["b"].endswith("|  |") and "holds (0.5) (repro_002_mnist)" in rows["b"]


def test_the_checked_in_page_is_what_the_kept_runs_give(reproduce):
    page = ROOT / "docs" / "reproduction.md"
    assert page.read_text() == reproduce.render(reproduce.load_kept()), "docs/reproduction.md is stale: run python bench/reproduce.py page"


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory):
    from tests.data.test_datasets import write_idx

    folder = tmp_path_factory.mktemp("mnist")
    write_idx(folder, n=100, seed=0)
    return folder


def preset(name: str, root: Path):
    from trashfire.core.config import compose, validate

    return validate(compose([f"experiment={name}", f"data.mnist.root={root}"], conf=ROOT / "conf"))


def test_the_004_preset_is_004s_setup_at_five_seeds_and_three_checkpoints(mnist_root):
    cfg = preset("repro_004_mnist", mnist_root)
    assert list(cfg.model) == ["lenet5"] and list(cfg.data) == ["mnist"] and (cfg.data.mnist.size, cfg.data.mnist.channels) == (32, 3)
    assert len(cfg.split.seeds) >= 5 and {1, 10, 25} <= set(cfg.train.per_model.lenet5.epochs)
    assert (cfg.train.batch_size, cfg.train.momentum, cfg.train.weight_decay, cfg.train.per_model.lenet5.lr) == (125, 0.9, 0.0005, [0.01])
    assert list(cfg.attack) == ["fgm"] and list(cfg.attack.fgm["values"]) == [0.0125, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
    assert (cfg.metrics.auc.eps0, cfg.metrics.auc.eps1, cfg.attack.fgm.units) == (0.0, 0.3, "pixel")


def test_the_002_preset_trains_each_architecture_normally_and_with_pgd_at_8_255(mnist_root):
    cfg = preset("repro_002_mnist", mnist_root)
    assert set(cfg.model) == {"mlp2", "cnn3", "cnn5"} and set(cfg.defence) == {"none", "adv_train"}
    assert list(cfg.defence.adv_train["values"]) == [pytest.approx(8 / 255, abs=1e-6)] and cfg.defence.adv_train.kwargs.attack.norm == "inf"
    assert (cfg.train.optimiser, cfg.train.lr, cfg.train.batch_size) == ("adam", [0.001], 32)
    assert cfg.metrics.brittle.n_samples >= 200 and cfg.metrics.brittle.robust_acc.eps == pytest.approx(8 / 255, abs=1e-6)


def test_the_003_preset_has_three_depths_three_seeds_every_defence_and_attack_family(mnist_root):
    cfg = preset("repro_003_mnist", mnist_root)
    assert set(cfg.model) == {"cifar_resnet8", "cifar_resnet14", "cifar_resnet20"} and len(cfg.split.seeds) == 3
    assert set(cfg.defence) == {"none", "gauss_in", "gauss_out", "conf", "fsq", "adv_train"}
    assert set(cfg.attack) == {"fgm", "pgd", "deepfool", "pixel", "threshold", "hsj"} and cfg.timing.clock == "flops"
