"""The four papers' qualitative claims, each checked with a statistical test on the pipeline's tables.

Pure functions over pandas DataFrames: `check_findings` returns one `Finding` per claim with its
statistic, 95% interval, raw and Holm-adjusted p-values, smallest effect of interest, the effect
the run detects at 80% power and a verdict (trashfire.metrics.verdicts); the caller writes them
out (`findings_frame`, `findings_metrics`). Every test first drops degenerate (chance-level)
rows and rows with NaN in the columns it uses, averages the cells of one independent unit (a
trained model, or a (configuration, seed) unit: its attack families, eps values and
predict-time defences) into one value, and tests over units (trashfire.core.inference); it says
"not testable" -- with the Hydra override that would fix it -- when the grid lacks what it needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import stats

from trashfire.core import inference, schema
from trashfire.core.schema import CONFIGURATION, MODEL_LABELS, TRAINED_LABELS, Finding, without
from trashfire.core.stats import significant, spearman
from trashfire.metrics.verdicts import BELOW, DIRECTIONAL, EQUIVALENCE, OTHER_CLOCK, VERDICTS, Tested, adjust, not_testable, tested

HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE = VERDICTS
NAN = float("nan")

# A model cell's configuration (schema.CONFIGURATION: its labels minus seed, depth and
# defence): two cells sharing it differ only in what the claim compares. pretrained_on is NaN
# for from-scratch cells and must still match itself (with_keys).
TRAINING = CONFIGURATION
# A model cell's labels without its defence's strength: cells at several strengths of one
# defence are averaged within their unit, not paired crosswise.
UNSTRENGTHENED = without(MODEL_LABELS, "depth", "defence_param", "defence_value")


@dataclass
class Tables:
    trained: pd.DataFrame
    robustness: pd.DataFrame
    trash: pd.DataFrame
    brittle: pd.DataFrame
    clock: str = ""  # the clock of t_train, E_T and trash_adv (schema.CLOCKS)
    survival_reason: str = ""  # why no survival model gives E[T] (then none has a TRASH), "" where one does
    defence_stages: Mapping[str, str] = field(default_factory=dict)  # defence -> "train" or "predict" (conf's `stage`)


@dataclass(frozen=True)
class Settings:
    """metrics.findings: the family-wise level, the permutation tests' seed, and per claim its
    smallest effect of interest (`smallest`) or its equivalence margin (`margin`), in the
    claim's own units (conf/metrics/default.yaml gives each its reason)."""

    alpha: float = 0.05
    seed: int = 0
    smallest: Mapping[str, float] = field(default_factory=dict)
    margin: Mapping[str, float] = field(default_factory=dict)

    def of(self, key: str) -> float:
        value = self.smallest.get(key, self.margin.get(key))
        if value is None:
            raise KeyError(f"metrics.findings has no smallest effect or margin for {key}")
        return float(value)


