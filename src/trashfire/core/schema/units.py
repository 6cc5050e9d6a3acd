"""Units: an attack strength (eps) is stored once, in the units it was configured in, with the
data set's `pixel_std`, and converted here; and the clocks a time is measured on (FLOPs on
the compute clock, seconds on the others)."""

from __future__ import annotations

from typing import Any

import pandas as pd

SECONDS = ("process", "wall")  # the clocks that measure seconds
COMPUTE = "flops"  # the compute clock: the model's work per sample, counted exactly
CLOCKS = (COMPUTE, *SECONDS)  # what `timing.clock` may choose
CLOCK_UNIT_NAMES = {"flops": "FLOPs", "process": "s", "wall": "s"}  # the tables' unit, each clock's own
# The unit the survival fits see per clock: lifelines' optimisers (and its calibration spline)
# start near durations of order 1 and fail to converge on FLOPs of order 1e8, so the compute
# clock is fitted in GFLOPs; every time the stage writes (E[T], t*) is back in the clock's unit.
FIT_UNITS = {"flops": 1e9}
FIT_UNIT_NAMES = {"flops": "GFLOPs", "process": "s", "wall": "s"}

EPS_UNITS = ("standardised", "pixel")  # eps on the standardised scale the model sees, or in [0, 1] pixel units


def to_standardised(value: Any, units: Any, pixel_std: Any) -> Any:
    """An attack strength on the standardised scale the model sees: a pixel-unit value
    divided by the data set's mean per-channel training std (exact for grey images; on
    CIFAR's channels the stds differ by under 10%), a standardised one as it is. Scalars or
    Series (units per row)."""
    if isinstance(units, pd.Series):
        return value.where(units != "pixel", value / pixel_std)
    value = float(value)
    return value / pixel_std if units == "pixel" else value


def to_pixel(value: Any, units: Any, pixel_std: Any) -> Any:
    """An attack strength in [0, 1] pixel units: a standardised value times the data set's
    pixel std, a pixel-unit one as it is. Scalars or Series (units per row)."""
    if isinstance(units, pd.Series):
        return value.where(units == "pixel", value * pixel_std)
    return value if units == "pixel" else value * pixel_std


def convert_eps(value: Any, units: str, to: str, pixel_std: Any) -> Any:
    """`value` in `units` converted to `to` (one of EPS_UNITS)."""
    return to_pixel(value, units, pixel_std) if to == "pixel" else to_standardised(value, units, pixel_std)


def eps_column(units: str) -> str:
    """curves.csv's eps column in `units`: eps_standardised or eps_pixel."""
    return f"eps_{units}"
