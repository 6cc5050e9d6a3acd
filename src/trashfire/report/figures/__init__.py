"""Stage `figures`: every paper figure (in `report.formats`: PNG, and PDF by default) and a
single self-contained HTML report, drawn from the tables `aggregate`, `timing` and `survival`
recorded, so that a plotting change never re-runs an experiment.

The report (reports/report.html, trashfire.report.page) puts what a reader needs first: the
papers' claims tested on this run (findings.csv) with their verdicts, the headline metrics
each with a plain sentence of what it means, the run's size and its degenerate cells, the
figures with how to read them, and the long tables folded away.

Figures (reports/figures/), a module each: accuracy by attack and defence (accuracy) and TRASH
by depth and defence (trash) (TRASHFIRE Fig. 1, 4), EVP against the viability threshold and
against the number of eps intervals (evp; EVP paper Fig. 7, 8), accuracy and normalised
accuracy against eps (curves; normalised-AUC paper Fig. 2, 4), brittle-score against robust
accuracy (brittle; brittle-score paper Fig. 4), and survival in eps (eps_survival):
Kaplan-Meier curves of the samples still standing against eps and their area against EVP and R,
and robust accuracy against the attack's work (attacks; AttackBench's accuracy against queries).
A figure with nothing to draw is skipped, and the report says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before any figure module imports pyplot

from omegaconf import DictConfig

from trashfire.core.stage import Artefacts
from trashfire.report import page
from trashfire.report.figures import accuracy, attacks, brittle, curves, eps_survival, evp, trash
from trashfire.report.figures.common import FigureFolder, Skipped
from trashfire.report.inputs import read_metrics, read_tables

log = logging.getLogger(__name__)


def drawings(tables: dict, folder: FigureFolder) -> dict[str, Callable[[], list[Path]]]:
    """Every paper figure by its file stem, in the order they are drawn."""
    return {
        "accuracy_by_attack_and_defence": lambda: accuracy.accuracy_figure(tables["experiments"], folder),
        "trash_by_depth_and_defence": lambda: trash.trash_figure(tables["trash"], folder),
        "evp_vs_tau": lambda: evp.evp_tau_figure(tables["evp_tau"], tables["tau_table"], folder),
        "evp_convergence": lambda: evp.evp_convergence_figure(tables["evp_convergence"], folder),
        "accuracy_eps_curves": lambda: curves.curves_figure(tables["curves"], tables["robustness"], folder),
        "brittle_vs_robust_acc": lambda: brittle.brittle_figure(tables["brittle"], folder),
        "eps_survival_curves": lambda: eps_survival.eps_survival_figure(tables["eps_survival_curves"], tables["eps_survival"], folder),
        "eps_survival_vs_evp_r": lambda: eps_survival.eps_survival_scatter(tables["eps_survival"], tables["robustness"], folder),
        "accuracy_vs_queries": lambda: attacks.queries_figure(tables["query_curves"], tables["experiments"], folder),
    }


def draw_figures(tables: dict, folder: FigureFolder) -> tuple[list[Path], dict[str, str]]:
    """Every paper figure; one with nothing to draw is logged and its reason kept for the report."""
    written, skipped = [], {}
    for stem, draw in drawings(tables, folder).items():
        try:
            written += draw()
        except Skipped as reason:
            log.info("skipped %s: %s", stem, reason)
            skipped[stem] = str(reason)
    return written, skipped


def survival_images(artefacts: Artefacts) -> list[Path]:
    folder = artefacts.input("survival")
    return sorted(folder.glob("*.png")) + sorted((folder / "coefficients").glob("*.png"))


def draw_report(cfg: DictConfig, artefacts: Artefacts) -> list[Path]:
    """The stage's work: every figure, then report.html with them and the survival stage's."""
    formats = tuple(cfg.report.formats)
    folder = FigureFolder(artefacts.output("figures"), formats)
    folder.path.mkdir(parents=True, exist_ok=True)
    tables = read_tables(artefacts)  # every missing input is reported before anything is drawn
    read_metrics(artefacts)
    written, skipped = draw_figures(tables, folder)
    drawn = [p for p in written if p.suffix == ".png"]
    written.append(page.report_html(artefacts, drawn + survival_images(artefacts), skipped, tables))
    log.info("wrote %d figures (%s) to %s and %s", len(drawn), ", ".join(formats), folder.path, written[-1])
    return written
