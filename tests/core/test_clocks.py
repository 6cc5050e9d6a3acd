"""The process clock leaves out the CPU time of threads that serve the sweep, not the trial."""

import threading
import time

from trashfire.core.clocks import Stopwatch, exclude_thread_cpu


def busy_thread(stop: threading.Event, used: list[float]) -> threading.Thread:
    """A thread that spins until `stop`, then appends the CPU seconds it got to `used`."""

    def spin():
        while not stop.is_set():
            sum(range(1000))
        used.append(time.thread_time())

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


def timed_sleep(seconds: float) -> float:
    with Stopwatch() as watch:
        time.sleep(seconds)
    return watch.elapsed.process


def test_an_excluded_threads_cpu_time_stays_out_of_the_process_clock():
    # compared with the CPU each busy thread got, which a loaded machine makes smaller
    stop, counted_cpu = threading.Event(), []
    counted = busy_thread(stop, counted_cpu)
    polluted = timed_sleep(0.5)  # a busy thread of the same process counts
    stop.set(), counted.join()

    stop, excluded_cpu = threading.Event(), []
    excluded = busy_thread(stop, excluded_cpu)
    exclude_thread_cpu(excluded)
    clean = timed_sleep(0.5)
    stop.set(), excluded.join()
    assert counted_cpu[0] > 0.05 and excluded_cpu[0] > 0.05, (counted_cpu, excluded_cpu)  # both threads ran
    assert polluted > 0.5 * counted_cpu[0] and clean < 0.05, (polluted, counted_cpu, clean)
