"""AutoAttack (Croce & Hein 2020) on the torch engine: its versions (the authors'
autoattack.py, `_set_version`: which components each runs, at which budgets), and the loop that
runs them, each component by its own loop (a loop of this package that declares a
`component`: apgd, fab, square), in AutoAttack's order on the samples still standing
(trashfire.attacks.standard.evaluate).

- `version: standard`: APGD-CE (100 iterations), APGD-T (9 targets x 100), FAB-T (9 targets
  x 100), Square (5000 queries). The option's `kwargs.components` must be these at these
  budgets (the validator refuses others, before any compute): a change is a custom
  evaluation and says so (`version: custom`).
- `version: rand`: the authors' version for randomised defences: APGD-CE and APGD-DLR, each
  with EOT over 20 draws (`RAND`; `kwargs.components` is not read).
- `version: custom`: `kwargs.components` as configured.

A component alone (an attack option whose `rules.torch.algorithm` is apgd, fab or square) runs
as a one-component AutoAttack. Torch-free at import: the validator reads the versions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trashfire.attacks.loops import TorchLoop, components, loop, names
from trashfire.attacks.spec import NORMS, AttackSpec
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
    configured = (spec.get("kwargs") or {}).get("components")
    if configured is None:  # a component alone (apgd_ce, square): one of its own
        return {spec.get("name", "attack"): _torch_view(spec)}
    found = {name: _torch_view(component) for name, component in configured.items()}
    if version == "standard":
        check_version(spec.get("name", "autoattack"), found)
    return found


def _torch_view(component: Mapping[str, Any]) -> dict[str, Any]:
    """A component option as the torch loop reads it: its loop (`rules.torch.algorithm`), its
    budget and the kwargs the loop takes."""
    spec = AttackSpec.of(component)
    kwargs = dict(component.get("kwargs") or {})
    kept = loop(spec.loop).settings if spec.loop in names() else {}
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
    """A component with its loop's defaults stated (`TorchLoop.settings`), so that leaving a
    default out and stating it compare equal."""
    defaults = dict(loop(component["algorithm"]).settings) if component["algorithm"] in names() else {}
    return {**component, "kwargs": defaults | dict(component["kwargs"])}


def runner(name: str, component: Mapping[str, Any], norm: float, eps: float, owner: str = "autoattack") -> tuple[Callable[..., None], int]:
    """The loop of one component at (norm, eps) and a censored sample's queries in it (at
    most: APGD-T and FAB-T run one target per wrong class): the component's loop
    (trashfire.attacks.loops) as it declares itself one."""
    key = f"attack.{owner}.kwargs.components.{name}.rules.torch.algorithm"
    declared = loop(component["algorithm"], key) if component["algorithm"] in names() else None
    if declared is None or declared.component is None:
        raise ConfigError(key, f"got {component['algorithm']!r}; allowed: {', '.join(components())}")
    return declared.component(norm, eps, component["max_iter"], component["kwargs"])


def check_spec(spec: Mapping[str, Any]) -> None:
    """What the torch engine refuses before any compute: an unknown version, a standard one
    that is not AutoAttack's, a component without a loop."""
    version = spec.get("version", "custom")
    if version not in VERSIONS:
        raise ConfigError(f"attack.{spec.get('name', 'autoattack')}.version", f"got {version!r}; allowed: {', '.join(VERSIONS)}")
    for name, component in component_settings(spec).items():
        runner(name, component, NORMS[str(spec["norm"])], 1.0, owner=spec.get("name", "autoattack"))


def budget_of(spec: Mapping[str, Any]) -> int:
    """The queries of a sample no component breaks: its first query and every component's."""
    norm = NORMS[str(spec["norm"])]
    return 1 + sum(runner(name, c, norm, 1.0)[1] for name, c in component_settings(spec).items())


def run(target, log, clock, spec: dict, strength: float, early_exit: bool, batch_size: int) -> None:
    """The torch engine's entry: the spec's components at `strength` (each always exits
    early: `early_exit` is not read), seeded from the generator the campaign seeds per cell."""
    import torch

    from trashfire.attacks.standard import evaluate

    norm = NORMS[str(spec["norm"])]
    runs = {name: runner(name, c, norm, strength)[0] for name, c in component_settings(spec).items()}
    evaluate(target, log, clock, runs, batch_size, seed=int(torch.randint(1, 2**31 - 1, (1,)).item()))


# AutoAttack itself, and each of its components alone, run as AutoAttack does
AS_AUTOATTACK = {"budget": budget_of, "run": run, "check": check_spec}
LOOP = TorchLoop(name="autoattack", **AS_AUTOATTACK)
