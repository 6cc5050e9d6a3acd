"""Stage `aggregate`: every robustness metric of the four papers from the recorded runs.

Per model cell and attack family (an attack with one norm: fgm linf, fgm l2, pgd linf ...):
TRASH and its benign analogue with failure rates (003), EVP (001) and the normalised AUC R
(004), plus their curves over tau, over grid refinement and over eps. Per model cell, the
brittle-score (002) with its relative improvement. Over seeds (permutations), Student's t
intervals of TRASH and 004's mean/SD tables of R. One JSON card per trained cell, and the
headline metrics DVC tracks. P(0) for EVP and R is the benign accuracy on the attacked subset.
Survival in eps (trashfire.survival.epsilon): per model cell and family, the Kaplan-Meier curve
of the samples still standing against eps, its normalised area, and the area's rank
correlation with EVP and R over model cells.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from trashfire import metrics
from trashfire.brittle.spec import BRITTLE, read_current_scores
from trashfire.core import external, schema
from trashfire.core.csvtext import write_csv
from trashfire.core.errors import DataError
from trashfire.core.groups import group_order, split
from trashfire.core.parallel import FORK_CELLS, beside, resolve_workers
from trashfire.core.records import atomic_path, dead_temps_removed, read_json, read_table, write_json
from trashfire.core.schema import CELL, OVER_SEEDS, UNDEFENDED_PEER
from trashfire.core.stage import Artefacts
from trashfire.metrics import findings, optimality, registry, validity
from trashfire.metrics.cards import write_cards
from trashfire.metrics.registry import degenerate_cells, non_degenerate, spearman_by_dataset, survival_headline  # noqa: F401  (also this module's API)
from trashfire.survival import epsilon
from trashfire.tables.distances import ensemble
from trashfire.tables.experiments import read_experiments
from trashfire.tables.worst_case import measured

log = logging.getLogger(__name__)


def with_family(experiments: pd.DataFrame) -> pd.DataFrame:
    """experiments.csv with each row's attack family (schema.attack_family: 'fgm linf')."""
    return experiments.assign(attack_family=schema.attack_family(experiments["attack"], experiments["norm"]))


def trash_table(experiments: pd.DataFrame, expected: pd.DataFrame, eps_max: float | None) -> pd.DataFrame:
    """TRASH (003 eq. 9) per model cell and attack family: t_train / E[T | 0 < eps <= eps_max].
    E[T] is expected_times.csv's `E_T`: the selected survival model's restricted mean
    int_0^{t*} S(u | x) du per attack cell (t* the cell's budget), averaged over the cell's
    samples, per sample like t_train, on the configured clock; here averaged over the
    family's cells. Beside it, TRASH on every clock (`expected_on_clocks`) and E[T]'s
    decomposition into queries to failure and latency per query (003's depth claim).
    `E_T_source` names that E[T]: the fitter's restricted mean over all samples, the
    never-broken ones included (a cure model's E_T_breakable, over the breakable ones only, is
    in expected_times.csv beside it). `censored_share` beside it: the share of the family's
    attacked samples still unbroken at the budget, where E[T] is mostly the budget itself."""
    source = expected["fitter"].astype(str) + " restricted mean to t*, all samples" if "fitter" in expected else pd.Series("", index=expected.index)
    cells = experiments.merge(expected[["attack_hash", "E_T"]].assign(E_T_source=source), on="attack_hash", how="left")
    if eps_max is not None:
        cells = cells[cells["attack_value"] <= eps_max]
    missing = {
        f"t_train_{clock}": np.nan for clock in schema.CLOCKS if f"t_train_{clock}" not in cells
    }  # records that all lack a clock's t_train (imported models without FLOPs) leave no column
    counted = {"n_censored": cells.get("n_censored", pd.Series(np.nan, index=cells.index)).astype(float)}
    counted["n_attacked"] = counted["n_censored"] + cells.get("n_events", pd.Series(np.nan, index=cells.index)).astype(float)
    cells = expected_on_clocks(cells.assign(f_adv=metrics.failure_rate(cells["acc_adv"], cells["t_attack"]), **missing, **counted))
    per_clock = {f"{q}_{clock}": (f"{q}_{clock}", "first" if q == "t_train" else "mean") for clock in schema.CLOCKS for q in ("t_train", "E_T")}
    table = (
        cells.groupby(CELL, dropna=False)
        .agg(
            t_train=("t_train", "first"),
            t_predict=("t_predict", "first"),
            acc_ben=("acc_ben", "first"),
            acc_adv=("acc_adv", "mean"),
            t_attack=("t_attack", "mean"),
            E_T=("E_T", "mean"),
            n_censored=("n_censored", "sum"),
            n_attacked=("n_attacked", "sum"),
            E_T_source=("E_T_source", "first"),
            f_adv=("f_adv", "mean"),
            eps_max=("attack_value", "max"),
            **per_clock,
            E_Q=("E_Q", "mean"),
            E_G=("E_G", "mean"),
            **{column: (column, "mean") for column in schema.LATENCY},
        )
        .reset_index()
    )
    table["censored_share"] = table["n_censored"] / table["n_attacked"].where(table["n_attacked"] > 0)
    table["f_ben"] = metrics.failure_rate(table["acc_ben"], table["t_predict"])
    table["trash_adv"] = metrics.trash(table["t_train"], table["E_T"])
    table["trash_ben"] = metrics.trash_benign(table["t_train"], table["acc_ben"], table["t_predict"])
    for clock in schema.CLOCKS:
        table[f"trash_adv_{clock}"] = metrics.trash(table[f"t_train_{clock}"], table[f"E_T_{clock}"])
    return table[schema.without(schema.TRASH, "degenerate")]  # the aggregate flags degenerate cells after


