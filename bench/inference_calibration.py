"""Are the findings' verdicts and intervals calibrated? Simulated tables with known effects run
through the project's own finding and summary code (issue 59, item 6).

Simulated. Each test's tables are drawn as a run writes them (their label columns as the
pipeline's), with a random effect per trained model: a cell of trained model m (one of its
attack families, eps values, predict-time defences) is

    mu + effect x treated + scale x noise,   noise = u_m + e_cell,  var(u) = ICC, var(e) = 1 - ICC

on the scale the claim tests (EVP, R, the brittle-score; log E[T], log E[queries], log FLOPs
per query), in 12 settings: 3, 5 and 10 seeds x ICC 0.5 and 0.9 x noise normal or skewed
(skewed: exp of that normal noise, centred and scaled to unit variance, a log-normal with log
SD SKEW_SIGMA, --skew-sigma). Times and their ratios (t_train, E[T], E[queries], FLOPs per
query, TRASH) are log-normal in both shapes: their noise is normal on the log scale, where
their claims test them (`log_noise`). `scale` is about each claim's smallest effect of interest or
margin (conf/metrics/default.yaml), so the effects below are about one cell SD. Per test:

- 003_deeper_trains_longer: t_train per trained model (3 depths x seeds), log t_train =
  0.5 (b x standardised log depth + noise); null b = 0, power: b with population Spearman 0.5;
- 003_depth_not_proportional: log E[T] per FGM/PGD cell (4 per model) = slope x log t_train +
  0.1 noise; null slope 1, power 0.9;
- 003_trash_above_one_fgm/pgd: TRASH = t_train / E[T] of those cells, log TRASH mean 0 (null)
  or log 1.1 (power);
- 003_depth_latency_not_queries: log E[queries] and log FLOPs per query of each cell on log
  depth; nulls: queries' slope at the margin with latency rising (slope 1), and latency flat
  with queries flat; power: queries flat, latency at its smallest effect;
- 001_adv_train_raises_evp: per seed an undefended and two adversarially trained models (eps
  0.1, 0.3), 3 attack families each; EVP gain 0 (null) or 0.05 (power);
- 001_evp_ranks_differently: per seed 4 configurations spaced 0.1 apart in benign accuracy
  (noise 0.025) and EVP (noise 0.05, 2 families): null, the same ranking in the population (the
  noise alone gives E[1 - tau] of 0.06-0.08, its true value), power: EVP's ranking mixed
  toward the reverse until E[1 - tau] = 0.2 (its interval: inference.bounded_mean's score
  interval, where a t interval covered 0.87-0.92 at 5 and 10 skewed seeds);
- 002_brittle_negative: 6 trained models per seed, brittle-score and robust accuracy with a
  normal copula (skewed: both margins log-normal): null rho 0, power Spearman -0.3;
- 002_adv_train_lowers_brittle: per seed an undefended and two adversarially trained models'
  brittle-scores, 0.5 (1 - fall x treated) + 0.05 noise: fall 0 (null) or 0.1 (power);
- 004_r_rises_with_epochs: per seed models at 1 and 10 epochs, 4 cells each (2 families x
  undefended and a predict-time defence): rise 0 (null) or 0.02 (power);
- 004_pretraining_effect: per seed a from-scratch and a pretrained model, 4 cells each: gain
  at the margin (null: "holds" is false) and gain 0 (power; "contradicted" is false).

One value per trained model (t_train, the brittle-score, a brittle correlation's pair) has no
cells: there the ICC does not enter, only the number of seeds and the shape.

Checked, from `--simulations` draws per test and setting (Monte Carlo standard errors beside):
- false rejections: the share of "holds" or "contradicted" under a test's null (a claim of no
  effect: "holds" at its margin, "contradicted" at 0), each test alone (Holm over one claim);
  at most ALPHA + 2 SE (the SE at ALPHA); the raw test's rejections (p < ALPHA) are shown too;
- coverage: the share of 95% intervals holding the true value (a mean's: the mean of the unit
  values, by a large simulation where not exact; a correlation's: 0, under its null), over the
  draws that gave an interval (units all equal give none, and the share without one is shown);
  >= 0.93;
- family-wise error: every test's null at once in one set of tables through `check_findings`
  (Holm over the 11 claims; the bench composes it from the claim functions so that each claim
  runs once for this and its own null, and checks the composition against check_findings
  every 50th draw): the share of runs in which any claim's verdict is a false rejection as
  above; at most ALPHA + 2 SE (the share with any "holds" or "contradicted" at all is shown);
- power: the share of "holds" at each claim's smallest effect of interest (for the claims of
  no effect: at no effect); no target;
- `trashfire.metrics.mean_interval(log=True)`, the TRASH summary over seeds (trash_summary):
  its coverage of the true geometric mean of log-normal TRASH, one cell per seed; >= 0.93.
Two stages. A figure past its target at the first stage is judged again on RECHECK_FACTOR (4)
times the draws, fresh (the streams of --seed + 1), against the target at that n; the bench exits
1 when a recheck fails too. Why: a test whose false-rejection rate is 5% exactly (the exact
permutation test of 002_brittle_negative; 004_pretraining_effect's TOST at its margin and 003's
slopes come near) passes ALPHA + 2 SE by chance in about 2.5% of its checks, and with about 40
such checks among the 156 a one-stage bench fails a correct table in most runs. A correct test
fails both stages with probability about 0.025^2; a test whose true rate is 7% fails both about
as often as it fails the first alone (at 1000 then 4000 draws: 0.78 x 0.999).

    python bench/inference_calibration.py [--simulations 1000] [--json out.json] [--quick] [--skew-sigma 1.0]
    python bench/inference_calibration.py --first-stage earlier.json [--json out.json]   # the rechecks only

--first-stage: the first stage is deterministic (its random streams follow --seed, the setting,
the test and the scenario), so an earlier --json's figures are what a rerun of the same code
would give; only the rechecks are drawn.

--quick: 100 simulations (unless --simulations says otherwise) in this process, no workers.
Time: about 0.67 s of one core per simulation and setting (the claims' own code, 20-40 ms a
call, is most of it): --simulations 200 took 27 minutes on one core, so the default 1000 takes
about 70 minutes on 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import sys
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import optimize, stats
from statsmodels.tools.sm_exceptions import ConvergenceWarning
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import commit  # noqa: E402  (bench/ is scripts, not a package)
from trashfire import metrics  # noqa: E402
from trashfire.metrics import findings as F  # noqa: E402
from trashfire.metrics import verdicts as V  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf" / "metrics" / "default.yaml"
SEEDS, ICCS, SHAPES = (3, 5, 10), (0.5, 0.9), ("normal", "skewed")
ALPHA = 0.05
COVERAGE_FLOOR = 0.93
SKEW_SIGMA = 1.0  # the skewed noise: exp(N(0, SKEW_SIGMA^2)), skewness 6.2
RECHECK_FACTOR = 4  # a first-stage failure is judged again on this many times the draws, fresh
TRUTH_DRAWS = 400_000  # draws of the large simulations that give a true value or calibrate an effect
KINDS = ("trained", "robustness", "trash", "brittle")
STAGES = {"adv_train": "train", "gauss_out": "predict"}


@dataclass(frozen=True)
class Setting:
    seeds: int
    icc: float
    shape: str
    sigma: float = SKEW_SIGMA  # the skewed noise's log SD

    @property
    def label(self) -> str:
        skew = f" (log SD {self.sigma:g})" if self.shape == "skewed" and self.sigma != SKEW_SIGMA else ""
        return f"{self.seeds} seeds, ICC {self.icc:g}, {self.shape}{skew}"

    @property
    def without_seeds(self) -> Setting:
        """The noise alone (no seeds): what a true value or a calibrated effect depends on."""
        return Setting(0, self.icc, self.shape, self.sigma)

    @property
    def short(self) -> str:
        return f"{self.seeds}/{self.icc:g}/{self.shape[0]}"


def settings(sigma: float = SKEW_SIGMA) -> tuple[Setting, ...]:
    return tuple(Setting(s, i, h, sigma) for s in SEEDS for i in ICCS for h in SHAPES)


def load_settings(path: Path = CONF) -> F.Settings:
    findings = yaml.safe_load(path.read_text())["findings"]
    return F.Settings(alpha=ALPHA, seed=0, smallest=findings["smallest"], margin=findings["margin"])


FINDINGS = load_settings()


# ---------------------------------------------------------------------------------------------
# Noise with a random effect per trained model


def correlated_normal(rng: np.random.Generator, icc: float, sims: int, models: int, cells: int) -> np.ndarray:
    """(sims, models, cells) standard normal, correlated `icc` within a model."""
    shared = rng.standard_normal((sims, models, 1))
    return math.sqrt(icc) * shared + math.sqrt(1 - icc) * rng.standard_normal((sims, models, cells))


def shaped(z: np.ndarray, shape: str, sigma: float = SKEW_SIGMA) -> np.ndarray:
    """`z` (standard normal) as the setting's noise: itself, or exp of it centred and scaled to
    unit variance (a monotone map, so ranks are unchanged)."""
    if shape == "normal":
        return z
    s2 = sigma**2
    return (np.exp(sigma * z) - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))


def noise(rng: np.random.Generator, setting: Setting, sims: int, models: int, cells: int) -> np.ndarray:
    return shaped(correlated_normal(rng, setting.icc, sims, models, cells), setting.shape, setting.sigma)


def log_noise(rng: np.random.Generator, setting: Setting, sims: int, models: int, cells: int) -> np.ndarray:
    """The noise of a positive time or ratio (t_train, E[T], E[queries], FLOPs per query, TRASH)
    on the log scale its claims test it on: normal in both shapes, so that the values themselves
    are log-normal, the skewed shape such quantities have (skewing their logs too would make
    them doubly skewed, which no time the pipeline records is)."""
    return correlated_normal(rng, setting.icc, sims, models, cells)


# ---------------------------------------------------------------------------------------------
# Tables: label rows fixed per layout, values drawn for every simulation at once

Batch = dict  # kind -> (label rows, {column: (sims, rows) values})
LABELS = {"pretrained_on": np.nan, "model": "resnet18", "depth": 18, "epochs": 10, "lr": 0.05}
UNDEFENDED = {"defence": "none", "defence_param": "", "defence_value": ""}
ADV_TRAIN = [UNDEFENDED, *({"defence": "adv_train", "defence_param": "eps", "defence_value": v} for v in (0.1, 0.3))]
GAUSS_OUT = {"defence": "gauss_out", "defence_param": "sigma", "defence_value": 0.1}
FAMILIES = [{"attack": a, "norm": n, "attack_family": f"{a} l{n}"} for a, n in (("fgm", "inf"), ("pgd", "inf"), ("pgd", "2"))]


def label_rows(dataset: str, seeds: int, models: list[dict], cells: list[dict]) -> pd.DataFrame:
    """One row per (seed, trained model, cell), in that order: the model's labels, then its cell's."""
    rows = [
        LABELS
        | UNDEFENDED
        | {"dataset": dataset, "seed": seed, "degenerate": False, "reaches_nonviability": True}
        | model
        | cell
        | {"model_hash": f"{dataset}-{seed}-{m}"}
        for seed in range(seeds)
        for m, model in enumerate(models)
        for cell in cells
    ]
    return pd.DataFrame(rows)


def flat(values: np.ndarray) -> np.ndarray:
    """(sims, models, cells) -> (sims, rows) in label_rows' order."""
    return values.reshape(values.shape[0], -1)


