"""The papers' studies on real MNIST: run a reproduction preset, keep what it found, and write
docs/reproduction.md from every kept run.

    python bench/reproduce.py run repro_004_mnist --mnist-root ../shared/data/mnist [override ...]
    python bench/reproduce.py run default            # the digits column of the claims table
    python bench/reproduce.py page [--check]         # docs/reproduction.md from the kept runs

`run` computes every cell afresh (`dvc repro` in a scratch copy of the project, as the
benchmark suite does), then keeps
- bench/results/reproductions/<preset>.json: what the page needs (R per seed and epoch, the
  brittle-scores per sample, benign accuracies, the findings), the overrides, the machine, the
  commit and the wall time;
- bench/results/<date>-<cpus>cpu-<preset>.json: the timing alone, for the benchmark page;
and regenerates both pages. `page` only regenerates docs/reproduction.md; `--check` exits 1
when the checked-in page is not what the kept runs give (tests/pipeline/test_docs.py).

A run of repro_004_mnist with another model (`model=[lenet5_padded]`) is an arm of 004's
ablation, kept as bench/results/reproductions/ablation_004/<model>.json. The page itself, its
comparisons and verdicts, is bench/reproduction_page.py.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference  # noqa: E402
from reproduction_page import ABLATION_004, DIGITS, KEPT, PRESETS, VIABLE_ACCURACY, write_page  # noqa: E402
from suite import machine, scratch_project, timed_repro  # noqa: E402  (bench/ is scripts, not a package)
from trashfire.core.records import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# what a run keeps


def summarise(reports: Path) -> dict:
    """The page's inputs from one run's reports/: small, and in git."""
    robustness = pd.read_csv(reports / "robustness.csv")
    r_columns = ["dataset", "model", "depth", "epochs", "defence", "defence_value", "attack_family", "seed", "acc_ben", "auc_R", "evp", "degenerate"]
    kept: dict = {"r": records(robustness[[c for c in r_columns if c in robustness]])}
    brittle_path = reports / "brittle.csv"
    if brittle_path.exists():
        brittle = pd.read_csv(brittle_path)
        keep = ["model", "defence", "defence_value", "epochs", "seed", "brittle_score", "robust_acc", "n_samples", "lime_samples", "image_scores", "positions"]
        rows = records(brittle[[c for c in keep if c in brittle]])
        for row in rows:
            for key in ("image_scores", "positions"):
                row[key] = json.loads(row[key]) if isinstance(row.get(key), str) else row.get(key)
        kept["brittle"] = rows
    findings = pd.read_csv(reports / "findings.csv")
    columns = [
        "id",
        "paper",
        "claim",
        "verdict",
        "value",
        "lo",
        "hi",
        "detail",
        "clock",
        "n",
        "units",
        "p",
        "p_adjusted",
        "smallest_effect",
        "detectable",
        "units_to_settle",
    ]
    kept["findings"] = records(findings[[c for c in columns if c in findings]])
    experiments = pd.read_csv(reports / "experiments.csv")
    accuracy = experiments.drop_duplicates("model_hash")
    kept["benign_accuracy"] = {
        "min": float(accuracy["acc_ben"].min()),
        "cells": int(len(accuracy)),
        "below": records(accuracy.loc[accuracy["acc_ben"] < VIABLE_ACCURACY, ["model", "epochs", "defence", "seed", "acc_ben"]]),
    }
    return json.loads(json.dumps(kept, default=_plain))


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts, NaN as None (strict JSON)."""
    return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))


def fgsm_unclipped(work: Path) -> list[dict]:
    """R of each LeNet checkpoint of a repro_004_mnist run under FGSM with and without clipping
    to the [0, 1] pixel range: 004 does not say whether its adversarial images were clipped,
    and clipping weakens FGSM on MNIST, whose pixels sit at 0 and 1. Both are the pipeline's
    R (trashfire.metrics.robustness_auc over the run's metrics.auc interval) on the attack
    subset, so the two columns differ only in the clipping."""
    import os

    import torch

    from trashfire.core.config import load_params
    from trashfire.core.grid import training_cells
    from trashfire.data.datasets import load_split
    from trashfire.metrics import robustness_auc
    from trashfire.models import training

    here, rows = Path.cwd(), []
    os.chdir(work)  # the run's relative paths
    try:
        cfg = load_params(work / "params.yaml")
        grid = [0.0, *cfg.attack.fgm["values"]]
        torch.set_num_threads(1)
        for cell in training_cells(cfg):
            split = load_split(Path(cfg.paths.processed), cfg, cell.dataset, cell.seed)
            model = training.load_weights(Path(cfg.paths.models), cell, split).eval()
            x, y = split.x_attack, split.y_attack
            mean, std = (torch.as_tensor(np.asarray(v, dtype=np.float32))[None, :, None, None] for v in (split.mean, split.std))
            low, high = (0 - mean) / std, (1 - mean) / std
            probe = x.clone().requires_grad_(True)
            step = torch.autograd.grad(torch.nn.functional.cross_entropy(model(probe), y, reduction="sum"), probe)[0].sign() / std
            r = {}
            with torch.no_grad():
                for clipped in (True, False):
                    accuracy = []
                    for eps in grid:
                        adversarial = x + eps * step
                        adversarial = torch.clamp(adversarial, low, high) if clipped else adversarial
                        accuracy.append(float((model(adversarial).argmax(1) == y).float().mean()))
                    r[clipped] = robustness_auc(grid, accuracy, cfg.metrics.auc.eps0, cfg.metrics.auc.eps1)
            rows.append({"seed": cell.seed, "epochs": cell.epochs, "auc_R_clipped": r[True], "auc_R_unclipped": r[False]})
    finally:
        os.chdir(here)
    return rows


