"""The names of the mutants `make mutation` still has to run, for the given modules.

`mutmut run PATTERN` reruns every mutant the pattern matches, results or not (mutmut 3.8 skips
a mutant with a result only when run without names), so `make mutation` names the mutants
that need a run instead: those without a result (of functions changed since the record, and new
ones) and those that escaped and are not listed as equivalent (tried again against today's tests
and today's map of tests to functions), as the record keeps only caught and listed-equivalent
results. This does what `mutmut run` does before it tests a mutant (generate the mutants, load
or collect the test stats, drop results that a changed function invalidates) and writes the
names to a file, one per line (mutmut's progress goes to the terminal).

    python tools/mutation/unrun.py -o to_run.txt trashfire.survival.analysis trashfire.metrics   # from the project root
    python tools/mutation/unrun.py -o to_run.txt --all trashfire.survival.analysis              # every mutant (a fresh run)
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from pathlib import Path

from mutation_record import kept
from mutation_score import equivalents

# mutmut 3.8.1's own steps (requirements-mutation.lock pins it): run's preamble, without the run
from mutmut.__main__ import (
    CatchOutput,
    collect_or_load_stats,
    collect_source_file_mutation_data,
    copy_also_copy_files,
    copy_src_dir,
    create_mutants,
    get_mutant_runner,
    set_mutant_under_test,
    setup_source_paths,
    store_lines_covered_by_tests,
)

WORKERS = os.cpu_count() or 2


def generate() -> None:
    """Generate the mutants and bring mutmut's test stats up to date, as `mutmut run` first does."""
    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    with CatchOutput(spinner_title="Generating mutants"):
        copy_src_dir()
        copy_also_copy_files()
        setup_source_paths()
        store_lines_covered_by_tests()
        create_mutants(WORKERS)
    collect_or_load_stats(get_mutant_runner(WORKERS), mutants_caught_by_type_checker={}, apply_config_invalidation=True)


def to_run(modules: list[str], everything: bool) -> list[str]:
    """The mutants of these modules whose result the record would not keep (all of them with
    `everything`), by name."""
    mutants, _ = collect_source_file_mutation_data(mutant_names=())
    patterns = [f"{module}.x*" for module in modules]
    equivalent = equivalents()
    return sorted(
        name
        for _, name, result in mutants
        if (everything or not kept(result, name, equivalent)) and any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="module names as mutmut prefixes them, e.g. trashfire.survival.analysis")
    parser.add_argument("--all", action="store_true", help="every mutant of these modules, results or not")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the file the names go to")
    args = parser.parse_args(argv)
    generate()
    names = to_run(args.modules, args.all)
    args.output.write_text("".join(f"{name}\n" for name in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
