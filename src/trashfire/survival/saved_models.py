"""models.pkl: the fitted lifelines models by fitter name, written by the survival stage and
read back by `load_models`.

lifelines keeps its training data on every fitter (durations, events, weights, entry times):
at 8·10^6 training samples, 0.5 GB per fitter, so eight fitters held eight equal copies in the
stage's memory and in models.pkl (5.6 GB). `share_training_data` points each fitter at one
copy, which pickle then writes once; the models answer as before.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pandas as pd

from trashfire.core.errors import DataError
from trashfire.core.records import atomic_path

TRAINING_DATA = ("durations", "event_observed", "weights", "entry")  # what lifelines' fit() keeps of its rows


def share_training_data(fitter: Any, kept: dict[str, list[pd.Series]]) -> None:
    """Replace each of the fitter's TRAINING_DATA by an equal Series (values, index, name)
    already in `kept`, or keep it there for the fitters after it."""
    for attribute in TRAINING_DATA:
        value = getattr(fitter, attribute, None)
        if not isinstance(value, pd.Series):
            continue
        same = next((series for series in kept.setdefault(attribute, []) if series is value or (series.name == value.name and series.equals(value))), None)
        if same is None:
            kept[attribute].append(value)
        elif same is not value:
            setattr(fitter, attribute, same)


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
