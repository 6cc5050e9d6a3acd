"""The attack engine with a per-sample failure clock (docs/design.md, "Per-sample failure clock").

For every attacked sample: the adversary's work on it until it is first misclassified
(event), or until the budget ran out (censored). Work is counted, then priced
(trashfire.core.clocks.LapClock): each sample's forward queries and input gradients, exactly,
in FLOPs at the model's cost per sample (`model_cost`); its seconds on both clocks are that
compute times its cell's seconds per FLOP at full batch (`price`), so they do not depend on
how many others of its batch were still standing. The laps' equal shares stay beside them.

- `torch`: a device-resident loop (trashfire.attacks.loops, a module each; an attack's
  `rules.torch.algorithm` names the one that runs it): FGM and PGD in
  trashfire.attacks.gradient, DeepFool in trashfire.attacks.deepfool, FMN and DDN in
  trashfire.attacks.minimal_norm, AutoAttack in trashfire.attacks.loops.autoattack (its
  protocol: trashfire.attacks.standard.evaluate). Each step's forward pass decides
  which samples are already misclassified (the check costs no extra pass), those leave the
  batch (early exit). The forward is a query of every sample it checks, the backward a
  gradient of each it steps. Step 0's forward is the first query, so a sample wrong before
  any perturbation fails there, at one query. With `early_exit: false` every sample takes
  every step and the returned examples are ART's; a sample's clock still stops at its first
  failure, and the steps taken after it are nobody's. The steps of a whole batch with every
  standing sample active measure the rate (a cell smaller than its batch is calibrated).
- `per_image`: ART's black-box searches (Pixel, Threshold, HopSkipJump), one image at a
  time, each image's search a batch of its own (hooks on the model count its passes); event
  = misclassified when its search ends; failure step = the model queries the search spent.
- `sequence`: a composite's components (trashfire.attacks.autoattack.Sequence, AutoAttack's
  protocol) in order, each image by image as `per_image` runs it, each on the samples the
  previous ones left standing, each priced apart. A sample's compute sums its searches and
  checks up to the component that broke it; event = broken by any component; failure step
  = the queries of all its searches; `broken_by` names the component.
- `art`: ART's `generate` on the whole batch, the reference engine: every sample the first
  query did not fail gets an equal share of the batch's passes and time; it has no
  per-sample information (failure step -1: unknown).
Words: a *lap* is one timed pass of the model over the samples of a batch still standing
(a forward, or a forward and a backward: one iteration of the loop, or one check); its seconds
are also split in equal shares among the samples it carried (`duration_<clock>_shared`). A
*reference* lap runs a whole batch, so its seconds per FLOP are the cell's rate. To *price* a
sample's work is to turn its counted compute (forward queries and input gradients, in FLOPs)
into seconds at that rate (`price`, trashfire.core.clocks.LapClock). A sample's *failure step*
is the iteration whose forward first found it misclassified; its *budget* the iterations (or
queries) the attack may spend on it before it is censored.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks import loops
from trashfire.attacks.autoattack import Sequence
from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.gradient import GradientSettings, first_check, gradient_attack
from trashfire.attacks.spec import AttackSpec
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import STEPS, LapClock, Rate, rate_of
from trashfire.core.schema import FIRST_QUERY
from trashfire.models.flops import SampleCost, sample_cost

UNKNOWN_STEP = -1  # the `art` engine cannot see at which step a sample broke
# pricing groups of the clock: the torch loop's steps; the image-by-image engines' batched
# checks (first query, verification) and searches (a composite's: one group per component)
CHECKS, SEARCH, COMPONENT = "checks", "search", "component:"


def run_engine(
    engine: str, attack: Any, spec: dict, target: Target, x: np.ndarray, y: np.ndarray, *rest, **options
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Attack (x, y) and price each sample's compute; returns the adversarial examples and
    the per-sample arrays (`attack_samples` takes the same arguments)."""
    x_adv, arrays, clock = attack_samples(engine, attack, spec, target, x, y, *rest, **options)
    priced, _ = price(clock, target, x, y, spec.get("batch_size", 100))
    standing = margin_at_budget(target, x_adv, y, arrays["event"], spec.get("batch_size", 100))
    return x_adv, arrays | priced | {"margin_at_budget": standing}


