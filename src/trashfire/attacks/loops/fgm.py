"""FGM (Goodfellow et al. 2015): one step of length eps along the norm's steepest-ascent
direction, as ART's FastGradientMethod computes it (trashfire.attacks.gradient)."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    from trashfire.attacks.gradient import fgm_settings, gradient_attack

    gradient_attack(target, log, clock, fgm_settings(spec, strength), early_exit, batch_size)


LOOP = TorchLoop(name="fgm", budget=lambda spec: 1, run=run)
