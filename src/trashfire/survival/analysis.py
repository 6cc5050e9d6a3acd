"""Stage `survival`: fit TRASHFIRE's survival models to the survival data set (one row per
attacked sample), score them as its Table I does beside two baselines, draw its Figures 2 and 3
and Kaplan-Meier curves, and write the selected AFT model's E[T] per attack cell for `aggregate`.

Models (lifelines; `conf/survival/`): Weibull, Log-Normal, Log-Logistic, Exponential (Weibull
with shape 1) and Generalised Gamma AFT, and Cox PH, each retried with another optimiser and
larger penalizers when a fit fails to converge; one that still fails is a row of the table
with its reasons, and the others go on. The label columns (hashes, attack family, defence, data
set) are kept aside, never fitted.

Scores on a train/test split by group (`survival.split_by`, default train_hash: every sample of
a trained model on one side, seeded; `survival.test_size` of the groups to test). On the
training part, every fitter: AIC and BIC = -2 loglik + k ln n with k = every estimated
coefficient and n = the samples (lifelines' BIC_ counts parameter names and rows), loglik
unpenalised (lifelines' log_likelihood_ includes the penalty; Cox PH's from its partial
likelihood), concordance, and ICI and E50 of lifelines' `survival_probability_calibration` at
the fitter's t0 (a quantile of the training durations), over samples; and for the AFT models,
the `select_by` score by grouped K-fold cross-validation inside the training part
(`survival.validation`). Standard errors: lifelines' naive ones and, beside them,
cluster-robust ones with the trained models as clusters (samples of one trained model share its
weights, so they are not independent). The selected model (`survival.chosen`, or the best
cross-validated `survival.select_by` among AFT models with a finite E[T] everywhere; never a
baseline) gives E[T], and it alone is then scored on the test part, once: Harrell's C, Uno's C
and the integrated Brier score with 95% intervals over the held-out trained models, ICI and E50.
Two baselines are scored on both halves: a ranking by the mean runtime of the sample's attack
cell, and by its cell's observed survival share; `beats_baselines` says whether the selected
model's test concordance exceeds both.

Writes `reports/survival/`: aft_comparison.csv and .tex (Table I with the baselines),
calibration.png (Fig. 2), coefficients.png (Fig. 3, selected model) and coefficients/<fitter>.png,
coefficients.csv (naive and cluster-robust intervals), expected_times.csv (E[T] per attack cell:
the selected model's restricted and unrestricted mean, every AFT model's restricted mean),
kaplan_meier.png and logrank.csv (per attack family, each defence against none),
models.pkl (every fitted model; reload with `trashfire.survival.saved_models.load_models`) and
status.json (the selected model, or null and the reason none gives E[T]: then E_T is missing
in expected_times.csv, and aggregate computes every metric but TRASH).

This module runs the stage (split, fit, write, reload); `scoring` scores Table I and its
baselines, `expected_time` gives E[T], the selected model and the Kaplan-Meier check.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire.core.errors import ConfigError, DataError
from trashfire.core.parallel import keep_freed_memory, release_freed_memory, resolve_workers, results_as_completed, threads_per_cell, torch_loaded
from trashfire.core.records import atomic_path, read_table, write_csv, write_json
from trashfire.core.schema.units import CLOCK_UNIT_NAMES, FIT_UNIT_NAMES, FIT_UNITS
from trashfire.core.stage import Artefacts
from trashfire.survival import fitters as F
from trashfire.survival import validation
from trashfire.survival.competing import write_competing_risks
from trashfire.survival.convergence import fit_converged
from trashfire.survival.expected_time import cell_budgets, kaplan_meier_fits, km_sentences, logrank_table, with_km_summaries
from trashfire.survival.figures import calibration_grid, coefficient_figure, finish_calibration, kaplan_meier_figure, save
from trashfire.survival.per_model import ModelOutputs, in_clock_units, with_breakable_means, write_budget_sufficiency, write_cure_fractions
from trashfire.survival.saved_models import save_models, share_training_data
from trashfire.survival.score_sample import calibration_rows, concordance_rows
from trashfire.survival.scoring import (
    CELL,
    baseline_rows,
    baseline_verdicts,
    calibration_time,
    concordance_within_table,
    latex_table,
    score_selected,
    t0_quantile,
    table_columns,
    train_scores,
    within_summary,
)
from trashfire.survival.selected import Selection
from trashfire.survival.split import split_in_one_copy
from trashfire.tables.survival_data import DUMMY_SOURCES, NUMERIC_COVARIATES, diagnose, drop_degenerate

log = logging.getLogger(__name__)

FEW_CLUSTERS = 30  # below this the cluster-robust SEs run small (Cameron and Miller 2015's rule of thumb)
CLUSTER_BY = "train_hash"  # the samples of one trained model are not independent, whatever the split


def read_survival_data(path: Path) -> pd.DataFrame:
    try:
        return read_table(path, what="survival data", stage="the timing stage")
    except FileNotFoundError:
        raise DataError(f"survival data not found: {path}; run the timing stage first") from None


FEW_DUMMY_EVENTS = 10  # fewer failures than this in the training part leave a dummy's coefficient weakly determined


def usable_covariates(train: pd.DataFrame, test: pd.DataFrame, dummy_kinds=()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop covariates that are constant or collinear in the training part (logged); name the
    dummies (of `dummy_kinds`: attack, defence, data) with few failures there (`few_failures`)."""
    covariates = F.covariates_of(train)
    kept = drop_degenerate(covariates, train[F.WEIGHT], where="survival training split").columns
    dropped = [c for c in covariates if c not in kept]
    few_failures(train.drop(columns=dropped), dummy_kinds)
    return train.drop(columns=dropped), test.drop(columns=dropped)


