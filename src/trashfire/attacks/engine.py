"""The attack engine with a per-sample failure clock (docs/design.md, "Per-sample failure clock").

For every attacked sample: the adversary's work on it until it is first misclassified
(event), or until the budget ran out (censored). Work is counted, then priced
(trashfire.core.clocks.LapClock): each sample's forward queries and input gradients, exactly,
in FLOPs at the model's cost per sample (`model_cost`); its seconds on both clocks are that
compute times its cell's seconds per FLOP at full batch (`price`), so they do not depend on
how many others of its batch were still standing. The laps' equal shares stay beside them.

- `torch`: FGM, PGD and DeepFool in a device-resident loop (FMN and DDN:
  trashfire.attacks.minimal_norm; AutoAttack's components: trashfire.attacks.standard) (`ALGORITHMS`; an attack's
  `rules.torch.algorithm` names the one that runs it). Each step's forward pass decides
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
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks import minimal_norm, standard
from trashfire.attacks.autoattack import Sequence
from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.spec import NORMS, AttackSpec, loops_run_by, pgd_step_size, torch_algorithm
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import STEPS, LapClock, Rate, rate_of
from trashfire.core.schema import FIRST_QUERY
from trashfire.models.flops import SampleCost, sample_cost

DEEPFOOL_TOL = 10e-8  # ART's guard against division by zero
UNKNOWN_STEP = -1  # the `art` engine cannot see at which step a sample broke
# pricing groups of the clock: the torch loop's steps; the image-by-image engines' batched
# checks (first query, verification) and searches (a composite's: one group per component)
CHECKS, SEARCH, COMPONENT = "checks", "search", "component:"


@dataclass
class GradientSettings:
    norm: float
    eps: float
    eps_step: float
    max_iter: int


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
        ALGORITHMS[torch_algorithm(spec)].run(target, log, clock, spec, strength, early_exit, batch_size)
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
        return ALGORITHMS[torch_algorithm(spec)].steps(spec)
    return int(AttackSpec.of(spec).budget or 1)


def _norm(spec: dict) -> float:
    return float(NORMS[str(spec["norm"])])


def fgm_settings(spec: dict, eps: float) -> GradientSettings:
    """FGM: one step of length eps."""
    return GradientSettings(_norm(spec), eps, eps, 1)


def pgd_settings(spec: dict, eps: float) -> GradientSettings:
    """PGD: max_iter steps of eps * step_scale / max_iter (as build_attack)."""
    return GradientSettings(_norm(spec), eps, pgd_step_size(spec, eps), int(spec["max_iter"]))


def _first_check(target: Target, log: FailureLog, rows: np.ndarray, logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    return log.first_query(rows, target.decide(logits), margins(logits, labels))


def gradient_attack(target: Target, log: FailureLog, clock: LapClock, settings: GradientSettings, early_exit: bool, batch_size: int) -> None:
    """FGM and PGD as ART computes them (ProjectedGradientDescentPyTorch's arithmetic: the
    steepest-ascent direction of the norm, a step, the clip range, the projection). Each
    step's forward is a query of every sample it checks and its backward a gradient of each
    it steps; a sample whose clock has stopped (broken, without early exit) is charged
    nothing. A step of a whole batch with every sample the first query left standing still
    active is a reference step: it measures the seconds per FLOP at full batch."""
    device = target.device
    for rows in batches(len(log.y), batch_size):
        x0 = torch.from_numpy(log.x[rows]).to(device)
        labels = torch.from_numpy(log.y[rows]).to(device)
        x_adv, active = x0.clone(), torch.arange(len(rows), device=device)
        whole, standing = len(rows) == batch_size, len(rows)
        for step in range(settings.max_iter + 1):
            last = step == settings.max_iter
            inputs = x_adv[active].requires_grad_(not last)
            logits = target.logits(inputs)
            checked = rows[active.cpu().numpy()]
            pending = _count(clock, checked, log, queries=1)  # a sample's clock stops at its first failure
            reference, unit = whole and len(checked) == standing, clock.new_unit()
            wrong = _first_check(target, log, rows, logits, labels) if step == 0 else log.observe(checked, target.decide(logits), step)
            keep_mask = ~wrong if early_exit else np.ones_like(wrong)
            standing = int(keep_mask.sum()) if step == 0 else standing
            keep = torch.from_numpy(keep_mask).to(device)
            if last or not bool(keep.any()):
                break
            clock.lap(pending, STEPS, reference, unit)
            loss = F.cross_entropy(logits[keep], labels[active][keep])  # ART's mean over the batch
            (grad,) = torch.autograd.grad(loss, inputs)  # over the whole batch's graph
            stepped = _count(clock, checked[keep_mask], log, gradients=1, graph_rows=len(checked))
            active = active[keep]
            x_adv[active] = pgd_step(inputs.detach()[keep], grad[keep], x0[active], settings, target.clip_values)
            clock.lap(stepped, STEPS, reference, unit)  # without early exit, broken samples' steps are nobody's
        log.x_adv[rows] = x_adv.cpu().numpy()
        clock.lap(pending, STEPS)  # the last check, and handing the batch back: a forward alone, no reference


def _count(clock: LapClock, rows: np.ndarray, log: FailureLog, queries: int = 0, gradients: int = 0, graph_rows: int | None = None) -> np.ndarray:
    """Charge the rows of `rows` whose clocks still run (not yet broken) `queries` and
    `gradients`; the pass's work on the others (and on `graph_rows` in all, where a backward
    ran over a larger graph) is nobody's. Returns the charged rows."""
    charged = rows[~log.event[rows]]
    clock.count(charged, queries, gradients, STEPS)
    clock.uncharged((len(rows) if graph_rows is None else graph_rows) - len(charged), queries, gradients)
    return charged


