"""The whole survival stage at the size of a real study: wall time, peak memory and the growth
exponent of time against samples.

The default run's survival data (`reports/survival_data.parquet`, 55k samples in 792 attack
cells) tiled to each size as a real study's grid would be: each tile a new set of trained
models and attack cells (new hashes), durations jittered by up to 5% (bench/survival_vs_r.py's
`tiled`). At each size the stage runs as `python -m trashfire.stages.survival` on the
project's params.yaml with every configured fitter and check, its reports in a scratch folder;
peak memory is the proportional set size summed over its whole process tree (fit workers
included: the pages they share with the stage count once), sampled.
Targets (issue 46): 10^6 samples within RATIO_TARGETS["survival_1e6"] times the reference
workload (bench/reference.py, timed before and after in the same run; 300 s on the 2-core
machine where the bound was set) and <= 6 GiB, and a growth exponent <= 1.05 from the smallest
size to the largest. Exits 1 when one is missed.

    python bench/survival_stage_scaling.py [--rows 100000 500000 1000000] [--data reports/survival_data.parquet] [--json out.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402
from survival_vs_r import tiled  # noqa: E402
from trashfire.core.records import read_table, write_json, write_table  # noqa: E402
from tree_memory import peak_memory  # noqa: E402

TARGETS = {"ratio_to_reference_at_1e6": reference.RATIO_TARGETS["survival_1e6"], "peak_gib_at_1e6": 6.0, "growth_exponent": 1.05}


def run_stage(data: pd.DataFrame, params: Path, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        write_table(data, Path(folder) / "survival_data.parquet")
        command = [sys.executable, "-m", "trashfire.stages.survival", "--params", str(params), f"paths.reports={folder}"]
        began = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        peak = peak_memory(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return {"seconds": None, "peak_gib": peak[0] / 2**30, "failed": f"stopped after {timeout:.0f} s"}
        seconds = time.perf_counter() - began
        failed = None if process.returncode == 0 else output[-2000:]
        return {"seconds": round(seconds, 1), "peak_gib": round(peak[0] / 2**30, 2), "failed": failed, "log_tail": output[-1500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 500_000, 1_000_000])
    parser.add_argument("--data", type=Path, default=Path("reports/survival_data.parquet"))
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a size's stage is stopped (and counted as missed)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    source = read_table(args.data)
    before = reference.measure()
    print(f"reference: {before['seconds']} s", flush=True)
    figures, missed = {}, []
    for rows in args.rows:
        data = tiled(source, rows)
        cells = data["attack_hash"].nunique() if "attack_hash" in data else None
        result = run_stage(data, args.params, args.timeout)
        figures[str(rows)] = result | {"cells": cells}
        print(
            f"{rows:>9,} samples, {cells:,} attack cells: {result['seconds']} s, peak {result['peak_gib']} GiB"
            + (f"  FAILED: {result['failed']}" if result["failed"] else ""),
            flush=True,
        )
        if result["failed"]:
            missed.append(f"{rows}: the stage failed or was stopped")
    timed = [(int(r), f["seconds"]) for r, f in figures.items() if f["seconds"]]
    exponent = float(np.polyfit(np.log([r for r, _ in timed]), np.log([s for _, s in timed]), 1)[0]) if len(timed) > 1 else None
    print(f"growth exponent of stage time against samples: {exponent if exponent is None else round(exponent, 3)} (target <= {TARGETS['growth_exponent']})")
    largest = figures.get(str(max(args.rows)), {})
    timed_against = reference.summary(before, reference.measure())
    print(f"reference again: {timed_against['after']['seconds']} s; the ratios use the mean, {timed_against['seconds']} s", flush=True)
    for figure in figures.values():
        figure["ratio_to_reference"] = reference.ratio(figure["seconds"], timed_against) if figure["seconds"] else None
    if max(args.rows) >= 1_000_000:
        if not largest.get("seconds"):
            missed.append(f"{max(args.rows)} samples: the stage did not finish")
        else:
            line, met = reference.verdict("survival_1e6", largest["seconds"], timed_against)
            print(f"{'met' if met else 'MISSED'} {line}")
            if not met:
                missed.append(f"{max(args.rows)} samples: {line}")
        if largest.get("peak_gib", 0) > TARGETS["peak_gib_at_1e6"]:
            missed.append(f"{max(args.rows)} samples: peak {largest['peak_gib']} GiB (target <= {TARGETS['peak_gib_at_1e6']})")
    if exponent is not None and exponent > TARGETS["growth_exponent"]:
        missed.append(f"growth exponent {exponent:.3f} (target <= {TARGETS['growth_exponent']})")
    if args.json:
        write_json(args.json, {"targets": TARGETS, "reference": timed_against, "sizes": figures, "growth_exponent": exponent})
    for line in missed:
        print(f"MISSED {line}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
