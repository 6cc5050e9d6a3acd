"""models.pkl: the fitted lifelines models by fitter name, written by the survival stage and
read back by `load_models`.

lifelines keeps its training data on every fitter (durations, events, weights, entry times,
and the distinct durations as its timeline): at 8·10^6 training samples, 0.5 GB per fitter, so eight fitters held eight equal copies in the
stage's memory and in models.pkl (5.6 GB). `share_training_data` points each fitter at one
copy, which pickle then writes once; the models answer as before.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trashfire.core.errors import DataError
from trashfire.core.records import atomic_path

TRAINING_DATA = ("durations", "event_observed", "weights", "entry")  # what lifelines' fit() keeps of its rows
TIMELINE = "timeline"  # and the distinct durations (an array: 64 MB per fitter at 10^7 samples)


def share_training_data(fitter: Any, kept: dict[str, list[pd.Series]]) -> None:
    """Replace each of the fitter's TRAINING_DATA by an equal Series (values, index, name)
    already in `kept`, or keep it there for the fitters after it."""
    for holder, attribute in [(model, attribute) for model in (fitter, getattr(fitter, "_model", None)) for attribute in (*TRAINING_DATA, TIMELINE)]:
        value = getattr(holder, attribute, None)  # Cox PH keeps them on its inner model
        if not isinstance(value, pd.Series | np.ndarray):
            continue
        same = next((known for known in kept.setdefault(attribute, []) if known is value or _equal(known, value)), None)
        if same is None:
            kept[attribute].append(value)
        elif same is not value:
            setattr(holder, attribute, same)


def _equal(known: pd.Series | np.ndarray, value: pd.Series | np.ndarray) -> bool:
    if isinstance(value, pd.Series):
        return isinstance(known, pd.Series) and known.name == value.name and known.equals(value)
    return isinstance(known, np.ndarray) and known.dtype == value.dtype and np.array_equal(known, value)


def save_models(fitters: dict[str, Any], path: Path) -> None:
    """The fitters, pickled straight to the file (no copy of their bytes in memory), their
    training data once."""
    kept: dict[str, list[pd.Series]] = {}
    for fitter in fitters.values():
        share_training_data(fitter, kept)
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        pickle.dump(fitters, stream, protocol=pickle.HIGHEST_PROTOCOL)


def load_models(path: str | Path) -> dict[str, Any]:
    """The fitted lifelines models the survival stage saved, by fitter name. They were fitted
    on durations in the unit `fit_unit.json` beside them names (GFLOPs, FLOPs / 1e9, on the
    compute clock; seconds on the others): give them durations in it."""
    try:
        with open(path, "rb") as stream:
            return pickle.load(stream)
    except FileNotFoundError:
        raise DataError(f"fitted survival models not found: {path}; run the survival stage") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as err:
        raise DataError(f"corrupt survival models file {path}: {err}; rerun the survival stage") from None
