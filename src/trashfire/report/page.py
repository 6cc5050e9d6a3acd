"""reports/report.html: one offline page rendered from the Jinja2 templates in templates/
(package data): report.html.j2, a partial per section under sections/, the shared macros and
report.css, inlined into the page's <style>. Every value is escaped by the templates
(autoescape); figures are inlined as data URIs so that the page can be mailed or archived
on its own."""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path

import jinja2
import markupsafe

from trashfire.core.records import atomic_path, read_json
from trashfire.core.stage import Artefacts
from trashfire.report import sections, strength
from trashfire.report.captions import CAPTIONS, caption_for
from trashfire.report.inputs import read_metrics, read_tables
from trashfire.tables.worst_case import measured

SECTIONS = (
    ("findings", "Findings"),
    ("validity", "Validity flags"),
    ("attacks", "How strong are the attacks?"),
    ("headline", "Headline metrics"),
    ("run", "Run"),
    ("figures", "Figures"),
    ("tables", "Tables"),
)


# A table with more rows than this is embedded as JSON and shown a page at a time by the
# page's script (templates/report.js), with a search box and sortable columns; a shorter one
# is plain HTML, readable without script.
INLINE_ROWS = 60


@functools.cache
def environment() -> jinja2.Environment:
    """The templates, shipped in the package (pyproject.toml's package-data), HTML-escaped."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("trashfire.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["rows_json"] = rows_json
    env.globals["inline_rows"] = INLINE_ROWS
    return env


def rows_json(table: sections.Table) -> markupsafe.Markup:
    """A table as the JSON its script reads: columns, which are text (left-aligned), and the
    rows' cell texts. Inside <script> nothing is unescaped, so <, > and & are written as JSON
    escapes: no cell can close the script."""
    text = [any(row[c][1] for row in table.rows) for c in range(len(table.columns))]
    data = {"columns": table.columns, "text": text, "rows": [[cell for cell, _ in row] for row in table.rows]}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return markupsafe.Markup(payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


# --- Figures


def figure_order(path: Path) -> tuple[int, str]:
    """The order of CAPTIONS (the headline's story), then the per-model coefficient plots."""
    stems = list(CAPTIONS)
    rank = stems.index(path.stem) if path.stem in stems and path.parent.name != "coefficients" else len(stems)
    return rank, str(path)


def figure_id(path: Path) -> str:
    prefix = "fig-coef-" if path.parent.name == "coefficients" else "fig-"
    return prefix + path.stem


def figure(path: Path, reports: Path) -> dict:
    """A figure with its anchor, file name, captions and the PNG as base64."""
    title, shows, read = caption_for(path)
    return {
        "id": figure_id(path),
        "name": str(path.relative_to(reports)) if path.is_relative_to(reports) else path.name,
        "title": title,
        "shows": shows,
        "read": read,
        "data": base64.b64encode(path.read_bytes()).decode(),
    }


def figures_section(images: list[Path], reports: Path, skipped: dict[str, str] | None) -> dict:
    """Every figure with its how-to-read caption, the per-model coefficient plots apart (the
    page folds them), and the figures skipped with why."""
    images = sorted(images, key=figure_order)
    return {
        "main": [figure(p, reports) for p in images if p.parent.name != "coefficients"],
        "per_model": [figure(p, reports) for p in images if p.parent.name == "coefficients"],
        "skipped": list((skipped or {}).items()),
    }


# --- The page


SYNTHETIC_MARK = "synthetic_study.json"  # in reports/: bench/synthetic_study.py made this study's attack records


def synthetic_note(reports: Path) -> str | None:
    """What the page says first where the study is synthetic (its reports hold SYNTHETIC_MARK):
    its attack cells are jittered copies of a few real ones, so its findings and scores are
    the copies' (a copy's runtime is its original's, which a runtime baseline then reads off),
    a benchmark's workload, not a study's result."""
    mark = reports / SYNTHETIC_MARK
    if not mark.is_file():
        return None
    study = read_json(mark)

    def count(key: str) -> str:
        return f"{study[key]:,}" if isinstance(study.get(key), int) else "?"

    return (
        f"A synthetic study (bench/synthetic_study.py): its {count('attack_cells')} attack cells and "
        f"{count('attacked_samples')} attacked samples are copies, each jittered by a few percent, of the "
        f"{count('source_attack_cells')} attack cells of a real run over {count('source_seeds')} seeds, tiled to "
        f"{count('seeds')} seeds. Its findings, scores and intervals describe those copies, which are not "
        "independent models: read this page as a benchmark's workload, not as a study's result."
    )


def report_html(artefacts: Artefacts, images: list[Path], skipped: dict[str, str] | None = None, tables: dict | None = None) -> Path:
    """One offline page (the figures stage's `report.html`): findings, headline metrics with
    their meaning, the run, every figure with how to read it, every table folded. `tables`:
    read_tables' where the caller has them (at 10^5 cells reading them is seconds)."""
    path = artefacts.output("report.html")
    tables, metrics = tables if tables is not None else read_tables(artefacts), read_metrics(artefacts)
    attacks = measured(tables["experiments"])  # the attack cells, without the worst cases
    degenerate = sections.degenerate_cells(attacks)
    page = render(
        "report.html.j2",
        sections=SECTIONS,
        left_out=sections.LEFT_OUT,
        findings=sections.findings_section(tables["findings"], metrics, degenerate, seeds=attacks["seed"].nunique() if "seed" in attacks else 0),
        validity=sections.validity_section(tables["validity"], metrics, tables["budget_families"], tables.get("minimal_eps_check")),
        attacks=strength.attacks_section(tables),
        headline=sections.headline_rows(metrics),
        run=sections.run_section(metrics, attacks, degenerate),
        figures=figures_section(images, path.parent, skipped),  # figure names relative to the page
        tables=sections.tables_section(tables, artefacts, metrics.get("survival_missing_reason")),
        synthetic=synthetic_note(path.parent),
    )
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
