"""Brittle's settings, light (no torch, captum or ART): the LIME settings a brittle record
depends on, its cache key and where it lives. The brittle stage keeps a record per model
cell and LIME settings in its folder (a cache across configs) and writes this config's
records to one file, `brittle_scores.json`, which `aggregate` reads: it needs neither captum
nor the brittle stage's settings to find them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from trashfire.core.errors import ConfigError, DataError
from trashfire.core.records import cell_file, config_hash, read_json, write_json
from trashfire.core.schema import ModelLabels, Record


@dataclass(frozen=True)
class BrittleRecord(ModelLabels, Record):
    """A model cell's brittle-score under one set of LIME settings (reports/brittle/<brittle_hash>.json)."""

    STAGE: ClassVar[str] = "brittle"

    brittle_hash: str
    model_hash: str
    train_hash: str
    n_samples: int
    n_features_mean: float
    brittle_score: float
    brittle_score_sd: float
    image_scores: list[float]
    positions: list[int]
    lime_samples: int
    perturbations_per_eval: int
    brittle_seed: int
    segments: dict[str, Any]
    t_brittle_process: float  # the LIME runs (predictions and explanations), whole, not per sample
    t_brittle_wall: float
    device: str
    data_hash: str | None = None  # the scored images' identity (trashfire.core.grid.split_hashes); None: a record without it, scored again


# brittle.csv (aggregate): a record's fields, then what aggregate adds
BRITTLE = sorted(f.name for f in fields(BrittleRecord)) + ["brittle_ri", "robust_acc", "robust_attack", "degenerate", "defence_stage"]


def brittle_settings(cfg: DictConfig) -> dict[str, Any]:
    """The LIME settings a record depends on: the `brittle` section."""
    brittle = cfg.get("brittle")
    if brittle is None:
        raise ConfigError("brittle", "missing; compose params.yaml with `make params`")
    return OmegaConf.to_container(brittle, resolve=True)


def brittle_hash(model_hash: str, settings: dict[str, Any]) -> str:
    """A record's cache key: the model cell and the LIME settings that change its scores
    (perturbations_per_eval only batches the forward passes)."""
    scored = {k: v for k, v in settings.items() if k != "perturbations_per_eval"}
    return config_hash({"model": model_hash, "brittle": scored})


def brittle_record_path(folder: str | Path, cell_hash: str) -> Path:
    return cell_file(folder, cell_hash, ".json")


def write_current_scores(path: str | Path, folder: str | Path, model_hashes: Iterable[str], settings: dict[str, Any]) -> None:
    """The records of `model_hashes` under `settings`, in that order, as one file."""
    records = [BrittleRecord.read(brittle_record_path(folder, brittle_hash(model_hash, settings))).written() for model_hash in model_hashes]
    write_json(path, {"records": records})


def read_current_scores(path: str | Path, model_hashes: Iterable[str]) -> list[BrittleRecord]:
    """The brittle stage's record of each of `model_hashes`, from its `brittle_scores.json`."""
    if not Path(path).is_file():
        raise DataError(f"{path} not found; run the brittle stage first (dvc repro brittle)")
    records = {record.get("model_hash"): record for record in read_json(path).get("records", [])}
    model_hashes = list(model_hashes)
    missing = [model_hash for model_hash in model_hashes if model_hash not in records]
    if missing:
        raise DataError(f"{path} has no brittle-score of model cell {missing[0]} ({len(missing)} missing); run the brittle stage (dvc repro brittle)")
    return [BrittleRecord.from_json(records[model_hash], path) for model_hash in model_hashes]
