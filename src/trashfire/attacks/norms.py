"""Per-sample norms as AutoAttack's authors compute them (their `normalize`, `L2_norm` and
the perturbation sizes of FAB), shared by the batched APGD, FAB and Square: one formula each,
so that every component matches the reference to the bit."""

from __future__ import annotations

import numpy as np
import torch

TINY = 1e-12  # the authors' guard in every division by a norm


def per_sample(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """One value per sample, shaped to broadcast over `like`'s samples."""
    return values.reshape((-1,) + (1,) * (like.dim() - 1))


def sample_norms(x: torch.Tensor, norm: float) -> torch.Tensor:
    """Each sample's Linf or L2 norm."""
    flat = x.reshape(len(x), -1)
    return flat.abs().max(dim=1)[0] if norm == np.inf else (flat**2).sum(dim=-1).sqrt()


def normalised(x: torch.Tensor, norm: float) -> torch.Tensor:
    """x over its norm per sample (+TINY, the authors' `normalize`)."""
    return x / (per_sample(sample_norms(x, norm), x) + TINY)
