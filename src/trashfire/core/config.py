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
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from numbers import Number
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trashfire.core import external
from trashfire.core.clocks import CLOCKS
from trashfire.core.errors import ConfigError
from trashfire.data.loaders import LOADERS
from trashfire.survival.data import BEFORE_ATTACK_POLICIES, DUMMY_SOURCES, NONPOSITIVE_POLICIES, NUMERIC_COVARIATES

DATA_SOURCES = (*LOADERS, "fusion")  # the loaders of trashfire.data.datasets; fusion mixes two of them
DEFENCE_STAGES = ("none", "train", "predict")  # see trashfire.core.grid
LR_SCHEDULES = ("constant", "step_half", "one_cycle")
ATTACK_UNITS = ("standardised", "pixel")
ENGINES = ("torch", "per_image", "sequence", "art")  # see trashfire.attacks.engine
AUC_UNITS = ATTACK_UNITS
SURVIVAL_SCORES = ("test_ICI", "ICI", "test_E50", "E50", "AIC", "BIC", "test_concordance", "concordance")
SURVIVAL_SPLIT_GROUPS = ("train_hash", "model_hash", "attack_hash")  # survival data label columns a split keeps together
OPTIMISERS = ("BFGS", "L-BFGS-B", "SLSQP", "CG", "TNC")  # scipy methods that use lifelines' gradient

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
TORCH_RULES = ("required", "early_exit", "kwargs", "any_kwargs")  # an attack's rules.torch
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
        for choice in value.strip("[]").split(","):
            choice = choice.strip()
            if choice and choice != "null" and choice not in options:
                raise ConfigError(key, f"unknown option {choice!r}; available: {', '.join(options)}")


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