def few_failures(train: pd.DataFrame, kinds) -> list[str]:
    """The one-hot columns (0/1, named `<kind>_<level>`) with fewer than FEW_DUMMY_EVENTS failures
    (samples) in `train`, each logged. They are kept: dropping one merges its level into the
    reference level, whose cells then lend it their E[T] (on the default run, dropping the
    threshold attack's 8 failures raised the Kaplan-Meier check's flagged cells from 13% to 20%
    and cost the Weibull fit 1,800 nats); the convergence check's second start reaches the
    optimum along such a coefficient's flat direction, and its wide interval says the rest."""
    events = F.sample_weights(train) * (train[F.EVENT].to_numpy() == 1)
    few = []
    for column in F.covariates_of(train):
        values = train[column].to_numpy(float)
        is_dummy = column.startswith(tuple(f"{kind}_" for kind in kinds)) and column not in NUMERIC_COVARIATES  # attack_strength is not one
        if not is_dummy or not np.isin(values, (0.0, 1.0)).all():
            continue
        failures = int(events[values == 1].sum())
        if failures < FEW_DUMMY_EVENTS:
            log.warning(
                "survival training split: dummy %s has %d failures (< %d): its coefficient is weakly determined; read its interval in coefficients.csv",
                column,
                failures,
                FEW_DUMMY_EVENTS,
            )
            few.append(column)
    return few


LARGE_SPLIT = 200_000  # training samples from which the fits leave a core to the scoring (memory, not time)
SLOW_FITTERS = ("gengamma", "loglogistic_cure", "weibull_cure")  # started first, so that the quicker fits fill the other workers meanwhile


