"""The batched APGD (AutoAttack's APGD-CE and APGD-T on the torch engine): it breaks exactly
the samples the authors' code breaks on the same model, inputs and seed; its step halves at
the checkpoints where the loss stalls, and only there; its clock counts every pass."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pyautoattack.autopgd_base import APGDAttack, APGDAttack_targeted
from torch import nn

from tests.conftest import ROUNDING, PixelModel, first_query
from trashfire.attacks import apgd as apgd_module
from trashfire.attacks.apgd import APGDSettings, Run, apgd, budget_of, checkpoints
from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.failure_log import FailureLog
from trashfire.attacks.target import Target
from trashfire.core.clocks import LapClock
from trashfire.core.grid import UNDEFENDED

CPU = torch.device("cpu")
N_IMAGES = 40


def ours(target, x, y, settings, seed=0, batch_size=100):
    log, clock, standing = first_query(target, x, y, budget_of(settings))
    apgd(target, log, clock, standing, settings, batch_size, seed)
    return log, clock, standing


def reference(target, x, y, settings, seed=0):
    """The authors' APGD (or APGD-T) on the same model in pixel units: which samples it breaks."""
    pixels = PixelModel(target)
    options = dict(
        n_iter=settings.n_iter,
        norm="Linf" if settings.norm == np.inf else "L2",
        n_restarts=1,
        eps=settings.eps / (pixels.high - pixels.low),
        seed=seed,
        device="cpu",
    )
    if settings.n_targets:
        attack = APGDAttack_targeted(pixels, n_target_classes=settings.n_targets, **options)
    else:
        attack = APGDAttack(pixels, loss=settings.loss, **options)
    x_pixels = pixels.to_pixels(torch.from_numpy(x))
    with torch.no_grad():
        adv = attack.perturb(x_pixels, torch.from_numpy(y))
        return pixels(adv).argmax(1).numpy() != y, adv


@pytest.mark.parametrize(
    "norm, eps_pixels, loss, n_targets",
    [(np.inf, 0.1, "ce", 0), (np.inf, 0.1, "dlr-targeted", 3), (2, 0.5, "ce", 0), (np.inf, 0.05, "dlr", 0)],
)
def test_it_breaks_the_samples_the_authors_code_breaks(digits_cnn, norm, eps_pixels, loss, n_targets):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    settings = APGDSettings(norm=norm, eps=eps_pixels * (target.clip_values[1] - target.clip_values[0]), n_iter=100, loss=loss, n_targets=n_targets)
    log, _, standing = ours(target, x, y, settings)
    broken_by_reference, _ = reference(target, x, y, settings)
    np.testing.assert_array_equal(log.event[standing], broken_by_reference[standing])
    assert 0 < log.event[standing].sum() < len(standing), "a cell where the attack breaks some samples and not others"


@pytest.mark.parametrize("eps_pixels", [0.05, 0.1])
def test_apgd_t_runs_side_by_side_are_the_authors_order_to_the_sample(digits_cnn, monkeypatch, eps_pixels):
    """APGD-T's runs at once, one row a (sample, target) pair, in waves that settle the runs up
    to the first with a break: each sample's outcome, charge and its run's start are those of
    the runs one after another, exactly, and its example theirs to float rounding (the passes
    have other row counts, which a CPU's kernels may sum in another order)."""
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    settings = APGDSettings(norm=np.inf, eps=eps_pixels * (target.clip_values[1] - target.clip_values[0]), n_iter=20, loss="dlr-targeted", n_targets=5)
    waves = []
    original = apgd_module.SideBySide.wave
    monkeypatch.setattr(apgd_module.SideBySide, "wave", lambda self, *a: waves.append(original(self, *a)) or waves[-1])
    side, side_clock, standing = ours(target, x, y, settings)
    monkeypatch.setattr(apgd_module, "side_by_side", lambda *a: False)
    order, order_clock, _ = ours(target, x, y, settings)
    assert 0 < side.event[standing].sum() < len(standing) and len(waves) > 1, "breaks in more than one run: more than one wave"
    for name in ("event", "failure_step", "y_pred_adv"):
        np.testing.assert_array_equal(getattr(side, name), getattr(order, name), err_msg=name)
    np.testing.assert_allclose(side.x_adv, order.x_adv, rtol=0, atol=ROUNDING)
    np.testing.assert_array_equal(side_clock.queries, order_clock.queries)
    np.testing.assert_array_equal(side_clock.gradients, order_clock.gradients)
    assert waves == sorted(set(waves)), f"each wave settles runs after the last one's: {waves}"


