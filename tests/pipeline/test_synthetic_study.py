"""bench/synthetic_study.py: a study drawn from a run's records, the grid with more seeds, that
the timing stage reads whole and unchanged (issue 62's scale benches stand on it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml
from omegaconf import OmegaConf

from tests.core.test_schema import record_run, tiny
from tests.helpers.paths import ROOT
from trashfire.core.config import load_params
from trashfire.core.grid import attack_cells
from trashfire.core.records import read_json, read_table
from trashfire.stages import timing

sys.path.insert(0, str(ROOT / "bench"))
import synthetic_study  # noqa: E402

RELATIVE = {"raw": "data/raw", "processed": "data/processed", "models": "models", "attacks": "reports/attacks", "reports": "reports"}


def a_recorded_workspace(root: Path):
    """A run's records (hand-made, as tests/core/test_schema.py writes them) and its params.yaml
    with the project's relative paths, beside the project's dvc.yaml and code."""
    cfg = tiny(root, "defence=[none,conf]")
    record_run(cfg)
    params = OmegaConf.to_container(cfg, resolve=True) | {"paths": RELATIVE | {"sweeps": ".sweeps"}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.yaml").symlink_to(ROOT / "dvc.yaml")
    (root / "src").symlink_to(ROOT / "src")
    return cfg


def in_workspace(folder: Path):
    cfg = load_params(folder / "params.yaml")
    for key, relative in RELATIVE.items():
        cfg.paths[key] = str(folder / relative)
    return cfg


def test_a_synthetic_study_is_the_grid_with_more_seeds_and_timing_reads_every_cell(tmp_path):
    source_cfg = a_recorded_workspace(tmp_path / "source")
    per_seed = len(attack_cells(source_cfg)) // len(source_cfg.split.seeds)
    summary = synthetic_study.generate(tmp_path / "source", tmp_path / "study", cells=3 * per_seed, workers=1)
    study = in_workspace(tmp_path / "study")
    assert list(study.split.seeds) == [0, 1, 2] and summary["attack_cells"] == 3 * per_seed
    assert (tmp_path / "study" / ".dvc").is_dir() and (tmp_path / "study" / "src" / "trashfire").is_dir()  # `dvc repro` runs there

    experiments, survival = timing.run(study)
    measured = experiments[experiments["attack"] != "worst_case"]
    assert len(measured) == summary["attack_cells"] and measured["attack_hash"].is_unique
    assert set(measured["seed"]) == {0, 1, 2}
    source_hashes = set(read_table(Path(source_cfg.paths.reports) / "survival_data.parquet")["attack_hash"])
    assert set(measured.loc[measured["seed"] == 0, "attack_hash"]) == source_hashes  # the source's own seed, as it is
    assert set(measured.loc[measured["seed"] > 0, "attack_hash"]).isdisjoint(source_hashes)  # copies under new hashes
    assert survival["weight"].sum() == summary["attacked_samples"] == 3 * len(read_table(Path(source_cfg.paths.reports) / "survival_data.parquet"))

    # each new seed a copy of the source's cells, each sample's compute jittered by at most 5%
    source = read_table(Path(source_cfg.paths.reports) / "survival_data.parquet").sort_values(["attack_family", "defence", "duration"])
    for seed in (0, 1, 2):
        copy = survival[survival["train_hash"].isin(measured.loc[measured["seed"] == seed, "train_hash"])].sort_values(["attack_family", "defence", "duration"])
        assert list(copy["event"].groupby(copy["attack_family"], observed=True).sum()) == list(source["event"].groupby(source["attack_family"]).sum())
        ratio = copy["flops"].sum() / source["flops"].sum()
        assert ratio == 1.0 if seed == 0 else 0.95 <= ratio <= 1.05 and ratio != 1.0, seed
    record = read_json(next(Path(study.paths.attacks).glob("*.json")))
    assert record["attack_hash"] in set(measured["attack_hash"])


def test_a_study_sized_by_samples_holds_about_that_many(tmp_path):
    source_cfg = a_recorded_workspace(tmp_path / "source")
    samples = len(read_table(Path(source_cfg.paths.reports) / "survival_data.parquet"))
    cells = synthetic_study.cells_for(tmp_path / "source", 5 * samples)
    assert cells == 5 * len(attack_cells(source_cfg))
    per_cell = samples / len(attack_cells(source_cfg))
    assert np.isclose(synthetic_study.samples_per_cell(tmp_path / "source", source_cfg), per_cell)