def as_list(value: Any) -> list:
    """Grid values: a scalar is a one-value grid."""
    if OmegaConf.is_list(value) or isinstance(value, (list, tuple)):
        return list(value)
    return [value]


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
    not changed (`normalise` makes the config the stages run); it is returned for chaining."""
    for section in ("data", "split", "model", "defence", "attack", "train", "timing", "paths"):
        if not isinstance(cfg.get(section), DictConfig):
            raise ConfigError(section, _missing_section(section, cfg.get(section)))
    _validate_paths(cfg.paths)
    _validate_split(cfg.split)  # first: the data check compares subsample with split.n_attack
    _validate_data(cfg)
    _validate_models(options(cfg, "model"))
    _validate_defences(options(cfg, "defence"))
    _validate_defence_cell(cfg)
    _validate_attacks(options(cfg, "attack"), {name: spec.n_classes for name, spec in options(cfg, "data").items()})
    _validate_train(cfg.train)
    _validate_per_model(cfg)
    _validate_pretraining(cfg)
    _choice("timing.clock", cfg.timing.get("clock"), CLOCKS)
    if "survival" in cfg:
        _validate_survival(cfg.survival)
    if "metrics" in cfg:
        _validate_metrics(cfg.metrics)
        _check_auc_interval(cfg)
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


def _check_auc_interval(cfg: DictConfig) -> None:
    """R integrates each eps family's curve up to eps1: a grid in the same units must reach it.
    (A grid in the other units is checked per data set by `aggregate`, which knows its std.)"""
    auc = cfg.metrics.auc
    if auc.get("eps1") is None:
        return
    for name, spec in options(cfg, "attack").items():
        if spec.get("param") != "eps" or spec.get("units", "standardised") != auc.get("units"):
            continue
        largest = max(as_list(spec["values"]))
        if auc.eps1 > largest:
            raise ConfigError(
                "metrics.auc.eps1", f"{auc.eps1} exceeds the largest eps {largest} of attack.{name} ({auc.units} units); lower it or extend the grid"
            )


# --- the grid's options, each checked by its own rules ----------------------------------------


def _option(group: str, name: str, spec: Any, required: Sequence[str] = ()) -> DictConfig:
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


def _check_keys(key: str, spec: DictConfig, rules: DictConfig, reserved: Sequence[str] = ()) -> None:
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
        for item in _nonempty_list(f"{key}.{name}", value) if name in GRID_AXES or OmegaConf.is_list(value) else [value]:
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
            _number(f"{key}.{bound}", check[bound])
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
        return _integer(key, value, **bounds, **opened)
    if kind == "real":
        return _number(key, value, **bounds, **opened)
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


def _validate_data(cfg: DictConfig) -> None:
    data = options(cfg, "data")
    _nonempty_mapping("data", data)
    for name, spec in data.items():
        key = f"data.{name}"
        rules = _option("data", name, spec)
        _choice(f"{key}.source", spec.get("source"), DATA_SOURCES)
        _integer(f"{key}.n_classes", spec.get("n_classes"), low=2)
        for option in ("size", "channels"):
            if spec.get(option) is not None:
                _integer(f"{key}.{option}", spec[option], low=1)
        _check_keys(key, spec, rules)
        if spec.get("subsample") is not None:
            _integer(f"{key}.subsample", spec.subsample, low=cfg.split.get("n_attack", 1) * 2)


def _validate_split(split: DictConfig) -> None:
    seeds = _nonempty_list("split.seeds", split.get("seeds"))
    for seed in seeds:
        _integer("split.seeds", seed, low=0)
    _number("split.test_size", split.get("test_size"), low=0, high=1, open_low=True, open_high=True)
    _integer("split.n_attack", split.get("n_attack"), low=1)


def _validate_models(models: dict[str, Any]) -> None:
    _nonempty_mapping("model", models)
    for name, spec in models.items():
        rules = _option("model", name, spec)
        if external.is_external(spec):
            _validate_external(f"model.{name}", spec)
            _check_keys(f"model.{name}", spec, rules)
            continue
        if not isinstance(spec.get("_target_"), str):
            raise ConfigError(f"model.{name}._target_", "missing; name the builder, e.g. trashfire.models.resnet")
        _integer(f"model.{name}.depth", spec.get("depth"), low=1)
        _check_keys(f"model.{name}", spec, rules)


def _validate_external(key: str, spec: DictConfig) -> None:
    """A model trained elsewhere (trashfire.core.external): its module builds, its checkpoint
    exists and its training cost is supplied. Reading the checkpoint (keys, a forward pass on
    the prepared data) is the train stage's import, before it trains anything."""
    external.checkpoint_path(f"{key}.{external.CHECKPOINT}", spec.get(external.CHECKPOINT))
    external.t_train(key, spec)
    if spec.get("depth") is not None:
        _integer(f"{key}.depth", spec.depth, low=1)
    external.counted_depth(key, spec)  # builds the module: a bad _target_ or kwargs fails here


def _validate_defences(defences: dict[str, Any]) -> None:
    _nonempty_mapping("defence", defences)
    for name, spec in defences.items():
        key = f"defence.{name}"
        rules = _option("defence", name, spec, required=("stage",))
        stage = _choice(f"{key}.stage", spec.get("stage"), DEFENCE_STAGES)
        values = _nonempty_list(f"{key}.values", spec.get("values"))
        _check_keys(key, spec, rules, reserved=("values",))
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
    _nonempty_list(f"{key}.models", only)


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
    _nonempty_mapping("attack", attacks)
    for name, spec in attacks.items():
        _validate_attack(f"attack.{name}", name, spec, attacks, classes)


