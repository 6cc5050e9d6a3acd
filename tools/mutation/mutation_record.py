"""Carry `make mutation`'s caught mutants from one run to the next (tools/mutation/mutation_record.json).

A whole mutation run takes longer than a working session (about 6 hours on 2 cores, most of it
in the survival modules), and mutmut keeps its results only under the untracked mutants/. So
`save` writes the decided results to a tracked record, and `restore` puts them back into a
fresh mutants/ before mutmut's first run there.

mutmut itself decides what stays valid: it keys each function's results by a hash of the
function's source, and reruns every mutant of a function whose hash changed. The record keeps
only the mutants a test caught and those tools/mutation/mutation_equivalents.md lists; an escaped mutant
is left out, so the next run tries it again against the tests of that day. A caught result is
not rechecked when only the tests change (the hash covers the function, not its tests): a
removed test is a reason for a fresh run. `make mutation
MUTATION_FRESH=1` ignores the record and runs every mutant.

    python tools/mutation/mutation_record.py save      # mutants/**/*.meta -> tools/mutation/mutation_record.json
    python tools/mutation/mutation_record.py restore   # the record -> mutants/**/*.meta, where none is yet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mutation_score import CAUGHT, EQUIVALENTS, MUTANTS, ROOT, equivalents

RECORD = ROOT / "tools" / "mutation" / "mutation_record.json"


def kept(exit_code: int | None, name: str, equivalent: dict[str, str]) -> bool:
    """A result the next run can take as it is: caught, or a listed equivalent."""
    return exit_code in CAUGHT or (exit_code is not None and name in equivalent)


def save(record: Path = RECORD, mutants: Path = MUTANTS) -> int:
    """The kept results of every .meta under mutants/, by source file; returns how many."""
    equivalent = equivalents(EQUIVALENTS)
    files = {}
    for meta in sorted(mutants.glob("src/**/*.py.meta")):
        data = json.loads(meta.read_text())
        by_code: dict[str, dict[str, list[int]]] = {}
        for name, code in data["exit_code_by_key"].items():
            if kept(code, name, equivalent):
                function, number = split_name(name)
                by_code.setdefault(str(code), {}).setdefault(function, []).append(number)
        # every file this run reached replaces its recorded entry, even with nothing kept: a
        # mutant that escapes now must not come back as caught from an older record
        source = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        files[source] = {"functions": data["hash_by_function_name"], "results": by_code}
    previous = json.loads(record.read_text())["files"] if record.exists() else {}
    merged = {**previous, **files}  # a module this run did not reach keeps its recorded results
    record.write_text(json.dumps({"files": merged}, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return sum(len(numbers) for entry in files.values() for functions in entry["results"].values() for numbers in functions.values())


def split_name(name: str) -> tuple[str, int]:
    """trashfire.core.clocks.x_rate_of__mutmut_10 -> (trashfire.core.clocks.x_rate_of, 10)."""
    function, _, number = name.rpartition("__mutmut_")
    return function, int(number)


def restore(record: Path = RECORD, mutants: Path = MUTANTS) -> int:
    """Write each recorded file's results as mutmut's .meta, where mutants/ has none yet."""
    if not record.exists():
        return 0
    restored = 0
    for source, entry in json.loads(record.read_text())["files"].items():
        meta = mutants / (source + ".meta")
        if meta.exists():
            continue
        codes = {
            f"{function}__mutmut_{n}": int(code) for code, functions in entry["results"].items() for function, numbers in functions.items() for n in numbers
        }
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(
            json.dumps(
                {
                    "exit_code_by_key": codes,
                    "hash_by_function_name": entry["functions"],
                    "type_check_error_by_key": {},
                    "durations_by_key": {},
                    "estimated_durations_by_key": {},
                }
            )
        )
        restored += len(codes)
    return restored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["save", "restore"])
    args = parser.parse_args(argv)
    if args.action == "save":
        print(f"mutation record: {save()} caught or equivalent mutants saved to {RECORD.relative_to(ROOT)}")
    else:
        print(f"mutation record: {restore()} caught or equivalent mutants restored from {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
