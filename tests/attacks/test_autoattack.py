"""AutoAttack's components (APGD-CE, APGD-T on the DLR loss, Square) and their composite: our
AutoPGD is ART's APGD, the composite is exactly the worst case of its components run alone,
APGD-CE is at least as strong as PGD on the same budget, the composite's clock shares out
its whole run and its cell is deterministic, and the options validate with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from art.attacks.evasion import AutoProjectedGradientDescent
from art.estimators.classification import PyTorchClassifier
from torch import nn

from tests.conftest import ROOT, recorded, tiny_overrides
from trashfire.attacks import campaign
from trashfire.attacks.art_attacks import art_classifier, build_attack
from trashfire.attacks.autoattack import AutoPGD, wrong_classes
from trashfire.attacks.engine import run_engine
from trashfire.attacks.spec import attack_strength
from trashfire.attacks.target import Target
from trashfire.core.config import compose, normalise, validate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import UNDEFENDED, attack_cells, attack_specs, training_cells
from trashfire.core.records import read_json, read_npz
from trashfire.data.datasets import load_split
from trashfire.models import training
from trashfire.stages import attack, prepare, train

CPU = torch.device("cpu")
NEW = ["apgd_ce", "apgd_dlr", "square", "autoattack"]
EPS = [0.1, 0.2]  # pixel units: 0.1 leaves part of the tiny model standing, 0.2 breaks most
# the composite on ART's components image by image, at the budgets of the components' own
# options (apgd_ce.yaml, apgd_dlr.yaml): a custom version (the sequence engine leaves FAB-T
# out: ART has none)
REDUCED_SEQUENCE = [
    "attack.autoattack.engine=sequence",
    "attack.autoattack.version=custom",
    "attack.autoattack.kwargs.components.apgd_ce.max_iter=10",
    "attack.autoattack.kwargs.components.apgd_t.max_iter=10",
    "attack.autoattack.kwargs.components.apgd_t.kwargs.n_targets=3",
]


def overrides(tmp, *extra, attacks=("pgd", *NEW)):
    """The tiny model against `attacks` at EPS (pixel units); Square at 20 iterations keeps
    the tests in seconds."""
    grids = [f"attack.{name}.values=[{','.join(map(str, EPS))}]" for name in attacks]
    square = [f"attack.{path}.max_iter=20" for path in ("square", "autoattack.kwargs.components.square") if path.split(".")[0] in attacks]
    composite = REDUCED_SEQUENCE if "autoattack" in attacks else []
    pgd = ["attack.pgd.units=pixel"] if "pgd" in attacks else []
    return tiny_overrides(
        tmp,
        "model=[cnn3]",
        "defence=[none]",
        "train.epochs=[3]",
        f"metrics.auc.eps1={max(EPS)}",
        f"attack=[{','.join(attacks)}]",
        *pgd,
        *grids,
        *square,
        *composite,
        *extra,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-layer CNN trained for 3 epochs on 400 digits, its split, classifier and the specs
    of pgd and the new attacks as the grid makes them."""
    tmp = tmp_path_factory.mktemp("autoattack")
    cfg = normalise(validate(compose(overrides(tmp), conf=ROOT / "conf")))
    prepare.run(cfg)
    train.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    model = training.load_weights(cfg.paths.models, training_cells(cfg)[0], split)
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    return cfg, split, classifier, attack_specs(cfg)


def spec_of(specs, name, eps):
    return next(s for s in specs if s["name"] == name and s["value"] == eps)


def engine_run(split, classifier, spec, seed=0):
    """One attack on the first 12 images of the attack subset, as the attack stage runs it."""
    pixel_std = float(np.mean(split.std))
    x, y = split.x_attack.numpy()[:12], split.y_attack.numpy()[:12]
    attack_obj = None if spec["engine"] == "torch" else build_attack(classifier, spec, pixel_std)
    np.random.seed(seed)
    _, out = run_engine(spec["engine"], attack_obj, spec, Target(classifier, CPU), x, y, attack_strength(spec, pixel_std))
    return y, out


def test_our_autopgd_is_arts_apgd_untargeted_and_for_one_target(trained):
    _, split, classifier, _ = trained
    x, y = split.x_attack.numpy()[:20], split.y_attack.numpy()[:20]
    eps = 0.5
    for loss, n_targets in (("cross_entropy", 0), ("difference_logits_ratio", 1)):
        ours = AutoPGD(classifier, eps=eps, max_iter=5, loss_type=loss, n_targets=n_targets, batch_size=100)
        np.random.seed(3)
        x_ours = ours.generate(x, y)
        reference = AutoProjectedGradientDescent(
            classifier, eps=eps, eps_step=2 * eps, max_iter=5, targeted=n_targets > 0, nb_random_init=1, batch_size=100, loss_type=loss, verbose=False
        )
        labels = wrong_classes(classifier.predict(x), y, 1)[:, 0] if n_targets else y
        np.random.seed(3)
        np.testing.assert_allclose(x_ours, reference.generate(x, labels), atol=1e-6)
        assert (classifier.predict(x_ours).argmax(1) != y).sum() > (classifier.predict(x).argmax(1) != y).sum()


