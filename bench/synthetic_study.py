"""A synthetic study at any size: the attack stage's records for a grid of chosen size, drawn
from a real run's, so that `dvc repro` runs `timing` and every stage after it unchanged.

The grid is the source run's own (its params.yaml) with more seeds: seed k's cells are copies
of the source's cells of seed `seeds[k mod len(seeds)]` under the hashes the larger grid gives
them (`trashfire.core.grid`), so that the stages find every record where they look. The
source's own seeds keep their cells as they are; each copy under a new hash is jittered as a new trained model and attack would differ: per sample, its compute (FLOPs,
queries and gradients stay the attack's), its priced and shared seconds and its benign margin
and margin at the budget scaled by one factor in [0.95, 1.05]; per tile, the record's training,
prediction and attack costs by another. Events, predictions and labels are the source's.

Written into `--out` (a workspace of its own, beside nothing of the source's):
- params.yaml: the source's with `split.seeds` = 0 .. K-1 (K = ceil(cells / cells per seed));
- reports/attacks: the attack records and outcome arrays of every attack cell, the benign
  record of every model cell and ART's declarations, as the attack stage writes them;
- models/<train_hash>.json: the train stage's record of every training cell (no weights);
- reports/brittle, reports/certified.csv and reports/budget: the brittle, certify and budget
  stages' outputs, which `aggregate` reads, tiled the same way;
- dvc.yaml and src/ (the code DVC hashes as the stages' deps), with `dvc init --no-scm`, so
  that `dvc repro --single-item timing survival aggregate figures` runs there.

    python bench/synthetic_study.py (--cells 10000 | --samples 1000000) --out /tmp/study [--source .] [--workers 2]

The source is a workspace after `make run` (its params.yaml, reports/ and models/).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import OmegaConf

from trashfire.attacks.store import attack_record_path, benign_path, outcomes_path
from trashfire.brittle.spec import brittle_hash, brittle_record_path, brittle_settings, write_current_scores
from trashfire.core.grid import attack_cells, attack_data_hash, model_cells, training_cells
from trashfire.core.records import read_json, read_npz, write_json, write_npz
from trashfire.report.page import SYNTHETIC_MARK

JITTER = 0.05  # every copy's per-sample and per-record times scale by a factor in [1 - JITTER, 1 + JITTER]
SCALED_PER_SAMPLE = ("duration_process", "duration_wall", "duration_process_shared", "duration_wall_shared", "margin_ben", "margin_at_budget")
SCALED_PER_RECORD = ("t_train_process", "t_train_wall", "t_predict_process", "t_predict_wall", "t_attack_process", "t_attack_wall")


def folder(root: Path, cfg, key: str) -> Path:
    """A workspace's `paths.<key>` folder (relative paths from its root, as params.yaml has them)."""
    return root / str(cfg.paths[key])


def train_key(cell) -> tuple:
    return (cell.dataset, cell.model, cell.epochs, cell.lr, json.dumps(cell.defence, sort_keys=True), cell.pretrained_on)


def model_key(cell) -> tuple:
    return (*train_key(cell.train), json.dumps(cell.defence, sort_keys=True))


def attack_key(cell) -> tuple:
    return (*model_key(cell.model), cell.attack, cell.norm, cell.value)


def scaled_config(source: dict, seeds: int) -> dict:
    return source | {"split": source["split"] | {"seeds": list(range(seeds))}}


def matched(source_cells, scaled_cells, key, source_seeds: list[int], seed_of) -> list[tuple]:
    """(scaled cell, its source cell, tile) for every cell of the scaled grid: the source's
    cell of the same configuration at seed `source_seeds[k mod len]`."""
    by_key = {(key(cell), seed_of(cell)): cell for cell in source_cells}
    pairs = []
    for cell in scaled_cells:
        seed = seed_of(cell)
        pairs.append((cell, by_key[(key(cell), source_seeds[seed % len(source_seeds)])], seed))
    return pairs


