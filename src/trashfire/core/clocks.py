"""Both clocks for every timed call: process CPU time (TRASHFIRE's) and wall time with a
device synchronise (the right one on a GPU, where the CPU only queues kernels).

The process clock counts every thread of the process (torch's compute threads are what it
is for), so threads that serve the sweep rather than the trial, such as the study's
heartbeat, register with `exclude_thread_cpu` and their CPU time is taken out."""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

CLOCKS = ("process", "wall")


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


class LapClock:
    """The per-sample failure clock: an attack's compute cut into laps, each lap's time on
    both clocks shared equally by the samples it worked on. A sample's duration is the sum of
    its shares, so a cell's durations sum to the time from `start` to the last lap."""

    def __init__(self, n_samples: int, device: Any = "cpu"):
        self.device = device
        self.process = np.zeros(n_samples)
        self.wall = np.zeros(n_samples)
        self._mark: tuple[float, float] | None = None
        self._start: tuple[float, float] | None = None

    @property
    def total(self) -> Elapsed:
        """From `start` to the last lap: what the laps shared out, to the last bit."""
        return Elapsed(self._mark[0] - self._start[0], self._mark[1] - self._start[1])

    def _now(self) -> tuple[float, float]:
        synchronise(self.device)
        return process_cpu_time(), time.perf_counter()

    def start(self) -> LapClock:
        self._mark = self._start = self._now()
        return self

    def lap(self, members) -> None:
        """The time since the last mark, shared by `members` (sample indices); with none,
        it goes to no sample (work that served none of them)."""
        now = self._now()
        members = np.asarray(members, dtype=np.int64)
        if len(members):
            self.process[members] += (now[0] - self._mark[0]) / len(members)
            self.wall[members] += (now[1] - self._mark[1]) / len(members)
        self._mark = now
