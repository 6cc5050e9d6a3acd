"""The torch engine's loops, one module each.

`trashfire.attacks.loops.<name>` declares `LOOP = TorchLoop(...)`: the loop's name (the
module's), its budget (a censored sample's steps or queries for an attack option), its run,
the refusals it makes before any compute, and its settings (the `kwargs` it reads, with their
defaults), as ART's attacks declare `attack_params`. An attack option runs a loop by naming it
in `rules.torch.algorithm`. A new loop is one module here plus its YAML in conf/attack/
(tests/attacks/test_new_torch_loop.py).

The validator lists the loops by their modules' names without importing torch (`names`); a
module imports torch only inside its functions, so that reading a declaration stays light.
The engine imports the loop it runs (`of`, `loop`).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trashfire.attacks.spec import AttackSpec
from trashfire.core.checks import RULES
from trashfire.core.errors import ConfigError


@dataclass(frozen=True)
class TorchLoop:
    """One loop of the torch engine.

    - `budget(spec)`: a censored sample's steps (or queries) for the attack option `spec`;
    - `run(target, log, clock, spec, strength, early_exit, batch_size)`: the attack on the
      cell's samples at `strength` (standardised), filling the failure log and the clock;
    - `check(spec)`: what it refuses before any compute (None: nothing beyond the rules);
    - `settings`: the kwargs it reads, with their defaults, where it takes them from here
      (AutoAttack's components, DeepFool; FMN and DDN keep adv-lib's in
      trashfire.attacks.minimal_norm.MinimalSettings);
    - `component(norm, eps, max_iter, kwargs)`: the loop as one of AutoAttack's components
      (trashfire.attacks.standard): its run on the samples still standing and a censored
      sample's queries in it; None where it cannot be one.
    """

    name: str
    budget: Callable[[Mapping[str, Any]], int]
    run: Callable[..., None]
    check: Callable[[Mapping[str, Any]], None] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    component: Callable[..., tuple[Callable[..., None], int]] | None = None


@functools.cache
def names() -> tuple[str, ...]:
    """Every loop's name, in alphabetical order, from the modules of this package (no import;
    listed once per process)."""
    return tuple(sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_")))


def loop(name: str, key: str = "rules.torch.algorithm") -> TorchLoop:
    """The loop `name` declares, or a ConfigError at `key` naming the loops there are."""
    if name not in names():
        raise ConfigError(
            key, f"got {name!r}; the torch engine runs {', '.join(names())} (a module each in trashfire.attacks.loops): name one, or use engine: art"
        )
    declared = importlib.import_module(f"{__name__}.{name}").LOOP
    if declared.name != name:
        raise ConfigError(key, f"trashfire.attacks.loops.{name} declares a loop named {declared.name!r}; a loop's name is its module's")
    return declared


def of(spec: Mapping[str, Any]) -> TorchLoop:
    """The loop that runs an attack option on the torch engine (its `rules.torch.algorithm`)."""
    attack = AttackSpec.of(spec)
    return loop(attack.loop, f"attack.{attack.name}.{RULES}.torch.algorithm")


def components() -> tuple[str, ...]:
    """The loops that can be AutoAttack's components."""
    return tuple(name for name in names() if loop(name).component is not None)
