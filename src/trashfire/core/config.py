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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trashfire.core.checks import choice, moved, refuse_moved, refuse_moved_keys, run_registered
from trashfire.core.clocks import CLOCKS
from trashfire.core.errors import ConfigError
from trashfire.core.grid import GRID_GROUPS, defence_cell, drop_leftovers

moved("timing.clock", "clock")  # a shared key: timing, survival and aggregate read it
for _key in ("device", "workers", "threads", "progress"):  # shared by every stage that computes
    moved(f"train.{_key}", f"compute.{_key}")


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
    for override in overrides:
        refuse_moved(override.partition("=")[0])
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


def validate(cfg: DictConfig) -> DictConfig:
    """Check every value the pipeline reads; raise ConfigError on the first bad one. cfg is
    not changed (`normalise` makes the config the stages run); it is returned for chaining.
    Here: the sections, paths and clock; then each package's own checks
    (`trashfire.<package>.checks`, see trashfire.core.checks), the grid's options first."""
    for section in ("data", "split", "model", "defence", "attack", "train", "compute", "timing", "viability", "paths"):
        if not isinstance(cfg.get(section), DictConfig):
            raise ConfigError(section, _missing_section(section, cfg.get(section)))
    refuse_moved_keys(cfg)
    _validate_paths(cfg.paths)
    choice("clock", cfg.get("clock"), CLOCKS)
    _validate_compute(cfg.compute)
    run_registered(cfg)
    return cfg


def _validate_compute(compute: DictConfig) -> None:
    """Where and in how many processes the stages compute (trashfire.core.parallel)."""
    device = compute.get("device")
    if not isinstance(device, str) or not (device in ("auto", "cpu") or device.startswith("cuda")):
        raise ConfigError("compute.device", f"got {device!r}; allowed: auto, cpu, cuda, cuda:N")
    workers = compute.get("workers")
    if workers != "auto" and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError("compute.workers", f"got {workers!r}; allowed: auto, or a number of processes >= 1")
    threads = compute.get("threads")
    if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError("compute.threads", f"got {threads!r}; allowed: a number of threads per cell >= 1, or auto (cores / workers)")
    if not isinstance(compute.get("progress"), bool):
        raise ConfigError("compute.progress", f"got {compute.get('progress')!r}; allowed: true, false")


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
