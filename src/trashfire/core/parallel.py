"""The cells of a stage spread over worker processes (`compute.workers`).

On a CPU, torch's threads scale poorly on the small models of the default and not at all in
the black-box attacks and LIME, which run Python loops: several processes of few threads do
more work per second than one process of many threads. On a GPU one process keeps the device.

Each job is a plain module-level function and its arguments (sent by pickling: configs and
cells, not tensors); a worker loads what it needs and caches it for its next jobs. Workers
are spawned, not forked (a fork after torch has run its thread pool can hang), and die with
their parent, so a killed stage leaves no worker writing; each record is written atomically
by the worker that computed it, so what a killed run leaves is whole cells only.

Every cell is computed with `compute.threads` torch and BLAS threads (default 1), in a worker
or, with one worker or one job, in the stage's own process (limited to them while it computes
cells).
Floating-point sums depend on the thread count (a model trained with 1 and with 2 threads
differs in its last bits, and so do the attacks on it), so with a fixed `compute.threads`
records are bit-identical for one machine whatever `compute.workers` and the scheduling
(records keep `threads`); `compute.threads: auto` gives each worker cores / workers threads,
and its records then depend on `compute.workers`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tqdm import tqdm

from trashfire.core.errors import TrashfireError

MAX_AUTO_WORKERS = 8  # each worker holds its own torch and data: memory grows with the count
# attack cells from which a table stage forks workers for its parts (below, a fork costs more than it saves)
FORK_CELLS = 2000
_PR_SET_PDEATHSIG = 1


class WorkerDied(TrashfireError):
    exit_code = 1


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(setting: Any, device_type: str) -> int:
    """`auto`: one process per core on a CPU (at most MAX_AUTO_WORKERS), one on a GPU."""
    if setting == "auto":
        return 1 if device_type != "cpu" else max(1, min(available_cores(), MAX_AUTO_WORKERS))
    return int(setting)


def describe(workers: int, threads: int | None = None, largest_batch: int | None = None) -> str:
    """Where the cells run, for the stage's plan line; `largest_batch`: the most jobs any one
    `results_as_completed` call gets (a lone job runs in this process)."""
    threads = threads_per_cell(workers) if threads is None else threads
    if workers > 1 and largest_batch != 1:
        return f"{workers} worker processes, {threads} thread(s) each"
    return f"in this process, {threads} thread(s)"


def threads_per_cell(workers: int, setting: Any = "auto") -> int:
    """`compute.threads`: a number of threads, or `auto`: the cores shared by the workers."""
    if setting != "auto":
        return int(setting)
    return max(1, available_cores() // max(1, workers))


def torch_loaded() -> bool:
    """Whether this process has imported torch. A table stage (survival's fits) never does, and
    must not pay torch's import (2 s a process) just to set threads it will not use; a stage
    that computes with torch imports it with its modules, before it limits threads."""
    return "torch" in sys.modules


@contextlib.contextmanager
def threads_limited(threads: int) -> Iterator[None]:
    """torch's (where loaded) and NumPy's BLAS threads set to `threads` in this process, restored after."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch else None
    if torch:
        torch.set_num_threads(threads)
    try:
        with threadpool_limits(threads):
            yield
    finally:
        if torch:
            torch.set_num_threads(before)


def limit_threads(threads: int, with_torch: bool = True) -> None:
    """NumPy's BLAS threads (lifelines, LIME's regressions) and, `with_torch`, torch's, for this process."""
    from threadpoolctl import threadpool_limits

    if with_torch:
        import torch

        torch.set_num_threads(threads)
    _THREAD_LIMITS.append(threadpool_limits(threads))  # the limits hold while the object lives


_THREAD_LIMITS: list = []


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc: a killed stage's workers finish their cell and stop
        return
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)  # cannot be tied to the parent, or it died already: a worker must not write on alone


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
_KEEPING: list[bool] = []


def keep_freed_memory(top: int = 1 << 30) -> bool:
    """From now on this process (glibc) takes large arrays from its heap, and what it frees stays
    there for the next one (up to `top` bytes at the heap's top, the rest of it back to the
    kernel), instead of fresh pages that the kernel maps and zeroes a fault at a time: on a
    virtual machine a survival fit worker at 10^7 rows spent a fifth of its time there. The
    process's memory then stays near its high-water mark: for a worker whose jobs come largest
    last. False where the C library is not glibc (nothing changes)."""
    if _KEEPING:
        return True
    try:
        libc = ctypes.CDLL("libc.so.6")
        kept = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, int(top)) == 1
    except (OSError, AttributeError):
        return False
    _KEEPING.extend([True] if kept else [])
    return kept