def expected_on_clocks(cells: pd.DataFrame) -> pd.DataFrame:
    """Each attack cell's E[T] on every clock, from the one the survival model was fitted on
    (`clock`): E[T] = the compute until failure x the cell's priced seconds per FLOP
    (seconds_per_flop_<clock>: what its samples' seconds were priced at), so E_T_flops =
    E_T / seconds_per_flop_<clock> and E_T_<other> = E_T_flops x seconds_per_flop_<other>.
    Also E_Q and E_G, the queries and gradients to failure per sample (restricted to the
    budget: what the model withstands), and the latency of a query: the model's FLOPs per
    forward, and their seconds on each seconds clock (E_T_flops = E_Q x forward + E_G x what a
    backward adds)."""
    clock = str(cells["clock"].iloc[0]) if len(cells) else schema.COMPUTE
    rate = {c: cells.get(f"seconds_per_flop_{c}", pd.Series(np.nan, index=cells.index)).astype(float) for c in schema.SECONDS}
    compute = cells["E_T"] if clock == schema.COMPUTE else cells["E_T"] / rate[clock]
    on_clocks = {f"E_T_{schema.COMPUTE}": compute} | {f"E_T_{c}": cells["E_T"] if c == clock else compute * rate[c] for c in schema.SECONDS}
    missing = pd.Series(np.nan, index=cells.index)
    flops_per_query = cells.get("flops_forward", missing).astype(float)  # the model's own cost of a query, whatever the attack
    latency = {each.latency: flops_per_query if each.name == schema.COMPUTE else flops_per_query * rate[each.name] for each in schema.CLOCK_LIST}
    robustness = {"E_Q": cells.get("queries_mean", missing).astype(float), "E_G": cells.get("gradients_mean", missing).astype(float)}
    return cells.assign(**on_clocks, **robustness, **latency)


def depth_decomposition(trash: pd.DataFrame) -> pd.DataFrame:
    """003's depth claim per depth: over the sound undefended model cells (seeds averaged) of
    each data set, model, epochs and attack family, E[T] on every clock beside its two
    factors, E[queries to failure] (what the model resists) and the latency per query (FLOPs,
    and seconds on each clock: what each query costs)."""
    rows = trash[(trash["defence"] == "none") & ~trash["degenerate"].astype(bool)]
    keys = ["dataset", "model", "depth", "epochs", "attack_family"]
    columns = ["E_Q", "E_G", *schema.LATENCY, *(f"{q}_{c}" for c in schema.CLOCKS for q in ("E_T", "t_train"))]
    if rows.empty:
        return pd.DataFrame(columns=schema.DEPTH_DECOMPOSITION)
    table = rows.groupby(keys, dropna=False).agg(n_model_cells=("model_hash", "nunique"), **{c: (c, "mean") for c in columns}).reset_index()
    return table.sort_values(["dataset", "attack_family", "model", "epochs", "depth"], kind="stable")[schema.DEPTH_DECOMPOSITION]


