"""Our minimal-norm attacks (FMN linf, l2, l1 and DDN l2 on the torch engine) against adv-lib's
(0.2.8, `adv_lib.attacks.fmn` and `ddn`) on the same model, images and steps: the samples each
breaks (the same set), the median norm of the broken ones (relative gap) and the wall time of
each, on the same images and threads.

It reads the models and prepared data of a default run (`make run` or `dvc repro` in the
current folder: models/ and data/processed/), the undefended ResNet-8 (epochs 10) of `--seeds`.

    python bench/minimal_norm_agreement.py [--seeds 0] [--images 100] [--steps 100] [--threads 2] [--json FILE]

Exit 1 when an attack breaks another set of samples than adv-lib's or its median norm is more
than 1% off (the acceptance of issue 60).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from adv_lib.attacks import ddn, fmn

from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.engine import attack_samples
from trashfire.attacks.target import Target
from trashfire.core.clocks import Stopwatch
from trashfire.core.config import compose, normalise, validate
from trashfire.core.grid import UNDEFENDED, training_cells
from trashfire.data.datasets import load_split
from trashfire.models import resolve_device, training

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = [("fmn", "inf"), ("fmn", "2"), ("fmn", "1"), ("ddn", "2")]
NORMS = {"inf": float("inf"), "2": 2.0, "1": 1.0}


class PixelModel(torch.nn.Module):
    """The model's logits on [0, 1] pixels, as adv-lib calls a model."""

    def __init__(self, target: Target):
        super().__init__()
        self.target = target
        self.low, self.high = target.clip_values

    def forward(self, x):
        return self.target.logits(self.low + x * (self.high - self.low))


def spec_of(method: str, norm: str, steps: int) -> dict:
    kwargs = {"levels": None} if method == "ddn" else {}
    return {"name": method, "norm": norm, "value": steps, "batch_size": 100, "kwargs": kwargs, "rules": {"torch": {"algorithm": method}}}


def ours(target: Target, x: np.ndarray, y: np.ndarray, method: str, norm: str, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Broken or not per sample, each returned example's norm (standardised), the seconds."""
    torch.manual_seed(0)
    with Stopwatch(target.device) as watch:
        x_adv, arrays, _ = attack_samples("torch", None, spec_of(method, norm, steps), target, x, y, float(steps))
    sizes = np.linalg.norm((x_adv - x).reshape(len(x), -1), ord=NORMS[norm], axis=1)
    return arrays["event"], sizes, watch.elapsed.wall


def reference(target: Target, x: np.ndarray, y: np.ndarray, method: str, norm: str, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
    model = PixelModel(target)
    pixels = ((torch.from_numpy(x) - model.low) / (model.high - model.low)).to(target.device)
    labels = torch.from_numpy(y).to(target.device)
    torch.manual_seed(0)
    with Stopwatch(target.device) as watch:
        if method == "fmn":
            adv = fmn(model, pixels, labels, norm=NORMS[norm], steps=steps)
        else:
            adv = ddn(model, pixels, labels, steps=steps, levels=None)
    with torch.no_grad():
        broken = (model(adv).argmax(1) != labels).cpu().numpy()
    sizes = (adv - pixels).flatten(1).norm(p=NORMS[norm], dim=1).cpu().numpy() * (model.high - model.low)
    return broken, sizes, watch.elapsed.wall


def compare(target, x, y, method, norm, steps) -> dict:
    broken_ours, sizes_ours, seconds_ours = ours(target, x, y, method, norm, steps)
    broken_ref, sizes_ref, seconds_ref = reference(target, x, y, method, norm, steps)
    median_ours = float(np.median(sizes_ours[broken_ours])) if broken_ours.any() else float("nan")
    median_ref = float(np.median(sizes_ref[broken_ref])) if broken_ref.any() else float("nan")
    return {
        "attack": f"{method} l{norm}",
        "broken_ours": int(broken_ours.sum()),
        "broken_adv_lib": int(broken_ref.sum()),
        "same_broken_set": bool(np.array_equal(broken_ours, broken_ref)),
        "median_norm_ours": median_ours,
        "median_norm_adv_lib": median_ref,
        "median_gap": abs(median_ours - median_ref) / median_ref if median_ref else float("nan"),
        "largest_sample_gap": float(np.max(np.abs(sizes_ours - sizes_ref)[broken_ours & broken_ref], initial=0.0)),
        "seconds_ours": seconds_ours,
        "seconds_adv_lib": seconds_ref,
        "time_ratio": seconds_ours / seconds_ref,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cfg = normalise(validate(compose([], conf=ROOT / "conf")))
    cells = [
        c for c in training_cells(cfg) if c.defence.get("name") in (None, "none") and c.model == "cifar_resnet8" and c.epochs == 10 and c.seed in args.seeds
    ]
    rows = []
    print(
        f"{'seed':>4s} {'attack':8s} {'broken':>7s} {'adv-lib':>7s} {'same':>5s} {'median':>8s} {'adv-lib':>8s} {'gap':>7s} {'ours s':>7s} {'adv-lib s':>9s} {'ratio':>6s}"
    )
    for cell in cells:
        split = load_split(cfg.paths.processed, cfg, cell.dataset, cell.seed)
        model = training.load_weights(cfg.paths.models, cell, split).to(device)
        target = Target(art_classifier(model, split, dict(UNDEFENDED), device), device)
        x, y = split.x_attack.numpy()[: args.images], split.y_attack.numpy()[: args.images]
        if cell is cells[0]:  # a device's first passes (CUDA's context, kernels) are nobody's time
            for method, norm in ATTACKS:
                compare(target, x[:2], y[:2], method, norm, 2)
        for method, norm in ATTACKS:
            row = {"seed": cell.seed, "steps": args.steps, "images": len(y)} | compare(target, x, y, method, norm, args.steps)
            rows.append(row)
            print(
                f"{cell.seed:4d} {row['attack']:8s} {row['broken_ours']:7d} {row['broken_adv_lib']:7d} {str(row['same_broken_set']):>5s}"
                f" {row['median_norm_ours']:8.4f} {row['median_norm_adv_lib']:8.4f} {row['median_gap']:7.2%} {row['seconds_ours']:7.2f} {row['seconds_adv_lib']:9.2f} {row['time_ratio']:6.2f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "device": str(device), "rows": rows}, indent=1) + "\n")
    failed = [r["attack"] for r in rows if not r["same_broken_set"] or not r["median_gap"] <= 0.01]
    print("agreement: " + ("every attack agrees (same broken set, median norm within 1%)" if not failed else f"FAILED for {', '.join(failed)}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
