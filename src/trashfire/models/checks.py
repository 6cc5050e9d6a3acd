"""The model, defence and train sections' checks, and an imported model's (registered with
trashfire.core.checks): each model and defence option by its own rules.

Torch-free: an external model's module is built (to check its `_target_` and kwargs) only
when the config has one.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from trashfire.core import external
from trashfire.core.checks import (
    RULES,
    as_list,
    check_keys,
    check_value,
    choice,
    integer,
    nonempty_list,
    nonempty_mapping,
    number,
    option_rules,
    register,
    strength_check,
)
from trashfire.core.errors import ConfigError
from trashfire.core.grid import TRAIN_DEFAULTS, defence_cell, options
from trashfire.models.spec import DEFENCE_STAGES, LR_SCHEDULES, OPTIMISERS


@register("model")
def check_models(cfg: DictConfig) -> None:
    _validate_models(options(cfg, "model"))


@register("defence")
def check_defences(cfg: DictConfig) -> None:
    _validate_defences(options(cfg, "defence"))
    _validate_defence_cell(cfg)


@register("train")
def check(cfg: DictConfig) -> None:
    _validate_train(cfg.train)
    _validate_per_model(cfg)
    _validate_pretraining(cfg)
    for name, spec in options(cfg, "model").items():
        if external.is_external(spec):
            _validate_external(f"model.{name}", spec)


def _validate_train(train: DictConfig) -> None:
    for epochs in nonempty_list("train.epochs", train.get("epochs")):
        integer("train.epochs", epochs, low=1)
    for lr in nonempty_list("train.lr", train.get("lr")):
        number("train.lr", lr, low=0, open_low=True)
    number("train.momentum", train.get("momentum"), low=0, high=1, open_high=True)
    number("train.weight_decay", train.get("weight_decay"), low=0)
    integer("train.batch_size", train.get("batch_size"), low=1)
    choice("train.lr_schedule", train.get("lr_schedule", TRAIN_DEFAULTS["lr_schedule"]), LR_SCHEDULES)
    choice("train.optimiser", train.get("optimiser", TRAIN_DEFAULTS["optimiser"]), OPTIMISERS)


def _validate_per_model(cfg: DictConfig) -> None:
    for name, own in (cfg.train.get("per_model") or {}).items():
        if name not in options(cfg, "model"):
            continue  # a preset's entry for a model this run leaves out
        key = f"train.per_model.{name}"
        unknown = set(own or {}) - {"epochs", "lr"}
        if unknown:
            raise ConfigError(key, f"unknown keys {sorted(unknown)}; allowed: epochs, lr")
        for epochs in nonempty_list(f"{key}.epochs", own["epochs"]) if "epochs" in own else []:
            integer(f"{key}.epochs", epochs, low=1)
        for lr in nonempty_list(f"{key}.lr", own["lr"]) if "lr" in own else []:
            number(f"{key}.lr", lr, low=0, open_low=True)


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


def _validate_external(key: str, spec: DictConfig) -> None:
    """A model trained elsewhere (trashfire.core.external): its module builds, its checkpoint
    exists and its training cost is supplied. Reading the checkpoint (keys, a forward pass on
    the prepared data) is the train stage's import, before it trains anything."""
    external.checkpoint_path(f"{key}.{external.CHECKPOINT}", spec.get(external.CHECKPOINT))
    external.t_train(key, spec)
    external.reported(key, spec)
    if spec.get("depth") is not None:
        integer(f"{key}.depth", spec.depth, low=1)
    from trashfire.models.external import counted_depth  # loads torch: only for an imported model

    counted_depth(key, spec)  # builds the module: a bad _target_ or kwargs fails here


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
