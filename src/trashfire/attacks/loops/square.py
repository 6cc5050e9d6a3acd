"""Square (Andriushchenko et al. 2020; trashfire.attacks.square): the score-based random
search, max_iter queries, p_init the first squares' share of the image; alone or as
AutoAttack's component."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.loops.autoattack import AS_AUTOATTACK

SETTINGS = {"p_init": 0.8}


def component(norm: float, eps: float, max_iter: int, kwargs: Mapping[str, Any]) -> tuple[Callable[..., None], int]:
    from trashfire.attacks.square import SquareSettings, budget_of, square

    settings = SquareSettings(norm, eps, max_iter, float((SETTINGS | dict(kwargs))["p_init"]))
    return (lambda target, log, clock, rows, batch_size, seed: square(target, log, clock, rows, settings, batch_size, seed)), budget_of(settings)


LOOP = TorchLoop(name="square", settings=SETTINGS, component=component, **AS_AUTOATTACK)
