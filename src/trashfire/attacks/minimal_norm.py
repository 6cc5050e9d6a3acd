"""Minimal-norm attacks on the torch engine: FMN (Pintor et al., NeurIPS 2021) for linf, l2 and
l1, and DDN (Rony et al., CVPR 2019) for l2, batched, with the per-sample failure clock
(docs/design.md, "Per-sample failure clock"; docs/attacks.md, "Minimal-norm attacks").

Neither has an eps: each walks towards the decision boundary and then along it, shrinking the
perturbation, and returns per sample the smallest adversarial point it checked. Its norm (in
the attack's norm, on the standardised scale) is the sample's minimal eps as far as this
attack can tell; the outcome arrays' `norm_l*` carry it.

The arithmetic is adv-lib 0.2.8's (`adv_lib.attacks.fmn`, `adv_lib.attacks.ddn`), the
reference the tests compare with on the same model and inputs. adv-lib works on [0, 1]
pixels; here the search runs in the input box's unit coordinates, u = (x - low) / (high - low)
(trashfire.attacks.fab.UnitBox), so its step sizes, projections, clamps and DDN's
quantisation levels are the reference's; a norm in unit coordinates times (high - low) is the
standardised one.

Per step, one forward at the current point checks every sample still searching (a query) and
its backward gives the next step's gradient (a gradient); the last step's gradient would only
move a point nobody checks, so it is not taken (the reference takes and discards it). The
clock: a sample's first check is the first query (wrong there: event at step 0, norm 0, it
leaves the batch: the one early exit these attacks have); its first adversarial check at step
i is its event (failure step i, i + 1 queries, i gradients); the search goes on after that to
shrink the norm, and that work is nobody's (the cell's time keeps it). A sample no check found
adversarial is censored at `steps - 1` and its returned point is the last one checked, so its
norm is how far the search reached without success (the censoring eps of survival in eps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks.fab import UnitBox
from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.spec import NORMS
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import STEPS, LapClock
from trashfire.core.errors import ConfigError

FMN_NORMS, DDN_NORMS = (np.inf, 2, 1), (2,)
TINY = 1e-12  # adv-lib's floor on every norm it divides by


@dataclass(frozen=True)
class MinimalSettings:
    """One minimal-norm attack: FMN's or DDN's options (adv-lib's names and defaults)."""

    method: str  # fmn | ddn
    norm: float
    steps: int
    alpha_init: float = 1.0  # FMN: the first step's length (unit coordinates), cosine-annealed
    alpha_final: float | None = None  # FMN: the last step's; None: alpha_init / 100
    gamma_init: float = 0.05  # FMN: eps's relative change, cosine-annealed to gamma_final
    gamma_final: float = 0.001
    gamma: float = 0.05  # DDN: eps's relative change
    init_norm: float = 1.0  # DDN: the first eps (unit coordinates)
    levels: int | None = None  # DDN: quantise each point to this many levels (adv-lib: 256)

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> MinimalSettings:
        loop = spec["rules"]["torch"]["algorithm"] if "rules" in spec else spec.get("algorithm", "fmn")
        kwargs = dict(spec.get("kwargs") or {})
        norm = float(NORMS[str(spec["norm"])])
        allowed = FMN_NORMS if loop == "fmn" else DDN_NORMS
        if norm not in allowed:
            raise ConfigError(f"attack.{spec.get('name', loop)}.norms", f"got {spec['norm']!r}; {loop} minimises {', '.join(_name(n) for n in allowed)}")
        steps = int(spec["value"])
        if steps < 2:
            raise ConfigError(f"attack.{spec.get('name', loop)}.values", f"got {steps}; a minimal-norm attack needs >= 2 steps")
        known = {k: kwargs[k] for k in cls.__dataclass_fields__ if k in kwargs and k not in ("method", "norm", "steps")}
        return cls(method=loop, norm=norm, steps=steps, **known)


def _name(norm: float) -> str:
    return "inf" if norm == np.inf else str(int(norm))


def run(target: Target, log: FailureLog, clock: LapClock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    """The torch engine's entry (`early_exit` is not read: only the first query's failures
    leave early; the search needs every step to shrink the norm)."""
    settings = MinimalSettings.of(spec | {"value": int(strength)})
    log.norm_by_step = np.full((len(log.y), settings.steps), np.inf)
    for rows in batches(len(log.y), batch_size):
        Search(target, log, clock, rows, settings, whole=len(rows) == batch_size).run()


def unit_norms(delta: torch.Tensor, norm: float) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm == np.inf else flat.norm(p=norm, dim=1)


def dual_norms(grad: torch.Tensor, norm: float) -> torch.Tensor:
    """The gradient's dual norm (linf -> l1, l2 -> l2, l1 -> linf): FMN's distance estimate."""
    flat = grad.flatten(1)
    if norm == np.inf:
        return flat.norm(p=1, dim=1)
    return flat.abs().amax(1) if norm == 1 else flat.norm(p=2, dim=1)


def simplex_projection(x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Each row of the non-negative x onto the simplex of size eps (Duchi et al. 2008, by
    sorting; adv-lib's arithmetic)."""
    u = x.sort(dim=1, descending=True)[0]
    indices = torch.arange(x.size(1), device=x.device)
    cumsum = torch.cumsum(u, dim=1).sub_(eps.unsqueeze(1)).div_(indices + 1)
    k = (cumsum < u).long().mul_(indices).amax(dim=1, keepdim=True)
    return (x - cumsum.gather(1, k)).clamp_(min=0)


def project(delta: torch.Tensor, eps: torch.Tensor, norm: float) -> torch.Tensor:
    """delta (flattened per sample) onto each sample's eps-ball (FMN's projections)."""
    flat = delta.flatten(1)
    if norm == np.inf:
        return torch.clamp(flat, min=-eps.unsqueeze(1), max=eps.unsqueeze(1)).view_as(delta)
    if norm == 2:
        return (flat * (eps.unsqueeze(1) / flat.norm(p=2, dim=1, keepdim=True).clamp(min=TINY)).clamp(max=1)).view_as(delta)
    outside = flat.norm(p=1, dim=1) > eps
    if outside.any():
        flat = flat.clone()
        flat[outside] = simplex_projection(flat[outside].abs(), eps[outside]).copysign(flat[outside])
    return flat.view_as(delta)


def logit_difference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The true class's logit minus the best other (FMN's loss, before its sign)."""
    own = logits.gather(1, labels.unsqueeze(1)).squeeze(1)
    others = logits.scatter(1, labels.unsqueeze(1), -math.inf).amax(1)
    return own - others


class Search:
    """One batch of samples (`rows`, positions in the log) through `settings.steps` steps."""

    def __init__(self, target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: MinimalSettings, whole: bool):
        self.target, self.log, self.clock, self.rows, self.settings, self.whole = target, log, clock, rows, settings, whole
        self.box = UnitBox(target)
        device = target.device
        self.x0 = self.box.to_unit(torch.from_numpy(log.x[rows]).to(device))
        self.labels = torch.from_numpy(log.y[rows]).to(device)
        self.delta = torch.zeros_like(self.x0)
        n = len(rows)
        worst = torch.maximum(self.x0, 1 - self.x0)
        self.worst_norm = unit_norms(worst, settings.norm)
        self.best_norm = self.worst_norm.clone()
        self.best = self.x0.clone()
        self.best_decision = torch.full((n,), -1, dtype=torch.long, device=device)
        self.found = torch.zeros(n, dtype=torch.bool, device=device)
        self.eps = torch.full((n,), math.inf if settings.method == "fmn" else settings.init_norm, device=device)
        self.last = self.x0.clone()  # each sample's last checked point (a censored sample's return)
        self.last_decision = torch.full((n,), -1, dtype=torch.long, device=device)
        self.active = torch.arange(n, device=device)

    def run(self) -> None:
        steps, standing = self.settings.steps, len(self.rows)
        for step in range(steps):
            a = self.active
            delta = self.delta[a].clone().requires_grad_(step < steps - 1)
            with torch.set_grad_enabled(step < steps - 1):
                logits = self.target.logits(self.box.low + (self.x0[a] + delta) * (self.box.high - self.box.low))
            checked = self.rows[a.cpu().numpy()]
            pending = self._charge(checked, queries=1)
            reference, unit = self.whole and len(checked) == standing, self.clock.new_unit()
            decisions = self.target.decide(logits)
            wrong = self._check(step, a, checked, decisions, logits)
            if step == 0:
                standing = int((~wrong).sum())
                keep = torch.from_numpy(~wrong).to(a.device)
            else:
                keep = torch.ones(len(a), dtype=torch.bool, device=a.device)
            self.clock.lap(pending, STEPS, reference, unit)
            if step == steps - 1 or not bool(keep.any()):
                break
            grad = self._gradient(logits, delta, a)
            stepped = self._charge(checked[keep.cpu().numpy()], gradients=1, graph_rows=len(checked))
            self._update(step, a, keep, delta.detach(), grad, logits.detach(), torch.from_numpy(wrong).to(a.device))
            self.active = a[keep]
            self.clock.lap(stepped, STEPS, reference, unit)
        self._finish()

    def _charge(self, rows: np.ndarray, queries: int = 0, gradients: int = 0, graph_rows: int | None = None) -> np.ndarray:
        """As the gradient loops charge: only samples whose clocks still run (not yet broken)."""
        charged = rows[~self.log.event[rows]]
        self.clock.count(charged, queries, gradients, STEPS)
        self.clock.uncharged((len(rows) if graph_rows is None else graph_rows) - len(charged), queries, gradients)
        return charged

    def _check(self, step: int, a: torch.Tensor, checked: np.ndarray, decisions: np.ndarray, logits: torch.Tensor) -> np.ndarray:
        """Record the check: the first query's, or a step's first failures; keep each sample's
        smallest adversarial point and its last checked one."""
        if step == 0:
            wrong = self.log.first_query(checked, decisions, margins(logits.detach(), self.labels[a]))
        else:
            wrong = self.log.observe(checked, decisions, step)
        points = (self.x0[a] + self.delta[a]).detach()
        norms = unit_norms(self.delta[a], self.settings.norm)
        adversarial = torch.from_numpy(wrong).to(a.device)
        smaller = adversarial & (norms < self.best_norm[a])
        decided = torch.from_numpy(decisions).to(a.device).long()
        self.best_norm[a] = torch.where(smaller, norms, self.best_norm[a])
        self.best[a[smaller]] = points[smaller]
        self.best_decision[a[smaller]] = decided[smaller]
        self.found[a] |= adversarial
        self.last[a], self.last_decision[a] = points, decided
        best = torch.where(self.found[a], self.best_norm[a] * (self.box.high - self.box.low), math.inf)
        self.log.norm_by_step[checked, step] = best.cpu().numpy()
        return wrong

    def _gradient(self, logits: torch.Tensor, delta: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """FMN: of minus the logit difference; DDN: of the cross-entropy (per sample, summed)."""
        if self.settings.method == "fmn":
            loss = -logit_difference(logits, self.labels[a])
        else:
            loss = F.cross_entropy(logits, self.labels[a], reduction="none")
        self._loss = loss.detach()
        (grad,) = torch.autograd.grad(loss.sum(), delta)
        return grad

    def _update(
        self, step: int, a: torch.Tensor, keep: torch.Tensor, delta: torch.Tensor, grad: torch.Tensor, logits: torch.Tensor, adversarial: torch.Tensor
    ) -> None:
        """The reference's step for the samples that stay (`keep`), from the check's state."""
        a, delta, grad, adversarial, loss = a[keep], delta[keep], grad[keep], adversarial[keep], self._loss[keep]
        fmn = self.settings.method == "fmn"
        new_delta, eps = (self._fmn_step if fmn else self._ddn_step)(step, a, delta, grad, adversarial, loss)
        self.delta[a], self.eps[a] = new_delta, eps

    def _fmn_step(self, step, a, delta, grad, adversarial, loss):
        s = self.settings
        cosine = (1 + math.cos(math.pi * step / s.steps)) / 2
        alpha_final = s.alpha_init / 100 if s.alpha_final is None else s.alpha_final
        alpha = alpha_final + (s.alpha_init - alpha_final) * cosine
        gamma = s.gamma_final + (s.gamma_init - s.gamma_final) * cosine
        norms, eps, best, found = unit_norms(delta, s.norm), self.eps[a], self.best_norm[a], self.found[a]
        distance = loss.abs() / dual_norms(grad, s.norm).clamp(min=TINY)
        eps = torch.where(adversarial, torch.minimum(eps * (1 - gamma), best), torch.where(found, eps * (1 + gamma), norms + distance))
        eps = torch.minimum(eps, self.worst_norm[a])
        grad_norms = grad.flatten(1).norm(p=2, dim=1).clamp(min=TINY)
        delta = delta + alpha * grad / grad_norms.view(-1, *[1] * (grad.dim() - 1))
        delta = project(delta, eps, s.norm)
        x0 = self.x0[a]
        return (x0 + delta).clamp(0, 1) - x0, eps

    def _ddn_step(self, step, a, delta, grad, adversarial, loss):
        s = self.settings
        view = (-1,) + (1,) * (grad.dim() - 1)
        grad_norms = grad.flatten(1).norm(p=2, dim=1)
        grad = grad / grad_norms.view(view)
        zero = grad_norms < TINY
        if zero.any():  # the reference's random direction where the gradient vanishes
            grad[zero] = torch.randn_like(grad[zero])
        alpha = 0.01 + (1 - 0.01) * (1 + math.cos(math.pi * step / s.steps)) / 2
        delta = delta + alpha * grad
        eps = torch.where(adversarial, (1 - s.gamma) * self.eps[a], (1 + s.gamma) * self.eps[a])
        eps = torch.minimum(eps, self.worst_norm[a])
        delta = delta * (eps / delta.flatten(1).norm(p=2, dim=1)).view(view)
        x0 = self.x0[a]
        point = (delta + x0).clamp(0, 1)
        if s.levels is not None:
            point = point.mul(s.levels - 1).round().div(s.levels - 1)
        return point - x0, eps

    def _finish(self) -> None:
        """The returned points: the smallest adversarial, else the last checked (standardised);
        each sample's smallest norm by step carried to the steps it did not take (left early)."""
        self.log.norm_by_step[self.rows] = np.minimum.accumulate(self.log.norm_by_step[self.rows], axis=1)
        found = self.found
        points = torch.where(found.view(-1, *[1] * (self.x0.dim() - 1)), self.best, self.last)
        decisions = torch.where(found, self.best_decision, self.last_decision)
        seen = (self.box.low + points * (self.box.high - self.box.low)).cpu().numpy()
        # a sample wrong at the first query keeps its input to the bit (the round trip through
        # unit coordinates would leave a norm of 1e-7 where the perturbation is none)
        unperturbed = (points == self.x0).flatten(1).all(1).cpu().numpy()
        self.log.x_adv[self.rows] = np.where(unperturbed.reshape((-1,) + (1,) * (seen.ndim - 1)), self.log.x[self.rows], seen)
        self.log.y_pred_adv[self.rows] = decisions.cpu().numpy()
