"""The reproduction page (bench/reproduce.py): our numbers beside the papers', with intervals
computed as its text says, verdicts that follow from them, and a page that is what the kept
runs give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.paths import bench_script

ROOT = Path(__file__).resolve().parents[2]


def reproduce_module():
    return bench_script("reproduce")


@pytest.fixture(scope="module")
def reproduce():
    return reproduce_module()


@pytest.fixture(scope="module")
def page():
    return bench_script("reproduction_page")


def r_rows(epoch_values: dict[int, list[float]], model: str = "lenet5") -> list[dict]:
    return [
        {"model": model, "defence": "none", "attack_family": "fgm linf", "epochs": epoch, "seed": seed, "auc_R": r, "acc_ben": 0.98}
        for epoch, values in epoch_values.items()
        for seed, r in enumerate(values)
    ]


def rows_by_first_cell(lines: list[str]) -> dict[str, str]:
    return {line.split("|")[1].strip(): line for line in lines[2:]}


def test_agreement_needs_tost_within_the_margin_and_difference_needs_welchs_test():
    """A paper's mean 0.438 (SD 0.02 over 20 seeds), margin 0.04: five seeds near it agree
    (TOST rejects), five seeds 0.07 above differ (Welch rejects), three spread seeds are
    underpowered, with the smallest difference they detect at 80% power (noncentral t)."""
    from statsmodels.stats.weightstats import ttost_ind

    from trashfire.core import inference
    from trashfire.metrics import verdicts

    near, far, spread = [0.44, 0.45, 0.43, 0.44, 0.46], [0.50, 0.51, 0.52, 0.50, 0.51], [0.40, 0.48, 0.44]
    estimates = [inference.welch_difference(x, 0.438, 0.02, 20) for x in (near, far, spread)]
    found = verdicts.agreements(estimates, [0.04] * 3)
    assert [a.verdict for a in found] == ["agrees", "differs", "underpowered"]
    assert found[1].text == "differs: ours higher by 0.07" and "detects" in found[2].text
    # the raw TOST p of the first row is statsmodels' (20 paper seeds with its mean and SD);
    # Holm over the 3 rows multiplies the smallest p by 3
    z = np.arange(20) - 9.5
    paper = 0.438 + 0.02 * z / z.std(ddof=1)
    raw = inference.equivalence_p(estimates[0], 0.04)
    assert raw == pytest.approx(ttost_ind(np.array(near), paper, -0.04, 0.04, usevar="unequal")[0], rel=1e-9)
    assert found[0].p_agree == pytest.approx(3 * raw)


def test_table_1_gives_every_epoch_run_a_margin_power_and_verdict_and_says_which_were_not(page):
    run = {"r": r_rows({1: [0.43, 0.44, 0.45, 0.44, 0.44], 10: [0.60, 0.61, 0.60, 0.62, 0.61]})}
    by_epoch = rows_by_first_cell(page.table_004(run))
    assert by_epoch["1"].endswith("| agrees |") and "0.440 [" in by_epoch["1"] and "| 0.041 |" in by_epoch["1"]
    assert "differs: ours higher by 0.109" in by_epoch["10"]
    assert all("not run" in by_epoch[e] and "beyond the 2-core preset" in by_epoch[e] for e in ("25", "50", "150", "300"))
    assert all("no run kept" in line for line in page.table_004(None)[2:])


def test_the_rise_from_epoch_1_is_paired_over_seeds_against_004s_rise(page):
    """004's rise 1 -> 10 is 0.0609; ours, paired over seeds, is 0.06 exactly in every seed
    but one: it agrees within half 004's rise."""
    run = {"r": r_rows({1: [0.43, 0.44, 0.45, 0.44, 0.44], 10: [0.49, 0.50, 0.51, 0.50, 0.505]})}
    [row] = [line for line in page.rises_004(run)[2:] if "1 -> 10" in line]
    assert "+0.061" in row and "0.061 [" in row and row.endswith("| agrees |") and "| 0.030 |" in row


