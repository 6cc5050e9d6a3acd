"""Units: an attack strength (eps) is stored once, in the units it was configured in, with the
data set's `pixel_std`, and converted here; and the clocks a time is measured on (FLOPs on
the compute clock, seconds on the others)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Clock:
    """A clock a time is measured on, declared once (the rest of trashfire reads these):
    - `name`: `timing.clock`'s value and the suffix of the tables' timed columns (t_train_<name>);
    - `unit`: the tables' unit of its times;
    - `latency`: the column of one query's cost on it (003's depth claim);
    - `fit_scale` and `fit_unit`: what the survival fits see its durations in. lifelines'
      optimisers (and its calibration spline) start near durations of order 1 and fail to
      converge on FLOPs of order 1e8, so the compute clock is fitted in GFLOPs; every time the
      stage writes (E[T], t*) is back in the clock's unit."""

    name: str
    unit: str
    latency: str
    fit_scale: float = 1.0
    fit_unit: str = ""  # empty: the clock's unit

    @property
    def fitted_in(self) -> str:
        return self.fit_unit or self.unit


COMPUTE = "flops"  # the compute clock: the model's work per sample, counted exactly
# every clock, the compute clock first: a new clock is one entry here (and the attack stage's
# measurement of it: the records' and outcome arrays' t_*_<name> and duration_<name>)
CLOCK_LIST = (
    Clock(COMPUTE, unit="FLOPs", latency="flops_per_query", fit_scale=1e9, fit_unit="GFLOPs"),
    Clock("process", unit="s", latency="seconds_per_query_process"),
    Clock("wall", unit="s", latency="seconds_per_query_wall"),
)
CLOCK_OF = {clock.name: clock for clock in CLOCK_LIST}
CLOCKS = tuple(CLOCK_OF)  # what `timing.clock` may choose
SECONDS = tuple(clock.name for clock in CLOCK_LIST if clock.unit == "s")  # the clocks that measure seconds
CLOCK_UNIT_NAMES = {clock.name: clock.unit for clock in CLOCK_LIST}  # the tables' unit, each clock's own
FIT_UNITS = {clock.name: clock.fit_scale for clock in CLOCK_LIST}
FIT_UNIT_NAMES = {clock.name: clock.fitted_in for clock in CLOCK_LIST}

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
