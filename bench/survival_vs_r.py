"""The AFT fits against R's `survreg` on the same data: time, log-likelihood, coefficients.

The default run's survival data (`reports/survival_data.parquet`) tiled to each size as a real
study's would be (each tile a new set of trained models and attack cells, durations jittered
by up to 5%), or the synthetic generator of bench/survival_scaling.py (`--synthetic`). Each
of the Weibull, Log-Normal and Log-Logistic AFT models is fitted unpenalised by our Newton
fitters (trashfire.survival.aft, lifelines' classes; timed: lifelines' whole `fit`) and by
`survreg` in Rscript (timed inside R: `survreg` alone, the data already read). Printed per
size and model: our seconds / R's, our log-likelihood minus R's (relative), and the largest
coefficient difference on the unit-SD scale (coefficient x covariate SD, the scale either
optimiser works in) and as given. Exits 1 when a target is missed: time <= 1.0x R's,
log-likelihood within 1e-6 relative, coefficients within 1e-4 (unit-SD scale).

    python bench/survival_vs_r.py [--rows 100000 500000] [--data reports/survival_data.parquet] [--synthetic] [--json out.json]

Needs Rscript with the survival package (Debian: r-base-core r-cran-survival).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from trashfire.core.records import read_table, write_json
from trashfire.core.schema.units import FIT_UNITS
from trashfire.survival.aft import NewtonLogLogisticAFTFitter, NewtonLogNormalAFTFitter, NewtonWeibullAFTFitter
from trashfire.survival.fitters import DURATION, EVENT, WEIGHT, covariates_of, model_frame
from trashfire.tables.survival_data import drop_degenerate

sys.path.insert(0, str(Path(__file__).parent))
from survival_scaling import synthetic_survival_data  # noqa: E402

MODELS = {  # ours, R's dist, how our scale coefficient maps to R's log(scale)
    "weibull": (NewtonWeibullAFTFitter, "weibull", "rho_", -1.0),
    "lognormal": (NewtonLogNormalAFTFitter, "lognormal", "sigma_", 1.0),
    "loglogistic": (NewtonLogLogisticAFTFitter, "loglogistic", "beta_", -1.0),
}
TARGETS = {"time_ratio": 1.0, "loglik_rel": 1e-6, "coef_unit_sd": 1e-4}
HASHES = ("train_hash", "model_hash", "attack_hash")

R_SCRIPT = r"""
suppressMessages(library(survival))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
covariates <- setdiff(names(d), c("duration", "event"))
formula <- as.formula(paste("Surv(duration, event) ~", paste(sprintf("`%s`", covariates), collapse = " + ")))
out <- list()
for (dist in c("weibull", "lognormal", "loglogistic")) {
  seconds <- system.time(fit <- survreg(formula, data = d, dist = dist, control = survreg.control(maxiter = 100, rel.tolerance = 1e-12)))[["elapsed"]]
  out[[dist]] <- list(seconds = seconds, loglik = fit$loglik[2], iterations = fit$iter, coef = as.list(coef(fit)), log_scale = log(fit$scale))
}
fmt <- function(name, o) sprintf('"%s": {"seconds": %.6f, "loglik": %.12f, "iterations": %d, "log_scale": %.15g, "coef": {%s}}',
  name, o$seconds, o$loglik, as.integer(o$iterations), o$log_scale,
  paste(sprintf('"%s": %.15g', gsub("`", "", names(o$coef)), unlist(o$coef)), collapse = ", "))
