"""The figures stage on small synthetic tables in aggregate's schema: every figure and the
report are written, the report is self-contained, and missing inputs are handled."""

import json
import re
import shutil

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, tiny_overrides
from trashfire.core import schema
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.metrics import summaries
from trashfire.report import formatting, sections
from trashfire.report.figures.common import capped_lines
from trashfire.stages import figures

STEMS = [
    "accuracy_by_attack_and_defence",
    "trash_by_depth_and_defence",
    "evp_vs_tau",
    "evp_convergence",
    "accuracy_eps_curves",
    "brittle_vs_robust_acc",
    "eps_survival_curves",
    "eps_survival_vs_evp_r",
    "accuracy_vs_queries",
]
EPS = [0.1, 0.3, 1.0]
FAMILIES = [("fgm", "inf"), ("pgd", "inf"), ("deepfool", "2")]  # deepfool has no eps grid
PIXEL_STD = {"digits": 0.3, "mnist": 0.31}
N_CLASSES = {"digits": 10, "mnist": 10}


def strength_tables(experiments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """timing's and aggregate's tables of how strong the attacks are, by hand: per undefended
    model cell, FGM and PGD (linf) against queries at eps 0.1, their optimality, the grid check."""
    cells = experiments[experiments["defence"] == "none"].drop_duplicates("model_hash")
    queries, optimality, check = [], [], []
    for cell in cells.itertuples():
        for family, acc in (("fgm linf", 0.6), ("pgd linf", 0.4)):
            labels = {"model_hash": cell.model_hash, "dataset": cell.dataset, "norm": "inf", "attack": family.split()[0], "attack_family": family}
            queries += [labels | {"eps": 0.1, "passes": p, "acc": a, "n": 100} for p, a in ((0, 1.0), (2, 0.8), (12, acc))]
            optimality.append(labels | {"n": 100, "optimality": acc + 0.3, "area": 0.1, "best_area": 0.05, "clean_acc": 1.0, "eps_max": 0.3, "note": ""})
            check.append(labels | {"eps": 0.1, "n": 100, "acc_grid": acc, "acc_minimal": acc - 0.02, "n_below": 2, "n_above": 0, "agrees": True})
    ranking = pd.DataFrame(
        {
            "dataset": "digits",
            "norm": "inf",
            "attack_family": ["pgd linf", "fgm linf"],
            "n_cells": 2,
            "optimality_mean": [0.9, 0.7],
            "optimality_min": [0.8, 0.6],
        }
    ).assign(optimality_max=[0.95, 0.75], rank=[1, 2])
    return {
        "query_curves.csv": pd.DataFrame(queries),
        "optimality.csv": pd.DataFrame(optimality),
        "optimality_ranking.csv": ranking,
        "minimal_eps_check.csv": pd.DataFrame(check).drop(columns=["attack"]),
    }


def model_cells() -> list[dict]:
    """Two data sets, two depths, two defences; the undefended digits resnet18 has two seeds."""
    cells = []
    for dataset in ("digits", "mnist"):
        for model, depth in (("resnet18", 18), ("resnet34", 34)):
            for defence, param, value in (("none", "", 0.0), ("conf", "confidence", 0.5)):
                seeds = (0, 1) if (dataset, model, defence) == ("digits", "resnet18", "none") else (0,)
                for seed in seeds:
                    cells.append(
                        {
                            "model_hash": f"{dataset[:2]}{depth}{defence}{seed}",
                            "dataset": dataset,
                            "pretrained_on": "",
                            "seed": seed,
                            "model": model,
                            "depth": depth,
                            "epochs": 1,
                            "lr": 0.05,
                            "defence": defence,
                            "defence_param": param,
                            "defence_value": value,
                        }
                    )
    return cells


def family_name(attack: str, norm: str) -> str:
    return f"{attack} l{norm}"


def accuracy_at(cell: dict, eps: float) -> float:
    base = 0.9 - 0.1 * (cell["defence"] == "conf") - 0.05 * cell["seed"]
    return max(base * (1 - 0.7 * eps), 0.05)


def experiments_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES:
            values = EPS if attack != "deepfool" else [50]
            param = "eps" if attack != "deepfool" else "max_iter"
            for value in values:
                eps = value if param == "eps" else 1.0
                rows.append(
                    cell
                    | {
                        "attack": attack,
                        "norm": norm,
                        "attack_param": param,
                        "attack_value": value,
                        "attack_units": "standardised",
                        "attack_value_standardised": value,
                        "n_attack": 20,
                        "n_classes": 10,
                        "acc_ben": accuracy_at(cell, 0),
                        "acc_ben_attack_subset": accuracy_at(cell, 0),
                        "acc_adv": accuracy_at(cell, eps),
                        "t_train": 0.01,
                        "t_predict": 0.003,
                        "t_attack": 0.01,
                        "train_hash": f"t{cell['model_hash']}",
                        "attack_hash": f"a{len(rows)}",
                    }
                )
    return pd.DataFrame(rows)


def trash_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES:
            rows.append(
                cell
                | {
                    "attack": attack,
                    "norm": norm,
                    "attack_family": family_name(attack, norm),
                    "t_train": 0.01,
                    "t_predict": 0.003,
                    "t_attack": 0.01,
                    "acc_ben": 0.9,
                    "acc_adv": 0.4,
                    "E_T": 0.02 * (1 + cell["depth"] / 18),
                    "censored_share": 0.25,
                    "f_ben": 30.0,
                    "f_adv": 60.0,
                    "trash_adv": 0.5 * cell["depth"] / 18 * (1 + 0.5 * cell["seed"]) * (3 if attack == "deepfool" else 1),
                    "trash_ben": 2.0 + cell["depth"] / 18,
                    "eps_max": 1.0,
                }
            )
    table = pd.DataFrame(rows)
    table.loc[0, "trash_adv"] = 0.0  # a log axis cannot show these: dropped and counted
    table.loc[1, "trash_adv"] = np.nan
    return table


def over_seeds(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return table.groupby(keys, dropna=False)


SUMMARY_KEYS = ["dataset", "pretrained_on", "model", "depth", "epochs", "lr", "defence", "defence_param", "defence_value"]


def trash_summary(trash: pd.DataFrame) -> pd.DataFrame:
    keys = SUMMARY_KEYS + ["attack", "norm", "attack_family"]
    summary = (
        over_seeds(trash, keys)
        .agg(
            n_seeds=("seed", "count"),
            trash_adv_mean=("trash_adv", "mean"),
            trash_ben_mean=("trash_ben", "mean"),
            E_T_mean=("E_T", "mean"),
            censored_share_mean=("censored_share", "mean"),
            f_ben_mean=("f_ben", "mean"),
            f_adv_mean=("f_adv", "mean"),
        )
        .reset_index()
    )
    for column in ("trash_adv", "trash_ben"):
        summary[f"{column}_lo"] = summary[f"{column}_mean"] * 0.9
        summary[f"{column}_hi"] = summary[f"{column}_mean"] * 1.1
    return summary


def curves_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES[:2]:
            for eps in [0.0] + EPS:
                acc = accuracy_at(cell, eps)
                rows.append(
                    cell
                    | {
                        "attack": attack,
                        "norm": norm,
                        "attack_family": family_name(attack, norm),
                        "eps": eps,
                        "eps_pixel": eps * PIXEL_STD[cell["dataset"]],
                        "eps_standardised": eps,
                        "acc": acc,
                        "acc_norm": acc / accuracy_at(cell, 0.0),
                    }
                )
    return pd.DataFrame(rows)


def robustness_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES[:2]:
            rows.append(
                cell
                | {
                    "attack": attack,
                    "norm": norm,
                    "attack_family": family_name(attack, norm),
                    "n_classes": 10,
                    "acc_ben": accuracy_at(cell, 0),
                    "tau": 0.25,
                    "evp": 0.5,
                    "auc_R": 0.7,
                    "auc_S": 0.3,
                    "auc_units": "pixel",
                    "eps0": 0.0,
                    "eps1": 0.1,
                    "note": "",
                }
            )
    rows[-1] |= {"auc_R": np.nan, "auc_S": np.nan, "note": "f(eps0) = 0"}
    return pd.DataFrame(rows)


def evp_tau_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES[:2]:
            for tau in np.linspace(0, 1, 11):
                rows.append(
                    cell
                    | {
                        "attack": attack,
                        "norm": norm,
                        "attack_family": family_name(attack, norm),
                        "tau": tau,
                        "evp": max(accuracy_at(cell, 0.3) - tau * 0.5, 0.0),
                    }
                )
    return pd.DataFrame(rows)


def evp_convergence_table(cells: list[dict]) -> pd.DataFrame:
    rows = []
    for cell in cells:
        for attack, norm in FAMILIES[:2]:
            for n in (1, 2, 3):
                rows.append(
                    cell | {"attack": attack, "norm": norm, "attack_family": family_name(attack, norm), "n_intervals": n, "evp": 0.5 + 0.1 / n, "tau": 0.25}
                )
    return pd.DataFrame(rows)


def auc_table(robustness: pd.DataFrame) -> pd.DataFrame:
    table = over_seeds(robustness, SUMMARY_KEYS + ["attack_family"]).agg(
        n_seeds=("seed", "count"), R_mean=("auc_R", "mean"), R_sd=("auc_R", "std"), S_mean=("auc_S", "mean"), S_sd=("auc_S", "std")
    )
    return table.reset_index()


def brittle_table(cells: list[dict]) -> pd.DataFrame:
    rows = [
        cell
        | {
            "brittle_score": 0.02 + 0.01 * i % 3,
            "brittle_ri": np.nan if cell["defence"] == "none" else 12.5,
            "robust_acc": 0.3 + 0.02 * i,
            "robust_attack": "pgd linf (mean over eps)",
        }
        for i, cell in enumerate(cells)
    ]
    return pd.DataFrame(rows)


def eps_survival_tables(cells: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """eps_survival.csv and its curves: the grid families stand as their accuracy falls;
    DeepFool's steps in pixel units."""
    rows, points = [], []
    for cell in cells:
        for attack, norm in FAMILIES:
            key = cell | {"attack": attack, "norm": norm, "attack_family": family_name(attack, norm)}
            if attack == "deepfool":
                eps, survival, search, units = [0.0, 0.5, 1.0, 2.0], [1.0, 0.6, 0.2, 0.0], "minimal", "pixel"
            else:
                eps, search, units = [0.0, *EPS], "grid", "standardised"
                survival = [accuracy_at(cell, e) for e in eps]
            area = float(np.trapezoid(survival, eps) / eps[-1])
            rows.append(key | {"search": search, "units": units, "n": 20, "events": 15, "events_at_zero": 2, "eps_max": eps[-1]})
            rows[-1] |= {"area": area, "area_lo": area - 0.05, "area_hi": area + 0.05, "median_eps": 0.5, "n_nonmonotone": 0, "degenerate": False}
            points += [key | {"search": search, "units": units, "eps": e, "survival": v} for e, v in zip(eps, survival)]
    return pd.DataFrame(rows), pd.DataFrame(points)


def write_reports(reports) -> None:
    """Every table aggregate, timing and survival write, small and in their schema."""
    cells = model_cells()
    trash = trash_table(cells)
    trash = trash.assign(**{f"trash_adv_{clock}": trash["trash_adv"] for clock in schema.CLOCKS})  # as if every clock agreed
    robustness = robustness_table(cells)
    depths = pd.DataFrame(
        [{column: 1.0 for column in schema.DEPTH_DECOMPOSITION} | {"dataset": "digits", "model": "resnet18", "depth": 18, "attack_family": "fgm linf"}]
    )
    tables = {
        "experiments.csv": experiments_table(cells),
        "trash.csv": trash,
        "depth_decomposition.csv": depths,
        "trash_summary.csv": trash_summary(trash),
        "robustness.csv": robustness,
        "curves.csv": curves_table(cells),
        "evp_tau.csv": evp_tau_table(cells),
        "evp_convergence.csv": evp_convergence_table(cells),
        "auc_table.csv": auc_table(robustness),
        "brittle.csv": brittle_table(cells),
        "eps_survival.csv": eps_survival_tables(cells)[0],
        "eps_survival_curves.csv": eps_survival_tables(cells)[1],
        "tau_table.csv": pd.DataFrame(
            {"n_classes": [2, 10, 10, 10], "tau": [0.75, 0.25, 0.25, 0.25], "w": 0.5, "source": ["001 Table I", "001 Table I", "digits", "mnist"]}
        ),
        "survival/aft_comparison.csv": pd.DataFrame({"fitter": ["weibull", "cox"], "AIC": [123.456789, 130.1], "selected": [True, False]}),
        "validity.csv": validity_table(),
        **strength_tables(experiments_table(cells)),
    }
    for name, table in tables.items():
        (reports / name).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(reports / name, index=False)
    (reports / "metrics.json").write_text(
        json.dumps(
            {
                "trash_adv_median": 0.0179831,
                "evp_mean": 0.285,
                "survival_model": "weibull",
                "brittle_spearman": {"digits": {"rho": -0.81234, "p": 0.04}},
                "brittle_spearman_per_seed": {"0": {"rho": -0.5, "p": 0.3, "n": 6}},
                "validity_flags": {name: {"tripped": int(name == "randomised"), "checked": 2} for name in schema.VALIDITY_FLAGS},
            }
        )
    )
    findings_table().to_csv(reports / "findings.csv", index=False)
    (reports / "cards").mkdir()
    card = {
        "train_hash": "tdi18none0",
        "training": {"dataset": "digits", "model": "resnet18", "depth": 18, "seed": 0},
        "model_cells": [{"defence": {"defence": "conf", "defence_value": 0.5}}, {"defence": {"defence": "none"}}],
    }
    (reports / "cards" / "tdi18none0.json").write_text(json.dumps(card))
    for name in ("survival/calibration.png", "survival/coefficients/weibull.png"):
        image = np.random.default_rng(0).uniform(size=(40, 60, 3))
        (reports / name).parent.mkdir(parents=True, exist_ok=True)
        mpimg.imsave(reports / name, image)


def validity_table() -> pd.DataFrame:
    """Two model cells in aggregate's validity.csv schema, one tripping the repeated-query flag."""
    rows = []
    for defence, noisy in (("none", False), ("gauss_out", True)):
        row = {"model_hash": f"m{defence}", "dataset": "digits", "model": "resnet18", "seed": 0, "defence": defence, "degenerate": False}
        row["flags"] = "randomised" if noisy else ""
        for name in schema.VALIDITY_FLAGS:
            tripped = noisy and name == "randomised"
            row[name], row[f"{name}_detail"] = tripped, "12% of samples change label over 5 queries; evaluate with EOT" if tripped else "clean"
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=schema.VALIDITY)


def findings_table() -> pd.DataFrame:
    """One finding per verdict, in aggregate's findings.csv schema."""
    rows = [
        (
            "003_trash_above_one_fgm",
            "003",
            "Breaking an undefended model with FGM costs less than training it: TRASH > 1.",
            "geometric mean of TRASH",
            12,
            12.59,
            10.89,
            14.28,
            np.nan,
            "holds",
            "geometric mean TRASH 12.6 over 12 cells",
        ),
        (
            "002_brittle_negative",
            "002",
            "The brittle-score correlates negatively with robust accuracy.",
            "Spearman rho of brittle_score and robust_acc",
            60,
            -0.171,
            np.nan,
            np.nan,
            0.19,
            "inconclusive",
            "pooled rho -0.171",
        ),
        (
            "001_adv_train_raises_evp",
            "001",
            "Adversarial training raises EVP.",
            "paired bootstrap",
            12,
            -0.2,
            -0.3,
            -0.1,
            np.nan,
            "contradicted",
            "mean difference -0.2",
        ),
        (
            "004_pretraining_effect",
            "004",
            "Pretraining on another data set does not make models more robust.",
            "paired bootstrap of R(pretrained) - R(from scratch)",
            0,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            "not testable",
            "needs pretrained cells: +train.pretrained_on.<data>=[null,<other data>]",
        ),
    ]
    columns = ["id", "paper", "claim", "test", "n", "value", "lo", "hi", "p", "verdict", "detail"]
    return pd.DataFrame(rows, columns=columns).assign(clock=["flops", "", "", ""])  # TRASH's finding is about time


# Each figure's drawing function and the module of trashfire.report.figures that holds it
DRAWINGS = {
    "accuracy_figure": "accuracy",
    "trash_figure": "trash",
    "evp_tau_figure": "evp",
    "evp_convergence_figure": "evp",
    "curves_figure": "curves",
    "brittle_figure": "brittle",
    "eps_survival_figure": "eps_survival",
    "eps_survival_scatter": "eps_survival",
    "queries_figure": "attacks",
}


def only_draw(monkeypatch, *kept: str) -> None:
    """Stub the figures a test is not about: drawing them is most of a run's time."""
    for name, module in DRAWINGS.items():
        if name not in kept:
            monkeypatch.setattr(f"trashfire.report.figures.{module}.{name}", lambda *args: [])


def cfg_for(tmp_path, *extra: str):
    return validate(compose(tiny_overrides(tmp_path, *extra), conf=ROOT / "conf"))


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("figures")
    cfg = cfg_for(tmp_path, "report.formats=[png,pdf]")  # the default's formats
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    return cfg, reports, figures.run(cfg)


def test_every_figure_is_written_as_png_and_pdf(drawn):
    _, reports, written = drawn
    for stem in STEMS:
        png, pdf = reports / "figures" / f"{stem}.png", reports / "figures" / f"{stem}.pdf"
        assert png in written and pdf in written, stem
        height, width, _ = mpimg.imread(png).shape
        assert height > 300 and width > 500, (stem, height, width)
        assert pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 5000, stem
    assert reports / "report.html" in written


def test_report_is_self_contained_and_holds_every_figure(drawn):
    _, reports, _ = drawn
    page = (reports / "report.html").read_text()
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == len(STEMS) + 2  # plus the two survival images
    outside = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)  # base64 may spell "http" by chance
    for external in ("http", 'src="/', "url(", "<link", "<script src", "@import", "fetch(", "XMLHttpRequest", "import("):
        assert external not in outside, external
    assert re.findall(r"<script[^>]*>", page) == ["<script>"]  # the tables' script, inline; none here has JSON rows
    for text in (
        "Headline metrics",
        "0.01798",
        "τ(K)",
        "3 [2.7, 3.3]",
        "0.7 ± 0",
        "12.5",
        "weibull",
        "123.5",
        "cards/tdi18none0.json",
        "none, conf",
        "brittle_spearman · digits",
        "ρ = -0.812",
        "Validity flags",
        "1 of 2",
        "randomised: 12% of samples change label over 5 queries; evaluate with EOT",
        "f(eps0) = 0",
        "How strong are the attacks?",
        "0.900",  # PGD's mean optimality, ranked first
        "robust accuracy read from the per-sample minimal eps equals the cell",
    ):
        assert text in page, text
    assert "not computed" not in page


def test_wilson_interval_matches_hand_computed_values():
    assert summaries.wilson_interval(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert summaries.wilson_interval(0, 20) == pytest.approx((0.0, 0.1611), abs=1e-4)
    pooled, lo, hi = summaries.pooled_accuracy(pd.Series([0.5, 1.0]), pd.Series([10, 10]))
    assert (pooled, lo, hi) == pytest.approx((0.75, *summaries.wilson_interval(15, 20)))


def test_cell_label_names_model_defence_and_epochs():
    row = {"model": "resnet18", "defence": "conf", "defence_value": 0.5, "epochs": 1, "pretrained_on": ""}
    assert formatting.cell_label(row) == "resnet18 · conf 0.5 · 1 ep"
    assert formatting.cell_label(row | {"defence": "none", "pretrained_on": "mnist"}) == "resnet18 · no defence · 1 ep · from mnist"


def test_missing_brittle_scores_are_reported_as_not_computed(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    (reports / "brittle.csv").unlink()
    shutil.rmtree(reports / "cards")
    only_draw(monkeypatch, "brittle_figure")
    written = figures.run(cfg_for(tmp_path))
    assert not (reports / "figures" / "brittle_vs_robust_acc.png").exists()
    assert written == [reports / "report.html"]
    page = (reports / "report.html").read_text()
    assert "not computed: brittle.csv not found" in page
    assert "not computed: no model cards" in page


def test_a_brittle_table_without_records_skips_its_figure(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    pd.DataFrame().to_csv(reports / "brittle.csv", index=False)  # what aggregate writes with no brittle records
    only_draw(monkeypatch, "brittle_figure")
    figures.run(cfg_for(tmp_path))
    assert "not computed: brittle.csv has no" in (reports / "report.html").read_text()


def test_an_empty_eps_table_skips_its_figures(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    for name in ("curves.csv", "evp_tau.csv", "evp_convergence.csv"):
        table = pd.read_csv(reports / name)
        table.iloc[:0].to_csv(reports / name, index=False)
    only_draw(monkeypatch, "evp_tau_figure", "evp_convergence_figure", "curves_figure")
    figures.run(cfg_for(tmp_path))
    assert not (reports / "figures" / "evp_vs_tau.png").exists()
    assert "not computed: curves.csv has no rows" in (reports / "report.html").read_text()


def test_a_missing_trash_table_names_the_file_and_the_stage(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    (reports / "trash.csv").unlink()
    with pytest.raises(DataError, match=r"trash\.csv not found; run `dvc repro aggregate` first"):
        figures.run(cfg_for(tmp_path))


def test_the_figures_command_exits_with_one_line_when_a_table_is_missing(tmp_path, capsys):
    cfg = cfg_for(tmp_path)
    (tmp_path / "reports").mkdir()
    params = tmp_path / "params.yaml"
    params.write_text(OmegaConf.to_yaml(cfg))
    with pytest.raises(SystemExit) as exit_info:
        figures.main(["--params", str(params)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "experiments.csv not found" in error


def test_crowded_panels_keep_the_first_model_and_say_so():
    cells = pd.DataFrame(
        [
            {
                "dataset": "digits",
                "pretrained_on": "",
                "model": model,
                "depth": depth,
                "epochs": 1,
                "lr": 0.05,
                "defence": "conf",
                "defence_param": "confidence",
                "defence_value": value,
                "seed": seed,
            }
            for model, depth in (("resnet34", 34), ("resnet18", 18))
            for value in range(7)
            for seed in (0, 1)
        ]
    )
    lines, note = capped_lines(cells)
    assert len(lines) == 7 and set(lines["model"]) == {"resnet18"}
    assert note == "7 of 14 cells shown: resnet18 · 1 ep"
    few, none_noted = capped_lines(cells[cells["defence_value"] < 3])
    assert len(few) == 6 and none_noted == ""


def cell_texts(table: sections.Table) -> str:
    """Every cell of a report table, one per line."""
    return "\n".join(text for row in table.rows for text, _ in row)


def test_one_seed_intervals_and_sds_print_n_a_never_an_interval():
    labels = {
        "dataset": "digits",
        "pretrained_on": np.nan,
        "model": "resnet18",
        "depth": 18,
        "epochs": 1,
        "lr": 0.05,
        "defence": "none",
        "defence_value": 0,
        "attack_family": "fgm linf",
    }
    summary = pd.DataFrame(
        [
            labels
            | {
                "n_seeds": 1,
                "trash_adv_mean": 2.0,
                "trash_adv_lo": np.nan,
                "trash_adv_hi": np.nan,
                "trash_ben_mean": 3.0,
                "trash_ben_lo": np.nan,
                "trash_ben_hi": np.nan,
                "f_ben_mean": 1.0,
                "f_adv_mean": 2.0,
            },
            labels
            | {
                "epochs": 2,
                "n_seeds": 3,
                "trash_adv_mean": 2.0,
                "trash_adv_lo": 1.5,
                "trash_adv_hi": 2.5,
                "trash_ben_mean": 3.0,
                "trash_ben_lo": 2.0,
                "trash_ben_hi": 4.0,
                "f_ben_mean": 1.0,
                "f_adv_mean": 2.0,
            },
        ]
    )
    shown = cell_texts(sections.trash_summary_table(summary))
    assert shown.count("n/a (1 seed)") == 2 and "2 [1.5, 2.5]" in shown and "[2, 2]" not in shown
    auc = pd.DataFrame(
        [
            labels | {"n_seeds": 1, "R_mean": 0.7, "R_sd": np.nan, "S_mean": 0.3, "S_sd": np.nan},
            labels | {"epochs": 2, "n_seeds": 2, "R_mean": 0.7, "R_sd": 0.1, "S_mean": 0.3, "S_sd": 0.1},
        ]
    )
    shown = cell_texts(sections.auc_table(auc))
    assert shown.count("± n/a (1 seed)") == 2 and "0.7 ± 0.1" in shown


def test_crowded_panels_keep_the_richest_defence_comparison_not_the_first_name():
    """'cifar_resnet14' sorts before 'cifar_resnet8'; the panel shows the model with every defence."""

    def cells(model, defences, epochs):
        return [
            {
                "dataset": "digits",
                "pretrained_on": "",
                "model": model,
                "depth": int(model[12:]),
                "epochs": epochs,
                "lr": 0.1,
                "defence": d,
                "defence_param": "",
                "defence_value": 0.0,
                "seed": 0,
            }
            for d in defences
        ]

    table = pd.DataFrame(
        cells("cifar_resnet14", ["none", "conf", "fsq", "gauss_out"], 10)
        + cells("cifar_resnet8", ["none", "conf", "fsq", "gauss_out", "adv_train", "gauss_in"], 6)
        + cells("cifar_resnet8", ["none", "conf", "fsq", "gauss_out", "adv_train", "gauss_in"], 10)
    )
    lines, note = capped_lines(table)
    assert set(lines["model"]) == {"cifar_resnet8"} and set(lines["epochs"]) == {10} and "adv_train" in set(lines["defence"])
    assert note == "6 of 16 cells shown: cifar_resnet8 · 10 ep"


def test_with_a_forked_worker_the_figures_and_the_report_are_those_of_one_process(tmp_path, monkeypatch):
    """At a paper's size survival in eps's curves (the largest table) are read and drawn by a
    forked worker: the same figures and report.html, byte for byte (PNG; a PDF carries its
    time), in the same order, and that figure is drawn in another process than the stage's."""
    import os

    from trashfire.core import parallel
    from trashfire.report import figures as drawing
    from trashfire.report.figures import eps_survival

    cfg = cfg_for(tmp_path, "report.formats=[png]")
    reports = tmp_path / "reports"
    reports.mkdir()
    write_reports(reports)
    drawn_by, draw = tmp_path / "drawn_by", eps_survival.eps_survival_figure

    def recorded(*args):
        with open(drawn_by, "a") as out:
            out.write(f"{os.getpid()}\n")
        return draw(*args)

    monkeypatch.setattr(eps_survival, "eps_survival_figure", recorded)
    monkeypatch.setattr(parallel, "torch_loaded", lambda: False)  # this process has loaded torch (other tests); the stage's has not
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    runs = {}
    for fork_cells in (10**9, 0):  # one process, then a worker beside it
        monkeypatch.setattr(drawing, "FORK_CELLS", fork_cells)
        shutil.rmtree(reports / "figures", ignore_errors=True)  # each run draws every figure afresh
        (reports / "report.html").unlink(missing_ok=True)
        written = figures.run(cfg)
        runs[fork_cells] = [path.name for path in written], {path.name: path.read_bytes() for path in written}
    assert runs[0] == runs[10**9] and "eps_survival_curves.png" in runs[0][1]
    alone, worker = drawn_by.read_text().split()
    assert alone == str(os.getpid()) != worker