def steepest_direction(grad: torch.Tensor, norm: float) -> torch.Tensor:
    """The x maximising <grad, x> with ||x||_norm <= 1 (ART's `_apply_norm`; NaN gradient
    entries are zeroed first, as ART does)."""
    grad = torch.nan_to_num(grad, nan=0.0)
    flat = grad.reshape(len(grad), -1)
    if norm == np.inf:
        flat = torch.ones_like(flat)
    elif norm == 1:
        top = flat.abs().argmax(1)
        flat = torch.zeros_like(flat)
        flat[torch.arange(len(flat)), top] = 1
    else:
        q_norm = torch.linalg.norm(flat, ord=2, dim=1, keepdim=True)
        flat = flat.abs() * q_norm.where(q_norm == 0, 1 / q_norm)
    return flat.reshape(grad.shape) * grad.sign()


def project(delta: torch.Tensor, eps: float, norm: float) -> torch.Tensor:
    """Onto the eps-ball: exact for linf, by rescaling for l1 and l2 (ART's default)."""
    flat = delta.reshape(len(delta), -1)
    if norm == np.inf:
        flat = flat.sign() * torch.clamp(flat.abs(), max=eps)
    else:
        size = torch.linalg.norm(flat, ord=norm, dim=1, keepdim=True)
        flat = flat * size.where(size == 0, torch.clamp(eps / size, max=1.0))
    return flat.reshape(delta.shape)


def pgd_step(x: torch.Tensor, grad: torch.Tensor, x0: torch.Tensor, settings: GradientSettings, clip: tuple[float, float]) -> torch.Tensor:
    step = settings.eps_step * steepest_direction(grad, settings.norm)
    stepped = torch.clamp(x + torch.nan_to_num(step, nan=0.0), *clip)
    return x0 + project(stepped - x0, settings.eps, settings.norm)


def deepfool(target: Target, log: FailureLog, clock: LapClock, nb_grads: int, max_iter: int, overshoot: float, batch_size: int) -> None:
    """ART's DeepFool, step for step, on the samples still correct: the class gradients of
    the top `nb_grads` classes of the first query (their union over the batch; ART takes it
    over its whole input, the same when the cell fits one batch, as by default), the
    smallest linearised step to another class scaled by the clip range, and the overshoot on
    the returned example. ART keeps computing gradients for the samples it has already
    fooled; here they leave the batch. A step charges each sample it steps one gradient per
    class of the set: ART's set is the union over the batch, so a sample's work, like its
    step, depends on the other samples of its batch (the one exception to batch-independent
    compute)."""
    device, (low, high) = target.device, target.clip_values
    for rows in batches(len(log.y), batch_size):
        x0 = torch.from_numpy(log.x[rows]).to(device)
        labels = torch.from_numpy(log.y[rows]).to(device)
        x_adv, active, classes = x0.clone(), torch.arange(len(rows), device=device), None
        whole, standing = len(rows) == batch_size, len(rows)
        for step in range(max_iter + 1):
            last = step == max_iter
            inputs = x_adv[active].requires_grad_(not last)
            logits = target.logits(inputs)
            checked = rows[active.cpu().numpy()]
            pending = _count(clock, checked, log, queries=1)
            reference, unit = whole and len(checked) == standing, clock.new_unit()
            if step == 0:
                wrong = _first_check(target, log, rows, logits, labels)
                standing = int((~wrong).sum())
                top = torch.argsort(-logits.detach(), dim=1)[:, :nb_grads]
                # ART's set; the labels of the samples still standing are in it already unless a
                # postprocessor (Gauss-out) moved their decision, and searchsorted needs them
                classes = torch.unique(torch.cat([top.flatten(), labels[torch.from_numpy(~wrong).to(device)]]))
            else:
                wrong = log.observe(checked, target.decide(logits), step)
            keep = torch.from_numpy(~wrong).to(device)
            if last or not bool(keep.any()):
                break
            clock.lap(pending, STEPS, reference, unit)
            grads = torch.stack([torch.autograd.grad(logits[:, c].sum(), inputs, retain_graph=True)[0][keep] for c in classes.tolist()], 1)
            stepped = _count(clock, checked[~wrong], log, gradients=len(classes), graph_rows=len(checked))
            active = active[keep]
            step_to_boundary = deepfool_step(logits.detach()[keep][:, classes], grads, torch.searchsorted(classes, labels[active]))
            x_adv[active] = torch.clamp(inputs.detach()[keep] + step_to_boundary * (high - low), low, high)
            clock.lap(stepped, STEPS, reference, unit)
        log.x_adv[rows] = torch.clamp(x0 + (1 + overshoot) * (x_adv - x0), low, high).cpu().numpy()
        clock.lap(pending, STEPS)  # a forward alone: no reference


