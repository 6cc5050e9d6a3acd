"""Which samples an attack runs on and how far it moved them: numpy only."""

from __future__ import annotations

import numpy as np


def budget_subset(labels: np.ndarray, n: int | None) -> np.ndarray:
    """Positions of the first n samples taken round-robin over classes: the slow black-box
    attacks run on a class-balanced part of the attack subset."""
    if n is None or n >= len(labels):
        return np.arange(len(labels))
    by_class = [list(np.flatnonzero(labels == k)) for k in np.unique(labels)]
    picked: list[int] = []
    while len(picked) < n:
        for members in by_class:
            if members and len(picked) < n:
                picked.append(members.pop(0))
    return np.sort(np.array(picked))


def perturbation_norms(x: np.ndarray, x_adv: np.ndarray) -> dict[str, np.ndarray]:
    delta = (x_adv - x).reshape(len(x), -1)
    return {
        # a pixel moved by less than 1e-6 (about float32's rounding of a standardised pixel) counts
        # as unmoved: rounding decides only pixels whose move is itself rounding, and l0 is reported, never tested
        "norm_l0": (np.abs(delta) > 1e-6).sum(axis=1).astype(np.int64),
        "norm_l1": np.abs(delta).sum(axis=1),
        "norm_l2": np.linalg.norm(delta, axis=1),
        "norm_linf": np.abs(delta).max(axis=1),
    }
