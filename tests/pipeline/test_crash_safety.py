"""Crash safety: the train and attack stages, SIGKILLed at random moments of their compute
several times over, each rerun to completion, leave records identical (timings aside) to an
uninterrupted run's, and no file a kill left half-written is ever read or kept.

Slow (a few minutes): `make test-kill` runs it, and CI calls that target."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, recorded, tiny_overrides
from trashfire.params import composed_yaml

pytestmark = pytest.mark.slow

GRID = ["train.epochs=[1,2]", "attack.fgm.values=[0.3]", "attack.pgd.values=[0.3]", "compute.workers=2"]
STARTED = {"train": "to train on", "attack": "to run on"}  # the log line before a stage's compute
KILLS = 3


def project(folder: Path) -> Path:
    folder.mkdir()
    params = folder / "params.yaml"
    params.write_text(composed_yaml(tiny_overrides(folder, *GRID)))
    return params


def stage(name: str, params: Path) -> subprocess.Popen:
    env = os.environ | {"TRASHFIRE_CONFIG_DIR": str(ROOT / "conf"), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", f"trashfire.stages.{name}", "--params", str(params)],
        cwd=params.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_compute(process: subprocess.Popen, name: str) -> list[str]:
    """Read the stage's log up to the line that says its compute begins."""
    lines = []
    for line in process.stderr:
        lines.append(line)
        if STARTED[name] in line:
            return lines
    raise AssertionError(f"{name} ended before its compute began:\n{''.join(lines)[-3000:]}")


def run_to_end(name: str, params: Path) -> float:
    """Runs the stage uninterrupted; returns the seconds of its compute."""
    process = stage(name, params)
    wait_for_compute(process, name)
    start = time.monotonic()
    rest = process.stderr.read()
    assert process.wait() == 0, rest[-3000:]
    return time.monotonic() - start


def kill_at(name: str, params: Path, seconds: float) -> int:
    """SIGKILL the stage (its worker processes too: they must die with it, not write on);
    returns how many workers it had."""
    process = stage(name, params)
    wait_for_compute(process, name)
    time.sleep(seconds)
    workers = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"{name}: workers {[p.pid for p in alive]} outlived their killed stage"
    return len(workers)


def temp_files(*folders: Path) -> list[str]:
    return [p.name for folder in folders if folder.is_dir() for p in folder.glob(".*.tmp")]


def test_killed_train_and_attack_rerun_to_the_uninterrupted_records(tmp_path):
    reference = project(tmp_path / "reference")
    subprocess.run([sys.executable, "-m", "trashfire.stages.prepare", "--params", str(reference)], cwd=reference.parent, check=True, capture_output=True)
    compute = {name: run_to_end(name, reference) for name in ("train", "attack")}

    killed = project(tmp_path / "killed")
    subprocess.run([sys.executable, "-m", "trashfire.stages.prepare", "--params", str(killed)], cwd=killed.parent, check=True, capture_output=True)
    seed = random.randrange(10**6)
    moments = random.Random(seed)
    folders = {"train": killed.parent / "models", "attack": killed.parent / "reports" / "attacks"}
    left_behind = []
    for name in ("train", "attack"):
        workers = 0
        for _ in range(KILLS):
            workers += kill_at(name, killed, moments.uniform(0.05, 0.9) * compute[name])
            left_behind += temp_files(folders[name])
        assert workers, f"seed {seed}: {name}: no kill found a worker process to check"
        run_to_end(name, killed)
        assert temp_files(folders[name]) == [], f"seed {seed}: a rerun keeps a killed run's temp files"

    for folder in ("models", "reports/attacks"):
        expected, got = recorded(reference.parent / folder), recorded(killed.parent / folder)
        assert got.keys() == expected.keys(), f"seed {seed}: {folder}: {sorted(got.keys() ^ expected.keys())}"
        differing = [name for name in expected if got[name] != expected[name]]
        assert not differing, f"seed {seed}: {folder}: records differ from the uninterrupted run's: {differing}"
    print(
        f"kill moments seed {seed}; compute train {compute['train']:.1f} s, attack {compute['attack']:.1f} s; "
        f"{len(left_behind)} temp files left by the kills, all removed by the reruns"
    )
