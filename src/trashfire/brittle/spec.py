"""Brittle's settings, light (no torch, captum or ART): the LIME settings a brittle record
depends on, its cache key and where it lives. The brittle stage writes the records and
`aggregate` reads them without loading captum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trashfire.core.errors import ConfigError
from trashfire.core.records import cell_file, config_hash


def brittle_settings(cfg: DictConfig) -> dict[str, Any]:
    """The LIME settings a record depends on (robust_acc only says what `aggregate` plots
    the score against)."""
    brittle = (cfg.get("metrics") or {}).get("brittle")
    if brittle is None:
        raise ConfigError("metrics.brittle", "missing; compose params.yaml with `make params`")
    settings = OmegaConf.to_container(brittle, resolve=True)
    settings.pop("robust_acc", None)
    return settings


def brittle_hash(model_hash: str, settings: dict[str, Any]) -> str:
    """A record's cache key: the model cell and the LIME settings that change its scores
    (perturbations_per_eval only batches the forward passes)."""
    scored = {k: v for k, v in settings.items() if k != "perturbations_per_eval"}
    return config_hash({"model": model_hash, "brittle": scored})


def brittle_record_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".json")