def trash_summary(trash: pd.DataFrame) -> pd.DataFrame:
    """TRASH over seeds (each seed's model cell is its own trained model: the unit): the
    geometric mean (TRASH is a ratio; its logs are near normal) with the 95% t interval of the
    mean log taken back (none from one seed); the failure rates' plain means."""
    rows = []
    for key, group in trash.groupby(OVER_SEEDS, dropna=False):
        row = dict(zip(OVER_SEEDS, key)) | {"n_seeds": len(group)}
        for column in ("trash_adv", "trash_ben"):
            mean, lo, hi = metrics.mean_interval(group[column], log=True)
            row |= {f"{column}_mean": mean, f"{column}_lo": lo, f"{column}_hi": hi}
        means = {f"{c}_mean": group[c].mean() if c in group else np.nan for c in ("E_T", "censored_share")}
        rows.append(row | means | {"f_ben_mean": group["f_ben"].mean(), "f_adv_mean": group["f_adv"].mean()})
    return pd.DataFrame(rows, columns=schema.TRASH_SUMMARY)


def eps_curves(experiments: pd.DataFrame) -> pd.DataFrame:
    """Accuracy against eps per model cell and eps family, the benign point at eps = 0 first,
    in the configured, standardised and pixel units (each converted from the configured eps
    by the schema's to_standardised and to_pixel), raw and normalised by the benign point."""
    attacked = experiments[experiments["attack_param"] == "eps"]
    if attacked.empty:
        return pd.DataFrame(columns=schema.CURVES)
    benign = attacked.drop_duplicates(CELL).assign(attack_value=0.0)
    benign["acc_adv"] = benign["acc_ben_attack_subset"]
    curves = pd.concat([benign, attacked]).sort_values(CELL + ["attack_value"], kind="stable")
    curves = curves.rename(columns={"attack_value": "eps", "acc_adv": "acc"})
    units = curves["attack_units"] if "attack_units" in curves else pd.Series("standardised", index=curves.index)
    curves["pixel_std"] = curves["pixel_std"] if "pixel_std" in curves else np.nan
    curves["eps_standardised"] = schema.to_standardised(curves["eps"].astype(float), units, curves["pixel_std"])
    curves["eps_pixel"] = schema.to_pixel(curves["eps"].astype(float), units, curves["pixel_std"])
    start = curves.groupby(CELL, dropna=False)["acc"].transform("first")
    curves["acc_norm"] = curves["acc"] / start.where(start > 0)
    return curves[schema.CURVES].reset_index(drop=True)


SHORT_OF_NONVIABILITY = "grid does not reach non-viability"
DEGENERATE_NOTE = "degenerate model cell (benign accuracy at or below the degeneracy threshold): no EVP or R"


