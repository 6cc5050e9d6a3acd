"""The documentation's own rules, fast and without mkdocs: docs/benchmarks.md is what
bench/benchmark_page.py writes from bench/results/; the README stays short and undated, and so
do the docs pages other than the benchmark page (dated figures live there and in CHANGELOG.md)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300
# pages that may carry dates: the generated benchmark and reproduction pages (CHANGELOG.md is outside docs/)
DATED_PAGES = {"benchmarks.md", "reproduction.md"}  # both generated, each figure with its run's date

MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?!\d)"  # ISO: 2026-11-24 (also inside 2026-11-24T10:00)
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{MONTHS})\.?,?\s+\d{{4}}\b"  # 24 November 2026
    rf"|\b(?:{MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?\d{{4}}\b"  # November 2026, Nov 24, 2026
)


def benchmark_page():
    spec = importlib.util.spec_from_file_location("benchmark_page", ROOT / "bench" / "benchmark_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dated_lines(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1) if DATE.search(line)]


def test_the_benchmark_page_is_what_bench_results_give():
    page = DOCS / "benchmarks.md"
    assert page.read_text() == benchmark_page().render(), f"{page.relative_to(ROOT)} is stale: run python bench/benchmark_page.py (make docs does)"


def test_the_benchmark_page_takes_provenance_from_the_files_and_invents_none(tmp_path):
    module = benchmark_page()
    (tmp_path / "2030-01-02-4cpu.json").write_text('{"pipeline": {"wall_s": 12.5, "stages": [1, 2]}, "note": "' + "x" * 100 + '"}')
    (tmp_path / "scaling.json").write_text('{"machine": {"date": "2030-02-03T04:05:06", "cpus": 8}, "commit": "abc1234", "seconds": 3}')
    (tmp_path / "2030-01-02-h200-run.log").write_text("starting\n\n3 passed in 1.0s\n")
    page = module.render(tmp_path)
    assert "- date: 2030-01-02 (from the file name)" in page
    assert "- machine: `4cpu` (from the file name)" in page
    assert "| `pipeline.wall_s` | 12.5 | not measured |" in page and "| `pipeline.stages` | 1, 2 |  |" in page
    assert "Left out (long text, read them in the file): `note`." in page
    assert "- date: 2030-02-03T04:05:06 (recorded in the file)" in page
    assert "- machine: cpus 8 (recorded in the file)" in page
    assert "- commit: `abc1234`" in page
    assert page.count("- commit: not recorded") == 2, page
    assert "3 passed in 1.0s" in page and "not rendered here" in page


def test_the_benchmark_page_sets_each_time_beside_its_ratio_to_the_runs_reference(tmp_path):
    """A run that timed the reference workload (bench/reference.py) shows it, and every figure in
    seconds beside its multiple of it; a run from before says its seconds are one machine's."""
    module = benchmark_page()
    timed = {"reference": {"before": {"seconds": 7.0}, "after": {"seconds": 9.0}, "seconds": 8.0}}
    timed |= {"pipeline": {"wall_s": 300.0, "stages_s": {"train": 20.0}, "peak_memory_gib": 2.0}, "sizes": {"10": {"seconds": 4.0}}}
    (tmp_path / "2030-01-02-2cpu-suite.json").write_text(json.dumps(timed))
    (tmp_path / "2030-01-01-2cpu-old.json").write_text('{"pipeline": {"wall_s": 269.2}}')
    page = module.render(tmp_path)
    assert "- reference workload: 8 s, timed in the same run" in page
    assert "| `pipeline.wall_s` | 300.0 | 37.50x |" in page and "| `pipeline.stages_s.train` | 20.0 | 2.50x |" in page
    assert "| `sizes.10.seconds` | 4.0 | 0.50x |" in page and "| `pipeline.peak_memory_gib` | 2.0 |  |" in page
    assert "| `reference.seconds` | 8.0 |  |" in page  # the reference itself is no figure to divide
    assert "- reference workload: not measured" in page and "| `pipeline.wall_s` | 269.2 | not measured |" in page


@pytest.mark.parametrize(
    "line",
    ["on 2026-11-24, 2 CPU cores", "measured 2026-11-27T10:00", "the record of 24 November 2026", "in November 2026", "Nov 24, 2026", "3rd Dec 2026"],
)
def test_the_date_pattern_finds_dates(line):
    assert DATE.search(line), line


@pytest.mark.parametrize("line", ["1,226 tests in 4 min 30 s", "eps 0.1 / 0.3 / 1.0", "ResNet-20 seed 0: 8.6 s", "may 2 workers run", "10^6 rows in 2 s"])
def test_the_date_pattern_leaves_figures_alone(line):
    assert not DATE.search(line), line


def test_readme_is_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/; line {README_MAX_LINES + 1} is {lines[README_MAX_LINES]!r}"
    )


def test_readme_has_no_dates():
    found = dated_lines(README)
    assert not found, "README.md carries dates (dated figures belong on docs/benchmarks.md or in CHANGELOG.md):\n" + "\n".join(found)


def test_docs_pages_have_no_dates_but_the_benchmark_page():
    pages = sorted(page for page in DOCS.rglob("*.md") if page.relative_to(DOCS).as_posix() not in DATED_PAGES)
    assert pages, "no docs pages found"
    found = [line for page in pages for line in dated_lines(page)]
    assert not found, "docs pages carry dates (dated figures belong on docs/benchmarks.md or in CHANGELOG.md):\n" + "\n".join(found)
