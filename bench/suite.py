"""`make bench`: the speed figures we track, each measured in one run on this machine, printed
and written to reports/bench.json.

- reference: a fixed one-thread workload (bench/reference.py) timed at the start and the end of
  the run; every time target is a ratio to it, the absolute seconds printed beside, so that a
  target holds on a slower or faster machine alike (issue 58);
- pipeline: the default pipeline (`dvc repro` of `make run`, in a scratch copy of the
  project, every cell computed) wall time (target <= 219x the reference: 300 s on the 2-core
  machine where the bound was set), each stage's, and
  peak memory (the proportional set size of `dvc repro`'s whole process tree, workers
  included), then
  the no-op `dvc repro` that follows (target < 5 s; peak memory target < 3 GiB);
- attack overhead: the attack stage's cost over plain-torch gradient passes (bench/attack_overhead.py);
- sweep overhead: a 20-trial in-process sweep's cost over its cells' compute (bench/sweep_overhead.py; target < 0.10);
- survival scaling: every configured fitter at 1k, 10k and 100k rows and the growth
  exponent of the total (bench/survival_scaling.py; target < 1.2);
- post-attack scaling: timing, survival, aggregate and figures at 10^6 and 10^7 attacked samples
  on synthetic studies drawn from this checkout's default run (bench/post_attack_scaling.py;
  needs `make run` first; its studies are built once into /tmp/trashfire-post-attack, then
  about an hour on 2 cores): its own targets, met or missed;
- tests (only with --only tests): `make test`'s suite, `pytest -m "not slow and not cluster" -n auto` (target
  <= 350x the reference: 8 minutes where the bound was set).

Each part runs as its own process, so none inherits another's threads or caches.

    python bench/suite.py [--only pipeline attack sweep survival post_attack tests] [--experiment default|tiny] [--out reports/bench.json] [--keep]

--keep also writes the run to bench/results/<date>-<cpus>cpu-suite.json, with the date, machine
and commit it was measured at, and regenerates docs/benchmarks.md from bench/results/.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402
from trashfire.core.records import write_json  # noqa: E402
from tree_memory import peak_memory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PARTS = ("pipeline", "attack", "sweep", "survival", "post_attack", "tests")
DEFAULT_PARTS = PARTS[:-1]  # the test suite only when asked: it takes as long as the pipeline


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def scratch_project(experiment: str, overrides: list[str] = ()) -> tuple[Path, dict[str, str]]:
    """dvc.yaml, conf/ and src/ in a fresh git + DVC folder, so every cell is computed;
    params.yaml composed from the experiment and the overrides after it."""
    work = Path(tempfile.mkdtemp(prefix="trashfire-bench-"))
    for item in ("dvc.yaml", "conf", "src"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, work / item)
    # the copy's src/ first on the path: the code measured is this checkout's, whichever
    # checkout the environment's editable install points at
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(work / "src"),
        "TRASHFIRE_CONFIG_DIR": str(work / "conf"),
    }
    # the tiny experiment is conf/experiment/tiny.yaml, as the tests run it
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], [sys.executable, "-m", "trashfire.params", f"experiment={experiment}", *overrides]):
        run(command, work, env)
    return work, env


def timed_repro(work: Path, env: dict[str, str]) -> tuple[float, dict[str, float], int]:
    """`dvc repro`'s wall time, each stage's (from the moments DVC announces them) and the
    peak memory of its whole process tree (sampled: bench/tree_memory.py)."""
    starts: list[tuple[str, float]] = []
    begin = time.perf_counter()
    process = subprocess.Popen(["dvc", "repro"], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = peak_memory(process)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    for line in process.stdout:
        tail.append(line.rsplit("\r", 1)[-1])  # a progress bar's last redraw only
        stage = re.search(r"Running stage '(\w+)'", line)
        if stage:
            starts.append((stage[1], time.perf_counter()))
    if process.wait() != 0:
        sys.exit(f"bench: dvc repro failed (exit {process.returncode}):\n{''.join(tail)[-3000:]}")
    end = time.perf_counter()
    moments = [t for _, t in starts[1:]] + [end]
    return end - begin, {name: round(stop - start, 1) for (name, start), stop in zip(starts, moments)}, peak[0]


def measure_pipeline(experiment: str) -> dict:
    work, env = scratch_project(experiment)
    print(f"pipeline: `dvc repro` of the {experiment} experiment in {work}", flush=True)
    wall, stages, peak = timed_repro(work, env)
    start = time.perf_counter()
    noop = run(["dvc", "repro"], work, env)
    noop_wall = time.perf_counter() - start
    reran = re.findall(r"Running stage '(\w+)'", noop)
    shutil.rmtree(work)
    return {
        "experiment": experiment,
        "wall_s": round(wall, 1),
        "stages_s": stages,
        "peak_memory_gib": round(peak / 2**30, 3),
        "noop_repro_s": round(noop_wall, 2),
        "noop_stages_rerun": reran,
    }


def measure_script(script: str, *args: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        print(f"{script}:", flush=True)
        completed = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(out)], cwd=ROOT, text=True, capture_output=True)
        if completed.returncode != 0:
            sys.exit(f"bench: {script} failed:\n{completed.stderr[-3000:]}")
        print("\n".join("  " + line for line in completed.stdout.strip().splitlines()[-12:]), flush=True)
        return json.loads(out.read_text())


def measure_post_attack() -> dict:
    """bench/post_attack_scaling.py's figures, and whether its targets were met (it exits 1 on a
    miss); without a default run in this checkout to draw its studies from, not measured (a miss
    that says why), and the other parts' figures are still written."""
    if not (ROOT / "reports" / "attacks").is_dir():
        reason = "not measured: it draws its studies from this checkout's default run; run `make run` first"
        print(f"post_attack_scaling.py: {reason}", flush=True)
        return {"met": False, "missed": [reason]}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        print("post_attack_scaling.py:", flush=True)
        completed = subprocess.run([sys.executable, str(BENCH / "post_attack_scaling.py"), "--json", str(out)], cwd=ROOT, text=True, capture_output=True)
        print("\n".join("  " + line for line in completed.stdout.strip().splitlines()[-16:]), flush=True)
        if not out.is_file():
            sys.exit(f"bench: post_attack_scaling.py failed:\n{completed.stderr[-3000:]}")
        missed = [line.removeprefix("MISSED ") for line in completed.stdout.splitlines() if line.startswith("MISSED ")]
        return json.loads(out.read_text()) | {"met": completed.returncode == 0, "missed": missed}


