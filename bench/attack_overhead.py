"""How close the attack stage runs to the cost of the model's own gradient computations.

For ResNet-18 on the digits (1x8x8) and MNIST (1x28x28) shapes, in one process, times:
- the pipeline: the attack stage's own code for one cell (the frozen ART classifier it
  builds, `build_attack`, `generate`, then the prediction of the adversarial batch);
- the lower bound in plain torch: k input-gradient forward+backward passes (k = 1 for
  FGM, 10 for PGD-10) plus one forward pass, same model, same batch;
and prints pipeline / lower bound on both clocks (median of --repeats runs each).

    python bench/attack_overhead.py [--batch 100] [--repeats 5] [--threads N] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trashfire.attacks import art_classifier, build_attack
from trashfire.clocks import Stopwatch
from trashfire.grid import UNDEFENDED
from trashfire.models import resnet
from trashfire.records import write_json

SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28)}
ATTACKS = {
    "FGM": {"target": "art.attacks.evasion.FastGradientMethod", "norm": "inf", "param": "eps", "value": 0.1, "batch_size": 100, "kwargs": {}},
    "PGD-10": {"target": "art.attacks.evasion.ProjectedGradientDescent", "norm": "inf", "param": "eps", "value": 0.1, "batch_size": 100,
               "max_iter": 10, "step_scale": 2.5, "kwargs": {"num_random_init": 0, "verbose": False}},
}
GRADIENT_PASSES = {"FGM": 1, "PGD-10": 10}


def pipeline(model: nn.Module, split, spec: dict, x: np.ndarray, y: np.ndarray) -> None:
    classifier = art_classifier(model, split, dict(UNDEFENDED), torch.device("cpu"))
    x_adv = build_attack(classifier, spec).generate(x=x, y=y)
    classifier.predict(x_adv, batch_size=256).argmax(1)


def lower_bound(model: nn.Module, x: np.ndarray, y: np.ndarray, passes: int) -> None:
    model.eval().requires_grad_(False)
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(passes):
        inputs = inputs.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(model(inputs), labels), inputs)
        inputs = inputs + 0.01 * grad.sign()
    with torch.no_grad():
        model(inputs.detach()).argmax(1)


def median_seconds(run, repeats: int) -> tuple[float, float]:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        with Stopwatch() as watch:
            run()
        times.append(watch.elapsed)
    return statistics.median(t.process for t in times), statistics.median(t.wall for t in times)


def measure(batch: int, repeats: int) -> list[dict]:
    rows = []
    for shape_name, shape in SHAPES.items():
        torch.manual_seed(0)
        model = resnet("resnet18", 10, shape)
        x = torch.randn(batch, *shape).numpy()
        y = np.arange(batch) % 10
        split = types.SimpleNamespace(input_shape=shape, n_classes=10, clip_values=(float(x.min()), float(x.max())))
        for name, spec in ATTACKS.items():
            ours = median_seconds(lambda: pipeline(model, split, spec, x, y), repeats)
            bound = median_seconds(lambda: lower_bound(model, x, y, GRADIENT_PASSES[name]), repeats)
            rows.append({"shape": shape_name, "attack": name, "pipeline_process_ms": round(ours[0] * 1e3, 2), "pipeline_wall_ms": round(ours[1] * 1e3, 2),
                         "bound_process_ms": round(bound[0] * 1e3, 2), "bound_wall_ms": round(bound[1] * 1e3, 2),
                         "ratio_process": round(ours[0] / bound[0], 3), "ratio_wall": round(ours[1] / bound[1], 3)})
            row = rows[-1]
            print(f"{shape_name:6s} {name:6s} pipeline {row['pipeline_process_ms']:8.1f} ms CPU {row['pipeline_wall_ms']:8.1f} ms wall | "
                  f"lower bound {row['bound_process_ms']:8.1f} ms CPU {row['bound_wall_ms']:8.1f} ms wall | "
                  f"ratio {row['ratio_process']:.2f} CPU, {row['ratio_wall']:.2f} wall", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"resnet18, batch {args.batch}, {torch.get_num_threads()} torch threads, median of {args.repeats}; ratio = pipeline / lower bound")
    rows = measure(args.batch, args.repeats)
    if args.json:
        write_json(args.json, {"batch": args.batch, "threads": torch.get_num_threads(), "repeats": args.repeats, "cells": rows})


if __name__ == "__main__":
    main()
