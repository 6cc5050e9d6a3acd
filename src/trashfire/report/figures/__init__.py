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
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before any figure module imports pyplot

from omegaconf import DictConfig

from trashfire.core.parallel import FORK_CELLS, beside, resolve_workers
from trashfire.core.records import dead_temps_removed
from trashfire.core.stage import Artefacts
from trashfire.report import page
from trashfire.report.figures import accuracy, attacks, brittle, curves, eps_survival, evp, trash
from trashfire.report.figures.common import FigureFolder, Skipped
from trashfire.report.inputs import read_metrics, read_named, read_tables

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


def draw_figures(tables: dict, folder: FigureFolder, stems: Iterable[str] | None = None) -> tuple[dict[str, list[Path]], dict[str, str]]:
    """The paper figures `stems` (default: every one), the files of each by its stem; one with
    nothing to draw is logged and its reason kept for the report."""
    written, skipped = {}, {}
    for stem, draw in drawings(tables, folder).items():
        if stems is not None and stem not in stems:
            continue
        try:
            written[stem] = draw()
        except Skipped as reason:
            log.info("skipped %s: %s", stem, reason)
            skipped[stem] = str(reason)
    return written, skipped


# drawn by a forked worker from the largest table, which it reads itself, while this process
# reads the others and draws the rest (at 10^7 samples survival in eps's curves are 0.5 GB of
# CSV: reading and drawing them took 13 s of the stage's 30 on one core)
AWAY = {"eps_survival_curves": ("eps_survival_curves",)}


def draw_all(artefacts: Artefacts, folder: FigureFolder, workers: int) -> tuple[dict, list[Path], dict[str, str]]:
    """The tables read and every figure drawn (AWAY's beside the rest where `workers` > 1):
    the tables, the files in drawing order, the reasons of those skipped."""
    away_tables = [name for names in AWAY.values() for name in names]
    tables = read_tables(artefacts, leave=away_tables)  # every missing input is reported before anything is drawn
    read_metrics(artefacts)
    order = list(drawings(tables, folder))
    there, here = beside(
        lambda: draw_figures(tables | read_named(artefacts, away_tables), folder, AWAY),
        lambda: draw_figures(tables, folder, [stem for stem in order if stem not in AWAY]),
        workers,
        log.name,
    )
    written, skipped = there[0] | here[0], there[1] | here[1]
    return tables, [path for stem in order for path in written.get(stem, [])], {stem: skipped[stem] for stem in order if stem in skipped}


def workers_for(artefacts: Artefacts) -> int:
    """Processes for the figures: forked ones where the run has FORK_CELLS attack cells or more
    (counted by experiments.csv's lines; below, a fork costs more than it saves)."""
    path = artefacts.input("experiments.csv")
    if not path.is_file():
        return 1
    with open(path, "rb") as lines:
        large = sum(1 for _ in zip(range(FORK_CELLS + 1), lines)) > FORK_CELLS
    return resolve_workers("auto", "cpu") if large else 1


def survival_images(artefacts: Artefacts) -> list[Path]:
    folder = artefacts.input("survival")
    return sorted(folder.glob("*.png")) + sorted((folder / "coefficients").glob("*.png"))


def draw_report(cfg: DictConfig, artefacts: Artefacts) -> list[Path]:
    """The stage's work: every figure, then report.html with them and the survival stage's."""
    formats = tuple(cfg.report.formats)
    folder = FigureFolder(artefacts.output("figures"), formats)
    folder.path.mkdir(parents=True, exist_ok=True)
    with dead_temps_removed(folder.path):  # a killed run's, or a killed worker's, half-written figures
        tables, written, skipped = draw_all(artefacts, folder, workers_for(artefacts))
    drawn = [p for p in written if p.suffix == ".png"]
    written.append(page.report_html(artefacts, drawn + survival_images(artefacts), skipped, tables))
    log.info("wrote %d figures (%s) to %s and %s", len(drawn), ", ".join(formats), folder.path, written[-1])
    return written
