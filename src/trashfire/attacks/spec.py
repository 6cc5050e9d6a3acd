"""What an attack option is, without ART or torch: its settings' allowed values and
`AttackSpec`, the one reading of an attack-grid entry (its engine, loop, strength, units and
budget) that the checks, the campaign and the engine share.

Light on purpose: the validator and the table stages read it, and `import trashfire.attacks`
must not load ART (2.5 s) into a stage that only reads records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trashfire.core.checks import RULES
from trashfire.core.errors import ConfigError
from trashfire.core.grid import DESCRIPTIVE_KEYS
from trashfire.core.schema import to_standardised

ENGINES = ("torch", "per_image", "sequence", "art")  # see trashfire.attacks.engine
TORCH_RULES = ("algorithm", "required", "early_exit", "kwargs", "any_kwargs")  # an attack's rules.torch
# an attack's rules read beside its own keys: engine, torch, classes (a check of every
# selected data set's n_classes) and components (true: kwargs.components are attack options,
# each checked by its own rules at the composite's norms and values)
ATTACK_RULES = ("engine", "torch", "classes", "components")
# keys that say what an attack is, not what it computes: read by the tables, never part of a
# cell hash (the grid owns that list). black_box: true, false, or absent (ART's declaration
# of the class decides, `black_box_of`); minimal: true or false
ATTACK_PROPERTIES = DESCRIPTIVE_KEYS
NORMS = {"inf": np.inf, "1": 1, "2": 2, "0": 0}


@dataclass(frozen=True)
class AttackSpec:
    """One attack-grid entry as the code reads it (`of(spec)`): the configured engine (else
    the first its rules allow, else ART image by image), the torch loop its rules name, the
    strength and its kind and units, and the budget (max_iter: iterations or queries)."""

    name: str
    engine: str
    loop: str | None
    value: Any
    kind: str
    units: str
    budget: int | None

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> AttackSpec:
        rules = spec.get(RULES) or {}
        return cls(
            name=spec.get("name", "?"),
            engine=spec.get("engine") or (rules.get("engine") or ["per_image"])[0],
            loop=(rules.get("torch") or {}).get("algorithm"),
            value=spec.get("value"),
            kind=_kind(rules, spec.get("value")),
            units=spec.get("units", "standardised"),
            budget=spec.get("max_iter"),
        )

    def standardised(self, pixel_std: float) -> float:
        """The strength on the standardised scale the model sees (schema.to_standardised):
        pixel units are [0, 1] pixel units (004's eps grid), divided by the pixel std."""
        return to_standardised(self.value, self.units, pixel_std)

    def art_value(self, pixel_std: float = 1.0) -> int | float:
        """The strength ART is given: a count as the configured integer (a class count,
        pixels, 255-levels, queries), never a cast; a real on the standardised scale."""
        if self.kind == "real":
            return self.standardised(pixel_std)
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise ConfigError(f"attack.{self.name}.values", f"got {self.value!r}; must be an integer (its rules make the strength a count)")
        return self.value


def _kind(rules: Mapping[str, Any], value: Any) -> str:
    """count or real, as the rules state (`rules.values.kind`); a spec written by hand without
    rules: count for an integer value, real for any other."""
    declared = rules.get("values", {})
    if isinstance(declared, Mapping) and declared.get("kind") in ("count", "real"):
        return declared["kind"]
    return "count" if isinstance(value, int) and not isinstance(value, bool) else "real"


def engine_of(spec: Mapping[str, Any]) -> str:
    return AttackSpec.of(spec).engine


def strength_kind(spec: Mapping[str, Any]) -> str:
    return AttackSpec.of(spec).kind


def attack_strength(spec: Mapping[str, Any], pixel_std: float) -> float:
    return AttackSpec.of(spec).standardised(pixel_std)


def art_strength(spec: Mapping[str, Any], pixel_std: float = 1.0) -> int | float:
    return AttackSpec.of(spec).art_value(pixel_std)


def pgd_step_size(spec: Mapping[str, Any], eps: float) -> float:
    """PGD's step: eps * step_scale / max_iter (Madry et al.'s 2.5 eps / iterations)."""
    return eps * spec["step_scale"] / spec["max_iter"]


def black_box_of(spec: Mapping[str, Any], declared: Mapping[str, Any] | None) -> bool | None:
    """Whether an attack only queries the model's outputs: its option's `black_box` where
    stated, else what ART declares of its `_target_` class (`declared`: black-box unless it
    requires an input-gradient interface); None where neither says (a class that declares
    nothing, or a declaration not recorded yet)."""
    if spec.get("black_box") is not None:
        return bool(spec["black_box"])
    gradients = (declared or {}).get("gradients")
    return None if gradients is None else not gradients
