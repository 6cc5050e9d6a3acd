"""AutoAttack's versions (the authors' autoattack.py, `_set_version`): which components each
runs, at which budgets. Torch-free, so that the validator refuses a `version: standard`
whose components differ before any compute; the torch engine (trashfire.attacks.standard)
runs what `component_settings` returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trashfire.attacks.spec import AttackSpec
from trashfire.core.errors import ConfigError

VERSIONS = ("standard", "rand", "custom")

# AutoAttack's versions as its autoattack.py sets them, per component: the loop and the
# budget (max_iter: iterations, or Square's queries) and options it runs at
STANDARD = {
    "apgd_ce": {"algorithm": "apgd", "max_iter": 100, "kwargs": {"loss_type": "cross_entropy", "n_targets": 0}},
    "apgd_t": {"algorithm": "apgd", "max_iter": 100, "kwargs": {"loss_type": "difference_logits_ratio", "n_targets": 9}},
    "fab_t": {"algorithm": "fab", "max_iter": 100, "kwargs": {"n_targets": 9}},
    "square": {"algorithm": "square", "max_iter": 5000, "kwargs": {"p_init": 0.8}},
}
RAND = {
    "apgd_ce": {"algorithm": "apgd", "max_iter": 100, "kwargs": {"loss_type": "cross_entropy", "n_targets": 0, "eot_iter": 20}},
    "apgd_dlr": {"algorithm": "apgd", "max_iter": 100, "kwargs": {"loss_type": "difference_logits_ratio", "n_targets": 0, "eot_iter": 20}},
}


def component_settings(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The components the version runs: name -> {algorithm, max_iter, kwargs}, in order."""
    version = spec.get("version", "custom")
    if version == "rand":
        return RAND
    components = (spec.get("kwargs") or {}).get("components")
    if components is None:  # a component alone (apgd_ce, square): one of its own
        return {spec.get("name", "attack"): _torch_view(spec)}
    found = {name: _torch_view(component) for name, component in components.items()}
    if version == "standard":
        check_version(spec.get("name", "autoattack"), found)
    return found


def _torch_view(component: Mapping[str, Any]) -> dict[str, Any]:
    """A component option as the torch loop reads it: its loop (`rules.torch.algorithm`), its
    budget and the kwargs the loop takes."""
    spec = AttackSpec.of(component)
    kwargs = dict(component.get("kwargs") or {})
    kept = {"apgd": ("loss_type", "n_targets", "eot_iter"), "fab": ("n_targets",), "square": ("p_init",)}.get(spec.loop, ())
    return {"algorithm": spec.loop, "max_iter": int(spec.budget or 1), "kwargs": {k: kwargs[k] for k in kept if k in kwargs}}


def check_version(name: str, found: Mapping[str, Any]) -> None:
    """`version: standard` runs AutoAttack's components at the authors' budgets, or refuses."""
    expected = {n: _with_defaults(c) for n, c in STANDARD.items()}
    given = {n: _with_defaults(c) for n, c in found.items()}
    if list(given) != list(expected) or given != expected:
        differences = sorted(n for n in {*expected, *given} if expected.get(n) != given.get(n)) or ["their order"]
        raise ConfigError(
            f"attack.{name}.kwargs.components",
            "version standard runs AutoAttack's components at the authors' budgets (apgd_ce 100, apgd_t 9 x 100, fab_t 9 x 100, square 5000) "
            f"and {', '.join(differences)} differ; set attack.{name}.version=custom to run your own",
        )


def _with_defaults(component: Mapping[str, Any]) -> dict[str, Any]:
    """A component with the loop's defaults stated (APGD's eot_iter 1), so that leaving a
    default out and stating it compare equal."""
    defaults = {"eot_iter": 1} if component["algorithm"] == "apgd" else {}
    return {**component, "kwargs": defaults | dict(component["kwargs"])}
