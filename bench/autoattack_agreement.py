"""Our AutoAttack (the torch engine's standard version) against the authors' code
(`pyautoattack` 0.2.0, version standard) on the same models, images and seed: robust
accuracy per cell, beside PGD-10 (the default's attack) and the worst case of the three, and
the wall time of each on the same batch and threads.

It reads the models and prepared data of a default run (`make run` or `dvc repro` in this
checkout: models/ and data/processed/), the undefended ones of `--depths` and `--seeds`, at
the training epochs the default gives every depth (ResNet-8's 10).

    python bench/autoattack_agreement.py [--eps 0.05 0.1 0.2 0.3] [--seeds 0 1 2] [--images 100] [--threads 1] [--repeats 1] [--device cpu] [--csv FILE]

On a GPU (`--device cuda`) both run there, and the compute clock is checked against the CPU:
each sample's FLOPs to failure or censoring under PGD-10 and our AutoAttack, on the GPU and
on the CPU, the same model and images (`pgd_flops_equal`, `aa_flops_equal`: the share of
samples whose FLOPs are equal to the bit).
"""

from __future__ import annotations

import argparse
import copy
import csv
from pathlib import Path

import numpy as np
import torch
from pyautoattack import AutoAttack

from trashfire.attacks import standard
from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.engine import attack_samples, model_cost
from trashfire.attacks.failure_log import FailureLog
from trashfire.attacks.loops import autoattack
from trashfire.attacks.target import Target
from trashfire.core.clocks import LapClock, Stopwatch
from trashfire.core.config import compose, normalise, validate
from trashfire.core.grid import UNDEFENDED, attack_specs, training_cells
from trashfire.data.datasets import load_split
from trashfire.models import resolve_device, training

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


class PixelModel(torch.nn.Module):
    """The model's logits on [0, 1] pixels, as the authors' code calls a model (PyTorch's own
    modules: `Target.model_logits`)."""

    def __init__(self, target: Target):
        super().__init__()
        self.target = target
        self.low, self.high = target.clip_values

    def forward(self, x):
        return self.target.model_logits(self.low + x * (self.high - self.low))


def ours(target: Target, x: np.ndarray, y: np.ndarray, eps: float, seed: int = 0) -> tuple[np.ndarray, float, np.ndarray]:
    """Our standard version: robust or not per sample, the seconds, each sample's FLOPs."""
    spec = {"name": "autoattack", "norm": "inf", "version": "standard", "kwargs": {"components": standard_components()}}
    components = {n: autoattack.runner(n, c, np.inf, eps)[0] for n, c in autoattack.component_settings(spec).items()}
    cost = model_cost(target, x, y)
    clock = LapClock(len(y), target.device, cost.forward, cost.backward).start()
    log = FailureLog(x.astype(np.float32), y.astype(np.int64), autoattack.budget_of(spec))
    with Stopwatch(target.device) as watch:
        standard.evaluate(target, log, clock, components, 100, seed)
    return ~log.event, watch.elapsed.wall, log.arrays(clock)["flops"]


def standard_components() -> dict:
    return {n: {"max_iter": c["max_iter"], "kwargs": c["kwargs"], "rules": {"torch": {"algorithm": c["algorithm"]}}} for n, c in autoattack.STANDARD.items()}


def reference(target: Target, x: np.ndarray, y: np.ndarray, eps_pixels: float, seed: int = 0) -> tuple[np.ndarray, float]:
    model = PixelModel(target)
    aa = AutoAttack(model, norm="Linf", eps=eps_pixels, version="standard", seed=seed, device=str(target.device))
    aa.logger.disabled = True
    x_pixels = (torch.from_numpy(x) - model.low) / (model.high - model.low)
    with Stopwatch(target.device) as watch:
        x_adv, _ = aa.run_standard_evaluation(x_pixels.to(target.device), torch.from_numpy(y).to(target.device), batch_size=100)
    with torch.no_grad():
        return model(x_adv.to(target.device)).argmax(1).cpu().numpy() == y, watch.elapsed.wall


def timed_in_turn(target: Target, x: np.ndarray, y: np.ndarray, eps: float, eps_pixels: float, repeats: int, no_reference: bool):
    """Ours and the authors' in turn, `repeats` times: the outcomes (the same every time) and
    each one's median seconds, so that a drift of the machine's speed falls on both."""
    ours_seconds, reference_seconds = [], []
    for _ in range(repeats):
        robust_ours, seconds, flops = ours(target, x, y, eps)
        ours_seconds.append(seconds)
        robust_ref, seconds = (robust_ours * np.nan, np.nan) if no_reference else reference(target, x, y, eps_pixels)
        reference_seconds.append(seconds)
    return robust_ours, float(np.median(ours_seconds)), robust_ref, float(np.median(reference_seconds)), flops


def pgd_arrays(target: Target, spec: dict, x: np.ndarray, y: np.ndarray, eps: float) -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    return attack_samples("torch", None, spec, target, x, y, eps)[1]