def add_unclipped(work: Path) -> int:
    """fgsm_unclipped of a run that was kept without it; its recomputed clipped R must be the
    kept R of every checkpoint, or the folder is another run's."""
    path = KEPT / "repro_004_mnist.json"
    kept = json.loads(path.read_text())
    rows = fgsm_unclipped(work.resolve())
    pipeline = {(r["seed"], r["epochs"]): r["auc_R"] for r in kept["r"]}
    off = [r for r in rows if abs(r["auc_R_clipped"] - pipeline.get((r["seed"], r["epochs"]), math.inf)) > 1e-6]
    if off:
        print(f"{work} is not the kept run: its R differs at {[(r['seed'], r['epochs']) for r in off]}", file=sys.stderr)
        return 1
    write_json(path, kept | {"fgsm_unclipped": rows})
    return write_page()


def kept_path(preset: str, overrides: list[str]) -> Path:
    """Where a run is kept: the preset's own file, or for 004 with another model (an arm of
    its ablation, e.g. model=[lenet5_padded]) ablation_004/<model>.json."""
    models = [o.split("=", 1)[1].strip("[]") for o in overrides if o.startswith("model=")]
    if preset == "repro_004_mnist" and models and models[0] != "lenet5":
        return ABLATION_004 / f"{models[0]}.json"
    return KEPT / f"{preset}.json"


def run_preset(preset: str, mnist_root: str | None, overrides: list[str], keep_work: bool = False) -> dict:
    args = list(overrides)
    if mnist_root:
        args.append(f"data.mnist.root={Path(mnist_root).resolve()}")
    measured_on = machine()  # before the run: the commit whose code the scratch copy holds
    before = reference.measure()
    work, env = scratch_project(preset, args)
    print(f"{preset}: `dvc repro` in {work}", flush=True)
    try:
        wall, stages, peak = timed_repro(work, env)
    except SystemExit:  # a failed stage: its message is printed; nothing is kept
        if not keep_work:
            shutil.rmtree(work)
        raise
    pipeline = {"experiment": preset, "overrides": overrides, "wall_s": round(wall, 1), "stages_s": stages, "peak_memory_gib": round(peak / 2**30, 3)}
    timed_against = reference.summary(before, reference.measure())
    pipeline["ratio_to_reference"] = reference.ratio(wall, timed_against)
    kept = {"preset": preset, "machine": measured_on, "reference": timed_against, "pipeline": pipeline, **summarise(work / "reports")}
    if preset == "repro_004_mnist":  # after the timing: a check of the gap to 004, not part of the run
        kept["fgsm_unclipped"] = fgsm_unclipped(work)
    write_json(kept_path(preset, overrides), kept)
    timing = {"machine": kept["machine"], "reference": timed_against, "pipeline": pipeline}
    write_json(ROOT / "bench" / "results" / f"{kept['machine']['date'][:10]}-{kept['machine']['cpus']}cpu-{preset}.json", timing)
    line, met = reference.verdict("reproduce", wall, timed_against)
    print(f"{preset}: {pipeline['wall_s']} s, peak {pipeline['peak_memory_gib']} GiB, lowest benign accuracy {kept['benign_accuracy']['min']:.3f}", flush=True)
    print(f"{preset}: {'met' if met else 'MISSED'} {line}", flush=True)
    if keep_work:
        print(f"{preset}: its reports, models and data stay in {work}", flush=True)
    else:
        shutil.rmtree(work)  # gigabytes of prepared data and weights; --keep-work keeps them
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a preset afresh and keep what it found")
    run.add_argument("preset", choices=(*PRESETS, DIGITS))
    run.add_argument("--mnist-root", help="the folder with MNIST's IDX files (data.mnist.root)")
    run.add_argument("--keep-work", action="store_true", help="keep the run's scratch folder (reports, models, data) instead of removing it")
    run.add_argument("overrides", nargs="*", help="Hydra overrides after the preset's")
    loose = sub.add_parser("unclipped", help="add FGSM without clipping to a kept repro_004_mnist run, from its run folder")
    loose.add_argument("work", type=Path, help="the run's scratch folder (printed by `run`)")
    page = sub.add_parser("page", help="write docs/reproduction.md from the kept runs")
    page.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    if args.command == "page":
        return write_page(args.check)
    if args.command == "unclipped":
        return add_unclipped(args.work)
    if args.preset != DIGITS and not (args.mnist_root and Path(args.mnist_root).is_dir()):
        parser.error(
            f"--mnist-root: got {args.mnist_root!r}; the MNIST presets need the folder with MNIST's four IDX files (or torchvision's MNIST/raw/ under it)"
        )
    run_preset(args.preset, args.mnist_root, args.overrides, args.keep_work)
    write_page()
    subprocess.run([sys.executable, str(ROOT / "bench" / "benchmark_page.py")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
