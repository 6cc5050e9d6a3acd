"""Both clocks for every timed call: process CPU time (TRASHFIRE's) and wall time with a
device synchronise (the right one on a GPU, where the CPU only queues kernels).

The process clock counts every thread of the process (torch's compute threads are what it
is for), so threads that serve the sweep rather than the trial, such as the study's
heartbeat, register with `exclude_thread_cpu` and their CPU time is taken out."""

from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trashfire.core.schema.units import CLOCKS, COMPUTE, SECONDS  # noqa: F401 -- the clocks' names, owned by the schema

# the torch loop's pricing group; its reference units all do the same work (a forward and a
# backward of a whole batch), so its rate is their median; the others' (image searches,
# checks) is pooled
STEPS = "steps"
TYPICAL = (STEPS,)


_EXCLUDED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def exclude_thread_cpu(thread: threading.Thread) -> None:
    """Leave a started thread's CPU time out of the process clock while it runs."""
    _EXCLUDED.add(thread)


def _thread_cpu(thread: threading.Thread) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, TypeError, ValueError, AttributeError):  # finished, or not a POSIX thread
        return 0.0


def process_cpu_time() -> float:
    """CPU seconds of this process, less those of the excluded threads."""
    return time.process_time() - sum(_thread_cpu(t) for t in list(_EXCLUDED) if t.is_alive())