def on_cpu(model: torch.nn.Module, split) -> Target:
    return Target(art_classifier(copy.deepcopy(model).to(CPU), split, dict(UNDEFENDED), CPU), CPU)


def compute_clock_against_cpu(cpu_target: Target, pgd_spec: dict, x, y, eps: float, pgd_flops: np.ndarray, aa_flops: np.ndarray) -> dict:
    """The share of samples whose FLOPs (the compute clock's durations) are the same on the
    CPU as on the device, under PGD-10 and under our AutoAttack."""
    cpu_pgd = pgd_arrays(cpu_target, pgd_spec, x, y, eps)["flops"]
    cpu_aa = ours(cpu_target, x, y, eps)[2]
    return {"pgd_flops_equal": float(np.mean(cpu_pgd == pgd_flops)), "aa_flops_equal": float(np.mean(cpu_aa == aa_flops))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--no-reference", action="store_true", help="ours and PGD-10 only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for both")
    parser.add_argument("--repeats", type=int, default=1, help="times each is timed, in turn (the median is kept)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto; on a GPU the compute clock is also checked against the CPU")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cfg = normalise(validate(compose([], conf=ROOT / "conf")))
    pgd = {s["value"]: s for s in attack_specs(cfg) if s["name"] == "pgd"}
    cells = [c for c in training_cells(cfg) if c.defence.get("name") in (None, "none") and c.seed in args.seeds and c.epochs == 10]
    rows = []
    print(f"{'model':16s} {'seed':>4s} {'eps':>5s} {'PGD-10':>7s} {'ours':>6s} {'authors':>7s} {'worst':>6s} {'ours s':>7s} {'authors s':>9s} {'ratio':>6s}")
    for cell in cells:
        split = load_split(cfg.paths.processed, cfg, cell.dataset, cell.seed)
        model = training.load_weights(cfg.paths.models, cell, split)
        target = Target(art_classifier(model.to(device), split, dict(UNDEFENDED), device), device)
        x, y = split.x_attack.numpy()[: args.images], split.y_attack.numpy()[: args.images]
        pixel_std = float(np.mean(split.std))
        cpu_target = on_cpu(model, split) if device.type != "cpu" else None
        for eps_pixels in args.eps:
            eps = eps_pixels / pixel_std
            pgd_run = pgd_arrays(target, pgd[eps_pixels], x, y, eps)
            robust_pgd = ~pgd_run["event"]
            robust_ours, seconds_ours, robust_ref, seconds_ref, flops_ours = timed_in_turn(target, x, y, eps, eps_pixels, args.repeats, args.no_reference)
            worst = robust_ours & robust_pgd
            row = {
                "model": cell.model,
                "seed": cell.seed,
                "eps": eps_pixels,
                "pgd10": robust_pgd.mean(),
                "ours": robust_ours.mean(),
                "authors": np.mean(robust_ref),
                "worst_case": worst.mean(),
                "seconds_ours": seconds_ours,
                "seconds_authors": seconds_ref,
                "samples_differing": int(np.sum(robust_ours != robust_ref)) if not args.no_reference else -1,
            }
            if device.type != "cpu":
                row.update(compute_clock_against_cpu(cpu_target, pgd[eps_pixels], x, y, eps, pgd_run["flops"], flops_ours))
            rows.append(row)
            print(
                f"{row['model']:16s} {row['seed']:4d} {eps_pixels:5.2f} {row['pgd10']:7.2f} {row['ours']:6.2f} {row['authors']:7.2f} {row['worst_case']:6.2f}"
                f" {seconds_ours:7.1f} {seconds_ref:9.1f} {seconds_ours / seconds_ref:6.2f}",
                flush=True,
            )
            if "pgd_flops_equal" in row:
                print(
                    f"  compute clock, device against CPU: PGD-10 FLOPs equal for {row['pgd_flops_equal']:.0%} of samples, AutoAttack {row['aa_flops_equal']:.0%}",
                    flush=True,
                )
    summarise(rows)
    if args.csv:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def summarise(rows: list[dict]) -> None:
    gaps = np.array([abs(r["ours"] - r["authors"]) for r in rows])
    below_pgd = np.mean([r["ours"] <= r["pgd10"] for r in rows])
    worst_below = all(r["worst_case"] <= r["pgd10"] for r in rows)
    ratios = [r["seconds_ours"] / r["seconds_authors"] for r in rows if r["eps"] == 0.1]
    print(
        f"cells: {len(rows)}; largest |ours - authors|: {np.nanmax(gaps) * 100:.1f} points; ours <= PGD-10 in {below_pgd:.0%} of cells; worst case <= PGD-10 everywhere: {worst_below}"
    )
    if ratios and not np.isnan(ratios).all():
        print(f"wall time ours / authors at eps 0.1: median {np.nanmedian(ratios):.2f}, max {np.nanmax(ratios):.2f}")


if __name__ == "__main__":
    main()
