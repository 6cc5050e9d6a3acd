"""PGD (Madry et al. 2018): max_iter steps of eps * step_scale / max_iter, each projected onto
the eps-ball, as ART's ProjectedGradientDescent computes them (trashfire.attacks.gradient)."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop
from trashfire.attacks.spec import AttackSpec


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    from trashfire.attacks.gradient import gradient_attack, pgd_settings

    gradient_attack(target, log, clock, pgd_settings(spec, strength), early_exit, batch_size)


LOOP = TorchLoop(name="pgd", budget=lambda spec: int(AttackSpec.of(spec).budget), run=run)