def tables_at(batch: Batch, i: int) -> F.Tables:
    frames = {kind: rows.assign(**{c: v[i] for c, v in values.items()}) for kind, (rows, values) in batch.items()}
    return F.Tables(**{k: frames.get(k, pd.DataFrame()) for k in KINDS}, defence_stages=STAGES)


def stacked(batches: list[Batch]) -> Batch:
    """The batches' tables one under the other (their data sets differ), NaN where a table lacks a column."""
    out = {}
    for kind in KINDS:
        parts = [b[kind] for b in batches if kind in b]
        if not parts:
            continue
        sims = next(iter(parts[0][1].values())).shape[0]
        columns = sorted({c for _, values in parts for c in values})
        values = {c: np.concatenate([v.get(c, np.full((sims, len(rows)), np.nan)) for rows, v in parts], axis=1) for c in columns}
        out[kind] = (pd.concat([rows for rows, _ in parts], ignore_index=True), values)
    return out


# --- 003: one depth series (3 depths x seeds trained models), 4 FGM/PGD cells each

DEPTHS = np.array([8, 14, 20])
LOG_DEPTH = np.log(DEPTHS)
DEPTH_X = (LOG_DEPTH - LOG_DEPTH.mean()) / LOG_DEPTH.std()  # standardised over the three depths
TRASH_CELLS = [{"attack": a, "norm": n, "attack_family": f"{a} l{n}"} for a in ("fgm", "pgd") for n in ("inf", "2")]
DEPTH_NULL = {"depth_rho": 0.0, "et_slope": 1.0, "log_trash": 0.0, "queries": 0.0, "latency": 0.0}


