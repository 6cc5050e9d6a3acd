"""Jobs for the worker-process tests, in a module of their own: a spawned worker imports the
module of the function it runs, and this one loads no torch (the test module's 5 s)."""

import time

from trashfire.core.errors import ConfigError


def fail_with_config_error(key: str) -> int:
    raise ConfigError(key, "raised in a worker")


def sleep_then_count(seconds: float) -> int:
    time.sleep(seconds)
    return 1


def sleep_or_fail(seconds: float, fail: bool) -> int:
    if fail:
        time.sleep(3.0)  # the sleeper has started by then
        raise ConfigError("x", "failed")
    return sleep_then_count(seconds)


def process_and_threads() -> tuple[int, int]:
    import os

    import torch

    return os.getpid(), torch.get_num_threads()


def blas_threads() -> dict[str, int]:
    """The thread pools of the BLAS and OpenMP libraries SciPy and scikit-learn bring, loaded
    here, after the worker started (as a stage's library loads with its first job)."""
    import scipy.linalg  # noqa: F401 -- loads SciPy's OpenBLAS
    import sklearn.linear_model  # noqa: F401 -- loads scikit-learn's OpenMP
    from threadpoolctl import threadpool_info

    return {pool["internal_api"]: pool["num_threads"] for pool in threadpool_info()}


def ticking_job(cells: int) -> int:
    """A job of `cells` cells that says as each is done, as the attack stage's does."""
    from trashfire.core.parallel import tick

    for _ in range(cells):
        tick()
    return cells


def quiet_job(cells: int) -> int:
    """A job that says only at its end how many cells it did, as the train stage's."""
    return cells


MARK = "imported"  # a parent sets it before its pool starts: a forked worker sees the parent's value


def mark_and_torch() -> tuple[str, bool]:
    import sys

    return MARK, "torch" in sys.modules


def frozen_objects() -> int:
    """How many objects the worker's garbage collector leaves alone (gc.freeze)."""
    import gc

    return gc.get_freeze_count()


def finish_time(seconds: float) -> float:
    """Sleep, then the time the job ended."""
    time.sleep(seconds)
    return time.time()