def margin_at_budget(target: Target, x_adv: np.ndarray, y: np.ndarray, event: np.ndarray, batch_size: int) -> np.ndarray:
    """Each standing sample's margin at the example the attack returned (its last query): the
    true-class logit minus the best other, how near the budget left it to failing; NaN where
    it broke. A forward pass of the standing samples after the attack, off its clock: it is
    no part of the adversary's work."""
    margin = np.full(len(y), np.nan)
    standing = np.flatnonzero(~np.asarray(event, dtype=bool))
    with torch.no_grad():
        for part in batches(len(standing), batch_size):
            rows = standing[part]
            inputs = torch.from_numpy(np.ascontiguousarray(x_adv[rows], dtype=np.float32)).to(target.device)
            margin[rows] = margins(target.logits(inputs), torch.from_numpy(y[rows].astype(np.int64)).to(target.device))
    return margin


def attack_samples(
    engine: str,
    attack: Any,
    spec: dict,
    target: Target,
    x: np.ndarray,
    y: np.ndarray,
    strength: float,
    early_exit: bool = True,
    image_seeds: np.ndarray | None = None,
    cost: SampleCost | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray], LapClock]:
    """Attack (x, y); returns the adversarial examples, the per-sample arrays the attack
    decides (outcomes, compute, shared durations) and the clock, to `price` after.
    `attack` is the built ART attack (for `per_image` and `art`), `strength` the attack's
    value on the standardised scale, `cost` the model's FLOPs per query and gradient
    (measured here when not given). `image_seeds` (one per sample) seed the image-by-image
    searches; without them they are drawn from NumPy's global generator."""
    cost = cost or model_cost(target, x, y)
    clock = LapClock(len(y), target.device, cost.forward, cost.backward).start()
    log = FailureLog(x.astype(np.float32), y.astype(np.int64), budget_of(spec, engine))
    batch_size = spec.get("batch_size", 100)
    if engine == "torch":
        loops.of(spec).run(target, log, clock, spec, strength, early_exit, batch_size)
    elif engine == "per_image":
        per_image(attack, target, log, clock, batch_size, image_seeds)
    elif engine == "sequence":
        sequence(attack, target, log, clock, batch_size, image_seeds)
    else:
        whole_batch(attack, target, log, clock, batch_size)
    return log.x_adv, log.arrays(clock), clock


def warm_up_batch(target: Target, x: np.ndarray, y: np.ndarray, batch_size: int) -> None:
    """`warm_up` at a full batch of the cell's samples (repeated to `batch_size` rows)."""
    rows = np.resize(np.arange(len(y)), batch_size)
    warm_up(target, torch.from_numpy(x[rows].astype(np.float32)).to(target.device), torch.from_numpy(y[rows].astype(np.int64)).to(target.device))


def model_cost(target: Target, x: np.ndarray, y: np.ndarray) -> SampleCost:
    """The model's FLOPs per query and per input gradient, predict-time preprocessing
    included, at the data's shape (trashfire.models.flops)."""
    return sample_cost(target.logits, torch.from_numpy(x[:2].astype(np.float32)).to(target.device), torch.from_numpy(y[:2].astype(np.int64)).to(target.device))


def price(
    clock: LapClock, target: Target, x: np.ndarray, y: np.ndarray, batch_size: int, steps_rate: Rate | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Rate]]:
    """Each sample's seconds on both clocks, its compute x its group's seconds per FLOP at
    full batch, and the rates. The torch loop's steps are priced at `steps_rate` where given
    (the model cell's, pooled over its attack cells: `trashfire.attacks.campaign`), else at
    the median of the cell's own reference steps; a cell without one (smaller than
    `batch_size`) is calibrated first: CALIBRATION_REPEATS forward and backward passes of
    `batch_size` rows of the cell's samples, outside the attack's time."""
    if steps_rate is not None and STEPS in clock.group_flops:
        clock.calibrated[STEPS] = steps_rate
    if STEPS in clock.group_flops and clock.group_flops[STEPS].any() and STEPS not in clock.rates():
        clock.calibrated[STEPS] = calibrate(target, clock, x, y, batch_size)
    priced = clock.priced()
    return {f"duration_{name}": seconds for name, seconds in priced.items()}, clock.rates()


CALIBRATION_REPEATS = 3


def warm_up(target: Target, inputs: torch.Tensor, labels: torch.Tensor) -> None:
    """One untimed forward and backward pass at this batch's shape: the first pass at a new
    shape pays for the backend's set-up (oneDNN's primitives, CUDA's kernels), which is no
    part of the model's seconds per FLOP."""
    inputs = inputs.clone().requires_grad_(True)
    torch.autograd.grad(F.cross_entropy(target.logits(inputs), labels), inputs)