def depth_series(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    models = [{"model": f"cifar_resnet{d}", "depth": int(d)} for d in DEPTHS]
    n, cells = len(models) * setting.seeds, len(TRASH_CELLS)
    x, log_depth = np.tile(DEPTH_X, setting.seeds), np.tile(LOG_DEPTH, setting.seeds)
    log_t = 0.5 * (depth_slope(setting.without_seeds, p["depth_rho"]) * x + log_noise(rng, setting, sims, n, 1)[..., 0])
    per_cell = np.repeat(log_t[..., None], cells, axis=2)
    log_et = p["et_slope"] * per_cell - p["log_trash"] + 0.1 * log_noise(rng, setting, sims, n, cells)
    log_q = math.log(6.0) + p["queries"] * log_depth[:, None] + 0.1 * log_noise(rng, setting, sims, n, cells)
    log_flops = math.log(1e6) + p["latency"] * log_depth[:, None] + 0.1 * log_noise(rng, setting, sims, n, cells)
    trash = {"t_train": per_cell, "E_T": np.exp(log_et), "trash_adv": np.exp(per_cell - log_et), "E_Q": np.exp(log_q), "flops_per_query": np.exp(log_flops)}
    return {
        "trained": (label_rows("depth", setting.seeds, models, [{}]), {"t_train": np.exp(log_t)}),
        "trash": (label_rows("depth", setting.seeds, models, TRASH_CELLS), {c: flat(np.exp(v) if c == "t_train" else v) for c, v in trash.items()}),
    }


@lru_cache
def depth_slope(setting: Setting, rho: float) -> float:
    """b such that Spearman's rho of depth (3 levels, ties) and b x depth + noise is `rho` in the population."""
    if rho == 0:
        return 0.0
    rng = np.random.default_rng(1)
    x = rng.choice(DEPTH_X, TRUTH_DRAWS)
    z, rx = log_noise(rng, setting, TRUTH_DRAWS, 1, 1).ravel(), stats.rankdata(x)
    return float(optimize.brentq(lambda b: np.corrcoef(rx, stats.rankdata(b * x + z))[0, 1] - rho, 0.0, 20.0, xtol=1e-4))


# --- 001: EVP of adversarial training; EVP's ranking against benign accuracy

RANKED = 4  # configurations per seed whose rankings are compared


def evp_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    treated = np.tile([0.0, 1.0, 1.0], setting.seeds)
    evp = 0.5 + p["gain"] * treated[:, None] + 0.05 * noise(rng, setting, sims, len(treated), len(FAMILIES))
    return {"robustness": (label_rows("evp", setting.seeds, ADV_TRAIN, FAMILIES), {"evp": flat(evp)})}


def ranked_values(rng: np.random.Generator, setting: Setting, groups: int, mixing: float) -> tuple[np.ndarray, np.ndarray]:
    """Benign accuracy (groups, RANKED) per trained model and EVP (groups, RANKED, 2 families) of
    RANKED configurations 0.1 apart; `mixing` moves EVP's population ranking toward the reverse
    (0.5: every configuration equal)."""
    k = np.arange(RANKED)
    accuracy = 0.5 + 0.1 * k + 0.025 * noise(rng, setting, groups, RANKED, 1)[..., 0]
    evp = 0.3 + 0.1 * (k + mixing * (RANKED - 1 - 2 * k))[:, None] + 0.05 * noise(rng, setting, groups, RANKED, 2)
    return accuracy, evp


def one_minus_tau(accuracy: np.ndarray, evp: np.ndarray) -> np.ndarray:
    """Per group: 1 - Kendall's tau of accuracy and each family's EVP (no ties), families averaged."""
    i, j = np.triu_indices(RANKED, 1)
    concordant = np.sign(accuracy[:, i] - accuracy[:, j])[..., None] * np.sign(evp[:, i] - evp[:, j])
    return 1.0 - concordant.mean(axis=(1, 2))


@lru_cache
def ranks_truth(setting: Setting, mixing: float) -> float:
    accuracy, evp = ranked_values(np.random.default_rng(2), setting, TRUTH_DRAWS, mixing)
    return float(one_minus_tau(accuracy, evp).mean())


@lru_cache
def ranks_mixing(setting: Setting, target: float | None) -> float:
    """The mixing at which E[1 - tau] is `target` (None: 0, the same population ranking)."""
    if target is None:
        return 0.0
    if ranks_truth(setting, 0.0) >= target:
        raise ValueError(f"noise alone gives E[1 - tau] {ranks_truth(setting, 0.0):.3f} >= {target}")
    return float(optimize.brentq(lambda w: ranks_truth(setting, w) - target, 0.0, 0.5, xtol=1e-4))


def rank_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    accuracy, evp = ranked_values(rng, setting, sims * setting.seeds, ranks_mixing(setting.without_seeds, p["target"]))
    models = [{"model": f"resnet{k}"} for k in range(RANKED)]
    values = {"acc_ben": np.repeat(accuracy.reshape(sims, -1), 2, axis=1), "evp": evp.reshape(sims, -1)}
    return {"robustness": (label_rows("ranks", setting.seeds, models, FAMILIES[:2]), values)}


# --- 002: brittle-scores, one per trained model

CORRELATED = 6  # trained models per seed in the brittle correlation


def brittle_values(rng: np.random.Generator, setting: Setting, sims: int, units: int, fall: float) -> np.ndarray:
    """(sims, units x 3): per unit an undefended and two adversarially trained models' brittle-scores."""
    treated = np.tile([0.0, 1.0, 1.0], units)
    return 0.5 * (1 - fall * treated) + 0.05 * noise(rng, setting, sims, len(treated), 1)[..., 0]


def brittle_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    scores = brittle_values(rng, setting, sims, setting.seeds, p["fall"])
    return {"brittle": (label_rows("brittle", setting.seeds, ADV_TRAIN, [{}]), {"brittle_score": scores})}


@lru_cache
def brittle_truth(setting: Setting, fall: float) -> float:
    """The mean over units of the relative change (mean of the treated - undefended) / undefended."""
    scores = brittle_values(np.random.default_rng(3), setting, 1, TRUTH_DRAWS, fall).reshape(-1, 3)
    return float(np.mean((scores[:, 1:].mean(axis=1) - scores[:, 0]) / scores[:, 0]))


def correlation_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    """Brittle-score and robust accuracy with Spearman's rho `p["rho"]` (a normal copula: exact for both shapes)."""
    r = 2 * math.sin(math.pi * p["rho"] / 6)  # Pearson's r of a bivariate normal with that Spearman rho
    n = CORRELATED * setting.seeds
    z1, z2 = correlated_normal(rng, setting.icc, sims, n, 1)[..., 0], correlated_normal(rng, setting.icc, sims, n, 1)[..., 0]
    values = {
        "brittle_score": 0.5 + 0.05 * shaped(z1, setting.shape, setting.sigma),
        "robust_acc": 0.4 + 0.1 * shaped(r * z1 + math.sqrt(1 - r * r) * z2, setting.shape, setting.sigma),
    }
    models = [{"model": f"resnet{k}"} for k in range(CORRELATED)]
    return {"brittle": (label_rows("correlation", setting.seeds, models, [{}]), values)}


# --- 004: R over epochs and from pretraining, 4 cells per trained model

R_CELLS = [family | defence for family in FAMILIES[:2] for defence in (UNDEFENDED, GAUSS_OUT)]


def epochs_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    late = np.tile([0.0, 1.0], setting.seeds)
    r = 0.5 + p["rise"] * late[:, None] + 0.02 * noise(rng, setting, sims, len(late), len(R_CELLS))
    return {"robustness": (label_rows("epochs", setting.seeds, [{"epochs": 1}, {"epochs": 10}], R_CELLS), {"auc_R": flat(r)})}


def pretraining_tables(rng: np.random.Generator, setting: Setting, sims: int, p: Mapping) -> Batch:
    pretrained = np.tile([0.0, 1.0], setting.seeds)
    r = 0.5 + p["gain"] * pretrained[:, None] + 0.05 * noise(rng, setting, sims, len(pretrained), len(R_CELLS))
    models = [{"pretrained_on": np.nan}, {"pretrained_on": "cifar10"}]
    return {"robustness": (label_rows("pretraining", setting.seeds, models, R_CELLS), {"auc_R": flat(r)})}


# generator name -> (function, its parameters under every null)
GENERATORS: dict[str, tuple[Callable, dict]] = {
    "depth": (depth_series, DEPTH_NULL),
    "evp": (evp_tables, {"gain": 0.0}),
    "ranks": (rank_tables, {"target": None}),
    "brittle": (brittle_tables, {"fall": 0.0}),
    "correlation": (correlation_tables, {"rho": 0.0}),
    "epochs": (epochs_tables, {"rise": 0.0}),
    "pretraining": (pretraining_tables, {"gain": 0.0}),
}


def generate(generator: str, rng: np.random.Generator, setting: Setting, sims: int, overrides: Mapping) -> Batch:
    function, defaults = GENERATORS[generator]
    return function(rng, setting, sims, defaults | dict(overrides))


# ---------------------------------------------------------------------------------------------
# The tests and their scenarios

BOTH = (V.HOLDS, V.CONTRADICTED)


@dataclass(frozen=True)
class Scenario:
    name: str
    params: Mapping  # overrides of the generator's null parameters
    errors: tuple[str, ...] = ()  # the verdicts that are false rejections here
    power: bool = False  # "holds" is right here: its share is the power
    covered: bool = True  # its intervals' coverage of the true value is checked
    family: bool = False  # the scenario stands for this test in the family-wise null


@dataclass(frozen=True)
class Test:
    id: str
    check: Callable  # (Tables, Settings) -> Tested | Finding
    generator: str
    truth: Callable  # (Setting, parameters) -> the true value of the finding's statistic
    scenarios: tuple[Scenario, ...] = field(default_factory=tuple)


def null_and_power(null: Mapping, power: Mapping, covered_at_power: bool = True) -> tuple[Scenario, ...]:
    return (Scenario("null", null, BOTH, family=True), Scenario("smallest effect", power, power=True, covered=covered_at_power))


def tests() -> dict[str, Test]:
    s = FINDINGS.of
    queries_margin = s("003_depth_queries")
    return {
        t.id: t
        for t in (
            Test(
                "003_deeper_trains_longer",
                F.deeper_trains_longer,
                "depth",
                lambda st, p: 0.0,
                null_and_power({}, {"depth_rho": s("003_deeper_trains_longer")}, False),
            ),
            Test(
                "003_depth_not_proportional",
                F.depth_not_proportional,
                "depth",
                lambda st, p: p["et_slope"],
                null_and_power({}, {"et_slope": 1 - s("003_depth_not_proportional")}),
            ),
            *(
                Test(
                    f"003_trash_above_one_{a}",
                    partial(trash_check, a),
                    "depth",
                    lambda st, p: math.exp(p["log_trash"]),
                    null_and_power({}, {"log_trash": s("003_trash_above_one")}),
                )
                for a in ("fgm", "pgd")
            ),
            Test(
                "003_depth_latency_not_queries",
                F.depth_latency_not_queries,
                "depth",
                lambda st, p: p["queries"],
                (
                    # at the margin "holds" (within it) is the false verdict; "contradicted" (past it)
                    # has its own null, no effect, tested in "latency flat" and "no gain" below
                    Scenario("queries at the margin", {"queries": queries_margin, "latency": 1.0}, (V.HOLDS,), family=True),
                    Scenario("latency flat", {}, BOTH),
                    Scenario("smallest effect", {"latency": s("003_depth_latency")}, power=True),
                ),
            ),
            Test(
                "001_adv_train_raises_evp", F.adv_train_raises_evp, "evp", lambda st, p: p["gain"], null_and_power({}, {"gain": s("001_adv_train_raises_evp")})
            ),
            Test("001_evp_ranks_differently", F.evp_ranks_differently, "ranks", ranks_value, null_and_power({}, {"target": s("001_evp_ranks_differently")})),
            Test("002_brittle_negative", F.brittle_negative, "correlation", lambda st, p: 0.0, null_and_power({}, {"rho": -s("002_brittle_negative")}, False)),
            Test(
                "002_adv_train_lowers_brittle",
                F.adv_train_lowers_brittle,
                "brittle",
                brittle_value,
                null_and_power({}, {"fall": s("002_adv_train_lowers_brittle")}),
            ),
            Test(
                "004_r_rises_with_epochs", F.r_rises_with_epochs, "epochs", lambda st, p: p["rise"], null_and_power({}, {"rise": s("004_r_rises_with_epochs")})
            ),
            Test(
                "004_pretraining_effect",
                F.pretraining_effect,
                "pretraining",
                lambda st, p: p["gain"],
                (
                    Scenario("gain at the margin", {"gain": s("004_pretraining_effect")}, (V.HOLDS,), family=True),
                    Scenario("no gain", {}, (V.CONTRADICTED,), power=True),
                ),
            ),
        )
    }


def trash_check(attack: str, tables: F.Tables, settings: F.Settings):
    return F.trash_above_one(tables, attack, settings)


def ranks_value(setting: Setting, p: Mapping) -> float:
    return ranks_truth(setting.without_seeds, ranks_mixing(setting.without_seeds, p["target"]))


def brittle_value(setting: Setting, p: Mapping) -> float:
    return brittle_truth(setting.without_seeds, p["fall"])


TESTS = tests()


def scenario_of(test: Test, name: str) -> Scenario:
    return next(s for s in test.scenarios if s.name == name)


def full_params(test: Test, scenario: Scenario) -> dict:
    return GENERATORS[test.generator][1] | dict(scenario.params)


# ---------------------------------------------------------------------------------------------
# Simulations


@contextlib.contextmanager
def frozen_heap():
    """statsmodels' Holm (inference.holm) calls gc.collect() on every call, which walks every
    live object: freezing those alive now (modules, the drawn tables) keeps each call ~1 ms."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def rng_for(seed: int, *key) -> np.random.Generator:
    """A stream per job, the same whichever worker runs it and in whatever order."""
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


@dataclass
class Tally:
    """One test's verdicts, coverage of `truth` and raw rejections over a scenario's simulations."""

    truth: float
    verdicts: Counter = field(default_factory=Counter)
    covered: int = 0
    with_interval: int = 0
    rejected: int = 0
    units: Counter = field(default_factory=Counter)

    def add(self, found) -> None:
        self.verdicts[found.verdict] += 1
        self.covered += bool(found.lo <= self.truth <= found.hi)
        self.with_interval += bool(np.isfinite(found.lo) and np.isfinite(found.hi))
        self.rejected += bool(found.p < ALPHA)
        self.units[found.n] += 1

    def result(self) -> dict:
        sims = sum(self.verdicts.values())
        units = self.units.most_common(1)[0][0]
        return {
            "simulations": sims,
            "truth": self.truth,
            "verdicts": dict(self.verdicts),
            "covered": self.covered,
            "with_interval": self.with_interval,
            "p_below_alpha": self.rejected,
            "units": units,
        }


def simulate_test(test_id: str, scenario_name: str, setting: Setting, sims: int, seed: int) -> dict:
    """Each simulation's tables through the claim's own function, its verdict alone (Holm over one claim)."""
    test = TESTS[test_id]
    scenario = scenario_of(test, scenario_name)
    batch = generate(test.generator, rng_for(seed, setting, test_id, scenario_name), setting, sims, scenario.params)
    tally = Tally(test.truth(setting, full_params(test, scenario)))
    with frozen_heap():
        for i in range(sims):
            tally.add(V.adjust([test.check(tables_at(batch, i), FINDINGS)], ALPHA)[0])
    return tally.result()


def family_scenario(test: Test) -> Scenario:
    return next(s for s in test.scenarios if s.family)


def family_params() -> dict[str, dict]:
    """Per generator, the parameters of every test's family-wise null at once."""
    params = {name: dict(defaults) for name, (_, defaults) in GENERATORS.items()}
    for test in TESTS.values():
        params[test.generator] |= family_scenario(test).params
    return params


def simulate_family(setting: Setting, sims: int, seed: int, compare_every: int = 50) -> dict:
    """Every test's null in one set of tables: how often any primary claim errs after Holm over
    all of them (check_findings' verdicts), and each test's null verdict alone. check_findings is
    composed here from the claim functions and verdicts.adjust, as it composes them, so that
    each claim is tested once for both; every `compare_every`-th draw is checked against
    check_findings itself."""
    params = family_params()
    rng = rng_for(seed, setting, "family")
    batch = stacked([generate(name, rng, setting, sims, p) for name, p in params.items()])
    tallies = {id: Tally(t.truth(setting, params[t.generator])) for id, t in TESTS.items()}
    any_error, any_verdict, per_claim = 0, 0, {id: Counter() for id in TESTS}
    with frozen_heap():
        for i in range(sims):
            tables = tables_at(batch, i)
            claims = [t.check(tables, FINDINGS) for t in TESTS.values()]
            family = V.adjust(claims, ALPHA)
            if i % compare_every == 0:
                same_as_check_findings(family, F.check_findings(tables, FINDINGS))
            for f in family:
                per_claim[f.id][f.verdict] += 1
            any_error += any(f.verdict in family_scenario(TESTS[f.id]).errors for f in family)
            any_verdict += any(f.verdict in BOTH for f in family)
            for claim in claims:
                alone = V.adjust([claim], ALPHA)[0]
                tallies[alone.id].add(alone)
    return {
        "simulations": sims,
        "any_error": any_error,
        "any_holds_or_contradicted": any_verdict,
        "verdicts": {id: dict(c) for id, c in per_claim.items()},
        "tests": {id: {family_scenario(TESTS[id]).name: tally.result()} for id, tally in tallies.items()},
    }


def same_as_check_findings(ours: list, theirs: list) -> None:
    """Stops the bench where check_findings no longer gives what the bench's composition of it does."""
    mine = {f.id: (f.verdict, f.p_adjusted) for f in ours}
    given = {f.id: (f.verdict, f.p_adjusted) for f in theirs if V.OTHER_CLOCK not in f.id}
    differs = mine.keys() != given.keys() or any(mine[k][0] != given[k][0] or not np.isclose(mine[k][1], given[k][1], equal_nan=True) for k in mine)
    if differs:
        raise RuntimeError(f"check_findings no longer composes the claim functions as this bench does: {given} != {mine}")


SUMMARY_MEAN, SUMMARY_CELLS = 0.5, 4


def project_summary(cells: np.ndarray) -> tuple[float, float, float]:
    """The TRASH summary as `aggregate` computes it (trash_summary): one cell's values over seeds,
    their geometric mean and interval (mean_interval on the log scale)."""
    return metrics.mean_interval(cells[:, 0], log=True)


def simulate_summary(setting: Setting, sims: int, seed: int, interval: Callable = project_summary) -> dict:
    """Coverage of SUMMARY_MEAN by `interval` of (seeds, cells) values: each seed a trained model
    with SUMMARY_CELLS correlated cells."""
    rng = rng_for(seed, setting, "summary")
    cells = SUMMARY_MEAN * np.exp(0.5 * log_noise(rng, setting, sims, setting.seeds, SUMMARY_CELLS))  # log-normal TRASH, geometric mean SUMMARY_MEAN
    intervals = [interval(c) for c in cells]
    covered = sum(bool(lo <= SUMMARY_MEAN <= hi) for _, lo, hi in intervals)
    return {"simulations": sims, "covered": covered, "with_interval": sum(bool(np.isfinite(lo)) for _, lo, _ in intervals)}


@dataclass(frozen=True)
class Job:
    kind: str  # "test", "family" or "summary"
    setting: Setting
    sims: int
    seed: int
    test: str = ""
    scenario: str = ""


def jobs_for(setting: Setting, sims: int, seed: int, tests: tuple[str, ...] | None = None, family: bool = True) -> list[Job]:
    """The family job (with every test's family-wise null) where `family`, then each chosen
    test's other scenarios (all of them without the family job), then the summary's."""
    chosen = TESTS if tests is None else {t: TESTS[t] for t in tests}
    jobs = [Job("family", setting, sims, seed)] if family else []
    jobs += [Job("test", setting, sims, seed, t.id, s.name) for t in chosen.values() for s in t.scenarios if not (family and s.family)]
    return jobs + [Job("summary", setting, sims, seed)]


def run_job(job: Job, interval: Callable = project_summary) -> tuple[Job, dict]:
    warnings.simplefilter("ignore", FutureWarning)  # pandas' notes on concatenating all-NaN columns, once per cell
    warnings.simplefilter("ignore", ConvergenceWarning)  # units_needed's solver at effects no study could detect: NaN, as it says
    if job.kind == "family":
        return job, simulate_family(job.setting, job.sims, job.seed)
    if job.kind == "summary":
        return job, simulate_summary(job.setting, job.sims, job.seed, interval)
    return job, simulate_test(job.test, job.scenario, job.setting, job.sims, job.seed)


def assemble(done: list[tuple[Job, dict]]) -> dict:
    """{setting label: {"tests": {id: {scenario: counts and rates}}, "family": ..., "summary": ...}}."""
    out: dict = {}
    for job, result in done:
        entry = out.setdefault(job.setting.label, {"tests": {}})
        if job.kind == "test":
            entry["tests"].setdefault(job.test, {})[job.scenario] = result | rates(TESTS[job.test], job.scenario, result)
        elif job.kind == "family":
            for id, scenarios in result.pop("tests").items():
                entry["tests"].setdefault(id, {}).update({name: f | rates(TESTS[id], name, f) for name, f in scenarios.items()})
            n = result["simulations"]
            entry["family"] = result | {"rate": result["any_error"] / n, "any_verdict_rate": result["any_holds_or_contradicted"] / n}
        else:
            entry["summary"] = result | {"coverage": result["covered"] / max(result["with_interval"], 1)}
    return out


def rates(test: Test, scenario_name: str, result: dict) -> dict:
    scenario, n = scenario_of(test, scenario_name), result["simulations"]
    out = {"p_below_alpha_rate": result["p_below_alpha"] / n}
    if scenario.errors:
        out["false_rejection"] = sum(result["verdicts"].get(v, 0) for v in scenario.errors) / n
    if scenario.power:
        out["power"] = result["verdicts"].get(V.HOLDS, 0) / n
    if scenario.covered:
        # over the draws that gave an interval: units all equal give none (not one of zero width)
        out["coverage"] = result["covered"] / max(result["with_interval"], 1)
        out["no_interval"] = 1 - result["with_interval"] / n
    return out


def run_setting(
    setting: Setting, simulations: int, seed: int = 0, tests: tuple[str, ...] | None = None, family: bool = True, interval: Callable = project_summary
) -> dict:
    """One setting's figures, computed in this process: the bench's core, for tests and --quick."""
    done = [run_job(job, interval) for job in jobs_for(setting, simulations, seed, tests, family)]
    return assemble(done)[setting.label]


def run_all(settings: tuple[Setting, ...], simulations: int, seed: int, workers: int) -> dict:
    jobs = [job for s in settings for job in jobs_for(s, simulations, seed)]
    jobs.sort(key=lambda j: j.kind != "family")  # the longest first, so the workers finish together
    return assemble(run_jobs_done(jobs, workers))


def run_jobs_done(jobs: list[Job], workers: int, desc: str = "simulations") -> list[tuple[Job, dict]]:
    if workers <= 1:
        return [run_job(j) for j in tqdm(jobs, desc=desc, unit="job")]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_job, j) for j in jobs]
        return [f.result() for f in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="job")]


