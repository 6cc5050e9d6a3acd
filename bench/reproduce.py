"""The papers' studies on real MNIST: run a reproduction preset, keep what it found, and write
docs/reproduction.md from every kept run.

    python bench/reproduce.py run repro_004_mnist --mnist-root ../shared/data/mnist [override ...]
    python bench/reproduce.py run default            # the digits column of the claims table
    python bench/reproduce.py page [--check]         # docs/reproduction.md from the kept runs

`run` computes every cell afresh (`dvc repro` in a scratch copy of the project, as the
benchmark suite does), then keeps
- bench/results/reproductions/<preset>.json: what the page needs (R per seed and epoch, the
  brittle-scores per sample, benign accuracies, the findings), the overrides, the machine, the
  commit and the wall time;
- bench/results/<date>-<cpus>cpu-<preset>.json: the timing alone, for the benchmark page;
and regenerates both pages. `page` only regenerates docs/reproduction.md; `--check` exits 1
when the checked-in page is not what the kept runs give (tests/pipeline/test_docs.py).

Every comparison is computed here from the kept runs; only the papers' published values and
the setup each preset changes are written in this file (PAPER_004_TABLE_1, SETUPS).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference  # noqa: E402
from suite import machine, scratch_project, timed_repro  # noqa: E402  (bench/ is scripts, not a package)
from trashfire.core.records import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "bench" / "results" / "reproductions"
ABLATION_004 = KEPT / "ablation_004"  # 004's arms with another LeNet: ablation_004/<model>.json
PAGE = ROOT / "docs" / "reproduction.md"
PRESETS = ("repro_004_mnist", "repro_002_mnist", "repro_003_mnist")
DIGITS = "default"
VIABLE_ACCURACY = 0.97  # the floor: no cell at chance, none below 0.97 unless the paper's setup says so

# 004, Table 1: MNIST LeNet, FGSM, R over [0, 0.3]; epoch -> (mean, SD) over 20 seeds
PAPER_004_TABLE_1 = {
    1: (0.438451, 0.020373),
    10: (0.499361, 0.023713),
    25: (0.539882, 0.025632),
    50: (0.543602, 0.019689),
    150: (0.549709, 0.013361),
    300: (0.520547, 0.010607),
}
PAPER_004_SEEDS = 20
LENETS = ("lenet5", "lenet5_padded")
ARCHITECTURES_002 = ("mlp2", "cnn3", "cnn5")

# what each preset sets up differently from its paper (the presets' own comments say why)
SETUPS = {
    "repro_004_mnist": [
        "5 seeds, not 20, each also a permutation of the pooled 80/20 split (004: the official 60k/10k split, one permutation); R on 5,000 held-out images, not 10,000",
        "epochs 1, 10 and 25 of one run per seed (50 would double the 2-core run); the lr stays 0.01, which is 004's schedule up to its decay at epoch 150",
        "optimiser, momentum, weight decay, batch, input size (3x32x32), FGSM's eps grid and R's interval are 004's",
    ],
    "repro_002_mnist": [
        "Adam at 002's lr 1e-3 and batch 32 (002 names no optimiser; 1e-3 is Adam's default), 2 epochs (MLP: 10); 002 states no epochs",
        "40,000 of MNIST's 70,000 images, one 80/20 permutation; PGD training 7 steps of 2.5 eps / 7 from a random start (002 states no steps)",
        "brittle-score on n = 200 held-out samples with k = 1,000 LIME samples (002: n = 1,000); robust accuracy under PGD-10 at 8/255 on 500 samples",
    ],
    "repro_003_mnist": [
        "MNIST only (003: also CIFAR-10 and CIFAR-100, which cannot be downloaded here); the default's CIFAR-style ResNets of depth 8, 14 and 20 (003: ResNet-18 to -152)",
        "3 seeds (003: 10); reduced data, epochs and black-box budgets to fit 2 CPU cores (the preset's comment lists them)",
    ],
}


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int


def mean_interval(values) -> Interval:
    """The mean and its two-sided 95% t interval (NaN bounds for one value)."""
    x = np.asarray(values, float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def welch_difference(ours, paper_mean: float, paper_sd: float, paper_n: int) -> Interval:
    """ours' mean minus the paper's, with the 95% Welch interval of that difference: the
    paper's mean is itself an estimate over paper_n seeds with SD paper_sd."""
    x = np.asarray(ours, float)
    n = len(x)
    if n < 2:
        return Interval(float(x.mean()) - paper_mean if n else math.nan, math.nan, math.nan, n)
    v_ours, v_paper = x.var(ddof=1) / n, paper_sd**2 / paper_n
    se = math.sqrt(v_ours + v_paper)
    df = (v_ours + v_paper) ** 2 / (v_ours**2 / (n - 1) + v_paper**2 / (paper_n - 1))
    diff = float(x.mean()) - paper_mean
    half = stats.t.ppf(0.975, df) * se
    return Interval(diff, diff - half, diff + half, n)


