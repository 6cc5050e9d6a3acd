"""Probes of a model cell that say whether its attack numbers can be trusted (Carlini et al.,
"On evaluating adversarial robustness", 2019; Croce & Hein's AutoAttack flags), run with the
benign evaluation on the attack subset, through the defence as the attacks see it:

- input gradients: the share of samples whose loss gradient (through ART's estimate of each
  preprocessing defence's gradient) is zero everywhere, and whose gradient is not finite.
  Gradient attacks make no progress on either: obfuscated gradients.
- repeated queries: the same images predicted `QUERY_REPEATS` times. A randomised defence
  (Gauss-out) changes its scores on every query, so one attack run is one draw: Expectation
  over Transformation (EOT) would be needed; the share of labels that flip and the accuracy's
  spread say by how much one draw can mislead.
- the output: whether the model returns a probability distribution (every score in [0, 1],
  each row summing to 1) rather than logits; the attacks' margins and AutoAttack's DLR loss
  assume logits (AutoAttack's `check_range_output`).
- a dynamic model: whether one forward pass computes gradients (test-time optimisation, an
  adaptive defence): calls of `grad`, `backward` or `_make_grads` while it runs, traced as
  AutoAttack's `check_dynamic` traces them.

The flags themselves are raised by `trashfire.metrics.validity` from these and the tables.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

QUERY_REPEATS = 5  # five draws show a randomised answer on any sample it flips with p >= 0.45 (1 - 0.55^5 > 0.95)


def gradient_shares(classifier, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(share of all-zero gradients, share of non-finite gradients) of the loss with respect
    to the input."""
    one_hot = np.eye(classifier.nb_classes, dtype=np.float32)[y.astype(np.int64)]  # ART's loss_gradient takes one-hot labels
    gradients = np.asarray(classifier.loss_gradient(x.astype(np.float32), one_hot)).reshape(len(x), -1)
    nonfinite = ~np.isfinite(gradients).all(axis=1)
    # zero or subnormal: a float32 gradient underflows to 0 or to a subnormal as the device
    # flushes subnormals or not, and either is a vanished gradient (issue 58)
    zero = ~nonfinite & (np.abs(np.nan_to_num(gradients)).max(axis=1) < np.finfo(np.float32).tiny)
    return float(zero.mean()), float(nonfinite.mean())


def query_spread(classifier, x: np.ndarray, y: np.ndarray, repeats: int = QUERY_REPEATS) -> dict[str, float]:
    """How repeated predictions of the same images differ: the largest change of any output
    score (a randomised defence changes its scores on every query, whether or not a label
    flips), the share of samples whose label changes, and the SD and range of the accuracy
    over the repeats."""
    scores = np.stack([classifier.predict(x, batch_size=256) for _ in range(repeats)])
    predictions = scores.argmax(axis=2)
    accuracies = (predictions == y).mean(axis=1)
    return {
        "query_repeats": repeats,
        "query_output_change": float(np.abs(scores - scores[0]).max()),
        "query_flip_share": float((predictions != predictions[0]).any(axis=0).mean()),
        "acc_query_sd": float(accuracies.std(ddof=1)) if repeats > 1 else 0.0,
        "acc_query_range": float(accuracies.max() - accuracies.min()),
    }


PROBABILITY_TOL = 1e-5  # AutoAttack's alpha in check_range_output
GRADIENT_CALLS = ("grad", "backward", "_make_grads")  # what check_dynamic counts
DYNAMIC_SAMPLES = 8  # tracing every Python call of a forward is slow: a few images show it


def model_outputs(classifier, x: np.ndarray) -> torch.Tensor:
    """The model's raw outputs (what the attacks read as logits), without the defences."""
    with torch.no_grad():
        return classifier.model(torch.from_numpy(x.astype(np.float32)).to(classifier.device))


def output_is_probability(classifier, x: np.ndarray) -> bool:
    """Every output score in [0, 1] and every row summing to 1: softmax outputs, not logits."""
    scores = model_outputs(classifier, x).double()
    tol = PROBABILITY_TOL
    return bool(scores.max() < 1 + tol and scores.min() > -tol and ((scores.sum(-1) - 1).abs() < tol).all())


def gradient_calls(classifier, x: np.ndarray) -> int:
    """Calls of GRADIENT_CALLS during one forward pass of the model, traced (the tracer in
    place before, a coverage tool's, is put back)."""
    calls = 0

    def trace(frame, event, _arg):
        nonlocal calls
        if event == "call" and frame.f_code.co_name in GRADIENT_CALLS:
            calls += 1

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        model_outputs(classifier, x[:DYNAMIC_SAMPLES])
    finally:
        sys.settrace(previous)
    return calls


def probe(classifier, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Every probe of one model cell, as BenignRecord's fields."""
    zero, nonfinite = gradient_shares(classifier, x, y)
    return {
        "probe_samples": len(x),
        "grad_zero_share": zero,
        "grad_nonfinite_share": nonfinite,
        **query_spread(classifier, x, y),
        "output_probability": output_is_probability(classifier, x),
        "gradient_calls": gradient_calls(classifier, x),
    }
