"""Write docs/benchmarks.md from bench/results/: every measured figure with its date, machine and
commit, as the result files themselves record them.

Each JSON file becomes a section: where it was measured (its `machine` or `device` fields, else
the machine named in its file name, `<date>-<machine>-...`), when (a `date` field, else the date
that begins its file name) and at which commit (a `commit` field; "not recorded" where it has
none: nothing is guessed), then one table of its figures. A short `.txt` artefact is shown as
recorded; a `.log` is listed as a raw artefact and not rendered. The page is generated, never
edited by hand: `make docs` runs this before `mkdocs build`, and tests/pipeline/test_docs.py checks that
the checked-in page is what this script writes.

    python bench/benchmark_page.py            # write docs/benchmarks.md
    python bench/benchmark_page.py --check    # exit 1 if docs/benchmarks.md is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"

NOT_RECORDED = "not recorded"
FILE_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})-")
# a machine token in a file name: a core count (`2cpu`) or an accelerator's model (`h200`)
FILE_MACHINE = re.compile(r"^(\d+cpu|[a-z]\d{2,4})$")
MACHINE_KEYS = ("device", "cpus", "torch_threads", "threads", "python", "torch", "platform")
LONG_TEXT = 80  # a string field longer than this (a log tail) is left out, with a note
RAW_TEXT_LIMIT = 4000  # a .txt artefact up to this many characters is shown as recorded
LOG_TAIL = 3  # the last lines of a log shown beside its name (a test run's summary line)


def file_date(name: str) -> str | None:
    match = FILE_DATE.match(name)
    return match.group(1) if match else None


def file_machine(name: str) -> str | None:
    """The machine token after the date in `<date>-<machine>-...`, if the name has one."""
    if not file_date(name):
        return None
    token = Path(name).stem[len("yyyy-mm-dd-") :].split("-")[0]
    return token if FILE_MACHINE.match(token) else None


def find_key(data, key: str):
    """The first value under `key` anywhere in a JSON document (depth first), or None."""
    if isinstance(data, dict):
        if key in data and not isinstance(data[key], dict | list):
            return data[key]
        for value in data.values():
            found = find_key(value, key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            found = find_key(value, key)
            if found is not None:
                return found
    return None


def machine_fields(data: dict) -> list[str]:
    """`key value` for the machine fields a result records: its `machine` block, else top-level keys."""
    block = data.get("machine") if isinstance(data.get("machine"), dict) else data
    return [f"{key} {block[key]}" for key in MACHINE_KEYS if key in block and key != "date"]


def provenance(name: str, data: dict | None, results: Path = RESULTS) -> dict[str, str]:
    """Date, machine and commit of one result file, each with where it was read."""
    data = data or {}
    block = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    recorded_date = block.get("date") or (data.get("date") if isinstance(data.get("date"), str) else None)
    if recorded_date:
        date = f"{recorded_date} (recorded in the file)"
    elif file_date(name):
        date = f"{file_date(name)} (from the file name)"
    else:
        date = NOT_RECORDED
    fields = machine_fields(data)
    token = file_machine(name)
    parts = []
    if fields:
        parts.append(", ".join(fields) + " (recorded in the file)")
    if token:
        parts.append(f"`{token}` (from the file name)")
    described = f"{file_date(name)}-{token}-machine.txt" if token else None
    if described and described != name and (results / described).exists():
        parts.append(f"described in `{described}`")
    machine = "; ".join(parts) or NOT_RECORDED
    commit = find_key(data, "commit")
    return {"date": date, "machine": machine, "commit": f"`{commit}`" if commit else NOT_RECORDED}


def scalar(value) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value).replace("|", "\\|")


def figures(data, path: str = "") -> tuple[list[tuple[str, str]], list[str]]:
    """(figure, value) rows of a JSON document, a list of scalars as one row; and the long text fields left out."""
    rows: list[tuple[str, str]] = []
    skipped: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            sub_rows, sub_skipped = figures(value, f"{path}.{key}" if path else str(key))
            rows += sub_rows
            skipped += sub_skipped
    elif isinstance(data, list):
        if all(scalar(value) and not isinstance(value, str) for value in data):
            rows.append((path, ", ".join(show(value) for value in data) or "[]"))
        else:
            for index, value in enumerate(data):
                sub_rows, sub_skipped = figures(value, f"{path}[{index}]")
                rows += sub_rows
                skipped += sub_skipped
    elif isinstance(data, str) and (len(data) > LONG_TEXT or "\n" in data):
        skipped.append(path)
    else:
        rows.append((path, show(data)))
    return rows, skipped


def reference_seconds(data) -> float | None:
    """The reference workload's seconds that the run timed beside its figures (bench/reference.py),
    or None for a run from before it was timed."""
    timed = data.get("reference") if isinstance(data, dict) else None
    return float(timed["seconds"]) if isinstance(timed, dict) and isinstance(timed.get("seconds"), int | float) else None


def is_time(figure: str, value: str) -> bool:
    """A figure in seconds: a part of its path ends in `_s` (`wall_s`, `stages_s.train`) or is `seconds`."""
    parts = re.split(r"[.\[]", figure)
    if parts[0] == "reference" or not any(part.endswith("_s") or part == "seconds" for part in parts):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def table(rows: list[tuple[str, str]], reference: float | None = None) -> list[str]:
    """One row per figure; a figure in seconds gets its ratio to the run's reference beside it."""
    lines = ["| figure | value | / reference |", "| --- | --- | --- |"]
    for figure, value in rows:
        ratio = ""
        if is_time(figure, value):
            ratio = f"{float(value) / reference:.2f}x" if reference else "not measured"
        lines.append(f"| `{figure}` | {value} | {ratio} |")
    return lines


