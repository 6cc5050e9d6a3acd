"""Stage `figures`: figures (PNG and PDF) and a single self-contained HTML report, drawn
from the recorded tables only, so a plotting change never re-runs an experiment."""

from __future__ import annotations

import base64
import html
import json
import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from omegaconf import DictConfig

from trashfire.cli import run_cli
from trashfire.records import atomic_path
from trashfire.timing import read_experiments

log = logging.getLogger("trashfire.figures")  # not __name__: it is __main__ under python -m


def save_figure(fig, folder: Path, stem: str) -> list[Path]:
    paths = []
    for suffix in ("png", "pdf"):
        path = folder / f"{stem}.{suffix}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix, dpi=130, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _boxes(ax, groups: dict[str, pd.Series], ylabel: str, title: str) -> None:
    labels = list(groups)
    ax.boxplot([groups[k].dropna() for k in labels], showmeans=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)


def accuracy_figure(experiments: pd.DataFrame, folder: Path) -> list[Path]:
    """TRASHFIRE Fig. 1: benign accuracy by defence, adversarial accuracy by defence and by attack."""
    cells = experiments.assign(attack_family=experiments["attack"] + " " + experiments["norm"].map(lambda n: f"l{n}"))
    benign = cells.drop_duplicates("model_hash")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.5), sharey=True)
    _boxes(axes[0], {k: g["acc_ben"] for k, g in benign.groupby("defence")}, "accuracy", "benign, by defence")
    _boxes(axes[1], {k: g["acc_adv"] for k, g in cells.groupby("defence")}, "accuracy", "adversarial, by defence")
    _boxes(axes[2], {k: g["acc_adv"] for k, g in cells.groupby("attack_family")}, "accuracy", "adversarial, by attack")
    axes[0].set_ylim(-0.02, 1.02)
    fig.suptitle("Benign and adversarial accuracy (boxes over cells; triangle = mean)")
    return save_figure(fig, folder, "accuracy_by_attack_and_defence")


def trash_figure(trash: pd.DataFrame, folder: Path) -> list[Path]:
    """TRASHFIRE Fig. 4: TRASH by model depth, benign and adversarial, log axis, line at 1."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, column, title in ((axes[0], "trash_ben", "benign"), (axes[1], "trash_adv", "adversarial")):
        _boxes(ax, {f"ResNet-{d}": g[column] for d, g in trash.groupby("depth")}, "TRASH = t_train / E[T]", title)
        ax.set_yscale("log")
        ax.axhline(1.0, color="tab:red", ls="--", lw=1, label="1: as cheap to break as to train")
    axes[1].legend(loc="best", fontsize=8)
    fig.suptitle("TRASH score by model depth (> 1: cheaper to attack than to train)")
    return save_figure(fig, folder, "trash_by_depth")


def _embed(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(path.name)}</figcaption></figure>'


def report_html(reports: Path, images: list[Path]) -> Path:
    """One offline page: headline metrics, the survival model comparison and every figure."""
    headline = json.loads((reports / "metrics.json").read_text())
    comparison = pd.read_csv(reports / "survival" / "aft_comparison.csv")
    robustness = pd.read_csv(reports / "robustness.csv")
    summary = robustness.groupby(["model", "defence", "attack", "norm"])[["evp", "auc_R"]].mean().reset_index()
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{v:.4g}</td></tr>" if isinstance(v, float) else f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in headline.items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>trashfire report</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}img{{max-width:100%}}</style></head><body>
<h1>trashfire report</h1>
<h2>Headline metrics</h2><table>{rows}</table>
<h2>Survival models (TRASHFIRE Table I)</h2>{comparison.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="")}
<h2>EVP and normalised AUC R (mean over cells)</h2>{summary.to_html(index=False, float_format=lambda v: f"{v:.3f}")}
<h2>Figures</h2>{"".join(_embed(p) for p in images)}
</body></html>"""
    path = reports / "report.html"
    with atomic_path(path) as tmp:
        tmp.write_text(page)
    return path


def run(cfg: DictConfig) -> list[Path]:
    reports = Path(cfg.paths.reports)
    folder = reports / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    experiments = read_experiments(reports)
    trash = pd.read_csv(reports / "trash.csv")
    written = accuracy_figure(experiments, folder) + trash_figure(trash, folder)
    survival_figures = sorted((reports / "survival").glob("*.png"))
    images = [p for p in written if p.suffix == ".png"] + survival_figures
    written.append(report_html(reports, images))
    log.info("wrote %s", ", ".join(str(p) for p in written))
    return written


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.figures", __doc__, run, argv)


if __name__ == "__main__":
    main()
