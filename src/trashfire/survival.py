"""Stage `survival`: fit TRASHFIRE's survival models to the survival data set, score them as
its Table I does, draw its Figures 2 and 3, and write the selected AFT model's E[T] per attack
cell for `aggregate`.

Models (lifelines; `conf/survival/`): Weibull, Log-Normal, Log-Logistic, Exponential (Weibull
with shape 1) and Generalised Gamma AFT, and Cox PH, each retried with another optimiser and
larger penalizers when a fit fails to converge; one that still fails is a row of the table
with its reasons, and the others go on.

Scores on an 80/20 split by attack cell (a cell's rows stay together): AIC and BIC =
-2 loglik + k ln n with k = every estimated coefficient and n = the samples (lifelines' BIC_
counts parameter names and rows), loglik unpenalised (lifelines' log_likelihood_ includes the
penalty); Cox PH's are from its partial likelihood. Concordance (train,
test) and ICI and E50 (train, test) of lifelines' `survival_probability_calibration` at the
fitter's t0 (a quantile of the training durations), both over samples rather than the weighted
rows. The selected model (`survival.chosen`, or the best `survival.select_by` among AFT models
with a finite E[T] everywhere) gives E[T].

Writes `reports/survival/`: aft_comparison.csv and .tex (Table I), calibration.png (Fig. 2),
coefficients.png (Fig. 3, selected model) and coefficients/<fitter>.png, coefficients.csv,
expected_times.csv (E[T] per attack cell: the selected model's and every AFT model's), and
models.pkl (every fitted model; reload with `trashfire.survival.load_models`).
"""

from __future__ import annotations

import logging
import math
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire import fitters as F
from trashfire.cli import run_cli
from trashfire.errors import ConfigError, DataError
from trashfire.records import atomic_path
from trashfire.survival_data import diagnose, drop_degenerate
from trashfire.survival_figures import calibration_grid, coefficient_figure, finish_calibration, save

log = logging.getLogger("trashfire.survival")  # not __name__: it is __main__ under python -m

HIGHER_IS_BETTER = ("test_concordance", "concordance")  # the other select_by scores are errors
SCORE_COLUMNS = ["log_likelihood", "k", "n", "n_events", "AIC", "BIC", "concordance", "test_concordance", "t0", "ICI", "test_ICI", "E50", "test_E50"]
COX_NOTE = "AIC and BIC from the partial likelihood: comparable among Cox fits only"


