"""APGD (Croce & Hein 2020; trashfire.attacks.apgd): alone, as a one-component AutoAttack, or
as AutoAttack's APGD-CE, APGD-T (n_targets > 0: the targeted DLR loss) and APGD-DLR. eot_iter
averages the gradient over that many draws of a randomised defence (AutoAttack's rand)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.loops.autoattack import AS_AUTOATTACK

ART_LOSSES = {"cross_entropy": "ce", "difference_logits_ratio": "dlr"}  # ART's loss names, AutoAttack's
SETTINGS = {"loss_type": "cross_entropy", "n_targets": 0, "eot_iter": 1}


def component(norm: float, eps: float, max_iter: int, kwargs: Mapping[str, Any]) -> tuple[Callable[..., None], int]:
    from trashfire.attacks.apgd import APGDSettings, apgd, budget_of

    given = SETTINGS | dict(kwargs)
    n_targets = int(given["n_targets"])
    loss = "dlr-targeted" if n_targets else ART_LOSSES.get(given["loss_type"], given["loss_type"])
    settings = APGDSettings(norm, eps, max_iter, loss, n_targets, eot_iter=int(given["eot_iter"]))
    return (lambda target, log, clock, rows, batch_size, seed: apgd(target, log, clock, rows, settings, batch_size, seed)), budget_of(settings)


LOOP = TorchLoop(name="apgd", settings=SETTINGS, component=component, **AS_AUTOATTACK)
