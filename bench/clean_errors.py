"""TRASH with and without the samples a model misclassifies before any perturbation (clean
errors), on the default run's undefended cells (issue 59, item 9).

The pipeline's choice (`timing.survival_data.misclassified_before_attack: first_query`): a clean error
is a failure at the attack's first query, the work of one prediction. `drop` leaves them out,
so that E[T] is the time to break a sample the model got right. This script takes a finished
default run's scratch folder (`python bench/reproduce.py run default --keep-work` prints it),
reruns what depends on the choice (`dvc repro aggregate`: timing's survival data set, the
survival fits, the aggregate) with `drop`, and sets the two side by side:

    python bench/clean_errors.py <run folder> [--out bench/results/clean_errors/default.json]

Per data set, model and attack family of the undefended cells: the geometric mean over seeds of
TRASH (t_train / E[T], on the run's clock) and the mean E[T], with the clean errors as failures
at the first query and without them, and the benign error share that separates them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import machine  # noqa: E402  (bench/ is scripts, not a package)
from trashfire.core.records import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["dataset", "model", "depth", "attack_family"]
CHOICE = "timing.survival_data.misclassified_before_attack"


def environment(work: Path) -> dict[str, str]:
    """As bench/suite.py's scratch_project sets it: the copy's own code and configs."""
    return os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(work / "src"),
        "TRASHFIRE_CONFIG_DIR": str(work / "conf"),
    }


def undefended(trash: pd.DataFrame) -> pd.DataFrame:
    """Per data set, model and family: TRASH's geometric mean and E[T]'s mean over seeds."""
    degenerate = trash["degenerate"].astype(bool) if "degenerate" in trash else False
    rows = trash[(trash["defence"] == "none") & ~degenerate]
    rows = rows[rows["trash_adv"] > 0]
    return rows.groupby(KEYS, dropna=False).agg(
        seeds=("seed", "nunique"),
        benign_error=("acc_ben", lambda a: float(1 - a.mean())),
        E_T=("E_T", "mean"),
        trash=("trash_adv", lambda t: float(np.exp(np.log(t).mean()))),
    )


def rerun_with(work: Path, choice: str) -> pd.DataFrame:
    env = environment(work)
    subprocess.run([sys.executable, "-m", "trashfire.params", "experiment=default", f"{CHOICE}={choice}"], cwd=work, env=env, check=True)
    subprocess.run(["dvc", "repro", "aggregate"], cwd=work, env=env, check=True, capture_output=True)
    return pd.read_csv(work / "reports" / "trash.csv")


def compare(first_query: pd.DataFrame, dropped: pd.DataFrame) -> pd.DataFrame:
    both = undefended(first_query).join(undefended(dropped)[["E_T", "trash"]], rsuffix="_dropped")
    return both.assign(ratio=both["trash_dropped"] / both["trash"]).reset_index()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path, help="a finished default run's folder (reproduce.py run default --keep-work)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "clean_errors" / "default.json")
    args = parser.parse_args()
    trash = args.work / "reports" / "trash.csv"
    if not trash.exists():
        parser.error(f"{trash} not found: give the folder of a finished default run")
    first_query = pd.read_csv(trash)
    try:
        dropped = rerun_with(args.work, "drop")
    finally:
        rerun_with(args.work, "first_query")  # the folder as it was
    table = compare(first_query, dropped)
    print(table.to_markdown(index=False, floatfmt=".4g"))
    write_json(args.out, {"machine": machine(), "work": str(args.work), "rows": json.loads(table.to_json(orient="records"))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