CALIBRATION_NORM, CALIBRATION_EPS = np.inf, 1e-3  # steps that change almost nothing: every sample stays in the batch


def calibrate(target: Target, clock: LapClock, x: np.ndarray, y: np.ndarray, batch_size: int, repeats: int = CALIBRATION_REPEATS) -> Rate:
    """Seconds per FLOP of a whole batch, measured as the attacks measure it: `repeats` steps
    of the torch loop itself (PGD without early exit: a forward and a backward of every row,
    with the loop's own bookkeeping) on `batch_size` rows (the cell's samples repeated), on a
    clock of their own, after a warm-up pass."""
    rows = np.resize(np.arange(len(y)), batch_size)
    warm_up(target, torch.from_numpy(x[rows].astype(np.float32)).to(target.device), torch.from_numpy(y[rows].astype(np.int64)).to(target.device))
    probe = LapClock(batch_size, target.device, clock.forward, clock.backward).start()
    scratch = FailureLog(x[rows].astype(np.float32), y[rows].astype(np.int64), repeats)
    settings = GradientSettings(CALIBRATION_NORM, CALIBRATION_EPS, CALIBRATION_EPS / repeats, repeats)
    gradient_attack(target, scratch, probe, settings, early_exit=False, batch_size=batch_size)
    laps = [replace(lap, reference=True) for lap in probe.laps if lap.unit != probe.laps[-1].unit]  # every step of the whole batch, the closing forward aside
    return rate_of(laps, "calibration")


def budget_of(spec: dict, engine: str = "torch") -> int:
    """Steps of a censored sample for the torch loop (its algorithm's); the image-by-image
    engines count queries per image, and the budget is max_iter (or 1) there."""
    if engine == "torch":
        return loops.of(spec).budget(spec)
    return int(AttackSpec.of(spec).budget or 1)


@dataclass
class Passes:
    queries: int = 0  # samples through a forward pass
    gradients: int = 0  # samples through a backward pass to the input


@contextlib.contextmanager
def counting_passes(classifier):
    """Count the samples an ART attack passes through the model, forward and backward. Hooks
    on the model itself, not a wrapper of `predict`: ART's APGD queries it through an
    estimator of its own (the one carrying its loss), and a gradient query is a forward
    pass (counted as a query) and a backward pass (a gradient)."""
    passes = Passes()

    def forward(_module, inputs, _output):
        passes.queries += len(inputs[0])

    def backward(_module, _grad_input, grad_output):
        passes.gradients += len(grad_output[0])

    handles = [classifier.model.register_forward_hook(forward), classifier.model.register_full_backward_hook(backward)]
    try:
        yield passes
    finally:
        for handle in handles:
            handle.remove()


def _first_query_all(target: Target, log: FailureLog, clock: LapClock, batch_size: int) -> np.ndarray:
    """The first query on every sample, in batches (reference laps of the checks: the cell's
    whole batch); returns the samples it left standing."""
    standing = []
    for rows in batches(len(log.y), batch_size):
        with torch.no_grad():
            logits = target.logits(torch.from_numpy(log.x[rows]).to(target.device))
        clock.count(rows, queries=1, group=CHECKS)
        wrong = first_check(target, log, rows, logits, torch.from_numpy(log.y[rows]).to(target.device))
        standing.append(rows[~wrong])
        clock.lap(rows, CHECKS, reference=True)
    return np.concatenate(standing)


def _verify(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, steps: np.ndarray) -> None:
    """One query on the returned examples of `rows`: misclassified there = event at `steps`."""
    if len(rows):
        with torch.no_grad():
            decisions = target.decide(target.logits(torch.from_numpy(log.x_adv[rows]).to(target.device)))
        clock.count(rows, queries=1, group=CHECKS)
        wrong = decisions != log.y[rows]
        log.y_pred_adv[rows] = decisions
        log.event[rows] = wrong
        log.failure_step[rows] = steps
    clock.lap(rows, CHECKS)


