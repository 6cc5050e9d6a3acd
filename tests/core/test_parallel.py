"""Worker processes (`compute.workers`): the cells they compute are the cells one process
computes, a failing cell stops the stage with its own error, and fine-tuning runs wait for
their base."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, recorded, tiny_overrides
from tests.helpers.worker_jobs import blas_threads, fail_with_config_error, finish_time, process_and_threads, quiet_job, sleep_or_fail, ticking_job
from trashfire.attacks.campaign import spread
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError, DataError
from trashfire.core.grid import UNDEFENDED, TrainCell, attack_cells
from trashfire.core.parallel import describe, resolve_workers, results_as_completed, run_jobs, threads_per_cell
from trashfire.models import training
from trashfire.models.training import waves
from trashfire.stages import attack, brittle, prepare, train

# 2 trained cells and 3 model cells, one eps per attack: enough cells for two workers to share
SMALLER = ("model=[fcnet]", "defence=[none,gauss_in,fsq]", "attack.fgm.values=[1.0]", "attack.pgd.values=[1.0]", "brittle.n_samples=6")


def tiny(folder: Path, *extra: str):
    return validate(compose(tiny_overrides(folder, *extra), conf=ROOT / "conf"))


def run_stages(cfg) -> None:
    for stage in (prepare, train, attack, brittle):
        stage.run(cfg)


def test_two_workers_write_the_records_of_one_process(tmp_path):
    """Whatever compute.workers, each cell runs with compute.threads threads (1): the records,
    the compute clock's counts included, are the same to the bit."""
    serial, parallel = tiny(tmp_path / "serial", "compute.workers=1", *SMALLER), tiny(tmp_path / "parallel", "compute.workers=2", *SMALLER)
    run_stages(serial)
    run_stages(parallel)
    for folder in ("models", "reports/attacks", "reports/attacks/benign", "reports/brittle"):
        expected, got = recorded(tmp_path / "serial" / folder), recorded(tmp_path / "parallel" / folder)
        assert expected and got == expected, folder


class Bar:
    """tqdm's update, recorded."""

    def __init__(self):
        self.updates = []

    def update(self, count):
        self.updates.append(count)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_bar_moves_per_cell_where_jobs_tick_and_per_job_where_they_do_not(workers):
    bar = Bar()
    run_jobs(ticking_job, [(3,), (2,)], workers, bar, "test")
    assert bar.updates == [1] * 5  # each cell as it is done, in a worker too; the jobs' ends add nothing
    bar = Bar()
    run_jobs(quiet_job, [(3,), (2,)], workers, bar, "test")
    assert sorted(bar.updates) == [2, 3]


