"""Is the `budget_too_small` flag right? The survival stage's cure model predicts, per attack
cell, the share of its samples that a budget `survival.budget.factor` (10) times larger would
break beyond those broken (reports/survival/budget_sufficiency.csv). This reruns a finished
run's PGD cells at that budget and counts what it breaks:

- PGD with `factor` x max_iter and `factor` x step_scale: the same step size (step_scale x eps /
  max_iter), no random start, so the rerun's first max_iter steps are the run's, and the rest
  continue them;
- into a scratch attack folder (the run's records stay as they are), on the run's models and
  attack subset;
- observed = (failures at the larger budget - failures at the run's) / samples, per cell.

It prints one row per PGD cell (predicted share with its interval, observed, both flags at
`metrics.validity.budget_share`), the share of cells whose flag is right, and exits 1 below
`--agreement` (0.9).

    python bench/budget_sufficiency.py [--params params.yaml] [--reports reports] [--attack pgd]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from trashfire.core.cli import parse_overrides
from trashfire.core.config import load_params, normalise, validate
from trashfire.stages import attack as attack_stage


def records(folder: Path, attack: str) -> pd.DataFrame:
    """model_hash, eps, samples and failures of every `attack` record in `folder`."""
    rows = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("attack") == attack:
            rows.append(
                {
                    "attack_hash": record["attack_hash"],
                    "model_hash": record["model_hash"],
                    "eps": record["attack_value"],
                    "n": record["n_attack"],
                    "failures": record["n_events"],
                }
            )
    return pd.DataFrame(rows)


def rerun(params: Path, attack: str, factor: int, folder: Path) -> None:
    cfg = load_params(params)
    spec = cfg.attack[attack]
    overrides = [
        f"attack.{attack}.max_iter={int(spec.max_iter) * factor}",
        f"attack.{attack}.step_scale={float(spec.step_scale) * factor}",
        f"paths.attacks={folder}",
    ]
    cfg = parse_overrides(cfg, overrides)
    cfg.attack = {attack: cfg.attack[attack]}  # the other attacks' cells are not rerun
    attack_stage.run(normalise(validate(cfg)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    parser.add_argument("--attack", default="pgd")
    parser.add_argument("--agreement", type=float, default=0.9)
    parser.add_argument("--rerun-folder", type=Path, default=None, help="keep the rerun's records here (reused when present); default: a scratch folder")
    parser.add_argument("--out", type=Path, default=None, help="write the per-cell table here (CSV)")
    args = parser.parse_args()
    cfg = load_params(args.params)
    factor, share = int(cfg.survival.budget.factor), float(cfg.metrics.validity.budget_share)
    predicted = pd.read_csv(args.reports / "survival" / "budget_sufficiency.csv")
    if "selected" in predicted:  # the cure model the flag reads (lowest AIC)
        predicted = predicted[predicted["selected"].astype(bool)]
    run = records(args.reports / "attacks", args.attack)
    run = run[run["attack_hash"].isin(predicted["attack_hash"])]
    with tempfile.TemporaryDirectory(prefix="budget_rerun_") as scratch:
        folder = args.rerun_folder or Path(scratch)
        rerun(args.params, args.attack, factor, folder)  # cached cells of an earlier rerun are kept
        larger = records(folder, args.attack).rename(columns={"failures": "failures_larger", "attack_hash": "larger_hash"})
    table = run.merge(larger, on=["model_hash", "eps", "n"], validate="one_to_one").merge(predicted, on="attack_hash")
    table["observed"] = (table["failures_larger"] - table["failures"]) / table["n"]
    table["flag_predicted"] = table["still_breakable"] > share
    table["flag_observed"] = table["observed"] > share
    table["right"] = table["flag_predicted"] == table["flag_observed"]
    table["in_interval"] = table["observed"].between(table["still_breakable_low"], table["still_breakable_high"])
    shown = [
        "defence",
        "eps",
        "broken",
        "still_breakable",
        "still_breakable_low",
        "still_breakable_high",
        "observed",
        "flag_predicted",
        "flag_observed",
        "right",
    ]
    pd.set_option("display.width", 200)
    print(table.sort_values(["defence", "eps"])[shown].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.out:
        table.to_csv(args.out, index=False)
    agreement = table["right"].mean()
    print(
        f"\n{args.attack} cells: {len(table)} ({', '.join(sorted(set(table['fitter'])))}); budget x{factor}; flag at {share:g}: predicted {int(table['flag_predicted'].sum())}, "
        f"observed {int(table['flag_observed'].sum())}; right in {int(table['right'].sum())} of {len(table)} ({agreement:.1%}); "
        f"observed inside the 95% interval in {table['in_interval'].mean():.1%}; "
        f"median predicted {table['still_breakable'].median():.4f}, observed {table['observed'].median():.4f}; "
        f"mean predicted {table['still_breakable'].mean():.4f}, observed {table['observed'].mean():.4f}"
    )
    by_defence = table.groupby("defence")[["still_breakable", "observed"]].mean()
    print("mean share per defence (predicted, observed):\n" + by_defence.to_string(float_format=lambda v: f"{v:.4f}"))
    return 0 if agreement >= args.agreement else 1


if __name__ == "__main__":
    sys.exit(main())