@contextlib.contextmanager
def seeded_search(seed: int):
    """Within the block, the black-box searches draw from generators seeded by `seed`.
    Unseeded, two runs of one cell differed: ART's HopSkipJump draws its starting image from
    a `np.random.RandomState()` the OS seeds, and CMA-ES (Pixel, Threshold) reseeds NumPy's
    global generator from the clock."""
    import cma.options_parameters as cma_options

    draws = np.random.SeedSequence(seed)
    unseeded = np.random.RandomState

    class SeededRandomState(unseeded):
        def __init__(self, seed=None):
            super().__init__(int(draws.spawn(1)[0].generate_state(1)[0]) if seed is None else seed)

    cma_seed = cma_options.cma_default_options["seed"]
    np.random.RandomState, cma_options.cma_default_options["seed"] = SeededRandomState, seed
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.RandomState, cma_options.cma_default_options["seed"] = unseeded, cma_seed


def per_image(attack: Any, target: Target, log: FailureLog, clock: LapClock, batch_size: int, image_seeds: np.ndarray | None = None) -> None:
    standing = _first_query_all(target, log, clock, batch_size)
    seeds = _seeds_of(standing, image_seeds)
    queries = _search_each(attack, target, log, clock, standing, seeds, SEARCH)
    _verify(target, log, clock, standing, queries)


def _search_each(attack: Any, target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, seeds: np.ndarray, group: str) -> np.ndarray:
    """ART's search on each image of `rows` alone (its own seed, its own lap: each search is
    a whole batch of its own, a reference lap of `group`); returns the queries each spent."""
    queries = np.zeros(len(rows), dtype=np.int64)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="cma")  # CMA-ES's note on ART's fitness arrays, once per image
        for number, i in enumerate(rows):
            with counting_passes(target.classifier) as passes, seeded_search(int(seeds[number])):
                log.x_adv[i] = attack.generate(x=log.x[i : i + 1], y=log.y[i : i + 1])[0]
            if not passes.queries:
                raise RuntimeError(f"{type(attack).__name__} queried the model without passing through it: the compute clock's hooks saw no pass")
            queries[number] = passes.queries
            clock.count([i], passes.queries, passes.gradients, group)
            clock.lap([i], group, reference=True)
    return queries


def _seeds_of(standing: np.ndarray, image_seeds: np.ndarray | None) -> np.ndarray:
    """Each standing sample's search seed: its own (the campaign's, from the model cell, the
    sample and the strength) or one drawn from the generator the cell's seed set."""
    if image_seeds is not None:
        return np.asarray(image_seeds)[standing]
    return np.random.randint(1, 2**31 - 1, size=len(standing))


def sequence(attack: Sequence, target: Target, log: FailureLog, clock: LapClock, batch_size: int, image_seeds: np.ndarray | None = None) -> None:
    """Each component image by image on the samples still standing, then one check of those
    it attacked; a sample leaves at the first component that breaks it."""
    standing = _first_query_all(target, log, clock, batch_size)
    log.broken_by = np.where(log.event, FIRST_QUERY, "").astype("<U32")
    # a sample keeps its seed through the components: the one a per_image cell of the
    # component alone gives it (the campaign's image seeds do not depend on the attack), so
    # that each component repeats its standalone search exactly and the worst case is never
    # above a component's own cell (tests/attacks/test_autoattack.py)
    seeds = _seeds_of(standing, image_seeds)
    queries = np.zeros(len(log.y), dtype=np.int64)
    for name, component in attack.components.items():
        pending = ~log.event[standing]
        rows = standing[pending]
        queries[rows] += _search_each(component, target, log, clock, rows, seeds[pending], f"{COMPONENT}{name}")
        _verify(target, log, clock, rows, queries[rows])
        log.broken_by[rows[log.event[rows]]] = name


def whole_batch(attack: Any, target: Target, log: FailureLog, clock: LapClock, batch_size: int) -> None:
    """ART's generate on the samples left standing; it shows no step, so their failure step
    is UNKNOWN_STEP, and no sample's own compute: each gets an equal share of the passes."""
    standing = _first_query_all(target, log, clock, batch_size)
    if len(standing):
        with warnings.catch_warnings(), counting_passes(target.classifier) as passes:
            warnings.filterwarnings("ignore", module="cma")
            log.x_adv[standing] = attack.generate(x=log.x[standing], y=log.y[standing])
        clock.count(standing, equal_shares(passes.queries, len(standing)), equal_shares(passes.gradients, len(standing)), SEARCH)
    clock.lap(standing, SEARCH, reference=True)
    _verify(target, log, clock, standing, np.full(len(standing), UNKNOWN_STEP))


def equal_shares(total: int, n: int) -> np.ndarray:
    """`total` split into n integers as equal as can be (the first total % n get one more)."""
    return total // n + (np.arange(n) < total % n)
