"""DeepFool (Moosavi-Dezfooli et al. 2016) on the torch engine, ART's arithmetic step for
step, with the per-sample failure clock. The loop is declared in trashfire.attacks.loops.deepfool."""

from __future__ import annotations

import torch

from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.gradient import charge, first_check
from trashfire.attacks.target import Target
from trashfire.core.clocks import STEPS, LapClock

DEEPFOOL_TOL = 10e-8  # ART's guard against division by zero


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
            pending = charge(clock, checked, log, queries=1)
            reference, unit = whole and len(checked) == standing, clock.new_unit()
            if step == 0:
                wrong = first_check(target, log, rows, logits, labels)
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
            stepped = charge(clock, checked[~wrong], log, gradients=len(classes), graph_rows=len(checked))
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