# ---------------------------------------------------------------------------------------------
# Report


def se(rate: float, n: int) -> float:
    return math.sqrt(rate * (1 - rate) / n)


def error_ceiling(n: int) -> float:
    """ALPHA plus two Monte Carlo standard errors of a rate that is ALPHA."""
    return ALPHA + 2 * se(ALPHA, n)


def cell(rate: float | None, n: int) -> str:
    return "" if rate is None else f"{rate:.3f}±{se(rate, n):.3f}"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def rate_table(figures: dict, settings: tuple[Setting, ...], key: str) -> str:
    rows = []
    for test in TESTS.values():
        for scenario in test.scenarios:
            found = [figures[s.label]["tests"].get(test.id, {}).get(scenario.name, {}) for s in settings]
            if any(key in f for f in found):
                rows.append([f"{test.id} ({scenario.name})"] + [cell(f.get(key), f.get("simulations", 1)) for f in found])
    return markdown(["test (scenario)"] + [s.short for s in settings], rows)


def units_table(figures: dict, settings: tuple[Setting, ...]) -> str:
    by_seeds = {s.seeds: s for s in settings}
    rows = [
        [t.id] + [str(figures[s.label]["tests"][t.id][t.scenarios[0].name]["units"]) for s in by_seeds.values()]
        for t in TESTS.values()
        if t.id in figures[settings[0].label]["tests"]
    ]
    return markdown(["test: units"] + [f"{n} seeds" for n in by_seeds], rows)