def compare(
    train: pd.DataFrame,
    test: pd.DataFrame,
    settings: Any,
    axes: dict | None = None,
    workers: int = 1,
    threads: int | None = None,
    on_fit=None,
    on_aft_fits=None,
    meanwhile=None,
) -> tuple[pd.DataFrame, dict[str, F.Fit]]:
    """Fit every configured fitter and score it on the training part, the AFT models also by
    cross-validation inside it (`survival.validation`, where select_by asks for it), then the
    baselines on both parts; returns Table I before the selection (one row per fitter, failed
    fits included with their reasons, then one per baseline; `score_selected` adds the test
    scores of the one selected) and the fitted models, with cluster-robust SEs by trained model
    (CLUSTER_BY). `axes[name]` = (train, test) axes for the calibration curves. With workers > 1
    the fits run in workers - 1 worker processes, the slowest first, and each is scored here as
    it arrives (then `on_fit(name, fit)`); the baselines (then `meanwhile()`) while the first
    runs. `on_aft_fits(table, fits)` once every AFT fit is in (Table I so far): on a large
    training split, where one worker fits them in turn, the AFT fits go first."""
    rows: dict[str, dict[str, Any]] = {}
    to_fit = []
    if workers > 1 and not torch_loaded():  # forked workers read the rows from their copy of this process's memory
        _INHERITED[INHERITED], shared = train, INHERITED
    else:  # each job's rows are pickled to it, or it runs here: the labels (most of the frame's memory) stay aside
        shared = train[[*F.model_frame(train).columns, CLUSTER_BY]]
    folds = validation.plan(settings, train)
    calibrated = calibration_rows(train, settings.get("score_samples"), int(settings.seed))
    ranked = concordance_rows(train, CELL, settings.get("score_samples"), int(settings.seed))
    for name in settings.fitters:
        spec = settings.models[name]
        rows[name] = {"fitter": name, "model": spec.label, "aft": bool(spec.aft)}
        if isinstance(F.build(spec, 0.0, None), F.CoxPHFitter) and F.covariates_of(train).empty:
            rows[name] |= {"status": "skipped", "note": f"not fitted: {spec.label} needs a covariate that varies, and none does"}
        else:
            to_fit.append((name, spec, shared, list(settings.retries), folds if spec.aft else None))
    fits, kept, baselines = {}, {}, []
    # this process scores each fit as it arrives, which on a large training split takes as long
    # as the fits: there they run in workers - 1 processes beside it, so that no more than two
    # copies of the design are alive at once (10^6 samples: 6.3 GiB with two fit workers)
    fit_processes = workers if F.sample_weights(train).sum() < LARGE_SPLIT else max(1, workers - 1)
    # the slowest first, where several workers share the fits; in one worker, the AFT ones first:
    # the selection needs them alone, and what it selects is worked out here while the rest fit
    to_fit.sort(key=lambda job: (fit_processes == 1 and not job[1].aft, job[0] not in SLOW_FITTERS))
    # one worker beside this process: this process waits between the fits (each is scored in a
    # few seconds), so their SEs (and the AFT fits' cross-validation) are worked out here, and
    # the worker goes on to the next fit (10^7 samples: 20 s of the AFT fits' and 7 s of the
    # cure models' off the worker's chain, the stage's longest). The last fit is finished where
    # it ran: nothing waits behind it, and here its SEs' arrays would sit beside the worker's.
    finish_here = {job[0] for job in to_fit[:-1]} if fit_processes == 1 < workers else set()
    to_fit = [(*job, job[0] not in finish_here) for job in to_fit]
    aft_pending = {job[0] for job in to_fit if job[1].aft}

    def while_the_first_fits() -> None:
        if isinstance(shared, str):  # forked: the workers read INHERITED
            # the fit workers are forked by now, so what this process allocates from here on is
            # its own: its n-row temporaries reuse freed memory instead of fresh pages, faulted and
            # zeroed (at 10^7 samples 40 s of system time). Before the fork a worker would copy
            # each heap page it reused; compare() gives the free heap back when it ends.
            keep_freed_memory()
        baselines.extend(baseline_rows(train, test, ranked))
        if meanwhile is not None:
            meanwhile()

    def table_so_far() -> pd.DataFrame:
        comparison = pd.DataFrame([rows[name] for name in settings.fitters] + baselines).assign(split_by=settings.split_by)
        return comparison.reindex(columns=table_columns(comparison.columns))

    try:
        for index, fit in results_as_completed(
            fit_with_robust_se, to_fit, fit_processes, log.name, threads, away=workers > 1, fork=True, meanwhile=while_the_first_fits
        ):
            name, spec, _, _, folds, _ = to_fit[index]
            aft_pending.discard(name)
            if isinstance(fit, F.FitFailed):
                log.warning("%s failed to fit: %s", name, fit)
                rows[name] |= {"status": "failed", "note": f"fit failed: {fit}"}
            else:
                if name in finish_here:
                    finish_fit(fit, spec, train, folds)
                    release_freed_memory()  # the SEs' n x p arrays: kept, they set this process's peak beside the worker's
                _add_fit(name, spec, fit, rows, fits, kept, train, settings, axes, calibrated, ranked)
                if on_fit is not None:
                    on_fit(name, fit)
            if on_aft_fits is not None and not aft_pending:
                on_aft_fits(table_so_far(), dict(fits))
                on_aft_fits = None
    finally:
        _INHERITED.pop(INHERITED, None)
        release_freed_memory()  # a later fork's children then take fresh pages, not copies of freed ones
    if not baselines:  # nothing was fitted
        baselines.extend(baseline_rows(train, test, ranked))
    return table_so_far(), {name: fits[name] for name in settings.fitters if name in fits}