def _validate_attack(key: str, name: str, spec: Any, attacks: dict[str, Any], classes: Mapping[str, int]) -> None:
    rules = _option("attack", name, spec, required=("norms", "values", "engine"))
    if not isinstance(spec.get("_target_"), str) or not isinstance(spec.get("param"), str):
        missing = "_target_" if not isinstance(spec.get("_target_"), str) else "param"
        raise ConfigError(f"{key}.{missing}", "missing; name the ART attack class (_target_) and the argument its strength sets (param)")
    kind = strength_check(key, rules)["kind"]
    _check_keys(key, spec, rules, reserved=ATTACK_RULES)
    if "batch_size" in spec:
        _integer(f"{key}.batch_size", spec.batch_size, low=1)
    if spec.get("samples") is not None:
        _integer(f"{key}.samples", spec.samples, low=1)
    if "max_iter" in spec:
        _integer(f"{key}.max_iter", spec.max_iter, low=1)
    if "step_scale" in spec:
        _number(f"{key}.step_scale", spec.step_scale, low=0, open_low=True)
    units = _choice(f"{key}.units", spec.get("units", "standardised"), ATTACK_UNITS)
    if units == "pixel" and kind != "real":
        raise ConfigError(
            f"{key}.units",
            f"got 'pixel'; pixel units convert a real strength (eps), and {name}'s values are {kind}s ({key}.{RULES}.values); allowed: standardised",
        )
    _validate_classes(key, rules, classes)
    _validate_engine(key, spec, rules, attacks)
    if rules.get("components") is not None:
        _validate_components(key, spec, rules, attacks, classes)


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
    values of their own: the composite's), each checked by its own rules; the sequence engine
    runs each image by image, so each must allow per_image."""
    if not isinstance(rules.components, bool):
        raise ConfigError(f"{key}.{RULES}.components", f"got {rules.components!r}; allowed: true (kwargs.components are attack options), false")
    if not rules.components:
        return
    components = (spec.get("kwargs") or {}).get("components")
    if not isinstance(components, DictConfig) or len(components) == 0:
        raise ConfigError(f"{key}.kwargs.components", f"got {components!r}; allowed: a mapping of attack options, run in its order")
    engine = spec.get("engine") or engines_of(key, rules)[0]
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
        if engine == "sequence" and "per_image" not in engines_of(where, merged[RULES]):
            raise ConfigError(f"{where}.{RULES}.engine", f"the sequence engine runs each component image by image; {name} must allow per_image")


def engines_of(key: str, rules: DictConfig) -> list[str]:
    """The engines an attack's rules allow, the first its default."""
    engines = rules.get("engine")
    if not OmegaConf.is_list(engines) or not engines:
        raise ConfigError(f"{key}.{RULES}.engine", f"got {engines!r}; allowed: a non-empty list of {', '.join(ENGINES)}, the first the default")
    for engine in engines:
        _choice(f"{key}.{RULES}.engine", engine, ENGINES)
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


def _validate_train(train: DictConfig) -> None:
    for epochs in _nonempty_list("train.epochs", train.get("epochs")):
        _integer("train.epochs", epochs, low=1)
    for lr in _nonempty_list("train.lr", train.get("lr")):
        _number("train.lr", lr, low=0, open_low=True)
    _number("train.momentum", train.get("momentum"), low=0, high=1, open_high=True)
    _number("train.weight_decay", train.get("weight_decay"), low=0)
    _integer("train.batch_size", train.get("batch_size"), low=1)
    _choice("train.lr_schedule", train.get("lr_schedule", "constant"), LR_SCHEDULES)
    device = train.get("device")
    if not isinstance(device, str) or not (device in ("auto", "cpu") or device.startswith("cuda")):
        raise ConfigError("train.device", f"got {device!r}; allowed: auto, cpu, cuda, cuda:N")
    workers = train.get("workers", "auto")
    if workers != "auto" and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError("train.workers", f"got {workers!r}; allowed: auto, or a number of processes >= 1")
    threads = train.get("threads", 1)
    if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError("train.threads", f"got {threads!r}; allowed: a number of threads per cell >= 1, or auto (cores / workers)")


