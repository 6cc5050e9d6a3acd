"""The generic config checks every package's checks are made of, and their registry.

- Primitives (`choice`, `integer`, `number`, `nonempty_list`, ...): each failure is one
  ConfigError naming the key, what it got and what is allowed.
- The rules reader: each data, model, defence and attack option states what it allows under
  `rules:` (documented at the top of each conf/ group's files); `check_keys` applies them.
- The registry: a package's own checks live beside its code, in `trashfire.<package>.checks`,
  and register here with `@register("<section>")`. `registered()` finds every such module
  by that name and imports it, so a stage validates the whole config although it imports
  only its own floor, and core names no package above it.
- Moved keys: a package that moves one of its keys to another section says so with
  `moved(old, new)` beside its checks; an override or a params file that still gives the old
  key is refused with one line naming the new one (`refuse_moved`, `refuse_moved_keys`),
  never read as a silent default.
"""

from __future__ import annotations

import functools
import importlib
import math
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from numbers import Number
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trashfire.core.errors import ConfigError

# An option's rules: `rules: {<key>: <check>}`, each check of the option's key of that name
# (of each item, where the key holds a list). A check is a list (one of these values) or a
# mapping of CHECK_FIELDS: `kind` (KINDS), a range (low, high, open_low, open_high), one_of,
# optional (absent or null passes), why (said when the check fails). Rules never enter a
# cell hash (trashfire.core.grid).
RULES = "rules"
KINDS = ("count", "real", "path", "flag", "text")
CHECK_FIELDS = ("kind", "one_of", "low", "high", "open_low", "open_high", "optional", "why")
STRENGTH_KINDS = ("count", "real")  # what an attack's or a defence's `values` may be
GRID_AXES = ("values", "norms")  # option keys that are grids: a scalar is a one-value grid
# a data option's keys that never change the images (where the files are, whether to fetch
# or verify them), left out of the cell hash: `unhashed: [root, download]`
UNHASHED = "unhashed"
CHECKS_MODULE = "checks"  # trashfire.<package>.checks registers that package's checks

Check = Callable[[DictConfig], None]
_REGISTRY: list[tuple[str, Check]] = []
_MOVED: dict[str, str] = {}  # old dotted key -> its new one


def moved(old: str, new: str) -> None:
    """Declare that the dotted key (or section) `old` is now `new`."""
    _MOVED[old] = new


def new_key(key: str) -> str | None:
    """Where the dotted `key` lives now, if it or a section above it moved; else None."""
    _discover()
    for old, new in _MOVED.items():
        if key == old or key.startswith(f"{old}."):
            return new + key[len(old) :]
    return None


def refuse_moved(key: str) -> None:
    """An override's key (`+`/`~` prefixes allowed) that moved: one line naming the new key."""
    key = key.lstrip("+~")
    found = new_key(key)
    if found is not None:
        raise ConfigError(key, f"moved to {found}; set {found} instead")


def moved_into_options(key: str, value: Any, where: str) -> None:
    """A key that moved into the attack options: refused where given, naming where it went."""
    if value is not None:
        raise ConfigError(key, f"removed: an attack's option says it ({where}); compose params.yaml again with `make params`")


def refuse_moved_keys(cfg: DictConfig) -> None:
    """A config (a params file composed before the move, or a preset) that still gives a moved key."""
    _discover()
    for old, new in _MOVED.items():
        if OmegaConf.select(cfg, old, default=None, throw_on_missing=False) is not None:
            raise ConfigError(old, f"moved to {new}; compose params.yaml again (`make params`), or set {new} in your config")


def register(section: str) -> Callable[[Check], Check]:
    """Register `check(cfg)` for the top-level `section` of the config; it runs only when the
    config has that section (survival and metrics are optional in a test's config)."""

    def add(check: Check) -> Check:
        if all(existing is not check for _, existing in _REGISTRY):
            _REGISTRY.append((section, check))
        return check

    return add