def synchronise(device: Any) -> None:
    """Wait for the device's queued kernels (a no-op on the CPU). torch is imported only for
    a CUDA device, so that the table stages, which time nothing on a device, never load it."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


@dataclass
class Elapsed:
    process: float = 0.0
    wall: float = 0.0


class Stopwatch:
    """`with Stopwatch(device) as watch: ...` then `watch.elapsed`."""

    def __init__(self, device: Any = "cpu"):
        self.device = device
        self.elapsed = Elapsed()

    def _sync(self) -> None:
        synchronise(self.device)

    def __enter__(self) -> Stopwatch:
        self._sync()
        self._process = process_cpu_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.elapsed = Elapsed(process_cpu_time() - self._process, time.perf_counter() - self._wall)


@dataclass
class Lap:
    """One lap of an attack: its seconds on both clocks, the FLOPs the model ran in it (for
    every sample it worked on, charged or not), the pricing group it belongs to and its unit
    (laps of one unit, a step's forward and backward, are one measurement of the rate), and
    whether it is a reference lap, one where the whole batch was active."""

    group: str
    unit: Any
    process: float
    wall: float
    flops: int
    reference: bool


@dataclass
class Rate:
    """Seconds per FLOP of a pricing group, on both clocks, from its reference laps (`rate_of`):
    the units' median (or pooled) rate, their spread (max / min - 1), how many units."""

    process: float
    wall: float
    spread_process: float
    spread_wall: float
    units: int
    source: str  # "laps" (the attack's own full-batch laps) or "calibration"

    def of(self, clock: str) -> float:
        return getattr(self, clock)


class LapClock:
    """The per-sample failure clock (docs/design.md): work counted, then priced.

    - Compute, exact: each sample's forward queries and input-gradient evaluations (`count`),
      in FLOPs at the model's cost per sample, kept per pricing group (a composite's
      components are priced apart).
    - Laps, measured: the attack's time cut into laps on both clocks. Each lap's time is
      shared equally by the samples it worked on (`process_shared`, `wall_shared`: a cell's
      shared durations sum to its time from `start` to the last lap), and each reference lap
      (the whole batch active) measures its group's seconds per FLOP.
    - Priced: a sample's seconds = its FLOPs in each group x the group's rate (`priced`), so
      they do not depend on how many other samples of its batch were still standing."""

    def __init__(self, n_samples: int, device: Any = "cpu", forward: int = 0, backward: int = 0):
        self.device = device
        self.forward, self.backward = int(forward), int(backward)
        self.process_shared = np.zeros(n_samples)
        self.wall_shared = np.zeros(n_samples)
        self.queries = np.zeros(n_samples, dtype=np.int64)
        self.gradients = np.zeros(n_samples, dtype=np.int64)
        self.group_flops: dict[str, np.ndarray] = {}
        self.laps: list[Lap] = []
        self.calibrated: dict[str, Rate] = {}
        self._lap_flops = 0
        self._units = 0
        self._mark: tuple[float, float] | None = None
        self._start: tuple[float, float] | None = None

    @property
    def total(self) -> Elapsed:
        """From `start` to the last lap: what the laps shared out, to the last bit."""
        return Elapsed(self._mark[0] - self._start[0], self._mark[1] - self._start[1])

    @property
    def flops(self) -> np.ndarray:
        """Each sample's compute in FLOPs, over every group."""
        return self.work(self.queries, self.gradients)

    def work(self, queries, gradients):
        """The FLOPs of `queries` forward passes of which `gradients` went on to a backward."""
        return np.asarray(queries, dtype=np.int64) * self.forward + np.asarray(gradients, dtype=np.int64) * self.backward

    def _now(self) -> tuple[float, float]:
        synchronise(self.device)
        return process_cpu_time(), time.perf_counter()

    def start(self) -> LapClock:
        self._mark = self._start = self._now()
        return self

    def count(self, members, queries: int = 0, gradients: int = 0, group: str = "attack") -> None:
        """Charge each of `members` (sample indices) `queries` forward passes and `gradients`
        backward passes to the input (each on a forward already counted as a query); scalars
        or arrays aligned with `members`."""
        members = np.asarray(members, dtype=np.int64)
        self.queries[members] += queries
        self.gradients[members] += gradients
        flops = np.broadcast_to(self.work(queries, gradients), members.shape)
        self.group_flops.setdefault(group, np.zeros(len(self.queries), dtype=np.int64))[members] += flops
        self._lap_flops += int(flops.sum())

    def uncharged(self, rows: int, queries: int = 0, gradients: int = 0) -> None:
        """Work of this lap on `rows` samples that is nobody's (their clocks have stopped):
        it counts towards the lap's rate, not towards any sample."""
        self._lap_flops += int(rows * self.work(queries, gradients))

    def new_unit(self) -> int:
        self._units += 1
        return self._units

    def lap(self, members, group: str = "attack", reference: bool = False, unit: int | None = None) -> None:
        """The time since the last mark, shared by `members` (sample indices); with none,
        it goes to no sample (work that served none of them). The lap's counted FLOPs and
        seconds measure `group`'s rate where `reference`."""
        now = self._now()
        members = np.asarray(members, dtype=np.int64)
        process, wall = now[0] - self._mark[0], now[1] - self._mark[1]
        if len(members):
            self.process_shared[members] += process / len(members)
            self.wall_shared[members] += wall / len(members)
        self.laps.append(Lap(group, self.new_unit() if unit is None else unit, process, wall, self._lap_flops, reference))
        self._lap_flops = 0
        self._mark = now

    def reference_laps(self, group: str) -> list[Lap]:
        return [lap for lap in self.laps if lap.group == group and lap.reference and lap.flops > 0]

    def rates(self) -> dict[str, Rate]:
        """Each group's seconds per FLOP: as set (`calibrated`: a calibration, or a rate pooled
        over the model cell's attack cells), else from its own reference laps."""
        rates = dict(self.calibrated)
        for group in self.group_flops:
            laps = self.reference_laps(group)
            if laps and group not in rates:
                rates[group] = rate_of(laps, "laps", typical=group in TYPICAL)
        return rates

    def priced(self) -> dict[str, np.ndarray]:
        """Each sample's seconds on both clocks: its FLOPs in each group x the group's rate."""
        rates = self.rates()
        missing = [group for group, flops in self.group_flops.items() if flops.any() and group not in rates]
        if missing:
            raise RuntimeError(f"no reference lap to price {missing}: calibrate them first")
        seconds = {clock: np.zeros(len(self.queries)) for clock in SECONDS}
        for group, flops in self.group_flops.items():
            if group in rates:
                for clock in SECONDS:
                    seconds[clock] += flops * rates[group].of(clock)
        return seconds


def rate_of(laps: list[Lap], source: str, typical: bool = True) -> Rate:
    """Seconds per FLOP from `laps`, grouped into their units (a unit's seconds over its FLOPs):
    `typical`, the median of the units' rates (for units of the same work, a step of the same
    batch: robust to the steps something else on the machine disturbed, and unlike their
    fastest, not lower for a pool of more steps); otherwise their seconds over their FLOPs
    pooled (for units of differing work, one image's search each). The spread: the units'
    rates, max / min - 1 (0 from one unit)."""
    units: dict[Any, list[Lap]] = {}
    for lap in laps:
        units.setdefault(lap.unit, []).append(lap)
    flops = np.array([sum(lap.flops for lap in unit) for unit in units.values()], dtype=float)
    rate, spread = {}, {}
    for clock in SECONDS:
        seconds = np.array([sum(getattr(lap, clock) for lap in unit) for unit in units.values()])
        per_unit = seconds / flops
        rate[clock] = float(np.median(per_unit) if typical else seconds.sum() / flops.sum())
        spread[clock] = float(per_unit.max() / per_unit.min() - 1) if per_unit.min() > 0 else math.inf
    return Rate(rate["process"], rate["wall"], spread["process"], spread["wall"], len(units), source)


def pooled_rate(clocks: list[LapClock], group: str, source: str) -> Rate | None:
    """One rate of `group` over the reference laps of several clocks (the same model's cells),
    each lap's unit kept apart per clock; None without a reference lap."""
    laps = [replace(lap, unit=(number, lap.unit)) for number, clock in enumerate(clocks) for lap in clock.reference_laps(group)]
    return rate_of(laps, source, typical=group in TYPICAL) if laps else None