def report(figures: dict, settings: tuple[Setting, ...], simulations: int) -> str:
    columns = "columns: seeds/ICC/shape (n: normal, s: skewed)"
    family = [cell(figures[s.label]["family"]["rate"], simulations) for s in settings]
    verdicts = [cell(figures[s.label]["family"]["any_verdict_rate"], simulations) for s in settings]
    summary = [cell(figures[s.label]["summary"]["coverage"], simulations) for s in settings]
    return "\n\n".join(
        [
            f"# Inference calibration: {simulations} simulations per test and setting ({columns}; ± one Monte Carlo SE)",
            units_table(figures, settings),
            f"## False rejections (target <= {ALPHA} + 2 SE = {error_ceiling(simulations):.3f}), each test alone",
            rate_table(figures, settings, "false_rejection"),
            "## The raw test's rejections under each scenario, p < 0.05 (not checked: a verdict needs the smallest effect too; "
            "under 001_evp_ranks_differently's null the noise alone gives E[1 - tau] > 0, which its t test of 0 rejects)",
            rate_table(figures, settings, "p_below_alpha_rate"),
            f"## Coverage of the 95% interval (target >= {COVERAGE_FLOOR})",
            rate_table(figures, settings, "coverage"),
            "## Power: share of 'holds' at the smallest effect of interest (no target)",
            rate_table(figures, settings, "power"),
            f"## Family-wise error of the findings table, Holm over the claims (target <= {error_ceiling(simulations):.3f})",
            markdown(
                ["check_findings"] + [s.short for s in settings],
                [["any false rejection"] + family, ["any holds or contradicted"] + verdicts],
            ),
            f"## mean_interval (the TRASH/EVP/R summary over seeds): coverage (target >= {COVERAGE_FLOOR})",
            markdown(["summary"] + [s.short for s in settings], [["coverage"] + summary]),
        ]
    )