@functools.cache
def _discover() -> None:
    """Import each `trashfire.<package>.checks` once per process: importing registers it.
    The file is looked for first, since asking importlib about a package's submodule imports
    the package, and a package whose __init__ loaded torch or ART would load it into every
    table stage (tests/pipeline/test_architecture.py keeps each __init__ light)."""
    import trashfire

    for package in pkgutil.iter_modules(trashfire.__path__):
        folder = Path(package.module_finder.path) / package.name
        if package.ispkg and (folder / f"{CHECKS_MODULE}.py").is_file():
            importlib.import_module(f"trashfire.{package.name}.{CHECKS_MODULE}")


def registered() -> list[tuple[str, Check]]:
    """Every package's registered checks."""
    _discover()
    return list(_REGISTRY)


# the grid's options are checked first, in the grid's order, so that an attack's checks may
# rely on the data sets' class counts and the defences being well-formed
FIRST = ("data", "model", "defence", "attack")


def run_registered(cfg: DictConfig) -> None:
    order = {section: rank for rank, section in enumerate(FIRST)}
    for section, check in sorted(registered(), key=lambda item: order.get(item[0], len(FIRST))):
        if section in cfg:
            check(cfg)


def as_list(value: Any) -> list:
    """Grid values: a scalar is a one-value grid."""
    if OmegaConf.is_list(value) or isinstance(value, (list, tuple)):
        return list(value)
    return [value]


# --- primitives: each names the key and what is allowed -------------------------------------


def nonempty_mapping(key: str, value: Any) -> None:
    if not isinstance(value, (DictConfig, dict)) or len(value) == 0:
        raise ConfigError(key, "select at least one option (an empty grid runs nothing)")


def nonempty_list(key: str, value: Any) -> list:
    values = as_list(value)
    if not values or values == [None]:
        raise ConfigError(key, "must be a non-empty list (an empty grid runs nothing)")
    return values


def choice(key: str, value: Any, allowed: Sequence[str]) -> Any:
    if value not in allowed:
        raise ConfigError(key, f"got {value!r}; allowed: {', '.join(map(str, allowed))}")
    return value


def integer(key: str, value: Any, low=None, high=None, open_low=False, open_high=False) -> int:
    low = low + 1 if low is not None and open_low else low  # an open bound of integers
    high = high - 1 if high is not None and open_high else high
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"got {value!r}; must be an integer{range_text(low, high)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(key, f"got {value}; must be an integer{range_text(low, high)}")
    return value


def number(key, value, low=None, high=None, open_low=False, open_high=False) -> float:
    bounds = range_text(low, high, open_low, open_high)
    if isinstance(value, bool) or not isinstance(value, Number) or not math.isfinite(value):
        raise ConfigError(key, f"got {value!r}; must be a finite number{bounds}")
    too_low = low is not None and (value <= low if open_low else value < low)
    too_high = high is not None and (value >= high if open_high else value > high)
    if too_low or too_high:
        raise ConfigError(key, f"got {value}; must be a finite number{bounds}")
    return float(value)