def measure_tests() -> dict:
    """`make test`'s suite in this checkout, timed."""
    print("tests: pytest -m 'not slow and not cluster' -n auto --dist worksteal", flush=True)
    begin = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not slow and not cluster", "-q", "-n", "auto", "--dist", "worksteal", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - begin
    summary = (completed.stdout.strip().splitlines() or [""])[-1]
    if completed.returncode != 0:
        sys.exit(f"bench: the test suite failed (exit {completed.returncode}): {summary}")
    print(f"  {summary}", flush=True)
    return {"wall_s": round(wall, 1), "summary": summary}


def targets(figures: dict) -> dict[str, bool]:
    checks = {}
    ratios = figures.setdefault("ratios", {})
    if figures.get("pipeline", {}).get("experiment") == "default":
        line, met = reference.verdict("pipeline", figures["pipeline"]["wall_s"], figures["reference"])
        ratios["pipeline"] = reference.ratio(figures["pipeline"]["wall_s"], figures["reference"])
        checks[f"default dvc repro {line}"] = met
    if "tests" in figures:
        line, met = reference.verdict("tests", figures["tests"]["wall_s"], figures["reference"])
        ratios["tests"] = reference.ratio(figures["tests"]["wall_s"], figures["reference"])
        checks[f"make test {line}"] = met
    if "pipeline" in figures:
        checks["no-op dvc repro < 5 s"] = figures["pipeline"]["noop_repro_s"] < 5 and not figures["pipeline"]["noop_stages_rerun"]
        checks["pipeline peak memory < 3 GiB"] = figures["pipeline"]["peak_memory_gib"] < 3
    if "attack_overhead" in figures:
        checks["attack engine without early exit <= 1.1x the plain-torch bound"] = figures["attack_overhead"]["engine_vs_bound_max_ratio_wall"] <= 1.1
        checks["PGD-10 early exit <= 0.5x ART's fixed budget at the largest eps"] = (
            figures["attack_overhead"]["early_exit_vs_art_ratio_wall_at_largest_eps"] <= 0.5
        )
    if "sweep_overhead" in figures:
        checks["sweep overhead per trial < 10% of compute"] = figures["sweep_overhead"]["overhead_ratio"] < 0.10
    if "survival_scaling" in figures:
        checks["survival fit growth exponent < 1.2"] = figures["survival_scaling"]["growth_exponent_total"] < 1.2
    if "post_attack_scaling" in figures:
        missed = figures["post_attack_scaling"]["missed"]
        checks["post-attack stages at 10^7 samples: time, memory, growth, report size" + (f" (missed: {'; '.join(missed)})" if missed else "")] = figures[
            "post_attack_scaling"
        ]["met"]
    return checks


