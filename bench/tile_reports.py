"""A larger study for the figures stage alone: the tables it reads, tiled K times.

The figures stage only reads aggregate's, timing's and survival's tables (its STAGE deps), so
a study of K times the cells is K copies of each table's rows: copy k of a row keeps its
values and gets new hashes (every `*_hash` column and the card names, `-k` appended) and seed
`seed + k * (largest seed + 1)`. A table with neither a hash nor a seed (a summary over seeds:
tau_table, trash_summary, findings, Table I) is copied as it is. metrics.json, the survival
stage's images and the budget tables are copied unchanged.

    python bench/tile_reports.py --source /tmp/study_small --copies 46 --out /tmp/report_study_1e5

then `cd <out> && python -m trashfire.stages.figures` (params.yaml is the source's).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.stages import figures


def hash_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.endswith("_hash")]


def tile_table(table: pd.DataFrame, copies: int) -> pd.DataFrame:
    """`copies` copies of a table's rows with new hashes and seeds (copy 0: the rows as they are);
    a table without either is returned as it is."""
    hashes = hash_columns(table)
    if not hashes and "seed" not in table:
        return table
    stride = int(pd.to_numeric(table["seed"], errors="coerce").max()) + 1 if "seed" in table and len(table) else 0
    copy = np.repeat(np.arange(copies), len(table))
    tiled = pd.concat([table] * copies, ignore_index=True)
    suffix = pd.Series(np.where(copy == 0, "", "-" + copy.astype(str)))
    for column in hashes:
        tiled[column] = tiled[column].astype(str) + suffix
    if "seed" in tiled:
        tiled["seed"] = tiled["seed"] + copy * stride
    return tiled


def tile_cards(source: Path, out: Path, copies: int) -> None:
    """The model cards under the names their tiled train hashes give them."""
    out.mkdir(parents=True, exist_ok=True)
    for card in sorted(source.glob("*.json")):
        for k in range(copies):
            target = out / (card.name if k == 0 else f"{card.stem}-{k}.json")
            if target != card:  # copy 0 of cards tiled where they are is the card itself
                shutil.copyfile(card, target)


def inputs(reports: Path) -> list[Path]:
    """The figures stage's inputs under reports/ (its STAGE deps): files, and the folders' files."""
    named = [Path(dep.replace("{reports}", str(reports))) for dep in figures.STAGE.deps if dep.startswith("{reports}")]
    return sorted(p for path in named for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())


def tile_reports(source: Path, out: Path, copies: int) -> None:
    """The figures stage's CSVs tiled, its cards tiled, its other inputs (images, JSON) copied."""
    reports, tiled = source / "reports", out / "reports"
    shutil.copyfile(source / "params.yaml", out / "params.yaml")
    for path in inputs(reports):
        relative = path.relative_to(reports)
        (tiled / relative).parent.mkdir(parents=True, exist_ok=True)
        if path.suffix != ".csv" or relative.parts[0] == "cards":
            shutil.copyfile(path, tiled / relative)
            continue
        started = time.perf_counter()
        table = pd.read_csv(path, dtype=schema.TEXT_COLUMNS, low_memory=False)
        out_table = tile_table(table, copies)
        out_table.to_csv(tiled / relative, index=False)
        print(f"{relative}: {len(table)} -> {len(out_table)} rows ({time.perf_counter() - started:.1f} s)")
    tile_cards(reports / "cards", tiled / "cards", copies)  # after the copy of copy 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="a workspace where aggregate and survival have run (params.yaml, reports/)")
    parser.add_argument("--copies", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tile_reports(args.source, args.out, args.copies)


if __name__ == "__main__":
    main()
