"""The batched Square Attack (AutoAttack's black-box component on the torch engine): it breaks
the samples the authors' code breaks, at the same points, on the same model, inputs and seed;
its square shrinks on the authors' schedule; its clock counts every query it ran and nothing
else; the same seed repeats a run and another seed draws another."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from pyautoattack.square import SquareAttack

from tests.conftest import ROUNDING, PixelModel, first_query
from trashfire.attacks.square import SquareSettings, budget_of, p_selection, square

CPU = torch.device("cpu")
N_IMAGES = 40
N_QUERIES = 300  # the standard's 5000 in the slow test


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread for this module: its passes are of a few 8x8 images, where a second
    thread buys nothing and, on a busy machine, spins (the file took 6x the CPU time with two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CountingTarget:
    """A target that counts the rows of every forward pass through it."""

    def __init__(self, target):
        self.target, self.clip_values, self.device = target, target.clip_values, target.device
        self.deterministic = target.deterministic
        self.rows = 0

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return self.target.logits(x)

    def decide(self, logits: torch.Tensor) -> np.ndarray:
        return self.target.decide(logits)


class PixelTarget(CountingTarget):
    """The model on [0, 1] pixels as a target: the reference's own scale, where our arithmetic
    must be the reference's to the bit."""

    def __init__(self, target):
        self.target, self.clip_values, self.device = PixelModel(target), (0.0, 1.0), CPU
        self.deterministic = target.deterministic
        self.rows = 0

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return self.target(x)

    def decide(self, logits: torch.Tensor) -> np.ndarray:
        return logits.argmax(1).numpy()


def images(digits_cnn, n: int = N_IMAGES) -> tuple[np.ndarray, np.ndarray]:
    split, _ = digits_cnn
    return split.x_attack.numpy()[:n], split.y_attack.numpy()[:n]


def ours(target, x, y, settings: SquareSettings, seed: int = 0, batch_size: int = 100):
    log, clock, standing = first_query(target, x, y, budget_of(settings))
    square(target, log, clock, standing, settings, batch_size, seed)
    return log, clock, standing


def reference(pixels: PixelModel, x_pixels: torch.Tensor, y: np.ndarray, settings: SquareSettings, eps_pixels: float, seed: int = 0):
    """The authors' Square Attack as AutoAttack's standard version builds it, in pixels: which
    samples it breaks and its returned examples (pixels)."""
    attack = SquareAttack(
        pixels,
        norm="Linf" if settings.norm == np.inf else "L2",
        n_queries=settings.n_queries,
        eps=eps_pixels,
        p_init=settings.p_init,
        n_restarts=1,
        seed=seed,
        loss="margin",
        resc_schedule=False,
        device="cpu",
    )
    with torch.no_grad():
        adv = attack.perturb(x_pixels, torch.from_numpy(y))
        return pixels(adv).argmax(1).numpy() != y, adv


CELLS = [(np.inf, 0.1), (np.inf, 0.2), (2.0, 0.5), (2.0, 1.0)]


@pytest.mark.parametrize("norm, eps_pixels", CELLS)
def test_it_breaks_the_samples_the_authors_code_breaks_at_its_points(digits_cnn, norm, eps_pixels):
    """On the standardised scale (the pixel model's inputs differ from ours by rounding)."""
    _, target = digits_cnn
    x, y = images(digits_cnn)
    pixels = PixelModel(target)
    settings = SquareSettings(norm=norm, eps=pixels.eps_standardised(eps_pixels), n_queries=N_QUERIES)
    log, _, standing = ours(target, x, y, settings)
    broken, adv = reference(pixels, pixels.to_pixels(torch.from_numpy(x)), y, settings, eps_pixels)
    np.testing.assert_array_equal(log.event[standing], broken[standing])
    assert 0 < log.event[standing].sum() < len(standing), "a cell where the attack breaks some samples and not others"
    hit = standing[log.event[standing]]
    np.testing.assert_allclose(log.x_adv[hit], (pixels.low + adv * (pixels.high - pixels.low)).numpy()[hit], atol=1e-5)