class HandMade(nn.Module):
    """Two logits of one input pixel: class 1's is 0, class 0's is a hand-made function of the
    pixel (and of how often it was called) that stays below 0, so that the sample (label 1) is
    never broken and APGD runs all its iterations on the CE loss softplus(z0)."""

    def __init__(self, function):
        super().__init__()
        self.function, self.calls = function, 0

    def forward(self, x):
        self.calls += 1
        z0 = self.function(x.reshape(len(x), -1)[:, :1], self.calls)
        return torch.cat([z0, torch.zeros_like(z0)], 1)


def hand_made_run(function, n_iter=100, eps=0.2):
    model = HandMade(function)
    split = SimpleNamespace(input_shape=(1, 1, 1), n_classes=2, clip_values=(0.0, 1.0))
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = np.full((1, 1, 1, 1), 0.5, dtype=np.float32), np.array([1])
    settings = APGDSettings(norm=np.inf, eps=eps, n_iter=n_iter)
    log = FailureLog(x, y, budget_of(settings))
    clock = LapClock(1, CPU, 1, 1).start()
    run = Run(target, log, clock, settings, np.array([0]), batch_size=1)
    run.attack(torch.Generator().manual_seed(0))
    return run, log, clock


def test_the_checkpoints_come_at_22_percent_then_at_shrinking_intervals():
    assert checkpoints(APGDSettings(norm=np.inf, eps=1.0, n_iter=100)) == [21, 40, 56, 69, 79, 86, 92, 98]
    assert checkpoints(APGDSettings(norm=np.inf, eps=1.0, n_iter=10)) == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_a_flat_loss_halves_the_step_at_every_checkpoint():
    run, log, _ = hand_made_run(lambda pixel, calls: torch.full_like(pixel, -1.0) + 0 * pixel)
    assert not log.event[0]
    assert run.state["step"].item() == pytest.approx(2 * 0.2 / 2 ** len(checkpoints(run.settings)))


def test_a_loss_that_rises_at_every_iteration_keeps_its_first_step():
    run, _, _ = hand_made_run(lambda pixel, calls: -1.0 / calls + 0 * pixel)
    assert run.state["step"].item() == pytest.approx(2 * 0.2)


def test_a_peak_inside_the_ball_is_found_by_halving_steps():
    """The loss peaks at 0.6, inside the eps-ball [0.3, 0.7]: the first steps (0.4) overshoot
    it, the checkpoints see the loss oscillate and halve the step, and the best point closes in."""
    run, _, _ = hand_made_run(lambda pixel, calls: -1.0 - 50 * (pixel - 0.6) ** 2)
    assert run.state["step"].item() < 0.4 / 8
    assert abs(run.state["x_best"].item() - 0.6) < 0.01


def test_the_clock_counts_each_pass_and_a_censored_sample_spends_the_budget():
    run, log, clock = hand_made_run(lambda pixel, calls: torch.full_like(pixel, -1.0) + 0 * pixel, n_iter=10)
    assert clock.queries[0] == clock.gradients[0] == budget_of(run.settings) == 11
    assert log.failure_step[0] == budget_of(run.settings) and run.target.model.calls == 11
    targeted = APGDSettings(norm=np.inf, eps=0.1, n_iter=10, loss="dlr-targeted", n_targets=3, eot_iter=2)
    assert budget_of(targeted) == 3 * 2 * 11 + 1