def difference_verdict(diff: Interval) -> str:
    if not np.isfinite(diff.lo):
        return "not comparable: fewer than 2 seeds"
    if diff.lo <= 0 <= diff.hi:
        return "agrees"
    return f"differs: ours {'higher' if diff.mean > 0 else 'lower'} by {abs(diff.mean):.3f}"


def sign_verdict(interval: Interval, expected_sign: int) -> str:
    """A paper that states a direction only: agrees when the interval lies on its side of 0."""
    if not np.isfinite(interval.lo):
        return "not comparable: no interval"
    if interval.lo <= 0 <= interval.hi:
        return "inconclusive: the interval holds 0"
    return "agrees" if np.sign(interval.mean) == expected_sign else "differs: the opposite direction"


# ---------------------------------------------------------------------------------------------
# what a run keeps


def summarise(reports: Path) -> dict:
    """The page's inputs from one run's reports/: small, and in git."""
    robustness = pd.read_csv(reports / "robustness.csv")
    r_columns = ["dataset", "model", "depth", "epochs", "defence", "defence_value", "attack_family", "seed", "acc_ben", "auc_R", "evp", "degenerate"]
    kept: dict = {"r": records(robustness[[c for c in r_columns if c in robustness]])}
    brittle_path = reports / "brittle.csv"
    if brittle_path.exists():
        brittle = pd.read_csv(brittle_path)
        keep = ["model", "defence", "defence_value", "epochs", "seed", "brittle_score", "robust_acc", "n_samples", "lime_samples", "image_scores", "positions"]
        rows = records(brittle[[c for c in keep if c in brittle]])
        for row in rows:
            for key in ("image_scores", "positions"):
                row[key] = json.loads(row[key]) if isinstance(row.get(key), str) else row.get(key)
        kept["brittle"] = rows
    findings = pd.read_csv(reports / "findings.csv")
    columns = ["id", "paper", "claim", "verdict", "value", "lo", "hi", "detail", "clock", "n", "units", "p", "p_adjusted", "smallest_effect", "detectable", "units_to_settle"]
    kept["findings"] = records(findings[[c for c in columns if c in findings]])
    experiments = pd.read_csv(reports / "experiments.csv")
    accuracy = experiments.drop_duplicates("model_hash")
    kept["benign_accuracy"] = {
        "min": float(accuracy["acc_ben"].min()),
        "cells": int(len(accuracy)),
        "below": records(accuracy.loc[accuracy["acc_ben"] < VIABLE_ACCURACY, ["model", "epochs", "defence", "seed", "acc_ben"]]),
    }
    return json.loads(json.dumps(kept, default=_plain))


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts, NaN as None (strict JSON)."""
    return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))


def fgsm_unclipped(work: Path) -> list[dict]:
    """R of each LeNet checkpoint of a repro_004_mnist run under FGSM with and without clipping
    to the [0, 1] pixel range: 004 does not say whether its adversarial images were clipped,
    and clipping weakens FGSM on MNIST, whose pixels sit at 0 and 1. Both are the pipeline's
    R (trashfire.metrics.robustness_auc over the run's metrics.auc interval) on the attack
    subset, so the two columns differ only in the clipping."""
    import os

    import torch

    from trashfire.core.config import load_params
    from trashfire.core.grid import training_cells
    from trashfire.data.datasets import load_split
    from trashfire.metrics import robustness_auc
    from trashfire.models import training

    here, rows = Path.cwd(), []
    os.chdir(work)  # the run's relative paths
    try:
        cfg = load_params(work / "params.yaml")
        grid = [0.0, *cfg.attack.fgm["values"]]
        torch.set_num_threads(1)
        for cell in training_cells(cfg):
            split = load_split(Path(cfg.paths.processed), cfg, cell.dataset, cell.seed)
            model = training.load_weights(Path(cfg.paths.models), cell, split).eval()
            x, y = split.x_attack, split.y_attack
            mean, std = (torch.as_tensor(np.asarray(v, dtype=np.float32))[None, :, None, None] for v in (split.mean, split.std))
            low, high = (0 - mean) / std, (1 - mean) / std
            probe = x.clone().requires_grad_(True)
            step = torch.autograd.grad(torch.nn.functional.cross_entropy(model(probe), y, reduction="sum"), probe)[0].sign() / std
            r = {}
            with torch.no_grad():
                for clipped in (True, False):
                    accuracy = []
                    for eps in grid:
                        adversarial = x + eps * step
                        adversarial = torch.clamp(adversarial, low, high) if clipped else adversarial
                        accuracy.append(float((model(adversarial).argmax(1) == y).float().mean()))
                    r[clipped] = robustness_auc(grid, accuracy, cfg.metrics.auc.eps0, cfg.metrics.auc.eps1)
            rows.append({"seed": cell.seed, "epochs": cell.epochs, "auc_R_clipped": r[True], "auc_R_unclipped": r[False]})
    finally:
        os.chdir(here)
    return rows


def add_unclipped(work: Path) -> int:
    """fgsm_unclipped of a run that was kept without it; its recomputed clipped R must be the
    kept R of every checkpoint, or the folder is another run's."""
    path = KEPT / "repro_004_mnist.json"
    kept = json.loads(path.read_text())
    rows = fgsm_unclipped(work.resolve())
    pipeline = {(r["seed"], r["epochs"]): r["auc_R"] for r in kept["r"]}
    off = [r for r in rows if abs(r["auc_R_clipped"] - pipeline.get((r["seed"], r["epochs"]), math.inf)) > 1e-6]
    if off:
        print(f"{work} is not the kept run: its R differs at {[(r['seed'], r['epochs']) for r in off]}", file=sys.stderr)
        return 1
    write_json(path, kept | {"fgsm_unclipped": rows})
    return write_page()


def kept_path(preset: str, overrides: list[str]) -> Path:
    """Where a run is kept: the preset's own file, or for 004 with another model (an arm of
    its ablation, e.g. model=[lenet5_padded]) ablation_004/<model>.json."""
    models = [o.split("=", 1)[1].strip("[]") for o in overrides if o.startswith("model=")]
    if preset == "repro_004_mnist" and models and models[0] != "lenet5":
        return ABLATION_004 / f"{models[0]}.json"
    return KEPT / f"{preset}.json"


def run_preset(preset: str, mnist_root: str | None, overrides: list[str], keep_work: bool = False) -> dict:
    args = list(overrides)
    if mnist_root:
        args.append(f"data.mnist.root={Path(mnist_root).resolve()}")
    measured_on = machine()  # before the run: the commit whose code the scratch copy holds
    before = reference.measure()
    work, env = scratch_project(preset, args)
    print(f"{preset}: `dvc repro` in {work}", flush=True)
    try:
        wall, stages, peak = timed_repro(work, env)
    except SystemExit:  # a failed stage: its message is printed; nothing is kept
        if not keep_work:
            shutil.rmtree(work)
        raise
    pipeline = {"experiment": preset, "overrides": overrides, "wall_s": round(wall, 1), "stages_s": stages, "peak_memory_gib": round(peak / 2**30, 3)}
    timed_against = reference.summary(before, reference.measure())
    pipeline["ratio_to_reference"] = reference.ratio(wall, timed_against)
    kept = {"preset": preset, "machine": measured_on, "reference": timed_against, "pipeline": pipeline, **summarise(work / "reports")}
    if preset == "repro_004_mnist":  # after the timing: a check of the gap to 004, not part of the run
        kept["fgsm_unclipped"] = fgsm_unclipped(work)
    write_json(kept_path(preset, overrides), kept)
    timing = {"machine": kept["machine"], "reference": timed_against, "pipeline": pipeline}
    write_json(ROOT / "bench" / "results" / f"{kept['machine']['date'][:10]}-{kept['machine']['cpus']}cpu-{preset}.json", timing)
    line, met = reference.verdict("reproduce", wall, timed_against)
    print(f"{preset}: {pipeline['wall_s']} s, peak {pipeline['peak_memory_gib']} GiB, lowest benign accuracy {kept['benign_accuracy']['min']:.3f}", flush=True)
    print(f"{preset}: {'met' if met else 'MISSED'} {line}", flush=True)
    if keep_work:
        print(f"{preset}: its reports, models and data stay in {work}", flush=True)
    else:
        shutil.rmtree(work)  # gigabytes of prepared data and weights; --keep-work keeps them
    return kept


# ---------------------------------------------------------------------------------------------
# the page


def load_kept(folder: Path = KEPT) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def fmt(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def interval_text(i: Interval, digits: int = 3) -> str:
    if not np.isfinite(i.lo):
        return fmt(i.mean, digits)
    return f"{fmt(i.mean, digits)} [{fmt(i.lo, digits)}, {fmt(i.hi, digits)}]"


def lenet_fgsm(run: dict | None) -> pd.DataFrame:
    """004's Table 1 cells of a run: undefended LeNet under FGSM, one row per seed and epoch."""
    r = pd.DataFrame(run["r"]) if run else pd.DataFrame(columns=["model", "defence", "attack_family", "epochs", "seed", "auc_R", "acc_ben"])
    return r[r["model"].isin(LENETS) & (r["defence"] == "none") & (r["attack_family"] == "fgm linf")]


def table_004(run: dict | None) -> list[str]:
    lines = [
        "| epoch | 004 (mean, SD; 20 seeds) | ours: mean [95% CI] | seeds | lowest benign acc | ours - 004 [95% CI] | verdict | ours, FGSM not clipped to [0, 1]: mean [95% CI], verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    unclipped = pd.DataFrame((run or {}).get("fgsm_unclipped") or [], columns=["seed", "epochs", "auc_R_clipped", "auc_R_unclipped"])
    lenet = lenet_fgsm(run)
    for epoch, (mean, sd) in PAPER_004_TABLE_1.items():
        cells = lenet[lenet["epochs"] == epoch]
        values = cells["auc_R"].dropna()
        if values.empty:
            lines.append(
                f"| {epoch} | {mean:.3f} ({sd:.3f}) | not run | 0 | n/a | n/a | not comparable: epoch {epoch} is beyond the 2-core preset (full size runs it) | |"
            )
            continue
        ours, diff = mean_interval(values), welch_difference(values, mean, sd, PAPER_004_SEEDS)
        accuracy = cells["acc_ben"].min()
        loose = unclipped.loc[unclipped["epochs"] == epoch, "auc_R_unclipped"]
        loose_text = (
            f"{interval_text(mean_interval(loose))}, {difference_verdict(welch_difference(loose, mean, sd, PAPER_004_SEEDS))}" if len(loose) else "not measured"
        )
        lines.append(
            f"| {epoch} | {mean:.3f} ({sd:.3f}) | {interval_text(ours)} | {ours.n} | {fmt(accuracy)} | {interval_text(Interval(diff.mean, diff.lo, diff.hi, diff.n), 3)} | {difference_verdict(diff)} | {loose_text} |"
        )
    return lines


def notes_004(run: dict | None) -> list[str]:
    """What the table's gaps come to: how much of them clipping carries, and the rise over
    epochs beside 004's, each measured on the kept run."""
    if not run:
        return []
    lenet = lenet_fgsm(run).pivot_table(index="seed", columns="epochs", values="auc_R")
    lines = []
    unclipped = pd.DataFrame(run.get("fgsm_unclipped") or [])
    if len(unclipped):
        drop = mean_interval(unclipped["auc_R_clipped"] - unclipped["auc_R_unclipped"])
        agree = [e for e, (m, sd) in PAPER_004_TABLE_1.items() if e in set(unclipped["epochs"])]
        agreeing = [
            e
            for e in agree
            if difference_verdict(welch_difference(unclipped.loc[unclipped["epochs"] == e, "auc_R_unclipped"], *PAPER_004_TABLE_1[e], PAPER_004_SEEDS))
            == "agrees"
        ]
        lines.append(
            f"- Clipping to the pixel range: without it, FGSM lowers our R by {interval_text(drop)} on average over the "
            f"{drop.n} checkpoints, and {len(agreeing)} of the {len(agree)} epochs run agree with 004 "
            f"({', '.join(map(str, agreeing)) or 'none'}). 004 does not say whether it clipped; clipping is what an image attack does here."
        )
    first, last = min(PAPER_004_TABLE_1), max(e for e in PAPER_004_TABLE_1 if e in lenet.columns) if len(lenet.columns) else None
    if last is not None and first in lenet.columns and last != first:
        rise = mean_interval((lenet[last] - lenet[first]).dropna())
        paper = PAPER_004_TABLE_1[last][0] - PAPER_004_TABLE_1[first][0]
        lines.append(f"- The rise from epoch {first} to {last}: ours {interval_text(rise)} (paired over seeds), 004's {paper:+.3f}.")
    lines.append("- Not measured here: 004's official 60k/10k split and its 20 seeds; the full-size overrides below run them.")
    return lines


def paired_gap(normal: dict, robust: dict) -> Interval:
    """robust - normal brittle-score over the held-out samples both scored (the same positions)."""
    a = dict(zip(normal["positions"], normal["image_scores"]))
    b = dict(zip(robust["positions"], robust["image_scores"]))
    shared = sorted(set(a) & set(b))
    return mean_interval([b[p] - a[p] for p in shared])


def table_002(run: dict | None) -> list[str]:
    lines = [
        "| model | seed | brittle-score normal | PGD-trained | robust - normal [95% CI over samples] | relative | robust acc at 8/255 normal / PGD-trained | verdict (002: robust lower) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not run or not run.get("brittle"):
        return lines + ["| all | | | | not run | | | not comparable: no run kept |"]
    brittle = pd.DataFrame(run["brittle"])
    for model in ARCHITECTURES_002:
        for seed, cells in brittle[brittle["model"] == model].groupby("seed"):
            normal, robust = cells[cells["defence"] == "none"], cells[cells["defence"] == "adv_train"]
            if normal.empty or robust.empty:
                continue
            n, r = normal.iloc[0], robust.iloc[0]
            gap = paired_gap(n, r)
            lines.append(
                f"| {model} | {seed} | {fmt(n['brittle_score'], 4)} | {fmt(r['brittle_score'], 4)} | {interval_text(gap, 4)} (n = {gap.n}) | "
                f"{100 * gap.mean / n['brittle_score']:+.1f}% | {fmt(n['robust_acc'])} / {fmt(r['robust_acc'])} | {sign_verdict(gap, -1)} |"
            )
    return lines


OTHER_CLOCK = "@"  # a finding's id on another clock than the run's own (`..._fgm@wall`): the page shows the run's clock


def verdict_cell(finding: dict | None) -> str:
    if finding is None:
        return "not run"
    value = finding.get("value")
    shown = f" ({value:.3g})" if isinstance(value, float) and np.isfinite(value) else ""
    return f"{finding['verdict']}{shown}"


def claims_table(kept: dict[str, dict]) -> list[str]:
    """Each claim's verdict on the digits (the default run) beside its verdict on MNIST (the
    reproduction that can test it; where several can, each is named)."""
    digits = {f["id"]: f for f in kept.get(DIGITS, {}).get("findings", []) if OTHER_CLOCK not in f["id"]}
    mnist: dict[str, list[tuple[str, dict]]] = {}
    claims: dict[str, str] = {}
    for preset in PRESETS:
        for f in kept.get(preset, {}).get("findings", []):
            if OTHER_CLOCK in f["id"]:
                continue
            claims[f["id"]] = f["claim"]
            if f["verdict"] != "not testable":
                mnist.setdefault(f["id"], []).append((preset, f))
    for f in digits.values():
        claims.setdefault(f["id"], f["claim"])
    lines = ["| claim | digits (default) | MNIST | verdicts differ |", "|---|---|---|---|"]
    for id in sorted(claims):
        on_mnist = mnist.get(id, [])
        mnist_text = "; ".join(f"{verdict_cell(f)} ({preset})" for preset, f in on_mnist) or "not testable in any MNIST run"
        d = digits.get(id)
        differ = bool(on_mnist) and d is not None and d["verdict"] != "not testable" and any(f["verdict"] != d["verdict"] for _, f in on_mnist)
        lines.append(f"| `{id}`: {claims[id]} | {verdict_cell(d)} | {mnist_text} | {'**yes**' if differ else ''} |")
    return lines


def timing_table(kept: dict[str, dict]) -> list[str]:
    lines = [
        "| run | wall | reference | wall / reference | stages (s) | peak memory | lowest benign acc | machine | date | commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in (*PRESETS, DIGITS):
        run = kept.get(name)
        if not run:
            lines.append(f"| `{name}` | not run | | | | | | | | |")
            continue
        p, m = run["pipeline"], run["machine"]
        stages = ", ".join(f"{k} {v:g}" for k, v in p["stages_s"].items())
        timed = run.get("reference")
        against = f"{timed['seconds']:.2f} s | {p['wall_s'] / timed['seconds']:.0f}x" if timed else "not measured (before issue 58) | -"
        lines.append(
            f"| `{name}` | {p['wall_s'] / 60:.1f} min | {against} | {stages} | {p['peak_memory_gib']:.2f} GiB | {fmt(run['benign_accuracy']['min'])} | {m['cpus']} CPUs | {m['date'][:10]} | {m.get('commit', 'not recorded')} |"
        )
    return lines


def setup_lines(preset: str, run: dict | None) -> list[str]:
    lines = [f"- {item}" for item in SETUPS.get(preset, [])]
    if run and run["pipeline"].get("overrides"):
        lines.append(f"- run with overrides: `{' '.join(run['pipeline']['overrides'])}`")
    if run and run["benign_accuracy"]["below"]:
        below = ", ".join(f"{c['model']} {c['defence']} epoch {c['epochs']} seed {c['seed']}: {c['acc_ben']:.3f}" for c in run["benign_accuracy"]["below"])
        lines.append(f"- cells below {VIABLE_ACCURACY} benign accuracy: {below}")
    return lines


def full_size(preset: str) -> list[str]:
    """The overrides of a preset's full size, as its header comment gives them (one source)."""
    lines, taking = [], False
    for line in (ROOT / "conf" / "experiment" / f"{preset}.yaml").read_text().splitlines():
        if line.startswith("# Full size"):
            taking = True
            lines.append(line.removeprefix("# ").rstrip(":") + ":")
        elif taking and line.startswith("#   "):
            lines.append("    " + line.removeprefix("#   "))
        elif taking:
            break
    return lines


def full_size_section() -> list[str]:
    out = []
    for preset in PRESETS:
        heading, *overrides = full_size(preset)
        out += [f"- `{preset}`, {heading[0].lower()}{heading[1:]}", "", "    ```text", *[f"    {o.strip()}" for o in overrides], "    ```", ""]
    return out


def render(kept: dict[str, dict]) -> str:
    run004, run002 = kept.get("repro_004_mnist"), kept.get("repro_002_mnist")
    parts = [
        "# Reproduction on real MNIST",
        "",
        "<!-- generated by `python bench/reproduce.py page` from bench/results/reproductions/: do not edit -->",
        "",
        "Each paper's published MNIST numbers beside ours, from the reproduction presets run end to end "
        "with `dvc repro` on the real MNIST files. Intervals are 95%: over seeds for R (t), over the "
        "same held-out samples for the brittle-score gap (paired t). A verdict *agrees* when the "
        "interval of our value minus the paper's holds 0 (Welch, the paper's mean being itself an "
        "estimate over its seeds), or, where a paper states only a direction, when our interval "
        "lies on its side of 0.",
        "",
        "Run one reproduction, then this page:",
        "",
        "```bash",
        "python bench/reproduce.py run repro_004_mnist --mnist-root ../shared/data/mnist",
        "python bench/reproduce.py run repro_002_mnist --mnist-root ../shared/data/mnist",
        "python bench/reproduce.py run repro_003_mnist --mnist-root ../shared/data/mnist",
        "python bench/reproduce.py run default          # the digits column below",
        "```",
        "",
        'Each preset is a plain experiment too: `make params ARGS="experiment=repro_004_mnist '
        'data.mnist.root=../shared/data/mnist" && dvc repro`. Its comment in `conf/experiment/` '
        "gives the overrides of its full size (for a GPU).",
        "",
        "## 004, Table 1: R of LeNet on MNIST under FGSM, over [0, 0.3]",
        "",
        *table_004(run004),
        "",
        *notes_004(run004),
        "",
        "What differs from 004:",
        "",
        *setup_lines("repro_004_mnist", run004),
        "",
        "## 002, Fig. 1: brittle-score of normal and PGD-trained models on MNIST",
        "",
        "002 prints no value for MNIST, only bars and that the robust models' brittle-score is "
        "significantly lower; the comparison is of that direction and of the gap's size.",
        "",
        *table_002(run002),
        "",
        "What differs from 002:",
        "",
        *setup_lines("repro_002_mnist", run002),
        "",
        "## The papers' claims: digits and MNIST",
        "",
        "Each claim as the report tests it (on the compute clock where it concerns time), on the "
        "default study of the 8x8 digits and on the MNIST reproductions.",
        "",
        *claims_table(kept),
        "",
        "What differs from 003:",
        "",
        *setup_lines("repro_003_mnist", kept.get("repro_003_mnist")),
        "",
        "## Runs",
        "",
        *timing_table(kept),
        "",
        "## At full size",
        "",
        "The presets above are sized for two CPU cores. Their full size, for a GPU, adds these "
        'overrides to `make params ARGS="experiment=<preset> data.mnist.root=<folder> ..."` '
        "(or after `python bench/reproduce.py run <preset> --mnist-root <folder>`):",
        "",
        *full_size_section(),
    ]
    return "\n".join(parts)


def write_page(check: bool = False) -> int:
    text = render(load_kept())
    if check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `python bench/reproduce.py page`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a preset afresh and keep what it found")
    run.add_argument("preset", choices=(*PRESETS, DIGITS))
    run.add_argument("--mnist-root", help="the folder with MNIST's IDX files (data.mnist.root)")
    run.add_argument("--keep-work", action="store_true", help="keep the run's scratch folder (reports, models, data) instead of removing it")
    run.add_argument("overrides", nargs="*", help="Hydra overrides after the preset's")
    loose = sub.add_parser("unclipped", help="add FGSM without clipping to a kept repro_004_mnist run, from its run folder")
    loose.add_argument("work", type=Path, help="the run's scratch folder (printed by `run`)")
    page = sub.add_parser("page", help="write docs/reproduction.md from the kept runs")
    page.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    if args.command == "page":
        return write_page(args.check)
    if args.command == "unclipped":
        return add_unclipped(args.work)
    if args.preset != DIGITS and not (args.mnist_root and Path(args.mnist_root).is_dir()):
        parser.error(
            f"--mnist-root: got {args.mnist_root!r}; the MNIST presets need the folder with MNIST's four IDX files (or torchvision's MNIST/raw/ under it)"
        )
    run_preset(args.preset, args.mnist_root, args.overrides, args.keep_work)
    write_page()
    subprocess.run([sys.executable, str(ROOT / "bench" / "benchmark_page.py")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