@dataclass(frozen=True)
class Failure:
    line: str
    recheck: Job  # the job whose fresh draws recheck this figure
    key: tuple  # (setting label, what, test, scenario): the same check in the recheck's figures


def failures(figures: dict, settings: tuple[Setting, ...], simulations: int, seed: int = 0) -> list[Failure]:
    """Each figure past its target, with the job that rechecks it: `simulations` x RECHECK_FACTOR
    fresh draws (the streams of seed + 1) of that test's scenario, the family or the summary."""
    out, ceiling, by_label = [], error_ceiling(simulations), {s.label: s for s in settings}
    for label, entry in figures.items():
        again = partial(Job, setting=by_label[label], sims=simulations * RECHECK_FACTOR, seed=seed + 1)
        for id, scenarios in entry["tests"].items():
            for name, f in scenarios.items():
                if f.get("false_rejection", 0) > ceiling:
                    line = f"false rejections {f['false_rejection']:.3f} > {ceiling:.3f}: {id} ({name}), {label}"
                    out.append(Failure(line, again(kind="test", test=id, scenario=name), (label, "false_rejection", id, name)))
                if f.get("coverage", 1) < COVERAGE_FLOOR:
                    line = f"coverage {f['coverage']:.3f} < {COVERAGE_FLOOR}: {id} ({name}, true value {f['truth']:.4g}), {label}"
                    out.append(Failure(line, again(kind="test", test=id, scenario=name), (label, "coverage", id, name)))
        if "family" in entry and entry["family"]["rate"] > ceiling:
            out.append(Failure(f"family-wise error {entry['family']['rate']:.3f} > {ceiling:.3f}: {label}", again(kind="family"), (label, "family")))
        if "summary" in entry and entry["summary"]["coverage"] < COVERAGE_FLOOR:
            line = f"mean_interval coverage {entry['summary']['coverage']:.3f} < {COVERAGE_FLOOR}: {label}"
            out.append(Failure(line, again(kind="summary"), (label, "summary")))
    return out


