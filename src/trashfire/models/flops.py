"""The model's own cost per sample in FLOPs, the unit of the compute clock.

Counted by torch's `FlopCounterMode`: 2 per multiply-accumulate of the convolutions and
matrix products (their backward passes included); element-wise operations, normalisations,
activations and pooling are not counted. The count is analytic (from the operators' shapes),
so it is the same on every device, thread count and run. Measured on a batch of
`MEASURE_ROWS` rows and divided by it: every counted operator's cost is linear in the rows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
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
        with torch.enable_grad():
            # through a view: FlopCounterMode's module tracker fails on a leaf tensor given to a
            # module under autograd.grad ("A leaf node was passed to _will_engine_execute_node")
            loss = F.cross_entropy(logits(rows.view_as(rows)), targets)
            torch.autograd.grad(loss, rows)

    return per_sample(count_flops(work))


def sample_cost(logits: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, labels: torch.Tensor) -> SampleCost:
    """The per-sample cost of queries and input gradients of the model behind `logits`."""
    return SampleCost(forward_flops(logits, x), gradient_flops(logits, x, labels))


# Training's kinds of pass through a model, as `PassCounter` tells them apart: a forward
# without autograd (a prediction), a training step (a forward with autograd, then the loss's
# backward to the weights) and an attack's gradient step while the weights are trainable (ART's
# loss_gradient: the loss's backward reaches the input and, with trainable weights, the
# weights too).
FORWARD, STEP, GRADIENT = "forward", "step", "gradient"
PASSES = (FORWARD, STEP, GRADIENT)


def backward_flops(model: nn.Module, x: torch.Tensor, labels: torch.Tensor, train: bool = True, input_grad: bool = False) -> int:
    """FLOPs per row of one forward and `loss.backward()` of the cross-entropy, as training
    runs it: to every trainable weight, and to the input too with `input_grad` (an attack's
    step on a model being trained). `train` sets the mode (train: a training step; eval: ART's
    loss_gradient). Counted on a copy of the model with the random state forked, so that its
    buffers (batch-norm statistics), gradients and the global generators stay as they were:
    measuring leaves the training it prices unchanged."""
    twin = copy.deepcopy(model).train(train)
    rows = _rows(x).detach().requires_grad_(input_grad)
    targets = _rows(labels[:, None])[:, 0] if len(labels) else torch.zeros(MEASURE_ROWS, dtype=torch.long, device=x.device)

    def work() -> None:
        with torch.enable_grad():
            F.cross_entropy(twin(rows), targets).backward()

    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return per_sample(count_flops(work))


def pass_flops(kind: str, model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> int:
    """FLOPs per row of one pass of `kind` (PASSES) through `model`."""
    if kind == FORWARD:
        training = model.training
        try:
            return forward_flops(model.eval(), x)
        finally:
            model.train(training)
    if kind == STEP:
        return backward_flops(model, x, labels, train=True)
    if kind == GRADIENT:
        return backward_flops(model, x, labels, train=False, input_grad=True)
    raise ValueError(f"unknown pass {kind!r}; known: {', '.join(PASSES)}")


class PassCounter:
    """Rows through a model by kind of pass, counted by a forward pre-hook (a dictionary
    update per call, nothing on the device): the work training really ran, its attacks and
    ART's own predictions included. A forward is a STEP when autograd records it and its input
    needs no gradient, a GRADIENT when its input needs one, else a FORWARD; training backs every
    recorded forward with `loss.backward()`."""

    def __init__(self) -> None:
        self.rows = dict.fromkeys(PASSES, 0)

    def __call__(self, module: nn.Module, args: tuple) -> None:
        x = args[0]
        kind = FORWARD if not torch.is_grad_enabled() else GRADIENT if x.requires_grad else STEP
        self.rows[kind] += len(x)

    @contextmanager
    def watching(self, model: nn.Module) -> Iterator[PassCounter]:
        # ART's model wrapper runs an nn.Sequential child by child, past a hook on the whole
        target = model[0] if isinstance(model, nn.Sequential) and len(model) else model
        handle = target.register_forward_pre_hook(self)
        try:
            yield self
        finally:
            handle.remove()


def priced(rows: Mapping[str, int], cost: Mapping[str, int]) -> int:
    """The FLOPs of `rows` of each kind of pass at `cost` per row (exact integers)."""
    return sum(n * cost[kind] for kind, n in rows.items() if n)
