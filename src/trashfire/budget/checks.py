"""The budget stage's section, `budget` (registered with trashfire.core.checks). Its keys lived
in `survival.budget` and `metrics.validity.budget_share` before the stage had a section of
its own; those are refused with the new key's name."""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig

from trashfire.core.checks import integer, moved, number, register
from trashfire.core.errors import ConfigError

SECTION = "budget"
moved("survival.budget", SECTION)
moved("metrics.validity.budget_share", f"{SECTION}.share")


@register(SECTION)
def check(cfg: DictConfig) -> None:
    budget = cfg.get(SECTION)
    if not isinstance(budget, DictConfig):
        raise ConfigError(SECTION, "missing; compose params.yaml with `make params`")
    number("budget.factor", budget.get("factor"), low=1, open_low=True)
    integer("budget.draws", budget.get("draws"), low=10)
    integer("budget.seed", budget.get("seed"), low=0)
    integer("budget.min_search_iter", budget.get("min_search_iter"), low=1)
    number("budget.share", budget.get("share"), low=0, high=1)
    _validate_calibration(cfg)


def _validate_calibration(cfg: DictConfig) -> None:
    """Each attack to calibrate: a share in (0, 1], and, where the grid has it, a budget to
    multiply (an attack the grid leaves out is skipped by the budget stage, with a note)."""
    calibrate = cfg.budget.get("calibrate")
    if calibrate is None:
        return
    if not isinstance(calibrate, DictConfig) or isinstance(calibrate, ListConfig):
        raise ConfigError("budget.calibrate", f"got {calibrate!r}; a mapping of attack option to the share of model cells to rerun, e.g. {{pgd: 0.5}}")
    attacks = cfg.get("attack") or {}
    for name, share in calibrate.items():
        number(f"budget.calibrate.{name}", share, low=0, high=1, open_low=True)
        if name in attacks and attacks[name].get("_target_") and attacks[name].get("max_iter") is None:  # a full option, not a preset's values alone
            raise ConfigError(f"budget.calibrate.{name}", f"{name} has no max_iter: a one-step attack has no budget to multiply; calibrate an iterative attack")
