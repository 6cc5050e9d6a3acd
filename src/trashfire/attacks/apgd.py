"""APGD (Croce & Hein 2020), AutoAttack's gradient components, batched on the torch engine
with early exit and the per-sample failure clock.

The arithmetic is the authors' (`pyautoattack`'s `APGDAttack.attack_single_run` and
`APGDAttack_targeted.perturb`): the random start, the first step of 2 eps, momentum 0.75, the
checkpoints at which a sample whose loss oscillated or stalled halves its step and restarts
from its best point, the CE, DLR and targeted DLR losses, EOT's mean gradient. Every quantity
of that loop is per sample, so a sample may leave the batch the moment a check finds it
misclassified without changing any other sample's path: the random draws keep the
reference's shapes and order (one generator per batch, seeded as its `perturb` seeds torch),
and on the same model, inputs and seed the broken samples are the reference's.

Counting (`trashfire.core.clocks.LapClock`, group STEPS): each pass of a sample through the
model is a query and its backward an input gradient: `eot_iter` of each at the random start
and at every iteration; APGD-T adds one query per batch for the targets (the clean logits).
With `eot_iter` > 1, where the first gradient's passes all give the same logits (a
deterministic model, or Gauss-out, whose noise falls on the probabilities after them), every
later gradient takes one pass, which is EOT's mean gradient exactly (`Run.keep_draws`).
A never-broken sample spends `budget_of(settings)` queries at most; a sample is checked at every pass
that computes its loss (the last EOT draw decides, as the reference's `acc`), and breaks at
the first check that finds it misclassified (`target.decide`, the defended decision).

APGD-T's target runs go side by side where the order's random starts can be known in advance
(`SideBySide`: Linf, one pass per gradient, a target that draws nothing), each sample's
outcome, example and charge those of the runs one after another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from trashfire.attacks.failure_log import FailureLog, PairLedger, batches
from trashfire.attacks.norms import TINY, normalised, per_sample, sample_norms
from trashfire.attacks.target import Target
from trashfire.core.clocks import STEPS, LapClock

LOSSES = ("ce", "dlr", "dlr-targeted")
DLR_CLASSES = {"dlr": 3, "dlr-targeted": 4}  # the logits each ratio's denominator needs
SIDE_BY_SIDE_FLOATS = 2**22  # APGD-T's pairs side by side at most on the CPU: rows x input features (16 MB a state tensor)
SIDE_BY_SIDE_BATCHES = 10  # and rows, in batch sizes (the 9 targets of a whole batch)


@dataclass(frozen=True)
class APGDSettings:
    """One APGD run: `loss` ce or dlr (untargeted) or dlr-targeted (APGD-T: the `n_targets`
    most likely wrong classes in turn); AutoAttack's standard values by default."""

    norm: float
    eps: float
    n_iter: int = 100
    loss: str = "ce"
    n_targets: int = 0
    rho: float = 0.75
    eot_iter: int = 1
    alpha: float = 2.0  # the first step, in eps

    def __post_init__(self) -> None:
        if self.norm not in (np.inf, 2):
            raise ValueError(f"APGD's norm: got {self.norm!r}; the batched APGD runs inf and 2 (AutoAttack's L1 version is not ported)")
        if self.loss not in LOSSES:
            raise ValueError(f"APGD's loss: got {self.loss!r}; allowed: {', '.join(LOSSES)}")
        if (self.loss == "dlr-targeted") != (self.n_targets > 0):
            raise ValueError(f"APGD: loss {self.loss!r} with n_targets {self.n_targets}: the targeted DLR loss needs n_targets > 0, the others 0")
        if self.n_iter < 1 or self.eot_iter < 1:
            raise ValueError(f"APGD: n_iter {self.n_iter} and eot_iter {self.eot_iter} must be >= 1")

    @property
    def first_check(self) -> int:
        """Iterations before the first checkpoint (22% of them), and the checkpoints'
        shrinking interval: by 3% of the iterations each time, down to 6%."""
        return max(int(0.22 * self.n_iter), 1)

    @property
    def shortest_interval(self) -> int:
        return max(int(0.06 * self.n_iter), 1)

    @property
    def interval_decrease(self) -> int:
        return max(int(0.03 * self.n_iter), 1)


