"""FGM and PGD on the torch engine, as ART computes them (ProjectedGradientDescentPyTorch's
arithmetic), with the per-sample failure clock (docs/design.md, "Per-sample failure clock").
The loops are declared in trashfire.attacks.loops.fgm and .pgd; the engine's calibration runs
`gradient_attack` too (trashfire.attacks.engine.calibrate)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.spec import NORMS, pgd_step_size
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import STEPS, LapClock


@dataclass
class GradientSettings:
    norm: float
    eps: float
    eps_step: float
    max_iter: int


def _norm(spec: dict) -> float:
    return float(NORMS[str(spec["norm"])])


def fgm_settings(spec: dict, eps: float) -> GradientSettings:
    """FGM: one step of length eps."""
    return GradientSettings(_norm(spec), eps, eps, 1)


def pgd_settings(spec: dict, eps: float) -> GradientSettings:
    """PGD: max_iter steps of eps * step_scale / max_iter (as build_attack)."""
    return GradientSettings(_norm(spec), eps, pgd_step_size(spec, eps), int(spec["max_iter"]))


def first_check(target: Target, log: FailureLog, rows: np.ndarray, logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
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
            pending = charge(clock, checked, log, queries=1)  # a sample's clock stops at its first failure
            reference, unit = whole and len(checked) == standing, clock.new_unit()
            wrong = first_check(target, log, rows, logits, labels) if step == 0 else log.observe(checked, target.decide(logits), step)
            keep_mask = ~wrong if early_exit else np.ones_like(wrong)
            standing = int(keep_mask.sum()) if step == 0 else standing
            keep = torch.from_numpy(keep_mask).to(device)
            if last or not bool(keep.any()):
                break
            clock.lap(pending, STEPS, reference, unit)
            loss = F.cross_entropy(logits[keep], labels[active][keep])  # ART's mean over the batch
            (grad,) = torch.autograd.grad(loss, inputs)  # over the whole batch's graph
            stepped = charge(clock, checked[keep_mask], log, gradients=1, graph_rows=len(checked))
            active = active[keep]
            x_adv[active] = pgd_step(inputs.detach()[keep], grad[keep], x0[active], settings, target.clip_values)
            clock.lap(stepped, STEPS, reference, unit)  # without early exit, broken samples' steps are nobody's
        log.x_adv[rows] = x_adv.cpu().numpy()
        clock.lap(pending, STEPS)  # the last check, and handing the batch back: a forward alone, no reference


def charge(clock: LapClock, rows: np.ndarray, log: FailureLog, queries: int = 0, gradients: int = 0, graph_rows: int | None = None) -> np.ndarray:
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