def recheck(missed: list[Failure], settings: tuple[Setting, ...], simulations: int, seed: int, workers: int) -> tuple[list[str], list[str], dict]:
    """The second stage: each first-stage failure's figure again from fresh draws, RECHECK_FACTOR
    times as many, judged at that n. Returns (a line per recheck, the rechecks that fail too,
    the rechecks' figures)."""
    done = dict(run_jobs_done(list(dict.fromkeys(f.recheck for f in missed)), workers, "rechecks"))
    lines, failed, figures = [], [], {}
    for f in missed:
        # each figure from its own job's draws (a family job and a test job both give a family scenario's figure)
        own = assemble([(f.recheck, done[f.recheck])])
        again = {g.key: g for g in failures(own, settings, simulations * RECHECK_FACTOR, seed)}
        verdict = f"FAILED again: {again[f.key].line}" if f.key in again else "passes"
        lines.append(f"{f.line}; at {simulations * RECHECK_FACTOR} fresh simulations: {recheck_figure(own, f.key)}, {verdict}")
        failed += [lines[-1]] if f.key in again else []
        figures.setdefault(f.key[0], {"tests": {}})
        merge_figure(figures[f.key[0]], own[f.key[0]], f.key)
    return lines, failed, figures


def merge_figure(into: dict, own: dict, key: tuple) -> None:
    """The rechecked figure of `key` from its own job's figures into the rechecks' figures."""
    if key[1] in ("family", "summary"):
        into[key[1]] = own[key[1]]
    else:
        into["tests"].setdefault(key[2], {})[key[3]] = own["tests"][key[2]][key[3]]