def test_one_model_cells_attack_cells_spread_over_the_workers_and_give_its_records(tmp_path):
    """With fewer model cells than workers, a model cell's attack cells are dealt to several
    jobs: the same records as one process computes (their seconds aside)."""
    one_model = ("model=[fcnet]", "defence=[none]", "survival.split_by=attack_hash")
    serial, parallel = tiny(tmp_path / "serial", "compute.workers=1", *one_model), tiny(tmp_path / "parallel", "compute.workers=2", *one_model)
    pending = attack_cells(parallel)
    assert [len(chunk) for chunk in spread(pending, 2, 1)] == [len(pending) - len(pending) // 2, len(pending) // 2]
    for cfg in (serial, parallel):
        for stage in (prepare, train, attack):
            stage.run(cfg)
    for folder in ("reports/attacks", "reports/attacks/benign"):
        expected, got = recorded(tmp_path / "serial" / folder), recorded(tmp_path / "parallel" / folder)
        assert expected and got == expected, folder


def test_a_config_error_in_a_worker_reaches_the_stage_as_itself():
    with pytest.raises(ConfigError, match="config error: attack.hsj: raised in a worker"):
        list(results_as_completed(fail_with_config_error, [("attack.hsj",), ("attack.hsj",)], 2, "test"))


def test_a_failing_job_stops_the_others_at_once():
    sleeper = 60.0
    start = time.monotonic()
    with pytest.raises(ConfigError):
        list(results_as_completed(sleep_or_fail, [(sleeper, False), (0.0, True)], 2, "test"))
    assert (time.monotonic() - start) / sleeper < 0.5  # the sleeping worker was killed, not waited for


def test_a_workers_error_stops_the_stage_with_that_error(tmp_path):
    cfg = tiny(tmp_path, "compute.workers=2", *SMALLER)
    prepare.run(cfg)
    train.run(OmegaConf.merge(cfg, {"compute": {"workers": 1}}))  # the same records in this process: the attack's workers are under test
    weights = sorted(Path(cfg.paths.models).glob("*.pt"))
    weights[0].write_bytes(b"corrupt")
    with pytest.raises(DataError, match="do not match their record"):
        attack.run(cfg)


def test_workers_setting():
    assert resolve_workers("auto", "cuda") == 1
    assert 1 <= resolve_workers("auto", "cpu") <= 8
    assert resolve_workers(3, "cpu") == 3
    for bad in (0, "two", 1.5):
        with pytest.raises(ConfigError, match="compute.workers"):
            validate(compose(tiny_overrides(Path("/tmp"), f"compute.workers={bad}"), conf=ROOT / "conf"))


def cell(name: str, epochs: int = 1, base=None) -> TrainCell:
    spec = {"model": name, "train": {"epochs": epochs}, "base": base.hash if base else None}
    return TrainCell("digits", 0, name, 1, epochs, 0.1, UNDEFENDED, spec, base)


def test_fine_tuning_runs_wait_for_their_base():
    base, other = cell("a"), cell("b")
    tuned = cell("c", base=base)
    again = cell("d", base=tuned)
    groups = training.runs([base, other, tuned, again])
    assert waves(groups) == [[[base], [other]], [[tuned]], [[again]]]
    assert waves(training.runs([tuned, other])) == [[[tuned], [other]]]  # a base already trained waits for nothing


def test_a_lone_job_runs_in_this_process_with_the_threads_a_worker_would_have():
    """A stage with one cell left (a new eps, a rerun after a kill) starts no pool: a worker's
    start (torch, ART) would cost more than the cell."""
    import os

    import torch

    before = torch.get_num_threads()
    [(index, (pid, threads))] = list(results_as_completed(process_and_threads, [()], 2, "test"))
    assert (index, pid, threads) == (0, os.getpid(), threads_per_cell(2))
    assert torch.get_num_threads() == before  # restored after
    [(_, (pid, threads))] = list(results_as_completed(process_and_threads, [()], 2, "test", threads=3))
    assert (pid, threads) == (os.getpid(), 3)


def test_away_jobs_run_in_a_worker_even_alone_so_that_this_process_works_meanwhile():
    """The survival stage scores each fit as it arrives: its fits go to one worker process even
    where one worker is all it gives them."""
    import os

    results = list(results_as_completed(process_and_threads, [(), ()], 1, "test", threads=1, away=True))
    assert sorted(index for index, _ in results) == [0, 1]
    assert {pid for _, (pid, _) in results} != {os.getpid()} and len({pid for _, (pid, _) in results}) == 1


@pytest.mark.parametrize("away", [True, False])
def test_meanwhile_runs_once_while_the_jobs_run_or_before_them_in_order(away):
    """The survival stage computes what needs no model (its baselines, the Kaplan-Meier means)
    while its first fit runs in the worker."""
    ran = []
    results = list(results_as_completed(finish_time, [(1.0,), (0.0,)], 1, "test", threads=1, away=away, meanwhile=lambda: ran.append(time.time())))
    assert len(ran) == 1 and sorted(index for index, _ in results) == [0, 1]
    assert ran[0] < min(ended for _, ended in results)


FORKED_POOL = """
import tests.helpers.worker_jobs as jobs
from trashfire.core.parallel import results_as_completed
jobs.MARK = "set by the parent"
print(sorted(result for _, result in results_as_completed(jobs.mark_and_torch, [(), ()], 2, "test", threads=1, fork=True)))
"""


def test_a_fork_pool_starts_with_the_parents_modules_and_torch_keeps_spawn():
    """The survival stage's fits fork (their modules imported once, seconds saved per worker)
    where the stage has not loaded torch; with torch loaded the pool spawns."""
    import subprocess
    import sys

    forked = subprocess.run([sys.executable, "-c", FORKED_POOL], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert forked.stdout.strip() == "[('set by the parent', False), ('set by the parent', False)]", forked.stderr
    with_torch = subprocess.run([sys.executable, "-c", "import torch\n" + FORKED_POOL], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert with_torch.stdout.strip() == "[('imported', True), ('imported', True)]", with_torch.stderr


FROZEN_POOL = """
import gc
import tests.helpers.worker_jobs as jobs
from trashfire.core.parallel import results_as_completed
during = [(found > 0, gc.get_freeze_count() > 0) for _, found in results_as_completed(jobs.frozen_objects, [(), ()], 2, "test", threads=1, fork=%s)]
print(during, gc.get_freeze_count())
"""


def test_a_forked_pool_leaves_the_objects_of_the_fork_out_of_garbage_collection_until_it_is_done():
    """A forked worker reads the stage's objects (10^7 samples' arrays and records) in place: its
    collector must not write into them, or every page holding one is copied; the stage's own
    collections leave them alone while the pool runs, and take them again after."""
    import subprocess
    import sys

    for fork, expected in ((True, "[(True, True), (True, True)] 0"), (False, "[(False, False), (False, False)] 0")):
        ran = subprocess.run([sys.executable, "-c", FROZEN_POOL % fork], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert ran.stdout.strip() == expected, (fork, ran.stdout, ran.stderr)


def test_the_plan_line_says_where_the_cells_run():
    """A stage's log names worker processes only when it will start them: a lone job runs in
    the stage's process, with the threads a worker would have had."""
    assert describe(2, 1, largest_batch=5) == "2 worker processes, 1 thread(s) each"
    assert describe(2, 1, largest_batch=1) == "in this process, 1 thread(s)"
    assert describe(1, 2, largest_batch=5) == "in this process, 2 thread(s)"


def test_a_workers_blas_pools_take_its_thread_budget_when_they_load_after_it_started(monkeypatch):
    """A stage module loads its library when its first job arrives, after the worker set its
    limits: SciPy's OpenBLAS (LIME's regressions, survival fits) and scikit-learn's OpenMP
    must still run `threads` threads, or the workers oversubscribe the cores and their CPU
    clocks and records depend on the machine."""
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(variable, "3")  # what a worker would inherit
    pools = [found for _, found in results_as_completed(blas_threads, [(), ()], 2, "test", threads=1)]
    assert pools and all(found and set(found.values()) == {1} for found in pools), pools


def test_a_process_keeping_its_freed_memory_takes_the_next_large_array_without_page_faults():
    """keep_freed_memory: a large array freed and allocated again comes from the heap the process
    keeps, not from fresh pages the kernel zeroes a fault at a time (a survival fit worker's).
    In a child process: the setting lasts for the process."""
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("keep_freed_memory sets glibc's malloc")
    probe = (
        "import resource, sys, numpy as np\n"
        "from numpy._core import multiarray\n"
        "multiarray._set_madvise_hugepage(False)\n"  # 4 kB faults, whatever the kernel's huge pages do
        "from trashfire.core.parallel import keep_freed_memory\n"
        "kept = keep_freed_memory() if sys.argv[1] == 'keep' else False\n"
        "np.ones(1 << 24).sum()\n"  # 128 MB, freed at once
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "np.ones(1 << 24).sum()\n"
        "print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
    )
    faults = {}
    for mode in ("keep", "default"):
        kept, faults[mode] = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True).stdout.split()
        assert kept == str(mode == "keep")
    assert int(faults["keep"]) * 100 < int(faults["default"])  # 128 MB is 32,768 pages of 4 kB
