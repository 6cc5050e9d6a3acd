"""DDN, Decoupled Direction and Norm (Rony et al. 2019), adv-lib's arithmetic
(trashfire.attacks.minimal_norm): l2; its strength is its step budget. Its settings'
defaults are adv-lib's (`MinimalSettings`)."""

from __future__ import annotations

from trashfire.attacks.loops import TorchLoop


def budget(spec) -> int:
    """A censored sample's steps: the gradients it took (steps - 1; the last step checks only)."""
    return int(spec["value"]) - 1


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    from trashfire.attacks.minimal_norm import run as minimal_norm

    minimal_norm(target, log, clock, spec, strength, early_exit, batch_size)


LOOP = TorchLoop(name="ddn", budget=budget, run=run)
