"""The metrics section's checks (registered with trashfire.core.checks); the brittle
stage's LIME settings (`brittle`) are trashfire.brittle.checks'."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core.checks import as_list, choice, integer, moved, moved_into_options, nonempty_list, nonempty_mapping, number, register
from trashfire.core.errors import ConfigError
from trashfire.core.grid import options
from trashfire.core.schema import EPS_UNITS

moved("metrics.evp.w", "viability.w")
moved("metrics.evp.tau", "viability.tau")


@register("viability")
def check_viability(cfg: DictConfig) -> None:
    """The viability threshold EVP and the timing stage's degeneracy guard share."""
    viability = cfg.viability
    number("viability.w", viability.get("w"), low=0, open_low=True)
    if viability.get("tau") is not None:
        number("viability.tau", viability.tau, low=0, high=1, open_low=True)


@register("metrics")
def check(cfg: DictConfig) -> None:
    _validate_metrics(cfg.metrics)
    _check_auc_interval(cfg)


def _validate_metrics(metrics: DictConfig) -> None:
    integer("metrics.evp.tau_grid", metrics.evp.get("tau_grid"), low=2)
    for k in nonempty_list("metrics.evp.table_classes", metrics.evp.get("table_classes")):
        integer("metrics.evp.table_classes", k, low=2)
    choice("metrics.auc.units", metrics.auc.get("units"), EPS_UNITS)
    eps0 = number("metrics.auc.eps0", metrics.auc.get("eps0"), low=0)
    if metrics.auc.get("eps1") is not None:
        number("metrics.auc.eps1", metrics.auc.eps1, low=eps0, open_low=True)
    if metrics.trash.get("eps_max") is not None:
        number("metrics.trash.eps_max", metrics.trash.eps_max, low=0, open_low=True)
    findings = metrics.get("findings")
    if not isinstance(findings, DictConfig):
        raise ConfigError("metrics.findings", "missing; compose params.yaml with `make params`")
    number("metrics.findings.alpha", findings.get("alpha"), low=0, high=1, open_low=True, open_high=True)
    integer("metrics.findings.seed", findings.get("seed"), low=0)
    _validate_effects(findings)
    for removed, why in (("findings", "bootstrap"), ("trash", "bootstrap"), ("trash", "seed")):
        if metrics.get(removed, {}).get(why) is not None:
            raise ConfigError(
                f"metrics.{removed}.{why}", "was removed: intervals over seeds are Student's t intervals over independent units (issue 59); drop the key"
            )
    _validate_optimality(metrics.get("optimality"))
    _validate_validity(metrics.get("validity"))
    _validate_robust_acc((metrics.get("brittle") or {}).get("robust_acc"))


def _validate_robust_acc(robust: Any) -> None:
    """What 002 Fig. 4 correlates the brittle-score with."""
    key = "metrics.brittle.robust_acc"
    nonempty_mapping(key, robust)
    if not isinstance(robust.get("attack"), str):
        raise ConfigError(f"{key}.attack", f"got {robust.get('attack')!r}; allowed: an attack name, e.g. pgd")
    if robust.get("eps") is not None:
        number(f"{key}.eps", robust.eps, low=0, open_low=True)


# each claim's smallest effect of interest and each claim of no effect's margin (trashfire.metrics.findings)
SMALLEST_EFFECTS = (
    "003_deeper_trains_longer",
    "003_depth_not_proportional",
    "003_trash_above_one",
    "003_depth_latency",
    "001_adv_train_raises_evp",
    "001_evp_ranks_differently",
    "002_brittle_negative",
    "002_adv_train_lowers_brittle",
    "004_r_rises_with_epochs",
)
MARGINS = ("003_depth_queries", "004_pretraining_effect")


def _validate_effects(findings: DictConfig) -> None:
    for section, keys in (("smallest", SMALLEST_EFFECTS), ("margin", MARGINS)):
        given = findings.get(section)
        if not isinstance(given, DictConfig):
            raise ConfigError(f"metrics.findings.{section}", f"missing; give each of {', '.join(keys)} a positive number")
        unknown = sorted(set(given) - set(keys))
        if unknown:
            raise ConfigError(f"metrics.findings.{section}.{unknown[0]}", f"is no claim's; allowed: {', '.join(keys)}")
        for key in keys:
            number(f"metrics.findings.{section}.{key}", given.get(key), low=0, open_low=True)


def _validate_validity(validity) -> None:
    if validity is None:
        raise ConfigError("metrics.validity", "missing; compose params.yaml with `make params`")
    for key in ("rise_tol", "black_box_tol", "gradient_share", "near_zero", "square_tol", "bracket_tol"):
        number(f"metrics.validity.{key}", validity.get(key), low=0, high=1)
    moved_into_options(
        "metrics.validity.black_box", validity.get("black_box"), "black_box: true/false in the attack's option, else ART's declaration of its class"
    )


def _validate_optimality(settings: Any) -> None:
    key = "metrics.optimality"
    if not isinstance(settings, DictConfig):
        raise ConfigError(key, "missing; compose params.yaml with `make params`")
    integer(f"{key}.curve_points", settings.get("curve_points"), low=2)
    number(f"{key}.far_below", settings.get("far_below"), low=0, high=1)


def _check_auc_interval(cfg: DictConfig) -> None:
    """R integrates each eps family's curve up to eps1: a grid in the same units must reach it.
    (A grid in the other units is checked per data set by `aggregate`, which knows its std.)"""
    auc = cfg.metrics.auc
    if auc.get("eps1") is None:
        return
    for name, spec in options(cfg, "attack").items():
        if spec.get("param") != "eps" or spec.get("units", "standardised") != auc.get("units"):
            continue
        largest = max(as_list(spec["values"]))
        if auc.eps1 > largest:
            raise ConfigError(
                "metrics.auc.eps1", f"{auc.eps1} exceeds the largest eps {largest} of attack.{name} ({auc.units} units); lower it or extend the grid"
            )
