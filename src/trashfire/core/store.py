"""Where the cell records live and what names them: the attack, benign, outcome and
brittle files under reports/, and what ART declares of each attack class (`declarations/`).
Kept apart from the stages that write them so that the table stages (timing, aggregate,
figures) find the records without loading torch, ART or captum."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trashfire.core.errors import ConfigError
from trashfire.core.records import cell_file, config_hash


def attack_record_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".json")


def outcomes_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".npz")


def benign_path(folder: str | Path, model_hash: str) -> Path:
    return cell_file(Path(folder) / "benign", model_hash, ".json")


def declaration_path(folder: str | Path, target: str) -> Path:
    """What ART declares of an attack class (`trashfire.attacks.declaration`: its estimator
    requirements, whether they include input gradients), written by the attack stage for the
    tables, which do not load ART: <attacks>/declarations/<class path>.json."""
    return Path(folder) / "declarations" / f"{target}.json"


def black_box_of(spec: Mapping[str, Any], declared: Mapping[str, Any] | None) -> bool | None:
    """Whether an attack only queries the model's outputs: its option's `black_box` where
    stated, else what ART declares of its `_target_` class (`declared`: black-box unless it
    requires an input-gradient interface); None where neither says (a class that declares
    nothing, or a declaration not recorded yet)."""
    if spec.get("black_box") is not None:
        return bool(spec["black_box"])
    gradients = (declared or {}).get("gradients")
    return None if gradients is None else not gradients


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
