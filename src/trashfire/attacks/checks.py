"""The attack and certify sections' checks (registered with trashfire.core.checks): each
attack option by its own rules, its engine and torch loop, a composite's components,
AutoAttack's versions; randomized smoothing's Monte Carlo and attack settings. Light: no ART
or torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trashfire.attacks import loops
from trashfire.attacks.loops.autoattack import component_settings
from trashfire.attacks.spec import ATTACK_PROPERTIES, ATTACK_RULES, ENGINES, TORCH_RULES
from trashfire.core.checks import (
    RULES,
    check_keys,
    check_value,
    choice,
    integer,
    nonempty_list,
    nonempty_mapping,
    number,
    option_rules,
    register,
    rule_check,
    strength_check,
)
from trashfire.core.errors import ConfigError
from trashfire.core.grid import options
from trashfire.core.schema import EPS_UNITS


@register("attack")
def check(cfg: DictConfig) -> None:
    _validate_attacks(options(cfg, "attack"), {name: spec.n_classes for name, spec in options(cfg, "data").items()})


@register("certify")
def check_certify(cfg: DictConfig) -> None:
    """trashfire.attacks.smoothing's settings: draw counts, a level, l2 radii and SmoothAdv's."""
    settings = cfg.certify
    if not isinstance(settings, DictConfig):
        raise ConfigError("certify", f"got {settings!r}; allowed: a mapping, as `make params` composes it")
    if not isinstance(settings.get("enabled"), bool):
        raise ConfigError("certify.enabled", f"got {settings.get('enabled')!r}; allowed: true or false")
    for key in ("n0", "n", "batch_size"):
        integer(f"certify.{key}", settings.get(key), low=1)
    integer("certify.seed", settings.get("seed"), low=0)
    number("certify.alpha", settings.get("alpha"), low=0, high=1, open_low=True, open_high=True)
    if settings.get("samples") is not None:
        integer("certify.samples", settings.samples, low=1)
    choice("certify.units", settings.get("units"), EPS_UNITS)
    for eps in nonempty_list("certify.eps", settings.get("eps")):
        number("certify.eps", eps, low=0, open_low=True)
    attack = settings.get("attack")
    if not isinstance(attack, DictConfig):
        raise ConfigError("certify.attack", f"got {attack!r}; allowed: a mapping of steps, step_scale, draws and n")
    for key in ("steps", "draws", "n"):
        integer(f"certify.attack.{key}", attack.get(key), low=1)
    number("certify.attack.step_scale", attack.get("step_scale"), low=0, open_low=True)


def _validate_attacks(attacks: dict[str, Any], classes: Mapping[str, int]) -> None:
    nonempty_mapping("attack", attacks)
    for name, spec in attacks.items():
        _validate_attack(f"attack.{name}", name, spec, attacks, classes)


def _validate_attack(key: str, name: str, spec: Any, attacks: dict[str, Any], classes: Mapping[str, int]) -> None:
    rules = option_rules("attack", name, spec, required=("norms", "values", "engine"))
    if not isinstance(spec.get("_target_"), str) or not isinstance(spec.get("param"), str):
        missing = "_target_" if not isinstance(spec.get("_target_"), str) else "param"
        raise ConfigError(f"{key}.{missing}", "missing; name the ART attack class (_target_) and the argument its strength sets (param)")
    kind = strength_check(key, rules)["kind"]
    check_keys(key, spec, rules, reserved=ATTACK_RULES)
    if "batch_size" in spec:
        integer(f"{key}.batch_size", spec.batch_size, low=1)
    if spec.get("samples") is not None:
        integer(f"{key}.samples", spec.samples, low=1)
    if "max_iter" in spec:
        integer(f"{key}.max_iter", spec.max_iter, low=1)
    if "step_scale" in spec:
        number(f"{key}.step_scale", spec.step_scale, low=0, open_low=True)
    units = choice(f"{key}.units", spec.get("units", "standardised"), EPS_UNITS)
    if units == "pixel" and kind != "real":
        raise ConfigError(
            f"{key}.units",
            f"got 'pixel'; pixel units convert a real strength (eps), and {name}'s values are {kind}s ({key}.{RULES}.values); allowed: standardised",
        )
    _validate_properties(key, spec)
    _validate_classes(key, rules, classes)
    _validate_engine(key, spec, rules, attacks)
    if rules.get("components") is not None:
        _validate_components(key, spec, rules, attacks, classes)


def _validate_properties(key: str, spec: DictConfig) -> None:
    """ATTACK_PROPERTIES: true or false where stated (black_box absent: ART's declaration)."""
    for name in ATTACK_PROPERTIES:
        if spec.get(name) is not None and not isinstance(spec[name], bool):
            raise ConfigError(f"{key}.{name}", f"got {spec[name]!r}; allowed: true, false (or leave it out)")


def _validate_classes(key: str, rules: DictConfig, classes: Mapping[str, int]) -> None:
    """`rules.classes` checks the class count of every selected data set (a loss that needs
    three logits cannot attack a two-class task)."""
    if rules.get("classes") is None:
        return
    check = rule_check(f"{key}.{RULES}.classes", rules.classes)
    for data, n_classes in classes.items():
        try:
            check_value(f"data.{data}.n_classes", n_classes, check)
        except ConfigError as err:
            raise ConfigError(key, f"cannot attack data.{data}: its n_classes {err.problem}") from None


def _validate_components(key: str, spec: DictConfig, rules: DictConfig, attacks: dict[str, Any], classes: Mapping[str, int]) -> None:
    """A composite's kwargs.components: a non-empty mapping of attack options (no norms or
    values of their own: the composite's), each checked by its own rules. The torch engine
    runs each batched, so each must allow torch; the sequence and art engines run ART's and
    leave out those that run on the torch engine only (FAB-T: ART has no FAB)."""
    if not isinstance(rules.components, bool):
        raise ConfigError(f"{key}.{RULES}.components", f"got {rules.components!r}; allowed: true (kwargs.components are attack options), false")
    if not rules.components:
        return
    components = (spec.get("kwargs") or {}).get("components")
    if not isinstance(components, DictConfig) or len(components) == 0:
        raise ConfigError(f"{key}.kwargs.components", f"got {components!r}; allowed: a mapping of attack options, run in its order")
    engine = spec.get("engine") or engines_of(key, rules)[0]
    if spec.get("version") in ("standard", "rand") and engine != "torch":
        raise ConfigError(
            f"{key}.version",
            f"got {spec.version!r} on engine {engine!r}; the authors' versions run on the torch engine only (ART has no FAB, and its APGD-T and Square differ): "
            "set version: custom for ART's components",
        )
    for name, component in components.items():
        where = f"{key}.kwargs.components.{name}"
        if not isinstance(component, DictConfig):
            raise ConfigError(where, f"got {component!r}; allowed: an attack option (_target_, param, kwargs, rules)")
        for own in ("norms", "values", "units", "samples", "engine"):
            if own in component:
                raise ConfigError(f"{where}.{own}", f"a component runs at {key}'s norms, values and samples, on its engine; remove it")
        inherited = {"norms": spec.norms, "values": spec["values"], "units": spec.get("units", "standardised")}
        merged = OmegaConf.create(OmegaConf.to_container(component) | OmegaConf.to_container(OmegaConf.create(inherited)))
        _validate_attack(where, name, merged, attacks, classes)
        engines = set(engines_of(where, merged[RULES]))
        if engine == "torch" and "torch" not in engines:
            raise ConfigError(f"{where}.{RULES}.engine", f"the torch engine runs each component batched; {name} must allow torch, or use engine: sequence")
        if engine == "sequence" and engines != {"torch"} and "per_image" not in engines:
            raise ConfigError(f"{where}.{RULES}.engine", f"the sequence engine runs each component image by image; {name} must allow per_image")
    if engine != "torch" and all(set(engines_of(key, c[RULES])) == {"torch"} for c in components.values()):
        raise ConfigError(f"{key}.engine", f"got {engine!r}; none of {key}'s components runs on ART (per_image or art): use engine: torch")
    if spec.get("version") == "standard":
        component_settings(spec)  # refuses components that are not the authors' at their budgets


def engines_of(key: str, rules: DictConfig) -> list[str]:
    """The engines an attack's rules allow, the first its default."""
    engines = rules.get("engine")
    if not OmegaConf.is_list(engines) or not engines:
        raise ConfigError(f"{key}.{RULES}.engine", f"got {engines!r}; allowed: a non-empty list of {', '.join(ENGINES)}, the first the default")
    for engine in engines:
        choice(f"{key}.{RULES}.engine", engine, ENGINES)
    return list(engines)


def _torch_rules(key: str, rules: DictConfig) -> DictConfig:
    """What the torch engine needs for this attack (TORCH_RULES)."""
    torch_rules = rules.get("torch")
    if torch_rules is None:
        return OmegaConf.create({})
    if not isinstance(torch_rules, DictConfig) or set(torch_rules) - set(TORCH_RULES):
        raise ConfigError(f"{key}.{RULES}.torch", f"got {torch_rules!r}; allowed: a mapping of {', '.join(TORCH_RULES)}")
    if not isinstance(torch_rules.get("early_exit", False), bool):
        raise ConfigError(f"{key}.{RULES}.torch.early_exit", f"got {torch_rules.early_exit!r}; allowed: true, false")
    if not OmegaConf.is_dict(torch_rules.get("kwargs") or OmegaConf.create({})):
        raise ConfigError(f"{key}.{RULES}.torch.kwargs", f"got {torch_rules.kwargs!r}; allowed: a mapping of ART options to the only value the torch loop runs")
    for listed in ("required", "any_kwargs"):
        if not OmegaConf.is_list(torch_rules.get(listed) or OmegaConf.create([])):
            raise ConfigError(f"{key}.{RULES}.torch.{listed}", f"got {torch_rules[listed]!r}; allowed: a list of keys")
    return torch_rules


def _validate_engine(key: str, spec: DictConfig, rules: DictConfig, attacks: dict[str, Any]) -> None:
    engines = engines_of(key, rules)
    engine = spec.get("engine") or engines[0]
    if engine not in engines:  # engines_of checked that each is one of ENGINES
        runs = [n for n, s in attacks.items() if "torch" in (_selected(s, f"{RULES}.engine") or [])]
        why = f"; our torch loop runs {', '.join(runs)} only" if engine == "torch" and runs else ""
        raise ConfigError(f"{key}.engine", f"got {engine!r}; allowed: {', '.join(engines)} ({key}.{RULES}.engine{why})")
    torch_rules = _torch_rules(key, rules)
    if "torch" in engines:
        _validate_torch_algorithm(key, torch_rules)
    if engine == "torch":
        _validate_torch_engine(key, spec, torch_rules)
    if "early_exit" in spec:
        if not isinstance(spec.early_exit, bool):
            raise ConfigError(f"{key}.early_exit", f"got {spec.early_exit!r}; must be true or false")
        if not (engine == "torch" and torch_rules.get("early_exit", False)):
            exiting = [n for n, s in attacks.items() if _selected(s, f"{RULES}.torch.early_exit") is True]
            raise ConfigError(
                f"{key}.early_exit",
                f"applies to {', '.join(exiting) or 'no selected attack'} on the torch engine only (where {RULES}.torch.early_exit is true); remove it",
            )


def _selected(spec: Any, path: str) -> Any:
    """A value of another option, which may not be checked yet: None where it is not there."""
    return OmegaConf.select(spec, path, default=None, throw_on_missing=False) if isinstance(spec, DictConfig) else None


def _validate_torch_algorithm(key: str, torch_rules: DictConfig) -> None:
    """An attack the torch engine may run names the loop that runs it; the loop, not the
    attack's name, decides (trashfire.attacks.loops)."""
    algorithm = torch_rules.get("algorithm")
    if algorithm not in loops.names():
        problem = "missing" if algorithm is None else f"got {algorithm!r}"
        raise ConfigError(
            f"{key}.{RULES}.torch.algorithm",
            f"{problem}; allowed: {', '.join(loops.names())} (the torch engine's loop that runs this attack), or leave torch out of {RULES}.engine",
        )


def _validate_torch_engine(key: str, spec: DictConfig, torch_rules: DictConfig) -> None:
    """Our loop runs ART's attack with ART's defaults for the options it does not implement:
    another value would silently be a different attack."""
    for required in torch_rules.get("required") or []:
        if spec.get(required) is None:
            raise ConfigError(f"{key}.{required}", "missing; the torch engine needs it")
    fixed, free = torch_rules.get("kwargs") or {}, list(torch_rules.get("any_kwargs") or [])
    allowed = [*fixed, *free]
    for option, value in (spec.get("kwargs") or {}).items():
        if option not in allowed:
            raise ConfigError(f"{key}.kwargs.{option}", f"the torch engine does not implement it; allowed: {', '.join(allowed) or 'none'}, or engine: art")
        if option in fixed and option not in free and value != fixed[option]:
            raise ConfigError(
                f"{key}.kwargs.{option}", f"got {value!r}; the torch engine runs ART's default ({fixed[option]!r}) only; use engine: art for another"
            )