@pytest.mark.parametrize("norm, eps_pixels", [(np.inf, 0.1), (2.0, 0.5)])
def test_on_the_authors_scale_every_point_is_theirs(digits_cnn, norm, eps_pixels):
    """A target on [0, 1] pixels: the same inputs to the model, so the same decisions, and
    the same points to float rounding (the look-ahead's passes have other row counts, which
    a CPU's kernels may sum in another order)."""
    _, target = digits_cnn
    x, y = images(digits_cnn)
    pixel_target = PixelTarget(target)
    x_pixels = pixel_target.target.to_pixels(torch.from_numpy(x))
    settings = SquareSettings(norm=norm, eps=eps_pixels, n_queries=N_QUERIES)
    log, _, standing = ours(pixel_target, x_pixels.numpy(), y, settings)
    broken, adv = reference(pixel_target.target, x_pixels, y, settings, eps_pixels)
    np.testing.assert_array_equal(log.event[standing], broken[standing])
    hit = standing[log.event[standing]]
    np.testing.assert_allclose(log.x_adv[hit], adv.numpy()[hit], rtol=0, atol=ROUNDING)


def test_when_one_sample_is_left_it_searches_on_as_the_authors_one_row_passes(digits_cnn):
    """The two samples it breaks last: once the first leaves, the reference's passes are of
    one row (arithmetic that differs from a batch's in the last bits), and so are ours, so the
    second breaks at the reference's point."""
    _, target = digits_cnn
    x, y = images(digits_cnn)
    pixel_target = PixelTarget(target)
    x_pixels = pixel_target.target.to_pixels(torch.from_numpy(x))
    settings = SquareSettings(norm=np.inf, eps=0.1, n_queries=N_QUERIES)
    log, _, standing = ours(pixel_target, x_pixels.numpy(), y, settings)
    broken = standing[log.event[standing]]
    chosen = broken[np.argsort(log.failure_step[broken])[-2:]]
    log, clock, standing = first_query(pixel_target, x_pixels.numpy()[chosen], y[chosen], budget_of(settings))
    pixel_target.rows = 0
    (search,) = square(pixel_target, log, clock, standing, settings, batch_size=100, seed=0)
    theirs, adv = reference(pixel_target.target, x_pixels[chosen], y[chosen], settings, 0.1)
    assert log.event.all() and theirs.all()
    assert log.failure_step[0] < log.failure_step[1]  # the second searched alone for a while
    np.testing.assert_allclose(log.x_adv, adv.numpy(), rtol=0, atol=ROUNDING)  # to rounding: the passes before the first left had other row counts
    # the look-ahead past the first's leaving, taken back, is rows that answered no query
    assert pixel_target.rows == (clock.queries - 1).sum() - search.cached + search.dropped


def test_the_square_shrinks_on_the_authors_schedule():
    """AutoAttack's setting: resc_schedule off, the raw iteration, over the standard 5000 and past it."""
    authors = SquareAttack(None, n_queries=5000, eps=0.1, p_init=0.8, resc_schedule=False)
    assert [p_selection(i, 0.8) for i in range(10_001)] == [authors.p_selection(i) for i in range(10_001)]


@pytest.mark.parametrize("norm, eps_pixels", [(np.inf, 0.1), (2.0, 0.5)])
def test_the_clock_counts_every_query_and_only_those(digits_cnn, norm, eps_pixels):
    _, target = digits_cnn
    x, y = images(digits_cnn)
    counting = CountingTarget(target)
    settings = SquareSettings(norm=norm, eps=PixelModel(target).eps_standardised(eps_pixels), n_queries=N_QUERIES)
    log, clock, standing = first_query(counting, x, y, budget_of(settings))
    counting.rows, laps_before = 0, len(clock.laps)
    (search,) = square(counting, log, clock, standing, settings, batch_size=100, seed=0)
    queries = clock.queries[standing] - 1  # the clean check aside
    broken = log.event[standing]
    assert 0 < broken.sum() < len(standing)
    # a broken sample took part in every query up to the one that broke it: its queries then
    np.testing.assert_array_equal(log.failure_step[standing][broken], clock.queries[standing][broken])
    # a censored one: the initial point and every iteration
    np.testing.assert_array_equal(queries[~broken], budget_of(settings))
    assert budget_of(settings) == 1 + N_QUERIES
    # every query is a row through the model, but those Linf answers without a pass (a
    # proposal equal to the best point), and the look-ahead's rows past a taken proposal answer none
    assert counting.rows == queries.sum() - search.cached + search.dropped
    if norm == np.inf:
        assert search.cached > 0 and search.dropped > 0
    else:
        assert search.cached == search.dropped == 0
    assert not clock.gradients.any()
    # a lap for the initial point, then one per run of queries serving the same samples: a
    # new one only when a sample leaves (the process clock's read costs a small forward pass)
    assert len(clock.laps) - laps_before <= 2 + broken.sum() < queries.max()
    assert sum(lap.flops for lap in clock.laps[laps_before:]) == queries.sum() * clock.forward
    assert not any(lap.reference for lap in clock.laps[laps_before:])


