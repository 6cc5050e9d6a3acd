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


NEW_CLOCK_CHECK = """
from trashfire.core import schema
from trashfire.core.config import validate
from trashfire.core.errors import ConfigError
from trashfire.survival.analysis import FIT_UNIT_NAMES
import sys
from tests.conftest import tiny_config

gpu = schema.CLOCK_OF["gpu"]
assert schema.CLOCKS[-1] == "gpu" and "gpu" in schema.SECONDS, schema.CLOCKS
assert {"t_train_gpu", "t_attack_gpu"} <= set(schema.EXPERIMENTS), "the timed columns"
assert gpu.latency in schema.LATENCY and "trash_adv_gpu" in schema.ON_CLOCKS
assert {"seconds_per_flop_gpu", "t_predict_gpu"} <= set(schema.EXPERIMENTS) and "t_train_gpu" in schema.CARD_TIMES
assert FIT_UNIT_NAMES["gpu"] == "s"
from pathlib import Path
cfg = tiny_config(Path(sys.argv[1]))
cfg.clock = "gpu"
validate(cfg)  # the config check takes the new clock
cfg.clock = "sundial"
try:
    validate(cfg)
except ConfigError as err:
    assert "gpu" in str(err), err  # and names it among the allowed ones
else:
    raise AssertionError("an unknown clock passed the config check")
print("ok")
"""


def test_a_new_clock_is_one_entry_of_the_clock_list(tmp_path):
    """A scratch copy of the package with one more `Clock` in `schema.units.CLOCK_LIST`: the
    clock's names, timed columns, latency column and fit unit follow, and the config check
    allows it as `clock` (the attack stage's measurement of it is the rest of the work)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import ROOT

    source = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "trashfire", source / "trashfire", ignore=shutil.ignore_patterns("__pycache__"))
    units = source / "trashfire" / "core" / "schema" / "units.py"
    declared = '    Clock("wall", unit="s", latency="seconds_per_query_wall"),\n'
    assert declared in units.read_text()
    units.write_text(units.read_text().replace(declared, declared + '    Clock("gpu", unit="s", latency="seconds_per_query_gpu"),\n'))
    env = {"PYTHONPATH": f"{source}{__import__('os').pathsep}{ROOT}", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, "-c", NEW_CLOCK_CHECK, str(tmp_path / "work")], capture_output=True, text=True, env=env, cwd=Path(ROOT))
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-3000:]