def test_broken_samples_leave_and_stop_being_charged(digits_cnn):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    settings = APGDSettings(norm=np.inf, eps=0.1 * (target.clip_values[1] - target.clip_values[0]), n_iter=20)
    log, clock, standing = ours(target, x, y, settings)
    broken, censored = standing[log.event[standing]], standing[~log.event[standing]]
    assert len(broken) and len(censored)
    # a broken sample is charged the first query and its passes up to the one that broke it
    np.testing.assert_array_equal(clock.queries[broken], log.failure_step[broken])
    assert (clock.queries[broken] < 1 + budget_of(settings)).all()
    np.testing.assert_array_equal(clock.queries[censored], 1 + budget_of(settings))
    np.testing.assert_array_equal(clock.gradients[standing], clock.queries[standing] - 1)
    # its returned example is the iterate that broke it, inside the ball and the box
    with torch.no_grad():
        assert (target.logits(torch.from_numpy(log.x_adv[broken])).argmax(1).numpy() != y[broken]).all()
    assert np.abs(log.x_adv - log.x).max() <= settings.eps + 1e-5
    low, high = target.clip_values
    assert log.x_adv.min() >= low - 1e-6 and log.x_adv.max() <= high + 1e-6


def test_two_runs_are_identical_and_the_seed_moves_the_start(digits_cnn):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    settings = APGDSettings(norm=np.inf, eps=0.1 * (target.clip_values[1] - target.clip_values[0]), n_iter=10)
    first, second, other = (ours(target, x, y, settings, seed=seed)[0] for seed in (0, 0, 1))
    np.testing.assert_array_equal(first.x_adv, second.x_adv)
    np.testing.assert_array_equal(first.failure_step, second.failure_step)
    assert not np.array_equal(first.x_adv, other.x_adv)


def test_settings_refuse_what_the_batched_apgd_does_not_run():
    with pytest.raises(ValueError, match="norm"):
        APGDSettings(norm=1, eps=0.1)
    with pytest.raises(ValueError, match="n_targets"):
        APGDSettings(norm=np.inf, eps=0.1, loss="dlr-targeted")
    with pytest.raises(ValueError, match="loss"):
        APGDSettings(norm=np.inf, eps=0.1, loss="hinge")


def eot_run(function, eot_iter):
    model = HandMade(function)
    split = SimpleNamespace(input_shape=(1, 1, 1), n_classes=2, clip_values=(0.0, 1.0))
    target = Target(art_classifier(model, split, dict(UNDEFENDED), CPU), CPU)
    x, y = np.full((1, 1, 1, 1), 0.5, dtype=np.float32), np.array([1])
    settings = APGDSettings(norm=np.inf, eps=0.2, n_iter=10, eot_iter=eot_iter)
    clock = LapClock(1, CPU, 1, 1).start()
    return Run(target, FailureLog(x, y, budget_of(settings)), clock, settings, np.array([0]), batch_size=1), model, clock


def test_the_eot_gradient_is_the_mean_of_the_per_draw_gradients():
    # z0 = -1 - k * pixel on the model's k-th call: every pass draws other logits
    run, model, clock = eot_run(lambda pixel, calls: -1.0 - calls * pixel, eot_iter=3)
    _, grad, _ = run.gradient(run.x.clone(), clock.new_unit())
    # CE on label 1 is softplus(z0); per draw k its gradient in the pixel is sigmoid(z0) * -k
    draws = [torch.sigmoid(torch.tensor(-1.0 - k * 0.5)).item() * -k for k in (1, 2, 3)]
    assert grad.item() == pytest.approx(np.mean(draws), rel=1e-6)
    assert clock.queries[0] == clock.gradients[0] == 3 and run.eot == 3  # the draws differ: EOT stays
    _, grad, _ = run.gradient(run.x.clone(), clock.new_unit())
    assert grad.item() == pytest.approx(np.mean([torch.sigmoid(torch.tensor(-1.0 - k * 0.5)).item() * -k for k in (4, 5, 6)]), rel=1e-6)


def test_eot_on_logits_that_never_vary_takes_one_pass_per_gradient_after_the_first():
    run, model, clock = eot_run(lambda pixel, calls: -1.0 - 2.0 * pixel, eot_iter=20)
    _, first, _ = run.gradient(run.x.clone(), clock.new_unit())
    assert model.calls == 20 and run.eot == 1  # the first gradient's 20 passes gave the same logits
    _, later, _ = run.gradient(run.x.clone(), clock.new_unit())
    exact = torch.sigmoid(torch.tensor(-2.0)).item() * -2.0
    assert first.item() == pytest.approx(exact, rel=1e-6) and later.item() == pytest.approx(exact, rel=1e-6)  # the mean of equal draws
    assert clock.queries[0] == 20 + 1 and model.calls == 21
