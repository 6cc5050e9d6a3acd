"""How close the attack stage runs to the cost of the model's own gradient computations.

For ResNet-18 on the digits (1x8x8) and MNIST (1x28x28) shapes, in one process, times:
- the pipeline: the attack stage's own code for one cell (the frozen ART classifier it
  builds, `build_attack`, `generate`, then the prediction of the adversarial batch);
- the lower bound in plain torch: k input-gradient forward+backward passes (k = 1 for
  FGM, 10 for PGD-10) plus one forward pass, same model, same batch;
and prints pipeline / lower bound on both clocks (median of --repeats runs each).

    python bench/attack_overhead.py [--batch 100] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import types

import numpy as np
import torch
from torch import nn

from trashfire.attacks import art_classifier, build_attack
from trashfire.clocks import Stopwatch
from trashfire.grid import UNDEFENDED
from trashfire.models import resnet

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"resnet18, batch {args.batch}, {torch.get_num_threads()} torch threads, median of {args.repeats}; ratio = pipeline / lower bound")
    for shape_name, shape in SHAPES.items():
        torch.manual_seed(0)
        model = resnet("resnet18", 10, shape)
        x = torch.randn(args.batch, *shape).numpy()
        y = np.arange(args.batch) % 10
        split = types.SimpleNamespace(input_shape=shape, n_classes=10, clip_values=(float(x.min()), float(x.max())))
        for name, spec in ATTACKS.items():
            ours = median_seconds(lambda: pipeline(model, split, spec, x, y), args.repeats)
            bound = median_seconds(lambda: lower_bound(model, x, y, GRADIENT_PASSES[name]), args.repeats)
            print(f"{shape_name:6s} {name:6s} pipeline {ours[0] * 1e3:8.1f} ms CPU {ours[1] * 1e3:8.1f} ms wall | "
                  f"lower bound {bound[0] * 1e3:8.1f} ms CPU {bound[1] * 1e3:8.1f} ms wall | "
                  f"ratio {ours[0] / bound[0]:.2f} CPU, {ours[1] / bound[1]:.2f} wall")


if __name__ == "__main__":
    main()
