"""FAB (Croce & Hein 2020), AutoAttack's minimal-perturbation component, batched on the torch
engine with early exit and the per-sample failure clock.

The arithmetic is the authors' (`pyautoattack`'s `FABAttack.attack_single_run` and `perturb`,
`FABAttack_PT`'s gradients, `fab_projections`' projections), as AutoAttack's standard version
runs it: FAB-T, one run per target class (the k-th largest clean logit, k = 2 .. n_targets + 1,
each run on the samples the previous ones left standing), one restart, so no random start and
no random draw at all. Untargeted FAB (`n_targets=0`: every class's gradient, the nearest
linearised boundary) runs with one restart too; AutoAttack's random restarts are not ported.

The reference works on [0, 1] pixels; here the search runs in the input box's unit coordinates,
u = (x - low) / (high - low), and the model sees low + u * (high - low) (the formulas of
`tests.conftest.PixelModel`), so the projections onto the box, the clamps and the norms are
the reference's to the bit. A norm in those coordinates is the standardised one over
(high - low): `eps` (standardised) is compared as eps / (high - low).

Early exit: AutoAttack counts a sample broken when FAB's smallest adversarial point has norm
<= eps. The iterates do not depend on that bookkeeping, so a sample leaves at its first
iterate that `target.decide` misclassifies within eps (its log row is that iterate, the event
at its queries so far); a misclassified iterate beyond eps is no event: the search pulls it
back by beta, as the reference does, and goes on. A sample no run breaks keeps the clean input
as its log row (AutoAttack returns the clean input for robust samples).

Counting (group STEPS; a gradient is `g` backward passes: 1 targeted, one per class
untargeted): each run costs a sample one forward with its gradient at the clean input (the
first run's also gives the targets), then per iteration a forward that checks the new iterate
and, unless it is the last or the sample broke there, a forward with its gradient at the next
point (the iterate, or where it was pulled back to). So FAB charges a sample 2 queries and
g gradients per iteration it ran, over all its runs (its last check closes an iteration): one
broken at iteration i (from 1) of run r (from 0) has spent 2 (r n_iter + i) queries (its
failure step: those of the components before it and the first query added), a censored one
`budget_of(settings)` = 2 runs n_iter (runs: n_targets, 1 untargeted). The
reference's clean checks and targets (three clean forwards a run) and its final checks of the
returned points are not repeated. Its other waste, a check and a gradient forward at the same
point, is left: the check could carry the next gradient's graph only where the iterate is not
pulled back, and FAB overshoots the boundary by design (eta), so 99% of the checks on the
digits CNN found the iterate adversarial; reusing them (tried) saved 0.3% of the forwards and, by
the backward over the check's whole graph, cost 3% more compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks.failure_log import FailureLog, PairLedger, batches
from trashfire.attacks.norms import TINY, per_sample, sample_norms
from trashfire.attacks.target import Target
from trashfire.core.clocks import STEPS, LapClock

SMALLEST_STEP = 1e-8  # the reference's floor on the projections' norms in the step's alpha
NO_BOUNDARY = 1e10  # the reference's distance to the true class's own "boundary" (untargeted)


@dataclass(frozen=True)
class FABSettings:
    """One FAB attack: `n_targets` > 0 is FAB-T (AutoAttack's standard: 9), 0 untargeted FAB;
    `eps` on the standardised scale; the other values AutoAttack's."""

    norm: float
    eps: float
    n_iter: int = 100
    n_targets: int = 9
    alpha_max: float = 0.1
    eta: float = 1.05
    beta: float = 0.9

    def __post_init__(self) -> None:
        if self.norm not in (np.inf, 2):
            raise ValueError(f"FAB's norm: got {self.norm!r}; only inf and 2 are supported (the reference's L1 version is not ported)")
        if self.n_iter < 1:
            raise ValueError(f"FAB: n_iter must be >= 1; got {self.n_iter}")
        if self.n_targets < 0:
            raise ValueError(f"FAB: n_targets must be >= 0 (0: untargeted); got {self.n_targets}")

    @property
    def runs(self) -> int:
        return max(self.n_targets, 1)


def budget_of(settings: FABSettings) -> int:
    """The queries of a sample no run breaks: per run, a clean forward, then a check and a
    gradient forward per iteration but the last, which checks only."""
    return settings.runs * 2 * settings.n_iter


# --- the reference's arithmetic, pure (rows are independent: any batch gives each the same) ---


def projection_linf(points: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The smallest Linf step from each of `points` (rows, in the box [0, 1]) to the hyperplane
    w.x = b within the box (`fab_projections.projection_linf`, its arithmetic untouched)."""
    device = points.device
    t, w, b = points, w.clone(), b.clone()
    sign = 2 * ((w * t).sum(1) - b >= 0) - 1
    w.mul_(sign.unsqueeze(1))
    b.mul_(sign)
    a = (w < 0).float()
    d = (a - t) * (w != 0).float()
    p = a - t * (2 * a - 1)
    indp = torch.argsort(p, dim=1)
    b = b - (w * t).sum(1)
    b0 = (w * d).sum(1)
    indp2 = indp.flip((1,))
    ws = w.gather(1, indp2)
    bs2 = -ws * d.gather(1, indp2)
    s = torch.cumsum(ws.abs(), dim=1)
    sb = torch.cumsum(bs2, dim=1) + b0.unsqueeze(1)
    b2 = sb[:, -1] - s[:, -1] * p.gather(1, indp[:, 0:1]).squeeze(1)
    c_l = b - b2 > 0
    c2 = (b - b0 > 0) & (~c_l)
    lb = torch.zeros(c2.sum(), device=device)
    ub = torch.full_like(lb, w.shape[1] - 1)
    nitermax = math.ceil(math.log2(w.shape[1]))
    indp_, sb_, s_, p_, b_ = indp[c2], sb[c2], s[c2], p[c2], b[c2]
    for _ in range(nitermax):  # a bisection for the last coordinate the step saturates
        counter4 = torch.floor((lb + ub) / 2)
        counter2 = counter4.long().unsqueeze(1)
        indcurr = indp_.gather(1, indp_.size(1) - 1 - counter2)
        b2 = (sb_.gather(1, counter2) - s_.gather(1, counter2) * p_.gather(1, indcurr)).squeeze(1)
        c = b_ - b2 > 0
        lb = torch.where(c, counter4, lb)
        ub = torch.where(c, ub, counter4)
    lb = lb.long()
    if c_l.any():
        lmbd_opt = torch.clamp_min((b[c_l] - sb[c_l, -1]) / (-s[c_l, -1]), min=0).unsqueeze(-1)
        d[c_l] = (2 * a[c_l] - 1) * lmbd_opt
    lmbd_opt = torch.clamp_min((b[c2] - sb[c2, lb]) / (-s[c2, lb]), min=0).unsqueeze(-1)
    d[c2] = torch.min(lmbd_opt, d[c2]) * a[c2] + torch.max(-lmbd_opt, d[c2]) * (1 - a[c2])
    return d * (w != 0).float()


def projection_l2(points: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The smallest L2 step from each of `points` (rows, in the box [0, 1]) to the hyperplane
    w.x = b within the box (`fab_projections.projection_l2`, its arithmetic untouched)."""
    device = points.device
    t, w = points, w.clone()
    c = (w * t).sum(1) - b
    ind2 = 2 * (c >= 0) - 1
    w.mul_(ind2.unsqueeze(1))
    c.mul_(ind2)
    r = torch.max(t / w, (t - 1) / w).clamp(min=-1e12, max=1e12)
    r.masked_fill_(w.abs() < 1e-8, 1e12)
    r[r == -1e12] *= -1
    rs, indr = torch.sort(r, dim=1)
    rs2 = F.pad(rs[:, 1:], (0, 1))
    rs.masked_fill_(rs == 1e12, 0)
    rs2.masked_fill_(rs2 == 1e12, 0)
    w3s = (w**2).gather(1, indr)
    w5 = w3s.sum(dim=1, keepdim=True)
    ws = w5 - torch.cumsum(w3s, dim=1)
    d = -(r * w)
    d.mul_((w.abs() > 1e-8).float())
    s = torch.cat((-w5 * rs[:, 0:1], torch.cumsum((-rs2 + rs) * ws, dim=1) - w5 * rs[:, 0:1]), 1)
    c4 = s[:, 0] + c < 0
    c3 = (d * w).sum(dim=1) + c > 0
    c2 = ~(c4 | c3)
    lb = torch.zeros(c2.sum(), device=device)
    ub = torch.full_like(lb, w.shape[1] - 1)
    nitermax = math.ceil(math.log2(w.shape[1]))
    s_, c_ = s[c2], c[c2]
    for _ in range(nitermax):  # a bisection for the coordinates the box saturates
        counter4 = torch.floor((lb + ub) / 2)
        counter2 = counter4.long().unsqueeze(1)
        c3 = s_.gather(1, counter2).squeeze(1) + c_ > 0
        lb = torch.where(c3, counter4, lb)
        ub = torch.where(c3, ub, counter4)
    lb = lb.long()
    if c4.any():
        alpha = c[c4] / w5[c4].squeeze(-1)
        d[c4] = -alpha.unsqueeze(-1) * w[c4]
    if c2.any():
        alpha = (s[c2, lb] + c[c2]) / ws[c2, lb] + rs[c2, lb]
        alpha[ws[c2, lb] == 0] = 0
        c5 = (alpha.unsqueeze(-1) > r[c2]).float()
        d[c2] = d[c2] * c5 - alpha.unsqueeze(-1) * w[c2] * (1 - c5)
    return d * (w.abs() > 1e-8).float()


PROJECTIONS = {np.inf: projection_linf, 2: projection_l2}


def fab_step(x1: torch.Tensor, x0: torch.Tensor, df: torch.Tensor, dg: torch.Tensor, settings: FABSettings) -> torch.Tensor:
    """One FAB iteration in the unit box: the nearest linearised boundary (df (n, c): logit
    differences, dg (n, c, ...): their input gradients at x1), the projections of x1 and of the
    clean x0 onto it, and their mix (at most alpha_max of x0's, the more the closer x1 already
    is), each overshot by eta."""
    n, device = len(x1), x1.device
    flat_dg = dg.reshape(dg.shape[0], dg.shape[1], -1)
    dual_norm = flat_dg.abs().sum(dim=-1) if settings.norm == np.inf else (flat_dg**2).sum(dim=-1).sqrt()
    nearest = (df.abs() / (TINY + dual_norm)).min(dim=1)[1]
    rows = torch.arange(n, device=device)
    normal = dg[rows, nearest]
    offset = -df[rows, nearest] + (normal * x1).reshape(n, -1).sum(dim=-1)
    w = normal.reshape([n, -1])
    steps = PROJECTIONS[settings.norm](torch.cat((x1.reshape([n, -1]), x0.reshape([n, -1])), 0), torch.cat((w, w), 0), torch.cat((offset, offset), 0))
    from_x1, from_x0 = steps[:n].reshape(x1.shape), steps[-n:].reshape(x1.shape)
    sizes = per_sample(sample_norms(steps, settings.norm), x1)
    sizes = torch.max(sizes, SMALLEST_STEP * torch.ones(sizes.shape, device=device))
    size1, size0 = sizes[:n], sizes[-n:]
    alpha = torch.min(torch.max(size1 / (size1 + size0), torch.zeros(size1.shape, device=device)), settings.alpha_max * torch.ones(size1.shape, device=device))
    return ((x1 + settings.eta * from_x1) * (1 - alpha) + (x0 + from_x0 * settings.eta) * alpha).clamp(0.0, 1.0)


def pull_back(x1: torch.Tensor, x0: torch.Tensor, beta: float) -> torch.Tensor:
    """The reference's backward step from an adversarial iterate towards the clean input."""
    return x0 + (x1 - x0) * beta


def boundary_gradients(logits: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(df, dg) at `inputs` from the graph of `logits`: the target's logit minus the label's
    and its gradient (one backward), or untargeted every class's (one backward per class;
    the label's own difference set to NO_BOUNDARY), as `FABAttack_PT` computes them."""
    rows = torch.arange(len(inputs), device=inputs.device)
    if targets is not None:
        with torch.enable_grad():
            difference = -(logits[rows, labels] - logits[rows, targets])
            (grad,) = torch.autograd.grad(difference.sum(), inputs)
        return difference.detach().unsqueeze(1), grad.unsqueeze(1)
    classes = logits.shape[-1]
    grads = torch.zeros([classes, *inputs.shape], device=inputs.device)
    mask = torch.zeros_like(logits)
    for column in range(classes):
        mask[:, column] = 1.0
        grads[column] = torch.autograd.grad(logits, inputs, grad_outputs=mask, retain_graph=column < classes - 1)[0]
        mask[:, column] = 0.0
    grads = torch.transpose(grads, 0, 1).detach()
    values = logits.detach()
    df = values - values[rows, labels].unsqueeze(1)
    dg = grads - grads[rows, labels].unsqueeze(1)
    df[rows, labels] = NO_BOUNDARY
    return df, dg


class UnitBox:
    """The target's input box as the reference's [0, 1]: the search's coordinates."""

    def __init__(self, target: Target):
        self.target = target
        self.low, self.high = target.clip_values

    def to_unit(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.low) / (self.high - self.low)

    def forward(self, unit: torch.Tensor, graph: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The model at `unit`: (the leaf to differentiate, where `graph`; the standardised
        input the model saw; its logits)."""
        inputs = unit.detach().clone().requires_grad_(graph)
        with torch.set_grad_enabled(graph):
            seen = self.low + inputs * (self.high - self.low)
            logits = self.target.logits(seen)
        return inputs, seen.detach(), logits

    def gradients(self, unit: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, _, logits = self.forward(unit, graph=True)
        return boundary_gradients(logits, inputs, labels, targets)


def target_classes(clean_logits: torch.Tensor, n_targets: int) -> torch.Tensor:
    """FAB-T's targets (n, runs): column j is the (j + 2)-th largest clean logit's class
    (the reference's `output.sort(dim=-1)[1][:, -target_class]`), one run per wrong class at
    most (as APGD-T: on fewer classes than n_targets + 1 the runs are fewer, and so is what a
    censored sample spends)."""
    runs = min(n_targets, clean_logits.shape[-1] - 1)
    order = clean_logits.detach().sort(dim=-1)[1]
    return torch.stack([order[:, -k] for k in range(2, runs + 2)], dim=1)


def minimal_adversarial(
    target: Target, x: torch.Tensor, y: torch.Tensor, settings: FABSettings, targets: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One FAB run as the reference's `attack_single_run` (no clock, nobody leaves, eps
    unused): n_iter iterations from the clean inputs x (standardised, classified y) towards
    `targets` (one class per sample; None: untargeted). Returns each sample's smallest-norm
    iterate that `target.decide` misclassifies (x where none) and that norm on the
    standardised scale (inf where none): FAB's minimal perturbation."""
    box = UnitBox(target)
    x0 = box.to_unit(x)
    x1, best, best_norm = x0.clone(), x.clone(), torch.full((len(x),), math.inf, device=x.device)
    for _ in range(settings.n_iter):
        df, dg = box.gradients(x1, y, targets)
        x1 = fab_step(x1, x0, df, dg, settings)
        _, seen, logits = box.forward(x1, graph=False)
        adversarial = torch.from_numpy(target.decide(logits) != y.cpu().numpy()).to(x.device)
        norms = sample_norms(x1 - x0, settings.norm) * (box.high - box.low)
        smaller = adversarial & (norms < best_norm)
        best[smaller], best_norm[smaller] = seen[smaller], norms[smaller]
        x1[adversarial] = pull_back(x1[adversarial], x0[adversarial], settings.beta)
    return best, best_norm


# --- the batched search with the failure clock ---


class Batch:
    """FAB on one batch of standing samples (`rows`, indices into the log): their clean
    inputs in the unit box, and the runs' shared bookkeeping."""

    def __init__(self, target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: FABSettings):
        self.target, self.log, self.clock, self.settings = target, log, clock, settings
        self.box = UnitBox(target)
        self.rows = rows
        self.x0 = self.box.to_unit(torch.from_numpy(log.x[rows]).to(target.device))
        self.labels = torch.from_numpy(log.y[rows]).to(target.device)
        self.eps = settings.eps / (self.box.high - self.box.low)  # in the unit box, as the reference's pixel eps
        self.per_gradient = 1  # backward passes of one gradient: one targeted, one per class untargeted

    def attack(self) -> None:
        """Every run in turn, each on the samples the previous ones left standing; the first
        run's clean forward also gives the targets."""
        s = self.settings
        inputs, _, logits = self.box.forward(self.x0, graph=True)
        targets = target_classes(logits, s.n_targets) if s.n_targets else None
        self.per_gradient = 1 if s.n_targets else logits.shape[-1]
        start = boundary_gradients(logits, inputs, self.labels, None if targets is None else targets[:, 0])
        self._charge(self.rows, queries=1, gradients=self.per_gradient)
        self.clock.lap(self.rows, STEPS, reference=False)
        for run in range(s.runs):
            members = np.flatnonzero(~self.log.event[self.rows])
            if not len(members):
                break
            run_targets = None if targets is None else targets[members, run]
            if run:
                start = self._gradients(self.rows[members], self.x0[self._index(members)], self.labels[self._index(members)], run_targets)
            self._search(members, run_targets, start)
        robust = self.rows[~self.log.event[self.rows]]
        self.log.x_adv[robust] = self.log.x[robust]

    def _index(self, mask_or_positions: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(mask_or_positions).to(self.x0.device)

    def _charge(self, rows: np.ndarray, queries: int = 0, gradients: int = 0) -> None:
        self.clock.count(rows, queries=queries, gradients=gradients, group=STEPS)

    def _gradients(self, rows: np.ndarray, x1: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The next iteration's (df, dg) at x1: a forward and its backward of `rows`."""
        gradients = self.box.gradients(x1, labels, targets)
        self._charge(rows, queries=1, gradients=self.per_gradient)
        self.clock.lap(rows, STEPS, reference=False)
        return gradients

    def _search(self, members: np.ndarray, targets: torch.Tensor | None, start: tuple[torch.Tensor, torch.Tensor]) -> None:
        """One run's n_iter iterations on the samples `members` (positions in the batch), each
        leaving at its first iterate misclassified within eps."""
        s, index = self.settings, self._index(members)
        x0, labels, rows = self.x0[index], self.labels[index], self.rows[members]
        x1, (df, dg) = x0.clone(), start
        for iteration in range(s.n_iter):
            x1 = fab_step(x1, x0, df, dg, s)
            adversarial, broken = self._check(rows, x1, x0)
            if iteration == s.n_iter - 1 or broken.all():
                return
            pulled, keep = self._index(adversarial), self._index(~broken)
            x1[pulled] = pull_back(x1[pulled], x0[pulled], s.beta)
            x1, x0, labels, rows = x1[keep], x0[keep], labels[keep], rows[~broken]
            targets = None if targets is None else targets[keep]
            df, dg = self._gradients(rows, x1, labels, targets)

    def _check(self, rows: np.ndarray, x1: torch.Tensor, x0: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """One forward at the iterates: which are adversarial (`target.decide`), and which of
        those within eps (broken: an event, and the log's example)."""
        _, seen, logits = self.box.forward(x1, graph=False)
        self._charge(rows, queries=1)
        decisions = self.target.decide(logits)
        adversarial = decisions != self.log.y[rows]
        broken = adversarial & (sample_norms(x1 - x0, self.settings.norm) <= self.eps).cpu().numpy()
        if broken.any():
            self.log.observe(rows[broken], decisions[broken], self.clock.queries[rows[broken]])
            self.log.x_adv[rows[broken]] = seen[self._index(broken)].cpu().numpy()
        self.clock.lap(rows, STEPS, reference=False)
        return adversarial, broken


class SideBySide(Batch):
    """FAB-T's runs on one batch side by side: every (sample, target) pair searches at once,
    one row each. FAB-T draws nothing at random and its rows are independent, so each pair
    takes the path its run takes in the authors' order. That order decides the outcome and
    the clock: a sample is broken by its first run (in target order) that breaks it, at that
    run's iteration, and is charged what the order spends on it, every earlier run's whole
    budget and that run's passes up to its break (a censored sample: `budget_of`). A pair
    stops at its break or once an earlier run of its sample has broken it; the passes of the
    pairs the order never runs (later runs of a sample an earlier one breaks) are nobody's.
    Its laps share their time among the samples whose pairs they served; the clock counts a
    sample's charge when the batch is done."""

    def attack(self) -> None:
        s, n = self.settings, len(self.rows)
        with torch.no_grad():
            _, _, clean = self.box.forward(self.x0, graph=False)  # the targets: the order's first start gives them
        by_run = target_classes(clean, s.n_targets)
        runs = by_run.shape[1]
        pair_sample = torch.arange(n, device=self.x0.device).repeat_interleave(runs)
        pair_run = torch.arange(runs, device=self.x0.device).repeat(n)
        targets = by_run[pair_sample, pair_run]
        self.pairs = PairLedger(n, runs)
        x0, labels = self.x0[pair_sample], self.labels[pair_sample]
        df, dg = self._pass_gradients(pair_sample, pair_run, x0, labels, targets)
        x1 = x0.clone()
        for iteration in range(s.n_iter):
            x1 = fab_step(x1, x0, df, dg, s)
            adversarial = self._pass_check(pair_sample, pair_run, x1, x0, labels, iteration)
            keep = self.pairs.still_needed(pair_sample.cpu().numpy(), pair_run.cpu().numpy())
            if iteration == s.n_iter - 1 or not keep.any():
                break
            pulled, kept = torch.from_numpy(adversarial).to(x1.device), torch.from_numpy(keep).to(x1.device)
            x1[pulled] = pull_back(x1[pulled], x0[pulled], s.beta)
            x1, x0, labels, targets, pair_sample, pair_run = (t[kept] for t in (x1, x0, labels, targets, pair_sample, pair_run))
            df, dg = self._pass_gradients(pair_sample, pair_run, x1, labels, targets)
        self._settle()

    def _pass_gradients(self, pair_sample, pair_run, x1, labels, targets):
        gradients = self.box.gradients(x1, labels, targets)
        self.pairs.spend(pair_sample.cpu().numpy(), pair_run.cpu().numpy(), queries=1, gradients=1)
        self.clock.lap(self.rows[np.unique(pair_sample.cpu().numpy())], STEPS, reference=False)
        return gradients

    def _pass_check(self, pair_sample, pair_run, x1, x0, labels, iteration) -> np.ndarray:
        """A forward at every pair's iterate: which are adversarial; those within eps break
        their pair here (its point and decision kept)."""
        _, seen, logits = self.box.forward(x1, graph=False)
        samples, runs = pair_sample.cpu().numpy(), pair_run.cpu().numpy()
        self.pairs.spend(samples, runs, queries=1)
        decisions = self.target.decide(logits)
        adversarial = decisions != labels.cpu().numpy()
        broken = adversarial & (sample_norms(x1 - x0, self.settings.norm) <= self.eps).cpu().numpy()
        self.pairs.breaks(samples[broken], runs[broken], seen[torch.from_numpy(broken).to(seen.device)].cpu().numpy(), decisions[broken])
        self.clock.lap(self.rows[np.unique(samples)], STEPS, reference=False)
        return adversarial

    def _settle(self) -> None:
        """Charge each sample what the authors' order spends on it, then record its event."""
        self.pairs.settle(self.log, self.clock, self.rows)
        robust = self.rows[~self.log.event[self.rows]]
        self.log.x_adv[robust] = self.log.x[robust]


def fab(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: FABSettings, batch_size: int) -> None:
    """FAB (FAB-T with n_targets > 0, its runs side by side) on the samples `rows`, batch by
    batch; a row already broken is left out (its clock has stopped)."""
    rows = rows[~log.event[rows]]
    search = SideBySide if settings.n_targets > 0 else Batch
    for positions in batches(len(rows), batch_size):
        search(target, log, clock, rows[positions], settings).attack()
