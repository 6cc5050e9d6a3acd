"""The brittle stage's LIME settings, `brittle` (registered with trashfire.core.checks).
They lived in `metrics.brittle` before the stage had a section of its own; those keys are
refused with the new one's name. What `aggregate` correlates the score with,
`metrics.brittle.robust_acc`, is the metrics package's."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core.checks import choice, integer, moved, nonempty_mapping, number, register
from trashfire.core.errors import ConfigError

SECTION = "brittle"
SETTINGS = ("n_samples", "lime_samples", "perturbations_per_eval", "segments", "seed")
for _key in SETTINGS:
    moved(f"metrics.brittle.{_key}", f"{SECTION}.{_key}")


@register(SECTION)
def check(cfg: DictConfig) -> None:
    _validate_brittle(cfg.get(SECTION))


def _validate_brittle(brittle: Any) -> None:
    """002's LIME settings for the brittle stage."""
    key = SECTION
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
