"""bench/tree_memory.py: the benches' peak memory of a stage's process tree, which a forked
worker's shared pages must not double and whose reads must not slow the stage measured."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.paths import bench_script

tree_memory = bench_script("tree_memory")

# a parent that fills 400 MB, forks a child that shares them, and both hold a second
HOLDS_SHARED_PAGES = textwrap.dedent(
    """
    import os, time
    import numpy as np
    held = np.ones(50_000_000)  # 400 MB, written: resident
    child = os.fork()
    time.sleep(1.5)
    if child:
        os.waitpid(child, 0)
    else:
        os._exit(0)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="proportional set sizes are Linux's")
def test_a_forked_childs_shared_pages_count_once_in_the_trees_peak():
    process = subprocess.Popen([sys.executable, "-c", HOLDS_SHARED_PAGES])
    peak = tree_memory.peak_memory(process, every=0.05)
    process.wait(timeout=60)
    time.sleep(0.1)
    assert 0.4e9 <= peak[0] < 0.6e9  # resident sizes summed: over 0.8e9


def test_the_proportional_reads_take_at_most_their_share_of_the_wall_time(monkeypatch):
    reads = []

    def slow_read(process):  # as smaps_rollup of a 10 GB process: a walk of its page tables
        reads.append(time.perf_counter())
        time.sleep(0.05)
        return 1

    monkeypatch.setattr(tree_memory, "held_bytes", slow_read)
    monkeypatch.setattr(tree_memory, "resident_bytes", lambda members: 2**40)  # always above the peak: a read is wanted
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    tree_memory.peak_memory(process, every=0.01, share=0.05)
    process.wait(timeout=60)
    # each 0.05 s read is followed by 1 s (0.05 / 0.05) without one: 3 or 4 reads in 3 s, not 50
    assert 2 <= len(reads) <= 4
    assert min(later - earlier for earlier, later in zip(reads, reads[1:])) >= 0.95
