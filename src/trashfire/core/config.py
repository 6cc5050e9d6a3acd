"""Compose, load, validate and normalise configuration.

`conf/` is the one source of configuration; `params.yaml` is its composed snapshot that DVC
tracks. Every config is validated here before any data is loaded: a bad value raises
ConfigError, which the CLIs print as one line naming the key, what it got and what is allowed.

- `compose(overrides)`: Hydra's composition, as `dvc exp run -S` writes params.yaml, less
  the grid members a preset only gave values.
- `validate(cfg)`: checks only; it never changes cfg (it returns cfg itself, for chaining).
- `normalise(cfg)`: a copy as the stages run it: members a preset only gave values dropped,
  `defence_cell` folded into `defence` (see trashfire.core.stage.FOLDED_INTO).

Each data, model, defence and attack option states its own rules under `rules:` (documented
at the top of each conf/ group's files and in docs/design.md): the checks here are generic
and name no option, so adding an option is adding its YAML file. What stays in Python is
what the code implements: the engines, the defence stages, the data loaders.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trashfire.core import external
from trashfire.core.attack_versions import component_settings
from trashfire.core.checks import (
    ATTACK_PROPERTIES,
    RULES,
    check_keys,
    check_value,
    choice,
    integer,
    nonempty_list,
    nonempty_mapping,
    number,
    option_rules,
    rule_check,
    run_registered,
    strength_check,
)
from trashfire.core.clocks import CLOCKS
from trashfire.core.errors import ConfigError

DEFENCE_STAGES = ("none", "train", "predict")  # see trashfire.core.grid
ATTACK_UNITS = ("standardised", "pixel")
ENGINES = ("torch", "per_image", "sequence", "art")  # see trashfire.attacks.engine
TORCH_RULES = ("algorithm", "required", "early_exit", "kwargs", "any_kwargs")  # an attack's rules.torch
TORCH_ALGORITHMS = (
    "fgm",
    "pgd",
    "deepfool",
    "apgd",
    "fab",
    "square",
    "autoattack",
)  # the torch engine's loops, rules.torch.algorithm (trashfire.attacks.engine.ALGORITHMS)
# an attack's rules read beside its own keys: engine, torch, classes (a check of every
# selected data set's n_classes) and components (true: kwargs.components are attack options,
# each checked by its own rules at the composite's norms and values)
ATTACK_RULES = ("engine", "torch", "classes", "components")


def config_dir() -> Path:
    """conf/ of the project being run: $TRASHFIRE_CONFIG_DIR, else ./conf."""
    return Path(os.environ.get("TRASHFIRE_CONFIG_DIR", "conf")).resolve()


def compose(overrides: Sequence[str] = (), conf: Path | None = None) -> DictConfig:
    """Compose conf/config.yaml with Hydra overrides, as `dvc exp run -S` does, less the grid
    members a preset only gave values (`drop_leftovers`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    conf = conf or config_dir()
    if not (conf / "config.yaml").is_file():
        raise ConfigError("config dir", f"{conf}/config.yaml not found; run from the project root")
    check_override_form(overrides)
    check_group_options(overrides, conf)
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return drop_leftovers(hydra_compose(config_name="config", overrides=list(overrides)))
    except (HydraException, OmegaConfBaseException) as err:
        raise composition_error(err) from None


def check_override_form(overrides: Iterable[str]) -> None:
    """Hydra's own message for `train.epochs` (no value) names no key and spans three lines."""
    for override in overrides:
        key, sep, _ = override.partition("=")
        if not override.startswith("~") and (not sep or not key.lstrip("+")):
            raise ConfigError(override, "overrides take the form key=value (+key=value adds a key, ~key removes one)")


def composition_error(err: Exception) -> ConfigError:
    """One line from Hydra's several: the override it could not parse, or the key that is not
    there with the keys that are (a misspelt key must not pass for a new one)."""
    from hydra.errors import OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(err, OverrideParseException):
        lines = [line for line in err.message.splitlines() if line.strip() and not line.startswith(("See ", "Error parsing"))]
        reason = lines[0] if lines else "not Hydra's override grammar"
        return ConfigError(err.override.partition("=")[0], f"cannot parse {err.override!r}: {reason}; lists are written [a,b]")
    cause, parent = err.__cause__, getattr(err.__cause__, "parent_node", None)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and isinstance(parent, DictConfig) and cause.full_key:
        known = ", ".join(key for key in parent if key != "hydra")
        return ConfigError(cause.full_key, f"no such key; allowed here: {known} (+{cause.full_key}=<value> adds a new one)")
    return ConfigError("overrides", str(err).strip().splitlines()[0])


def check_group_options(overrides: Iterable[str], conf: Path) -> None:
    """Name the allowed options of a config group when an override picks an unknown one."""
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        group_dir = conf / key
        if not sep or not group_dir.is_dir():
            continue
        options = sorted(p.stem for p in group_dir.glob("*.yaml"))
        sweep = re.fullmatch(r"(\w+)\((.*)\)", value)  # choice(a,b) of a sweeper
        if sweep:
            if sweep.group(1) != "choice":
                continue
            value = sweep.group(2)
        for picked in value.strip("[]").split(","):
            picked = picked.strip()
            if picked and picked != "null" and picked not in options:
                raise ConfigError(key, f"unknown option {picked!r}; available: {', '.join(options)}")


def load_params(path: str | Path = "params.yaml") -> DictConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("params", f"{path} not found; run `make params` to compose it from conf/")
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # yaml errors carry several lines; keep the first
        raise ConfigError("params", f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError("params", f"{path} must hold a mapping")
    return cfg


GRID_GROUPS = ("data", "model", "defence", "attack")
OPTION_KEYS = ("_target_", "source", "stage")  # every option of a grid group has one


def is_leftover(spec: Any) -> bool:
    """A grid member that only a preset's values created: `experiment=trashfire_paper
    attack=[fgm]` leaves `attack.pgd: {values: ...}` behind, which is no option at all."""
    return OmegaConf.is_dict(spec) and not any(key in spec for key in OPTION_KEYS)


def options(cfg: DictConfig, group: str) -> dict[str, Any]:
    """The selected options of a grid group, by name, leftovers left out."""
    members = cfg.get(group)
    if not OmegaConf.is_dict(members):
        return {}
    return {name: spec for name, spec in members.items() if not is_leftover(spec)}


def drop_leftovers(cfg: DictConfig) -> DictConfig:
    """Remove the leftovers of every grid group from cfg itself (a composition of our own)."""
    for group in GRID_GROUPS:
        members = cfg.get(group)
        if OmegaConf.is_dict(members):
            with open_dict(members):
                for name in [n for n, spec in members.items() if is_leftover(spec)]:
                    del members[name]
    return cfg


def normalise(cfg: DictConfig) -> DictConfig:
    """The config as the stages run it, a copy (cfg is left as it is): leftovers dropped (a
    params.yaml of `dvc exp run -S`, or Hydra's own composition, has them), and
    `defence_cell: <defence>@<value>` keeping that one defence at that one value (a sweep's
    defence x value axis as a single parameter). Validate cfg first."""
    cfg = drop_leftovers(copy.deepcopy(cfg))
    cell = defence_cell(cfg)
    if cell is not None:
        name, value = cell
        spec = cfg.defence[name]
        with open_dict(cfg):
            spec["values"] = [value]
            cfg.defence = {name: spec}
    return cfg


def defence_cell(cfg: DictConfig) -> tuple[str, Any] | None:
    """`defence_cell` as (defence, value); None when it is null."""
    cell = cfg.get("defence_cell")
    if cell is None:
        return None
    defences = options(cfg, "defence")
    name, sep, text = str(cell).partition("@")
    allowed = f"<defence>@<value> with a selected defence ({', '.join(defences)}), e.g. fsq@4 or none@0"
    if not sep or name not in defences or not text:
        raise ConfigError("defence_cell", f"got {cell!r}; allowed: {allowed}")
    return name, _parse_scalar(text)


def _parse_scalar(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def validate(cfg: DictConfig) -> DictConfig:
    """Check every value the pipeline reads; raise ConfigError on the first bad one. cfg is
    not changed (`normalise` makes the config the stages run); it is returned for chaining.
    Here: the sections, paths, and the grid's options by their own rules; then each package's
    own checks (`trashfire.<package>.checks`, see trashfire.core.checks)."""
    for section in ("data", "split", "model", "defence", "attack", "train", "timing", "paths"):
        if not isinstance(cfg.get(section), DictConfig):
            raise ConfigError(section, _missing_section(section, cfg.get(section)))
    _validate_paths(cfg.paths)
    _validate_models(options(cfg, "model"))
    _validate_defences(options(cfg, "defence"))
    _validate_defence_cell(cfg)
    _validate_attacks(options(cfg, "attack"), {name: spec.n_classes for name, spec in options(cfg, "data").items()})
    choice("timing.clock", cfg.timing.get("clock"), CLOCKS)
    run_registered(cfg)
    return cfg


def _missing_section(section: str, value: Any) -> str:
    """`model=[]` composes to no model section at all: say so as an empty grid."""
    if value is not None:
        return f"got {value!r}; allowed: a mapping, as `make params` composes it"
    if section in GRID_GROUPS:
        return "missing or empty; select at least one option (an empty grid runs nothing), and compose params.yaml with `make params`"
    return "missing section; compose params.yaml with `make params`"


def _validate_paths(paths: DictConfig) -> None:
    """A path that is no string, or a file where a folder must go, would otherwise fail only
    when the first result is written, after the training it was to keep."""
    allowed = "a folder path (an existing folder, or one that can be created)"
    for key in paths:
        value = paths.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"paths.{key}", f"got {value!r}; allowed: {allowed}")
        blocker = _file_in_the_way(Path(value))
        if blocker is not None:
            raise ConfigError(f"paths.{key}", f"{blocker} is a file; allowed: {allowed}")


def _file_in_the_way(folder: Path) -> Path | None:
    """The folder itself or its nearest existing ancestor, where that is not a folder."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


# --- the grid's options, each checked by its own rules ----------------------------------------


def _validate_models(models: dict[str, Any]) -> None:
    nonempty_mapping("model", models)
    for name, spec in models.items():
        rules = option_rules("model", name, spec)
        if external.is_external(spec):  # its module and checkpoint: trashfire.models.checks
            check_keys(f"model.{name}", spec, rules)
            continue
        if not isinstance(spec.get("_target_"), str):
            raise ConfigError(f"model.{name}._target_", "missing; name the builder, e.g. trashfire.models.resnet")
        integer(f"model.{name}.depth", spec.get("depth"), low=1)
        check_keys(f"model.{name}", spec, rules)


def _validate_defences(defences: dict[str, Any]) -> None:
    nonempty_mapping("defence", defences)
    for name, spec in defences.items():
        key = f"defence.{name}"
        rules = option_rules("defence", name, spec, required=("stage",))
        stage = choice(f"{key}.stage", spec.get("stage"), DEFENCE_STAGES)
        values = nonempty_list(f"{key}.values", spec.get("values"))
        check_keys(key, spec, rules, reserved=("values",))
        if stage == "none":
            continue
        if not spec.get("_target_"):
            raise ConfigError(f"{key}._target_", "missing; name the ART defence class to build")
        if "values" not in rules:
            raise ConfigError(f"{key}.{RULES}.values", f"missing; a {stage}-time defence declares its value's kind (count or real) and range")
        check = strength_check(key, rules)
        _validate_defence_models(key, spec)
        for value in values:
            check_value(f"{key}.values", value, check)


def _validate_defence_models(key: str, spec: DictConfig) -> None:
    only = spec.get("models")
    if only is None:
        return
    if spec.stage != "train":
        raise ConfigError(f"{key}.models", "limits a train-time defence to some models; a predict-time defence reuses every model's weights: remove it")
    nonempty_list(f"{key}.models", only)


def _validate_defence_cell(cfg: DictConfig) -> None:
    """The value `normalise` gives the defence must pass that defence's rules."""
    cell = defence_cell(cfg)
    if cell is None:
        return
    name, value = cell
    spec = cfg.defence[name]
    if spec.stage != "none":
        check = strength_check(f"defence.{name}", spec[RULES])
        why = f"the value of {name}: defence.{name}.{RULES}.values" + (f", {check['why']}" if check.get("why") else "")
        check_value("defence_cell", value, {**check, "why": why})


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
    units = choice(f"{key}.units", spec.get("units", "standardised"), ATTACK_UNITS)
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
    attack's name, decides (trashfire.attacks.engine.ALGORITHMS)."""
    algorithm = torch_rules.get("algorithm")
    if algorithm not in TORCH_ALGORITHMS:
        problem = "missing" if algorithm is None else f"got {algorithm!r}"
        raise ConfigError(
            f"{key}.{RULES}.torch.algorithm",
            f"{problem}; allowed: {', '.join(TORCH_ALGORITHMS)} (the torch engine's loop that runs this attack), or leave torch out of {RULES}.engine",
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