@pytest.mark.parametrize("norm, eps_pixels", [(np.inf, 0.1), (2.0, 0.5)])
def test_its_examples_are_in_the_ball_and_decide_as_logged(digits_cnn, norm, eps_pixels):
    """Early exit never changes a decision: a broken sample's example is misclassified, a
    censored sample's best point is not, and every example is within eps and the box."""
    _, target = digits_cnn
    x, y = images(digits_cnn)
    eps = PixelModel(target).eps_standardised(eps_pixels)
    log, _, standing = ours(target, x, y, SquareSettings(norm=norm, eps=eps, n_queries=100))
    delta = (log.x_adv[standing] - x[standing]).reshape(len(standing), -1)
    size = np.abs(delta).max(1) if norm == np.inf else np.linalg.norm(delta, axis=1)
    assert (size <= eps * (1 + 1e-5)).all() and (size > 0).all()
    low, high = target.clip_values
    assert log.x_adv.min() >= low and log.x_adv.max() <= high
    with torch.no_grad():
        decisions = target.decide(target.logits(torch.from_numpy(log.x_adv[standing])))
    np.testing.assert_array_equal(decisions != y[standing], log.event[standing])
    np.testing.assert_array_equal(log.y_pred_adv[standing], decisions)


@pytest.mark.parametrize("norm", [np.inf, 2.0])
def test_a_seed_repeats_its_run_and_another_draws_another(digits_cnn, norm):
    _, target = digits_cnn
    x, y = images(digits_cnn, 20)
    settings = SquareSettings(norm=norm, eps=PixelModel(target).eps_standardised(0.1 if norm == np.inf else 0.5), n_queries=50)
    runs = [ours(target, x, y, settings, seed=seed) for seed in (0, 0, 1)]
    (first, first_clock, standing), (again, again_clock, _), (other, _, _) = runs
    np.testing.assert_array_equal(first.x_adv, again.x_adv)
    np.testing.assert_array_equal(first.failure_step, again.failure_step)
    np.testing.assert_array_equal(first_clock.queries, again_clock.queries)
    assert (first.x_adv[standing] != other.x_adv[standing]).any(axis=(1, 2, 3)).all(), "another seed: another start for every sample"


def test_it_runs_inf_and_2_only():
    with pytest.raises(ValueError, match="only inf and 2"):
        SquareSettings(norm=1.0, eps=1.0)


@pytest.mark.slow
@pytest.mark.parametrize("norm, eps_pixels", [(np.inf, 0.1), (2.0, 0.5)])
def test_at_the_standard_budget_it_breaks_what_the_authors_code_breaks(digits_cnn, norm, eps_pixels):
    _, target = digits_cnn
    x, y = images(digits_cnn)
    pixels = PixelModel(target)
    settings = SquareSettings(norm=norm, eps=pixels.eps_standardised(eps_pixels))
    started = time.process_time()
    log, _, standing = ours(target, x, y, settings)
    ours_seconds = time.process_time() - started
    broken, _ = reference(pixels, pixels.to_pixels(torch.from_numpy(x)), y, settings, eps_pixels)
    print(f"\nsquare {norm} eps {eps_pixels}: ours {ours_seconds:.1f} s CPU, reference {time.process_time() - started - ours_seconds:.1f} s CPU")
    np.testing.assert_array_equal(log.event[standing], broken[standing])