def _validate_per_model(cfg: DictConfig) -> None:
    for name, own in (cfg.train.get("per_model") or {}).items():
        if name not in options(cfg, "model"):
            continue  # a preset's entry for a model this run leaves out
        key = f"train.per_model.{name}"
        unknown = set(own or {}) - {"epochs", "lr"}
        if unknown:
            raise ConfigError(key, f"unknown keys {sorted(unknown)}; allowed: epochs, lr")
        for epochs in _nonempty_list(f"{key}.epochs", own["epochs"]) if "epochs" in own else []:
            _integer(f"{key}.epochs", epochs, low=1)
        for lr in _nonempty_list(f"{key}.lr", own["lr"]) if "lr" in own else []:
            _number(f"{key}.lr", lr, low=0, open_low=True)


def _validate_pretraining(cfg: DictConfig) -> None:
    for name, bases in (cfg.train.get("pretrained_on") or {}).items():
        if name not in options(cfg, "data"):
            continue  # a preset's entry for a data set this run leaves out
        key = f"train.pretrained_on.{name}"
        bases = as_list(bases)
        if not bases:
            raise ConfigError(key, "must be a non-empty list; [null] trains from scratch")
        allowed = [other for other in options(cfg, "data") if other != name]
        for base in bases:
            if base is not None and base not in allowed:
                raise ConfigError(key, f"got {base!r}; allowed: null (from scratch), {', '.join(allowed) or 'another selected data set'}")


def _validate_survival(survival: DictConfig) -> None:
    data = survival.get("data")
    if not isinstance(data, DictConfig):
        raise ConfigError("survival.data", "missing; compose params.yaml with `make params`")
    for covariate in as_list(data.get("covariates") or []):
        _choice("survival.data.covariates", covariate, NUMERIC_COVARIATES)
    for kind in as_list(data.get("dummies") or []):
        _choice("survival.data.dummies", kind, tuple(DUMMY_SOURCES))
    if data.get("misclassified_before_attack") in ("attack_time", "predict_time"):
        raise ConfigError(
            "survival.data.misclassified_before_attack",
            f"{data.misclassified_before_attack} was removed with the per-sample failure clock; allowed: first_query (such a sample fails at its share of the first query), drop",
        )
    _choice("survival.data.misclassified_before_attack", data.get("misclassified_before_attack"), BEFORE_ATTACK_POLICIES)
    _choice("survival.data.nonpositive_durations", data.get("nonpositive_durations"), NONPOSITIVE_POLICIES)
    models = survival.get("models")
    _nonempty_mapping("survival.models", models)
    fitters = _nonempty_list("survival.fitters", survival.get("fitters"))
    for fitter in fitters:
        _choice("survival.fitters", fitter, tuple(models))
        _validate_survival_model(f"survival.models.{fitter}", models[fitter])
    for number, retry in enumerate(as_list(survival.get("retries") or [])):
        _validate_retry(f"survival.retries[{number}]", retry)
    aft = tuple(f for f in fitters if models[f].get("aft"))
    if survival.get("chosen") is not None:
        _choice("survival.chosen", survival.chosen, aft)
    _choice("survival.select_by", survival.get("select_by"), SURVIVAL_SCORES)
    _choice("survival.split_by", survival.get("split_by"), SURVIVAL_SPLIT_GROUPS)
    _number("survival.test_size", survival.get("test_size"), low=0, high=1, open_low=True, open_high=True)
    _integer("survival.seed", survival.get("seed"), low=0)
    _number("survival.t0_quantile", survival.get("t0_quantile"), low=0, high=1, open_low=True, open_high=True)
    _number("survival.km_check_tolerance", survival.get("km_check_tolerance"), low=0, open_low=True)


def _validate_survival_model(key: str, spec: Any) -> None:
    if not isinstance(spec, DictConfig) or not isinstance(spec.get("fitter"), DictConfig) or not isinstance(spec.fitter.get("_target_"), str):
        raise ConfigError(f"{key}.fitter._target_", "missing; name the lifelines fitter class, e.g. lifelines.WeibullAFTFitter")
    _number(f"{key}.fitter.penalizer", spec.fitter.get("penalizer", 0.0), low=0)
    if not isinstance(spec.get("aft"), bool):
        raise ConfigError(f"{key}.aft", f"got {spec.get('aft')!r}; allowed: true (an AFT model, gives E[T]), false")
    if spec.get("optimiser") is not None:
        _choice(f"{key}.optimiser", spec.optimiser, OPTIMISERS)
    if spec.get("t0_quantile") is not None:
        _number(f"{key}.t0_quantile", spec.t0_quantile, low=0, high=1, open_low=True, open_high=True)
    _fit_options(f"{key}.fit_options", spec.get("fit_options"))


