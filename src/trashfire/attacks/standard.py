"""AutoAttack's protocol on the torch engine (Croce & Hein 2020): its components batched, each
with early exit, run in order on the samples still standing, with the per-sample failure clock
(docs/design.md, "Per-sample failure clock"). Which components run, at which budgets (the
versions), and the loop that calls `evaluate`: trashfire.attacks.loops.autoattack.

A sample's work is its first query and its passes in every component up to the one that
broke it; its failure step is its model queries when it broke (a censored sample's: what
it spent, the loop's budget unless a component ran fewer passes); `broken_by` names the
component (FIRST_QUERY: wrong before any ran).
Every component draws from generators seeded with the cell's seed, as the authors' code
seeds each attack with the same `seed`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.target import Target, margins
from trashfire.core.clocks import STEPS, LapClock
from trashfire.core.schema import FIRST_QUERY


def evaluate(target: Target, log: FailureLog, clock: LapClock, components: Mapping[str, Callable[..., None]], batch_size: int, seed: int) -> None:
    """The first query of every sample, then each component on the samples still standing."""
    standing = first_query(target, log, clock, batch_size)
    log.broken_by = np.where(log.event, FIRST_QUERY, "").astype("<U32")
    for name, attack in components.items():
        rows = standing[~log.event[standing]]
        if not len(rows):
            break
        attack(target, log, clock, rows, batch_size, seed)
        log.broken_by[rows[log.event[rows]]] = name
    # a censored sample's step is what was spent on it: the budget, unless a component ran
    # fewer passes (APGD-T and FAB-T on fewer classes than targets + 1; a Square search a
    # defended decision stopped at a margin <= 0 without a misclassification)
    censored = ~log.event
    log.failure_step[censored] = clock.queries[censored]


def first_query(target: Target, log: FailureLog, clock: LapClock, batch_size: int) -> np.ndarray:
    """Every sample's clean check, batch by batch (a query each); returns those it left standing."""
    standing = []
    for rows in batches(len(log.y), batch_size):
        clock.count(rows, queries=1, group=STEPS)
        with torch.no_grad():
            logits = target.logits(torch.from_numpy(log.x[rows]).to(target.device))
        labels = torch.from_numpy(log.y[rows]).to(target.device)
        wrong = log.first_query(rows, target.decide(logits), margins(logits, labels))
        log.failure_step[rows[wrong]] = 1
        standing.append(rows[~wrong])
        clock.lap(rows, STEPS)
    return np.concatenate(standing) if standing else np.zeros(0, dtype=np.int64)