def robustness_table(curves: pd.DataFrame, viability: DictConfig, auc: DictConfig, degenerate: pd.Series | None = None) -> pd.DataFrame:
    """The per-curve metrics of the registry (EVP ...) and R = 1 - S per model cell and eps
    family. R is computed on the eps axis of `auc.units` (R is scale-free, so this equals R on
    the other axis over the converted bounds). Guards: a degenerate model cell (`degenerate`,
    by model hash) gets none of them, a curve still viable at its largest eps says so
    (`reaches_nonviability`, the note): its EVP is bounded by the grid, not by the model."""
    degenerate = degenerate if degenerate is not None else pd.Series(dtype=bool)
    settings = AucSettings(str(auc.units), auc.eps0, auc.eps1)
    thresholds = Thresholds(viability)
    order, starts = group_order(curves, CELL)
    heads = curves.iloc[order[starts]]
    columns = ["eps_standardised", "acc", schema.eps_column(settings.units)]
    eps, accs, auc_eps = (split(curves[c].to_numpy(), order, starts) for c in columns)
    bounds, classes = np.append(starts, len(order)), heads["n_classes"].to_numpy()
    rows = []
    for i, key in enumerate(zip(*(heads[c] for c in CELL))):
        labels = dict(zip(CELL, key))
        acc = accs[i].astype(float)
        n_classes = int(classes[i])
        threshold = thresholds.of(n_classes)
        r, s, upper, note = _auc(auc_eps[i].astype(float), acc, settings)
        curve = _Curve(curves, order[bounds[i] : bounds[i + 1]])
        values = {m.name: m.on_arrays(eps[i], acc, threshold) if m.on_arrays else m.compute(curve.frame(), threshold) for m in registry.CURVE_METRICS}
        reaches = bool(acc[-1] < threshold)
        flagged = bool(degenerate.get(labels["model_hash"], False))
        if flagged:
            values, r, s, note = dict.fromkeys(values, np.nan), np.nan, np.nan, DEGENERATE_NOTE
        elif not reaches:
            note = "; ".join(filter(None, [f"{SHORT_OF_NONVIABILITY} (accuracy {acc[-1]:.2f} >= tau {threshold:.2f} at the largest eps)", note]))
        rows.append(
            labels
            | {"n_classes": n_classes, "acc_ben": acc[0], "tau": threshold}
            | values
            | {
                "auc_R": r,
                "auc_S": s,
                "auc_units": settings.units,
                "eps0": settings.eps0,
                "eps1": upper,
                "degenerate": flagged,
                "reaches_nonviability": reaches,
                "note": note,
            }
        )
    return pd.DataFrame(rows, columns=schema.robustness_columns(registry.curve_metric_names()))


class _Curve:
    """One curve's rows of curves.csv, made a frame only for a metric that asks for one."""

    def __init__(self, curves: pd.DataFrame, rows: np.ndarray):
        self.curves, self.rows = curves, rows

    def frame(self) -> pd.DataFrame:
        return self.curves.iloc[self.rows]


class Thresholds:
    """The viability threshold per number of classes, each computed once (the config's
    attributes cost more to read than a curve's metrics cost to compute)."""

    def __init__(self, viability: DictConfig):
        self.tau, self.w, self.known = viability.get("tau"), viability.w, {}

    def of(self, n_classes: int) -> float:
        if n_classes not in self.known:
            self.known[n_classes] = self.tau if self.tau is not None else metrics.viability_threshold(n_classes, self.w)
        return self.known[n_classes]


@dataclass(frozen=True)
class AucSettings:
    """metrics.auc read once: the eps axis R is computed on and its bounds."""

    units: str
    eps0: float
    eps1: float | None


def _auc(eps: np.ndarray, acc: np.ndarray, auc: AucSettings) -> tuple[float, float, float, str]:
    upper = eps[-1] if auc.eps1 is None else auc.eps1
    if np.isnan(eps).any():
        return np.nan, np.nan, upper, "pixel_std not recorded for this cell (an older attack record): delete reports/attacks and rerun"
    try:
        r = metrics.robustness_auc(eps, acc, auc.eps0, upper)
    except ValueError as err:  # e.g. no benign accuracy on the subset, or a grid short of eps1
        return np.nan, np.nan, upper, str(err)
    return r, 1 - r, upper, ""


def curve_arrays(curves: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, list[list[np.ndarray]]]:
    """Each curve's (model cell and family's, in groupby's order) labels, one row per curve,
    and its points' `columns` as arrays: what a frame per curve would hold, without the frames."""
    order, starts = group_order(curves, CELL)
    labels = curves.iloc[order[starts]][CELL].reset_index(drop=True)
    return labels, [split(curves[c].to_numpy(), order, starts) for c in columns]


