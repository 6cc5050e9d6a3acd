"""The timing stage's section, `timing` (registered with trashfire.core.checks): how the
survival data sets are built (`survival_data`, `eps_survival`), the degeneracy guard
(`degenerate`) and the eps at which accuracy against queries is read (`query_eps`). These
lived in `survival.data` and `metrics.*` before the stage had a section of its own; those keys
are refused with the new key's name."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core.checks import as_list, choice, moved, moved_into_options, number, register
from trashfire.core.errors import ConfigError
from trashfire.core.schema import EPS_UNITS
from trashfire.tables.survival_data import BEFORE_ATTACK_POLICIES, DUMMY_SOURCES, NONPOSITIVE_POLICIES, NUMERIC_COVARIATES

SECTION = "timing"
moved("survival.data", f"{SECTION}.survival_data")
moved("metrics.eps_survival", f"{SECTION}.eps_survival")
moved("metrics.degenerate", f"{SECTION}.degenerate")
moved("metrics.optimality.query_eps", f"{SECTION}.query_eps")

MAKE_PARAMS = "missing; compose params.yaml with `make params`"


@register(SECTION)
def check(cfg: DictConfig) -> None:
    timing = cfg.timing
    _validate_survival_data(timing.get("survival_data"))
    _validate_eps_survival(timing.get("eps_survival"))
    degenerate = timing.get("degenerate")
    if not isinstance(degenerate, DictConfig):
        raise ConfigError("timing.degenerate", MAKE_PARAMS)
    if degenerate.get("margin") is not None:
        number("timing.degenerate.margin", degenerate.margin, low=0, high=1)
    for norm, values in (timing.get("query_eps") or {}).items():
        if str(norm) not in ("inf", "2", "1", "0"):
            raise ConfigError("timing.query_eps", f"got norm {norm!r}; allowed: inf, 2, 1, 0")
        for value in as_list(values):
            number(f"timing.query_eps.{norm}", value, low=0, open_low=True)


def _validate_survival_data(data: Any) -> None:
    key = "timing.survival_data"
    if not isinstance(data, DictConfig):
        raise ConfigError(key, MAKE_PARAMS)
    for covariate in as_list(data.get("covariates") or []):
        choice(f"{key}.covariates", covariate, NUMERIC_COVARIATES)
    for kind in as_list(data.get("dummies") or []):
        choice(f"{key}.dummies", kind, tuple(DUMMY_SOURCES))
    if data.get("misclassified_before_attack") in ("attack_time", "predict_time"):
        raise ConfigError(
            f"{key}.misclassified_before_attack",
            f"{data.misclassified_before_attack} was removed with the per-sample failure clock; allowed: first_query (such a sample fails at its share of the first query), drop",
        )
    choice(f"{key}.misclassified_before_attack", data.get("misclassified_before_attack"), BEFORE_ATTACK_POLICIES)
    choice(f"{key}.nonpositive_durations", data.get("nonpositive_durations"), NONPOSITIVE_POLICIES)


def _validate_eps_survival(eps: Any) -> None:
    key = "timing.eps_survival"
    if not isinstance(eps, DictConfig):
        raise ConfigError(key, MAKE_PARAMS)
    moved_into_options(f"{key}.minimal", eps.get("minimal"), "minimal: true in the attack's option")
    choice(f"{key}.minimal_units", eps.get("minimal_units"), EPS_UNITS)
    if eps.get("minimal_eps_max") is not None:
        number(f"{key}.minimal_eps_max", eps.minimal_eps_max, low=0, open_low=True)