def test_wrong_classes_are_the_most_likely_others_in_order():
    scores = np.array([[0.1, 0.7, 0.2, 0.0], [0.4, 0.3, 0.2, 0.1]])
    np.testing.assert_array_equal(wrong_classes(scores, np.array([1, 2]), 2), [[2, 0], [0, 1]])


@pytest.mark.parametrize("eps", EPS)
def test_the_composite_is_the_worst_case_of_its_components_run_alone(trained, eps):
    _, split, classifier, specs = trained
    y, composite = engine_run(split, classifier, spec_of(specs, "autoattack", eps))
    alone = {
        name: engine_run(split, classifier, spec_of(specs, standalone, eps))[1]
        for name, standalone in (("apgd_ce", "apgd_ce"), ("apgd_t", "apgd_dlr"), ("square", "square"))
    }
    # each component repeats its standalone search on the samples still standing, with the
    # same seed: the composite breaks exactly the samples some component breaks alone
    np.testing.assert_array_equal(composite["event"], np.any([out["event"] for out in alone.values()], axis=0))
    accuracy = np.mean(composite["y_pred_adv"] == y)
    for name, out in alone.items():
        assert accuracy <= np.mean(out["y_pred_adv"] == y), name
    # broken_by names the first component that breaks the sample alone
    before = composite["y_pred_ben"] != y
    first = np.array([next((n for n, out in alone.items() if out["event"][i]), "") for i in range(len(y))])
    np.testing.assert_array_equal(composite["broken_by"][~before], first[~before])
    assert (composite["broken_by"][before] == "first_query").all()
    # a sample's queries are those of its searches up to the one that broke it
    searched = alone["apgd_ce"]["failure_step"]
    broke_first = composite["broken_by"] == "apgd_ce"
    np.testing.assert_array_equal(composite["failure_step"][broke_first], searched[broke_first])
    censored = ~composite["event"]
    total = sum(out["failure_step"] for out in alone.values())
    np.testing.assert_array_equal(composite["failure_step"][censored], total[censored])
    if eps == EPS[0]:
        assert censored.any() and composite["event"][~before].any()


@pytest.mark.parametrize("eps", EPS)
def test_apgd_ce_is_at_least_as_strong_as_pgd_on_the_same_budget(trained, eps):
    _, split, classifier, specs = trained
    pgd, apgd = spec_of(specs, "pgd", eps), spec_of(specs, "apgd_ce", eps)
    assert pgd["max_iter"] == apgd["max_iter"] == 10
    y, out_pgd = engine_run(split, classifier, pgd)
    _, out_apgd = engine_run(split, classifier, apgd)
    assert np.mean(out_apgd["y_pred_adv"] == y) <= np.mean(out_pgd["y_pred_adv"] == y)


def test_the_composite_cell_shares_out_its_time_and_is_deterministic(trained, tmp_path):
    cfg, *_ = trained
    runs = []
    for run in ("first", "second"):
        again = normalise(
            validate(
                compose(
                    overrides(
                        tmp_path,
                        f"paths.attacks={tmp_path / run}",
                        "attack.autoattack.samples=8",
                        f"attack.autoattack.values=[{EPS[0]}]",
                        f"metrics.auc.eps1={EPS[0]}",
                        attacks=("autoattack",),
                    ),
                    conf=ROOT / "conf",
                )
            )
        )
        again.paths.models, again.paths.processed = cfg.paths.models, cfg.paths.processed  # the trained model, once
        attack.run(again)
        runs.append(recorded(tmp_path / run))
    assert runs[0] == runs[1]
    for cell in attack_cells(again):
        record = read_json(campaign.attack_record_path(again.paths.attacks, cell.hash))
        out = read_npz(campaign.outcomes_path(again.paths.attacks, cell.hash))
        assert record["engine"] == "sequence" and list(record["config"]["kwargs"]["components"]) == ["apgd_ce", "apgd_t", "fab_t", "square"]
        # the engine's tolerance (tests/attacks/test_attacks.py): 1%, or bookkeeping outside the laps
        for clock, slack in (("wall", 2e-3), ("process", 8e-3)):
            assert out[f"duration_{clock}_shared"].sum() == pytest.approx(record["n_attack"] * record[f"t_attack_{clock}"], rel=0.01, abs=slack)
        np.testing.assert_array_equal(out["event"], out["y_pred_adv"] != out["y_true"])
        assert set(out["broken_by"][out["event"]]) <= {"first_query", "apgd_ce", "apgd_t", "square"}
        assert (out["broken_by"][~out["event"]] == "").all() and record["n_attack"] == 8