def machine() -> dict:
    import torch

    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "commit": commit(),
    }


def commit() -> str:
    """The checkout's commit, `+dirty` where the working tree differs from it: what the
    benchmark page says each figure was measured at."""
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(DEFAULT_PARTS))
    parser.add_argument("--experiment", choices=("default", "tiny"), default="default", help="the pipeline to time (tiny: a quick check of the bench itself)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench.json")
    parser.add_argument("--keep", action="store_true", help="also keep the run in bench/results/ and regenerate docs/benchmarks.md from them")
    args = parser.parse_args()
    figures: dict = {"machine": machine()}
    before = reference.measure()
    print(f"reference: {before['seconds']} s (torch {before['torch_s']} s, numpy {before['numpy_s']} s)", flush=True)
    if "pipeline" in args.only:  # first: its peak memory is the largest child process so far
        figures["pipeline"] = measure_pipeline(args.experiment)
        stages = ", ".join(f"{name} {seconds:g}" for name, seconds in figures["pipeline"]["stages_s"].items())
        print(f"  stages (s): {stages}", flush=True)
        print(
            f"  wall {figures['pipeline']['wall_s']} s, peak memory {figures['pipeline']['peak_memory_gib']} GiB, no-op repro {figures['pipeline']['noop_repro_s']} s",
            flush=True,
        )
    if "attack" in args.only:
        figures["attack_overhead"] = measure_script("attack_overhead.py")
    if "sweep" in args.only:
        figures["sweep_overhead"] = measure_script("sweep_overhead.py")
    if "survival" in args.only:
        figures["survival_scaling"] = measure_script("survival_scaling.py")
    if "post_attack" in args.only:
        figures["post_attack_scaling"] = measure_post_attack()
    if "tests" in args.only:
        figures["tests"] = measure_tests()
    after = reference.measure()
    figures["reference"] = reference.summary(before, after)
    print(f"reference again: {after['seconds']} s; the ratios use the mean, {figures['reference']['seconds']} s", flush=True)
    figures["targets"] = targets(figures)
    write_json(args.out, figures)
    if args.keep:
        kept = BENCH / "results" / f"{figures['machine']['date'][:10]}-{figures['machine']['cpus']}cpu-suite.json"
        write_json(kept, figures)
        subprocess.run([sys.executable, str(BENCH / "benchmark_page.py")], check=True)
        print(f"kept as {kept.relative_to(ROOT)}; docs/benchmarks.md regenerated")
    print(f"targets ({args.out}):")
    for name, met in figures["targets"].items():
        print(f"  {'met   ' if met else 'MISSED'} {name}")
    sys.exit(0 if all(figures["targets"].values()) else 1)


if __name__ == "__main__":
    main()
