"""How close the attack engine runs to the cost of the model's own gradient computations,
and what early exit saves.

On a ResNet-18 trained on the 8x8 digits (trained here, in a scratch folder, with the
pipeline's own prepare and train stages), in one process, each pair timed in turn --repeats times (median of the per-pair ratios):
- engine / lower bound: our torch engine with early exit off (every sample takes every
  step) against plain torch doing the same work with nothing around it: the same linf
  iterates from k input-gradient forward+backward passes (k = 1 for FGM, 10 for PGD-10)
  plus one forward (target <= 1.1);
- early exit / ART: PGD-10 with early exit against ART's fixed-budget PGD-10 on the same
  batch, at each eps of the default grid (target <= 0.5);
- DeepFool: ours (fooled samples leave the batch) against ART's (it keeps computing their
  gradients), the measurement behind the engine's choice.
Both clocks; on a GPU the wall clock is CUDA-synchronised.

    python bench/attack_overhead.py [--repeats 5] [--epochs 3] [--device auto] [--threads N] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trashfire.attacks.art_attacks import art_classifier, build_attack
from trashfire.attacks.engine import model_cost, run_engine
from trashfire.attacks.target import Target
from trashfire.core.clocks import Stopwatch
from trashfire.core.config import compose, validate
from trashfire.core.grid import UNDEFENDED, training_cells
from trashfire.core.records import write_json
from trashfire.data.datasets import load_split
from trashfire.models import resolve_device, training
from trashfire.stages import prepare, train

ROOT = Path(__file__).resolve().parents[1]
FGM = {
    "name": "fgm",
    "target": "art.attacks.evasion.FastGradientMethod",
    "norm": "inf",
    "param": "eps",
    "batch_size": 100,
    "kwargs": {},
    "rules": {"torch": {"algorithm": "fgm"}},  # the loop that runs it (conf/attack/fgm.yaml)
}
PGD = {
    "name": "pgd",
    "target": "art.attacks.evasion.ProjectedGradientDescent",
    "norm": "inf",
    "param": "eps",
    "batch_size": 100,
    "max_iter": 10,
    "step_scale": 2.5,
    "kwargs": {"num_random_init": 0, "verbose": False},
    "rules": {"torch": {"algorithm": "pgd"}},
}
DEEPFOOL = {
    "name": "deepfool",
    "target": "art.attacks.evasion.DeepFool",
    "norm": "2",
    "param": "nb_grads",
    "value": 3,
    "batch_size": 100,
    "max_iter": 10,
    "kwargs": {"epsilon": 1e-6, "verbose": False},
    "rules": {"torch": {"algorithm": "deepfool"}},
}
DEFAULT_EPS = (0.1, 0.3, 1.0)


def trained_digits_model(folder: Path, epochs: int, device: str):
    cfg = validate(
        compose(
            [
                "model=[resnet18]",
                "defence=[none]",
                "attack=[fgm]",
                f"train.epochs=[{epochs}]",
                "compute.progress=false",
                f"compute.device={device}",
                *(f"paths.{k}={folder / k}" for k in ("raw", "processed", "models", "attacks", "reports")),
            ]
        )
    )
    prepare.run(cfg)
    train.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    return training.load_weights(cfg.paths.models, training_cells(cfg)[0], split), split


def paired_seconds(ours, reference, repeats: int, device) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """Both timed in turn, `repeats` times. Returns the median seconds of each and the median
    of the per-pair ratios, per clock: taking turns keeps the ratio honest on a machine whose
    speed drifts (shared cores)."""
    ours(), reference()  # warm-up
    pairs = []
    for _ in range(repeats):
        with Stopwatch(device) as first:
            ours()
        with Stopwatch(device) as second:
            reference()
        pairs.append((first.elapsed, second.elapsed))
    median = statistics.median
    return (
        (median(a.process for a, _ in pairs), median(a.wall for a, _ in pairs)),
        (median(b.process for _, b in pairs), median(b.wall for _, b in pairs)),
        (median(a.process / b.process for a, b in pairs), median(a.wall / b.wall for a, b in pairs)),
    )


def lower_bound(model: nn.Module, x: torch.Tensor, y: torch.Tensor, passes: int, eps: float, step: float, clip: tuple[float, float]) -> None:
    """The same linf iterates in the plainest torch: k gradient passes, each a signed step,
    the clip range and the projection, then one forward. Same values as the engine's, so
    the same arithmetic cost (gradients of confidently classified samples are subnormal
    floats, which x86 processes many times slower: a bound on other iterates would not be
    comparable)."""
    inputs = x
    for _ in range(passes):
        inputs = inputs.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(inputs), y), inputs)
        stepped = torch.clamp(inputs.detach() + step * grad.sign(), *clip)
        inputs = x + torch.clamp(stepped - x, -eps, eps)
    with torch.no_grad():
        model(inputs.detach()).argmax(1).cpu()


def row(label: str, measured, names=("ours", "reference")) -> dict:
    ours, reference, ratio = measured
    entry = {
        "case": label,
        f"{names[0]}_process_ms": round(ours[0] * 1e3, 2),
        f"{names[0]}_wall_ms": round(ours[1] * 1e3, 2),
        f"{names[1]}_process_ms": round(reference[0] * 1e3, 2),
        f"{names[1]}_wall_ms": round(reference[1] * 1e3, 2),
        "ratio_process": round(ratio[0], 3),
        "ratio_wall": round(ratio[1], 3),
    }
    print(
        f"{label:34s} {names[0]} {entry[f'{names[0]}_wall_ms']:8.1f} ms wall | {names[1]} {entry[f'{names[1]}_wall_ms']:8.1f} ms wall | "
        f"ratio {entry['ratio_process']:.3f} CPU, {entry['ratio_wall']:.3f} wall",
        flush=True,
    )
    return entry


def measure(repeats: int, epochs: int, device_name: str) -> dict:
    device = resolve_device(device_name)
    with tempfile.TemporaryDirectory() as scratch:
        model, split = trained_digits_model(Path(scratch), epochs, device_name)
    model = model.to(device)
    classifier = art_classifier(model, split, dict(UNDEFENDED), device)
    target = Target(classifier, device)
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    x_t, y_t = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    accuracy = float((classifier.predict(x).argmax(1) == y).mean())
    print(f"resnet18 trained {epochs} epochs on digits: attack-subset accuracy {accuracy:.2f}; batch {len(x)}, {torch.get_num_threads()} threads, {device}")
    # the model's FLOPs per query and gradient are measured once per model cell, as the
    # campaign does (`campaign._COSTS`), not per attack run
    cost = model_cost(target, x, y)
    engine_rows, exit_rows = [], []
    for spec, passes, step in ((FGM | {"value": 0.3}, 1, 0.3), (PGD | {"value": 0.3}, 10, 0.3 * 2.5 / 10)):
        measured = paired_seconds(
            lambda: run_engine("torch", None, spec, target, x, y, spec["value"], early_exit=False, cost=cost),
            lambda: lower_bound(model, x_t, y_t, passes, spec["value"], step, target.clip_values),
            repeats,
            device,
        )
        engine_rows.append(row(f"{spec['name']} engine (no early exit)", measured, ("engine", "bound")))
    for eps in DEFAULT_EPS:
        spec = PGD | {"value": eps}
        attack = build_attack(classifier, spec)
        _, out = run_engine("torch", None, spec, target, x, y, eps, early_exit=True, cost=cost)
        broken = float(out["event"].mean())  # the survivors take all 10 steps: the ratio cannot fall below their share
        measured = paired_seconds(
            lambda: run_engine("torch", None, spec, target, x, y, eps, early_exit=True, cost=cost), lambda: attack.generate(x=x, y=y), repeats, device
        )
        exit_rows.append(row(f"pgd-10 eps {eps} ({broken:.0%} broken) vs ART", measured, ("early_exit", "art")) | {"eps": eps, "event_share": broken})
    deepfool = build_attack(classifier, DEEPFOOL)
    measured = paired_seconds(lambda: run_engine("torch", None, DEEPFOOL, target, x, y, 3, cost=cost), lambda: deepfool.generate(x=x, y=y), repeats, device)
    deepfool_row = row("deepfool (nb_grads 3) ours vs ART", measured, ("ours", "art"))
    return {
        "model": "resnet18",
        "epochs": epochs,
        "attack_subset_accuracy": accuracy,
        "device": str(device),
        "batch": len(x),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "engine_vs_bound": engine_rows,
        "early_exit_vs_art": exit_rows,
        "deepfool_vs_art": deepfool_row,
        "engine_vs_bound_max_ratio_process": max(r["ratio_process"] for r in engine_rows),
        "engine_vs_bound_max_ratio_wall": max(r["ratio_wall"] for r in engine_rows),
        "early_exit_vs_art_mean_ratio_process": round(float(np.mean([r["ratio_process"] for r in exit_rows])), 3),
        "early_exit_vs_art_mean_ratio_wall": round(float(np.mean([r["ratio_wall"] for r in exit_rows])), 3),
        "early_exit_vs_art_ratio_wall_at_largest_eps": exit_rows[-1]["ratio_wall"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    figures = measure(args.repeats, args.epochs, args.device)
    print(
        f"engine / lower bound, worst: {figures['engine_vs_bound_max_ratio_process']:.3f} CPU, {figures['engine_vs_bound_max_ratio_wall']:.3f} wall (target <= 1.1); "
        f"PGD-10 early exit / ART, mean over eps {DEFAULT_EPS}: {figures['early_exit_vs_art_mean_ratio_process']:.3f} CPU, "
        f"{figures['early_exit_vs_art_mean_ratio_wall']:.3f} wall; at eps {DEFAULT_EPS[-1]}: {figures['early_exit_vs_art_ratio_wall_at_largest_eps']:.3f} wall (target <= 0.5)"
    )
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