def copy_attack_cell(job: tuple) -> int:
    """One attack cell: its record under the new hashes and its outcome arrays, jittered;
    returns its attacked samples."""
    source_folder, out_folder, source_hash, new = job
    if new["attack_hash"] == source_hash:  # one of the source's own seeds: its cell as it is
        shutil.copyfile(attack_record_path(source_folder, source_hash), attack_record_path(out_folder, source_hash))
        shutil.copyfile(outcomes_path(source_folder, source_hash), outcomes_path(out_folder, source_hash))
        return len(read_npz(outcomes_path(source_folder, source_hash))["y_true"])
    rng = np.random.default_rng(int(new["attack_hash"], 16) % 2**32)
    record = read_json(attack_record_path(source_folder, source_hash)) | {k: new[k] for k in ("attack_hash", "train_hash", "model_hash", "seed", "data_hash")}
    tile = new["tile_factor"]
    for name in SCALED_PER_RECORD:
        if record.get(name) is not None:
            record[name] = record[name] * tile
    arrays = read_npz(outcomes_path(source_folder, source_hash))
    factor = rng.uniform(1 - JITTER, 1 + JITTER, len(arrays["y_true"]))
    for name in SCALED_PER_SAMPLE:
        if name in arrays:
            arrays[name] = arrays[name] * factor
    arrays["flops"] = np.maximum(1, np.rint(arrays["flops"] * factor)).astype(arrays["flops"].dtype)
    write_json(attack_record_path(out_folder, new["attack_hash"]), record)
    write_npz(outcomes_path(out_folder, new["attack_hash"]), **arrays)
    return len(arrays["y_true"])


def tile_factor(seed: int) -> float:
    return float(np.random.default_rng(10_000 + seed).uniform(1 - JITTER, 1 + JITTER))


def write_attack_cells(cfg, source_cfg, source: Path, out: Path, workers: int) -> tuple[int, int]:
    """Every attack cell of the scaled grid; returns (cells, attacked samples)."""
    source_seeds = list(source_cfg.split.seeds)
    pairs = matched(attack_cells(source_cfg), attack_cells(cfg), attack_key, source_seeds, lambda c: c.model.train.seed)
    jobs = [
        (
            folder(source, source_cfg, "attacks"),
            folder(out, cfg, "attacks"),
            old.hash,
            {
                "attack_hash": new.hash,
                "train_hash": new.model.train.hash,
                "model_hash": new.model.hash,
                "seed": seed,
                "data_hash": new.data_hash,
                "tile_factor": tile_factor(seed),
            },
        )
        for new, old, seed in pairs
    ]
    folder(out, cfg, "attacks").mkdir(parents=True, exist_ok=True)
    began, samples = time.perf_counter(), 0
    with ProcessPoolExecutor(workers) as pool:
        for done, attacked in enumerate(pool.map(copy_attack_cell, jobs, chunksize=64), 1):
            samples += attacked
            if done % 5000 == 0 or done == len(jobs):
                print(f"  {done:,} / {len(jobs):,} attack cells written ({time.perf_counter() - began:.0f} s)", flush=True)
    return len(jobs), samples


def write_model_records(cfg, source_cfg, source: Path, out: Path) -> None:
    """The benign record of every model cell, the brittle record under the current LIME
    settings, and the train record of every training cell."""
    source_seeds = list(source_cfg.split.seeds)
    settings = brittle_settings(cfg)
    attacks, brittle = folder(source, source_cfg, "attacks"), folder(source, source_cfg, "reports") / "brittle"
    for new, old, seed in matched(model_cells(source_cfg), model_cells(cfg), model_key, source_seeds, lambda c: c.train.seed):
        hashes = {"model_hash": new.hash, "train_hash": new.train.hash, "seed": seed}
        if benign_path(attacks, old.hash).is_file():
            benign = read_json(benign_path(attacks, old.hash)) | {"model_hash": new.hash}
            if benign.get("data_hash") is not None:
                benign["data_hash"] = attack_data_hash(new.train.spec, int(cfg.split.n_attack))
            write_json(benign_path(folder(out, cfg, "attacks"), new.hash), benign)
        source_record = brittle_record_path(brittle, brittle_hash(old.hash, settings))
        if source_record.is_file():
            new_hash = brittle_hash(new.hash, settings)
            write_json(brittle_record_path(folder(out, cfg, "reports") / "brittle", new_hash), read_json(source_record) | hashes | {"brittle_hash": new_hash})
    scores = folder(out, cfg, "reports") / "brittle"
    if scores.is_dir():  # the brittle stage's file of this config's scores, which aggregate reads
        write_current_scores(scores.parent / "brittle_scores.json", scores, [cell.hash for cell in model_cells(cfg)], settings)
    for new, old, seed in matched(training_cells(source_cfg), training_cells(cfg), train_key, source_seeds, lambda c: c.seed):
        path = folder(source, source_cfg, "models") / f"{old.hash}.json"
        if path.is_file():
            write_json(folder(out, cfg, "models") / f"{new.hash}.json", read_json(path) | {"train_hash": new.hash, "seed": seed})