def reference_line(data) -> str:
    seconds = reference_seconds(data)
    if seconds is None:
        return "- reference workload: not measured (this run is from before bench/reference.py, issue 58): its seconds are one machine's"
    return f"- reference workload: {seconds:g} s, timed in the same run (bench/reference.py); each figure in seconds is shown beside as a multiple of it"


def json_section(path: Path) -> tuple[list[str], dict[str, str], int]:
    data = json.loads(path.read_text())
    where = provenance(path.name, data, path.parent)
    body = data
    if isinstance(data, dict) and isinstance(data.get("machine"), dict):
        body = {key: value for key, value in data.items() if key != "machine"}
    rows, skipped = figures(body)
    lines = [f"## {path.name}", "", *provenance_lines(where), reference_line(data), ""]
    lines += table(rows, reference_seconds(data))
    if skipped:
        lines += ["", f"Left out (long text, read them in the file): {', '.join(f'`{name}`' for name in skipped)}."]
    return lines + [""], where, len(rows)


def raw_section(path: Path) -> tuple[list[str], dict[str, str]]:
    text = path.read_text(errors="replace")
    where = provenance(path.name, None, path.parent)
    lines = [f"## {path.name}", "", *provenance_lines(where), ""]
    if path.suffix == ".txt" and len(text) <= RAW_TEXT_LIMIT:
        lines += ["A raw artefact, as recorded:", "", "```text", text.rstrip("\n"), "```"]
    else:
        tail = [line for line in text.splitlines() if line.strip()][-LOG_TAIL:]
        lines += [
            f"A raw artefact ({len(text.splitlines())} lines), not rendered here: read `bench/results/{path.name}`. Its last lines:",
            "",
            "```text",
            *tail,
            "```",
        ]
    return lines + [""], where


def provenance_lines(where: dict[str, str]) -> list[str]:
    return [f"- date: {where['date']}", f"- machine: {where['machine']}", f"- commit: {where['commit']}"]


def render(results: Path = RESULTS) -> str:
    """The whole page for the files in `results` (sorted by name)."""
    sections: list[str] = []
    overview = ["| file | kind | figures | date | commit |", "| --- | --- | --- | --- | --- |"]
    for path in sorted(p for p in results.iterdir() if p.is_file()):
        if path.suffix == ".json":
            lines, where, count = json_section(path)
            kind, shown = "measured (JSON)", str(count)
        elif path.suffix in (".txt", ".log"):
            lines, where = raw_section(path)
            kind, shown = f"raw artefact ({path.suffix[1:]})", "-"
        else:
            continue
        sections += lines
        overview.append(f"| [{path.name}](#{anchor(path.name)}) | {kind} | {shown} | {where['date']} | {where['commit']} |")
    head = [
        "# Benchmarks",
        "",
        "<!-- generated by bench/benchmark_page.py from bench/results/: do not edit; `make docs` rewrites it -->",
        "",
        "Every file in `bench/results/`, with each measured figure as the file records it. Date, machine",
        "and commit come from the file's own fields, else from its name (`<date>-<machine>-...`); where",
        "neither has one, the page says *not recorded*. `make bench` writes `reports/bench.json`;",
        "copy a run worth keeping into `bench/results/` and run `make docs`.",
        "",
    ]
    return "\n".join(head + overview + [""] + sections).rstrip("\n") + "\n"


def anchor(name: str) -> str:
    """The heading id that Python-Markdown's toc extension gives `## <name>`."""
    slug = re.sub(r"[^\w\s-]", "", name.lower()).strip()
    return re.sub(r"[-\s]+", "-", slug)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in page differs from what this writes")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = render(args.results)
    if args.check:
        if not args.page.exists() or args.page.read_text() != page:
            print(f"{args.page} is stale: run python bench/benchmark_page.py", file=sys.stderr)
            return 1
        return 0
    args.page.write_text(page)
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
