"""The data and split sections' checks (registered with trashfire.core.checks)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from trashfire.core.checks import RULES, UNHASHED, check_keys, choice, integer, nonempty_list, nonempty_mapping, number, option_rules, register
from trashfire.core.errors import ConfigError
from trashfire.core.grid import options
from trashfire.data.loaders import LOADERS

DATA_SOURCES = (*LOADERS, "fusion")  # the loaders of trashfire.data.datasets; fusion mixes two of them


@register("data")
def check(cfg: DictConfig) -> None:
    _validate_split(cfg.split)  # first: the data check compares subsample with split.n_attack
    _validate_data(cfg)


def _validate_data(cfg: DictConfig) -> None:
    data = options(cfg, "data")
    nonempty_mapping("data", data)
    for name, spec in data.items():
        key = f"data.{name}"
        rules = option_rules("data", name, spec)
        choice(f"{key}.source", spec.get("source"), DATA_SOURCES)
        integer(f"{key}.n_classes", spec.get("n_classes"), low=2)
        for option in ("size", "channels"):
            if spec.get(option) is not None:
                integer(f"{key}.{option}", spec[option], low=1)
        check_keys(key, spec, rules)
        _validate_unhashed(key, spec)
        if spec.get("subsample") is not None:
            integer(f"{key}.subsample", spec.subsample, low=cfg.split.get("n_attack", 1) * 2)


def _validate_unhashed(key: str, spec: DictConfig) -> None:
    """`unhashed` lists keys of the option itself that never change the images."""
    listed = spec.get(UNHASHED)
    if listed is None:
        return
    allowed = [k for k in spec if k not in ("name", "source", "subsample", "size", "channels", "n_classes", RULES, UNHASHED)]
    if not OmegaConf.is_list(listed) or any(k not in allowed for k in listed):
        raise ConfigError(
            f"{key}.{UNHASHED}",
            f"got {listed!r}; allowed: a list of this option's keys that never change the images ({', '.join(allowed) or 'none'}); the others enter the cell hash",
        )


def _validate_split(split: DictConfig) -> None:
    seeds = nonempty_list("split.seeds", split.get("seeds"))
    for seed in seeds:
        integer("split.seeds", seed, low=0)
    number("split.test_size", split.get("test_size"), low=0, high=1, open_low=True, open_high=True)
    integer("split.n_attack", split.get("n_attack"), low=1)
