"""Per-trial overhead of a sweep: what Hydra, Optuna (SQLite storage, heartbeat) and the
trial wrapper cost on top of the cells' own compute.

Runs, in this one process, a 20-trial grid sweep through the trashfire sweeper and Hydra's
basic (in-process) launcher over the test suite's tiny cells (ResNet-18 on 400 digits, FGM
and PGD on 20 images; ten defence x value points x epochs 1 and 2), in a fresh folder so
that every cell is computed. The cells' compute is the time spent in the pipeline's own
functions (prepare.run, train.run, attack.run); everything else in the sweep's wall time is
overhead. `--model fcnet` gives cells of ~0.2 s, which shows the fixed per-trial cost of a
Hydra job instead.

    python bench/sweep_overhead.py [--model resnet18] [--json reports/bench_sweep.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFENCE_CELLS = "none@0,gauss_out@0.1,gauss_out@0.3,conf@0.5,conf@0.9,fsq@2,fsq@4,fsq@8,gauss_in@0.1,gauss_in@0.3"


def timed(module, name: str, spent: list[float]):
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    setattr(module, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="the cells' model (default resnet18, the tests' tiny cells)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    os.environ.setdefault("TRASHFIRE_CONFIG_DIR", str(ROOT / "conf"))

    from trashfire import experiment
    from trashfire.core.records import write_json
    from trashfire.stages import attack, prepare, train
    from trashfire.sweep import ResumableOptunaSweeper

    compute: list[float] = []
    for module in (prepare, train, attack):
        timed(module, "run", compute)
    sweep_wall: list[float] = []
    timed(ResumableOptunaSweeper, "sweep", sweep_wall)

    work = Path(tempfile.mkdtemp(prefix="trashfire-sweep-bench-"))
    os.chdir(work)
    sys.argv = [
        "trashfire.experiment",
        "--multirun",
        "hparams_search=training_grid",
        f"model=choice({args.model})",
        f"defence_cell=choice({DEFENCE_CELLS})",
        "train.epochs=choice(1,2)",
        "~hydra.sweeper.params.defence",
        "data.digits.subsample=400",
        "split.n_attack=20",
        "compute.progress=false",
        "attack=[fgm,pgd]",
        "attack.fgm.values=[0.3]",
        "attack.pgd.values=[0.3]",
        f"hydra.sweeper.storage=sqlite:///{work / 'optuna.db'}",
        "hydra.sweeper.study_name=bench",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
    ]
    try:
        experiment.main()
    except SystemExit as exit_:
        if exit_.code:
            raise
    trials = 20
    overhead = sweep_wall[0] - sum(compute)
    figures = {
        "model": args.model,
        "trials": trials,
        "sweep_wall_s": round(sweep_wall[0], 3),
        "cell_compute_s": round(sum(compute), 3),
        "overhead_per_trial_ms": round(1000 * overhead / trials, 1),
        "compute_per_trial_ms": round(1000 * sum(compute) / trials, 1),
        "overhead_ratio": round(overhead / sum(compute), 4),
    }
    print(f"sweep of {trials} tiny {args.model} trials, in-process (basic launcher, SQLite study):")
    print(f"  wall {figures['sweep_wall_s']:.2f} s, cells' own compute {figures['cell_compute_s']:.2f} s")
    print(f"  per trial: compute {figures['compute_per_trial_ms']:.0f} ms, overhead {figures['overhead_per_trial_ms']:.0f} ms")
    print(f"  overhead / compute = {figures['overhead_ratio']:.3f} (target < 0.10)")
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
