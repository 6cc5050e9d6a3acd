"""Does each survival fit reach its optimum? The survival stage's fits (with the convergence check
and its second start) against independent optima on the same training split:

- lifelines' fit of the same penalised objective from another start (zeros) with another
  optimiser (L-BFGS-B) at tight tolerances;
- R's `survreg` (and `coxph`, Efron ties) on the unpenalised objective, beside our fit with
  penalizer 0, where `Rscript` with the `survival` package is installed (Debian:
  r-cran-survival). R has no generalised gamma.

It reads a finished run's reports/survival_data.parquet (`make run`) and prints each fitter's
log-likelihoods and relative differences; it exits 1 if any AFT fit is more than 1e-4
(relative) below an independent optimum.

    python bench/survival_convergence.py [--data reports/survival_data.parquet]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from trashfire.core.config import compose
from trashfire.core.records import read_table
from trashfire.survival import fitters as F
from trashfire.survival.analysis import fit_unit, usable_covariates
from trashfire.survival.convergence import fit_converged
from trashfire.survival.fitters import GeneralizedGammaAFTFitter
from trashfire.survival.split import split_groups

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
R_DISTRIBUTIONS = {"weibull": "weibull", "lognormal": "lognormal", "loglogistic": "loglogistic", "exponential": "exponential"}
INDEPENDENT = {"optimiser": "L-BFGS-B", "fit_options": {"ftol": 1e-15, "gtol": 1e-9, "maxiter": 20000}}


def training_split(path: Path):
    cfg = compose([], conf=ROOT / "conf")
    settings = cfg.survival
    data = read_table(path)
    data = data.assign(**{F.DURATION: data[F.DURATION] / fit_unit(str(cfg.clock))})
    train, _ = usable_covariates(*split_groups(data, settings.split_by, settings.test_size, settings.seed), settings.data.dummies)
    return settings, train


def with_settings(spec, penalizer: float | None = None, **changes):
    spec = OmegaConf.merge(spec, changes)
    if penalizer is not None:
        spec.fitter.penalizer = penalizer
    return spec


def r_log_likelihoods(train: pd.DataFrame, names: list[str]) -> dict[str, float]:
    """R's unpenalised optimum for each fitter R has (survreg; coxph with Efron ties)."""
    if shutil.which("Rscript") is None:
        return {}
    covariates = list(F.covariates_of(train).columns)
    formula = " + ".join(f"`{c}`" for c in covariates) or "1"
    lines = ["suppressMessages(library(survival))", "d <- read.csv(commandArgs(TRUE)[1], check.names = FALSE)"]
    for name in names:
        if name in R_DISTRIBUTIONS:
            lines.append(
                f"f <- survreg(Surv(duration, event) ~ {formula}, data = d, weights = weight, dist = '{R_DISTRIBUTIONS[name]}',"
                " control = survreg.control(maxiter = 1000, rel.tolerance = 1e-12))"
            )
            lines.append(f"cat('{name}', sprintf('%.10f', f$loglik[2]), '\\n')")
        elif name == "cox":
            lines.append(f"f <- coxph(Surv(duration, event) ~ {formula}, data = d, weights = weight, ties = 'efron')")
            lines.append("cat('cox', sprintf('%.10f', f$loglik[2]), '\\n')")
    with tempfile.TemporaryDirectory() as folder:
        csv, script = Path(folder) / "train.csv", Path(folder) / "fit.R"
        F.model_frame(train).to_csv(csv, index=False)
        script.write_text("\n".join(lines) + "\n")
        out = subprocess.run(["Rscript", str(script), str(csv)], capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if line.strip()}


def another_start(fit: F.Fit) -> np.ndarray:
    """Zeros (in lifelines' normalised coordinates), the generalised gamma's lambda at 1 (the
    Weibull; lifelines divides by lambda)."""
    start = np.zeros(len(fit.fitter.params_))
    if isinstance(fit.fitter, GeneralizedGammaAFTFitter):
        start[list(fit.fitter.params_.index).index(("lambda_", "Intercept"))] = 1.0  # lambda_ sorts first, as autograd flattens
    return start


def other_optimum(fit: F.Fit, spec, train: pd.DataFrame) -> float:
    """lifelines' penalised optimum from `another_start` with L-BFGS-B at tight tolerances (NaN
    where that fit does not converge)."""
    other = F.build(with_settings(spec, **INDEPENDENT), fit.penalizer, INDEPENDENT["optimiser"])
    try:
        F.fit_quietly(other, train, INDEPENDENT["fit_options"], initial_point=another_start(fit))
    except Exception:  # lifelines' ConvergenceError: that start did not get there
        return float("nan")
    return float(other.log_likelihood_)


def relative(ours: float, other: float) -> float:
    """How far ours is below the other optimum, relative (negative: ours is higher)."""
    return (other - ours) / abs(other)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "reports" / "survival_data.parquet")
    args = parser.parse_args()
    settings, train = training_split(args.data)
    names = list(settings.fitters)
    r = r_log_likelihoods(train, names)
    print(f"{len(train)} training rows, {int(F.sample_weights(train).sum())} samples; R: {'yes' if r else 'not installed'}")
    print(f"{'fitter':12} {'ours (penalised)':>18} {'other start':>16} {'rel. short':>11}  {'ours, pen. 0':>14} {'R':>16} {'rel. short':>11}  starts converged")
    failed = []
    for name in names:
        spec = settings.models[name]
        fit = fit_converged(name, spec, train, settings.retries)
        line = f"{name:12} {fit.fitter.log_likelihood_:>18.4f} "
        if not fit.is_cox:
            other = other_optimum(fit, spec, train)
            short = relative(fit.fitter.log_likelihood_, other)
            line += f"{other:>16.4f} {short:>11.2e}  "
            if spec.aft and short > TOLERANCE:
                failed.append(f"{name} vs another start")
        else:
            line += f"{'':>16} {'':>11}  "
        if name in r:
            ours = fit_converged(name, with_settings(spec, penalizer=0.0), train, settings.retries).fitter.log_likelihood_
            short = relative(ours, r[name])
            line += f"{ours:>14.4f} {r[name]:>16.4f} {short:>11.2e}"
            if spec.aft and short > TOLERANCE:
                failed.append(f"{name} vs R")
        else:
            line += f"{'':>14} {'':>16} {'':>11}"
        print(f"{line}  {fit.convergence.starts:>6} {fit.convergence.converged}", flush=True)
    if failed:
        print(f"short of an independent optimum by more than {TOLERANCE:g} (relative): {', '.join(failed)}")
        return 1
    print(f"every AFT fit is within {TOLERANCE:g} (relative) of each independent optimum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
