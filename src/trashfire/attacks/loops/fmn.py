"""FMN, Fast Minimum-Norm (Pintor et al. 2021), adv-lib's arithmetic
(trashfire.attacks.minimal_norm): linf, l2 and l1; its strength is its step budget. Its
settings' defaults are adv-lib's (`MinimalSettings`)."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop


def budget(spec) -> int:
    """A censored sample's steps: the gradients it took (steps - 1; the last step checks only)."""
    return int(spec["value"]) - 1


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    from trashfire.attacks.minimal_norm import run as minimal_norm

    minimal_norm(target, log, clock, spec, strength, early_exit, batch_size)


LOOP = TorchLoop(name="fmn", budget=budget, run=run)