def read_survival_data(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise DataError(f"survival data not found: {path}; run the timing stage first") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise DataError(f"corrupt survival data {path}: {str(err).splitlines()[0]}; rerun the timing stage") from None


def split_cells(data: pd.DataFrame, test_size: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80/20 by attack cell, so a cell's rows stay together."""
    cells = data["attack_hash"].unique()
    if len(cells) < 2:
        raise DataError(f"survival data holds {len(cells)} attack cell; a train/test split needs at least 2")
    rng = np.random.default_rng(seed)
    n_test = min(len(cells) - 1, max(1, round(test_size * len(cells))))
    is_test = data["attack_hash"].isin(rng.choice(cells, size=n_test, replace=False))
    return data[~is_test].drop(columns="attack_hash"), data[is_test].drop(columns="attack_hash")


def usable_covariates(train: pd.DataFrame, test: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop covariates that are constant or collinear in the training part (logged)."""
    covariates = F.covariates_of(train)
    kept = drop_degenerate(covariates, train[F.WEIGHT], where="survival training split").columns
    dropped = [c for c in covariates if c not in kept]
    return train.drop(columns=dropped), test.drop(columns=dropped)


def calibration_time(train: pd.DataFrame, quantile: float) -> float:
    """t0: a quantile of the training durations over samples."""
    return float(np.quantile(np.repeat(train[F.DURATION].to_numpy(), F.sample_weights(train)), quantile))


def compare(train: pd.DataFrame, test: pd.DataFrame, settings: Any, axes: dict | None = None) -> tuple[pd.DataFrame, dict[str, F.Fit]]:
    """Fit and score every configured fitter; returns Table I (one row per fitter, failed
    fits included with their reasons) and the fitted models. `axes[name]` = (train, test)
    axes for the calibration curves."""
    rows, fits = [], {}
    for name in settings.fitters:
        spec = settings.models[name]
        row: dict[str, Any] = {"fitter": name, "model": spec.label, "aft": bool(spec.aft)}
        if not spec.aft and F.covariates_of(train).empty:
            rows.append(row | {"status": "skipped", "note": f"not fitted: {spec.label} needs a covariate that varies, and none does"})
            continue
        try:
            fit = F.fit_one(name, spec, train, settings.retries)
        except F.FitFailed as err:
            log.warning("%s failed to fit: %s", name, err)
            rows.append(row | {"status": "failed", "note": f"fit failed: {err}"})
            continue
        fits[name] = fit
        quantile = spec.get("t0_quantile") or settings.t0_quantile
        row |= {"status": "fitted", "penalizer": fit.penalizer, "optimiser": fit.optimiser, "attempts": fit.attempts}
        rows.append(row | score(fit, train, test, calibration_time(train, quantile), (axes or {}).get(name, (None, None))))
    return pd.DataFrame(rows).reindex(columns=table_columns(rows)), fits


def table_columns(rows: list[dict]) -> list[str]:
    leading = ["fitter", "model", "status", "aft"] + SCORE_COLUMNS + ["penalizer", "optimiser", "attempts"]
    return leading + sorted({k for row in rows for k in row} - set(leading) - {"note"}) + ["note"]


def score(fit: F.Fit, train: pd.DataFrame, test: pd.DataFrame, t0: float, axes: tuple) -> dict[str, Any]:
    """One row of Table I; a score that cannot be computed is NaN with its reason in `note`."""
    row: dict[str, Any] = F.information_criteria(fit, train)
    row |= {"n_events": float(F.sample_weights(train)[train[F.EVENT].to_numpy() == 1].sum()), "t0": t0}
    notes = list(fit.warnings) + ([COX_NOTE] if fit.is_cox else [])
    for prefix, part, ax in (("", train, axes[0]), ("test_", test, axes[1])):
        row[f"{prefix}concordance"] = _guarded(notes, f"{prefix}concordance", F.concordance, fit, part)
        ici_e50 = _guarded(notes, f"{prefix}ICI/E50", F.calibration, fit, part, t0, ax)
        row[f"{prefix}ICI"], row[f"{prefix}E50"] = ici_e50 if isinstance(ici_e50, tuple) else (math.nan, math.nan)
    row["note"] = "; ".join(notes)
    return row


def _guarded(notes: list[str], what: str, function, *args):
    try:
        return function(*args)
    except Exception as err:  # e.g. a test part without events, a calibration spline that fails
        notes.append(f"{what}: {type(err).__name__}: {F.first_line(err) or 'no comparable pairs'}")
        return math.nan


def expected_times(fits: dict[str, F.Fit], data: pd.DataFrame, aft: list[str]) -> pd.DataFrame:
    """E[T] per attack cell from every fitted AFT model."""
    cells = data.drop_duplicates("attack_hash").set_index("attack_hash")
    covariates = F.covariates_of(cells)
    columns = {f"E_T_{name}": F.expected_time(fits[name], covariates) for name in aft if name in fits}
    return pd.DataFrame(columns, index=cells.index)


def select(comparison: pd.DataFrame, times: pd.DataFrame, chosen: str | None, select_by: str) -> str:
    """The AFT model whose E[T] feeds TRASH: `chosen`, or the best by `select_by` among the
    fitted AFT models whose E[T] is finite for every cell."""
    finite = {c.removeprefix("E_T_"): bool(np.isfinite(times[c]).all() and (times[c] > 0).all()) for c in times}
    if chosen is not None:
        if chosen not in finite:
            raise DataError(f"survival.chosen = {chosen}: it did not fit (see aft_comparison.csv); choose another or set chosen: null")
        if not finite[chosen]:
            raise DataError(f"survival.chosen = {chosen}: its E[T] is infinite or undefined for some cells; choose another or set chosen: null")
        return chosen
    candidates = comparison[comparison["fitter"].map(lambda name: finite.get(name, False))].dropna(subset=[select_by])
    if candidates.empty:
        raise DataError(f"no fitted AFT model has a finite E[T] everywhere and a {select_by} score; see aft_comparison.csv, or name one in survival.chosen")
    best = candidates[select_by].idxmax() if select_by in HIGHER_IS_BETTER else candidates[select_by].idxmin()
    return str(candidates.loc[best, "fitter"])


def latex_table(comparison: pd.DataFrame, test_size: float) -> str:
    """Table I's layout: AIC, BIC, concordance, ICI and E50 (train and test) per model; '--'
    where a score is missing, with the reason as a footnote."""
    columns = {"AIC": "AIC", "BIC": "BIC", "concordance": "Concordance", "test_concordance": "Test Concordance",
               "ICI": "ICI", "test_ICI": "Test ICI", "E50": "E50", "test_E50": "Test E50"}
    table = comparison.set_index("model")[list(columns)].rename(columns=columns)
    table.index.name = None
    formats = {c: ("{:.3g}" if c in ("AIC", "BIC") else "{:.2f}") for c in table}
    notes = []
    for model, row in comparison.set_index("model").iterrows():
        if row["status"] == "failed":
            notes.append(f"{model}: every fit attempt failed (the reasons are in aft_comparison.csv)")
        elif row["status"] != "fitted":
            notes.append(f"{model}: {row['note']}")
        elif not row["aft"]:
            notes.append(f"{model}: {COX_NOTE}")
    split = f"training ({100 * (1 - test_size):.0f}\\%) and test ({100 * test_size:.0f}\\%)"
    caption = f"Survival models compared on the {split} attack cells. " + " ".join(_latex_escape(n.rstrip(".")) + "." for n in notes)
    styler = table.style.format(formats, na_rep="--").format_index(escape="latex")
    return styler.to_latex(hrules=True, position_float="centering", caption=caption, label="tab:survival-models") + "% needs \\usepackage{booktabs}\n"


def _latex_escape(text: str) -> str:
    for char, escaped in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}")):
        text = text.replace(char, escaped)
    return text


def coefficient_table(fits: dict[str, F.Fit], train: pd.DataFrame) -> pd.DataFrame:
    """Every fitted coefficient with its 95% interval, and the covariate's SD over samples."""
    sd = sample_sd(F.covariates_of(train), F.sample_weights(train))
    frames = []
    for name, fit in fits.items():
        summary = fit.fitter.summary.reset_index()
        if "param" not in summary:
            summary.insert(0, "param", "log_hazard")
        summary = summary.rename(columns={"se(coef)": "se", "coef lower 95%": "lower", "coef upper 95%": "upper"})
        summary["sd"] = summary["covariate"].map(sd).fillna(0.0)
        frames.append(summary[["param", "covariate", "coef", "se", "lower", "upper", "p", "sd"]].assign(fitter=name))
    return pd.concat(frames, ignore_index=True)[["fitter", "param", "covariate", "coef", "se", "lower", "upper", "p", "sd"]]


def sample_sd(covariates: pd.DataFrame, weights: np.ndarray) -> pd.Series:
    """Each column's SD over samples (ddof 1), from rows weighted by their samples."""
    mean = np.average(covariates, axis=0, weights=weights)
    variance = np.average((covariates - mean) ** 2, axis=0, weights=weights) * weights.sum() / max(weights.sum() - 1, 1)
    return pd.Series(np.sqrt(variance), index=covariates.columns)


def check_fitters(settings: Any) -> None:
    """Build every configured fitter once, so a bad _target_ stops before any data is read."""
    for name in settings.fitters:
        try:
            F.build(settings.models[name], 0.0, None)
        except Exception as err:
            target = settings.models[name].fitter.get("_target_")
            reason = F.first_line(err).split(", set env var HYDRA_FULL_ERROR")[0]  # Hydra's hint is no help here
            raise ConfigError(f"survival.models.{name}.fitter", f"cannot build {target!r}: {reason}; allowed: a lifelines fitter class "
                                                                 "and its arguments, e.g. lifelines.WeibullAFTFitter") from None


def save_models(fits: dict[str, F.Fit], path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(pickle.dumps({name: fit.fitter for name, fit in fits.items()}))


def load_models(path: str | Path) -> dict[str, Any]:
    """The fitted lifelines models the survival stage saved, by fitter name."""
    try:
        return pickle.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise DataError(f"fitted survival models not found: {path}; run the survival stage") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as err:
        raise DataError(f"corrupt survival models file {path}: {err}; rerun the survival stage") from None


def run(cfg: DictConfig) -> pd.DataFrame:
    settings = cfg.survival
    check_fitters(settings)
    reports = Path(cfg.paths.reports)
    out = reports / "survival"
    data = read_survival_data(reports / "survival_data.csv")
    diagnose(data, str(reports / "survival_data.csv"))
    train, test = usable_covariates(*split_cells(data, settings.test_size, settings.seed))
    fig, axes = calibration_grid([settings.models[name].label for name in settings.fitters], list(settings.fitters))
    comparison, fits = compare(train, test, settings, axes)
    aft = [name for name in settings.fitters if settings.models[name].aft]
    times = expected_times(fits, data, aft)
    selected = select(comparison, times, settings.chosen, settings.select_by)
    comparison["selected"] = comparison["fitter"] == selected
    out.mkdir(parents=True, exist_ok=True)
    save(finish_calibration(fig, axes, comparison), out / "calibration.png")
    with atomic_path(out / "aft_comparison.csv") as tmp:
        comparison.to_csv(tmp, index=False)
    with atomic_path(out / "aft_comparison.tex") as tmp:
        tmp.write_text(latex_table(comparison, settings.test_size))
    coefficients = coefficient_table(fits, train)
    with atomic_path(out / "coefficients.csv") as tmp:
        coefficients.to_csv(tmp, index=False)
    for name, fit in fits.items():
        coefficient_figure(coefficients[coefficients["fitter"] == name], settings.models[name].label, fit.is_cox, out / "coefficients" / f"{name}.png")
    with atomic_path(out / "coefficients.png") as tmp:
        shutil.copyfile(out / "coefficients" / f"{selected}.png", tmp)
    with atomic_path(out / "expected_times.csv") as tmp:
        times.assign(E_T=times[f"E_T_{selected}"], fitter=selected).reset_index().to_csv(tmp, index=False)
    save_models(fits, out / "models.pkl")
    shown = comparison.drop(columns=["note", "aft", "model"])
    log.info("fitted %s of %s; selected %s (%s)\n%s", ", ".join(fits), ", ".join(settings.fitters), selected,
             settings.chosen and "survival.chosen" or f"best {settings.select_by}", shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return comparison


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.survival", __doc__, run, argv)


if __name__ == "__main__":
    main()
