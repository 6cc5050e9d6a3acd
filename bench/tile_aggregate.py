"""The aggregate stage's inputs at any multiple of a study's size, for timing the stage alone.

Copies what `aggregate` reads from a workspace where timing and survival have run (its
params.yaml; reports/experiments.csv, eps_survival_data.csv, attack_distances.csv,
certified.csv, survival/, budget/ and brittle/) and repeats it `--times` times: tile k's cells
are the source's under new hashes (model, training, attack and data hashes hashed with k) and
new seeds (seed + k x the source's seed count), so that every table the stage joins still
joins. The numbers are the source's: the tile is a timing bench, not a study.

    python bench/tile_aggregate.py --source /tmp/study_small --times 46 --out /tmp/agg_tile_46
    cd /tmp/agg_tile_46 && python -m trashfire.stages.aggregate

Measured (issue 62; 2 shared cores, load about 3): the stage took 8 s at 2,156 attack cells,
18 s (0.55 GB) at 10,164 (bench/synthetic_study.py's study) and 142 s (3.0 GB) at 99,176 (this
tiling, 46 times a 2,156-cell study): time grows as cells^0.91 from 10^4 to 10^5.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd

HASHES = ("model_hash", "train_hash", "attack_hash", "data_hash")
TABLES = ("experiments.csv", "eps_survival_data.csv", "attack_distances.csv", "certified.csv", "survival/expected_times.csv", "budget/sufficiency.csv")
KEPT = ("survival/aft_comparison.csv", "survival/status.json", "survival/competing_risks.csv", "budget/families.csv")


def renamed(value: str, k: int) -> str:
    """Tile k's hash of a source hash (tile 0 keeps the source's)."""
    return value if k == 0 else hashlib.sha256(f"{value}:{k}".encode()).hexdigest()[:16]


def tile_table(table: pd.DataFrame, times: int, seeds: int) -> pd.DataFrame:
    tiles = []
    for k in range(times):
        mapped = {c: table[c].astype(str).map(lambda h, k=k: renamed(h, k)) for c in HASHES if c in table}
        seed = {"seed": table["seed"] + k * seeds} if "seed" in table else {}
        tiles.append(table.assign(**mapped, **seed))
    return pd.concat(tiles, ignore_index=True)


def tile_brittle(source: Path, out: Path, times: int, seeds: int) -> None:
    """Each brittle record under its model hash's tile, named as the stage looks it up."""
    from omegaconf import OmegaConf

    from trashfire.brittle.spec import brittle_hash, brittle_record_path, brittle_settings, write_current_scores

    settings = brittle_settings(OmegaConf.load(out / "params.yaml"))
    out.joinpath("reports/brittle").mkdir(parents=True, exist_ok=True)
    model_hashes = []
    for path in sorted(source.joinpath("reports/brittle").glob("*.json")):
        record = json.loads(path.read_text())
        for k in range(times):
            copy = dict(record) | {c: renamed(record[c], k) for c in HASHES if record.get(c)}
            copy["seed"] = record["seed"] + k * seeds
            copy["brittle_hash"] = brittle_hash(copy["model_hash"], settings)
            brittle_record_path(out / "reports/brittle", copy["brittle_hash"]).write_text(json.dumps(copy, indent=2, sort_keys=True))
            model_hashes.append(copy["model_hash"])
    write_current_scores(out / "reports/brittle_scores.json", out / "reports/brittle", list(dict.fromkeys(model_hashes)), settings)  # what aggregate reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--times", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.joinpath("reports/survival").mkdir(parents=True, exist_ok=True)
    args.out.joinpath("reports/budget").mkdir(parents=True, exist_ok=True)
    shutil.copy(args.source / "params.yaml", args.out / "params.yaml")
    experiments = pd.read_csv(args.source / "reports/experiments.csv", dtype={"norm": str}, low_memory=False)
    seeds = int(experiments["seed"].max()) + 1
    for name in TABLES:
        path = args.source / "reports" / name
        if path.is_file():
            table = pd.read_csv(path, dtype={"norm": str}, low_memory=False, float_precision="round_trip")
            tile_table(table, args.times, seeds).to_csv(args.out / "reports" / name, index=False)
    for name in KEPT:
        if (args.source / "reports" / name).is_file():
            shutil.copy(args.source / "reports" / name, args.out / "reports" / name)
    tile_brittle(args.source, args.out, args.times, seeds)
    print(f"{len(experiments) * args.times} experiment rows ({seeds * args.times} seeds) in {args.out}")


if __name__ == "__main__":
    main()
