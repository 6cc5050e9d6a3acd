"""How the survival fit grows with the survival data set: each configured fitter on
synthetic data shaped like the covariates of `reports/survival_data.parquet` (one row per
attacked sample, weight 1: the default covariates with the sample's benign margin, one-hot
attack and defence columns; the label columns are not fitted) at 1k, 10k and 100k rows, with
the growth exponent b of time ~ rows^b (least squares on the log-log points; b < 1.2 is the
target).

    python bench/survival_scaling.py [--rows 1000 10000 100000] [--fitters weibull cox]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from trashfire.core.config import compose, validate
from trashfire.core.records import write_json
from trashfire.survival.fitters import fit_one

ATTACKS = ["fgm_2", "fgm_inf", "hsj_2", "pgd_inf", "pixel_0", "threshold_inf"]
DEFENCES = ["conf", "fsq", "gauss_in", "gauss_out"]


def synthetic_survival_data(rows: int, seed: int = 0) -> pd.DataFrame:
    """Weibull AFT times (shape 1.5) from the default covariates, ~20% censored, one row per
    sample."""
    rng = np.random.default_rng(seed)
    data = pd.DataFrame(
        {
            "epochs": rng.integers(1, 11, rows).astype(float),
            "depth": rng.choice([18.0, 34.0, 50.0, 101.0, 152.0], rows),
            "t_train": rng.lognormal(-4, 1, rows),
            "t_predict": rng.lognormal(-6, 0.5, rows),
            "acc_ben": rng.uniform(0.5, 1.0, rows),
            "attack_strength": rng.uniform(0, 1, rows),
            "defence_strength": rng.uniform(0, 1, rows),
            "margin": rng.normal(2, 1.5, rows),
        }
    )
    attack = rng.integers(0, len(ATTACKS) + 1, rows)  # 0: the reference family
    defence = rng.integers(0, len(DEFENCES) + 1, rows)
    for i, name in enumerate(ATTACKS, start=1):
        data[f"attack_{name}"] = (attack == i).astype(float)
    for i, name in enumerate(DEFENCES, start=1):
        data[f"defence_{name}"] = (defence == i).astype(float)
    log_scale = (
        0.1 * data["epochs"]
        + 0.005 * data["depth"]
        - 1.5 * data["attack_strength"]
        + 0.8 * data["defence_strength"]
        + 0.3 * attack / len(ATTACKS)
        + 0.2 * data["margin"]
    )
    duration = np.exp(log_scale) * rng.weibull(1.5, rows)
    censor = np.quantile(duration, 0.8)
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "duration": np.minimum(duration, censor),
                    "event": (duration < censor).astype(int),
                    "weight": 1,
                }
            ),
            data,
        ],
        axis=1,
    )


def growth_exponent(rows: list[int], seconds: list[float]) -> float:
    return float(np.polyfit(np.log(rows), np.log(seconds), 1)[0])


def measure(rows: list[int], fitters: list[str] | None = None) -> dict:
    models = validate(compose([])).survival.models
    names = fitters or list(validate(compose([])).survival.fitters)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for n in rows:
        data = synthetic_survival_data(n)
        for name in names:
            start = time.perf_counter()
            fit_one(name, models[name], data)
            seconds[name].append(time.perf_counter() - start)
            print(f"  {name:12s} {n:>7d} rows: {seconds[name][-1]:7.2f} s", flush=True)
    total = [sum(seconds[name][i] for name in names) for i in range(len(rows))]
    return {
        "rows": rows,
        "seconds": {name: [round(s, 3) for s in values] for name, values in seconds.items()},
        "total_seconds": [round(s, 3) for s in total],
        "growth_exponent": {name: round(growth_exponent(rows, values), 3) for name, values in seconds.items()},
        "growth_exponent_total": round(growth_exponent(rows, total), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--fitters", nargs="+", help="keys of survival.models (default: survival.fitters)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    figures = measure(args.rows, args.fitters)
    print(f"survival fit time vs rows {args.rows}: total {figures['total_seconds']} s, growth exponent {figures['growth_exponent_total']} (target < 1.2)")
    for name, b in figures["growth_exponent"].items():
        print(f"  {name:12s} exponent {b}")
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