def recheck_figure(figures: dict, key: tuple) -> str:
    entry = figures[key[0]]
    if key[1] == "family":
        return f"family-wise error {entry['family']['rate']:.3f}"
    if key[1] == "summary":
        return f"coverage {entry['summary']['coverage']:.3f}"
    return f"{key[1].replace('_', ' ')} {entry['tests'][key[2]][key[3]][key[1]]:.3f}"


def machine() -> dict:
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "platform": platform.platform(),
        "commit": commit(),
    }


def first_stage_of(args: argparse.Namespace) -> tuple[dict, int, float, dict]:
    """An earlier run's first stage, for --first-stage; its simulations, seed and skew replace the arguments'."""
    try:
        earlier = json.loads(args.first_stage.read_text())
        figures, simulations = earlier["settings"], int(earlier["simulations"])
        args.seed, args.skew_sigma = int(earlier["seed"]), float(earlier.get("skew_sigma", SKEW_SIGMA))
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"--first-stage {args.first_stage}: not a --json of this bench ({type(err).__name__}: {err}); give the file a run wrote with --json")
    earlier_commit = str(earlier.get("machine", {}).get("commit_at_start") or earlier.get("machine", {}).get("commit", "unknown"))
    print(
        f"first stage from {args.first_stage}, commit {earlier_commit}; this checkout is {commit()}. Its figures are this code's only "
        f"where the claims' code is the same: `git diff {earlier_commit.removesuffix('+dirty')} HEAD -- src/trashfire/core src/trashfire/metrics "
        "conf/metrics` shows whether it is"
    )
    labels = {s.label for s in settings(args.skew_sigma)}
    if set(figures) != labels:
        sys.exit(f"--first-stage {args.first_stage}: its settings {sorted(figures)} are not this bench's {sorted(labels)}")
    return figures, simulations, float(earlier.get("seconds", math.nan)), earlier.get("machine", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", type=int, help="per test, scenario and setting (default 1000; --quick: 100)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--quick", action="store_true", help="100 simulations unless --simulations, in this process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skew-sigma", type=float, default=SKEW_SIGMA, help="the skewed noise's log SD")
    parser.add_argument(
        "--first-stage", type=Path, help="a --json of an earlier run: take its first stage (figures, simulations, seed, skew) and run the rechecks only"
    )
    args = parser.parse_args()
    began, started_at = time.perf_counter(), commit()
    if args.first_stage:
        figures, simulations, seconds, earlier_machine = first_stage_of(args)
    else:
        simulations = args.simulations or (100 if args.quick else 1000)
        figures = run_all(settings(args.skew_sigma), simulations, args.seed, 1 if args.quick else args.workers)
        seconds = time.perf_counter() - began
    grid = settings(args.skew_sigma)
    print(report(figures, grid, simulations))
    missed = failures(figures, grid, simulations, args.seed)
    print(f"\n{simulations} simulations per test and setting in {seconds:.0f} s")
    rechecks, failed, _ = recheck(missed, grid, simulations, args.seed, 1 if args.quick else args.workers) if missed else ([], [], {})
    seconds_rechecks = time.perf_counter() - began - (0 if args.first_stage else seconds)
    if rechecks:
        print(f"\n## Rechecks: each figure past its target, from {simulations * RECHECK_FACTOR} fresh simulations (the bench fails where a recheck does)")
        print("\n".join(f"- {line}" for line in rechecks))
    for line in failed:
        print(f"FAILED {line}")
    if args.json:
        thresholds = {"false_rejection_max": error_ceiling(simulations), "family_wise_max": error_ceiling(simulations), "coverage_min": COVERAGE_FLOOR}
        out = {
            "machine": machine() | {"commit_at_start": started_at},
            "simulations": simulations,
            "seed": args.seed,
            "seconds": round(seconds, 1),
            "seconds_rechecks": round(seconds_rechecks, 1),
            "skew_sigma": args.skew_sigma,
            "thresholds": thresholds,
        }
        first_stage = [f.line for f in missed]
        out |= {"settings": figures, "first_stage_failures": first_stage, "rechecks": rechecks, "failures": failed}
        if args.first_stage:
            out["first_stage_from"] = {"file": str(args.first_stage), "machine": earlier_machine}
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
