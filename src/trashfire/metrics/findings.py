"""The four papers' qualitative claims, each checked with a statistical test on the pipeline's tables.

Pure functions over pandas DataFrames: `check_findings` returns one `Finding` per claim with its
statistic, 95% interval or p-value and a verdict; the caller writes them out (`findings_frame`,
`findings_metrics`). Every test first drops degenerate (chance-level) rows and rows with NaN in
the columns it uses, and says "not testable" -- with the Hydra override that would fix it --
when the grid lacks what it needs.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from trashfire.core import schema
from trashfire.core.schema import CONFIGURATION, MODEL_LABELS, TRAINED_LABELS, Finding, without
from trashfire.core.stats import significant, spearman
from trashfire.metrics import bootstrap_mean

# metrics here (accuracies, EVP, R, brittle-scores) are O(0.01-1): a difference this small is rounding
ROUNDING = 1e-12
VERDICTS = ("holds", "contradicted", "inconclusive", "not testable")
HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE = VERDICTS
NAN = float("nan")

# A model cell's configuration (schema.CONFIGURATION: its labels minus seed, depth and
# defence): two cells sharing it differ only in what the claim compares. pretrained_on is NaN
# for from-scratch cells and must still match itself (with_keys).
TRAINING = CONFIGURATION
# A model cell's labels without its defence's strength: cells at several strengths of one
# defence are averaged (mean_per_key), not paired crosswise.
UNSTRENGTHENED = without(MODEL_LABELS, "depth", "defence_param", "defence_value")


@dataclass
class Tables:
    trained: pd.DataFrame
    robustness: pd.DataFrame
    trash: pd.DataFrame
    brittle: pd.DataFrame
    clock: str = ""  # the clock of t_train, E_T and trash_adv (schema.CLOCKS)
    survival_reason: str = ""  # why no survival model gives E[T] (then none has a TRASH), "" where one does


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


def finding(id: str, test: str, n: int, value: float, lo: float, hi: float, p: float, verdict: str, detail: str) -> Finding:
    paper, claim = CLAIMS[id]
    return Finding(id, paper, claim, test, int(n), float(value), float(lo), float(hi), float(p), verdict, detail)


def not_testable(id: str, test: str, detail: str) -> Finding:
    return finding(id, test, 0, NAN, NAN, NAN, NAN, NOT_TESTABLE, detail)


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


def interval_verdict(lo: float, hi: float, sign: int) -> str:
    """holds when the whole interval lies on the claimed side of 0, contradicted when on the other."""
    if sign * lo > 0 and sign * hi > 0:
        return HOLDS
    if sign * lo < 0 and sign * hi < 0:
        return CONTRADICTED
    return INCONCLUSIVE


def spearman_verdict(rho: float, p: float, sign: int, alpha: float) -> str:
    if not (p < alpha) or not np.isfinite(rho) or rho == 0:
        return INCONCLUSIVE
    return HOLDS if np.sign(rho) == sign else CONTRADICTED


def mean_per_key(df: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
    """One row per key: cells that share every key (e.g. a defence at several strengths, which
    the tables do not label) are averaged rather than paired with each other crosswise."""
    return df.groupby(keys, dropna=False)[column].mean().reset_index()


def paired_finding(id: str, test: str, pairs: pd.DataFrame, sign: int, resamples: int, seed: int, what: str, extra: str = "") -> Finding:
    """Paired bootstrap of d = pairs["d"]: value = mean d, interval of the mean over pairs."""
    if len(pairs) < 2:
        return not_testable(id, test, f"needs >= 2 pairs of {what}; found {len(pairs)}")
    differences = pairs["d"].to_numpy(float)
    # two flat curves' R differ by +-1e-16 as rounding falls: a difference at rounding level is none
    value, lo, hi = bootstrap_mean(np.where(np.abs(differences) <= ROUNDING, 0.0, differences), resamples, seed)
    detail = f"mean difference {value:+.3g} over {len(pairs)} pairs of {what}, 95% CI [{lo:+.3g}, {hi:+.3g}]" + extra
    return finding(id, test, len(pairs), value, lo, hi, NAN, interval_verdict(lo, hi, sign), detail)


def pair_defences(df: pd.DataFrame, keys: list[str], column: str, treated: str) -> pd.DataFrame:
    """d = column of the `treated` defence minus column of the undefended cell with the same keys."""
    df = with_keys(df)
    a = mean_per_key(df[df["defence"] == treated], keys, column)
    b = mean_per_key(df[df["defence"] == "none"], keys, column)
    pairs = a.merge(b, on=keys, suffixes=("_treated", "_none"))
    pairs["d"] = pairs[f"{column}_treated"] - pairs[f"{column}_none"]
    return pairs


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


def deeper_trains_longer(tables: Tables, alpha: float) -> Finding:
    id = "003_deeper_trains_longer"
    rows, what = depth_series(tables.trained)
    test = "Spearman rho of depth and t_train over undefended trained models of one architecture family"
    if rows.empty:
        return not_testable(id, test, what)
    test = f"Spearman rho of depth and t_train over {len(rows)} undefended trained models ({what})"
    rho, p = spearman(rows["depth"], rows["t_train"])
    detail = f"rho = {rho:.3g} (p = {p:.3g}) over {rows['depth'].nunique()} depths of {what}"
    return finding(id, test, len(rows), rho, NAN, NAN, p, spearman_verdict(rho, p, +1, alpha), detail)


def slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slopes of y on x along the last axis (np.polyfit deg 1's, vectorised);
    NaN where x is constant, 0 where y is (to 9 significant digits: the mean of equal values
    is not always that value, and the slope of a constant was +-1e-31 as rounding fell)."""
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc**2).sum(axis=-1)
    cov = np.where(np.ptp(significant(y), axis=-1) == 0, 0.0, (xc * (y - y.mean(axis=-1, keepdims=True))).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(var > 1e-12 * np.maximum(1.0, (x**2).sum(axis=-1)), cov / var, np.nan)


def depth_not_proportional(tables: Tables, resamples: int, seed: int) -> Finding:
    id = "003_depth_not_proportional"
    test = "slope of log E[T] on log t_train over undefended models of one family (FGM, PGD), bootstrap over models"
    models, what = depth_series(tables.trained)
    if models.empty:
        return not_testable(id, test, what)
    if tables.survival_reason:
        return not_testable(id, test, f"needs E[T], and no survival model gives it ({tables.survival_reason})")
    keys = without(TRAINED_LABELS, "depth")
    cells = usable(tables.trash, ["model_hash", "attack", "E_T", "t_train", "defence"] + keys[2:] + ["dataset"])
    cells = cells[(cells["defence"] == "none") & cells["attack"].isin(["fgm", "pgd"])]
    cells = with_keys(cells).merge(with_keys(models)[keys].drop_duplicates(), on=keys)
    per_model = cells.groupby("model_hash")[["E_T", "t_train"]].mean()
    per_model = per_model[(per_model["E_T"] > 0) & (per_model["t_train"] > 0)]
    if per_model["t_train"].nunique() < 3:
        return not_testable(
            id, test, f"needs FGM or PGD TRASH cells of >= 3 models with distinct t_train ({what}; found {per_model['t_train'].nunique()}): attack=[fgm,pgd]"
        )
    x, y = np.log(per_model["t_train"].to_numpy()), np.log(per_model["E_T"].to_numpy())
    b = float(np.polyfit(x, y, 1)[0])
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    lo, hi = np.nanpercentile(slope(x[idx], y[idx]), [2.5, 97.5])
    # The claim is about the slope against 1 (proportional growth), not against 0.
    verdict = HOLDS if hi < 1 else CONTRADICTED if lo > 1 else INCONCLUSIVE
    detail = f"E[T] ~ t_train^{b:.3g} over {len(x)} models ({what}), 95% CI [{lo:.3g}, {hi:.3g}]; a slope below 1 means E[T] grows less than training time"
    return finding(id, f"{test} ({len(x)} models, {what})", len(x), b, lo, hi, NAN, verdict, detail)


def depth_latency_not_queries(tables: Tables, resamples: int, seed: int) -> Finding:
    """003's sentence as a decomposition of E[T] into the queries a sample withstands (E_Q, to
    failure, restricted to the budget: robustness) and the cost of one query (the model's
    FLOPs per forward on the compute clock, their seconds on the others: latency); over the
    undefended FGM and PGD cells of one depth series, the slopes of both on log depth,
    bootstrapped over models.
    Holds when the latency's slope is above 0, the queries' is not, and the first exceeds the
    second; contradicted when the queries' slope is above 0 (depth buys robustness) or below
    the latency's."""
    id = "003_depth_latency_not_queries"
    latency = "flops_per_query" if tables.clock in ("", "flops") else f"seconds_per_query_{tables.clock}"
    test = "slopes of log E[queries to failure] and of log latency per query on log depth, undefended FGM/PGD cells of one family, bootstrap over models"
    models, what = depth_series(tables.trained)
    if models.empty:
        return not_testable(id, test, what)
    keys = without(TRAINED_LABELS, "depth")
    cells = usable(tables.trash, ["model_hash", "attack", "E_Q", latency, "defence", "depth"] + keys[2:] + ["dataset"])
    cells = cells[(cells["defence"] == "none") & cells["attack"].isin(["fgm", "pgd"])]
    cells = with_keys(cells).merge(with_keys(models)[keys].drop_duplicates(), on=keys)
    per_model = cells.groupby("model_hash")[["E_Q", latency, "depth"]].mean()
    per_model = per_model[(per_model["E_Q"] > 0) & (per_model[latency] > 0)]
    if per_model["depth"].nunique() < 3:
        return not_testable(id, test, f"needs FGM or PGD cells of >= 3 depths ({what}; found {per_model['depth'].nunique()}): attack=[fgm,pgd]")
    x = np.log(per_model["depth"].to_numpy(float))
    queries, seconds = np.log(per_model["E_Q"].to_numpy()), np.log(per_model[latency].to_numpy())
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    b_q, b_l = float(slope(x, queries)), float(slope(x, seconds))
    boot_q, boot_l = slope(x[idx], queries[idx]), slope(x[idx], seconds[idx])
    lo, hi = np.nanpercentile(boot_q, [2.5, 97.5])
    l_lo, l_hi = np.nanpercentile(boot_l, [2.5, 97.5])
    d_lo, d_hi = np.nanpercentile(boot_l - boot_q, [2.5, 97.5])
    verdict = HOLDS if l_lo > 0 and lo <= 0 and d_lo > 0 else CONTRADICTED if lo > 0 or d_hi < 0 else INCONCLUSIVE
    unit = "FLOPs" if latency == "flops_per_query" else f"{tables.clock} seconds"
    detail = (
        f"over {len(x)} models ({what}): E[queries] ~ depth^{b_q:.3g} (95% CI [{lo:.3g}, {hi:.3g}]), "
        f"{unit} per query ~ depth^{b_l:.3g} ([{l_lo:.3g}, {l_hi:.3g}]); latency minus queries [{d_lo:.3g}, {d_hi:.3g}]"
    )
    return finding(id, f"{test} ({len(x)} models, {what})", len(x), b_q, lo, hi, NAN, verdict, detail)


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


def trash_above_one(tables: Tables, attack: str, resamples: int, seed: int) -> Finding:
    id = f"003_trash_above_one_{attack}"
    test = f"geometric mean of TRASH over undefended {attack.upper()} cells, bootstrap of mean log TRASH"
    cells = usable(tables.trash, ["attack", "defence"])
    cells = cells[(cells["attack"] == attack) & (cells["defence"] == "none")]
    if cells.empty:
        return not_testable(id, test, f"needs undefended {attack.upper()} TRASH cells: add {attack} to attack")
    rows = cells.dropna(subset=["trash_adv"])
    if rows.empty:
        return not_testable(id, test, f"needs a TRASH for the undefended {attack.upper()} cells: {missing_trash(cells, tables.clock, tables.survival_reason)}")
    logs = np.log(rows["trash_adv"][rows["trash_adv"] > 0].to_numpy(dtype=float))
    if len(logs) < 2:
        return not_testable(
            id, test, f"needs >= 2 undefended {attack.upper()} cells with positive TRASH; found {len(logs)}: more models or split.seeds=[0,1,2]"
        )
    mean_log, log_lo, log_hi = bootstrap_mean(logs, resamples, seed)
    # TRASH > 1 <=> log TRASH > 0: the ordinary interval rule on the log scale.
    verdict = interval_verdict(log_lo, log_hi, +1)
    value, lo, hi = math.exp(mean_log), math.exp(log_lo), math.exp(log_hi)
    detail = f"geometric mean TRASH {value:.3g} over {len(logs)} cells, 95% CI [{lo:.3g}, {hi:.3g}]"
    return finding(id, test, len(logs), value, lo, hi, NAN, verdict, detail)


# ---------------------------------------------------------------------------------------------
# 001: EVP


def adv_train_raises_evp(tables: Tables, resamples: int, seed: int) -> Finding:
    id = "001_adv_train_raises_evp"
    test = "paired bootstrap of EVP(adv_train) - EVP(none) over matching cells"
    keys = TRAINING + ["seed", "attack_family"]
    rows = with_keys(usable(tables.robustness, ["defence", "evp", "attack_family", "seed", "model", "epochs", "lr", "dataset"]))
    if not (rows["defence"] == "adv_train").any():
        return not_testable(id, test, NEEDS_ADV_TRAIN)
    pairs = pair_defences(rows, keys, "evp", "adv_train")
    adv = rows[rows["defence"] == "adv_train"].merge(pairs[keys], on=keys)
    unreached = int(adv["reaches_nonviability"].eq(False).sum()) if "reaches_nonviability" in adv else 0
    extra = f"; {unreached} of {len(adv)} adv_train curves do not reach non-viability, so their EVP is a lower bound set by the attack's strength grid"
    return paired_finding(id, test, pairs, +1, resamples, seed, "adv_train/none cells", extra)


def config_stats(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per configuration: mean and standard error over seeds of acc_ben and evp."""
    # Cells a configuration holds more than once per seed (unlabelled defence strengths) count once.
    per_seed = rows.groupby(keys + ["seed"])[["acc_ben", "evp"]].mean().reset_index()
    g = per_seed.groupby(keys)
    out = g[["acc_ben", "evp"]].mean()
    n = g["seed"].nunique()
    for col in ("acc_ben", "evp"):
        out[f"{col}_se"] = g[col].std(ddof=1) / np.sqrt(n)
    out["n_seeds"] = n
    return out.reset_index()


def discordance(group: pd.DataFrame) -> tuple[int, int, int]:
    """(pairs, pairs ordered oppositely, of them beyond both quantities' summed seed standard errors)."""
    i, j = map(np.array, zip(*itertools.combinations(range(len(group)), 2)))
    a, e = group["acc_ben"].to_numpy(), group["evp"].to_numpy()
    sa, se = group["acc_ben_se"].to_numpy(), group["evp_se"].to_numpy()
    da, de = a[i] - a[j], e[i] - e[j]
    opposite = (da * de < 0) & (np.abs(da) > ROUNDING) & (np.abs(de) > ROUNDING)  # seed means equal but for rounding are not ordered
    beyond = (np.abs(da) > sa[i] + sa[j]) & (np.abs(de) > se[i] + se[j])
    return len(i), int(opposite.sum()), int((opposite & beyond).sum())


def kendall(group: pd.DataFrame) -> float:
    accuracy, evp = significant(group["acc_ben"]), significant(group["evp"])  # ties that rounding would break are ties
    if len(np.unique(accuracy)) < 2 or len(np.unique(evp)) < 2:
        return NAN
    return float(stats.kendalltau(accuracy, evp).statistic)


def evp_ranks_differently(tables: Tables) -> Finding:
    id = "001_evp_ranks_differently"
    test = (
        "pairs of configurations within each data set and attack family ordered oppositely by acc_ben and "
        "EVP beyond their seed standard errors; value = size-weighted mean Kendall tau-b"
    )
    config = TRAINING + ["defence", "attack_family"]
    rows = with_keys(usable(tables.robustness, ["acc_ben", "evp", "seed", "model", "epochs", "lr", "defence", "attack_family", "dataset"]))
    configs = config_stats(rows, config)
    groups = [g for _, g in configs.groupby(["dataset", "attack_family"]) if len(g) >= 3]
    if not groups:
        return not_testable(
            id, test, "needs >= 3 configurations of one data set and attack family, e.g. model=[resnet18,resnet34] with defence=[none,gauss_in]"
        )
    if configs["n_seeds"].max() < 2:
        return not_testable(id, test, NEEDS_SEEDS + " (no seed standard error with one seed)")
    n, opposite, beyond = map(sum, zip(*(discordance(g) for g in groups)))
    taus = np.array([kendall(g) for g in groups])
    sizes = np.array([len(g) for g in groups], dtype=float)
    ok = np.isfinite(taus)
    tau = float(np.average(taus[ok], weights=sizes[ok])) if ok.any() else NAN
    verdict = HOLDS if beyond else CONTRADICTED if not opposite else INCONCLUSIVE
    detail = f"{beyond} of {n} pairs ordered oppositely beyond their seed standard errors ({opposite} ordered oppositely at all); Kendall tau-b {tau:.3g}"
    return finding(id, test, n, tau, NAN, NAN, NAN, verdict, detail)


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


def brittle_negative(tables: Tables, alpha: float) -> Finding:
    id = "002_brittle_negative"
    rows = usable(trained_models_only(tables.brittle), ["brittle_score", "robust_acc"])
    test = f"Spearman rho of brittle_score and robust_acc over {len(rows)} model cells without a predict-time defence (002's trained models), pooled over seeds"
    rho, p = spearman(rows["brittle_score"], rows["robust_acc"])
    if not np.isfinite(rho):
        return not_testable(
            id, test, f"needs >= 3 model cells with varying brittle_score and robust_acc (found {len(rows)}): more models or defence=[none,adv_train]"
        )
    per_seed = {s: v["rho"] for s, v in brittle_spearman_per_seed(tables.brittle).items() if v["rho"] is not None}
    signs = {np.sign(r) for r in per_seed.values()}
    agreement = "no seed has >= 3 cells" if not per_seed else "the sign agrees across seeds" if len(signs) == 1 else "the sign differs across seeds"
    listing = ", ".join(f"{s}: {r:.2f}" for s, r in per_seed.items())
    detail = f"pooled rho {rho:.3g} (p = {p:.3g}); per seed: {listing or 'none'}; {agreement}{predict_time_note(tables.brittle)}"
    return finding(id, test, len(rows), rho, NAN, NAN, p, spearman_verdict(rho, p, -1, alpha), detail)


def predict_time_note(brittle: pd.DataFrame) -> str:
    """What the predict-time defences, left out of the test, would do to it."""
    every = usable(brittle, ["brittle_score", "robust_acc"])
    wrapped = len(every) - len(usable(trained_models_only(brittle), ["brittle_score", "robust_acc"]))
    if not wrapped:
        return ""
    rho, p = spearman(every["brittle_score"], every["robust_acc"])
    return f"; with the {wrapped} predict-time defended cells too: rho {rho:.3g} (p = {p:.3g})"


def adv_train_lowers_brittle(tables: Tables, resamples: int, seed: int) -> Finding:
    id = "002_adv_train_lowers_brittle"
    test = "paired bootstrap of brittle_score(adv_train) - brittle_score(none) over matching model cells"
    rows = usable(tables.brittle, ["defence", "brittle_score", "seed", "model", "epochs", "lr", "dataset"])
    if not (rows["defence"] == "adv_train").any():
        return not_testable(id, test, NEEDS_ADV_TRAIN)
    pairs = pair_defences(rows, TRAINING + ["seed"], "brittle_score", "adv_train")
    return paired_finding(id, test, pairs, -1, resamples, seed, "adv_train/none model cells")


# ---------------------------------------------------------------------------------------------
# 004: normalised robustness R


def r_rises_with_epochs(tables: Tables, resamples: int, seed: int) -> Finding:
    id = "004_r_rises_with_epochs"
    test = "paired bootstrap of R(largest epochs) - R(smallest epochs) within otherwise equal cells"
    keys = without(UNSTRENGTHENED, "epochs") + ["attack_family"]
    rows = with_keys(usable(tables.robustness, ["auc_R", "epochs"] + [k for k in keys if k != "pretrained_on"]))
    per_epoch = mean_per_key(rows, keys + ["epochs"], "auc_R")
    spans = per_epoch.sort_values("epochs").groupby(keys).agg(n_epochs=("epochs", "nunique"), first=("auc_R", "first"), last=("auc_R", "last"))
    spans = spans[spans["n_epochs"] >= 2]
    if spans.empty:
        return not_testable(id, test, f"{NEEDS_EPOCHS} ({epochs_found(tables.robustness)})")
    pairs = pd.DataFrame({"d": spans["last"] - spans["first"]})
    return paired_finding(id, test, pairs, +1, resamples, seed, "cells at their largest and smallest epochs")


def pretraining_effect(tables: Tables, resamples: int, seed: int) -> Finding:
    id = "004_pretraining_effect"
    test = "paired bootstrap of R(pretrained) - R(from scratch) over matching cells"
    keys = without(UNSTRENGTHENED, "pretrained_on") + ["attack_family"]
    rows = with_keys(usable(tables.robustness, ["auc_R"] + keys))
    pretrained = rows[rows["pretrained_on"] != ""]
    if pretrained.empty:
        return not_testable(id, test, NEEDS_PRETRAINED)
    # Each source data set pairs with the same from-scratch cell on its own.
    pre = mean_per_key(pretrained, keys + ["pretrained_on"], "auc_R")
    scratch = mean_per_key(rows[rows["pretrained_on"] == ""], keys, "auc_R")
    pairs = pre.merge(scratch, on=keys, suffixes=("_pre", "_scratch"))
    pairs["d"] = pairs["auc_R_pre"] - pairs["auc_R_scratch"]
    result = paired_finding(id, test, pairs, +1, resamples, seed, "pretrained/from-scratch cells")
    if result.verdict == NOT_TESTABLE:
        return result
    # A null claim (no gain): only an interval wholly above 0 contradicts it.
    verdict = CONTRADICTED if result.lo > 0 else HOLDS
    return finding(id, test, result.n, result.value, result.lo, result.hi, NAN, verdict, result.detail)


# ---------------------------------------------------------------------------------------------
# Entry point and output


def time_findings(tables: Tables, alpha: float, resamples: int, seed: int) -> list[Finding]:
    """003's claims about time, on the clock of `tables`, each labelled with it."""
    checked = [
        deeper_trains_longer(tables, alpha),
        depth_not_proportional(tables, resamples, seed),
        depth_latency_not_queries(tables, resamples, seed),
        trash_above_one(tables, "fgm", resamples, seed),
        trash_above_one(tables, "pgd", resamples, seed),
    ]
    return [replace(f, clock=tables.clock) for f in checked]


def check_findings(tables: Tables, alpha: float = 0.05, *, resamples: int, seed: int, other_clocks: tuple[str, ...] = ()) -> list[Finding]:
    """Every claim's finding, in the order 003, 001, 002, 004; 003's claims about time on the
    configured clock (`tables.clock`) and then again on each of `other_clocks`, their ids
    suffixed `@<clock>`."""
    return [
        *time_findings(tables, alpha, resamples, seed),
        *(replace(f, id=f"{f.id}@{clock}") for clock in other_clocks for f in time_findings(on_clock(tables, clock), alpha, resamples, seed)),
        adv_train_raises_evp(tables, resamples, seed),
        evp_ranks_differently(tables),
        brittle_negative(tables, alpha),
        adv_train_lowers_brittle(tables, resamples, seed),
        r_rises_with_epochs(tables, resamples, seed),
        pretraining_effect(tables, resamples, seed),
    ]


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    return pd.DataFrame([asdict(f) for f in findings], columns=schema.FINDINGS)


def none_if_nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def findings_metrics(findings: list[Finding]) -> dict:
    """{id: {verdict, value, lo, hi, p, n}} with NaN as None, for metrics.json."""
    return {
        f.id: {"verdict": f.verdict, "value": none_if_nan(f.value), "lo": none_if_nan(f.lo), "hi": none_if_nan(f.hi), "p": none_if_nan(f.p), "n": f.n}
        | ({"clock": f.clock} if f.clock else {})
        for f in findings
    }
