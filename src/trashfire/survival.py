"""Stage `survival`: fit lifelines' AFT models and Cox PH to the survival data set, score
them on an 80/20 split, plot calibration and coefficients, and write the chosen model's
expected survival time E[T] per attack cell for `aggregate`.

Scores (TRASHFIRE Table I): AIC; BIC = -2 loglik + k ln n with k = every estimated
coefficient and n = the number of samples (the sum of the row weights), since lifelines'
BIC_ undercounts k for regression fitters; concordance, ICI and E50 on train and test. ICI
and E50 come from lifelines' `survival_probability_calibration` at t0 = a quantile of the
observed durations, on rows expanded by their weights (the calibration spline is unweighted).
"""

from __future__ import annotations

import contextlib
import io
import logging
import pickle
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from lifelines import CoxPHFitter, LogLogisticAFTFitter, LogNormalAFTFitter, WeibullAFTFitter
from lifelines.calibration import survival_probability_calibration
from omegaconf import DictConfig

from trashfire.cli import run_cli
from trashfire.errors import DataError
from trashfire.metrics import bic
from trashfire.records import atomic_path
from trashfire.timing import ID_COLUMNS

log = logging.getLogger("trashfire.survival")  # not __name__: it is __main__ under python -m

FITTER_CLASSES = {
    "weibull": WeibullAFTFitter,
    "lognormal": LogNormalAFTFitter,
    "loglogistic": LogLogisticAFTFitter,
    "cox": CoxPHFitter,
}
LABELS = {"weibull": "Weibull", "lognormal": "Log-Normal", "loglogistic": "Log-Logistic", "cox": "Cox PH"}


def fit(name: str, data: pd.DataFrame, penalizer: float):
    fitter = FITTER_CLASSES[name](penalizer=penalizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitter.fit(data, duration_col="duration", event_col="event", weights_col="weight")
    return fitter


def expand_by_weight(data: pd.DataFrame) -> pd.DataFrame:
    """One row per sample: what lifelines' unweighted calibration spline needs."""
    return data.loc[data.index.repeat(data["weight"].astype(int))].assign(weight=1).reset_index(drop=True)


def calibration(fitter, data: pd.DataFrame, t0: float, ax) -> tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ici, e50 = survival_probability_calibration(fitter, expand_by_weight(data), t0=t0, ax=ax)
    return float(ici), float(e50)


def score(name: str, fitter, train: pd.DataFrame, test: pd.DataFrame, t0: float, axes) -> dict[str, Any]:
    loglik = float(fitter.log_likelihood_)
    n_params = len(fitter.params_)
    n_samples = float(train["weight"].sum())
    row = {
        "fitter": name,
        "model": LABELS[name],
        "log_likelihood": loglik,
        "k": n_params,
        "n": n_samples,
        "AIC": float(fitter.AIC_partial_ if name == "cox" else fitter.AIC_),
        "BIC": bic(loglik, n_params, n_samples),
        "concordance": float(fitter.concordance_index_),
        "test_concordance": float(fitter.score(test, scoring_method="concordance_index")),
        "t0": t0,
    }
    for part, data, ax in (("", train, axes[0]), ("test_", test, axes[1])):
        try:
            row[f"{part}ICI"], row[f"{part}E50"] = calibration(fitter, data, t0, ax)
            ax.set_title(f"{LABELS[name]} ({'test' if part else 'train'})")
            ax.set_xlabel("predicted P(T <= t0)")  # lifelines prints t0 with %d: 0 for sub-second t0
            ax.set_ylabel("observed P(T <= t0)", color="tab:red")
        except Exception as err:  # a degenerate spline fit is reported, not fatal
            row[f"{part}ICI"] = row[f"{part}E50"] = float("nan")
            row["note"] = f"calibration failed: {type(err).__name__}: {err}"
    return row


def split_cells(data: pd.DataFrame, test_size: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80/20 by attack cell, so a cell's failure and survival rows stay together."""
    cells = data["attack_hash"].unique()
    rng = np.random.default_rng(seed)
    test_cells = rng.choice(cells, size=max(1, round(test_size * len(cells))), replace=False)
    is_test = data["attack_hash"].isin(test_cells)
    return data[~is_test], data[is_test]


def coefficient_figure(fitter, name: str, path: Path) -> None:
    """Coefficients with 95% intervals; dummies and covariates in separate panels (Fig. 3)."""
    summary = fitter.summary.reset_index()
    summary = summary[summary["covariate"] != "Intercept"]
    if "param" in summary:
        summary = summary[summary["param"] == summary["param"].iloc[0]]
    is_dummy = summary["covariate"].str.contains("_") & summary["covariate"].str.match(r"^(attack|defence|data)_")
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.35 * max(len(summary), 8) + 1.5))
    for ax, part, title in ((axes[0], summary[is_dummy], "dummies"), (axes[1], summary[~is_dummy], "covariates")):
        y = np.arange(len(part))
        ax.errorbar(part["coef"], y, xerr=[part["coef"] - part["coef lower 95%"], part["coef upper 95%"] - part["coef"]], fmt="o", capsize=3)
        ax.set_yticks(y, part["covariate"])
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_title(f"{LABELS[name]}: {title}")
        ax.set_xlabel("log-time coefficient (95% CI)" if name != "cox" else "log hazard ratio (95% CI)")
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), dpi=120)
    plt.close(fig)


