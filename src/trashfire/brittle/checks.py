"""The brittle stage's LIME settings, `metrics.brittle` (registered with trashfire.core.checks)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core.checks import choice, integer, nonempty_mapping, number, register
from trashfire.core.errors import ConfigError


@register("metrics")
def check(cfg: DictConfig) -> None:
    _validate_brittle(cfg.metrics.get("brittle"))


def _validate_brittle(brittle: Any) -> None:
    """002's LIME settings for the brittle stage."""
    key = "metrics.brittle"
    if not isinstance(brittle, DictConfig):
        raise ConfigError(key, "missing; compose params.yaml with `make params`")
    integer(f"{key}.n_samples", brittle.get("n_samples"), low=1)
    integer(f"{key}.lime_samples", brittle.get("lime_samples"), low=2)  # a fit needs two points at least
    integer(f"{key}.perturbations_per_eval", brittle.get("perturbations_per_eval"), low=1)
    integer(f"{key}.seed", brittle.get("seed"), low=0)
    segments = brittle.get("segments")
    nonempty_mapping(f"{key}.segments", segments)
    choice(f"{key}.segments.kind", segments.get("kind"), ("slic", "grid"))
    integer(f"{key}.segments.n_segments", segments.get("n_segments"), low=2)
    number(f"{key}.segments.compactness", segments.get("compactness"), low=0, open_low=True)
    integer(f"{key}.segments.patch", segments.get("patch"), low=1)
    robust = brittle.get("robust_acc")
    nonempty_mapping(f"{key}.robust_acc", robust)
    if not isinstance(robust.get("attack"), str):
        raise ConfigError(f"{key}.robust_acc.attack", f"got {robust.get('attack')!r}; allowed: an attack name, e.g. pgd")
    if robust.get("eps") is not None:
        number(f"{key}.robust_acc.eps", robust.eps, low=0, open_low=True)