cat("{", paste(mapply(fmt, names(out), out), collapse = ", "), "}")
"""


def tiled(data: pd.DataFrame, rows: int, seed: int = 0) -> pd.DataFrame:
    """`data` repeated to `rows` rows: each tile's hashes new (another set of trained models and
    attack cells), its durations jittered by up to 5%."""
    rng = np.random.default_rng(seed)
    tiles = []
    for tile in range(-(-rows // len(data))):
        part = data.copy()
        for column in HASHES:
            if column in part:
                part[column] = part[column].astype(str) + f"-{tile}"
        part[DURATION] = part[DURATION] * rng.uniform(0.95, 1.05, len(part))
        tiles.append(part)
    return pd.concat(tiles, ignore_index=True).head(rows)


def fit_frame(data: pd.DataFrame) -> pd.DataFrame:
    """Duration, event and the covariates the survival stage would fit (constant and
    collinear columns dropped), one row per sample."""
    data = data[data[WEIGHT] == 1] if WEIGHT in data else data
    covariates = drop_degenerate(covariates_of(model_frame(data)))
    return pd.concat([data[[DURATION, EVENT]].reset_index(drop=True), covariates.reset_index(drop=True)], axis=1)


def ours(frame: pd.DataFrame) -> dict:
    results = {}
    for name, (fitter_class, _, scale, sign) in MODELS.items():
        start = time.perf_counter()
        fitter = fitter_class(penalizer=0.0).fit(frame, DURATION, EVENT)
        seconds = time.perf_counter() - start
        location = fitter.params_.loc[fitter.params_.index.get_level_values(0) != scale].droplevel(0)
        results[name] = {
            "seconds": seconds,
            "loglik": float(fitter.log_likelihood_),
            "iterations": fitter.newton_iterations,
            "coef": location.to_dict(),
            "log_scale": sign * float(fitter.params_.loc[(scale, "Intercept")]),
        }
    return results


def theirs(frame: pd.DataFrame) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path, script = Path(folder) / "data.csv", Path(folder) / "fit.R"
        frame.to_csv(path, index=False)
        script.write_text(R_SCRIPT)
        done = subprocess.run(["Rscript", str(script), str(path)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def compare(frame: pd.DataFrame, ours_: dict, r: dict) -> dict:
    sd = frame.drop(columns=[DURATION, EVENT]).std()
    rows = {}
    for name in MODELS:
        mine, ref = ours_[name], r[MODELS[name][1]]
        r_coef = {("Intercept" if k == "(Intercept)" else k): v for k, v in ref["coef"].items()}
        difference = pd.Series({k: mine["coef"][k] - r_coef[k] for k in r_coef})
        unit_sd = difference * sd.reindex(difference.index).fillna(1.0)
        rows[name] = {
            "seconds": round(mine["seconds"], 3),
            "r_seconds": round(ref["seconds"], 3),
            "time_ratio": round(mine["seconds"] / ref["seconds"], 3),
            "iterations": mine["iterations"],
            "r_iterations": ref["iterations"],
            "loglik": mine["loglik"],
            "r_loglik": ref["loglik"],
            "loglik_rel": (mine["loglik"] - ref["loglik"]) / abs(ref["loglik"]),
            "coef_unit_sd": float(max(unit_sd.abs().max(), abs(mine["log_scale"] - ref["log_scale"]))),
            "coef_raw": float(difference.abs().max()),
        }
    return rows


def misses(rows: dict) -> list[str]:
    found = []
    for name, row in rows.items():
        if row["time_ratio"] > TARGETS["time_ratio"]:
            found.append(f"{name}: {row['time_ratio']}x R's time")
        if abs(row["loglik_rel"]) > TARGETS["loglik_rel"]:
            found.append(f"{name}: log-likelihood {row['loglik_rel']:.2e} relative to R's")
        if row["coef_unit_sd"] > TARGETS["coef_unit_sd"]:
            found.append(f"{name}: a coefficient {row['coef_unit_sd']:.2e} from R's (unit-SD scale)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--data", type=Path, default=Path("reports/survival_data.parquet"))
    parser.add_argument("--clock", default="flops", help="the clock the data's durations are on (flops: fitted in GFLOPs, as the stage does)")
    parser.add_argument("--synthetic", action="store_true", help="bench/survival_scaling.py's generator instead of the tiled default")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("Rscript") is None:
        sys.exit("survival_vs_r: Rscript not found; install Debian's r-base-core and r-cran-survival")
    source = None if args.synthetic else read_table(args.data)
    if source is not None:
        source = source.assign(**{DURATION: source[DURATION] / FIT_UNITS.get(args.clock, 1.0)})
    figures, missed = {}, []
    for rows in args.rows:
        frame = fit_frame(synthetic_survival_data(rows) if source is None else tiled(source, rows))
        result = compare(frame, ours(frame), theirs(frame))
        figures[str(rows)] = result
        print(f"{rows:,} samples, {frame.shape[1] - 2} covariates:")
        for name, row in result.items():
            print(
                f"  {name:12s} ours {row['seconds']:6.2f} s ({row['iterations']} Newton steps), R {row['r_seconds']:6.2f} s ({row['r_iterations']}): "
                f"{row['time_ratio']:.2f}x; loglik {row['loglik']:.4f} vs {row['r_loglik']:.4f} ({row['loglik_rel']:+.1e}); "
                f"coefficients {row['coef_unit_sd']:.1e} (unit SD), {row['coef_raw']:.1e} (raw)",
                flush=True,
            )
        missed += [f"{rows}: {line}" for line in misses(result)]
    if args.json:
        write_json(args.json, {"targets": TARGETS, "sizes": figures})
    for line in missed:
        print(f"MISSED {line}")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