def expected_times(fitter, data: pd.DataFrame) -> pd.DataFrame:
    cells = data.drop_duplicates("attack_hash").set_index("attack_hash")
    covariates = cells.drop(columns=[c for c in ID_COLUMNS if c in cells])
    return pd.DataFrame({"E_T": fitter.predict_expectation(covariates).to_numpy().ravel()}, index=cells.index).reset_index()


def run(cfg: DictConfig) -> pd.DataFrame:
    settings = cfg.survival
    out = Path(cfg.paths.reports) / "survival"
    data = pd.read_csv(Path(cfg.paths.reports) / "survival_data.csv")
    if data.empty or data["event"].sum() == 0:
        raise DataError("survival data has no failure events: no attack succeeded, nothing to fit")
    train, test = split_cells(data, settings.test_size, settings.seed)
    t0 = float(np.quantile(np.repeat(train["duration"], train["weight"]), settings.t0_quantile))
    fig, axes = plt.subplots(2, len(settings.fitters), figsize=(4.5 * len(settings.fitters), 8), squeeze=False)
    rows, fitters = [], {}
    for column, name in enumerate(settings.fitters):
        try:
            fitters[name] = fit(name, train.drop(columns="attack_hash"), settings.penalizer)
            rows.append(score(name, fitters[name], train.drop(columns="attack_hash"), test.drop(columns="attack_hash"), t0, axes[:, column]))
        except Exception as err:  # one failed fitter is reported; the others go on
            log.warning("%s failed to fit: %s", name, err)
            rows.append({"fitter": name, "model": LABELS[name], "note": f"fit failed: {type(err).__name__}: {err}"})
    fig.suptitle(f"Calibration at t0 = {t0:.3g} s: observed vs predicted P(T <= t0)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    _save(fig, out / "calibration.png")
    comparison = pd.DataFrame(rows)
    with atomic_path(out / "aft_comparison.csv") as tmp:
        comparison.to_csv(tmp, index=False)
    chosen = settings.chosen
    if chosen not in fitters:
        raise DataError(f"the chosen survival model {chosen} failed to fit; see {out / 'aft_comparison.csv'}")
    coefficient_figure(fitters[chosen], chosen, out / "coefficients.png")
    with atomic_path(out / "expected_times.csv") as tmp:
        expected_times(fitters[chosen], data).assign(fitter=chosen).to_csv(tmp, index=False)
    with atomic_path(out / "models.pkl") as tmp:
        tmp.write_bytes(pickle.dumps(fitters))
    log.info("fitted %s; chosen %s\n%s", ", ".join(fitters), chosen, comparison.drop(columns=[c for c in ("note",) if c in comparison]).to_string(index=False))
    return comparison


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.survival", __doc__, run, argv)


if __name__ == "__main__":
    main()
