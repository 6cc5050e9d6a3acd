"""What the certify stage costs per model cell, on this machine's CPU or GPU, as CERTIFY's n
grows towards Cohen et al.'s 100,000.

For the default run's Gauss-in model cells of `--seeds` (models/ and data/processed/ of `make
run` in the current folder), it runs the stage's own cell function
(`trashfire.attacks.certification.certify_cell`: CERTIFY at n, then SmoothAdv and PREDICT at
each eps of conf/certify) once per n and prints, per cell: the seconds, the base classifier's
noisy forward passes per second (CERTIFY's n0 + n per image, SmoothAdv's steps x draws and
PREDICT's n per image and eps), and the certified and attacked accuracy at each eps. The first
cell is run once before the timed runs, so the device's start-up is not counted.

    python bench/certify_cost.py [--n 1000 10000 100000] [--device cpu] [--threads 2] [--seeds 0] [--samples N] [--json FILE]

Exit 1 when a certified accuracy exceeds its attacked accuracy by more than the two
estimates' noise allows (the floor above the ceiling: a broken certificate).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from trashfire.attacks.certification import cell_label, certify_cell, smoothing_cells
from trashfire.core.config import compose, normalise, validate
from trashfire.core.stage import Artefacts
from trashfire.models import resolve_device

ROOT = Path(__file__).resolve().parents[1]


def artefacts_of(cfg) -> Artefacts:
    processed, models = Path(cfg.paths.processed), Path(cfg.paths.models)
    for folder in (processed, models):
        if not folder.is_dir():
            sys.exit(f"{folder}: missing; run `make run` (or dvc repro train) in this folder first")
    return Artefacts("certify", {"processed": processed, "models": models}, {})


def forward_passes(settings, images: int) -> int:
    """Noisy forward passes of the base classifier one cell makes (backward passes not counted)."""
    per_eps = int(settings.attack.steps) * int(settings.attack.draws) + int(settings.attack.n)
    return images * (int(settings.n0) + int(settings.n) + len(settings.eps) * per_eps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--samples", type=int, default=None, help="images per cell (default: the whole attack subset)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cfg = normalise(validate(compose(["certify.enabled=true"], conf=ROOT / "conf")))
    cells = [cell for cell in smoothing_cells(cfg) if cell.train.seed in args.seeds]
    if not cells:
        sys.exit(f"no Gauss-in model cell of seeds {args.seeds} in the default grid")
    artefacts = artefacts_of(cfg)
    warm = cfg.certify.copy()
    warm.n, warm.attack.n, warm.samples = 100, 10, 10
    certify_cell(cfg, warm, artefacts, cells[0], device)
    rows, broken = [], []
    print(f"{'n':>7s} {'cell':48s} {'images':>6s} {'seconds':>8s} {'passes/s':>10s}  certified / attacked accuracy per eps")
    for n in args.n:
        settings = cfg.certify.copy()
        settings.n, settings.samples = n, args.samples
        for cell in cells:
            table, samples, seconds = certify_cell(cfg, settings, artefacts, cell, device)
            passes = forward_passes(settings, len(samples))
            accuracies = " ".join(f"{e:.2f}: {c:.2f}/{a:.2f}" for e, c, a in table[["eps", "certified_acc", "attacked_acc"]].itertuples(index=False))
            label = cell_label(cell)
            print(f"{n:7d} {label:48s} {len(samples):6d} {seconds:8.2f} {passes / seconds:10.3g}  {accuracies}", flush=True)
            rows.append(
                {"n": n, "cell": label, "images": len(samples), "seconds": seconds, "forward_passes": passes, "passes_per_second": passes / seconds}
                | {"eps": table["eps"].tolist(), "certified_acc": table["certified_acc"].tolist(), "attacked_acc": table["attacked_acc"].tolist()}
            )
            # a floor above its ceiling beyond two binomial standard errors is a broken certificate
            slack = 2 * np.sqrt(0.25 / len(samples)) * np.sqrt(2)
            broken += [f"{label} n {n} eps {e}" for e, c, a in table[["eps", "certified_acc", "attacked_acc"]].itertuples(index=False) if c > a + slack]
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "threads": args.threads, "rows": rows}, indent=1) + "\n")
    print("certificates: " + ("every certified accuracy is at or below its attacked accuracy" if not broken else f"ABOVE the ceiling: {'; '.join(broken)}"))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
