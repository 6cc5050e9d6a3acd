"""The peak memory of a running process tree (a stage and its workers), sampled without
slowing what it measures.

Each process counts its proportional set size (Linux: a page shared by k processes counts 1/k
in each), so that the tree's sum is the memory it holds: a forked worker shares the stage's
rows, which a sum of resident sizes counts twice. Elsewhere, resident sizes.

Reading a process's proportional set size (/proc/<pid>/smaps_rollup) walks its page tables
under its memory map's lock. At 10 GB that took 0.1-0.25 s per read; read every 0.2 s it used a
quarter of a core and stalled the process's own mappings: the timing stage at 10^7 samples ran
in 89 s sampled so, 78.5 s unsampled. So the sampler reads every process's resident size (a
counter, no walk) every `every` seconds, and the proportional sizes only when the resident
sum exceeds the peak so far (a proportional size never exceeds the resident one, so no
higher peak is possible otherwise), and at most so often that those reads take `share` of
the wall time.
"""

from __future__ import annotations

import subprocess
import threading
import time

import psutil


def held_bytes(process: psutil.Process) -> int:
    """A process's proportional set size (smaps_rollup, which needs no parse of every mapping as
    psutil's full memory info does), or its resident size where the kernel has none."""
    try:
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            return next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return process.memory_info().rss


def tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def resident_bytes(processes: list[psutil.Process]) -> int:
    return _summed(processes, lambda member: member.memory_info().rss)


def proportional_bytes(processes: list[psutil.Process]) -> int:
    return _summed(processes, lambda member: held_bytes(member))  # looked up when called: a test replaces held_bytes


def _summed(processes: list[psutil.Process], bytes_of) -> int:
    total = 0
    for member in processes:
        try:
            total += bytes_of(member)
        except psutil.Error:  # ended between the listing and the reading
            pass
    return total


def peak_memory(process: subprocess.Popen, every: float = 0.2, share: float = 0.05) -> list[float]:
    """Samples `process`'s tree from a thread until it ends; returns [peak bytes], filled in
    meanwhile (see the module's docstring for how it samples)."""
    peak = [0.0]

    def sample() -> None:
        root, next_read = psutil.Process(process.pid), 0.0
        while process.poll() is None:
            try:
                members = tree(root)
                if resident_bytes(members) > peak[0] and time.perf_counter() >= next_read:
                    began = time.perf_counter()
                    peak[0] = max(peak[0], proportional_bytes(members))
                    cost = time.perf_counter() - began
                    next_read = began + cost / share
            except psutil.Error:
                pass
            time.sleep(every)

    threading.Thread(target=sample, daemon=True).start()
    return peak