def _add_fit(name: str, spec: Any, fit: F.Fit, rows: dict, fits: dict, kept: dict, train: pd.DataFrame, settings: Any, axes, calibrated, ranked) -> None:
    """A fit that arrived: kept, and its Table I row scored on the training part."""
    fits[name] = fit
    share_training_data(fit.fitter, kept)  # one copy of the rows lifelines keeps, not one per fitter
    rows[name] |= {"status": "fitted", "penalizer": fit.penalizer, "optimiser": fit.optimiser, "attempts": fit.attempts} | fit.convergence.columns() | fit.cv
    t0 = calibration_time(train, t0_quantile(spec, settings))
    rows[name] |= train_scores(fit, train, t0, (axes or {}).get(name, (None, None))[0], calibrated, ranked)


INHERITED = "inherited"  # a job's training rows: the frame compare() left in _INHERITED before it forked its workers
_INHERITED: dict[str, pd.DataFrame] = {}  # pickled to each job, the rows were a copy per job: 2 GB at 10^7 samples


def fit_with_robust_se(
    name: str, spec: Any, train: pd.DataFrame | str, retries: list, folds: validation.Plan | None = None, finish: bool = True
) -> F.Fit | F.FitFailed:
    """One fitter (a worker's job): its fit with cluster-robust SEs and, with `folds`, its
    cross-validated select_by score (`finish_fit`; without `finish`, the fit alone, for the
    process it returns to), or why it failed. `train`: the rows, or INHERITED where a forked
    worker finds them in its copy of compare()'s memory."""
    if isinstance(train, str):  # a forked fit worker: its jobs come the largest (Cox PH) last
        train = _INHERITED[train]
        keep_freed_memory()
    try:
        fit = fit_converged(name, spec, train, retries)
    except F.FitFailed as err:
        return err
    if finish:
        finish_fit(fit, spec, train, folds)
    return fit


def finish_fit(fit: F.Fit, spec: Any, train: pd.DataFrame, folds: validation.Plan | None) -> None:
    """A fit's cluster-robust SEs and, with `folds`, its cross-validated select_by score."""
    attach_robust_se(fit, train, CLUSTER_BY)
    if folds is not None:
        fit.cv = validation.cross_validate(fit, spec, train, folds)


def attach_robust_se(fit: F.Fit, train: pd.DataFrame, by: str) -> None:
    """fit.robust_se: cluster-robust SEs with the trained models (`by`) as clusters; where they cannot
    be computed, a note and NaN intervals. With few clusters the sandwich is biased low (it has
    no small-sample factor, as lifelines'), which the note says."""
    clusters = train[by].nunique()
    if clusters < 2:  # one cluster's score is the total score, 0 at the fit: no variance to estimate
        fit.warnings.append(f"no cluster-robust SEs: the training part holds {clusters} {by} cluster")
        return
    try:
        fit.robust_se = F.cluster_robust_se(fit, train, train[by].to_numpy())
    except Exception as err:  # a missing cluster column, a singular covariance ...
        log.warning("%s: no cluster-robust standard errors: %s", fit.name, F.first_line(err))
        fit.warnings.append(f"cluster-robust SEs: {type(err).__name__}: {F.first_line(err)}")
        return
    if clusters < FEW_CLUSTERS:
        fit.warnings.append(f"cluster-robust SEs from {clusters} {by} clusters (< {FEW_CLUSTERS}): likely too small")


