"""The clocks on scripted time: what `Stopwatch` and `LapClock` measure, share out and price,
against values computed by hand (the mutation run, `make mutation`, found these untested)."""

import math
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from trashfire.core import clocks
from trashfire.core.clocks import Elapsed, Lap, LapClock, Rate, Stopwatch, pooled_rate, rate_of


@pytest.fixture
def now(monkeypatch):
    """Both clocks, set by the test: `now.process` CPU seconds, `now.wall` seconds."""
    reading = SimpleNamespace(process=0.0, wall=0.0)
    monkeypatch.setattr(clocks, "process_cpu_time", lambda: reading.process)
    monkeypatch.setattr(clocks, "time", SimpleNamespace(perf_counter=lambda: reading.wall))
    return reading


@pytest.fixture
def cuda(monkeypatch):
    """A stand-in torch that records the devices it synchronises."""
    synchronised = []
    fake = SimpleNamespace(cuda=SimpleNamespace(synchronize=synchronised.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    return synchronised


# Stopwatch: the clock of t_train


def test_stopwatch_measures_the_difference_on_both_clocks(now):
    now.process, now.wall = 100.0, 1000.0  # the process has run before the watch starts
    with Stopwatch() as watch:
        now.process, now.wall = 100.25, 1000.5
    assert watch.elapsed == Elapsed(process=0.25, wall=0.5)


def test_a_stopwatch_reads_zero_before_it_has_run():
    assert Stopwatch().elapsed == Elapsed(0.0, 0.0)


def test_a_sleep_takes_wall_time_and_no_process_time():
    with Stopwatch() as watch:
        time.sleep(0.05)
    assert watch.elapsed.wall >= 0.05
    assert 0 <= watch.elapsed.process < 0.02, watch.elapsed


def test_a_stopwatch_on_a_gpu_waits_for_its_kernels_at_both_ends(cuda, now):
    with Stopwatch("cuda:1"):
        assert cuda == ["cuda:1"]
    assert cuda == ["cuda:1", "cuda:1"]


def test_on_the_cpu_nothing_is_synchronised(cuda, now):
    with Stopwatch():
        pass
    clocks.synchronise("cpu")
    assert cuda == []


def test_a_thread_without_a_cpu_clock_counts_no_time():
    # an excluded thread that ended (or never started) while the clock was read
    assert clocks._thread_cpu(threading.Thread(target=lambda: None)) == 0.0


# LapClock: laps shared out, work counted, then priced


def run_laps(now) -> LapClock:
    """Three samples, 10 FLOPs a forward and 20 a backward:
    - lap 1 (0.9 s process, 0.45 s wall): all three, a forward and backward each: 90 FLOPs;
    - lap 2 (2.1 s, 0.7 s): samples 1 and 2 (60 FLOPs) and a forward for a stopped row (10);
    - lap 3 (0.5 s, 0.2 s): sample 2 alone, a forward (10 FLOPs), not a reference lap;
    - lap 4 (0.1 s, 0.05 s): work for nobody."""
    now.process, now.wall = 1.0, 5.0
    clock = LapClock(3, forward=10, backward=20).start()
    clock.count([0, 1, 2], queries=1, group="steps")  # a forward, then a backward, in one lap
    clock.count([0, 1, 2], gradients=1, group="steps")
    now.process, now.wall = 1.9, 5.45
    clock.lap([0, 1, 2], group="steps", reference=True)
    clock.count([1, 2], queries=1, gradients=1, group="steps")
    clock.uncharged(1, queries=1)
    now.process, now.wall = 4.0, 6.15
    clock.lap([1, 2], group="steps", reference=True)
    clock.count([2], queries=1, group="steps")
    now.process, now.wall = 4.5, 6.35
    clock.lap([2], group="steps")
    now.process, now.wall = 4.6, 6.4
    clock.lap([])
    return clock


def test_lap_clock_shares_each_lap_equally_among_its_samples(now):
    clock = run_laps(now)
    # process: .9 / 3 each; + 2.1 / 2 to samples 1, 2; + .5 to sample 2
    np.testing.assert_allclose(clock.process_shared, [0.3, 1.35, 1.85])
    np.testing.assert_allclose(clock.wall_shared, [0.15, 0.5, 0.7])
    # from start to the last lap: 3.6 s and 1.4 s, the shares plus the lap nobody took (.1, .05)
    assert clock.total.process == pytest.approx(3.6) and clock.total.wall == pytest.approx(1.4)


def test_lap_clock_records_each_lap_with_its_group_unit_seconds_and_flops(now):
    laps = run_laps(now).laps
    assert [(lap.group, lap.unit, lap.flops, lap.reference) for lap in laps] == [
        ("steps", 1, 90, True),
        ("steps", 2, 70, True),  # the stopped row's forward counts towards the lap's rate
        ("steps", 3, 10, False),
        ("attack", 4, 0, False),
    ]
    assert [lap.process for lap in laps] == pytest.approx([0.9, 2.1, 0.5, 0.1])
    assert [lap.wall for lap in laps] == pytest.approx([0.45, 0.7, 0.2, 0.05])


def test_lap_clock_counts_each_samples_passes_and_flops(now):
    clock = run_laps(now)
    np.testing.assert_array_equal(clock.queries, [1, 2, 3])
    np.testing.assert_array_equal(clock.gradients, [1, 2, 2])
    np.testing.assert_array_equal(clock.flops, [30, 60, 70])  # 10 a query, 20 more a gradient
    np.testing.assert_array_equal(clock.group_flops["steps"], [30, 60, 70])
    np.testing.assert_array_equal(clock.work([1, 2], [0, 1]), [10, 40])


def test_lap_clock_prices_each_sample_at_its_groups_rate(now):
    clock = run_laps(now)
    # the steps' reference laps (1 and 2): .9 / 90 and 2.1 / 70 = .01 and .03 s per FLOP
    # process, median .02; wall .45 / 90 and .7 / 70 = .005 and .01, median .0075
    rate = clock.rates()["steps"]
    assert rate == Rate(pytest.approx(0.02), pytest.approx(0.0075), pytest.approx(2.0), pytest.approx(1.0), 2, "laps")
    priced = clock.priced()
    np.testing.assert_allclose(priced["process"], [0.6, 1.2, 1.4])  # [30, 60, 70] x .02
    np.testing.assert_allclose(priced["wall"], [0.225, 0.45, 0.525])  # x .0075


def test_a_calibrated_rate_prices_instead_of_the_laps(now):
    clock = run_laps(now)
    clock.calibrated["steps"] = Rate(0.1, 0.01, 0.0, 0.0, 1, "calibration")
    priced = clock.priced()
    np.testing.assert_allclose(priced["process"], [3.0, 6.0, 7.0])
    np.testing.assert_allclose(priced["wall"], [0.3, 0.6, 0.7])


def test_counts_may_differ_per_member_and_a_group_without_a_rate_is_refused(now):
    clock = LapClock(3, forward=10, backward=20).start()
    clock.count([0, 2], queries=[1, 3], gradients=[0, 1], group="checks")
    np.testing.assert_array_equal(clock.group_flops["checks"], [10, 0, 50])
    with pytest.raises(RuntimeError, match=r"no reference lap to price \['checks'\]"):
        clock.priced()
    clock.count([1], group="idle")  # no work: nothing to price
    assert "idle" in clock.group_flops
    clock.calibrated["checks"] = Rate(1.0, 2.0, 0.0, 0.0, 1, "calibration")
    np.testing.assert_allclose(clock.priced()["wall"], [20.0, 0.0, 100.0])


def test_groups_are_priced_apart_and_added(now):
    clock = LapClock(2, forward=10).start()
    clock.count([0, 1], queries=1, group="steps")
    clock.count([1], queries=2, group="checks")
    clock.calibrated["steps"] = Rate(0.5, 0.05, 0.0, 0.0, 1, "calibration")
    clock.calibrated["checks"] = Rate(0.1, 0.01, 0.0, 0.0, 1, "calibration")
    priced = clock.priced()
    np.testing.assert_allclose(priced["process"], [5.0, 7.0])  # 10 x .5; 10 x .5 + 20 x .1
    np.testing.assert_allclose(priced["wall"], [0.5, 0.7])


def test_counts_are_integers_and_large_flops_do_not_overflow(now):
    clock = LapClock(2, forward=2**31, backward=2**32).start()  # a large model: over 2^31 FLOPs a pass
    clock.count(np.array([0, 1], dtype=np.int32), queries=np.array([3, 1], dtype=np.int32), gradients=np.array([1, 0], dtype=np.int32))
    assert clock.queries.dtype.kind == clock.gradients.dtype.kind == clock.group_flops["attack"].dtype.kind == "i"
    np.testing.assert_array_equal(clock.flops, [3 * 2**31 + 2**32, 2**31])
    np.testing.assert_array_equal(clock.group_flops["attack"], [3 * 2**31 + 2**32, 2**31])


def test_a_clock_without_model_costs_counts_passes_and_no_flops(now):
    clock = LapClock(2).start()
    clock.count([0, 1], queries=2, gradients=1)
    clock.count([], queries=5)  # nobody standing: nothing charged
    np.testing.assert_array_equal(clock.queries, [2, 2])
    np.testing.assert_array_equal(clock.flops, [0, 0])


def test_uncharged_work_counts_only_what_it_is_given(now):
    clock = LapClock(1, forward=10, backward=20).start()
    clock.uncharged(2, gradients=1)  # two stopped rows' backward: 40 FLOPs, nobody's
    now.process = now.wall = 0.4
    clock.lap([], reference=True)
    assert clock.laps[0].flops == 40
    np.testing.assert_array_equal(clock.flops, [0])


def test_a_reference_lap_needs_counted_work(now):
    clock = LapClock(1, forward=1).start()
    now.process = now.wall = 0.1
    clock.lap([0], reference=True)  # nothing counted: no rate from it
    clock.count([0], queries=1)  # one FLOP is a measurement
    now.process = now.wall = 0.3
    clock.lap([0], reference=True)
    assert [lap.flops for lap in clock.reference_laps("attack")] == [1]


def test_a_lap_clock_on_a_gpu_synchronises_at_each_reading(cuda, now):
    clock = LapClock(1, device="cuda:0").start()
    clock.lap([0])
    assert cuda == ["cuda:0", "cuda:0"]


def test_a_groups_own_laps_are_pooled_unless_it_is_the_steps(now):
    # "checks" (not a steps group): units of differing work, 0.1 s / 10 FLOPs and 0.6 s / 20;
    # pooled .7 / 30, where the median of the units' rates would be (.01 + .03) / 2
    clock = LapClock(1, forward=10).start()
    for queries, seconds in ((1, 0.1), (2, 0.6)):
        clock.count([0], queries=queries, group="checks")
        now.process += seconds
        now.wall += seconds
        clock.lap([0], group="checks", reference=True)
    assert clock.rates()["checks"].process == pytest.approx(0.7 / 30)
    assert pooled_rate([clock], "checks", "model cell").process == pytest.approx(0.7 / 30)


def test_laps_of_one_unit_measure_one_rate(now):
    now.process, now.wall = 0.0, 0.0
    clock = LapClock(1, forward=10).start()
    unit = clock.new_unit()
    for seconds in (0.1, 0.2):
        clock.count([0], queries=1)
        now.process += seconds
        now.wall += seconds
        clock.lap([0], reference=True, unit=unit)
    assert [lap.unit for lap in clock.laps] == [unit, unit]
    assert [lap.flops for lap in clock.laps] == [10, 10]
    assert len(clock.reference_laps("attack")) == 2 and clock.reference_laps("steps") == []
    # the group "attack" is pooled: .3 s over 20 FLOPs, one unit
    assert clock.rates()["attack"] == Rate(pytest.approx(0.015), pytest.approx(0.015), 0.0, 0.0, 1, "laps")


# rates of laps


STEP_LAPS = [
    Lap("steps", 1, 0.3, 0.15, 30, True),  # unit 1: 0.9 s over 90 FLOPs in two laps: .01
    Lap("steps", 1, 0.6, 0.30, 60, True),
    Lap("steps", 2, 2.1, 0.70, 70, True),  # unit 2: .03
]


def test_rate_of_takes_the_median_of_its_units_rates_by_default():
    rate = rate_of(STEP_LAPS, "laps")
    # process .01 and .03: median .02, spread .03 / .01 - 1 = 2; wall .005 and .01: .0075, spread 1
    assert rate == Rate(pytest.approx(0.02), pytest.approx(0.0075), pytest.approx(2.0), pytest.approx(1.0), 2, "laps")
    assert rate.of("process") == rate.process and rate.of("wall") == rate.wall


def test_rate_of_pools_seconds_over_flops_for_units_of_differing_work():
    rate = rate_of(STEP_LAPS, "calibration", typical=False)
    # 3.0 s / 160 FLOPs; 1.15 s / 160
    assert (rate.process, rate.wall) == (pytest.approx(3.0 / 160), pytest.approx(1.15 / 160))
    assert (rate.spread_process, rate.spread_wall, rate.units, rate.source) == (pytest.approx(2.0), pytest.approx(1.0), 2, "calibration")


def test_a_unit_of_zero_seconds_has_an_infinite_spread():
    laps = [Lap("steps", 1, 0.0, 0.1, 10, True), Lap("steps", 2, 0.0, 0.1, 10, True)]  # a coarse process clock
    rate = rate_of(laps, "laps")
    assert rate.process == 0.0 and math.isinf(rate.spread_process)
    assert rate.wall == pytest.approx(0.01) and rate.spread_wall == 0.0


def test_pooled_rate_keeps_each_clocks_units_apart(now):
    def one_lap(process: float, flops: int) -> LapClock:
        now.process = now.wall = 0.0
        clock = LapClock(1, forward=flops).start()
        clock.count([0], queries=1, group="steps")
        now.process = now.wall = process
        clock.lap([0], group="steps", reference=True)
        return clock

    cells = [one_lap(0.9, 90), one_lap(2.1, 70)]  # both laps are unit 1 of their clock
    rate = pooled_rate(cells, "steps", "model cell")
    # two units, .01 and .03 s per FLOP: the steps' median .02 (not one unit pooled: 3 / 160)
    assert rate == Rate(pytest.approx(0.02), pytest.approx(0.02), pytest.approx(2.0), pytest.approx(2.0), 2, "model cell")
    assert pooled_rate(cells, "checks", "model cell") is None
