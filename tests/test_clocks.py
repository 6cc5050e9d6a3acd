"""The process clock leaves out the CPU time of threads that serve the sweep, not the trial."""

import threading
import time

from trashfire.core.clocks import Stopwatch, exclude_thread_cpu


def busy_thread(stop: threading.Event) -> threading.Thread:
    def spin():
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


def timed_sleep(seconds: float) -> float:
    with Stopwatch() as watch:
        time.sleep(seconds)
    return watch.elapsed.process


def test_an_excluded_threads_cpu_time_stays_out_of_the_process_clock():
    stop = threading.Event()
    counted = busy_thread(stop)
    polluted = timed_sleep(0.5)  # a busy thread of the same process counts
    stop.set(), counted.join()

    stop = threading.Event()
    excluded = busy_thread(stop)
    exclude_thread_cpu(excluded)
    clean = timed_sleep(0.5)
    stop.set(), excluded.join()
    assert polluted > 0.2 and clean < 0.05, (polluted, clean)