def release_freed_memory() -> bool:
    """Give back to the kernel the pages this process's heap holds free (glibc's malloc_trim),
    its high-water mark after `keep_freed_memory`: where a step that needed much is done and the
    next one, with another process's at the same time, would otherwise find the memory taken.
    False where the C library is not glibc, or nothing was free to give back."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


# read by OpenBLAS, MKL and OpenMP (SciPy's and scikit-learn's pools) when they load
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _init_worker(parent: int, threads: int, level: int, prog: str, with_torch: bool, ticks=None) -> None:
    _die_with_parent(parent)
    if ticks is not None:
        _TICKS.append(ticks.put)
    # the job's module (SciPy, scikit-learn) loads after this, when its first job arrives: the
    # variables cap the pools it brings, threadpool_limits those the worker has already
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    limit_threads(threads, with_torch)  # a worker computes with torch where its stage does
    from trashfire.core.cli import configure_logging

    configure_logging(prog)
    logging.getLogger("trashfire").setLevel(level)


def run_jobs(job: Callable[..., int], arguments: Sequence[tuple], workers: int, progress: tqdm, prog: str, threads: int | None = None) -> None:
    """`job(*args)` for each args; each job returns how many cells it finished, for the bar,
    which moves sooner where a job calls `tick()` as each of its cells is done (in a worker
    too). See `results_as_completed`."""
    ticked = 0

    def on_tick(count: int) -> None:
        nonlocal ticked
        ticked += count
        progress.update(count)

    _TICKS.append(on_tick)
    try:
        finished = 0
        for _, done in results_as_completed(job, arguments, workers, prog, threads):
            finished += done
            if finished > ticked:  # a job that does not tick moves the bar when it ends
                progress.update(finished - ticked)
                ticked = finished
    finally:
        _TICKS.pop()


_TICKS: list[Callable[[int], None]] = []  # this process's bar, or a worker's queue to its stage's


def tick(count: int = 1) -> None:
    """A job's cell is done: the stage's progress bar moves now (from a worker, through its queue)."""
    if _TICKS:
        _TICKS[-1](count)


def results_as_completed(
    job: Callable[..., Any],
    arguments: Sequence[tuple],
    workers: int,
    prog: str,
    threads: int | None = None,
    away: bool = False,
    fork: bool = False,
    meanwhile: Callable[[], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """(index into arguments, job(*args)) as each job finishes: in order in this process when
    workers is 1 or there is one job (`away`: in one worker process all the same, so that this
    process works on the results meanwhile), else over `workers` processes (give the longest jobs first;
    `fork`: forked where this process has not loaded torch, so that they start with its
    modules instead of importing them again, seconds each); each with
    `threads` threads (None: cores / workers in a worker, the process's own in this one),
    this process too while it waits and handles the results. The first failing job's error
    is raised at once: the other workers are killed (their finished cells are on disk; a
    rerun computes the rest). `meanwhile()` runs here once the jobs are handed out, before the
    first result is awaited (in order: before the first job)."""
    if not arguments:
        return
    if workers > 1 and len(arguments) == 1 and not away:  # a pool of one costs a process start (torch: seconds) and gains nothing
        threads, workers = threads_per_cell(workers) if threads is None else threads, 1  # the threads a worker would have had
    with threads_limited(threads) if threads is not None else contextlib.nullcontext():
        yield from _as_completed(
            job, arguments, workers, prog, threads_per_cell(workers) if threads is None else threads, away, fork and not torch_loaded(), meanwhile
        )


def _as_completed(
    job: Callable[..., Any],
    arguments: Sequence[tuple],
    workers: int,
    prog: str,
    threads: int,
    away: bool = False,
    fork: bool = False,
    meanwhile: Callable[[], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    if workers <= 1 and not away:
        if meanwhile is not None:
            meanwhile()
        for index, args in enumerate(arguments):
            yield index, job(*args)
        return
    context = multiprocessing.get_context("fork" if fork else "spawn")  # spawn: a forked torch can hang on its threads
    ticks = context.SimpleQueue() if _TICKS else None  # the workers' tick()s, for this process's bar
    init = (os.getpid(), threads, logging.getLogger("trashfire").getEffectiveLevel(), prog, torch_loaded(), ticks)
    if fork:  # the objects alive at the fork stay out of every garbage collection until the pool is done (gc.freeze's docs):
        gc.freeze()  # a worker's collections would write into, and so copy, each page holding one; this process's would scan them again and again
    pool = ProcessPoolExecutor(min(workers, len(arguments)) or 1, mp_context=context, initializer=_init_worker, initargs=init)
    try:
        pending = {pool.submit(job, *args): index for index, args in enumerate(arguments)}
        if meanwhile is not None:
            meanwhile()
        while pending:
            done, _ = wait(pending, timeout=TICK_SECONDS if ticks is not None else None, return_when=FIRST_COMPLETED)
            _drain(ticks)
            for future in done:
                index = pending.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool as err:
                    raise WorkerDied(f"a worker process died ({err}); out of memory? try fewer processes: compute.workers=1") from None
                yield index, result
    except BaseException:
        _kill_workers(pool)
        raise
    finally:
        if fork:
            gc.unfreeze()
    pool.shutdown()


_PARTS: dict[int, Callable[[], Any]] = {}  # beside()'s parts, read by the forked worker


def _inherited_part(key: int) -> Any:
    return _PARTS[key]()


def beside(part: Callable[[], Any], meanwhile: Callable[[], Any], workers: int, prog: str) -> tuple[Any, Any]:
    """part() in a forked worker while meanwhile() runs in this process; both results. The
    part is a closure: the worker reads this process's objects as they were at the fork (none
    is pickled to it) and its result comes back pickled. Where `workers` is 1 or this process
    has loaded torch (a forked torch can hang), both run here, the part first."""
    if workers <= 1 or torch_loaded():
        return part(), meanwhile()
    key, here = id(part), []
    _PARTS[key] = part
    try:
        ((_, there),) = results_as_completed(_inherited_part, [(key,)], 2, prog, threads=1, away=True, fork=True, meanwhile=lambda: here.append(meanwhile()))
    finally:
        _PARTS.pop(key, None)
    return there, here[0]


TICK_SECONDS = 0.5  # how often the stage's bar takes its workers' ticks


def _drain(ticks) -> None:
    while ticks is not None and not ticks.empty():
        tick(ticks.get())


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    processes = list((pool._processes or {}).values())  # no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join()
