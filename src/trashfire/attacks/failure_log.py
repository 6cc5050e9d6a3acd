"""The per-sample outcomes an attack decides as it goes (docs/design.md, "Per-sample failure
clock"): shared by the torch engine's loops and AutoAttack's batched components."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trashfire.core.clocks import STEPS

if TYPE_CHECKING:
    from trashfire.core.clocks import LapClock


def batches(n: int, size: int) -> Iterator[np.ndarray]:
    """Positions 0..n-1 in consecutive batches of at most `size`."""
    for start in range(0, n, size):
        yield np.arange(start, min(n, start + size))


@dataclass
class FailureLog:
    """Per-sample outcomes as the attack goes: the first failure is kept, the latest
    prediction is the adversarial one."""

    x: np.ndarray
    y: np.ndarray
    budget: int
    x_adv: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.y)
        self.x_adv = self.x.copy()
        self.y_pred_ben = np.full(n, -1, dtype=np.int64)
        self.y_pred_adv = np.full(n, -1, dtype=np.int64)
        self.margin_ben = np.zeros(n)
        self.failure_step = np.full(n, self.budget, dtype=np.int64)
        self.event = np.zeros(n, dtype=bool)
        self.broken_by: np.ndarray | None = None  # the `sequence` engine's: which component broke it
        self.norm_by_step: np.ndarray | None = None  # a minimal-norm attack's: its smallest adversarial norm by each step

    def first_query(self, rows: np.ndarray, decisions: np.ndarray, margin: np.ndarray) -> np.ndarray:
        self.y_pred_ben[rows] = decisions
        self.margin_ben[rows] = margin
        return self.observe(rows, decisions, 0)

    def observe(self, rows: np.ndarray, decisions: np.ndarray, step: int | np.ndarray) -> np.ndarray:
        """Record a check of `rows` at `step` (one for all, or one per row: a composite's
        steps are each sample's own queries); returns which are misclassified now."""
        wrong = decisions != self.y[rows]
        new = wrong & ~self.event[rows]
        first = rows[new]
        self.event[first] = True
        self.failure_step[first] = np.asarray(step)[new] if np.ndim(step) else step
        self.y_pred_adv[rows] = decisions
        return wrong

    def arrays(self, clock: LapClock) -> dict[str, np.ndarray]:
        """The per-sample arrays the attack itself decides: outcomes, exact compute and the
        equal-share durations (`price` adds the priced ones)."""
        extra = {name: value for name, value in (("broken_by", self.broken_by), ("norm_by_step", self.norm_by_step)) if value is not None}
        return extra | {
            "y_pred_ben": self.y_pred_ben,
            "y_pred_adv": self.y_pred_adv,
            "margin_ben": self.margin_ben,
            "failure_step": self.failure_step,
            "event": self.event,
            "queries": clock.queries.copy(),
            "gradients": clock.gradients.copy(),
            "flops": clock.flops,
            "duration_process_shared": clock.process_shared,
            "duration_wall_shared": clock.wall_shared,
        }


class PairLedger:
    """Per (sample, run): the passes it took and where it broke."""

    def __init__(self, n: int, runs: int):
        self.queries = np.zeros((n, runs), dtype=np.int64)
        self.gradients = np.zeros((n, runs), dtype=np.int64)
        self.broken = np.zeros((n, runs), dtype=bool)
        self.point: np.ndarray | None = None
        self.decision = np.zeros((n, runs), dtype=np.int64)

    def spend(self, samples: np.ndarray, runs: np.ndarray, queries: int = 0, gradients: int = 0) -> None:
        self.queries[samples, runs] += queries
        self.gradients[samples, runs] += gradients

    def breaks(self, samples: np.ndarray, runs: np.ndarray, points: np.ndarray, decisions: np.ndarray) -> None:
        if self.point is None:
            self.point = np.zeros(self.broken.shape + points.shape[1:], dtype=np.float32)
        self.broken[samples, runs] = True
        self.point[samples, runs] = points
        self.decision[samples, runs] = decisions

    def first_break(self) -> np.ndarray:
        """Each sample's first run, in target order, that broke it (runs: none)."""
        return np.where(self.broken.any(1), self.broken.argmax(1), self.broken.shape[1])

    def still_needed(self, samples: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """A pair searches on while it has not broken and no earlier run of its sample has."""
        return runs < self.first_break()[samples]

    def forget(self, first_run: int) -> None:
        """Clear the runs from `first_run` on (to run them again)."""
        for table in (self.queries, self.gradients, self.broken, self.decision):
            table[:, first_run:] = 0
        if self.point is not None:
            self.point[:, first_run:] = 0

    def charges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per sample, the queries and gradients of its runs in order up to its first break
        (all of them when none broke it), and that run."""
        first = self.first_break()
        in_order = np.arange(self.broken.shape[1])[None, :] <= first[:, None]
        return (self.queries * in_order).sum(1), (self.gradients * in_order).sum(1), first

    def settle(self, log: FailureLog, clock: LapClock, rows: np.ndarray) -> np.ndarray:
        """Charge each sample (`rows`, the ledger's samples in order) what the runs in order
        spend on it, then record the break of each a run broke, at its point; returns each
        sample's first breaking run (runs: none)."""
        queries, gradients, first = self.charges()
        clock.count(rows, queries=queries, gradients=gradients, group=STEPS)
        clock.lap([], STEPS, reference=False)  # the charges' FLOPs; the passes' time is shared already
        broken = np.flatnonzero(first < self.broken.shape[1])
        if len(broken):
            log.observe(rows[broken], self.decision[broken, first[broken]], clock.queries[rows[broken]])
            log.x_adv[rows[broken]] = self.point[broken, first[broken]]
        return first