def coefficient_table(fits: dict[str, F.Fit], train: pd.DataFrame) -> pd.DataFrame:
    """Every fitted coefficient with its naive and cluster-robust 95% intervals, and the
    covariate's SD over samples."""
    sd = sample_sd(F.covariates_of(train), F.sample_weights(train))
    columns = ["param", "covariate", "coef", "se", "lower", "upper", "p", "se_robust", "lower_robust", "upper_robust", "p_robust", "sd"]
    frames = []
    for name, fit in fits.items():
        summary = fit.fitter.summary.join(F.robust_summary(fit)).reset_index()
        if "param" not in summary:
            summary.insert(0, "param", "log_hazard")
        summary = summary.rename(columns={"se(coef)": "se", "coef lower 95%": "lower", "coef upper 95%": "upper"})
        summary["sd"] = summary["covariate"].map(sd).fillna(0.0)
        frames.append(summary[columns].assign(fitter=name))
    return pd.concat(frames, ignore_index=True)[["fitter"] + columns]


def sample_sd(covariates: pd.DataFrame, weights: np.ndarray) -> pd.Series:
    """Each column's SD over samples (ddof 1), from rows weighted by their samples; a column at a
    time (the whole design and two copies of it were 3.6 GB at 10^7 samples)."""
    scale = weights.sum() / max(weights.sum() - 1, 1)

    def sd(values: np.ndarray) -> float:
        mean = np.average(values, weights=weights)
        return float(np.sqrt(np.average((values - mean) ** 2, weights=weights) * scale))

    return pd.Series([sd(covariates[column].to_numpy(float)) for column in covariates.columns], index=covariates.columns, dtype=float)


def check_fitters(settings: Any) -> None:
    """Build every configured fitter once, so a bad _target_ stops before any data is read."""
    for name in settings.fitters:
        try:
            F.build(settings.models[name], 0.0, None)
        except Exception as err:
            target = settings.models[name].fitter.get("_target_")
            reason = F.first_line(err).split(", set env var HYDRA_FULL_ERROR")[0]  # Hydra's hint is no help here
            raise ConfigError(
                f"survival.models.{name}.fitter",
                f"cannot build {target!r}: {reason}; allowed: a lifelines fitter class and its arguments, e.g. lifelines.WeibullAFTFitter",
            ) from None


def fit_unit(clock: str) -> float:
    return FIT_UNITS.get(clock, 1.0)


def analyse(cfg: DictConfig, artefacts: Artefacts) -> pd.DataFrame:
    """The stage: fit and compare the models, write E[T] per attack cell from the selected one.
    Where no model can be fitted or selected (one trained model to split, durations no model
    fits, `survival.fitters: []`), it writes what needs no model (Kaplan-Meier, log-rank,
    competing risks), E[T] as missing, and status.json with the reason, and exits 0: the
    metrics that need no E[T] go on downstream. Its steps each take and return data: `prepared`
    (the data set in the fit's unit), `split_for_fitting` (train and test), `fitted` (every
    fit and the selection), `scored` (Table I), `write_results`."""
    settings = cfg.survival
    check_fitters(settings)
    with pd.option_context("mode.copy_on_write", True):  # a column dropped or assigned no longer copies the frame: 10^7 rows are 3 GB
        study = prepared(cfg, artefacts)
        if not settings.fitters:
            return without_models(study.data, study.budgets, study.out, cfg, "survival.fitters is empty: no survival model was asked for")
        try:
            data, train, test = split_for_fitting(study.data, settings)
        except DataError as err:
            return without_models(study.data, study.budgets, study.out, cfg, f"no survival model could be fitted: {err}")
        study = replace(study, data=data)
        fits = fitted(cfg, study, train, test)
        return write_results(cfg, study, fits, train, scored(fits, study, train, test, settings))


