"""Hydra's composition of each trial's config, cached per set of config-group choices."""

from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Sequence
from textwrap import dedent
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException


def apply_value_overrides(overrides: Sequence[Override], cfg: DictConfig) -> None:
    """Value overrides (key=value, +key=value, ++key=value, ~key) applied to a composed config,
    as Hydra's config loader applies them (hydra/_internal/config_loader_impl.py, MIT)."""
    for override in overrides:
        if override.package is not None:
            raise ConfigCompositionException(
                f"Override {override.input_line} looks like a config group override, but config group '{override.key_or_group}' does not exist."
            )
        key = override.key_or_group
        value = override.value()
        try:
            if override.is_delete():
                config_val = OmegaConf.select(cfg, key, throw_on_missing=False)
                if config_val is None:
                    raise ConfigCompositionException(f"Could not delete from config. '{override.key_or_group}' does not exist.")
                if value is not None and value != config_val:
                    raise ConfigCompositionException(f"Could not delete from config. The value of '{override.key_or_group}' is {config_val} and not {value}.")
                last_dot = key.rfind(".")
                with open_dict(cfg):
                    if last_dot == -1:
                        del cfg[key]
                    else:
                        node = OmegaConf.select(cfg, key[0:last_dot])
                        del node[key[last_dot + 1 :]]
            elif override.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is None or isinstance(value, (dict, list)):
                    OmegaConf.update(cfg, key, value, merge=True, force_add=True)
                else:
                    assert override.input_line is not None
                    raise ConfigCompositionException(
                        dedent(f"""\
                        Could not append to config. An item is already at '{override.key_or_group}'.
                        Either remove + prefix: '{override.input_line[1:]}'
                        Or add a second + to add or override '{override.key_or_group}': '+{override.input_line}'
                        """)
                    )
            elif override.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as ex:
                    raise ConfigCompositionException(
                        f"Could not override '{override.key_or_group}'.\nTo append to your config use +{override.input_line}"
                    ) from ex
        except OmegaConfBaseException as ex:
            raise ConfigCompositionException(f"Error merging override {override.input_line}") from ex


def overrides_dirname(overrides: Sequence[Override], exclude_keys: Sequence[str], item_sep: str, kv_sep: str) -> str:
    """`hydra.job.override_dirname`, as Hydra's config loader builds it."""
    lines = sorted(o.input_line for o in overrides if o.key_or_group not in exclude_keys)
    return re.sub(pattern="[=]", repl=kv_sep, string=item_sep.join(lines))


class SweepConfigCache:
    """Hydra composes every trial's config from scratch: each YAML file parsed again and the
    defaults tree rebuilt, about half a second per trial here, more than a tiny cell costs.
    Only the config-group choices shape that work; Hydra applies value overrides to the
    composed result. So: compose once per distinct set of group choices, and apply each
    trial's value overrides to a copy, as Hydra does. Wraps the loader every launcher uses."""

    def __init__(self, loader: Any):
        self._loader = loader
        self._composed: dict[tuple[str, ...], bytes] = {}
        self._parsed: dict[str, Override] = {}
        self._parser = OverridesParser.create()
        self._groups: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loader", "_composed", "_parsed", "_parser", "_groups"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __reduce__(self):
        """Launchers that ship the loader to worker processes (joblib, submitit) ship Hydra's
        own: a worker composes its one trial and has nothing to cache."""
        return copy.copy, (self._loader,)

    def _is_value_override(self, override: Override) -> bool:
        if override.is_hydra_override() or override.is_sweep_override():
            return False
        return isinstance(override.value(), dict) or not self._is_group(override.key_or_group)

    def _is_group(self, key: str) -> bool:
        """Whether a config group of that name exists in any config source (as Hydra's
        repository asks its sources)."""
        if key not in self._groups:
            self._groups[key] = any(source.is_group(key) for source in self._loader.get_sources())
        return self._groups[key]

    def _parse(self, line: str) -> Override:
        if line not in self._parsed:
            self._parsed[line] = self._parser.parse_override(line)
        return self._parsed[line]

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        parsed = [self._parse(line) for line in sweep_overrides]
        values = [o for o in parsed if self._is_value_override(o)]
        key = tuple(o.input_line for o in parsed if o not in values)
        if key not in self._composed:
            # pickled: a copy unpickles in a third of a deepcopy's time (OmegaConf nodes)
            self._composed[key] = pickle.dumps(self._loader.load_sweep_config(master_config, list(key)))
        cfg = pickle.loads(self._composed[key])
        apply_value_overrides(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]
        dirname = cfg.hydra.job.config.override_dirname
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            cfg.hydra.job.override_dirname = overrides_dirname(task, exclude_keys=list(dirname.exclude_keys), item_sep=dirname.item_sep, kv_sep=dirname.kv_sep)
        return cfg