def evp_tau_table(curves: pd.DataFrame, points: int) -> pd.DataFrame:
    """EVP as a function of the viability threshold (001 Fig. 7)."""
    if curves.empty:
        return pd.DataFrame(columns=schema.EVP_TAU)
    taus = np.linspace(0.0, 1.0, points)
    labels, (eps, acc) = curve_arrays(curves, ["eps_standardised", "acc"])
    values = [metrics.evp_over_thresholds(e, a, taus) for e, a in zip(eps, acc)]
    table = labels.loc[np.repeat(labels.index, len(taus))].reset_index(drop=True)
    return table.assign(tau=np.tile(taus, len(labels)), evp=np.concatenate(values))[schema.EVP_TAU]


def evp_convergence_table(curves: pd.DataFrame, viability: DictConfig) -> pd.DataFrame:
    """EVP on nested sub-grids of each recorded eps grid (001 Fig. 8)."""
    if curves.empty:
        return pd.DataFrame(columns=schema.EVP_CONVERGENCE)
    thresholds = Thresholds(viability)
    labels, (eps, acc, n_classes) = curve_arrays(curves, ["eps_standardised", "acc", "n_classes"])
    curve, intervals, values, taus = [], [], [], []
    for i, (e, a, k) in enumerate(zip(eps, acc, n_classes)):
        threshold = thresholds.of(int(k[0]))
        for n, value in metrics.evp_convergence(e, a, threshold):
            curve.append(i), intervals.append(n), values.append(value), taus.append(threshold)
    table = labels.loc[curve].reset_index(drop=True)
    return table.assign(n_intervals=intervals, evp=values, tau=taus)[schema.EVP_CONVERGENCE]


def tau_table(classes: list[int], w: float, datasets: dict[str, int]) -> pd.DataFrame:
    """tau(K) for 001's Table I and for each data set's K."""
    rows = [{"n_classes": k, "tau": t, "w": w, "source": "001 Table I"} for k, t in metrics.viability_table(classes, w)]
    rows += [{"n_classes": k, "tau": metrics.viability_threshold(k, w), "w": w, "source": name} for name, k in datasets.items()]
    return pd.DataFrame(rows, columns=schema.TAU_TABLE)


def auc_table(robustness: pd.DataFrame) -> pd.DataFrame:
    """004's appendix tables: R and S, mean and SD across seeds (SD is NaN for one seed)."""
    grouped = robustness.groupby(schema.without(OVER_SEEDS, "attack", "norm"), dropna=False)
    table = grouped.agg(n_seeds=("auc_R", "count"), R_mean=("auc_R", "mean"), R_sd=("auc_R", "std"), S_mean=("auc_S", "mean"), S_sd=("auc_S", "std"))
    return table.reset_index()[schema.AUC_TABLE]


def read_brittle(path: Path, model_hashes) -> pd.DataFrame:
    """The brittle stage's record of each model cell (its brittle_scores.json)."""
    return pd.DataFrame([record.to_json() for record in read_current_scores(path, model_hashes)])


def brittle_table(brittle: pd.DataFrame, experiments: pd.DataFrame, robust: DictConfig) -> pd.DataFrame:
    """The brittle-score per model cell, R.I. against the undefended model cell of the same
    trained configuration (002 eq. 3), and the accuracy under the attack 002 Fig. 4 plots."""
    undefended = brittle[brittle["defence"] == "none"].set_index(UNDEFENDED_PEER)["brittle_score"]
    peers = brittle.set_index(UNDEFENDED_PEER).index
    standard = undefended.reindex(peers).to_numpy() if undefended.index.is_unique else np.full(len(brittle), np.nan)
    table = brittle.assign(brittle_ri=[metrics.relative_improvement(s, b) for s, b in zip(standard, brittle["brittle_score"])])
    robust_acc = robust_accuracy(experiments, robust)
    table = table.merge(robust_acc.rename("robust_acc"), left_on="model_hash", right_index=True, how="left")
    return table.assign(robust_attack=_robust_label(robust))