def test_in_the_attack_stage_the_composite_repeats_each_components_own_cell(trained, tmp_path):
    """The image seeds come from the model cell, the sample and the eps, not the attack: the
    composite's APGD-CE is the apgd_ce cell's search on every image (same perturbation), so
    the worst case is never above a component's own cell. Seeded per cell, 4 of 264 cells of
    experiment=autoattack had the composite one sample above apgd_ce."""
    cfg, *_ = trained
    names = ("apgd_ce", "square", "autoattack")
    run = normalise(
        validate(
            compose(
                overrides(
                    tmp_path,
                    *(f"attack.{n}.samples=8" for n in names),
                    *(f"attack.{n}.values=[{EPS[0]}]" for n in names),
                    f"metrics.auc.eps1={EPS[0]}",
                    attacks=names,
                ),
                conf=ROOT / "conf",
            )
        )
    )
    run.paths.models, run.paths.processed = cfg.paths.models, cfg.paths.processed
    attack.run(run)
    out = {cell.attack: read_npz(campaign.outcomes_path(run.paths.attacks, cell.hash)) for cell in attack_cells(run)}
    composite, alone = out["autoattack"], out["apgd_ce"]
    np.testing.assert_array_equal(composite["position"], alone["position"])
    by_apgd = composite["broken_by"] == "apgd_ce"
    np.testing.assert_array_equal(by_apgd, alone["event"] & (composite["broken_by"] != "first_query"))
    np.testing.assert_array_equal(composite["norm_l2"][by_apgd], alone["norm_l2"][by_apgd])  # the same search, to the bit
    for component in ("apgd_ce", "square"):
        assert (composite["event"] >= out[component]["event"]).all(), component


def test_the_new_options_validate(tmp_path):
    cfg = validate(compose(overrides(tmp_path), conf=ROOT / "conf"))
    assert [cell.attack for cell in attack_cells(normalise(cfg))].count("autoattack") == len(EPS)


@pytest.mark.parametrize(
    "extra,attacks,key,says",
    [
        (["data.digits.n_classes=2"], ("apgd_dlr",), "attack.apgd_dlr", "third largest logit"),
        (["data.digits.n_classes=2"], ("autoattack",), "attack.autoattack.kwargs.components.apgd_t", ">= 4"),
        (["attack.apgd_ce.values=[-0.1]"], ("apgd_ce",), "attack.apgd_ce.values", "> 0"),
        (["attack.autoattack.values=[-0.1]"], ("autoattack",), "attack.autoattack.values", "> 0"),
        (["attack.autoattack.version=rand"], ("autoattack",), "attack.autoattack.version", "torch engine only"),
        (["attack.square.norms=[1]"], ("square",), "attack.square.norms", "allowed: inf, 2"),
        (["+attack.autoattack.kwargs.components.square.samples=5"], ("autoattack",), "attack.autoattack.kwargs.components.square.samples", "remove it"),
        (
            ["attack.autoattack.kwargs.components.square.rules.engine=[art]"],
            ("autoattack",),
            "attack.autoattack.kwargs.components.square.rules.engine",
            "per_image",
        ),
    ],
)
def test_bad_values_give_one_clear_error(tmp_path, extra, attacks, key, says):
    with pytest.raises(ConfigError) as err:
        validate(compose(overrides(tmp_path, *extra, attacks=attacks), conf=ROOT / "conf"))
    assert err.value.key.startswith(key) and says in str(err.value), str(err.value)


def test_apgd_dlr_on_two_classes_says_why():
    classifier = PyTorchClassifier(nn.Linear(4, 2), loss=nn.CrossEntropyLoss(), input_shape=(4,), nb_classes=2, clip_values=(0.0, 1.0))
    with pytest.raises(ValueError, match=">= 3 classes"):
        AutoPGD(classifier, loss_type="difference_logits_ratio", n_targets=1)


def test_apgd_attacks_a_model_whose_predict_gives_probabilities(trained):
    """Conf and Gauss-out put a softmax before their postprocessor; ART's APGD refuses such an
    estimator, though its losses are on the model's logits and the defence only decides."""
    _, split, _, _ = trained
    model = trained[2].model
    conf = {"name": "conf", "stage": "predict", "target": "art.defences.postprocessor.HighConfidence", "param": "cutoff", "value": 0.5, "kwargs": {}}
    classifier = art_classifier(model, split, conf, CPU)
    x, y = split.x_attack.numpy()[:12], split.y_attack.numpy()[:12]
    for loss, n_targets in (("cross_entropy", 0), ("difference_logits_ratio", 2)):
        attack_obj = AutoPGD(classifier, eps=1.0, max_iter=5, loss_type=loss, n_targets=n_targets)
        assert attack_obj.estimator.postprocessing_defences == classifier.postprocessing_defences
        np.random.seed(0)
        broken = classifier.predict(attack_obj.generate(x, y)).argmax(1) != y
        assert broken.sum() > (classifier.predict(x).argmax(1) != y).sum()