def _fit_options(key: str, options: Any) -> None:
    if options is not None and not isinstance(options, DictConfig):
        raise ConfigError(key, f"got {options!r}; allowed: a mapping of the optimiser's options, e.g. {{maxiter: 500}}")


def _validate_retry(key: str, retry: Any) -> None:
    if not isinstance(retry, DictConfig) or not set(retry) or set(retry) - {"optimiser", "penalizer", "fit_options"}:
        raise ConfigError(key, f"got {retry!r}; allowed: a mapping of optimiser ({', '.join(OPTIMISERS)}), penalizer (>= 0), fit_options")
    if retry.get("optimiser") is not None:
        _choice(f"{key}.optimiser", retry.optimiser, OPTIMISERS)
    if "penalizer" in retry:
        _number(f"{key}.penalizer", retry.penalizer, low=0)
    _fit_options(f"{key}.fit_options", retry.get("fit_options"))


def _validate_metrics(metrics: DictConfig) -> None:
    _number("metrics.evp.w", metrics.evp.get("w"), low=0, open_low=True)
    if metrics.evp.get("tau") is not None:
        _number("metrics.evp.tau", metrics.evp.tau, low=0, high=1, open_low=True)
    _integer("metrics.evp.tau_grid", metrics.evp.get("tau_grid"), low=2)
    for k in _nonempty_list("metrics.evp.table_classes", metrics.evp.get("table_classes")):
        _integer("metrics.evp.table_classes", k, low=2)
    _choice("metrics.auc.units", metrics.auc.get("units"), AUC_UNITS)
    eps0 = _number("metrics.auc.eps0", metrics.auc.get("eps0"), low=0)
    if metrics.auc.get("eps1") is not None:
        _number("metrics.auc.eps1", metrics.auc.eps1, low=eps0, open_low=True)
    if metrics.trash.get("eps_max") is not None:
        _number("metrics.trash.eps_max", metrics.trash.eps_max, low=0, open_low=True)
    degenerate = metrics.get("degenerate")
    if not isinstance(degenerate, DictConfig):
        raise ConfigError("metrics.degenerate", "missing; compose params.yaml with `make params`")
    if degenerate.get("margin") is not None:
        _number("metrics.degenerate.margin", degenerate.margin, low=0, high=1)
    findings = metrics.get("findings")
    if not isinstance(findings, DictConfig):
        raise ConfigError("metrics.findings", "missing; compose params.yaml with `make params`")
    _number("metrics.findings.alpha", findings.get("alpha"), low=0, high=1, open_low=True, open_high=True)
    _integer("metrics.findings.bootstrap", findings.get("bootstrap"), low=100)
    _integer("metrics.trash.bootstrap", metrics.trash.get("bootstrap"), low=100)
    _integer("metrics.trash.seed", metrics.trash.get("seed"), low=0)
    _validate_eps_survival(metrics.get("eps_survival"))
    _validate_brittle(metrics.get("brittle"))
    _validate_validity(metrics.get("validity"))


def _validate_validity(validity) -> None:
    if validity is None:
        raise ConfigError("metrics.validity", "missing; compose params.yaml with `make params`")
    for key in ("rise_tol", "black_box_tol", "gradient_share", "near_zero"):
        _number(f"metrics.validity.{key}", validity.get(key), low=0, high=1)
    names = validity.get("black_box")
    if not isinstance(names, Sequence) or isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ConfigError("metrics.validity.black_box", f"got {names!r}; must be a list of attack names (e.g. [square, hsj])")


