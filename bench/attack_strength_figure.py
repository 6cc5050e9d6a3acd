"""docs/assets/attack_strength.png, the figure of docs/attacks.md: (left) one undefended model
cell's robust accuracy against eps per attack family and the ensemble's (each sample's smallest
eps over all of them), the area between a family's curve and the ensemble's being what its
optimality counts; (right) the certified floor and the attacked ceiling of each smoothed
classifier of a certified run, the bracket shaded.

    python bench/attack_strength_figure.py --default RUN/reports --certified RUN/reports [--out docs/assets/attack_strength.png]

RUN: a folder where `make run` (the default) and `experiment=certified` ran.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from trashfire.core.records import read_table

ROOT = Path(__file__).resolve().parents[1]


def ensemble_panel(ax, reports: Path) -> None:
    distances = read_table(reports / "attack_distances.parquet")
    experiments = pd.read_csv(reports / "experiments.csv")
    undefended = experiments[(experiments["defence"] == "none") & (experiments["model"] == "cifar_resnet8") & (experiments["seed"] == 0)]
    model_hash = undefended.sort_values("epochs")["model_hash"].iloc[-1]
    mine = distances[(distances["model_hash"] == model_hash) & (distances["norm"] == "inf")]
    best = mine.groupby("position")["eps"].min().to_numpy()
    top = float(np.nanmax(np.where(np.isfinite(best), best, np.nan))) * 1.1
    grid = np.linspace(0, top, 400)
    optimality = pd.read_csv(reports / "optimality.csv", dtype={"norm": str})
    scores = optimality[(optimality["model_hash"] == model_hash)].set_index("attack_family")["optimality"]
    for family, samples in mine.groupby("attack_family"):
        if len(samples) < 10:  # a black-box search of 5 images: its curve says little
            continue
        eps = samples["eps"].to_numpy()
        ax.step(
            grid,
            [(eps > e).mean() if e > 0 else (eps > 0).mean() for e in grid],
            where="post",
            lw=1.3,
            label=f"{family} (optimality {scores.get(family, np.nan):.2f})",
        )
    ensemble = np.array([(best > e).mean() if e > 0 else (best > 0).mean() for e in grid])
    ax.step(grid, ensemble, where="post", color="black", lw=2, label="ensemble (each sample's smallest eps)")
    ax.set_xlabel("eps (linf, pixel units)")
    ax.set_ylabel("robust accuracy")
    ax.set_title("Undefended ResNet-8, seed 0: each attack against the ensemble", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def bracket_panel(ax, reports: Path) -> None:
    certified = pd.read_csv(reports / "certified.csv")
    for i, (sigma, cells) in enumerate(certified.groupby("defence_value")):
        mean = cells.groupby("eps")[["certified_acc", "attacked_acc"]].mean()
        colour = f"C{i}"
        ax.fill_between(mean.index, mean["certified_acc"], mean["attacked_acc"], color=colour, alpha=0.2)
        ax.plot(mean.index, mean["attacked_acc"], color=colour, marker="o", lw=1.5, label=f"σ {sigma:g}: attacked (ceiling)")
        ax.plot(mean.index, mean["certified_acc"], color=colour, marker="s", ls="--", lw=1.5, label=f"σ {sigma:g}: certified (floor)")
    ax.set_xlabel("eps (l2, pixel units)")
    ax.set_ylabel("accuracy of the smoothed classifier")
    ax.set_title("Gauss-in ResNet-8: certified ≤ true ≤ attacked (shaded: the bracket)", fontsize=10)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--default", type=Path, required=True, help="a default run's reports folder")
    parser.add_argument("--certified", type=Path, required=True, help="an experiment=certified run's reports folder")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "attack_strength.png")
    args = parser.parse_args()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ensemble_panel(left, args.default)
    bracket_panel(right, args.certified)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