def test_the_ablation_compares_each_lenet_variant_clipped_and_not_and_names_what_explains_the_gap(page):
    unclipped = [
        {"seed": s, "epochs": e, "auc_R_clipped": 0.6, "auc_R_unclipped": r}
        for e, values in {1: [0.43, 0.44, 0.45, 0.44, 0.44], 10: [0.49, 0.50, 0.51, 0.50, 0.505]}.items()
        for s, r in enumerate(values)
    ]
    timing = {"pipeline": {"wall_s": 600.0}}
    lenet5 = {"r": r_rows({1: [0.55, 0.56, 0.55, 0.54, 0.55], 10: [0.60, 0.61, 0.60, 0.62, 0.61]}), "fgsm_unclipped": unclipped} | timing
    padded = {"r": r_rows({1: [0.55, 0.56, 0.55, 0.54, 0.55], 10: [0.60, 0.61, 0.60, 0.62, 0.61]}, "lenet5_padded")} | timing
    lines, explained = page.ablation_004({"repro_004_mnist": lenet5}, {"lenet5_padded": padded})
    arms = {(line.split("|")[1].strip(), line.split("|")[2].strip(), line.split("|")[3].strip()) for line in lines[2:]}
    assert arms == {
        ("`lenet5`", "yes", "1"),
        ("`lenet5`", "yes", "10"),
        ("`lenet5`", "no", "1"),
        ("`lenet5`", "no", "10"),
        ("`lenet5_padded`", "yes", "1"),
        ("`lenet5_padded`", "yes", "10"),
    }
    assert explained[0] == "- The gap is explained by the setup: `lenet5` with FGSM not clipped agrees with 004 at every epoch and rise run."
    unexplained = page.gap_explained(
        {("lenet5", True): {"R at epoch 1": "differs", "rise 1 -> 10": "differs"}, ("lenet5", False): {"R at epoch 1": "agrees", "rise 1 -> 10": "differs"}}
    )
    assert unexplained[0].startswith("- No arm agrees with 004 at every epoch and rise run")
    assert "- R at epoch 1: differs only with FGSM clipped; without clipping no arm differs, so clipping explains it." in unexplained
    assert "- rise 1 -> 10: differs in every arm, so neither the LeNet variant nor clipping explains it." in unexplained


def test_the_brittle_gap_pairs_the_same_held_out_samples_relative_to_the_normal_model(page):
    normal = {"positions": [3, 1, 2], "image_scores": [0.30, 0.10, 0.20]}
    robust = {"positions": [1, 2, 3, 9], "image_scores": [0.08, 0.15, 0.29, 5.0]}
    gap = page.paired_gap(normal, robust)
    assert gap.n == 3  # sample 9 was not scored on the normal model
    assert gap.value == pytest.approx(((0.08 - 0.10) + (0.15 - 0.20) + (0.29 - 0.30)) / 3 / 0.2)


def test_a_direction_only_claim_agrees_when_the_fall_reaches_its_margin_and_differs_when_it_falls_short():
    from trashfire.core import inference
    from trashfire.metrics import verdicts

    big, small, wide = (inference.mean_over_units(x) for x in ([-0.2, -0.21, -0.19, -0.2], [-0.02, -0.021, -0.019, -0.02], [-0.3, 0.1, -0.2]))
    found = verdicts.direction_agreements([big, small, wide], -1, 0.1)
    assert [a.verdict for a in found] == ["agrees", "differs", "underpowered"]


def test_the_claims_table_compares_mnist_with_digits_on_the_claims_scale_within_its_margin(page):
    def finding(id, verdict, value, lo, hi, n=9, smallest=0.0953):
        return {
            "id": id,
            "claim": f"claim {id}",
            "verdict": verdict,
            "value": value,
            "lo": lo,
            "hi": hi,
            "n": n,
            "smallest_effect": smallest,
            "clock": None,
            "p_adjusted": 0.01,
        }

    kept = {
        "default": {
            "findings": [finding("003_trash_above_one_fgm", "holds", 3.0, 2.9, 3.1), finding("b", "holds", 0.5, 0.4, 0.6), finding("c@wall", "fails", 1, 0, 2)]
        },
        "repro_003_mnist": {"findings": [finding("003_trash_above_one_fgm", "holds", 3.01, 2.95, 3.07), finding("b", "inconclusive", 0.9, 0.8, 1.0)]},
    }
    rows = {line.split("`")[1]: line for line in page.claims_table(kept)[2:]}
    assert set(rows) == {"003_trash_above_one_fgm", "b"}  # another clock's copy of a finding is not a claim of its own
    assert "| agrees (repro_003_mnist) |" in rows["003_trash_above_one_fgm"] and rows["003_trash_above_one_fgm"].endswith("|  |")
    assert "differs: MNIST higher by 0.4 (repro_003_mnist)" in rows["b"] and rows["b"].endswith("| **yes** |")
    # a run kept before issue 59 (no adjusted p) is left out, and the page says so
    old = {"findings": [{k: v for k, v in f.items() if k != "p_adjusted"} for f in kept["repro_003_mnist"]["findings"]]}
    assert all("repro_003_mnist" not in line for line in page.claims_table(kept | {"repro_003_mnist": old})[2:])
    assert "`repro_003_mnist`" in page.stale_claims(kept | {"repro_003_mnist": old})[0]
    # TRASH compared on the log scale: the digits' interval [2.9, 3.1] is log 3.1 - log 2.9 wide
    value, se, df = page.claim_estimate(finding("003_trash_above_one_fgm", "holds", 3.0, 2.9, 3.1))
    assert value == pytest.approx(np.log(3.0)) and df == 8 and se == pytest.approx((np.log(3.1) - np.log(2.9)) / (2 * 2.306004), rel=1e-6)


