"""The figures and report.html of a study with many cells: test_figures' tables tiled (new
hashes and seeds, bench/tile_reports.py) to thousands of model cells. Each figure keeps its
panels and draws distributions, not cells, so that what it draws does not grow with the cells;
the report's long tables are JSON rows that its script pages, cut to a bounded size."""

import json
import re

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from bench.tile_reports import tile_cards, tile_table
from matplotlib.figure import Figure

from tests.conftest import artefacts_of
from tests.report.test_figures import write_reports
from trashfire.report import page, sections
from trashfire.report.figures import FigureFolder, drawings
from trashfire.report.inputs import read_tables
from trashfire.stages import figures as figures_stage

# test_figures' 9 model cells tiled: the smaller size already puts every panel past MAX_DOTS and
# MAX_POINTS (the benign TRASH violins have 9 x 160 / 4 = 360 cells, of 1,440); the larger doubles them
COPIES = (160, 320)


def tiled(tables: dict, copies: int) -> dict:
    """read_tables' tables with every table of cells tiled `copies` times."""
    return {name: tile_table(table, copies) if isinstance(table, pd.DataFrame) else table for name, table in tables.items()}


def drawn_figures(tables: dict, folder, monkeypatch) -> dict[str, Figure]:
    """Every figure as drawn, before its layout and saving: they are most of the time and draw nothing new."""
    shown = {}
    with monkeypatch.context() as patch:
        patch.setattr(Figure, "savefig", lambda *args, **kwargs: None)
        patch.setattr(Figure, "tight_layout", lambda *args, **kwargs: None)
        patch.setattr(plt, "close", lambda *args: None)
        for stem, draw in drawings(tables, FigureFolder(folder, ("png",))).items():
            draw()
            shown[stem] = plt.gcf()
    return shown


def panels(fig: Figure) -> int:
    return sum(ax.get_visible() and ax.has_data() for ax in fig.axes)


def marks(fig: Figure) -> int:
    """What a figure draws: a line, a patch, a violin body each; a scatter or hexbin one per point or hexagon."""
    return sum(len(ax.lines) + len(ax.patches) + sum(max(1, len(c.get_offsets())) for c in ax.collections) for ax in fig.axes)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """test_figures' reports and the tables the figures stage reads from them."""
    reports = tmp_path_factory.mktemp("many") / "reports"
    reports.mkdir()
    write_reports(reports)
    return reports, read_tables(artefacts_of(figures_stage, reports=reports))


def test_every_figure_keeps_its_panels_and_draws_no_more_as_cells_double(source, monkeypatch):
    reports, tables = source
    small, large = (drawn_figures(tiled(tables, copies), reports / "figures", monkeypatch) for copies in COPIES)
    cells = tables["experiments"]
    families = cells["attack"] + cells["norm"].astype(str)
    most = cells["dataset"].nunique() * cells["defence"].nunique() * families.nunique()
    try:
        assert set(small) == set(large) and len(small) == 9
        for stem, fig in small.items():
            assert 0 < panels(fig) <= most, (stem, panels(fig), most)
            assert panels(large[stem]) == panels(fig), stem
            assert marks(large[stem]) == marks(fig), (stem, marks(fig), marks(large[stem]))  # a dot per cell would double
    finally:
        plt.close("all")


def payloads(html: str) -> dict[str, dict]:
    """Each folded data table's JSON rows, by the id of its <details>."""
    found = {}
    for block in re.findall(r'<details id="([^"]+)">(.*?)</details>', html, flags=re.S):
        data = re.search(r'<script type="application/json">(.*?)</script>', block[1], flags=re.S)
        if data:
            found[block[0]] = json.loads(data.group(1))
    return found


def test_the_report_embeds_bounded_searchable_tables_and_links_every_row(source):
    reports, tables = source
    many = tiled(tables, COPIES[1])
    tile_cards(reports / "cards", reports / "cards", COPIES[1])
    html = page.report_html(artefacts_of(figures_stage, reports=reports), [], tables=many).read_text()
    robustness = many["robustness"]
    tables = payloads(html)
    assert {"table-robustness", "table-eps-survival", "table-brittle", "table-cards"} <= set(tables)
    shown = tables["table-robustness"]
    assert shown["columns"][:2] == ["dataset", "model"] and all(len(row) == len(shown["columns"]) for row in shown["rows"])
    assert page.INLINE_ROWS < len(shown["rows"]) <= sections.MAX_ROWS < len(robustness)
    assert [row[shown["columns"].index("seed")] for row in shown["rows"][:3]] == [str(s) for s in robustness["seed"][:3]]  # its first rows, in order
    assert f"The first {len(shown['rows']):,} of {len(robustness):,} rows are here" in html and '<a href="robustness.csv">' in html
    assert html.count('<div class="datatable">') == len(tables) and "function build(box)" in html  # the script that pages them, once
    for key, data in tables.items():  # each table's rows within the page's bound, whatever the cells
        assert len(json.dumps(data, ensure_ascii=False)) < sections.TABLE_CHARS + 3 * sections.MAX_ROWS + 2_000, key
    assert len(html) < len(tables) * (sections.TABLE_CHARS + 3 * sections.MAX_ROWS) + 500_000


def test_many_seeds_brittle_tests_are_summed_up_not_listed():
    few = {str(seed): {"rho": -0.5, "p": 0.3, "n": 6} for seed in range(sections.SEEDS_LISTED)}
    assert sections.per_seed_text(few).count("; seed ") == sections.SEEDS_LISTED - 1  # each seed's test, listed
    many = {str(seed): {"rho": -0.9 + 0.001 * seed, "p": 0.01 if seed < 30 else 0.2, "n": 10} for seed in range(400)}
    text = sections.per_seed_text(many)
    assert text == "Per seed (400 seeds), brittle-score against robust accuracy: ρ from -0.9 to -0.501, median -0.701; p < 0.05 in 30 of 400."