def deepfool_step(f: torch.Tensor, grads: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """The smallest step to the nearest linearised boundary (ART's arithmetic): f (K, L) the
    logits of the class set, grads (K, L, ...) their input gradients, own the column of each
    sample's true label (its prediction too: it is still standing)."""
    k = torch.arange(len(f), device=f.device)
    grad_diff = grads - grads[k, own][:, None]
    f_diff = f - f[k, own][:, None]
    distance = f_diff.abs() / (torch.linalg.norm(grad_diff.reshape(len(f), f.shape[1], -1), dim=2) + DEEPFOOL_TOL)
    distance[k, own] = float("inf")
    nearest = distance.argmin(1)
    direction = grad_diff[k, nearest]
    size = f_diff[k, nearest].abs() / (torch.linalg.norm(direction.reshape(len(f), -1), dim=1) ** 2 + DEEPFOOL_TOL)
    return size.reshape((-1,) + (1,) * (direction.dim() - 1)) * direction


@dataclass(frozen=True)
class Algorithm:
    """One loop of the torch engine: a censored sample's steps for a spec, and the run of
    the attack on (target, log, clock) at a strength (`run(target, log, clock, spec,
    strength, early_exit, batch_size)`)."""

    steps: Callable[[dict], int]
    run: Callable[..., None]


def _gradient(settings: Callable[[dict, float], GradientSettings]) -> Callable[..., None]:
    def run(target: Target, log: FailureLog, clock: LapClock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
        gradient_attack(target, log, clock, settings(spec, strength), early_exit, batch_size)

    return run


def _deepfool(target: Target, log: FailureLog, clock: LapClock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    """Its loop always exits early (the validator refuses `early_exit` for it)."""
    overshoot = spec.get("kwargs", {}).get("epsilon", 1e-6)
    deepfool(target, log, clock, nb_grads=int(strength), max_iter=spec["max_iter"], overshoot=overshoot, batch_size=batch_size)


# the torch engine's loops by the name an attack's `rules.torch.algorithm` gives (declared
# once, in trashfire.attacks.spec.TORCH_LOOPS, with the module that runs each)
OWN_LOOPS = {
    "fgm": Algorithm(steps=lambda spec: 1, run=_gradient(fgm_settings)),
    "pgd": Algorithm(steps=lambda spec: int(AttackSpec.of(spec).budget), run=_gradient(pgd_settings)),
    "deepfool": Algorithm(steps=lambda spec: int(AttackSpec.of(spec).budget), run=_deepfool),
}
ALGORITHMS = {
    **{name: OWN_LOOPS[name] for name in loops_run_by("engine")},
    # AutoAttack's components, alone or in its composite (steps: a censored sample's queries)
    **dict.fromkeys(standard.ALGORITHMS, Algorithm(steps=standard.budget_of, run=standard.run)),
    # the minimal-norm attacks (steps: a censored sample's gradients)
    **dict.fromkeys(minimal_norm.ALGORITHMS, Algorithm(steps=minimal_norm.budget_of, run=minimal_norm.run)),
}


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
        wrong = _first_check(target, log, rows, logits, torch.from_numpy(log.y[rows]).to(target.device))
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
