"""The survival stage's fits at a study's full size against a float64 in-memory fit of the same
rows (issue 62): each Newton fitter refitted on the stage's training split with its design as
one dense float64 matrix, Newton-Raphson from the plain start over every row (no products by
attack cell, no start fitted on a sample), and compared with the stage's models.pkl.

Targets: log-likelihood equal to 1e-6 relative, every coefficient to 1e-5 (relative to
max(1, |coefficient|)). Prints one line per fitter and exits 1 on a miss.

    python bench/fit_equality.py STUDY [--fitters weibull lognormal ...] [--json out.json]

STUDY is a workspace whose survival stage has run (its params.yaml, reports/survival_data.parquet
and reports/survival/models.pkl), e.g. a study of bench/post_attack_scaling.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from trashfire.core.records import write_json
from trashfire.survival import aft, analysis, newton, newton_fit
from trashfire.survival import fitters as F
from trashfire.survival.saved_models import load_models
from trashfire.survival.split import split_in_one_copy

NEWTON_FITTERS = ("weibull", "lognormal", "loglogistic", "exponential", "gengamma", "weibull_cure", "loglogistic_cure")
TARGETS = {"log_likelihood_rel": 1e-6, "coefficient": 1e-5}


def training_split(study: Path):
    """The stage's settings, training rows (prepared as analysis._analyse prepares them) and reports folder."""
    cfg = OmegaConf.load(study / "params.yaml")
    settings, reports = cfg.survival, study / str(cfg.paths.reports)
    data = analysis.read_survival_data(reports / "survival_data.parquet")
    unit = analysis.fit_unit(str(cfg.clock))
    data = data.assign(**{F.DURATION: data[F.DURATION] / unit})
    _, train, test = split_in_one_copy(data, settings.split_by, settings.test_size, settings.seed)
    train, _ = analysis.usable_covariates(train, test, settings.data.dummies)
    return settings, train, reports


def dense_fit(name: str, settings, train):
    """The fitter as it fits at most ROW_BLOCK rows: a dense design, every row from the start,
    each sum over every row at once (no blocks of rows)."""
    everything = len(train) + 1
    saved = newton_fit.ROW_BLOCK, aft.ROW_BLOCK, newton.ROW_BLOCK
    newton_fit.ROW_BLOCK = aft.ROW_BLOCK = newton.ROW_BLOCK = everything
    try:
        return F.fit_one(name, settings.models[name], train, list(settings.retries)).fitter
    finally:
        newton_fit.ROW_BLOCK, aft.ROW_BLOCK, newton.ROW_BLOCK = saved


def compare(stage, dense) -> dict:
    log_likelihood_rel = abs(stage.log_likelihood_ - dense.log_likelihood_) / abs(dense.log_likelihood_)
    difference = (stage.params_ - dense.params_.reindex(stage.params_.index)).abs() / np.maximum(1.0, dense.params_.abs())
    return {"log_likelihood_rel": float(log_likelihood_rel), "coefficient": float(difference.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", type=Path)
    parser.add_argument("--fitters", nargs="+", default=list(NEWTON_FITTERS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings, train, reports = training_split(args.study)
    stage_models = load_models(reports / "survival" / "models.pkl")
    print(f"{len(train):,} training rows", flush=True)
    results, missed = {}, []
    for name in args.fitters:
        if name not in stage_models:
            print(f"{name}: not in models.pkl (not fitted by the stage)")
            continue
        started = time.perf_counter()
        dense = dense_fit(name, settings, train)
        figures = compare(stage_models[name], dense) | {"dense_seconds": round(time.perf_counter() - started, 1)}
        results[name] = figures
        met = all(figures[key] <= bound for key, bound in TARGETS.items())
        missed += [] if met else [name]
        print(
            f"{'met' if met else 'MISSED'} {name}: log-likelihood {figures['log_likelihood_rel']:.2e} relative (<= 1e-6), "
            f"coefficients {figures['coefficient']:.2e} (<= 1e-5); the dense fit took {figures['dense_seconds']} s",
            flush=True,
        )
    if args.json:
        write_json(args.json, {"targets": TARGETS, "training_rows": len(train), "fitters": results})
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