def range_text(low, high, open_low=False, open_high=False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    if low is not None:
        return f" {'>' if open_low else '>='} {low}"
    if high is not None:
        return f" {'<' if open_high else '<='} {high}"
    return ""


# --- the rules reader: an option checked by its own rules ----------------------------------


def option_rules(group: str, name: str, spec: Any, required: Sequence[str] = ()) -> DictConfig:
    """The option's rules, after checking that it is a mapping with rules that declare at
    least `required`."""
    key = f"{group}.{name}"
    if not isinstance(spec, DictConfig):
        raise ConfigError(key, f"got {spec!r}; allowed: a mapping, one option of conf/{group}/")
    rules = spec.get(RULES)
    if not isinstance(rules, DictConfig):
        problem = f"got {rules!r}; allowed: a mapping" if rules is not None else "missing"
        raise ConfigError(
            f"{key}.{RULES}",
            f"{problem}; every {group} option states what it allows under `{RULES}:` (see the top of its conf/{group}/ file; an older params.yaml: run `make params`)",
        )
    for entry in required:
        if entry not in rules:
            raise ConfigError(f"{key}.{RULES}.{entry}", f"missing; every {group} option declares it (see the top of its conf/{group}/ file)")
    return rules


def check_keys(key: str, spec: DictConfig, rules: DictConfig, reserved: Sequence[str] = ()) -> None:
    """Apply each rule but the reserved ones to the option's key of its name."""
    for name, rule in rules.items():
        if name in reserved:
            continue
        check = rule_check(f"{key}.{RULES}.{name}", rule)
        value = spec.get(name)
        if value is None and name not in GRID_AXES:
            if check.get("optional"):
                continue
            raise ConfigError(f"{key}.{name}", f"missing; {key}.{RULES}.{name} requires it")
        for item in nonempty_list(f"{key}.{name}", value) if name in GRID_AXES or OmegaConf.is_list(value) else [value]:
            check_value(f"{key}.{name}", item, check)


def rule_check(key: str, rule: Any) -> dict[str, Any]:
    """A rule as a mapping of CHECK_FIELDS: a list is {one_of: the list}."""
    if OmegaConf.is_list(rule):
        rule = {"one_of": rule}
    if not OmegaConf.is_dict(rule) and not isinstance(rule, dict):
        raise ConfigError(key, f"got {rule!r}; allowed: a list of the values allowed, or a mapping of {', '.join(CHECK_FIELDS)}")
    check = {name: OmegaConf.to_container(value) if OmegaConf.is_config(value) else value for name, value in rule.items()}
    unknown = sorted(set(check) - set(CHECK_FIELDS))
    if unknown:
        raise ConfigError(key, f"unknown fields {unknown}; allowed: {', '.join(CHECK_FIELDS)}")
    if "one_of" in check:
        if not isinstance(check["one_of"], list) or not check["one_of"]:
            raise ConfigError(f"{key}.one_of", f"got {check['one_of']!r}; allowed: a non-empty list of the values allowed")
    elif check.get("kind") not in KINDS:
        raise ConfigError(f"{key}.kind", f"got {check.get('kind')!r}; allowed: {', '.join(KINDS)} (or one_of: [...])")
    for bound in ("low", "high"):
        if check.get(bound) is not None:
            number(f"{key}.{bound}", check[bound])
    return check


def check_value(key: str, value: Any, check: Mapping[str, Any]) -> Any:
    """One value against one check (see rule_check); a failure names the key, the value and
    what is allowed."""
    try:
        return _check_value(key, value, check)
    except ConfigError as err:
        if check.get("why"):
            raise ConfigError(err.key, f"{err.problem} ({check['why']})") from None
        raise


def _check_value(key: str, value: Any, check: Mapping[str, Any]) -> Any:
    if "one_of" in check:
        allowed = check["one_of"]
        if all(isinstance(a, str) for a in allowed):  # norms: 2 and "2" are one norm
            value = str(value)
        if value not in allowed or (isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed)):
            raise ConfigError(key, f"got {value!r}; allowed: {', '.join(map(str, allowed))}")
        return value
    bounds = {name: check.get(name) for name in ("low", "high")}
    opened = {name: bool(check.get(name, False)) for name in ("open_low", "open_high")}
    kind = check["kind"]
    if kind == "count":
        return integer(key, value, **bounds, **opened)
    if kind == "real":
        return number(key, value, **bounds, **opened)
    if kind == "path" and not (isinstance(value, str) and value):
        raise ConfigError(key, f"got {value!r}; allowed: a folder path")
    if kind == "flag" and not isinstance(value, bool):
        raise ConfigError(key, f"got {value!r}; allowed: true, false")
    if kind == "text" and not isinstance(value, str):
        raise ConfigError(key, f"got {value!r}; allowed: a string")
    return value


def strength_check(key: str, rules: DictConfig) -> dict[str, Any]:
    """The check of an option's `values`: a count (an integer) or a real (a finite number)."""
    check = rule_check(f"{key}.{RULES}.values", rules["values"])
    if check.get("kind") not in STRENGTH_KINDS:
        raise ConfigError(
            f"{key}.{RULES}.values.kind", f"got {check.get('kind')!r}; allowed: {', '.join(STRENGTH_KINDS)} (a strength is an integer or a finite number)"
        )
    return check
