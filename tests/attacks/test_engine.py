"""The attack engine's per-sample failure clock: our FGM/PGD equal ART's with early exit off,
our DeepFool breaks the samples ART's breaks, and the clock shares each step's time among the
samples it worked on."""

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, tiny_overrides
from trashfire.attacks.art_attacks import art_classifier, build_attack
from trashfire.attacks.engine import attack_samples, model_cost, price, run_engine, warm_up_batch
from trashfire.attacks.spec import attack_strength
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import LapClock
from trashfire.core.config import compose, validate
from trashfire.core.grid import UNDEFENDED, training_cells
from trashfire.data.datasets import load_split
from trashfire.models import training
from trashfire.stages import prepare, train

CPU = torch.device("cpu")
FSQ = {"name": "fsq", "stage": "predict", "target": "art.defences.preprocessor.FeatureSqueezing", "param": "bit_depth", "value": 3, "kwargs": {}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-layer CNN trained for 3 epochs on 400 digits, and its split."""
    tmp = tmp_path_factory.mktemp("engine")
    cfg = validate(compose(tiny_overrides(tmp, "model=[cnn3]", "defence=[none]", "train.epochs=[3]"), conf=ROOT / "conf"))
    prepare.run(cfg)
    train.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    model = training.load_weights(cfg.paths.models, training_cells(cfg)[0], split)
    return model, split


def spec_of(name, norm, value, **extra):
    targets = {
        "fgm": "art.attacks.evasion.FastGradientMethod",
        "pgd": "art.attacks.evasion.ProjectedGradientDescent",
        "deepfool": "art.attacks.evasion.DeepFool",
    }
    spec = {
        "name": name,
        "target": targets[name],
        "norm": norm,
        "param": "nb_grads" if name == "deepfool" else "eps",
        "value": value,
        "batch_size": 100,
        "kwargs": {},
        "rules": {"torch": {"algorithm": name}},  # the loop that runs it (conf/attack/<name>.yaml)
    }
    if name == "pgd":
        spec |= {"max_iter": 10, "step_scale": 2.5, "kwargs": {"num_random_init": 0, "verbose": False}}
    if name == "deepfool":
        spec |= {"max_iter": 10, "kwargs": {"epsilon": 1e-6, "verbose": False}}
    return spec | extra


def attack_both_ways(model, split, spec, defence=UNDEFENDED, early_exit=False):
    classifier = art_classifier(model, split, dict(defence), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    ours, arrays = run_engine("torch", None, spec, Target(classifier, CPU), x, y, attack_strength(spec, 1.0), early_exit)
    reference = build_attack(classifier, spec).generate(x=x, y=y)
    return x, y, classifier, ours, arrays, reference


@pytest.mark.parametrize("norm", ["inf", "1", "2"])
@pytest.mark.parametrize("name,eps", [("fgm", 0.5), ("pgd", 0.5)])
def test_without_early_exit_our_fgm_and_pgd_return_arts_examples(trained, name, norm, eps):
    x, y, _, ours, _, reference = attack_both_ways(*trained, spec_of(name, norm, eps))
    assert np.abs(ours - x).max() > 0.1  # it did perturb
    np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_with_feature_squeezing_our_pgd_returns_arts_examples(trained):
    _, _, _, ours, _, reference = attack_both_ways(*trained, spec_of("pgd", "inf", 0.5), defence=FSQ)
    np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_our_deepfool_breaks_the_samples_arts_breaks(trained):
    x, y, classifier, ours, arrays, reference = attack_both_ways(*trained, spec_of("deepfool", "2", 3), early_exit=True)
    correct = arrays["y_pred_ben"] == y
    assert correct.sum() >= 10
    art_broken = classifier.predict(reference).argmax(1) != y
    ours_broken = classifier.predict(ours).argmax(1) != y
    assert art_broken[correct].sum() >= 5
    np.testing.assert_array_equal(ours_broken[correct], art_broken[correct])
    np.testing.assert_array_equal(arrays["event"][correct], art_broken[correct])


@pytest.mark.parametrize("name", ["fgm", "pgd", "deepfool"])
def test_failure_clock_of_the_gradient_engine(trained, name):
    model, split = trained
    spec = spec_of(name, "2" if name == "deepfool" else "inf", 3 if name == "deepfool" else 0.3)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    x_adv, out = run_engine("torch", None, spec, Target(classifier, CPU), x, y, attack_strength(spec, 1.0))
    budget = 1 if name == "fgm" else spec["max_iter"]
    before = out["y_pred_ben"] != y
    # a sample wrong before any perturbation fails at the first query: step 0, its share of one prediction
    assert before.any() and out["event"][before].all() and (out["failure_step"][before] == 0).all()
    assert np.ptp(out["duration_process"][before]) < 1e-12 and np.all(out["duration_wall"][before] > 0)
    np.testing.assert_array_equal(x_adv[before], x[before])
    # early exit: an event's returned example is the one that broke it; the events are the misclassified
    np.testing.assert_array_equal(out["event"], out["y_pred_adv"] != y)
    assert (classifier.predict(x_adv).argmax(1)[out["event"]] != y[out["event"]]).all()
    # a sample never broken is censored at the budget, and it took the longest
    survived = ~out["event"]
    if survived.any():
        assert (out["failure_step"][survived] == budget).all()
        assert out["duration_wall"][survived].min() >= out["duration_wall"].max() - 1e-9
    broken = out["event"] & ~before
    assert (out["failure_step"][broken] >= 1).all() and (out["failure_step"][broken] <= budget).all()
    # later failures took longer
    order = np.argsort(out["failure_step"], kind="stable")
    assert np.all(np.diff(out["duration_wall"][order]) >= -1e-9)


def test_lap_clock_shares_each_lap_among_its_samples(monkeypatch):
    """On a scripted clock (process, wall): the sharing is arithmetic, whatever the machine's load."""
    readings = iter([(0.0, 0.0), (0.03, 0.02), (0.05, 0.04), (0.08, 0.06)])
    monkeypatch.setattr(LapClock, "_now", lambda self: next(readings))
    clock = LapClock(3).start()
    clock.lap([0, 1, 2])
    clock.lap([1, 2])
    shared = clock.wall_shared.sum()
    clock.lap([])  # work for nobody is nobody's
    assert clock.wall_shared.sum() == shared == pytest.approx(0.04) and clock.total.wall == pytest.approx(0.06)
    np.testing.assert_allclose(clock.wall_shared, [0.02 / 3, 0.02 / 3 + 0.01, 0.02 / 3 + 0.01])
    np.testing.assert_allclose(clock.process_shared, [0.01, 0.02, 0.02])
    assert clock.total.process == pytest.approx(0.08)


@pytest.mark.parametrize("name", ["fgm", "pgd", "deepfool"])
def test_with_early_exit_the_shared_durations_share_out_the_whole_clock(trained, name, monkeypatch):
    clocks = []
    monkeypatch.setattr(LapClock, "start", lambda self, _start=LapClock.start: clocks.append(self) or _start(self))
    model, split = trained
    spec = spec_of(name, "2" if name == "deepfool" else "inf", 3 if name == "deepfool" else 0.3)
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    _, out = run_engine("torch", None, spec, Target(classifier, CPU), split.x_attack.numpy(), split.y_attack.numpy(), attack_strength(spec, 1.0))
    assert out["duration_process_shared"].sum() == pytest.approx(clocks[0].total.process, rel=1e-9)
    assert out["duration_wall_shared"].sum() == pytest.approx(clocks[0].total.wall, rel=1e-9)


def test_without_early_exit_a_samples_clock_still_stops_at_its_first_failure(trained):
    model, split = trained
    spec = spec_of("pgd", "inf", 0.3)
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    _, exiting = run_engine("torch", None, spec, Target(classifier, CPU), x, y, 0.3, early_exit=True)
    _, stepping = run_engine("torch", None, spec, Target(classifier, CPU), x, y, 0.3, early_exit=False)
    np.testing.assert_array_equal(stepping["failure_step"][stepping["event"]], exiting["failure_step"][stepping["event"]])
    events, censored = stepping["event"], ~stepping["event"]
    assert events.any() and censored.any()
    assert stepping["duration_wall"][events].max() < stepping["duration_wall"][censored].min()


def test_the_art_reference_engine_returns_arts_examples_and_shares_the_batch_time(trained):
    model, split = trained
    spec = spec_of("pgd", "inf", 0.3)
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    attack = build_attack(classifier, spec)
    x_adv, out = run_engine("art", attack, spec, Target(classifier, CPU), x, y, 0.3)
    before = out["y_pred_ben"] != y
    reference = attack.generate(x=x[~before], y=y[~before])
    np.testing.assert_allclose(x_adv[~before], reference, atol=1e-5)
    np.testing.assert_array_equal(x_adv[before], x[before])  # failed at the first query: not attacked
    attacked = out["duration_wall_shared"][~before]
    assert np.ptp(attacked) < 1e-12  # one batch time, shared: no per-sample information
    assert np.ptp(out["queries"][~before]) <= 1 and np.ptp(out["gradients"][~before]) <= 1  # and equal shares of its passes
    np.testing.assert_array_equal(out["event"], before | (out["y_pred_adv"] != y))


def test_benign_margin_on_a_hand_made_batch():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.3, 0.2], [5.0, 5.0, 1.0]])
    labels = torch.tensor([0, 2, 1])
    # true-class logit minus the best other: right by 1.5, wrong by 0.1, tied at 0
    np.testing.assert_allclose(margins(logits, labels), [1.5, -0.1, 0.0], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The compute clock: work counted exactly, then priced at full batch


def test_pgd_charges_each_sample_its_queries_and_gradients_exactly(trained):
    model, split = trained
    spec = spec_of("pgd", "inf", 0.3)
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    _, out = run_engine("torch", None, spec, target, x, y, 0.3)
    step, budget = out["failure_step"], spec["max_iter"]
    # a sample checked at steps 0..k and stepped after each check but the last; censored: k = budget
    np.testing.assert_array_equal(out["queries"], step + 1)
    np.testing.assert_array_equal(out["gradients"], step)
    cost = model_cost(target, x, y)
    np.testing.assert_array_equal(out["flops"], out["queries"] * cost.forward + out["gradients"] * (cost.gradient - cost.forward))
    censored = ~out["event"]
    assert censored.any() and (out["queries"][censored] == budget + 1).all()
    # priced: seconds proportional to FLOPs, one rate per cell
    ratio = out["duration_wall"] / out["flops"]
    assert np.ptp(ratio) < 1e-12 * ratio.max()


def test_deepfool_charges_one_gradient_per_class_of_its_set(trained):
    model, split = trained
    spec = spec_of("deepfool", "2", 3)
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    _, out = run_engine("torch", None, spec, target, x, y, 3)
    np.testing.assert_array_equal(out["queries"], out["failure_step"] + 1)
    per_step = out["gradients"][out["failure_step"] > 0] / out["failure_step"][out["failure_step"] > 0]
    assert len(per_step) and np.ptp(per_step) == 0 and per_step[0] >= 3  # the class set: >= nb_grads classes, every step


def test_two_runs_count_the_same_compute(trained):
    model, split = trained
    spec = spec_of("pgd", "inf", 0.1)
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    first = run_engine("torch", None, spec, target, x, y, 0.1)[1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        second = run_engine("torch", None, spec, target, x, y, 0.1)[1]
    finally:
        torch.set_num_threads(threads)
    for name in ("queries", "gradients", "flops"):
        np.testing.assert_array_equal(first[name], second[name])


def test_a_samples_compute_and_seconds_do_not_depend_on_its_batch(trained):
    """One sample attacked alone, and inside a batch of 100 whose 99 others break at step 1:
    its compute is equal both times, and its seconds agree within the rates' spread (alone,
    the rate comes from a calibration at the full batch of 100; in the batch, from the laps
    where the whole batch was active)."""
    model, split = trained
    spec = spec_of("pgd", "inf", 0.3, step_scale=10)  # a first step of eps breaks some at step 1
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    _, out = run_engine("torch", None, spec, target, x, y, 0.3)
    survivor = np.flatnonzero(~out["event"])[0]
    breakers = np.flatnonzero(out["failure_step"] == 1)
    assert len(breakers) >= 3
    batch = np.concatenate([[survivor], np.resize(breakers, 99)])
    warm_up_batch(target, x, y, spec["batch_size"])  # as the attack stage does once per model cell
    spreads, seconds, shared = {"alone": [], "batch": []}, {"alone": [], "batch": []}, {"alone": [], "batch": []}
    for _ in range(3):  # interleaved, so that both see the machine at the same speed
        for name, rows in (("alone", [survivor]), ("batch", batch)):
            x_adv, arrays, clock = attack_samples("torch", None, spec, target, x[rows], y[rows], 0.3)
            priced, rates = price(clock, target, x[rows], y[rows], spec["batch_size"])
            assert rates["steps"].source == ("calibration" if name == "alone" else "laps")
            assert not arrays["event"][0] and (name == "alone" or arrays["failure_step"][1:].max() == 1)
            for count in ("queries", "gradients", "flops"):
                assert arrays[count][0] == out[count][survivor], (name, count)
            seconds[name].append(priced["duration_wall"][0])
            spreads[name].append(rates["steps"].spread_wall)
            shared[name].append(arrays["duration_wall_shared"][0])
    # on a CPU a step of 1 sample costs about what a step of 100 does: priced at the rate of a
    # whole batch, the survivor's seconds are a small part of its shared ones (9 of its 10
    # steps alone), and the same alone and in the batch, within the rates' spread or 50%,
    # whichever is wider: the steps of this tiny model take ~0.5 ms, and on a loaded machine
    # (8 test workers on a 16-core Xeon) the calibration and the laps saw speeds 27% apart.
    # Seconds that followed the batch would be the shared ones, several times these.
    alone, in_batch = np.median(seconds["alone"]), np.median(seconds["batch"])
    assert alone == pytest.approx(in_batch, rel=max(0.5, np.median(spreads["alone"]), np.median(spreads["batch"]))), (seconds, spreads)
    assert in_batch < 0.5 * np.median(shared["batch"])


def margins_from_logits(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """True-class logit minus the best other, by hand."""
    true = logits[np.arange(len(labels)), labels]
    others = np.where(np.eye(logits.shape[1], dtype=bool)[labels], -np.inf, logits).max(1)
    return true - others


PIXEL = {
    "name": "pixel",
    "target": "art.attacks.evasion.PixelAttack",
    "norm": "0",
    "param": "th",
    "value": 4,
    "max_iter": 2,
    "units": "standardised",
    "kwargs": {"es": 1, "targeted": False, "verbose": False},
}


@pytest.mark.parametrize(
    "engine,spec",
    [("torch", spec_of("fgm", "inf", 0.3)), ("torch", spec_of("pgd", "inf", 0.3)), ("per_image", PIXEL)],
    ids=["fgm", "pgd", "pixel"],
)
def test_margin_at_budget_is_the_models_margin_at_the_returned_example(trained, engine, spec):
    """A standing sample's `margin_at_budget` is what the model's own logits (ART's predict)
    say at the example the attack returned; a broken sample has none."""
    model, split = trained
    classifier = art_classifier(model, split, dict(UNDEFENDED), CPU)
    x, y = split.x_attack.numpy()[:12], split.y_attack.numpy()[:12]
    attack = build_attack(classifier, spec) if engine == "per_image" else None
    seeds = np.arange(1, len(y) + 1) if engine == "per_image" else None
    x_adv, arrays = run_engine(engine, attack, spec, Target(classifier, CPU), x, y, attack_strength(spec, 1.0), True, seeds)
    standing = ~arrays["event"]
    assert 0 < standing.sum() < len(y) or engine == "per_image" and standing.any()  # both kinds of sample
    assert np.isnan(arrays["margin_at_budget"][~standing]).all()
    expected = margins_from_logits(classifier.predict(x_adv[standing]), y[standing])
    np.testing.assert_allclose(arrays["margin_at_budget"][standing], expected, rtol=1e-5, atol=1e-5)
    assert (arrays["margin_at_budget"][standing] > 0).all()  # standing on an undefended model: still right
