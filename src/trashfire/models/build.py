"""A model option built into its module: one of our architectures by `_target_`, or an
imported model's own module (trashfire.models.external)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

from trashfire.core.errors import ConfigError
from trashfire.core.external import is_external
from trashfire.models import external


def build_model(spec: dict[str, Any], n_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """`depth` is recorded for the analysis and `rules` are the validator's: neither is a
    builder argument. An external model (trashfire.core.external) is the user's module,
    whose shape the checkpoint fixes: it takes no n_classes or input_shape."""
    if is_external(spec):
        return external.build("model", spec)
    builder = {key: value for key, value in spec.items() if key not in ("depth", "rules")}
    try:
        return instantiate(builder, n_classes=n_classes, input_shape=list(input_shape))
    except InstantiationException as error:  # Hydra wraps a builder's own one-line error: unwrap it
        if isinstance(error.__cause__, ConfigError):
            raise error.__cause__ from None
        raise