@dataclass(frozen=True)
class Study:
    """The survival data set as the fits read it: durations in the clock's fit unit (`unit`
    of `clock`'s tables' unit), each attack cell's budget, the stage's output folder."""

    data: pd.DataFrame
    budgets: pd.Series
    clock: str
    unit: float
    out: Path


@dataclass(frozen=True)
class Fitted:
    """Every fit, Table I before scoring the selected model, the selection, each model's
    outputs as its fit arrived, and the calibration figure drawn so far."""

    comparison: pd.DataFrame
    fits: dict[str, F.Fit]
    selection: Selection
    outputs: ModelOutputs
    figure: Any
    axes: dict


def prepared(cfg: DictConfig, artefacts: Artefacts) -> Study:
    """The data set read and checked, durations in the fit unit; the competing risks and
    fit_unit.json, which need no model, written."""
    source, out = artefacts.input("survival_data.parquet"), artefacts.output("survival")
    data = read_survival_data(source)
    diagnose(data, str(source))
    clock = str(cfg.clock)
    unit = fit_unit(clock)
    data = data.assign(**{F.DURATION: data[F.DURATION] / unit})
    if unit != 1.0:
        log.info("durations on the %s clock fitted in %s (x %g); E[T] and t* are written back in %s", clock, FIT_UNIT_NAMES[clock], unit, clock)
    out.mkdir(parents=True, exist_ok=True)
    write_competing_risks(data, out, unit, CLOCK_UNIT_NAMES[clock])
    write_json(out / "fit_unit.json", {"clock": clock, "unit": FIT_UNIT_NAMES[clock], "scale": unit})  # what models.pkl's durations are in
    return Study(data, cell_budgets(data), clock, unit, out)