def budget_of(settings: APGDSettings) -> int:
    """The queries of a sample no run breaks: each target's run (one untargeted) spends
    eot_iter passes at the start and at each iteration; APGD-T's targets cost one query.
    (On fewer classes than n_targets + 1, APGD-T runs one target per wrong class.)"""
    runs = max(settings.n_targets, 1)
    return runs * settings.eot_iter * (settings.n_iter + 1) + (1 if settings.n_targets else 0)


def checkpoints(settings: APGDSettings) -> list[int]:
    """The iterations (0-based) after which the step-size check runs: first after
    `first_check` iterations, then at intervals shrinking by `interval_decrease` to
    `shortest_interval` (the reference's counter3 and k)."""
    found, interval, last = [], settings.first_check, -1
    while last + interval < settings.n_iter:
        last += interval
        found.append(last)
        interval = max(interval - settings.interval_decrease, settings.shortest_interval)
    return found


def dlr_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The difference of logits ratio: -(z_y - max_{i!=y} z_i) / (z_1 - z_3)."""
    ranked, order = logits.sort(dim=1)
    top_is_label = (order[:, -1] == labels).float()
    rows = torch.arange(len(logits), device=logits.device)
    best_other = ranked[:, -2] * top_is_label + ranked[:, -1] * (1.0 - top_is_label)
    return -(logits[rows, labels] - best_other) / (ranked[:, -1] - ranked[:, -3] + TINY)


def targeted_dlr_loss(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The targeted DLR: -(z_y - z_t) / (z_1 - (z_3 + z_4) / 2)."""
    ranked = logits.sort(dim=1)[0]
    rows = torch.arange(len(logits), device=logits.device)
    return -(logits[rows, labels] - logits[rows, targets]) / (ranked[:, -1] - 0.5 * (ranked[:, -3] + ranked[:, -4]) + TINY)


