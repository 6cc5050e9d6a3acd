"""The mutation score per module, from what `mutmut run` left under mutants/ (`make mutation`).

A mutant is caught when a test failed on it (or it ran past its time limit: a mutant that
hangs is caught too); it escapes when the tests passed (survived) or when no test calls the
function it changes (no tests). The mutants that tools/mutation/mutation_equivalents.md lists are
equivalent, they behave as the original does, and are left out of the score:
    score = caught / (mutants - equivalents)
`--survivors` lists each module's escaped mutants that are not listed as equivalent; `--min`
fails (exit 1) when a module scores below it."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENTS = ROOT / "tools" / "mutation" / "mutation_equivalents.md"
MUTANTS = ROOT / "mutants"

# the modules `make mutation` scores (pyproject.toml's [tool.mutmut] only_mutate), by file
SCORED = ["src/trashfire/core/clocks.py", "src/trashfire/core/stats.py", "src/trashfire/metrics/*.py", "src/trashfire/survival/*.py"]


def module_name(path: Path) -> str:
    """The module, as mutmut names its mutants' prefix: src/trashfire/metrics/__init__.py -> trashfire.metrics."""
    parts = path.relative_to(ROOT / "src").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {str(path.relative_to(ROOT)): module_name(path) for pattern in SCORED for path in sorted(ROOT.glob(pattern)) if path.stat().st_size > 0}

CAUGHT = {1, 3, 24, -24, 36, 152, 255}  # a test failed; or the mutant timed out (SIGXCPU)
ESCAPED = {0: "survived", 5: "no tests", 33: "no tests"}


def equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """Mutant name -> why it is equivalent, from the list's lines `- `name`: reason`."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^- `([^`]+)`:\s*(.+)$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def results(module: str) -> dict[str, int | None] | None:
    meta = MUTANTS / (module + ".meta")
    if not meta.exists():
        return None
    return json.loads(meta.read_text())["exit_code_by_key"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--survivors", action="store_true", help="list the escaped mutants not listed as equivalent")
    parser.add_argument("--min", type=float, default=None, help="fail when a module that ran scores below this (percent)")
    args = parser.parse_args(argv)
    equivalent = equivalents()
    seen, caught_but_listed = set(), []
    low = []
    print(f"{'module':40} {'caught':>7} {'equiv':>6} {'escaped':>8} {'unrun':>6} {'score':>7}")
    for module in MODULES:
        codes = results(module)
        if codes is None:
            print(f"{module:40} {'not run':>7}")
            continue
        caught = [name for name, code in codes.items() if code in CAUGHT]
        unrun = [name for name, code in codes.items() if code is None]
        escaped = [name for name, code in codes.items() if code is not None and code not in CAUGHT]
        equiv = [name for name in escaped if name in equivalent]
        seen.update(name for name in codes if name in equivalent)
        caught_but_listed += [name for name in caught if name in equivalent]
        missed = [name for name in escaped if name not in equivalent]
        scored = len(codes) - len(equiv) - len(unrun)
        score = 100.0 * len(caught) / scored if scored else float("nan")
        print(f"{module:40} {len(caught):>7} {len(equiv):>6} {len(missed):>8} {len(unrun):>6} {score:>6.1f}%")
        if args.min is not None and scored and score < args.min:
            low.append(module)
        if args.survivors:
            for name in sorted(missed):
                print(f"    {ESCAPED.get(codes[name], codes[name])}: {name}")
    listed_elsewhere = [name for name in equivalent if name not in seen]
    if listed_elsewhere and any(results(m) is not None for m in MODULES):
        print(f"\n{len(listed_elsewhere)} listed equivalents name no mutant of this run (renamed by a code change?):")
        for name in listed_elsewhere:
            print(f"    {name}")
    if caught_but_listed:
        print(f"\n{len(caught_but_listed)} listed equivalents are caught by a test (renumbered by a code change? `mutmut show` each):")
        for name in caught_but_listed:
            print(f"    {name}")
    if equivalent:
        print(f"\nEquivalent mutants ({EQUIVALENTS.relative_to(ROOT)}):")
        for name, why in equivalent.items():
            print(f"    {name}: {why}")
    if low:
        print(f"\nbelow {args.min}%: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
