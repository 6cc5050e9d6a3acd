"""The model's own cost per sample in FLOPs, the unit of the compute clock.

Counted by torch's `FlopCounterMode`: 2 per multiply-accumulate of the convolutions and
matrix products (their backward passes included); element-wise operations, normalisations,
activations and pooling are not counted. The count is analytic (from the operators' shapes),
so it is the same on every device, thread count and run. Measured on a batch of
`MEASURE_ROWS` rows and divided by it: every counted operator's cost is linear in the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

MEASURE_ROWS = 2


@dataclass(frozen=True)
class SampleCost:
    """FLOPs per sample: one forward query, and one input-gradient evaluation (its forward
    and the backward to the input)."""

    forward: int
    gradient: int

    @property
    def backward(self) -> int:
        """What a gradient adds to a forward query already counted."""
        return self.gradient - self.forward

    def flops(self, queries, gradients):
        """FLOPs of `queries` forward passes of which `gradients` went on to a backward
        pass (scalars or integer arrays)."""
        return queries * self.forward + gradients * self.backward


def count_flops(work: Callable[[], object]) -> int:
    """The FLOPs `work()` runs, counted by torch's FlopCounterMode."""
    with FlopCounterMode(display=False) as counter:
        work()
    return int(counter.get_total_flops())


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x[:1].expand(MEASURE_ROWS, *x.shape[1:]).clone() if len(x) < MEASURE_ROWS else x[:MEASURE_ROWS].clone()


def per_sample(total: int) -> int:
    return total // MEASURE_ROWS


def forward_flops(logits: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> int:
    """FLOPs of one forward query per sample, at x's shape (`logits`: the model as it is
    queried, its predict-time preprocessing included)."""
    rows = _rows(x)
    with torch.no_grad():
        return per_sample(count_flops(lambda: logits(rows)))


def gradient_flops(logits: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, labels: torch.Tensor) -> int:
    """FLOPs of one input-gradient evaluation per sample: the forward and the backward of the
    cross-entropy to the input, with the weights as they are (frozen for an attack, so no
    weight gradients are computed)."""
    rows = _rows(x).requires_grad_(True)
    targets = _rows(labels[:, None])[:, 0] if len(labels) else torch.zeros(MEASURE_ROWS, dtype=torch.long, device=x.device)

    def work() -> None:
        with torch.enable_grad():  # backward(), not autograd.grad: the counter's module hooks refuse the latter
            F.cross_entropy(logits(rows), targets).backward()

    return per_sample(count_flops(work))


def sample_cost(logits: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, labels: torch.Tensor) -> SampleCost:
    """The per-sample cost of queries and input gradients of the model behind `logits`."""
    return SampleCost(forward_flops(logits, x), gradient_flops(logits, x, labels))
