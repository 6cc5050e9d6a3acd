"""Arrays from a forked worker through memory both processes map (trashfire.core.shared_arrays):
what the worker puts is what the stage gets, to the bit, and the stage may write into it."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from trashfire.core.shared_arrays import ArrayChannel

_CHANNEL: list[ArrayChannel] = []  # inherited by the forked worker


def _put_in_worker(seed: int):
    rng = np.random.default_rng(seed)
    parts = [rng.random(rng.integers(0, 40)) for _ in range(300)]
    arrays = {"parts": parts, "grid": rng.integers(0, 9, (3, 4)).astype(np.int16), "text": np.array(["ab", "cde"]), "none": [np.zeros(0, bool)]}
    return _CHANNEL[0].put(arrays), os.getpid()


def test_a_forked_workers_arrays_arrive_whole_and_writable():
    channel = ArrayChannel()
    _CHANNEL.append(channel)
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            layout, worker = pool.apply(_put_in_worker, (3,))
        got = channel.get(layout)
    finally:
        _CHANNEL.clear()
        channel.close()
    rng = np.random.default_rng(3)  # the worker's draws again
    parts = [rng.random(rng.integers(0, 40)) for _ in range(300)]
    grid = rng.integers(0, 9, (3, 4)).astype(np.int16)
    assert worker != os.getpid()
    assert np.array_equal(got["parts"], np.concatenate(parts)) and got["parts"].dtype == np.float64
    assert np.array_equal(got["grid"], grid) and got["grid"].dtype == np.int16 and got["grid"].shape == (3, 4)
    assert got["text"].tolist() == ["ab", "cde"] and got["none"].shape == (0,)
    got["parts"][0] = -1.0  # a private mapping: the stage may change its arrays (the channel is closed by now)
    assert got["parts"][0] == -1.0


def test_arrays_of_several_dtypes_under_one_name_are_refused():
    channel = ArrayChannel()
    try:
        with pytest.raises(ValueError, match="one dtype per entry"):
            channel.put({"mixed": [np.zeros(2), np.zeros(2, np.int64)]})
    finally:
        channel.close()