def robust_accuracy(experiments: pd.DataFrame, robust: DictConfig) -> pd.Series:
    """Per model cell: accuracy under `robust.attack` in `robust.norm`, at `robust.eps` or
    averaged over that attack's grid."""
    chosen = experiments[(experiments["attack"] == robust.attack) & (experiments["norm"].astype(str) == str(robust.norm))]
    if robust.eps is not None:
        chosen = chosen[np.isclose(chosen["attack_value"], robust.eps)]
    # rounded: means of equal accuracies that differ in the last bit must tie in the rankings
    return chosen.groupby("model_hash")["acc_adv"].mean().round(12)


def _robust_label(robust: DictConfig) -> str:
    where = "mean over its grid" if robust.eps is None else f"eps {robust.eps}"
    return f"{schema.attack_family(robust.attack, robust.norm)}, {where}"


def headline(
    experiments,
    trash,
    robustness,
    brittle,
    comparison,
    checked: list[schema.Finding] | tuple = (),
    eps_survival=None,
    flags: pd.DataFrame | None = None,
    settings: DictConfig | None = None,
    worst_case: pd.DataFrame | None = None,
    survival_reason: str | None = None,
) -> dict:
    """metrics.json, the metrics DVC tracks: every metric of the registry (trashfire.metrics.registry.HEADLINE).
    Means and medians leave degenerate model cells out; EVP is averaged over the curves that
    reach non-viability, the others apart."""
    results = registry.Results(
        experiments,
        trash,
        robustness,
        brittle,
        comparison,
        tuple(checked),
        eps_survival=eps_survival,
        validity=flags,
        settings=settings,
        worst_case=worst_case,
        survival_reason=survival_reason,
    )
    return registry.headline(results)


def headline_summary(summary: dict) -> dict:
    """headline.json, the metrics DVC shows per experiment (`dvc exp show`): a dozen keys of
    metrics.json, flat, so that a table of experiments fits a terminal. metrics.json keeps
    every metric."""
    by_clock = summary.get("trash_adv_median_by_clock") or {}
    verdicts = [finding.get("verdict") for finding in (summary.get("findings") or {}).values()]
    return {
        "acc_ben": summary.get("acc_ben_mean"),
        "acc_adv": summary.get("acc_adv_mean"),
        "evp": summary.get("evp_mean"),
        "auc_R": summary.get("auc_R_mean"),
        **{f"trash_{clock}": by_clock.get(clock) for clock in schema.CLOCKS},
        "survival_c_test": summary.get("survival_test_concordance"),
        **{f"findings_{verdict.replace(' ', '_')}": verdicts.count(verdict) for verdict in findings.VERDICTS},
    }


def read_distances(path: Path) -> pd.DataFrame:
    """attack_distances.parquet (timing); missing, it names the stage to run."""
    if not path.is_file():
        raise DataError(f"{path} not found; run `dvc repro timing` first")
    return read_table(path)


def read_eps_survival_data(path: Path) -> pd.DataFrame:
    """timing's eps_survival_data.parquet; missing, it names the stage to run."""
    if not path.is_file():
        raise DataError(f"{path} not found; run `dvc repro timing` first")
    return read_table(path)


def trained_models(experiments: pd.DataFrame) -> pd.DataFrame:
    """One row per trained model: its undefended model cell where it has one (predict-time
    defences share its weights), else its only one (a train-time defence)."""
    cells = experiments.drop_duplicates("model_hash")
    return cells.assign(_own=cells["defence"] != "none").sort_values("_own", kind="stable").drop_duplicates("train_hash").drop(columns="_own")


def check_findings(
    experiments, trash, robustness, brittle, settings: DictConfig, survival_reason: str | None = None, defence_stages: dict | None = None
) -> list[schema.Finding]:
    """The papers' claims; those about time on the configured clock and on every other."""
    clock = str(experiments["clock"].iloc[0]) if "clock" in experiments and len(experiments) else schema.COMPUTE
    tables = findings.Tables(
        trained=trained_models(experiments),
        robustness=robustness,
        trash=trash,
        brittle=brittle,
        clock=clock,
        survival_reason=survival_reason or "",
        defence_stages=defence_stages or {},
    )
    others = tuple(c for c in schema.CLOCKS if c != clock)
    return findings.check_findings(tables, finding_settings(settings), other_clocks=others)


