"""Square Attack (Andriushchenko et al. 2020), AutoAttack's black-box component, batched on the
torch engine with early exit and the per-sample failure clock.

The arithmetic is the authors' (`pyautoattack`'s `SquareAttack.attack_single_run` and `perturb`)
as AutoAttack's standard version runs it: untargeted, the margin loss, one restart, p_init 0.8
and `resc_schedule` off (the square's size follows the raw iteration). Linf: vertical stripes of
+-eps to start, then each iteration one random square window, its sign per channel, on the best
point so far. L2: the meta-pseudo-Gaussian tiles to start, then each iteration a window's mass
moved to another window. The random draws keep the reference's order and shapes (one CPU
generator per batch, seeded as its `perturb` seeds torch), so on the same model, inputs and seed
the search takes the reference's path.

Which draws a sample sees depends on its batch, as in the reference: the Linf stripes and the L2
tiles' signs are drawn for the whole batch (a sample gets its position's), and the L2 window
signs each iteration for the samples still searching (so a sample leaving shifts the others'
draws). The windows and the Linf window signs are shared by the whole batch.

Stopping and the log. The search, its best point and its stopping follow the reference's margin
(true logit minus the best other; a sample searches while its best margin is > 0). Every query
is also checked with `target.decide` (the defended decision): a sample it finds misclassified
is an event at that query (its failure step: its queries so far), its `log.x_adv` row is that
query's point, and it leaves the search at once. For an undefended model the two criteria agree
except on an exact tie of the true logit with another (margin 0, argmax picks the lower class):
the reference then stops without a misclassification, and so do we (no event). A sample that
leaves with margin <= 0 but a correct decision (a defended model), or never leaves, is censored:
its `log.x_adv` row is its best (lowest-margin) point and `log.y_pred_adv` the decision there.

Counting (`trashfire.core.clocks.LapClock`, group STEPS): each query is one forward pass of the
samples it served, no gradient; the initial point is one query, then one per iteration; a lap
for each run of queries that serve the same samples (a new one when a sample leaves). A sample never broken spends `budget_of(settings)` = 1 + n_queries. The reference's closing
forward pass on its returned points (to decide which it broke) is not run: the loop's own checks
decided it. The laps are never reference laps: a forward alone is not the unit of work (a
forward and a backward of a whole batch) whose median prices the STEPS group.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.norms import TINY, normalised, per_sample, sample_norms
from trashfire.attacks.target import Target
from trashfire.core.clocks import STEPS, LapClock

# p_selection's schedule: above each iteration threshold, p_init is divided by the factor
P_SCHEDULE = ((8000, 512), (6000, 256), (4000, 128), (2000, 64), (1000, 32), (500, 16), (200, 8), (50, 4), (10, 2))
L2_TILES = 5  # the L2 start tiles the image with squares of a fifth of its height


@dataclass(frozen=True)
class SquareSettings:
    """One Square Attack run; AutoAttack's standard values by default. `eps` is on the
    standardised scale the model sees."""

    norm: float
    eps: float
    n_queries: int = 5000
    p_init: float = 0.8

    def __post_init__(self) -> None:
        if self.norm not in (np.inf, 2):
            raise ValueError(f"Square Attack's norm: got {self.norm!r}; only inf and 2 are ported (AutoAttack's L1 version is not)")
        if self.n_queries < 0 or not 0 < self.p_init <= 1:
            raise ValueError(f"Square Attack: n_queries {self.n_queries} must be >= 0 and p_init {self.p_init} in (0, 1]")


def budget_of(settings: SquareSettings) -> int:
    """The queries of a sample the search never breaks: the initial point and one per iteration."""
    return 1 + settings.n_queries


def p_selection(iteration: int, p_init: float) -> float:
    """The fraction of the image the square covers at `iteration` (0-based): p_init, halved
    and halved again as the search goes (the reference's schedule without rescaling)."""
    for threshold, factor in P_SCHEDULE:
        if iteration > threshold:
            return p_init / factor
    return p_init


def random_choice(shape: list[int], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Signs +-1 (0 where the draw is exactly 0.5), drawn as the reference draws them."""
    return torch.sign(2 * torch.rand(shape, generator=generator).to(device) - 1)


def random_int(high: int, generator: torch.Generator) -> int:
    """An integer in [0, high), drawn as the reference's random_int(0, high)."""
    return int((0 + (high - 0) * torch.rand([1], generator=generator)).long())


@functools.cache
def _eta_rectangles(rows: int, cols: int) -> torch.Tensor:
    """The reference's nested rectangles: weight 1/k^2 on the k-th ring round the centre,
    unit L2 norm (float32, in the reference's order of operations)."""
    delta = torch.zeros([rows, cols])
    top, left = rows // 2, cols // 2
    for ring in range(max(rows // 2 + 1, cols // 2 + 1)):
        side = 2 * ring + 1
        delta[max(top, 0) : min(top + side, rows), max(0, left) : min(left + side, cols)] += 1.0 / (torch.tensor([[ring + 1.0]]) ** 2)
        top, left = top - 1, left - 1
    return delta / (delta**2).sum(dim=(0, 1), keepdim=True).sqrt()


@functools.cache
def _eta_profile(size: int) -> torch.Tensor:
    """The L2 square's profile before its random orientation: rectangles of opposite signs in
    its upper and lower halves, unit L2 norm."""
    delta = torch.zeros([size, size])
    delta[: size // 2] = _eta_rectangles(size // 2, size)
    delta[size // 2 :] = -1.0 * _eta_rectangles(size - size // 2, size)
    return delta / (delta**2).sum(dim=(0, 1), keepdim=True).sqrt()


def eta(size: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """The reference's `eta`: the profile, transposed on a draw > 0.5 (one draw)."""
    delta = _eta_profile(size)
    if torch.rand([1], generator=generator) > 0.5:
        delta = delta.permute([1, 0])
    return delta.to(device)


def margin_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """True logit minus the best other, in the logits' precision (the reference's margin and,
    for the margin loss, its loss)."""
    rows = torch.arange(len(labels), device=logits.device)
    others = logits.clone()
    others[rows, labels] = -float("inf")
    return logits[rows, labels] - others.max(dim=-1)[0]


class Search:
    """The Square search on one batch: the reference's per-sample state over the whole batch
    (positions 0..n-1), of which the samples whose best margin is still > 0 and which no
    check has broken search on."""

    def __init__(self, target: Target, log: FailureLog, clock: LapClock, settings: SquareSettings, rows: np.ndarray, generator: torch.Generator):
        self.target, self.log, self.clock, self.settings, self.rows = target, log, clock, settings, rows
        self.generator, self.device = generator, target.device
        self.low, self.high = target.clip_values
        self.x = torch.from_numpy(log.x[rows]).to(self.device)
        self.labels = torch.from_numpy(log.y[rows]).to(self.device)
        self.channels, self.height, self.width = self.x.shape[1:]
        self.n_features = self.channels * self.height * self.width

    def query(self, positions: torch.Tensor, points: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """One forward pass of `points` (the samples at `positions`): their margins, decisions
        and the rows it was charged to (those unbroken before it: the lap's sharers); a wrong
        decision breaks its sample here, at this query's point."""
        rows = self.rows[positions.cpu().numpy()]
        running = ~self.log.event[rows]
        self.clock.count(rows[running], queries=1, group=STEPS)
        self.clock.uncharged(int((~running).sum()), queries=1)
        with torch.no_grad():
            logits = self.target.logits(points)
        decisions = self.target.decide(logits)
        broken = np.zeros(len(rows), dtype=bool)
        broken[running] = self.log.observe(rows[running], decisions[running], self.clock.queries[rows[running]])
        self.log.x_adv[rows[broken]] = points[torch.from_numpy(broken).to(self.device)].cpu().numpy()
        return margin_of(logits, self.labels[positions]), decisions, rows[running]

    def searching(self) -> torch.Tensor:
        """Positions still searching: best margin > 0 (the reference's) and not broken."""
        unbroken = torch.from_numpy(~self.log.event[self.rows]).to(self.device)
        return ((self.margin_min > 0.0) & unbroken).nonzero().squeeze(1)

    def run(self) -> None:
        """The reference's attack_single_run: the initial point, then up to n_queries
        iterations on the samples still searching, each keeping its proposal where the margin
        fell; the censored samples get their best point."""
        everyone = torch.arange(len(self.rows), device=self.device)
        self.x_best = self.start_linf() if self.settings.norm == np.inf else self.start_l2()
        self.margin_min, decisions, charged = self.query(everyone, self.x_best)
        self.best_decision = decisions.copy()
        self.clock.lap(charged, STEPS, reference=False)
        positions = self.searching()
        for iteration in range(self.settings.n_queries):
            if not len(positions):
                break
            propose = self.propose_linf if self.settings.norm == np.inf else self.propose_l2
            x_new = propose(positions, iteration)
            margin, decisions, charged = self.query(positions, x_new)
            self.keep_improved(positions, x_new, margin, decisions)
            following = self.searching()
            # one lap for a run of queries that serve the same samples: its time shared among
            # them is the sum of the queries' shares, and a lap reads the process clock, whose
            # call costs as much as a small model's forward pass
            if iteration == self.settings.n_queries - 1 or not torch.equal(following, positions):
                self.clock.lap(charged, STEPS, reference=False)
            positions = following
        censored = ~self.log.event[self.rows]
        self.log.x_adv[self.rows[censored]] = self.x_best[torch.from_numpy(censored).to(self.device)].cpu().numpy()
        self.log.y_pred_adv[self.rows[censored]] = self.best_decision[censored]

    def keep_improved(self, positions: torch.Tensor, x_new: torch.Tensor, margin: torch.Tensor, decisions: np.ndarray) -> None:
        """The reference's update: a proposal whose margin is below the best replaces the best
        point (a misclassified one, margin <= 0 < best, always does). With the margin loss the
        reference's loss_min is margin_min, so one is kept."""
        improved = margin < self.margin_min[positions]
        self.margin_min[positions] = torch.where(improved, margin, self.margin_min[positions])
        self.x_best[positions] = torch.where(improved.view(-1, 1, 1, 1), x_new, self.x_best[positions])
        chosen = improved.cpu().numpy()
        self.best_decision[positions.cpu().numpy()[chosen]] = decisions[chosen]

    def start_linf(self) -> torch.Tensor:
        """Vertical stripes of +-eps, one sign per column and channel of each sample."""
        signs = random_choice([len(self.x), self.channels, 1, self.width], self.generator, self.device)
        return torch.clamp(self.x + self.settings.eps * signs, self.low, self.high)

    def square_side(self, iteration: int, smallest: int) -> int:
        p = p_selection(iteration, self.settings.p_init)
        return max(int(round(math.sqrt(p * self.n_features / self.channels))), smallest)

    def propose_linf(self, positions: torch.Tensor, iteration: int) -> torch.Tensor:
        """The best point with one square window set to +-eps from the clean image (one sign
        per channel, the same window and signs for the whole batch), projected."""
        eps, x_curr = self.settings.eps, self.x[positions]
        s = min(self.square_side(iteration, 1), min(self.height, self.width))
        top, left = random_int(self.height - s, self.generator), random_int(self.width - s, self.generator)
        new_deltas = torch.zeros([self.channels, self.height, self.width], device=self.device)
        new_deltas[:, top : top + s, left : left + s] = 2.0 * eps * random_choice([self.channels, 1, 1], self.generator, self.device)
        x_new = torch.min(torch.max(self.x_best[positions] + new_deltas, x_curr - eps), x_curr + eps)
        return torch.clamp(x_new, self.low, self.high)

    def start_l2(self) -> torch.Tensor:
        """Tiles of the eta profile (a fifth of the height each, from an offset that centres
        them), each with a random sign per sample and channel, scaled to norm eps."""
        if self.height < L2_TILES:
            raise ValueError(f"Square Attack L2 tiles the image in squares of a fifth of its height: images of height {self.height} are too small")
        delta_init = torch.zeros_like(self.x)
        s = self.height // L2_TILES
        offset = (self.height - s * L2_TILES) // 2
        top = offset
        for _ in range(self.height // s):  # as the reference: tiles past the edge still draw
            left = offset
            for _ in range(self.width // s):
                profile = eta(s, self.generator, self.device).view(1, 1, s, s)
                delta_init[:, :, top : top + s, left : left + s] += profile * random_choice([len(self.x), self.channels, 1, 1], self.generator, self.device)
                left += s
            top += s
        return torch.clamp(self.x + normalised(delta_init, 2) * self.settings.eps, self.low, self.high)

    def propose_l2(self, positions: torch.Tensor, iteration: int) -> torch.Tensor:
        """The reference's L2 step: the perturbation in a second window is cleared and its
        mass, with the first window's and what the budget has left, goes to the first window
        as the old content plus a fresh eta profile of random sign per sample and channel;
        the result is rescaled to norm eps and clipped."""
        eps, x_curr, x_best_curr = self.settings.eps, self.x[positions], self.x_best[positions]
        delta_curr = x_best_curr - x_curr
        s = self.square_side(iteration, 3)
        s = min(s + 1 if s % 2 == 0 else s, min(self.height, self.width))
        top, left = random_int(self.height - s, self.generator), random_int(self.width - s, self.generator)
        window = (slice(None), slice(None), slice(top, top + s), slice(left, left + s))
        norms_window_1 = (delta_curr[window] ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()
        top2, left2 = random_int(self.height - s, self.generator), random_int(self.width - s, self.generator)
        window_2 = (slice(None), slice(None), slice(top2, top2 + s), slice(left2, left2 + s))
        mask_image = torch.zeros_like(x_curr)
        mask_image[window] = 1.0
        mask_image[window_2] = 1.0
        norms_image = per_sample(sample_norms(x_best_curr - x_curr, 2), x_curr)
        norms_windows = ((delta_curr * mask_image) ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()
        new_deltas = torch.ones([len(positions), self.channels, s, s], device=self.device)
        new_deltas *= eta(s, self.generator, self.device).view(1, 1, s, s) * random_choice([len(positions), self.channels, 1, 1], self.generator, self.device)
        new_deltas += delta_curr[window] / (TINY + norms_window_1)
        room = torch.max((eps * torch.ones_like(new_deltas)) ** 2 - norms_image**2, torch.zeros_like(new_deltas)) / self.channels + norms_windows**2
        new_deltas = new_deltas / (TINY + (new_deltas**2).sum(dim=(-2, -1), keepdim=True).sqrt()) * room.sqrt()
        delta_curr[window_2] = 0.0
        delta_curr[window] = new_deltas + 0
        return torch.clamp(x_curr + normalised(delta_curr, 2) * eps, self.low, self.high)


def square(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: SquareSettings, batch_size: int, seed: int) -> None:
    """Square Attack on the samples `rows` (all standing), batch by batch, each batch's draws
    from a generator seeded with `seed`, as the reference's `perturb` seeds torch."""
    for positions in batches(len(rows), batch_size):
        generator = torch.Generator().manual_seed(int(seed))
        Search(target, log, clock, settings, rows[positions], generator).run()