def sample_losses(settings: APGDSettings, logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
    if settings.loss == "ce":
        return F.cross_entropy(logits, labels, reduction="none")
    if settings.loss == "dlr":
        return dlr_loss(logits, labels)
    return targeted_dlr_loss(logits, labels, targets)


def random_start(x: torch.Tensor, eps: float, norm: float, generator: torch.Generator) -> torch.Tensor:
    """A point on the eps-sphere around x, drawn as the reference draws it (on the CPU)."""
    if norm == np.inf:
        direction = 2 * torch.rand(x.shape, generator=generator) - 1
    else:
        direction = torch.randn(x.shape, generator=generator)
    return x + eps * normalised(direction.to(x.device), norm)


def oscillated(losses: torch.Tensor, iteration: int, interval: int, rho: float) -> torch.Tensor:
    """1 where a sample's loss rose in at most rho of the last `interval` iterations. Negative
    indices wrap round as in the reference: at the first checkpoint the oldest comparison is
    with the table's last, still empty row."""
    rises = torch.zeros(losses.shape[1], device=losses.device)
    for back in range(interval):
        rises += (losses[iteration - back] > losses[iteration - back - 1]).float()
    return (rises <= interval * rho * torch.ones_like(rises)).float()


class Run:
    """One APGD run on one batch: the per-sample state of the reference's loop, and the
    samples still in it (`rows`, indices into the log)."""

    def __init__(self, target: Target, log: FailureLog, clock: LapClock, settings: APGDSettings, rows: np.ndarray, batch_size: int):
        self.target, self.log, self.clock, self.settings = target, log, clock, settings
        self.rows, self.whole = rows, len(rows) == batch_size  # a reference lap: every row of a full batch still in it
        self.size = len(rows)
        device = target.device
        self.x = torch.from_numpy(log.x[rows]).to(device)
        self.labels = torch.from_numpy(log.y[rows]).to(device)
        self.targets: torch.Tensor | None = None
        self.low, self.high = target.clip_values
        self.eot, self.eot_checked = settings.eot_iter, settings.eot_iter == 1

    def keep_draws(self, draws: list[torch.Tensor]) -> None:
        """After the first gradient's eot_iter passes: where all of them gave the same logits,
        the model and its preprocessing draw nothing (Gauss-out draws after the logits, on the
        probabilities), every pass has the same gradient, and one pass per gradient is their
        mean (up to the rounding of a sum of equal terms); each iteration still draws one
        defended decision. A defence that draws at random in 20 passes of the whole batch
        and never changes a logit is not one EOT could see."""
        self.eot_checked = True
        if all(torch.equal(draw, draws[0]) for draw in draws[1:]):
            self.eot = 1

    def project(self, x_new: torch.Tensor) -> torch.Tensor:
        """Onto the eps-ball around x and into the input box (the reference's order)."""
        eps = self.settings.eps
        if self.settings.norm == np.inf:
            return torch.clamp(torch.min(torch.max(x_new, self.x - eps), self.x + eps), self.low, self.high)
        delta = x_new - self.x
        size = sample_norms(delta, 2)
        return torch.clamp(self.x + normalised(delta, 2) * torch.min(eps * torch.ones_like(self.x), per_sample(size, delta)), self.low, self.high)

    def gradient(self, x_adv: torch.Tensor, unit: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """The loss and its mean gradient over the EOT passes at x_adv (`keep_draws`), each
        pass counted; the last pass's decision checks every sample. Returns (losses, gradient,
        broken)."""
        eot = self.eot
        grad, draws = torch.zeros_like(self.x), []
        for _ in range(eot):
            inputs = x_adv.clone().requires_grad_(True)
            with torch.enable_grad():
                logits = self.logits_of(inputs)
                losses = sample_losses(self.settings, logits, self.labels, self.targets)
                grad += torch.autograd.grad(losses.sum(), inputs)[0].detach()
            if not self.eot_checked:
                draws.append(logits.detach())
        if not self.eot_checked:
            self.keep_draws(draws)
        broken = self.record(x_adv, self.target.decide(logits), eot, unit)
        return losses.detach(), grad / float(eot), broken

    def logits_of(self, inputs: torch.Tensor) -> torch.Tensor:
        """The target's logits; where one row is left of a run that began with more, the pass
        is of two (the row twice, the gradient through the first): the authors' run keeps every
        row to its end, and on the CPU a pass of one row differs from a batch's in the last bits."""
        if len(inputs) == 1 and self.size > 1:
            return self.target.logits(torch.cat([inputs, inputs.detach()]))[:1]
        return self.target.logits(inputs)

    def record(self, x_adv: torch.Tensor, decisions: np.ndarray, passes: int, unit: int) -> np.ndarray:
        """The clock and the log after a gradient of `passes` passes: each sample charged, and
        broken where the last pass's decision is wrong (its point kept)."""
        self.clock.count(self.rows, queries=passes, gradients=passes, group=STEPS)
        broken = self.log.observe(self.rows, decisions, self.clock.queries[self.rows])
        self.log.x_adv[self.rows[broken]] = x_adv[torch.from_numpy(broken).to(x_adv.device)].detach().cpu().numpy()
        self.clock.lap(self.rows, STEPS, reference=self.whole and len(self.rows) == self.size, unit=unit)
        return broken

    def attack(self, generator: torch.Generator) -> None:
        """The reference's attack_single_run, leaving out each sample at its first failure."""
        s = self.settings
        x_adv = torch.clamp(random_start(self.x, s.eps, s.norm, generator), self.low, self.high)
        losses, grad, broken = self.gradient(x_adv, self.clock.new_unit())
        state = {
            "x": self.x,
            "labels": self.labels,
            "x_adv": x_adv,
            "x_old": x_adv.clone(),
            "x_best": x_adv.clone(),
            "grad": grad,
            "grad_best": grad.clone(),
            "loss_best": losses.clone(),
            "last_best": losses.clone(),
            "reduced": torch.ones_like(losses),
            "step": s.alpha * s.eps * torch.ones([len(self.x), *([1] * (self.x.dim() - 1))], device=self.x.device),
            "history": torch.zeros([s.n_iter, len(self.x)], device=self.x.device),
        }
        if self.targets is not None:
            state["targets"] = self.targets
        self.state = state  # the samples still in the run, as the run leaves them
        self.keep(state, ~broken)
        since, interval = 0, s.first_check
        for i in range(s.n_iter):
            if not len(self.rows):
                return
            x_adv = self.step(state, i)
            losses, grad, broken = self.gradient(x_adv, self.clock.new_unit())
            state["x_adv"], state["grad"] = x_adv, grad
            state["history"][i] = losses
            improved = losses > state["loss_best"]
            state["x_best"][improved] = x_adv[improved].clone()
            state["grad_best"][improved] = grad[improved].clone()
            state["loss_best"][improved] = losses[improved]
            since += 1
            if since == interval:
                self.halve_steps(state, i, interval)
                interval, since = max(interval - s.interval_decrease, s.shortest_interval), 0
            self.keep(state, ~broken)
        self.finish(state)

    def finish(self, state: dict[str, torch.Tensor]) -> None:
        """The samples the run leaves standing: their best point is the log's example."""
        self.log.x_adv[self.rows] = state["x_best"].detach().cpu().numpy()

    def step(self, state: dict[str, torch.Tensor], i: int) -> torch.Tensor:
        """The momentum step: a projected step along the gradient's steepest direction, then
        0.75 of it plus 0.25 of the previous move (the first step: all of it)."""
        x_adv = state["x_adv"].detach()
        previous_move, state["x_old"] = x_adv - state["x_old"], x_adv.clone()
        momentum = 0.75 if i > 0 else 1.0
        direction = torch.sign(state["grad"]) if self.settings.norm == np.inf else normalised(state["grad"], 2)
        stepped = self.project(x_adv + state["step"] * direction)
        return self.project(x_adv + (stepped - x_adv) * momentum + previous_move * (1 - momentum))

    def halve_steps(self, state: dict[str, torch.Tensor], i: int, interval: int) -> None:
        """The checkpoint: a sample whose loss oscillated, or whose step was not halved last
        time and whose best loss has not improved since, halves its step and goes back to
        its best point and gradient."""
        stalled = (1.0 - state["reduced"]) * (state["last_best"] >= state["loss_best"]).float()
        halve = torch.max(oscillated(state["history"], i, interval, self.settings.rho), stalled)
        state["reduced"], state["last_best"] = halve.clone(), state["loss_best"].clone()
        chosen = halve > 0
        state["step"][chosen] /= 2.0
        state["x_adv"][chosen] = state["x_best"][chosen].clone()
        state["grad"][chosen] = state["grad_best"][chosen].clone()

    def keep(self, state: dict[str, torch.Tensor], keep: np.ndarray) -> None:
        """Drop the samples just broken from the batch and from every per-sample state."""
        if keep.all():
            return
        kept = torch.from_numpy(keep).to(self.x.device)
        for name, value in state.items():
            state[name] = value[:, kept] if name == "history" else value[kept]
        self.x, self.labels, self.rows = state["x"], state["labels"], self.rows[keep]
        self.targets = state.get("targets")


class TargetLedger(PairLedger):
    """Per (sample, target run): also its last decision and its best point at the run's end."""

    def __init__(self, n: int, runs: int, shape: tuple[int, ...]):
        super().__init__(n, runs)
        self.last = np.zeros((n, runs), dtype=np.int64)
        self.best = np.zeros((n, runs, *shape), dtype=np.float32)

    def forget(self, first_run: int) -> None:
        super().forget(first_run)
        self.last[:, first_run:] = 0
        self.best[:, first_run:] = 0


class SideBySide:
    """APGD-T's target runs on one batch side by side, one row a (sample, target) pair, on the
    path and with the outcome and charge of the authors' order (runs one after another, each on
    the samples the ones before left standing).

    Each pair's arithmetic is per row, so it only needs the order's random start. Run k draws
    its starts for the n_k samples standing when it begins, from the batch's generator after
    the earlier runs' draws; on the CPU those draws are one stream of uniforms, so n samples
    over runs k..K-1 take, in order, the draws of one call for (K - k) n rows. A wave runs those
    pairs, supposing no sample breaks; the first run j in which one does is the last the wave
    settles (the starts of the runs after it supposed n_j+1 = n): its later runs' pairs stop,
    and the next wave runs them again with the generator moved on by the settled runs' draws.
    Within a wave a pair stops at its break or once an earlier run of its sample has broken it.

    Each sample is then charged what the order spends on it (every earlier run's passes, its
    breaking run's up to its break: `PairLedger.charges`); its example is its break's point or,
    where no run broke it, the last run's best point, as the order leaves the log."""

    def __init__(self, target: Target, log: FailureLog, clock: LapClock, settings: APGDSettings, rows: np.ndarray, batch_size: int):
        self.target, self.log, self.clock, self.settings, self.rows, self.batch_size = target, log, clock, settings, rows, batch_size
        self.shape = log.x.shape[1:]

    def attack(self, generator: torch.Generator, ranked: torch.Tensor) -> None:
        runs = min(self.settings.n_targets, ranked.shape[1] - 1)  # a target per wrong class at most
        self.ledger = TargetLedger(len(self.rows), runs, self.shape)
        first = 0
        while first < runs:
            standing = np.flatnonzero(self.ledger.first_break() >= first)
            if not len(standing):
                break
            before = generator.get_state()
            last = self.wave(standing, first, runs, generator, ranked)
            generator.set_state(before)
            torch.rand(((last + 1 - first) * len(standing), *self.shape), generator=generator)  # the settled runs' draws
            self.ledger.forget(last + 1)
            first = last + 1
        self.settle(runs)

    def wave(self, standing: np.ndarray, first: int, runs: int, generator: torch.Generator, ranked: torch.Tensor) -> int:
        """Runs first..runs-1 of the samples `standing` side by side; returns the last run it
        settles. One sample standing takes its runs one at a time: the authors' passes are then
        of one row, whose arithmetic a batch's does not repeat."""
        runs = first + 1 if len(standing) == 1 else runs
        pair_sample = np.tile(standing, runs - first)
        pair_run = np.repeat(np.arange(first, runs), len(standing))
        run = PairRun(self, pair_sample, pair_run)
        index = torch.from_numpy(pair_sample).to(ranked.device)
        run.targets = ranked[index, torch.from_numpy(ranked.shape[1] - 2 - pair_run).to(ranked.device)]
        run.attack(generator)
        return run.last_run

    def settle(self, runs: int) -> None:
        """Charge each sample what the order spends on it, then record its break or its best point."""
        censored = np.flatnonzero(self.ledger.settle(self.log, self.clock, self.rows) == runs)
        self.log.x_adv[self.rows[censored]] = self.ledger.best[censored, -1]
        self.log.y_pred_adv[self.rows[censored]] = self.ledger.last[censored, -1]


class PairRun(Run):
    """A wave of `SideBySide`: an APGD run whose rows are (sample, target run) pairs, which
    records in the ledger, not the log, and drops the pairs the order would not run."""

    def __init__(self, owner: SideBySide, pair_sample: np.ndarray, pair_run: np.ndarray):
        super().__init__(owner.target, owner.log, owner.clock, owner.settings, owner.rows[pair_sample], owner.batch_size)
        self.owner, self.pair_sample, self.pair_run = owner, pair_sample, pair_run
        self.whole = False  # pairs are not the batch whose passes price the group
        self.last_run = int(pair_run.max())

    def record(self, x_adv: torch.Tensor, decisions: np.ndarray, passes: int, unit: int) -> np.ndarray:
        ledger = self.owner.ledger
        ledger.spend(self.pair_sample, self.pair_run, queries=passes, gradients=passes)
        wrong = decisions != self.log.y[self.rows]
        if wrong.any():
            self.last_run = min(self.last_run, int(self.pair_run[wrong].min()))
        valid = self.pair_run <= self.last_run
        hit = wrong & valid
        if hit.any():
            ledger.breaks(self.pair_sample[hit], self.pair_run[hit], x_adv[torch.from_numpy(hit).to(x_adv.device)].detach().cpu().numpy(), decisions[hit])
        ledger.last[self.pair_sample[valid], self.pair_run[valid]] = decisions[valid]
        self.clock.lap(self.owner.rows[np.unique(self.pair_sample)], STEPS, reference=False, unit=unit)
        return wrong

    def keep(self, state: dict[str, torch.Tensor], keep: np.ndarray) -> None:
        keep = keep & (self.pair_run <= self.last_run) & self.owner.ledger.still_needed(self.pair_sample, self.pair_run)
        super().keep(state, keep)
        self.pair_sample, self.pair_run = self.pair_sample[keep], self.pair_run[keep]

    def finish(self, state: dict[str, torch.Tensor]) -> None:
        self.owner.ledger.best[self.pair_sample, self.pair_run] = state["x_best"].detach().cpu().numpy()


def side_by_side(target: Target, settings: APGDSettings, pairs: int, features: int, batch_size: int) -> bool:
    """Whether APGD-T's runs may go side by side: Linf (its starts are uniforms, one stream
    however split; L2's Gaussians are not), one pass per gradient, a target whose answers
    draw nothing (a drawing defence's draws would fall in another order), and pairs that fit:
    on a GPU, in the batch size (chosen for its memory), on the CPU in SIDE_BY_SIDE_BATCHES
    batches and SIDE_BY_SIDE_FLOATS input floats."""
    fits = (
        pairs <= batch_size if str(target.device).startswith("cuda") else pairs <= SIDE_BY_SIDE_BATCHES * batch_size and pairs * features <= SIDE_BY_SIDE_FLOATS
    )
    return settings.norm == np.inf and settings.eot_iter == 1 and getattr(target, "deterministic", False) and fits


def apgd(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: APGDSettings, batch_size: int, seed: int) -> None:
    """APGD on the samples `rows` (all standing), batch by batch, each batch seeded as the
    reference's `perturb` seeds torch; APGD-T runs target after target, each on the samples
    the previous ones left standing (side by side where it can: `SideBySide`)."""
    check_classes(settings, int(target.classifier.nb_classes))
    features = int(np.prod(log.x.shape[1:]))
    for positions in batches(len(rows), batch_size):
        generator = torch.Generator().manual_seed(int(seed))
        batch = rows[positions]
        if not settings.n_targets:
            Run(target, log, clock, settings, batch, batch_size).attack(generator)
            continue
        ranked = clean_ranking(target, log, clock, batch)
        if side_by_side(target, settings, len(batch) * settings.n_targets, features, batch_size):
            SideBySide(target, log, clock, settings, batch, batch_size).attack(generator, ranked)
            continue
        for k in range(2, min(settings.n_targets, ranked.shape[1] - 1) + 2):  # a target per wrong class at most
            standing = ~log.event[batch]
            if not standing.any():
                break
            run = Run(target, log, clock, settings, batch[standing], batch_size)
            run.targets = ranked[torch.from_numpy(standing).to(ranked.device)][:, -k]
            run.attack(generator)


def check_classes(settings: APGDSettings, classes: int) -> None:
    """The DLR ratios need 3 logits (4 targeted); APGD-T attacks at most every wrong class."""
    needed = DLR_CLASSES.get(settings.loss, 2)
    if classes < needed:
        raise ValueError(f"APGD's {settings.loss} loss needs >= {needed} classes; the model has {classes}")


def clean_ranking(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray) -> torch.Tensor:
    """The classes of each sample ordered by its clean logits, ascending (APGD-T's k-th target
    is column -k, the reference's `output.sort(dim=1)[1][:, -k]`): one query."""
    clock.count(rows, queries=1, group=STEPS)
    with torch.no_grad():
        ranked = target.logits(torch.from_numpy(log.x[rows]).to(target.device)).sort(dim=1)[1]
    clock.lap(rows, STEPS)
    return ranked
