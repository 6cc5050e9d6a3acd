"""What one training cell of `experiment=trashfire_paper` costs here, per model depth.

Measures SGD steps (batch 64, momentum 0.9) of each ResNet on the MNIST (1x28x28) and
CIFAR (3x32x32) shapes on this machine, in process CPU seconds and wall seconds per
training sample, then extrapolates (printed as such) to one epoch of the paper's 80% split,
to one 10-epoch cell, and to the whole grid of the preset (each run trained once to its
largest epoch count, the smaller ones saved on the way).

    python bench/train_cost.py [--steps 3] [--depths 18 34 50 101 152]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from trashfire.core.clocks import Stopwatch
from trashfire.core.config import compose, config_dir
from trashfire.core.grid import training_cells
from trashfire.models import resnet

SHAPES = {"mnist": ((1, 28, 28), 56_000), "cifar": ((3, 32, 32), 48_000)}


def seconds_per_sample(depth: int, shape: tuple[int, ...], steps: int, batch: int = 64) -> tuple[float, float]:
    torch.manual_seed(0)
    model = resnet(f"resnet{depth}", 10, shape).train()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))

    def step() -> None:
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimiser.step()

    step()  # warm-up: allocations and kernel selection
    with Stopwatch() as watch:
        for _ in range(steps):
            step()
    return watch.elapsed.process / (steps * batch), watch.elapsed.wall / (steps * batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--depths", type=int, nargs="+", default=[18, 34, 50, 101, 152])
    args = parser.parse_args()
    cfg = compose(["experiment=trashfire_paper"], conf=config_dir())
    cells = training_cells(cfg)
    print(f"{torch.get_num_threads()} torch threads; trashfire_paper has {len(cells)} training cells in {len({c.run_key for c in cells})} runs")
    print("measured: seconds per training sample; extrapolated: hours (wall) per epoch / per 10-epoch cell / whole grid")
    total_wall = 0.0
    for name, (shape, n_train) in SHAPES.items():
        for depth in args.depths:
            process, wall = seconds_per_sample(depth, shape, args.steps)
            epoch_h = wall * n_train / 3600
            # the epochs of a run are checkpoints: each run costs its largest epoch count
            runs: dict[str, float] = {}
            for c in cells:
                if c.depth == depth and (c.dataset == "mnist") == (name == "mnist"):
                    scale = 1.5 if c.defence["stage"] == "train" else 1.0  # Gauss-in trains on 1.5x the data
                    runs[c.run_key] = max(runs.get(c.run_key, 0.0), c.epochs * scale)
            grid_epochs = sum(runs.values())
            total_wall += epoch_h * grid_epochs
            print(
                f"{name:5s} resnet{depth:<3d} measured {process * 1e3:7.2f} ms CPU, {wall * 1e3:7.2f} ms wall per sample | "
                f"extrapolated {epoch_h:6.2f} h/epoch, {10 * epoch_h:7.1f} h per 10-epoch cell, grid share {epoch_h * grid_epochs:10.0f} h"
            )
    print(f"extrapolated whole training grid on this machine: {total_wall:,.0f} h wall ({total_wall / 24 / 365:,.1f} years)")


if __name__ == "__main__":
    main()