def finding_settings(settings: DictConfig) -> findings.Settings:
    """metrics.findings as the findings' Settings."""
    plain = OmegaConf.to_container(settings, resolve=True)
    return findings.Settings(alpha=plain["alpha"], seed=plain["seed"], smallest=plain["smallest"], margin=plain["margin"])


def write_tables(artefacts: Artefacts, tables: dict[str, pd.DataFrame]) -> None:
    for name, table in tables.items():
        with atomic_path(artefacts.output(name)) as tmp:
            write_csv(table, tmp)  # to_csv's bytes; its millions of curve points were most of the stage at 10^5 cells


def without_nan(value: Any) -> Any:
    """NaN as null: metrics.json is read by DVC and by tools (jq, JavaScript) whose JSON has no NaN."""
    if isinstance(value, dict):
        return {k: without_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_nan(v) for v in value]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return None
    return value


def survival_reason(path: Path) -> str | None:
    """Why no survival model gives E[T] (survival/status.json's reason), or None where one does."""
    return (read_json(path).get("reason") or None) if Path(path).is_file() else None


def read_optional(path) -> pd.DataFrame | None:
    """A table the survival stage writes only for some configurations (a cure model's)."""
    return pd.read_csv(path) if Path(path).is_file() else None


def publishers_figures(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """What the publishers of the imported models report of them (RobustBench's model info),
    per model option, for the cards to set beside ours."""
    figures = {name: external.reported(f"model.{name}", spec) for name, spec in cfg.model.items() if external.is_external(spec)}
    return {name: f for name, f in figures.items() if f}


def aggregate_reports(cfg: DictConfig, artefacts: Artefacts) -> dict:
    with dead_temps_removed(artefacts.output("trash.csv").parent, artefacts.output("cards")):
        return _aggregate_reports(cfg, artefacts)


def _aggregate_reports(cfg: DictConfig, artefacts: Artefacts) -> dict:
    every_row = with_family(read_experiments(artefacts.input("experiments.csv")))
    experiments, worst = measured(every_row), every_row[every_row["attack"] == schema.WORST_CASE]
    degenerate = degenerate_cells(experiments)
    workers, m = resolve_workers("auto", "cpu") if len(experiments) >= FORK_CELLS else 1, cfg.metrics
    # survival in eps reads a table of its own and writes two (at 10^7 samples 15 s of the
    # stage's 60 on one core): a forked worker makes them while this process makes the rest
    eps_survival, made = beside(
        lambda: write_eps_survival(artefacts, experiments, degenerate),
        lambda: grid_tables(cfg, artefacts, every_row, experiments, degenerate),
        workers,
        log.name,
    )
    # a card per trained model (10 s at 10^7 samples), written by a forked worker beside the tables
    cards = lambda: write_cards(  # noqa: E731
        artefacts.output("cards"),
        experiments,
        made.trash,
        made.robustness,
        made.brittle,
        made.flags,
        worst,
        reported=publishers_figures(cfg),
        ensemble=optimality.ensemble_at_grid(made.every_curve),
        optimality=made.optimality,
        certified=made.certified,
    )
    beside(cards, lambda: write_tables(artefacts, made.tables(m, cfg.viability)), workers, log.name)
    summary = headline(
        experiments, made.trash, made.robustness, made.brittle, made.comparison, made.checked, eps_survival, made.flags, m, worst, made.no_expected_time
    )
    write_json(artefacts.output("metrics.json"), without_nan(summary))
    write_json(artefacts.output("headline.json"), without_nan(headline_summary(summary)))
    shown = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    log.info("%s", ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
    for finding in made.checked:
        log.info("finding %s: %s (%s)", finding.id, finding.verdict, finding.detail)
    return summary


def write_eps_survival(artefacts: Artefacts, experiments: pd.DataFrame, degenerate: dict) -> pd.DataFrame:
    """eps_survival.csv and eps_survival_curves.csv from timing's eps samples; returns the first."""
    eps_survival, eps_curves_table = epsilon.survival_tables(read_eps_survival_data(artefacts.input("eps_survival_data.parquet")), experiments, degenerate)
    write_tables(artefacts, {"eps_survival.csv": eps_survival, "eps_survival_curves.csv": eps_curves_table})
    return eps_survival


@dataclass
class GridTables:
    """What the stage computes from the grid's cells (all but survival in eps)."""

    trash: pd.DataFrame
    every_curve: pd.DataFrame
    every_robustness: pd.DataFrame
    curves: pd.DataFrame
    robustness: pd.DataFrame
    optimality: pd.DataFrame
    brittle: pd.DataFrame
    checked: list
    flags: pd.DataFrame
    certified: pd.DataFrame | None
    comparison: pd.DataFrame
    no_expected_time: str | None
    classes: dict

    def tables(self, m: DictConfig, viability: DictConfig) -> dict[str, pd.DataFrame]:
        """The CSV tables, by file name (survival in eps's are written apart)."""
        return {
            "trash.csv": self.trash,
            "depth_decomposition.csv": depth_decomposition(self.trash),
            "trash_summary.csv": trash_summary(self.trash),
            "robustness.csv": self.every_robustness,
            "auc_table.csv": auc_table(self.robustness),
            "curves.csv": self.every_curve,
            "tau_table.csv": tau_table(list(m.evp.table_classes), viability.w, self.classes),
            "evp_tau.csv": evp_tau_table(self.curves, m.evp.tau_grid),
            "evp_convergence.csv": evp_convergence_table(self.curves, viability),
            "brittle.csv": self.brittle,
            "findings.csv": findings.findings_frame(self.checked),
            "validity.csv": self.flags,
            "optimality.csv": self.optimality,
            "optimality_ranking.csv": optimality.ranking(self.optimality),
        }


def grid_tables(cfg: DictConfig, artefacts: Artefacts, every_row: pd.DataFrame, experiments: pd.DataFrame, degenerate: dict) -> GridTables:
    expected = pd.read_csv(artefacts.input("survival/expected_times.csv"))
    comparison = pd.read_csv(artefacts.input("survival/aft_comparison.csv"))
    no_expected_time = survival_reason(artefacts.input("survival/status.json"))
    m = cfg.metrics
    trash = trash_table(experiments, expected, m.trash.eps_max).assign(degenerate=lambda t: t["model_hash"].map(degenerate))
    # the worst cases' curves and R are written beside the attacks'; the flags, findings,
    # cards and means read the attacks' own
    distances = read_distances(artefacts.input("attack_distances.parquet"))
    best = ensemble(distances)
    grid_curves = eps_curves(every_row)
    every_curve = pd.concat([grid_curves, optimality.ensemble_curves(best, grid_curves, m.optimality.curve_points)], ignore_index=True)
    every_robustness = robustness_table(every_curve, cfg.viability, m.auc, degenerate)
    attack_optimality = optimality.optimality_table(distances, best)
    curves, robustness = measured(every_curve), measured(every_robustness)
    records = read_brittle(artefacts.input("brittle_scores.json"), experiments["model_hash"].unique())
    stages = {name: spec.stage for name, spec in cfg.defence.items()} | {"none": "none"}
    brittle = brittle_table(records, experiments, m.brittle.robust_acc).assign(
        degenerate=lambda t: t["model_hash"].map(degenerate), defence_stage=lambda t: t["defence"].map(stages)
    )[BRITTLE]
    checked = check_findings(experiments, trash, robustness, brittle, m.findings, no_expected_time, stages)
    sufficiency, competing = read_optional(artefacts.input("budget/sufficiency.csv")), read_optional(artefacts.input("survival/competing_risks.csv"))
    certified = read_optional(artefacts.input("certified.csv"))
    flags = validity.validity_table(experiments, curves, validity.tolerances(cfg), sufficiency, competing, attack_optimality, m.optimality.far_below, certified)
    classes = experiments.groupby("dataset")["n_classes"].first().astype(int).to_dict()
    return GridTables(
        trash, every_curve, every_robustness, curves, robustness, attack_optimality, brittle, checked, flags, certified, comparison, no_expected_time, classes
    )
