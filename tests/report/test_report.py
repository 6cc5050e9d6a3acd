"""The HTML report reads in a minute: findings first with a badge per verdict and their count,
the headline with one plain sentence per metric, the run with its degenerate cells, every
figure and table with how to read it, and the long tables folded. Drawn from the small
synthetic tables of test_figures, without drawing the figures (the report only inlines them)."""

import json
import re
import tomllib
from importlib import resources

import pandas as pd
import pytest

from tests.conftest import ROOT, artefacts_of
from tests.report.test_figures import findings_table, write_reports
from trashfire.core.errors import DataError
from trashfire.report import sections
from trashfire.report.figures import survival_images
from trashfire.report.page import render, report_html
from trashfire.stages import figures as figures_stage

SECTION_ORDER = ["findings", "headline", "run", "figures", "tables"]
FOLDED = {
    "table-tau": "tau_table.csv",
    "table-trash": "trash_summary.csv",
    "table-auc": "auc_table.csv",
    "table-robustness": "robustness.csv",
    "table-brittle": "brittle.csv",
    "table-survival": "survival/aft_comparison.csv",
}


@pytest.fixture
def reports(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    write_reports(folder)
    return folder


def page_of(reports) -> str:
    artefacts = artefacts_of(figures_stage, reports=reports)
    return report_html(artefacts, survival_images(artefacts)).read_text()


def test_findings_come_first_with_a_badge_per_verdict_and_their_count(reports):
    page = page_of(reports)
    positions = [page.index(f'<h2 id="{key}">') for key in SECTION_ORDER]
    assert positions == sorted(positions)
    assert "4 claims of the four papers tested on this run: <b>1 holds, 1 contradicted, 1 inconclusive, 1 not testable</b>" in page
    for verdict, css in (("holds", "v-holds"), ("contradicted", "v-contradicted"), ("inconclusive", "v-inconclusive"), ("not testable", "v-not-testable")):
        assert f'<span class="verdict {css}">{verdict}</span>' in page, verdict
    assert "12.6 [10.9, 14.3], n = 12" in page and "-0.171, p = 0.19, n = 60" in page and "—, n = 0" in page
    assert "003 TRASHFIRE" in page and "needs pretrained cells: +train.pretrained_on.&lt;data&gt;" in page
    brittle_row = next(row for row in page.split("<tr>") if "brittle-score correlates negatively" in row)
    assert "seed 0: ρ = -0.5, p = 0.3, n = 6" in brittle_row  # metrics.json's per-seed tests beside their finding


def test_a_synthetic_study_says_so_before_anything_else_and_a_real_one_says_nothing(reports):
    """bench/synthetic_study.py marks its reports: its findings are jittered copies' findings."""
    assert 'id="synthetic"' not in page_of(reports)
    mark = {"seeds": 440, "attack_cells": 135520, "attacked_samples": 10018800, "source_seeds": 3, "source_attack_cells": 792}
    (reports / "synthetic_study.json").write_text(json.dumps(mark))
    page = page_of(reports)
    note = page.index('id="synthetic"')
    assert note < page.index("<nav>") and note < page.index('<h2 id="findings">')
    assert "135,520 attack cells and 10,018,800 attacked samples are copies" in page and "of the 792 attack cells of a real run over 3 seeds" in page


def test_the_verdict_count_names_every_verdict_even_when_none_has_it():
    verdicts = pd.Series(["holds"] * 7 + ["inconclusive"] * 2 + ["not testable"])
    assert sections.verdict_count(verdicts) == "7 hold, 0 contradicted, 2 inconclusive, 1 not testable"


def test_finding_text_is_escaped(reports):
    table = findings_table()
    table.loc[0, "claim"] = "<script>alert(1)</script> & more"
    table.to_csv(reports / "findings.csv", index=False)
    page = page_of(reports)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_a_missing_table_the_figures_stage_depends_on_is_one_line_naming_the_stage_to_run(reports):
    """findings.csv is one of the figures stage's deps: DVC makes it first, and a run without
    it (a stage run by hand) is refused before anything is drawn."""
    (reports / "findings.csv").unlink()
    with pytest.raises(DataError, match=r"findings.csv not found; run `dvc repro aggregate` first"):
        page_of(reports)


def test_an_empty_findings_table_says_not_computed_and_the_report_is_still_written(reports):
    findings_table().iloc[:0].to_csv(reports / "findings.csv", index=False)
    page = page_of(reports)
    assert "not computed: findings.csv has no findings" in page
    assert "seed 0: ρ = -0.5" in page  # the per-seed tests still show
    assert '<h2 id="headline">' in page and 'id="table-trash"' in page


def test_the_headline_gives_each_metric_one_plain_sentence_and_leaves_counts_to_the_run_line():
    metrics = {
        "trash_adv_median": 0.46,
        "n_train_cells": 24,
        "clock": "process",
        "survival_beats_baselines": True,
        "evp_mean_short_of_nonviability": float("nan"),
        "brittle_spearman": {"digits": {"rho": -0.17, "p": 0.19, "n": 60}},
        "findings": {"x": {"verdict": "holds"}},
        "a_new_metric": 2,
    }
    shown = render("sections/headline.html.j2", headline=sections.headline_rows(metrics))
    assert "above 1 a model is cheaper to break than to train" in shown and "0.46" in shown
    assert "brittle_spearman · digits" in shown and "ρ = -0.17, p = 0.19, n = 60" in shown
    assert ">yes<" in shown and ">—<" in shown and "a_new_metric" in shown
    assert "n_train_cells" not in shown and "findings" not in shown and "process" not in shown


def test_degenerate_model_cells_are_listed_with_why_they_are_left_out(reports):
    assert "Degenerate model cells: none" in page_of(reports)
    experiments = pd.read_csv(reports / "experiments.csv")
    chance = experiments["model_hash"] == "mn34conf0"
    experiments.assign(degenerate=chance, acc_ben=experiments["acc_ben"].where(~chance, 0.1)).to_csv(reports / "experiments.csv", index=False)
    page = page_of(reports)
    run = page[page.index('<h2 id="run">') : page.index('<h2 id="figures">')]
    assert "1 degenerate model cell(s)" in run and "left out of R, EVP, the brittle correlations and the headline means" in run
    listed = re.search(r"<table>.*?</table>", run, re.S).group(0)
    for text in ("mnist", "resnet34", "conf", ">0.1<"):
        assert text in listed, text
    assert "1 degenerate model cell(s) left out" in page[: page.index('<h2 id="headline">')]  # said under the findings too


def test_long_tables_are_folded_with_name_row_count_and_how_to_read(reports):
    page = page_of(reports)
    tables = page[page.index('<h2 id="tables">') :]
    for key, name in FOLDED.items():
        rows = len(pd.read_csv(reports / name))
        match = re.search(
            rf'<details id="{key}"><summary>[^<]+<span class="size">\((\d+) rows\)</span></summary>\s*'
            r'<p class="howto"><b>How to read it:</b> [^<]+</p>',
            tables,
        )
        assert match and int(match.group(1)) == rows, key
    assert re.search(r'<details id="table-cards"><summary>Model cards <span class="size">\(1 rows\)', tables)
    assert "<table" not in re.sub(r"<details.*?</details>", "", tables, flags=re.S)  # every table folded


def test_every_figure_says_how_to_read_it_and_the_story_order_is_kept(reports, tmp_path):
    drawn = []
    for stem in ("brittle_vs_robust_acc", "trash_by_depth_and_defence"):  # any PNG will do: the report only inlines it
        drawn.append(reports / "figures" / f"{stem}.png")
        drawn[-1].parent.mkdir(exist_ok=True)
        drawn[-1].write_bytes((reports / "survival" / "calibration.png").read_bytes())
    artefacts = artefacts_of(figures_stage, reports=reports)
    html = report_html(artefacts, drawn + survival_images(artefacts)).read_text()
    shown = html[html.index('<h2 id="figures">') : html.index('<h2 id="tables">')]
    assert shown.count("<figure") == 4 and shown.count("How to read it:") == 4
    assert shown.index('id="fig-trash_by_depth_and_defence"') < shown.index('id="fig-brittle_vs_robust_acc"') < shown.index('id="fig-calibration"')
    assert re.search(r'<details><summary>Coefficients of every fitted survival model.*id="fig-coef-weibull"', shown, re.S)


def test_metrics_json_values_reach_the_page_escaped(reports):
    metrics = json.loads((reports / "metrics.json").read_text()) | {"survival_model": "<b>weibull</b>"}
    (reports / "metrics.json").write_text(json.dumps(metrics))
    assert "&lt;b&gt;weibull&lt;/b&gt;" in page_of(reports)


def test_the_page_is_rendered_from_templates_shipped_with_the_package(reports):
    """report.css is inlined as it is; every template is package data (pyproject.toml), so that
    an installed wheel renders the page too."""
    templates = resources.files("trashfire.report") / "templates"
    css = (templates / "report.css").read_text()
    assert f"<style>\n{css}</style>" in page_of(reports)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["trashfire"]
    package = ROOT / "src" / "trashfire"
    shipped = [p for p in (package / "report" / "templates").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(shipped) > 2 and all(any(p.relative_to(package).match(g) for g in globs) for p in shipped)


def test_a_template_escapes_every_value():
    rows = [("<i>name</i>", "1 < 2", "'quoted' & \"double\"")]
    shown = render("sections/headline.html.j2", headline=rows)
    assert "<i>" not in shown and "&lt;i&gt;name&lt;/i&gt;" in shown and "1 &lt; 2" in shown and "&#39;quoted&#39; &amp; &#34;double&#34;" in shown


def test_every_figure_the_survival_stage_writes_has_a_caption_of_its_own():
    """The report explains each figure: the survival stage's are saved by name in analysis.py
    and competing.py (`save(..., out / "<name>.png")`), and none may fall back to the plain caption."""
    from pathlib import Path

    from trashfire.report.captions import caption_for

    source = "".join((ROOT / "src" / "trashfire" / "survival" / f"{module}.py").read_text() for module in ("analysis", "competing"))
    saved = set(re.findall(r'out / "([a-z_]+)\.png"', source)) | set(re.findall(r'for name in \("[a-z_]+\.csv", "([a-z_]+)\.png"\)', source))
    assert {"kaplan_meier", "calibration", "coefficients", "competing_risks"} <= saved
    plain = caption_for(Path("unknown.png"))[1:]  # what it shows and how to read it; the title is the name's
    assert [stem for stem in sorted(saved) if caption_for(Path(f"reports/survival/{stem}.png"))[1:] == plain] == []


def test_the_findings_say_how_many_seeds_would_settle_each_inconclusive_claim():
    """units_to_settle in seeds: 12 (configuration, seed) units from 3 seeds are 4 per seed, so
    about 30 units are 8 seeds; a claim that holds, or has no figure, says nothing."""
    findings = pd.DataFrame(
        [
            {"id": "a", "verdict": "inconclusive", "n": 12, "units": "(configuration, seed) units", "units_to_settle": 30.2},
            {"id": "b", "verdict": "holds", "n": 12, "units": "trained models", "units_to_settle": 5.0},
            {"id": "c", "verdict": "inconclusive", "n": 3, "units": "seeds", "units_to_settle": float("nan")},
        ]
    )
    sentence = sections.settle_sentence(findings, seeds=3)
    assert sentence == (
        "At the effects seen, the inconclusive claims would be settled (at 80% power, Holm's level) by "
        "a: about 8 seeds (this run: 3 seeds, 12 (configuration, seed) units; about 31 (configuration, seed) units needed)."
    )
    assert sections.settle_sentence(findings.iloc[1:], seeds=3) == ""
