"""FAB-T (Croce & Hein 2020; trashfire.attacks.fab): the targeted minimal-norm search, one
target per wrong class up to n_targets, alone or as AutoAttack's component."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.loops.autoattack import AS_AUTOATTACK

SETTINGS = {"n_targets": 9}


def component(norm: float, eps: float, max_iter: int, kwargs: Mapping[str, Any]) -> tuple[Callable[..., None], int]:
    from trashfire.attacks.fab import FABSettings, budget_of, fab

    settings = FABSettings(norm, eps, max_iter, int((SETTINGS | dict(kwargs))["n_targets"]))
    return (lambda target, log, clock, rows, batch_size, seed: fab(target, log, clock, rows, settings, batch_size)), budget_of(settings)


LOOP = TorchLoop(name="fab", settings=SETTINGS, component=component, **AS_AUTOATTACK)
