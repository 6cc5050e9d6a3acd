"""Is the budget check right? The `budget` stage estimates, per attack cell, the share of its
samples that a budget `budget.factor` (10) times larger would break beyond those it
broke, from a calibration rerun of a share of the model cells (reports/budget/sufficiency.csv).
This reruns every cell of each family at that budget and counts what the larger budget broke:

- the larger budget as the stage builds it (trashfire.budget.reruns: max_iter x factor, and
  PGD's step_scale x factor so its first max_iter steps are the run's), into a folder of its
  own (`--rerun-folder`, reused when present), on the run's models and attack subset;
- observed, per cell: the samples the rerun broke that the run did not, over the cell's samples;
- the check is on the cells the stage did not rerun (`calibration` false): their estimates are
  fitted on other model cells' reruns, never on their own.

A family the run did not calibrate (`budget.calibrate`) is calibrated here first,
at `--share`, into a scratch table (the run's reports/budget stays as it is; the calibration
reruns are cached in the run's budget_reruns/ as the stage caches them).

Per family it prints the mean estimated and observed shares, overall and per strength, and
the share of cells whose 95% interval holds the observed share; it exits 1 when a mean is off
by more than `--tolerance` (30%; per strength only where the observed mean is >= 0.5%) or the
coverage is below `--coverage` (0.9).

    python bench/budget_sufficiency.py [--params params.yaml] [--attacks pgd pixel] [--share 0.5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from trashfire.attacks.campaign import attack_grid
from trashfire.attacks.store import outcomes_path
from trashfire.budget import check as budget_check
from trashfire.budget import reruns
from trashfire.core.cli import parse_overrides
from trashfire.core.config import load_params, normalise, validate
from trashfire.core.records import read_npz
from trashfire.core.stage import Artefacts
from trashfire.stages.budget import STAGE

SMALL_OBSERVED = 0.005  # per strength, the mean check applies where the observed mean is at least this


def estimates(params: Path, family: str, share: float, scratch: Path) -> pd.DataFrame:
    """The run's sufficiency table where it calibrated `family`, else the stage's table with
    `family` calibrated at `share`, written to `scratch`."""
    cfg = normalise(validate(load_params(params)))
    calibrate = dict(cfg.budget.get("calibrate") or {})
    artefacts = STAGE.resolved(cfg)
    table = artefacts.output("budget") / "sufficiency.csv"
    if family in calibrate and table.is_file():
        return pd.read_csv(table)
    cfg = normalise(validate(parse_overrides(cfg, [f"+budget.calibrate.{family}={share}"])))
    artefacts = replace(artefacts, writes={**artefacts.writes, "budget": scratch})
    return budget_check.check(STAGE.view(cfg), artefacts)


def observed(params: Path, family: str, factor: float, folder: Path) -> pd.DataFrame:
    """Every cell of `family` rerun at `factor` x its budget: per run cell, the share of its
    samples the rerun broke and the run did not."""
    cfg = normalise(validate(load_params(params)))
    pairs = reruns.calibration_pairs(cfg, {family: 1.0}, factor, seed=0)  # every model cell
    artefacts = STAGE.resolved(cfg)
    rerun = Artefacts("bench", reads={"processed": artefacts.input("processed"), "models": artefacts.input("models")}, writes={"attacks": folder})
    attack_grid(reruns.larger_budget_config(cfg, factor, [family]), rerun, cells=[pair.larger for pair in pairs], desc=f"{family} x{factor:g}")
    rows = []
    for pair in pairs:
        run, big = read_npz(outcomes_path(artefacts.input("attacks"), pair.run.hash)), read_npz(outcomes_path(folder, pair.larger.hash))
        assert np.array_equal(run["position"], big["position"])
        later = big["event"].astype(bool) & ~run["event"].astype(bool)
        rows.append({"attack_hash": pair.run.hash, "truth": later.mean()})
    return pd.DataFrame(rows)


def judge(table: pd.DataFrame, tolerance: float, coverage: float) -> tuple[list[str], bool]:
    """Lines to print and whether every figure holds."""
    held = table[~table["calibration"].astype(bool)]
    inside = held["truth"].between(held["still_breakable_low"] - 1e-12, held["still_breakable_high"] + 1e-12)
    ratio = held["still_breakable"].mean() / held["truth"].mean()
    ok = abs(ratio - 1) <= tolerance and inside.mean() >= coverage
    lines = [
        f"  held-out cells {len(held)} (of {len(table)}): mean estimated {held['still_breakable'].mean():.4f}, observed {held['truth'].mean():.4f}, "
        f"ratio {ratio:.2f}; 95% interval holds the observed share in {inside.mean():.1%}"
    ]
    for value, cells in held.groupby("attack_value"):
        est, obs = cells["still_breakable"].mean(), cells["truth"].mean()
        judged = obs >= SMALL_OBSERVED
        fine = not judged or abs(est / obs - 1) <= tolerance
        ok &= fine
        verdict = ("ok" if fine else "MISSES") if judged else f"observed < {SMALL_OBSERVED:.1%}: not judged"
        lines.append(f"    strength {value:g}: estimated {est:.4f}, observed {obs:.4f}, interval holds {inside[cells.index].mean():.1%}  [{verdict}]")
    calibration = table[table["calibration"].astype(bool)]
    if len(calibration):
        lines.append(
            f"  calibration cells {len(calibration)}: rerun by the stage itself, observed there {calibration['observed'].mean():.4f} (this rerun: {calibration['truth'].mean():.4f})"
        )
    return lines, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--attacks", nargs="+", default=["pgd", "pixel"])
    parser.add_argument("--share", type=float, default=0.5, help="share of model cells to calibrate a family the run did not calibrate")
    parser.add_argument("--tolerance", type=float, default=0.3)
    parser.add_argument("--coverage", type=float, default=0.9)
    parser.add_argument("--rerun-folder", type=Path, default=None, help="keep the full reruns here, one folder per family (reused when present)")
    parser.add_argument("--out", type=Path, default=None, help="write the per-cell table here (CSV)")
    args = parser.parse_args()
    factor = float(load_params(args.params).budget.factor)
    passed, tables = True, []
    with tempfile.TemporaryDirectory(prefix="budget_bench_") as scratch:
        for family in args.attacks:
            table = estimates(args.params, family, args.share, Path(scratch) / family)
            folder = (args.rerun_folder or Path(scratch) / "reruns") / family
            table = table[table["attack"] == family].merge(observed(args.params, family, factor, folder), on="attack_hash", validate="one_to_one")
            lines, ok = judge(table, args.tolerance, args.coverage)
            print(f"{family} at {factor:g}x its budget: {'holds' if ok else 'MISSES'}\n" + "\n".join(lines), flush=True)
            passed &= ok
            tables.append(table)
    if args.out:
        pd.concat(tables).to_csv(args.out, index=False)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