def _validate_eps_survival(eps: Any) -> None:
    key = "metrics.eps_survival"
    if not isinstance(eps, DictConfig):
        raise ConfigError(key, "missing; compose params.yaml with `make params`")
    for name in as_list(eps.get("minimal") or []):
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{key}.minimal", f"got {name!r}; must be a list of attack names (minimal-perturbation attacks, e.g. deepfool)")
    _choice(f"{key}.minimal_units", eps.get("minimal_units"), ATTACK_UNITS)
    if eps.get("minimal_eps_max") is not None:
        _number(f"{key}.minimal_eps_max", eps.minimal_eps_max, low=0, open_low=True)


def _validate_brittle(brittle: Any) -> None:
    """002's LIME settings for the brittle stage."""
    key = "metrics.brittle"
    if not isinstance(brittle, DictConfig):
        raise ConfigError(key, "missing; compose params.yaml with `make params`")
    _integer(f"{key}.n_samples", brittle.get("n_samples"), low=1)
    _integer(f"{key}.lime_samples", brittle.get("lime_samples"), low=2)  # a fit needs two points at least
    _integer(f"{key}.perturbations_per_eval", brittle.get("perturbations_per_eval"), low=1)
    _integer(f"{key}.seed", brittle.get("seed"), low=0)
    segments = brittle.get("segments")
    _nonempty_mapping(f"{key}.segments", segments)
    _choice(f"{key}.segments.kind", segments.get("kind"), ("slic", "grid"))
    _integer(f"{key}.segments.n_segments", segments.get("n_segments"), low=2)
    _number(f"{key}.segments.compactness", segments.get("compactness"), low=0, open_low=True)
    _integer(f"{key}.segments.patch", segments.get("patch"), low=1)
    robust = brittle.get("robust_acc")
    _nonempty_mapping(f"{key}.robust_acc", robust)
    if not isinstance(robust.get("attack"), str):
        raise ConfigError(f"{key}.robust_acc.attack", f"got {robust.get('attack')!r}; allowed: an attack name, e.g. pgd")
    if robust.get("eps") is not None:
        _number(f"{key}.robust_acc.eps", robust.eps, low=0, open_low=True)


# --- primitive checks: each names the key and what is allowed ----------------------------


def _nonempty_mapping(key: str, value: Any) -> None:
    if not isinstance(value, (DictConfig, dict)) or len(value) == 0:
        raise ConfigError(key, "select at least one option (an empty grid runs nothing)")


def _nonempty_list(key: str, value: Any) -> list:
    values = as_list(value)
    if not values or values == [None]:
        raise ConfigError(key, "must be a non-empty list (an empty grid runs nothing)")
    return values


def _choice(key: str, value: Any, allowed: Sequence[str]) -> Any:
    if value not in allowed:
        raise ConfigError(key, f"got {value!r}; allowed: {', '.join(map(str, allowed))}")
    return value


def _integer(key: str, value: Any, low=None, high=None, open_low=False, open_high=False) -> int:
    low = low + 1 if low is not None and open_low else low  # an open bound of integers
    high = high - 1 if high is not None and open_high else high
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"got {value!r}; must be an integer{_range(low, high)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(key, f"got {value}; must be an integer{_range(low, high)}")
    return value


def _number(key, value, low=None, high=None, open_low=False, open_high=False) -> float:
    bounds = _range(low, high, open_low, open_high)
    if isinstance(value, bool) or not isinstance(value, Number) or not math.isfinite(value):
        raise ConfigError(key, f"got {value!r}; must be a finite number{bounds}")
    too_low = low is not None and (value <= low if open_low else value < low)
    too_high = high is not None and (value >= high if open_high else value > high)
    if too_low or too_high:
        raise ConfigError(key, f"got {value}; must be a finite number{bounds}")
    return float(value)


def _range(low, high, open_low=False, open_high=False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    if low is not None:
        return f" {'>' if open_low else '>='} {low}"
    if high is not None:
        return f" {'<' if open_high else '<='} {high}"
    return ""
