"""Both clocks for every timed call: process CPU time (TRASHFIRE's) and wall time with a
device synchronise (the right one on a GPU, where the CPU only queues kernels)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

CLOCKS = ("process", "wall")


@dataclass
class Elapsed:
    process: float = 0.0
    wall: float = 0.0


class Stopwatch:
    """`with Stopwatch(device) as watch: ...` then `watch.elapsed`."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.elapsed = Elapsed()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> "Stopwatch":
        self._sync()
        self._process = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.elapsed = Elapsed(time.process_time() - self._process, time.perf_counter() - self._wall)