def tiled_table(path: Path, cfg, source_cfg, column: str = "model_hash") -> pd.DataFrame | None:
    """A per-model-cell table of the source (certified.csv), one copy per scaled model cell."""
    if not path.is_file():
        return None
    table = pd.read_csv(path, dtype={column: str})
    source_seeds = list(source_cfg.split.seeds)
    parts = []
    for new, old, seed in matched(model_cells(source_cfg), model_cells(cfg), model_key, source_seeds, lambda c: c.train.seed):
        rows = table[table[column] == old.hash]
        if len(rows):
            parts.append(
                rows.assign(
                    **{column: new.hash}, **({"train_hash": new.train.hash} if "train_hash" in rows else {}), **({"seed": seed} if "seed" in rows else {})
                )
            )
    return pd.concat(parts, ignore_index=True) if parts else table.iloc[:0]


def write_workspace(source: Path, out: Path, scaled: dict) -> None:
    """params.yaml, dvc.yaml, the code DVC hashes, and a DVC repository without git."""
    (out / "params.yaml").write_text(yaml.safe_dump(scaled, sort_keys=False))
    shutil.copy(source / "dvc.yaml", out / "dvc.yaml")
    shutil.copytree(source / "src", out / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"), dirs_exist_ok=True)
    if not (out / ".dvc").is_dir():
        subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=out, check=True)


def samples_per_cell(source: Path, source_cfg) -> float:
    """The source's attacked samples per attack cell (some attacks take a subset: HopSkipJump)."""
    cells = attack_cells(source_cfg)
    return sum(len(read_npz(outcomes_path(folder(source, source_cfg, "attacks"), cell.hash))["y_true"]) for cell in cells) / len(cells)


def cells_for(source: Path, samples: int) -> int:
    """The attack cells that hold about `samples` attacked samples, drawn as the source's are."""
    source_cfg = OmegaConf.create(yaml.safe_load((source / "params.yaml").read_text()))
    return math.ceil(samples / samples_per_cell(source, source_cfg))


def generate(source: Path, out: Path, cells: int, workers: int) -> dict:
    source_dict = yaml.safe_load((source / "params.yaml").read_text())
    source_cfg = OmegaConf.create(source_dict)
    per_seed = len(attack_cells(source_cfg)) // len(source_cfg.split.seeds)
    seeds = max(1, math.ceil(cells / per_seed))
    scaled = scaled_config(source_dict, seeds)
    cfg = OmegaConf.create(scaled)
    print(f"{seeds} seeds x {per_seed} attack cells per seed", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_workspace(source, out, scaled)
    began = time.perf_counter()
    written, attacked = write_attack_cells(cfg, source_cfg, source, out, workers)
    if (folder(source, source_cfg, "attacks") / "declarations").is_dir():
        shutil.copytree(folder(source, source_cfg, "attacks") / "declarations", folder(out, cfg, "attacks") / "declarations", dirs_exist_ok=True)
    write_model_records(cfg, source_cfg, source, out)
    reports, out_reports = folder(source, source_cfg, "reports"), folder(out, cfg, "reports")
    for name in ("certified.csv", "certified_samples.csv"):
        table = tiled_table(reports / name, cfg, source_cfg)
        if table is not None:
            table.to_csv(out_reports / name, index=False)
    if (reports / "budget").is_dir():
        shutil.copytree(reports / "budget", out_reports / "budget", dirs_exist_ok=True)
    summary = {"seeds": seeds, "attack_cells": written, "attacked_samples": attacked, "seconds": round(time.perf_counter() - began, 1)}
    write_json(out / "synthetic_study.json", summary)
    # the report says that its numbers are the copies' (trashfire.report.page.SYNTHETIC_MARK)
    write_json(out_reports / SYNTHETIC_MARK, summary | {"source_seeds": len(source_cfg.split.seeds), "source_attack_cells": len(attack_cells(source_cfg))})
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--cells", type=int, help="attack cells, at least (whole seeds of the source's grid)")
    size.add_argument("--samples", type=int, help="attacked samples, about (the cells that hold them as the source's do)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", type=Path, default=Path("."))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    missing = [p for p in ("params.yaml", "dvc.yaml", "reports/attacks", "reports/brittle") if not (args.source / p).exists()]
    if missing:
        sys.exit(f"synthetic_study: the source {args.source} lacks {', '.join(missing)}; run `make run` there first")
    summary = generate(args.source, args.out, args.cells or cells_for(args.source, args.samples), args.workers)
    print(f"{summary['attack_cells']:,} attack cells, {summary['attacked_samples']:,} attacked samples written to {args.out} in {summary['seconds']} s")


if __name__ == "__main__":
    main()
