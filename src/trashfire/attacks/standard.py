"""AutoAttack (Croce & Hein 2020) on the torch engine: its components batched, each with
early exit, run in AutoAttack's order on the samples still standing, with the per-sample
failure clock (docs/design.md, "Per-sample failure clock").

- `version: standard`: APGD-CE (100 iterations), APGD-T (9 targets x 100), FAB-T (9 targets
  x 100), Square (5000 queries): the authors' `_set_version('standard')`. The option's
  `kwargs.components` must be these at these budgets (the validator refuses others:
  `trashfire.attacks.versions`): a change is a custom evaluation and says so
  (`version: custom`).
- `version: rand`: the authors' version for randomised defences: APGD-CE and APGD-DLR, each
  with EOT over 20 draws (`attack_versions.RAND`; `kwargs.components` is not read).
- `version: custom`: `kwargs.components` as configured, each run by the loop its
  `rules.torch.algorithm` names (apgd, fab or square).

A sample's work is its first query and its passes in every component up to the one that
broke it; its failure step is its model queries when it broke (a censored sample's: what
it spent, `budget_of` unless a component ran fewer passes); `broken_by` names the component
(FIRST_QUERY: wrong before any ran).
Every component draws from generators seeded with the cell's seed, as the authors' code
seeds each attack with the same `seed`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from trashfire.attacks.apgd import APGDSettings, apgd
from trashfire.attacks.apgd import budget_of as apgd_budget
from trashfire.attacks.fab import FABSettings, fab
from trashfire.attacks.fab import budget_of as fab_budget
from trashfire.attacks.failure_log import FailureLog, batches
from trashfire.attacks.spec import NORMS, loops_run_by
from trashfire.attacks.square import SquareSettings, square
from trashfire.attacks.square import budget_of as square_budget
from trashfire.attacks.target import Target, margins
from trashfire.attacks.versions import VERSIONS, component_settings
from trashfire.core.clocks import STEPS, LapClock
from trashfire.core.errors import ConfigError
from trashfire.core.schema import FIRST_QUERY

ALGORITHMS = loops_run_by("standard")  # the torch engine's loops this module runs (spec.TORCH_LOOPS)
ART_LOSSES = {"cross_entropy": "ce", "difference_logits_ratio": "dlr"}


def runner(name: str, component: Mapping[str, Any], norm: float, eps: float, owner: str = "autoattack") -> tuple[Callable[..., None], int]:
    """The loop of one component at (norm, eps) and a censored sample's queries in it (at
    most: APGD-T and FAB-T run one target per wrong class)."""
    kwargs, iterations = component["kwargs"], component["max_iter"]
    if component["algorithm"] == "apgd":
        loss = ART_LOSSES.get(kwargs.get("loss_type", "cross_entropy"), kwargs.get("loss_type"))
        n_targets = int(kwargs.get("n_targets", 0))
        settings = APGDSettings(norm, eps, iterations, "dlr-targeted" if n_targets else loss, n_targets, eot_iter=int(kwargs.get("eot_iter", 1)))
        return (lambda target, log, clock, rows, batch_size, seed: apgd(target, log, clock, rows, settings, batch_size, seed)), apgd_budget(settings)
    if component["algorithm"] == "fab":
        settings = FABSettings(norm, eps, iterations, int(kwargs.get("n_targets", 9)))
        return (lambda target, log, clock, rows, batch_size, seed: fab(target, log, clock, rows, settings, batch_size)), fab_budget(settings)
    if component["algorithm"] == "square":
        settings = SquareSettings(norm, eps, iterations, float(kwargs.get("p_init", 0.8)))
        return (lambda target, log, clock, rows, batch_size, seed: square(target, log, clock, rows, settings, batch_size, seed)), square_budget(settings)
    raise ConfigError(f"attack.{owner}.kwargs.components.{name}.rules.torch.algorithm", f"got {component['algorithm']!r}; allowed: apgd, fab, square")


def check_spec(spec: Mapping[str, Any]) -> None:
    """What the torch engine refuses before any compute: an unknown version, a standard one
    that is not AutoAttack's, a component without a loop."""
    version = spec.get("version", "custom")
    if version not in VERSIONS:
        raise ConfigError(f"attack.{spec.get('name', 'autoattack')}.version", f"got {version!r}; allowed: {', '.join(VERSIONS)}")
    for name, component in component_settings(spec).items():
        runner(name, component, NORMS[str(spec["norm"])], 1.0, owner=spec.get("name", "autoattack"))


def budget_of(spec: Mapping[str, Any]) -> int:
    """The queries of a sample no component breaks: its first query and every component's."""
    norm = NORMS[str(spec["norm"])]
    return 1 + sum(runner(name, c, norm, 1.0)[1] for name, c in component_settings(spec).items())


def run(target: Target, log: FailureLog, clock: LapClock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    """The torch engine's entry: the spec's components at `strength` (each always exits
    early: `early_exit` is not read), seeded from the generator the campaign seeds per cell."""
    norm = NORMS[str(spec["norm"])]
    components = {name: runner(name, c, norm, strength)[0] for name, c in component_settings(spec).items()}
    evaluate(target, log, clock, components, batch_size, seed=int(torch.randint(1, 2**31 - 1, (1,)).item()))


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