def on_clock(tables: Tables, clock: str) -> Tables:
    """`tables` with `clock`'s t_train, E_T and trash_adv (the <column>_<clock> columns) in
    place of the configured clock's."""

    def swap(table: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
        return table.assign(**{c: table[f"{c}_{clock}"] if f"{c}_{clock}" in table else NAN for c in columns if c in table})

    return replace(tables, trained=swap(tables.trained, ("t_train",)), trash=swap(tables.trash, ("t_train", "E_T", "trash_adv")), clock=clock)


CLAIMS = {
    "003_deeper_trains_longer": ("003", "Deeper models take longer to train per sample."),
    "003_depth_not_proportional": (
        "003",
        "Depth does not lengthen the expected time to failure E[T] in proportion to training time (deeper models' gains come from latency, not robustness).",
    ),
    "003_trash_above_one_fgm": ("003", "Breaking an undefended model with FGM costs less than training it: TRASH > 1."),
    "003_trash_above_one_pgd": ("003", "Breaking an undefended model with PGD costs less than training it: TRASH > 1."),
    "003_depth_latency_not_queries": (
        "003",
        "Depth raises the cost of each query (latency), not the number of queries a sample withstands (robustness).",
    ),
    "001_adv_train_raises_evp": ("001", "Adversarial training raises EVP."),
    "001_evp_ranks_differently": ("001", "EVP ranks models differently from benign accuracy."),
    "002_brittle_negative": ("002", "The brittle-score correlates negatively with robust accuracy."),
    "002_adv_train_lowers_brittle": ("002", "Adversarial training lowers the brittle-score."),
    "004_r_rises_with_epochs": (
        "004",
        "Normalised robustness R rises with training epochs (004's tables: e.g. 0.44 at epoch 1 to 0.55 at 150 for MNIST LeNet).",
    ),
    "004_pretraining_effect": (
        "004",
        "Pretraining on another data set does not make models more robust (004: generally no gain from CIFAR-10 pretraining on MNIST).",
    ),
}

NEEDS_DEPTHS = "needs >= 3 depths of one architecture family trained for the same epochs, e.g. model=[cifar_resnet8,cifar_resnet14,cifar_resnet20]"
NEEDS_ADV_TRAIN = "needs adversarially trained models: add adv_train to defence, e.g. defence=[none,adv_train]"
NEEDS_SEEDS = "needs >= 2 seeds: split.seeds=[0,1,2]"
NEEDS_EPOCHS = "needs >= 2 epoch values: train.epochs=[6,10]"
NEEDS_PRETRAINED = "needs pretrained cells: +train.pretrained_on.<data>=[null,<other data>]"


# ---------------------------------------------------------------------------------------------
# Building blocks


def finding(id: str, test: str, n: int, value: float, lo: float, hi: float, p: float, verdict: str, detail: str, units: str = "") -> Finding:
    paper, claim = CLAIMS[id]
    return Finding(id, paper, claim, test, int(n), float(value), float(lo), float(hi), float(p), verdict, detail, units=units)


def untestable(id: str, test: str, detail: str) -> Finding:
    return not_testable(finding(id, test, 0, NAN, NAN, NAN, NAN, NOT_TESTABLE, detail))


def usable(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Rows that are not degenerate and have every column in `columns`; a table lacking one of
    them (a stage that did not run) counts as empty rather than an error."""
    if df is None or any(c not in df.columns for c in columns):
        return pd.DataFrame(columns=columns)
    keep = ~df["degenerate"].eq(True) if "degenerate" in df.columns else pd.Series(True, index=df.index)
    return df[keep].dropna(subset=columns).copy()


def with_keys(df: pd.DataFrame) -> pd.DataFrame:
    """pretrained_on with "" for from scratch, so NaN matches NaN in merges and group-bys."""
    df = df.copy()
    if "pretrained_on" not in df.columns:
        df["pretrained_on"] = ""
    df["pretrained_on"] = df["pretrained_on"].astype(object).where(df["pretrained_on"].notna(), "")
    return df


def family(model: str) -> str:
    return re.sub(r"\d+$", "", str(model))


def seed_label(seed) -> str:
    """0.0 -> "0": seeds become floats once a column has held a NaN."""
    return str(int(seed)) if isinstance(seed, (int, float, np.number)) and float(seed).is_integer() else str(seed)


def trained_model(df: pd.DataFrame, stages: Mapping[str, str]) -> pd.DataFrame:
    """`df` with `trained_defence` and `trained_value`: its trained model's train-time defence
    (a predict-time defence wraps the undefended model: "none"), so that the cells of one
    trained model share TRAINED_LABELS + these two."""
    predict = df["defence"].map(lambda d: stages.get(d) == "predict")
    return df.assign(
        trained_defence=df["defence"].where(~predict, "none"),
        trained_value=df.get("defence_value", pd.Series("", index=df.index)).astype(str).where(~predict, ""),
    )


def unit_means(df: pd.DataFrame, units: list[str], column: str) -> pd.Series:
    """One value per unit: the mean of its cells (attack families, eps values, predict-time defences).
    A label column a table lacks (a hand-made table) tells no units apart."""
    return df.groupby([u for u in units if u in df.columns] or (lambda _: 0), dropna=False)[column].mean()


def mean_claim(
    id: str, test: str, values: pd.Series, sign: int, key: str, settings: Settings, units: str, what: str, scale=None, bounds=None
) -> Tested | Finding:
    """A directional claim about the mean over units of `values` (one per unit); `bounds`
    (low, high): the values' range, for a score interval where a t interval undercovers."""
    if len(values) < 2:
        return untestable(id, test, f"needs >= 2 {units}; found {len(values)}")
    x = values.to_numpy(float)
    estimate = inference.mean_over_units(x) if bounds is None else inference.bounded_mean(x, *bounds)
    shown = (lambda x: x) if scale is None else scale
    value, lo, hi = shown(estimate.value), shown(estimate.lo), shown(estimate.hi)
    interval = "t interval" if bounds is None else "score interval"
    if scale is None:
        detail = f"{what} {value:+.3g} over {estimate.n} {units}, 95% {interval} [{lo:+.3g}, {hi:+.3g}]"
    else:  # a ratio shown on its own scale, tested on the log scale where its effect and margin are stated
        detail = f"{what} {value:.3g} over {estimate.n} {units}, 95% {interval} [{lo:.3g}, {hi:.3g}] (tested on the log scale: its smallest and detectable effects are logs)"
    f = finding(id, test, estimate.n, value, lo, hi, estimate.p, INCONCLUSIVE, detail, units)
    return tested(f, estimate, DIRECTIONAL, sign, settings.of(key), alpha=settings.alpha)


# ---------------------------------------------------------------------------------------------
# 003: TRASHFIRE


def depth_series(trained: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The undefended trained models of the family with the most depths (tie: alphabetical first)
    at the epoch count shared by the most depths (tie: the largest), or an empty frame and why."""
    rows = usable(trained, ["model", "depth", "epochs", "t_train", "defence"])
    rows = rows[rows["defence"] == "none"].assign(family=lambda d: d["model"].map(family))
    if rows.empty:
        return rows, NEEDS_DEPTHS + "; found no undefended trained models"
    depths = rows.groupby("family")["depth"].nunique()
    best = sorted(depths.index, key=lambda f: (-depths[f], f))[0]
    rows = rows[rows["family"] == best]
    per_epochs = rows.groupby("epochs")["depth"].nunique()
    epochs = max(per_epochs.index, key=lambda e: (per_epochs[e], e))
    rows = rows[rows["epochs"] == epochs]
    if rows["depth"].nunique() < 3:
        return rows.iloc[:0], NEEDS_DEPTHS + f"; the best family, {best}, has {rows['depth'].nunique()}"
    return rows, f"{best} at epochs={epochs:g}"


def deeper_trains_longer(tables: Tables, settings: Settings) -> Tested | Finding:
    id = "003_deeper_trains_longer"
    rows, what = depth_series(tables.trained)
    test = "Spearman rho of depth and t_train over undefended trained models of one architecture family, permutation test"
    if rows.empty:
        return untestable(id, test, what)
    estimate = inference.rank_correlation(rows["depth"], rows["t_train"], seed=settings.seed)
    if not np.isfinite(estimate.p):
        return untestable(id, test, f"needs >= 4 trained models with varying depth and t_train ({what}; found {len(rows)})")
    interval = (
        f"95% interval [{estimate.lo:.3g}, {estimate.hi:.3g}]"
        if np.isfinite(estimate.lo)
        else "no interval: every trained model in depth's order (on the compute clock a depth fixes its FLOPs), so rho is 1 exactly, not an estimate"
    )
    detail = f"rho = {estimate.value:.3g}, {interval}, over {len(rows)} trained models of {rows['depth'].nunique()} depths ({what})"
    f = finding(
        id, f"{test} ({len(rows)} models, {what})", len(rows), estimate.value, estimate.lo, estimate.hi, estimate.p, INCONCLUSIVE, detail, "trained models"
    )
    return tested(f, estimate, DIRECTIONAL, +1, settings.of(id), alpha=settings.alpha)


def series_cells(tables: Tables, models: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The undefended FGM and PGD TRASH cells of the depth series' models, one row per model
    (its cells averaged: a model is the unit)."""
    keys = without(TRAINED_LABELS, "depth")
    cells = usable(tables.trash, ["model_hash", "attack", "defence", "depth"] + columns + keys[2:] + ["dataset"])
    cells = cells[(cells["defence"] == "none") & cells["attack"].isin(["fgm", "pgd"])]
    cells = with_keys(cells).merge(with_keys(models)[keys].drop_duplicates(), on=keys)
    per_model = cells.groupby("model_hash")[columns + ["depth"]].mean()
    return per_model[(per_model[columns] > 0).all(axis=1)]


def depth_not_proportional(tables: Tables, settings: Settings) -> Tested | Finding:
    id = "003_depth_not_proportional"
    test = "slope b of log E[T] on log t_train over undefended trained models of one family (FGM, PGD cells averaged per model), t test of b = 1"
    models, what = depth_series(tables.trained)
    if models.empty:
        return untestable(id, test, what)
    if tables.survival_reason:
        return untestable(id, test, f"needs E[T], and no survival model gives it ({tables.survival_reason})")
    per_model = series_cells(tables, models, ["E_T", "t_train"])
    if per_model["t_train"].nunique() < 3:
        return untestable(
            id, test, f"needs FGM or PGD TRASH cells of >= 3 models with distinct t_train ({what}; found {per_model['t_train'].nunique()}): attack=[fgm,pgd]"
        )
    estimate = inference.slope_over_units(np.log(per_model["t_train"]), np.log(per_model["E_T"]), null=1.0)
    detail = (
        f"E[T] ~ t_train^{estimate.value:.3g} over {estimate.n} trained models ({what}), 95% t interval [{estimate.lo:.3g}, {estimate.hi:.3g}]; "
        "a slope below 1 means E[T] grows less than training time"
    )
    f = finding(
        id, f"{test} ({estimate.n} models, {what})", estimate.n, estimate.value, estimate.lo, estimate.hi, estimate.p, INCONCLUSIVE, detail, "trained models"
    )
    return tested(f, estimate, DIRECTIONAL, -1, settings.of(id), alpha=settings.alpha)


def depth_latency_not_queries(tables: Tables, settings: Settings) -> Tested | Finding:
    """003's sentence as a decomposition of E[T] into the queries a sample withstands (E_Q, to
    failure, restricted to the budget: robustness) and the cost of one query (the model's
    FLOPs per forward on the compute clock, their seconds on the others: latency); over the
    undefended trained models of one depth series (their FGM and PGD cells averaged), the
    slopes of both on log depth. An intersection-union test: holds when the latency's slope
    exceeds its smallest effect (a t test) and the queries' slope is within its margin of 0
    (TOST); its p is the larger of the two."""
    id = "003_depth_latency_not_queries"
    clock = schema.CLOCK_OF[tables.clock or schema.COMPUTE]
    latency = clock.latency
    test = "slopes of log E[queries to failure] (TOST within the margin) and of log latency per query (t test) on log depth over undefended trained models"
    models, what = depth_series(tables.trained)
    if models.empty:
        return untestable(id, test, what)
    per_model = series_cells(tables, models, ["E_Q", latency])
    if per_model["depth"].nunique() < 3:
        return untestable(id, test, f"needs FGM or PGD cells of >= 3 depths ({what}; found {per_model['depth'].nunique()}): attack=[fgm,pgd]")
    x = np.log(per_model["depth"].to_numpy(float))
    queries = inference.slope_over_units(x, np.log(per_model["E_Q"].to_numpy()))
    seconds = inference.slope_over_units(x, np.log(per_model[latency].to_numpy()))
    unit = clock.unit if clock.name == schema.COMPUTE else f"{clock.name} seconds"
    detail = (
        f"over {queries.n} trained models ({what}): E[queries] ~ depth^{queries.value:.3g} (95% t interval [{queries.lo:.3g}, {queries.hi:.3g}]), "
        f"{unit} per query ~ depth^{seconds.value:.3g} ([{seconds.lo:.3g}, {seconds.hi:.3g}])"
    )
    f = finding(id, f"{test} ({queries.n} models, {what})", queries.n, queries.value, queries.lo, queries.hi, NAN, INCONCLUSIVE, detail, "trained models")
    latency_part = tested(f, seconds, DIRECTIONAL, +1, settings.of("003_depth_latency"), alpha=settings.alpha)
    queries_part = tested(f, queries, EQUIVALENCE, 0, settings.of("003_depth_queries"), alpha=settings.alpha)
    rises = latency_part.sign * latency_part.effect >= latency_part.smallest
    p = max(latency_part.p_claim, queries_part.p_claim) if rises else 1.0  # no rise of interest: the latency part cannot hold
    return replace(
        queries_part, p_claim=p, finding=replace(queries_part.finding, detail=detail + ("" if rises else "; the latency's slope is below its smallest effect"))
    )


def missing_trash(cells: pd.DataFrame, clock: str, survival_reason: str = "") -> str:
    """Why cells have no TRASH: what is missing on the clock, named."""
    t_train, clock = cells.get("t_train", pd.Series(dtype=float)), clock or "configured"
    if survival_reason:
        return f"no survival model gives E[T] ({survival_reason})"
    if t_train.isna().all():
        return (
            f"their t_train is unknown on the {clock} clock (an imported model without training FLOPs: "
            "give model.<name>.t_train.flops, its log's flops or model.<name>.epochs; or timing.clock=process)"
        )
    return f"their E[T] is missing on the {clock} clock (survival/expected_times.csv has none for them)"


def epochs_found(robustness: pd.DataFrame) -> str:
    """What the cells' epochs and R were, for a finding that needs two epoch values."""
    cells = usable(robustness, ["epochs"])
    if cells.empty:
        return "no cell with known epochs: imported models' training is unknown"
    found = ", ".join(f"{e:g}" for e in sorted(cells["epochs"].unique()))
    if cells["auc_R"].isna().all() if "auc_R" in cells else True:
        return f"epochs {found} found, and no cell has an R: metrics.auc's interval is beyond their eps grid"
    return f"found epochs {found} per otherwise equal cell; train.per_model sets its own epochs for the models it names"


def trash_above_one(tables: Tables, attack: str, settings: Settings) -> Tested | Finding:
    id = f"003_trash_above_one_{attack}"
    test = f"geometric mean of TRASH over undefended trained models ({attack.upper()} cells averaged on the log scale per model), t test of mean log TRASH = 0"
    cells = usable(tables.trash, ["attack", "defence"])
    cells = cells[(cells["attack"] == attack) & (cells["defence"] == "none")]
    if cells.empty:
        return untestable(id, test, f"needs undefended {attack.upper()} TRASH cells: add {attack} to attack")
    rows = cells.dropna(subset=["trash_adv"])
    if rows.empty:
        return untestable(id, test, f"needs a TRASH for the undefended {attack.upper()} cells: {missing_trash(cells, tables.clock, tables.survival_reason)}")
    rows = with_keys(rows[rows["trash_adv"] > 0].assign(log_trash=lambda d: np.log(d["trash_adv"].astype(float))))
    per_model = unit_means(rows, TRAINED_LABELS, "log_trash")
    if len(per_model) < 2:
        return untestable(id, test, f"needs >= 2 undefended trained models with a positive {attack.upper()} TRASH; found {len(per_model)}: split.seeds=[0,1,2]")
    return mean_claim(id, test, per_model, +1, "003_trash_above_one", settings, "undefended trained models", "geometric mean TRASH", scale=math.exp)


# ---------------------------------------------------------------------------------------------
# 001: EVP


def paired_units(rows: pd.DataFrame, units: list[str], column: str, treated: str, relative: bool = False) -> pd.Series:
    """Per (configuration, seed) unit: `column` of the `treated` defence's cells minus the
    undefended cells', each side first averaged over the unit's cells (attack families,
    strengths); `relative` divides by the undefended side."""
    treated_side = unit_means(rows[rows["defence"] == treated], units, column)
    baseline = unit_means(rows[rows["defence"] == "none"], units, column)
    shared = treated_side.index.intersection(baseline.index)
    difference = treated_side[shared] - baseline[shared]
    return difference / baseline[shared] if relative else difference


def adv_train_raises_evp(tables: Tables, settings: Settings) -> Tested | Finding:
    id = "001_adv_train_raises_evp"
    test = "EVP(adv_train) - EVP(none) per (configuration, seed) unit (attack families and strengths averaged), t test over units"
    rows = with_keys(usable(tables.robustness, ["defence", "evp", "attack_family", "seed", "model", "epochs", "lr", "dataset"]))
    if not (rows["defence"] == "adv_train").any():
        return untestable(id, test, NEEDS_ADV_TRAIN)
    differences = paired_units(rows, TRAINING + ["seed"], "evp", "adv_train")
    adv = rows[rows["defence"] == "adv_train"]
    unreached = int(adv["reaches_nonviability"].eq(False).sum()) if "reaches_nonviability" in adv else 0
    result = mean_claim(id, test, differences, +1, id, settings, "(configuration, seed) units", "mean EVP difference")
    if isinstance(result, Tested):
        note = f"; {unreached} of {len(adv)} adv_train curves do not reach non-viability, so their EVP is a lower bound set by the attack's strength grid"
        result = replace(result, finding=replace(result.finding, detail=result.finding.detail + note))
    return result


def seed_tau(rows: pd.DataFrame) -> pd.Series:
    """Per seed: Kendall's tau-b of acc_ben and EVP over the configurations of each data set and
    attack family (>= 3 of them), size-weighted over the groups."""
    taus = {}
    for seed, of_seed in rows.groupby("seed"):
        groups = [g for _, g in of_seed.groupby(["dataset", "attack_family"]) if len(g) >= 3]
        values = [(kendall(g), len(g)) for g in groups]
        values = [(t, n) for t, n in values if np.isfinite(t)]
        if values:
            taus[seed] = float(np.average([t for t, _ in values], weights=[n for _, n in values]))
    return pd.Series(taus, dtype=float)


def kendall(group: pd.DataFrame) -> float:
    accuracy, evp = significant(group["acc_ben"]), significant(group["evp"])  # ties that rounding would break are ties
    if len(np.unique(accuracy)) < 2 or len(np.unique(evp)) < 2:
        return NAN
    return float(stats.kendalltau(accuracy, evp).statistic)


def evp_ranks_differently(tables: Tables, settings: Settings) -> Tested | Finding:
    """Each seed trains every configuration anew, so a seed is the unit: per seed, Kendall's tau
    of acc_ben and EVP over the configurations; the claim is that 1 - tau (0: the same ranking)
    exceeds its smallest effect over seeds. One seed's noise alone lowers tau below 1, which
    the smallest effect of interest (conf) must exceed."""
    id = "001_evp_ranks_differently"
    test = "1 - Kendall tau-b of acc_ben and EVP over configurations within each data set and attack family, per seed (the unit), its mean over seeds with a score interval for a value in [0, 2]"
    config = TRAINING + ["defence", "attack_family", "seed"]
    rows = with_keys(usable(tables.robustness, ["acc_ben", "evp", "seed", "model", "epochs", "lr", "defence", "attack_family", "dataset"]))
    per_config = rows.groupby(config, dropna=False)[["acc_ben", "evp"]].mean().reset_index()
    taus = seed_tau(per_config)
    if taus.empty and (per_config.groupby(["seed", "dataset", "attack_family"]).size() >= 3).any():
        return untestable(id, test, "needs configurations whose acc_ben and EVP differ within a seed: every one ties on one of them")
    if taus.empty:
        return untestable(id, test, "needs >= 3 configurations of one data set and attack family, e.g. model=[resnet18,resnet34] with defence=[none,gauss_in]")
    if len(taus) < 2:
        return untestable(id, test, NEEDS_SEEDS + " (the seed is the unit: one gives no interval)")
    return mean_claim(id, test, 1.0 - taus, +1, id, settings, "seeds", "mean 1 - tau", bounds=(0.0, 2.0))


# ---------------------------------------------------------------------------------------------
# 002: brittle-score


def trained_models_only(brittle: pd.DataFrame) -> pd.DataFrame:
    """002's population: trained black-box models (training-time defences included), not
    predict-time wrappers, whose output noise or squeezing moves LIME's weights (Gauss-out
    lowers the brittle-score) without making the model more robust."""
    if brittle is None or "defence_stage" not in brittle.columns:
        return brittle
    return brittle[brittle["defence_stage"] != "predict"]


def brittle_spearman_per_seed(brittle: pd.DataFrame) -> dict[str, dict]:
    """{seed: {"rho", "p", "n"}} of brittle_score vs robust_acc over the trained models of each
    seed, None where rho is undefined (fewer than 3 cells or a constant column) so it can go
    into metrics.json."""
    rows = usable(trained_models_only(brittle), ["seed", "brittle_score", "robust_acc"])
    out = {}
    for s, g in rows.groupby("seed"):
        rho, p = spearman(g["brittle_score"], g["robust_acc"])
        out[seed_label(s)] = {"rho": none_if_nan(rho), "p": none_if_nan(p), "n": int(len(g))}
    return out


def brittle_negative(tables: Tables, settings: Settings) -> Tested | Finding:
    id = "002_brittle_negative"
    rows = usable(trained_models_only(tables.brittle), ["brittle_score", "robust_acc"])
    test = f"Spearman rho of brittle_score and robust_acc over {len(rows)} trained models (no predict-time defence: 002's), pooled over seeds, permutation test"
    estimate = inference.rank_correlation(rows["brittle_score"], rows["robust_acc"], seed=settings.seed)
    if not np.isfinite(estimate.p):
        return untestable(
            id, test, f"needs >= 4 trained models with varying brittle_score and robust_acc (found {len(rows)}): more models or defence=[none,adv_train]"
        )
    per_seed = {s: v["rho"] for s, v in brittle_spearman_per_seed(tables.brittle).items() if v["rho"] is not None}
    signs = {np.sign(r) for r in per_seed.values()}
    agreement = "no seed has >= 3 cells" if not per_seed else "the sign agrees across seeds" if len(signs) == 1 else "the sign differs across seeds"
    listing = ", ".join(f"{s}: {r:.2f}" for s, r in per_seed.items())
    detail = (
        f"pooled rho {estimate.value:.3g}, 95% interval [{estimate.lo:.3g}, {estimate.hi:.3g}]; per seed: {listing or 'none'}; {agreement}"
        f"{predict_time_note(tables.brittle)}"
    )
    f = finding(id, test, estimate.n, estimate.value, estimate.lo, estimate.hi, estimate.p, INCONCLUSIVE, detail, "trained models")
    return tested(f, estimate, DIRECTIONAL, -1, settings.of(id), alpha=settings.alpha)


def predict_time_note(brittle: pd.DataFrame) -> str:
    """What the predict-time defences, left out of the test, would do to it."""
    every = usable(brittle, ["brittle_score", "robust_acc"])
    wrapped = len(every) - len(usable(trained_models_only(brittle), ["brittle_score", "robust_acc"]))
    if not wrapped:
        return ""
    rho, p = spearman(every["brittle_score"], every["robust_acc"])
    return f"; with the {wrapped} predict-time defended cells too: rho {rho:.3g} (p = {p:.3g})"


def adv_train_lowers_brittle(tables: Tables, settings: Settings) -> Tested | Finding:
    id = "002_adv_train_lowers_brittle"
    test = "relative change (brittle(adv_train) - brittle(none)) / brittle(none) per (configuration, seed) unit (strengths averaged), t test over units"
    rows = with_keys(usable(tables.brittle, ["defence", "brittle_score", "seed", "model", "epochs", "lr", "dataset"]))
    if not (rows["defence"] == "adv_train").any():
        return untestable(id, test, NEEDS_ADV_TRAIN)
    changes = paired_units(rows, TRAINING + ["seed"], "brittle_score", "adv_train", relative=True)
    return mean_claim(id, test, changes, -1, id, settings, "(configuration, seed) units", "mean relative change of the brittle-score")


# ---------------------------------------------------------------------------------------------
# 004: normalised robustness R


def r_rises_with_epochs(tables: Tables, settings: Settings) -> Tested | Finding:
    """The unit is one trained model's configuration and seed: its cells at the largest and the
    smallest epochs (attack families and predict-time defences averaged within each)."""
    id = "004_r_rises_with_epochs"
    test = "R(largest epochs) - R(smallest epochs) per trained model's configuration and seed (families and predict-time defences averaged), t test over units"
    rows = with_keys(usable(tables.robustness, ["auc_R", "epochs", "defence", "seed", "model", "lr", "dataset"]))
    if rows.empty:
        return untestable(id, test, f"{NEEDS_EPOCHS} ({epochs_found(tables.robustness)})")
    rows = trained_model(rows, tables.defence_stages)
    units = without(TRAINED_LABELS, "epochs") + ["trained_defence", "trained_value"]
    per_epoch = rows.groupby(units + ["epochs"], dropna=False)["auc_R"].mean().reset_index().sort_values("epochs")
    spans = per_epoch.groupby(units, dropna=False).agg(n_epochs=("epochs", "nunique"), first=("auc_R", "first"), last=("auc_R", "last"))
    spans = spans[spans["n_epochs"] >= 2]
    if spans.empty:
        return untestable(id, test, f"{NEEDS_EPOCHS} ({epochs_found(tables.robustness)})")
    return mean_claim(id, test, spans["last"] - spans["first"], +1, id, settings, "trained-model (configuration, seed) units", "mean rise of R")


def pretraining_effect(tables: Tables, settings: Settings) -> Tested | Finding:
    """A claim of no gain: holds when R(pretrained) - R(from scratch) over units is below the
    margin by a one-sided t test; contradicted when the gain is significant and beyond it."""
    id = "004_pretraining_effect"
    test = "R(pretrained) - R(from scratch) per (configuration, seed, source) unit, one-sided t test of a gain below the margin"
    keys = without(UNSTRENGTHENED, "pretrained_on") + ["attack_family"]
    rows = with_keys(usable(tables.robustness, ["auc_R"] + keys))
    pretrained = rows[rows["pretrained_on"] != ""]
    if pretrained.empty:
        return untestable(id, test, NEEDS_PRETRAINED)
    units = without(TRAINED_LABELS, "depth", "pretrained_on")
    scratch = rows[rows["pretrained_on"] == ""].groupby(units, dropna=False)["auc_R"].mean()
    gains = pretrained.groupby(units + ["pretrained_on"], dropna=False)["auc_R"].mean()
    gains = gains.reset_index().set_index(units)
    gains = (gains["auc_R"] - scratch.reindex(gains.index)).dropna()
    if len(gains) < 2:
        return untestable(id, test, f"needs >= 2 (configuration, seed) units with pretrained and from-scratch cells; found {len(gains)}")
    estimate = inference.mean_over_units(gains.to_numpy(float))
    detail = f"mean R gain {estimate.value:+.3g} over {estimate.n} (configuration, seed, source) units, 95% t interval [{estimate.lo:+.3g}, {estimate.hi:+.3g}]"
    f = finding(id, test, estimate.n, estimate.value, estimate.lo, estimate.hi, estimate.p, INCONCLUSIVE, detail, "(configuration, seed, source) units")
    return tested(f, estimate, BELOW, +1, settings.of(id), alpha=settings.alpha)


# ---------------------------------------------------------------------------------------------
# Entry point and output


def time_findings(tables: Tables, settings: Settings) -> list[Tested | Finding]:
    """003's claims about time, on the clock of `tables`, each labelled with it."""
    checked = [
        deeper_trains_longer(tables, settings),
        depth_not_proportional(tables, settings),
        depth_latency_not_queries(tables, settings),
        trash_above_one(tables, "fgm", settings),
        trash_above_one(tables, "pgd", settings),
    ]
    return [on_clock_label(c, tables.clock) for c in checked]


def on_clock_label(claim: Tested | Finding, clock: str, id: str | None = None) -> Tested | Finding:
    if isinstance(claim, Tested):
        return replace(claim, finding=replace(claim.finding, clock=clock, id=id or claim.finding.id))
    return replace(claim, clock=clock, id=id or claim.id)


def check_findings(tables: Tables, settings: Settings, *, other_clocks: tuple[str, ...] = ()) -> list[Finding]:
    """Every claim's finding, in the order 003, 001, 002, 004; 003's claims about time on the
    configured clock (`tables.clock`) and then again on each of `other_clocks`, their ids
    suffixed `@<clock>` (sensitivity rows, not counted as claims); verdicts after Holm's
    adjustment over the claims (trashfire.metrics.verdicts)."""
    others = [
        on_clock_label(c, clock, f"{identify(c)}{OTHER_CLOCK}{clock}") for clock in other_clocks for c in time_findings(on_clock(tables, clock), settings)
    ]
    claims = [
        *time_findings(tables, settings),
        *others,
        adv_train_raises_evp(tables, settings),
        evp_ranks_differently(tables, settings),
        brittle_negative(tables, settings),
        adv_train_lowers_brittle(tables, settings),
        r_rises_with_epochs(tables, settings),
        pretraining_effect(tables, settings),
    ]
    return adjust(claims, settings.alpha)


def identify(claim: Tested | Finding) -> str:
    return claim.finding.id if isinstance(claim, Tested) else claim.id


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    return pd.DataFrame([asdict(f) for f in findings], columns=schema.FINDINGS)


def none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def findings_metrics(findings: list[Finding]) -> dict:
    """{id: {verdict, value, lo, hi, p, p_adjusted, n, units, smallest_effect, detectable}} with NaN as None, for metrics.json."""
    keys = ("value", "lo", "hi", "p", "p_adjusted", "smallest_effect", "detectable", "units_to_settle")
    return {
        f.id: {"verdict": f.verdict, **{k: none_if_nan(getattr(f, k)) for k in keys}, "n": f.n, "units": f.units} | ({"clock": f.clock} if f.clock else {})
        for f in findings
    }