def split_for_fitting(data: pd.DataFrame, settings: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The data (its rows in the split's order), its training and test parts by
    `survival.split_by`, without the covariates the training part cannot identify. A DataError
    where no model can be fitted (one group to split)."""
    data, train, test = split_in_one_copy(data, settings.split_by, settings.test_size, settings.seed)
    train, test = usable_covariates(train, test, DUMMY_SOURCES)
    return data, train, test


def fitted(cfg: DictConfig, study: Study, train: pd.DataFrame, test: pd.DataFrame) -> Fitted:
    """Every configured fitter fitted on `train`, and the AFT model selected (inside the
    training split), with what needs no model (log-rank, the Kaplan-Meier check's curves)
    computed while the first fit runs and each model's E[T], cure fractions and budget
    sufficiency as its fit arrives."""
    settings, data, out = cfg.survival, study.data, study.out
    aft = [name for name in settings.fitters if settings.models[name].aft]
    outputs = ModelOutputs(data, study.budgets, aft, cfg.budget)  # each model's, as its fit arrives
    figure, axes = calibration_grid(list(settings.fitters))
    selection = Selection(settings, data, train, test, study.budgets, outputs.times, axes)

    def select_and_draw(table: pd.DataFrame, fits: dict[str, F.Fit]) -> None:  # as soon as the AFT fits are in, while the others fit
        selection.of_aft_fits(table, fits)
        label = settings.models[selection.name].label if selection.name else None
        save(kaplan_meier_figure(kaplan_meier_fits(data), selection.predicted, label, FIT_UNIT_NAMES[study.clock]), out / "kaplan_meier.png")

    model_free_done = []

    def model_free() -> None:  # while the first fit runs
        write_csv(logrank_table(data), out / "logrank.csv")
        selection.model_free()
        model_free_done.append(True)

    comparison, fits = fit_and_compare(cfg, train, test, axes, outputs.add, select_and_draw, model_free)
    if not model_free_done:  # no fit was made
        model_free()
    if not selection.done:  # no fit arrived to make it
        select_and_draw(comparison, fits)
    return Fitted(comparison, fits, selection, outputs, figure, axes)


def scored(fits: Fitted, study: Study, train: pd.DataFrame, test: pd.DataFrame, settings: Any) -> pd.DataFrame:
    """Table I: every fit's scores, the selected model's on the test split, its times in the
    clock's unit."""
    selection = fits.selection
    comparison = score_selected(fits.comparison, fits.fits.get(selection.name), train, test, selection.t0, tuple(settings.score_range), scored=selection.scored)
    comparison["selected"] = comparison["fitter"] == selection.name
    return in_clock_units(comparison, study.unit, TIME_COLUMNS)  # Table I's times, in the clock's unit


def write_results(cfg: DictConfig, study: Study, fits: Fitted, train: pd.DataFrame, comparison: pd.DataFrame) -> pd.DataFrame:
    """The calibration figure, the coefficients, E[T] per attack cell (missing where no model
    was selected), the Kaplan-Meier check, Table I with its summary, cure fractions, budget
    sufficiency, the fitted models and status.json; logged. Returns Table I as written."""
    settings, out, unit, data = cfg.survival, study.out, study.unit, study.data
    selection, selected = fits.selection, fits.selection.name
    save(finish_calibration(fits.figure, fits.axes, comparison, CLOCK_UNIT_NAMES[study.clock]), out / "calibration.png")
    write_fits(comparison, fits.fits, train, out, settings, selected)
    if selected is None:
        expected = missing_expected_times(study.budgets, selection.reason).join(selection.times, on=CELL)
        (out / "km_check.csv").unlink(missing_ok=True)  # it checks the selected model's E[T]
    else:
        expected = with_breakable_means(selection.expected, fits.fits, data)
        write_csv(in_clock_units(selection.check, unit, ["t_star", "E_T", "E_T_km"]), out / "km_check.csv")
        comparison = with_km_summaries(comparison, selection.summaries)
    write_csv(comparison, out / "aft_comparison.csv")
    write_csv(concordance_within_table(comparison), out / "concordance_within.csv")
    write_csv(in_clock_units(expected, unit, ["E_T", "E_T_unrestricted", "t_star", "E_T_breakable", *selection.times.columns]), out / "expected_times.csv")
    write_cure_fractions(fits.fits, data, out / "cure_fractions.csv", unit, fits.outputs.fractions)
    write_budget_sufficiency(fits.fits, data, study.budgets, out / "budget_sufficiency.csv", cfg.budget, unit, fits.outputs.sufficiency)
    save_models({name: fit.fitter for name, fit in fits.fits.items()}, out / "models.pkl")
    write_status(out, selected, selection.reason)
    log_comparison(comparison, fits.fits, settings, selected)
    if selected is not None:
        for line in km_sentences(selection.check, settings.models[selected].label):
            log.log(logging.WARNING if selection.check["flagged"].any() else logging.INFO, "%s", line)
    return comparison


TIME_COLUMNS = ["t0", "ibs_from", "tau"]  # Table I's times: the calibration time, the IBS's span and Uno's truncation


def fit_and_compare(
    cfg: DictConfig, train: pd.DataFrame, test: pd.DataFrame, axes: dict | None = None, on_fit=None, on_aft_fits=None, meanwhile=None
) -> tuple[pd.DataFrame, dict[str, F.Fit]]:
    """Table I before the selection and the fitted models, each one's training panel drawn on
    `axes` (the calibration figure's); `on_fit(name, fit)` as each fit arrives,
    `on_aft_fits(table, fits)` once the AFT ones are in, `meanwhile()` while the first fits."""
    settings = cfg.survival
    log.info(
        "train/test split by %s: %d / %d groups, %d / %d samples",
        settings.split_by,
        train[settings.split_by].nunique(),
        test[settings.split_by].nunique(),
        F.sample_weights(train).sum(),
        F.sample_weights(test).sum(),
    )
    if train[CLUSTER_BY].nunique() < FEW_CLUSTERS:
        log.warning(
            "cluster-robust standard errors from %d %s clusters (< %d) run small: read them with care", train[CLUSTER_BY].nunique(), CLUSTER_BY, FEW_CLUSTERS
        )
    workers = resolve_workers(cfg.compute.workers, "cpu")
    threads = threads_per_cell(workers, cfg.compute.threads)
    return compare(train, test, settings, axes, workers, threads, on_fit, on_aft_fits, meanwhile)


def write_fits(comparison: pd.DataFrame, fits: dict[str, F.Fit], train: pd.DataFrame, out: Path, settings: Any, selected: str | None) -> None:
    """Table I in LaTeX, the coefficients (table, a figure per fit, the selected one's as coefficients.png)."""
    with atomic_path(out / "aft_comparison.tex") as tmp:
        tmp.write_text(latex_table(comparison, settings.test_size, validation.chosen_by(settings)))
    coefficients = coefficient_table(fits, train)
    write_csv(coefficients, out / "coefficients.csv")
    for name, fit in fits.items():
        figure = coefficient_figure(coefficients[coefficients["fitter"] == name], settings.models[name].label, fit.is_cox)
        save(figure, out / "coefficients" / f"{name}.png")
    if selected is None:
        (out / "coefficients.png").unlink(missing_ok=True)
        return
    with atomic_path(out / "coefficients.png") as tmp:
        shutil.copyfile(out / "coefficients" / f"{selected}.png", tmp)


def without_models(data: pd.DataFrame, budgets: pd.Series, out: Path, cfg: DictConfig, reason: str) -> pd.DataFrame:
    """The survival stage where no model can be fitted: Table I with each configured fitter
    not fitted (and why), E[T] missing per attack cell, the Kaplan-Meier curves without a model's."""
    log.warning("survival models left out, so TRASH is missing downstream: %s", reason)
    write_csv(logrank_table(data), out / "logrank.csv")
    settings = cfg.survival
    rows = [
        {"fitter": name, "model": settings.models[name].label, "aft": bool(settings.models[name].aft), "status": "skipped", "note": reason}
        for name in settings.fitters
    ]
    comparison = pd.DataFrame(rows, columns=["fitter", "model", "aft", "status", "note"]).assign(split_by=settings.split_by, selected=False)
    write_csv(comparison, out / "aft_comparison.csv")
    write_csv(missing_expected_times(budgets, reason), out / "expected_times.csv")
    save(kaplan_meier_figure(kaplan_meier_fits(data), {}, None, FIT_UNIT_NAMES[str(cfg.clock)]), out / "kaplan_meier.png")
    for stale in (
        "km_check.csv",
        "concordance_within.csv",
        "coefficients.csv",
        "coefficients.png",
        "calibration.png",
        "aft_comparison.tex",
        "models.pkl",
        "cure_fractions.csv",
        "budget_sufficiency.csv",
    ):
        (out / stale).unlink(missing_ok=True)
    shutil.rmtree(out / "coefficients", ignore_errors=True)
    write_status(out, None, reason)
    return comparison


def missing_expected_times(budgets: pd.Series, reason: str) -> pd.DataFrame:
    """expected_times.csv without a model: every attack cell, its budget t*, E[T] missing."""
    return pd.DataFrame({CELL: budgets.index, "E_T": np.nan, "E_T_unrestricted": np.nan, "t_star": budgets.to_numpy(float), "fitter": "", "note": reason})


STATUS = "status.json"


def write_status(out: Path, selected: str | None, reason: str | None) -> None:
    """status.json: the model whose E[T] feeds TRASH, or null and why none does (aggregate and
    the report name it where TRASH is missing)."""
    write_json(out / STATUS, {"selected": selected, "reason": reason})


def log_comparison(comparison: pd.DataFrame, fits: dict[str, F.Fit], settings: Any, selected: str | None) -> None:
    shown = comparison.drop(columns=["note", "aft", "model", "split_by", "km_worst_cells"] + [c for c in comparison if "[" in c], errors="ignore")
    log.info(
        "fitted %s of %s; selected %s\n%s",
        ", ".join(fits) or "none",
        ", ".join(settings.fitters),
        f"{selected} ({validation.chosen_by(settings)})" if selected else "none",
        shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
    )
    for line in baseline_verdicts(comparison):
        log.info("%s", line)
    log.info("within attack cells (pairs of one cell only; the baselines are 0.5 there): test concordance %s", within_summary(comparison))
