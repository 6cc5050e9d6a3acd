"""The cells of a stage spread over worker processes (`train.workers`).

On a CPU, torch's threads scale poorly on the small models of the default and not at all in
the black-box attacks and LIME, which run Python loops: several one-thread processes do more
work per second than one process of several threads. On a GPU one process keeps the device.

Each job is a plain module-level function and its arguments (sent by pickling: configs and
cells, not tensors); a worker loads what it needs and caches it for its next jobs. Workers
are spawned, not forked (a fork after torch has run its thread pool can hang), and die with
their parent, so a killed stage leaves no worker writing; each record is written atomically
by the worker that computed it, so what a killed run leaves is whole cells only.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence

import torch
from tqdm import tqdm

log = logging.getLogger(__name__)

MAX_AUTO_WORKERS = 8  # each worker holds its own torch and data: memory grows with the count
_PR_SET_PDEATHSIG = 1


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(setting: Any, device: torch.device) -> int:
    """`auto`: one process per core on a CPU (at most MAX_AUTO_WORKERS), one on a GPU."""
    if setting == "auto":
        return 1 if device.type != "cpu" else max(1, min(available_cores(), MAX_AUTO_WORKERS))
    return int(setting)


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not glibc: a killed stage's workers finish their cell and stop
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


_THREAD_LIMITS: list = []  # kept alive: the limits hold while the object does


def _init_worker(parent: int, threads: int, level: int, prog: str) -> None:
    _die_with_parent(parent)
    torch.set_num_threads(threads)
    from threadpoolctl import threadpool_limits

    _THREAD_LIMITS.append(threadpool_limits(threads))  # NumPy's BLAS too (lifelines, LIME's regressions)
    from trashfire.cli import configure_logging

    configure_logging(prog)
    logging.getLogger("trashfire").setLevel(level)


def run_jobs(job: Callable[..., int], arguments: Sequence[tuple], workers: int, progress: tqdm, prog: str) -> None:
    """`job(*args)` for each args, in order when workers is 1, else over `workers` processes
    (give the longest jobs first); each job returns how many cells it finished for the bar.
    The first failing job stops the rest and its error is raised."""
    for _, finished in completed(job, arguments, workers, prog):
        progress.update(finished)


def completed(job: Callable[..., Any], arguments: Sequence[tuple], workers: int, prog: str) -> Iterator[tuple[int, Any]]:
    """(index into arguments, job(*args)) as each job finishes: in order in this process when
    workers is 1, else over `workers` processes. The first failing job stops the rest and its
    error is raised."""
    if workers <= 1 or len(arguments) <= 1:
        for index, args in enumerate(arguments):
            yield index, job(*args)
        return
    workers = min(workers, len(arguments))
    threads = max(1, available_cores() // workers)
    context = multiprocessing.get_context("spawn")
    init = (os.getpid(), threads, logging.getLogger("trashfire").getEffectiveLevel(), prog)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=init) as pool:
        pending = {pool.submit(job, *args): index for index, args in enumerate(arguments)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
