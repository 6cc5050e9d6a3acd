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

Counting (`trashfire.core.clocks.LapClock`, group STEPS): a sample is charged the reference's
queries, no gradient: the initial point is one query, then one per iteration; a lap for each
run of queries that serve the same samples (a new one when a sample leaves). A sample never
broken spends `budget_of(settings)` = 1 + n_queries. The reference's closing forward pass on its
returned points (to decide which it broke) is not run: the loop's own checks decided it. The
laps are never reference laps: a forward alone is not the unit of work (a forward and a
backward of a whole batch) whose median prices the STEPS group.

Passes (Linf on a deterministic target, `Search.run_ahead`): the queries are the reference's,
the forward passes that answer them are fewer. A proposal equal to the sample's best point
(late in the search the square is one pixel, and half the time its sign is the one the pixel
already has: 42% of the queries on ResNet-20 at eps 0.1) is answered from the best point, and
a sample's next proposals are answered together in one pass (the pass's fixed cost, about
half a 40-row pass on 8x8 digits, shared). The charge stays the reference's query count, so a
sample's time to failure measures the attack, not how this loop caches: E[T] does not change
when the loop does.
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
DRAWS_AT_ONCE = 256  # Linf iterations whose draws are taken together (the order is the reference's)
LOOKAHEAD_ROWS = 1024  # rows a look-ahead pass aims at: ResNet-20 at eps 0.1 took 4.8 s at 256, 4.6 s at 512, 4.3 s at 1024
LOOKAHEAD_MAX = 64  # iterations per window at most
LOOKAHEAD_FLOATS = 2**22  # a pass's proposals at most (16 MB in float32: 27 rows of 224x224 RGB)


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
        self.sides = self.tops = self.lefts = torch.zeros(0, dtype=torch.long, device=self.device)
        self.signs = torch.zeros([0, self.channels], device=self.device)
        # `run_ahead`'s queries answered without a pass, and its rows through the model that
        # answered no query (proposals past the one taken; a one-row pass's second row)
        self.cached = self.dropped = 0

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
        self.next_iteration = torch.zeros(len(self.rows), dtype=torch.long, device=self.device)
        if self.runs_ahead():
            self.run_ahead()
        self.run_in_step()
        censored = ~self.log.event[self.rows]
        self.log.x_adv[self.rows[censored]] = self.x_best[torch.from_numpy(censored).to(self.device)].cpu().numpy()
        self.log.y_pred_adv[self.rows[censored]] = self.best_decision[censored]

    def runs_ahead(self) -> bool:
        """Whether the search may look ahead (`run_ahead`): Linf, whose draws do not depend on
        which samples still search, on a target that draws nothing at random (a point's
        answer is then known once asked)."""
        return self.settings.norm == np.inf and getattr(self.target, "deterministic", False)

    def run_in_step(self) -> None:
        """The reference's loop as it runs: every sample still searching takes the next
        iteration's proposal, one forward pass for all of them."""
        positions = self.searching()
        first = int(self.next_iteration[positions].min()) if len(positions) else self.settings.n_queries
        if len(positions) and not bool((self.next_iteration[positions] == first).all()):
            raise RuntimeError("Square: the samples still searching are at different iterations")
        for iteration in range(first, self.settings.n_queries):
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

    def run_ahead(self) -> None:
        """The reference's path, several iterations per forward pass, in windows of iterations
        that every sample still searching goes through (`Window`); when one sample is left,
        `run_in_step` takes over."""
        positions, start = self.searching(), 0
        while len(positions) > 1 and start < self.settings.n_queries:
            end = min(start + self.lookahead(len(positions)), self.settings.n_queries)
            Window(self, positions, start, end).search()
            following = self.searching()
            if not torch.equal(following, positions) or end == self.settings.n_queries:
                self.clock.lap(self.rows[positions.cpu().numpy()], STEPS, reference=False)
            positions, start = following, end

    def lookahead(self, searching: int) -> int:
        """Iterations per window: enough rows per pass that its fixed cost is shared, few
        enough that the proposals dropped after a sample takes one stay few."""
        rows = min(LOOKAHEAD_ROWS, LOOKAHEAD_FLOATS // self.n_features)
        return max(1, min(LOOKAHEAD_MAX, -(-rows // searching)))

    def answer(self, proposals: torch.Tensor, best: torch.Tensor, margin_min: torch.Tensor, decision: np.ndarray, labels: torch.Tensor, valid: torch.Tensor):
        """Margins and decisions of `proposals` (n, ahead, ...): one pass over those that moved
        from their sample's `best` point (at least two rows, as a batch's arithmetic; the
        reference has two samples or more searching here), the others answered from the best
        point. Returns (margin, decisions, moved)."""
        ahead = proposals.shape[1]
        moved = (proposals != best.unsqueeze(1)).flatten(2).any(2) & valid
        margin = margin_min[:, None].repeat(1, ahead)
        decisions = np.repeat(decision[:, None], ahead, axis=1)
        asked = moved.nonzero()
        if len(asked):
            rows = asked if len(asked) > 1 else asked.repeat(2, 1)
            with torch.no_grad():
                logits = self.target.logits(proposals[rows[:, 0], rows[:, 1]])
            margin[rows[:, 0], rows[:, 1]] = margin_of(logits, labels[rows[:, 0]])
            decisions[rows[:, 0].cpu().numpy(), rows[:, 1].cpu().numpy()] = self.target.decide(logits)
            self.dropped += int(len(asked) == 1)
        return margin, decisions, moved

    def proposals_linf(self, x: torch.Tensor, best: torch.Tensor, iterations: torch.Tensor) -> torch.Tensor:
        """`propose_linf`'s proposals for each sample (clean `x`, `best` point) at each of its
        `iterations` (n, ahead): (n, ahead, c, h, w)."""
        self.draw_up_to(int(iterations.max()))
        eps = self.settings.eps
        side, top, left = (table[iterations] for table in (self.sides, self.tops, self.lefts))
        signs = self.signs[iterations]  # (n, ahead, c)
        down, across = torch.arange(self.height, device=self.device), torch.arange(self.width, device=self.device)
        rows_in = (down >= top[..., None]) & (down < (top + side)[..., None])
        cols_in = (across >= left[..., None]) & (across < (left + side)[..., None])
        window = (rows_in[..., :, None] & cols_in[..., None, :]).unsqueeze(2)  # (n, ahead, 1, h, w)
        new_deltas = torch.where(window, (2.0 * eps * signs)[..., None, None], torch.zeros((), device=self.device))
        x_curr = x.unsqueeze(1)
        x_new = torch.min(torch.max(best.unsqueeze(1) + new_deltas, x_curr - eps), x_curr + eps)
        return torch.clamp(x_new, self.low, self.high)

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

    def draw_up_to(self, iteration: int) -> None:
        """The Linf draws of every iteration to `iteration`, in the reference's order (the
        window's top, its left, its signs per channel), as it draws them at each iteration
        whichever samples search."""
        drawn = len(self.sides)
        if iteration < drawn:
            return
        sides, tops, lefts, signs = [], [], [], []
        for later in range(drawn, max(iteration + 1, min(drawn + DRAWS_AT_ONCE, self.settings.n_queries))):
            s = min(self.square_side(later, 1), min(self.height, self.width))
            sides.append(s)
            tops.append(random_int(self.height - s, self.generator))
            lefts.append(random_int(self.width - s, self.generator))
            signs.append(random_choice([self.channels], self.generator, self.device))
        new = [torch.tensor(values, dtype=torch.long, device=self.device) for values in (sides, tops, lefts)]
        self.sides, self.tops, self.lefts = (torch.cat((old, more)) for old, more in zip((self.sides, self.tops, self.lefts), new))
        self.signs = torch.cat((self.signs, torch.stack(signs)))

    def propose_linf(self, positions: torch.Tensor, iteration: int) -> torch.Tensor:
        """The best point with one square window set to +-eps from the clean image (one sign
        per channel, the same window and signs for the whole batch), projected."""
        iterations = torch.full((len(positions), 1), iteration, dtype=torch.long, device=self.device)
        return self.proposals_linf(self.x[positions], self.x_best[positions], iterations)[:, 0]

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


class Window:
    """Iterations [start, end) of a Square search for the samples at `positions` (all there at
    `start`), several per forward pass, on the reference's path.

    A sample's proposals depend only on its best point and each iteration's draws (shared by
    the batch, drawn whoever searches), so its proposals to the window's end are known from
    its best point: one pass answers them, the first that improves its margin (or breaks it)
    is taken, and the proposals after it are asked again from the new best point in the next
    pass, until every sample has reached the end or left. A proposal equal to the best point
    (its square already holds those signs) is answered from it: its margin is the best's, no
    improvement (the comparison is strict), its decision the best's.

    The reference's passes are of the samples searching at an iteration; a pass of two rows or
    more gives a sample the same logits whatever the others (on the CPU, to the bit; on a GPU,
    whose kernels depend on the batch's shape, up to the last bits), a pass of one row does
    not. So when the window's leavers leave one sample searching from iteration j1 on, that
    sample's iterations from j1 are dropped, and it goes on alone (`run_in_step`).
    The clock and the log see the window's outcome at its end: each sample charged its
    iterations, its break at its query."""

    def __init__(self, search: Search, positions: torch.Tensor, start: int, end: int):
        self.owner, self.positions, self.start, self.end = search, positions, start, end
        self.rows = search.rows[positions.cpu().numpy()]
        self.x, self.labels = search.x[positions], search.labels[positions]
        self.best, self.margin_min = search.x_best[positions].clone(), search.margin_min[positions].clone()
        self.decision = search.best_decision[positions.cpu().numpy()].copy()
        self.at = torch.full((len(positions),), start, dtype=torch.long, device=search.device)
        self.left = torch.zeros(len(positions), dtype=torch.bool, device=search.device)
        self.taken: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]] = []
        self.asked: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []  # per pass: who, which iterations, moved, charged

    def search(self) -> None:
        while self.next_pass():
            pass
        self.leave_one_alone()
        self.settle()

    def next_pass(self) -> bool:
        """One pass for the samples not at the end nor gone; False when there are none."""
        active = (~self.left & (self.at < self.end)).nonzero().squeeze(1)
        if not len(active):
            return False
        s = self.owner
        iterations = self.at[active, None] + torch.arange(self.end - int(self.at[active].min()), device=s.device)
        valid = iterations < self.end
        proposals = s.proposals_linf(self.x[active], self.best[active], iterations.clamp(max=self.end - 1))
        margin, decisions, moved = s.answer(
            proposals, self.best[active], self.margin_min[active], self.decision[active.cpu().numpy()], self.labels[active], valid
        )
        wrong = decisions != self.owner.log.y[self.rows[active.cpu().numpy()]][:, None]
        taken = valid & ((margin < self.margin_min[active, None]) | torch.from_numpy(wrong).to(s.device))
        hit, slot = taken.any(1), taken.int().argmax(1)
        spent = torch.where(hit, slot + 1, valid.sum(1))
        charged = torch.arange(iterations.shape[1], device=s.device) < spent[:, None]
        self.asked.append((active, iterations, moved, charged))
        self.at[active] += spent
        if bool(hit.any()):
            self.take(
                active[hit],
                proposals[hit.nonzero().squeeze(1), slot[hit]],
                margin[hit, slot[hit]],
                decisions[hit.cpu().numpy(), slot[hit].cpu().numpy()],
                wrong[hit.cpu().numpy(), slot[hit].cpu().numpy()],
            )
        return True

    def take(self, chosen: torch.Tensor, points: torch.Tensor, margin: torch.Tensor, decisions: np.ndarray, wrong: np.ndarray) -> None:
        """The proposals the samples at `chosen` took: kept where the margin fell (the
        reference's update); a wrong decision, or a best margin <= 0, ends the sample's search."""
        improved = margin < self.margin_min[chosen]
        self.best[chosen] = torch.where(improved.view(-1, 1, 1, 1), points, self.best[chosen])
        self.margin_min[chosen] = torch.where(improved, margin, self.margin_min[chosen])
        self.decision[chosen.cpu().numpy()[improved.cpu().numpy()]] = decisions[improved.cpu().numpy()]
        self.left[chosen] |= torch.from_numpy(wrong).to(chosen.device) | (self.margin_min[chosen] <= 0)
        self.taken.append((chosen, self.at[chosen] - 1, points, margin, decisions, wrong))

    def leave_one_alone(self) -> None:
        """Where the leavers leave one sample searching from iteration j1 < its end, take its
        iterations from j1 back: the reference runs them in passes of one row."""
        leaving = torch.where(self.left, self.at - 1, torch.full_like(self.at, self.end + 1))
        order = leaving.argsort()
        if len(order) < 2 or leaving[order[-2]] > self.end or leaving[order[-2]] == leaving[order[-1]]:
            return
        alone, j1 = int(order[-1]), int(leaving[order[-2]]) + 1
        if int(self.at[alone]) <= j1:
            return
        self.at[alone], self.left[alone] = j1, False
        self.best[alone], self.margin_min[alone] = self.owner.x_best[self.positions[alone]], self.owner.margin_min[self.positions[alone]]
        self.decision[alone] = self.owner.best_decision[int(self.positions[alone])]
        kept = []
        for chosen, iterations, points, margin, decisions, wrong in self.taken:
            mine = (chosen == alone) & (iterations >= j1)
            if bool(mine.any()):
                keep = ~mine
                chosen, iterations, points, margin = chosen[keep], iterations[keep], points[keep], margin[keep]
                decisions, wrong = decisions[keep.cpu().numpy()], wrong[keep.cpu().numpy()]
            kept.append((chosen, iterations, points, margin, decisions, wrong))
            earlier = (chosen == alone) & (margin < self.margin_min[alone])
            if bool(earlier.any()):  # its proposals taken before j1, in order, replayed
                at = int(earlier.nonzero()[-1])
                self.best[alone], self.margin_min[alone], self.decision[alone] = points[at], margin[at], decisions[at]
        self.taken = kept

    def settle(self) -> None:
        """The window's outcome to the clock, the log and the search's state."""
        s = self.owner
        for active, iterations, moved, charged in self.asked:  # a sample's queries are its iterations before `at`
            charged = charged & (iterations < self.at[active, None])
            s.cached += int((charged & ~moved).sum())
            s.dropped += int((moved & ~charged).sum())
        s.clock.count(self.rows, queries=(self.at - self.start).cpu().numpy(), group=STEPS)
        for chosen, _, points, _, decisions, wrong in self.taken:
            if wrong.any():
                rows = self.rows[chosen.cpu().numpy()[wrong]]
                s.log.observe(rows, decisions[wrong], s.clock.queries[rows])
                s.log.x_adv[rows] = points[torch.from_numpy(wrong).to(points.device)].cpu().numpy()
        s.x_best[self.positions], s.margin_min[self.positions] = self.best, self.margin_min
        s.best_decision[self.positions.cpu().numpy()] = self.decision
        s.next_iteration[self.positions] = self.at


def square(target: Target, log: FailureLog, clock: LapClock, rows: np.ndarray, settings: SquareSettings, batch_size: int, seed: int) -> list[Search]:
    """Square Attack on the samples `rows` (all standing), batch by batch, each batch's draws
    from a generator seeded with `seed`, as the reference's `perturb` seeds torch; the
    batches' searches, done."""
    searches = []
    for positions in batches(len(rows), batch_size):
        generator = torch.Generator().manual_seed(int(seed))
        searches.append(Search(target, log, clock, settings, rows[positions], generator))
        searches[-1].run()
    return searches
