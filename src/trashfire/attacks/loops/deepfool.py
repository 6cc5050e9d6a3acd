"""DeepFool (Moosavi-Dezfooli et al. 2016), ART's arithmetic step for step
(trashfire.attacks.deepfool): the strength is the number of classes whose gradients it takes,
max_iter its steps, kwargs.epsilon the overshoot on the returned example. It always exits
early (the validator refuses `early_exit` for it)."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.spec import AttackSpec

SETTINGS = {"epsilon": 1e-6}  # ART's overshoot


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    from trashfire.attacks.deepfool import deepfool

    overshoot = (SETTINGS | dict(spec.get("kwargs") or {}))["epsilon"]
    deepfool(target, log, clock, nb_grads=int(strength), max_iter=spec["max_iter"], overshoot=overshoot, batch_size=batch_size)


LOOP = TorchLoop(name="deepfool", budget=lambda spec: int(AttackSpec.of(spec).budget), run=run, settings=SETTINGS)