def test_mnists_trash_is_explained_by_the_presets_epochs_and_a_perfect_rank_order_is_not_underpowered(page):
    def finding(id, value, lo, hi):
        return {"id": id, "claim": id, "verdict": "holds", "value": value, "lo": lo, "hi": hi, "n": 9, "smallest_effect": 0.1, "p_adjusted": 0.01}

    def cells(epochs: dict[str, int]) -> list[dict]:
        # two attack families per undefended model, and a defended model that TRASH's claims leave out
        rows = [{"model": m, "epochs": e, "seed": s, "defence": "none"} for m, e in epochs.items() for s in (0, 1) for _ in range(2)]
        return rows + [{"model": "m1", "epochs": 100, "seed": 0, "defence": "adv_train"}]

    kept = {
        "default": {"findings": [finding("003_trash_above_one_pgd", 2.0, 1.8, 2.2)], "r": cells({"m1": 10, "m2": 10})},
        "repro_003_mnist": {
            "findings": [finding("003_trash_above_one_pgd", 0.9, 0.8, 1.0), finding("003_deeper_trains_longer", 1.0, np.nan, np.nan)],
            "r": cells({"m1": 3, "m2": 3}),
        },
    }
    [line] = page.trash_explained(kept)
    # 3 of 10 epochs scale TRASH by 0.3; measured 0.45, so E[T] in passes gives the other x1.5
    assert "train 3 epochs, the default's 10 (geometric means), which alone scales TRASH by 0.30" in line and "PGD 0.45 (the rest, x1.50" in line
    # the epochs are the undefended models' geometric mean: 6 and 10 epochs give sqrt(60)
    assert page.undefended_epochs({"r": cells({"m1": 6, "m2": 10})}) == pytest.approx(60**0.5)
    assert page.trash_explained(kept | {"repro_003_mnist": kept["repro_003_mnist"] | {"r": cells({"m1": 10, "m2": 10})}}) == []
    kept["default"]["findings"].append(finding("003_deeper_trains_longer", 1.0, np.nan, np.nan))
    row = next(line for line in page.claims_table(kept) if "`003_deeper_trains_longer`" in line)
    assert "not comparable: at least one side has no interval" in row and "underpowered" not in row


def test_the_checked_in_page_is_what_the_kept_runs_give(page):
    assert (ROOT / "docs" / "reproduction.md").read_text() == page.render(page.load_kept()), "docs/reproduction.md is stale: run python bench/reproduce.py page"


def test_a_004_run_with_another_lenet_is_kept_as_an_arm_of_the_ablation(reproduce, page):
    assert reproduce.kept_path("repro_004_mnist", ["model=[lenet5_padded]"]) == page.ABLATION_004 / "lenet5_padded.json"
    assert reproduce.kept_path("repro_004_mnist", []) == page.KEPT / "repro_004_mnist.json"
    assert reproduce.kept_path("repro_002_mnist", ["model=[cnn3]"]) == page.KEPT / "repro_002_mnist.json"


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
    assert cfg.brittle.n_samples >= 200 and cfg.metrics.brittle.robust_acc.eps == pytest.approx(8 / 255, abs=1e-6)


def test_the_003_preset_has_three_depths_three_seeds_every_defence_and_attack_family(mnist_root):
    cfg = preset("repro_003_mnist", mnist_root)
    assert set(cfg.model) == {"cifar_resnet8", "cifar_resnet14", "cifar_resnet20"} and len(cfg.split.seeds) == 3
    assert set(cfg.defence) == {"none", "gauss_in", "gauss_out", "conf", "fsq", "adv_train"}
    assert set(cfg.attack) == {"fgm", "pgd", "deepfool", "pixel", "threshold", "hsj"} and cfg.clock == "flops"
