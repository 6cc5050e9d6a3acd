"""Table columns: experiments.csv, survival_data.parquet's labels, trash.csv, trash_summary.csv,
robustness.csv, curves.csv, evp_tau.csv, evp_convergence.csv, auc_table.csv, brittle.csv,
findings.csv, eps_survival_data.parquet, eps_survival.csv, eps_survival_curves.csv, the cards'
sections and the report's views of them; and the timed columns: which are measured on a clock
or the machine, and so differ between two runs of one config (the determinism and
differential tests leave exactly these out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import pandas as pd

from trashfire.core.schema.labels import ATTACK_LABELS, DEFENCE_LABELS, MODEL_LABELS, SEEDLESS_LABELS, TRAINED_LABELS, without
from trashfire.core.schema.records import Finding
from trashfire.core.schema.units import CLOCK_LIST, CLOCK_OF, CLOCKS, COMPUTE, SECONDS

ACCURACIES = ["acc_ben", "acc_adv"]
TIMED = ("t_train", "t_predict", "t_attack")  # per sample, on the configured clock and on each (FLOPs on the compute clock, seconds on the others)
OUTCOME_COUNTS = [
    "n_failed",
    "n_misclassified_before",
    "n_broken",
    "n_survived",
    "n_events",
    "n_censored",
    "event_share",
    "median_event_step",
    "queries_mean",
    "gradients_mean",
    "n_broken_by_square",  # AutoAttack's cells: samples only Square broke, after the white-box components
]
HASHES = ["train_hash", "model_hash", "attack_hash"]
# the model cell's validity probes (BenignRecord), joined to every attack cell of it by timing
PROBES = [
    "grad_zero_share",
    "grad_nonfinite_share",
    "query_repeats",
    "query_output_change",
    "query_flip_share",
    "acc_query_sd",
    "acc_query_range",
    "output_probability",
    "gradient_calls",
]

# an attack's properties, from its option (trashfire.core.checks.ATTACK_PROPERTIES) and what
# ART declares of its class: black_box (true: it only queries outputs; empty: unknown) and
# minimal (true: a minimal-perturbation attack); black_box_components: a composite's black-box
# components by name, comma-separated (empty: none, or not a composite); columns of experiments.csv
ATTACK_PROPERTIES = ["black_box", "minimal", "black_box_components"]

# a worst-case row's own (trashfire.tables.worst_case): the attack with the lowest robust accuracy
# (ties joined by ", "), the samples it left standing that another attack broke, the attacks
WORST_CASE_COLUMNS = ["carried_by", "n_beyond_carrier", "attacks"]

# experiments.csv (timing): one row per attack cell, and per model cell, norm and eps of two or
# more eps-bounded attacks its worst case per sample
EXPERIMENTS = [
    *MODEL_LABELS,
    *ATTACK_LABELS,
    "n_train",
    "n_attack",
    "n_classes",
    *OUTCOME_COUNTS,
    *ACCURACIES,
    *TIMED,
    "clock",
    *(f"{t}_{clock}" for clock in CLOCKS for t in TIMED),
    "device",
    *HASHES,
    # the rest of the attack record, as it sorts
    "acc_ben_attack_subset",
    "attack_units",
    "attack_value_standardised",
    "early_exit",
    "engine",
    "flops_forward",
    "flops_gradient",
    "pixel_std",
    *(f"seconds_per_flop_{clock}" for clock in SECONDS),
    "threads",
    *ATTACK_PROPERTIES,
    "evaluation",
    "degenerate",
    *PROBES,
    *WORST_CASE_COLUMNS,
]
# how the tables' text columns read back: norms stay "inf", "2"; an empty label stays text
EXPERIMENTS_DTYPES = {"norm": str, "defence_param": str, "carried_by": str, "attacks": str, "evaluation": str}
TEXT_COLUMNS = {"id": str, "paper": str, "norm": str, "defence_param": str, "pretrained_on": str, "attack_family": str}

# survival_data.parquet (timing): labels, never covariates, then the survival columns, then covariates
SURVIVAL_LABELS = ["attack_hash", "train_hash", "model_hash", "attack_family", "defence", "dataset"]
# each sample's compute until it failed or its budget ran out (never covariates)
SURVIVAL_COMPUTE = ["queries", "gradients", "flops"]
# which component of a composite broke each sample (`broken_by`; empty: not a composite's, or not broken)
SURVIVAL_CAUSE = ["broken_by"]
FIRST_QUERY = "first_query"  # broken_by of a sample a composite found wrong before any component ran
# a standing sample's margin at the end of its budget (NaN where it broke): the budget check's input, never a covariate
SURVIVAL_AT_BUDGET = ["margin_at_budget"]
SURVIVAL_IDS = SURVIVAL_LABELS + ["duration", "event", "weight", *SURVIVAL_COMPUTE, *SURVIVAL_CAUSE, *SURVIVAL_AT_BUDGET]

# aggregate's tables: a model cell (MODEL_CELL) against an attack family (FAMILY)
MODEL_CELL = ["model_hash", *MODEL_LABELS]
FAMILY = ["attack", "norm", "attack_family"]
CELL = MODEL_CELL + FAMILY
OVER_SEEDS = without(CELL, "model_hash", "seed")  # a cell over seeds
UNDEFENDED_PEER = TRAINED_LABELS  # a brittle-score's undefended reference shares these

# TRASH on the configured clock, then on every clock (t_train_<clock>, E_T_<clock>,
# trash_adv_<clock>: FLOPs per sample on the compute clock, seconds on the others), and the
# decomposition of E[T] (003): E_Q and E_G, the queries and gradients to failure per sample
# (restricted to the budget), and the latency of a query (the model's FLOPs per forward, and
# their seconds on each clock)
ON_CLOCKS = [f"{q}_{clock}" for clock in CLOCKS for q in ("t_train", "E_T", "trash_adv")]
LATENCY = [clock.latency for clock in CLOCK_LIST]
TRASH = (
    CELL
    + ["t_train", "t_predict", "acc_ben", "acc_adv", "t_attack", "E_T", "censored_share", "E_T_source", "f_adv", "eps_max", "f_ben", "trash_adv", "trash_ben"]
    + ON_CLOCKS
    + ["E_Q", "E_G", *LATENCY, "degenerate"]
)
DEPTH_DECOMPOSITION = (
    ["dataset", "model", "depth", "epochs", "attack_family", "n_model_cells", "E_Q", "E_G", *LATENCY]
    + [f"E_T_{c}" for c in CLOCKS]
    + [f"t_train_{c}" for c in CLOCKS]
)
TRASH_SUMMARY = OVER_SEEDS + [
    "n_seeds",
    *(f"{m}_{s}" for m in ("trash_adv", "trash_ben") for s in ("mean", "lo", "hi")),
    "E_T_mean",
    "censored_share_mean",
    "f_ben_mean",
    "f_adv_mean",
]
CURVES = CELL + ["n_classes", "pixel_std", "eps", "eps_standardised", "eps_pixel", "acc", "acc_norm"]
EVP_TAU = CELL + ["tau", "evp"]
EVP_CONVERGENCE = CELL + ["n_intervals", "evp", "tau"]
AUC_TABLE = without(OVER_SEEDS, "attack", "norm") + ["n_seeds", "R_mean", "R_sd", "S_mean", "S_sd"]
TAU_TABLE = ["n_classes", "tau", "w", "source"]
# validity.csv (aggregate): per model cell, each flag (true, false, or empty: not checked) and its detail
VALIDITY_FLAGS = [
    "non_monotone",
    "black_box_stronger",
    "gradients_masked",
    "randomised",
    "largest_eps_not_breaking",
    "softmax_output",
    "dynamic",
    "square_beats_white_box",
    "budget_too_small",
    "black_box_carries",
    "attack_far_from_best",
    "attacked_above_certified",
]
VALIDITY = MODEL_CELL + ["train_hash", "degenerate", "flags"] + [c for f in VALIDITY_FLAGS for c in (f, f"{f}_detail")]
AUC = ["auc_R", "auc_S", "auc_units", "eps0", "eps1"]
GUARDS = ["degenerate", "reaches_nonviability", "note"]
# survival in eps (trashfire.survival.epsilon): per sample (timing), per model cell and family,
# and the Kaplan-Meier curves' points (aggregate); eps in `units`
EPS_SURVIVAL_DATA = [
    "model_hash",
    "dataset",
    "attack",
    "norm",
    "attack_family",
    "search",
    "units",
    "eps_max",
    "position",
    "eps_lower",
    "eps",
    "event",
    "nonmonotone",
]
EPS_SURVIVAL = CELL + ["search", "units", "n", "events", "events_at_zero", "eps_max", "area", "area_lo", "area_hi", "median_eps", "n_nonmonotone", "degenerate"]
EPS_SURVIVAL_CURVES = CELL + ["search", "units", "eps", "survival"]
FINDINGS = [f.name for f in fields(Finding)]


def robustness_columns(curve_metrics: Sequence[str]) -> list[str]:
    """robustness.csv: per model cell and eps family, its threshold, the per-curve metrics of
    the registry (trashfire.metrics.registry.CURVE_METRICS: EVP ...), R and S and the guards."""
    return CELL + ["n_classes", "acc_ben", "tau", *curve_metrics, *AUC, *GUARDS]


# the survival stage's checks of what the model adds: the within-attack-cell concordance per
# fitter (and baseline) and attack family (`all`: every family), and per attack cell the
# selected model's E[T] against the Kaplan-Meier restricted mean to the same budget t*
CONCORDANCE_WITHIN = ["fitter", "model", "status", "attack_family", "concordance_within", "pairs_within", "test_concordance_within", "test_pairs_within"]
KM_CHECK = ["attack_hash", "attack_family", "defence", "dataset", "n", "events", "t_star", "E_T", "E_T_km", "ratio", "log_ratio", "flagged", "tolerance"]


# A card per trained cell (reports/cards/<train_hash>.json), in sections
CARD_TRAINING = TRAINED_LABELS + ["n_train"]
CARD_TIMES = ["clock", "t_train", *(f"t_train_{clock}" for clock in CLOCKS)]
CARD_DEFENCE = DEFENCE_LABELS
CARD_ATTACK = [
    "attack",
    "norm",
    "attack_family",
    "attack_param",
    "attack_value",
    "attack_units",
    "attack_value_standardised",
    "n_attack",
    "acc_ben_attack_subset",
    "acc_adv",
    "evaluation",
    "t_attack",
    *(f"t_attack_{clock}" for clock in SECONDS),
    "attack_hash",
]
CARD_WORST_CASE = ["norm", "attack_value", "attack_units", "acc_adv", "evaluation", "carried_by", "n_beyond_carrier"]
CARD_FAMILY = ["attack_family", "E_T", "trash_adv", "trash_ben", "f_adv", "f_ben", "E_Q", CLOCK_OF[COMPUTE].latency, *(f"trash_adv_{c}" for c in CLOCKS)]


def card_robustness(curve_metrics: Sequence[str]) -> list[str]:
    """A card's evp_and_auc section: per eps family, tau, the per-curve metrics, R and S."""
    return ["attack_family", "tau", *curve_metrics, *AUC]


# The report's views of the tables (report.html)
REPORT_CELL = ["dataset", "pretrained_on", "model", "epochs", "lr", "defence", "defence_value", "seed"]
REPORT_SUMMARY = without(SEEDLESS_LABELS, "defence_param")  # tables over seeds
REPORT_BRITTLE = REPORT_CELL + ["brittle_score", "brittle_ri", "robust_acc", "robust_attack"]
REPORT_EPS_SURVIVAL = REPORT_CELL + [
    "attack_family",
    "units",
    "n",
    "events",
    "events_at_zero",
    "eps_max",
    "area",
    "area_lo",
    "area_hi",
    "median_eps",
    "n_nonmonotone",
]
REPORT_DEGENERATE = ["dataset", "pretrained_on", "model", "depth", "epochs", "defence", "defence_value", "seed", "n_classes", "acc_ben"]
REPORT_CARD = ["dataset", "pretrained_on", "model", "depth", "epochs", "lr", "seed"]


def report_robustness(curve_metrics: Sequence[str]) -> list[str]:
    return REPORT_CELL + ["attack_family", "acc_ben", "tau", *curve_metrics, "auc_R", "eps0", "eps1", "auc_units", "note"]


# ---------------------------------------------------------------------------------------------
# Timed columns

# t_train, t_attack ...: per sample on a clock; E_T and the per-sample durations: the survival
# clock; TRASH and the failure rates f_adv/f_ben divide by them
CLOCK_PREFIXES = ("t_", "E_T", "trash_", "f_adv", "f_ben", "duration", "seconds_per_flop", "seconds_per_query")
MACHINE_COLUMNS = ("device", "threads")
COMPUTE_SUFFIX = "_flops"  # t_train_flops, E_T_flops ...: the compute clock's, identical between runs
CLOCK_SECTIONS = ("times_per_sample", "survival_and_trash")  # a card's timed parts
CLOCK_METRICS = ("trash_", "survival_")  # metrics.json: TRASH and the survival fits on durations
CLOCK_FINDINGS = "003"  # TRASHFIRE's claims are about times


def is_timed(column: str) -> bool:
    if column.endswith(COMPUTE_SUFFIX) and not column.startswith("seconds_per_"):
        return False
    return column.startswith(CLOCK_PREFIXES) or column in MACHINE_COLUMNS


def untimed_table(table: pd.DataFrame) -> pd.DataFrame:
    """`table` without the columns measured on the clock or the machine."""
    return table.drop(columns=[c for c in table.columns if is_timed(str(c))])


def untimed_record(record: Any) -> Any:
    """A JSON record (a card, metrics.json) without its timed keys, at any depth."""
    if isinstance(record, dict):
        return {k: untimed_record(v) for k, v in record.items() if not (is_timed(k) or k in CLOCK_SECTIONS or k.startswith(CLOCK_METRICS + (CLOCK_FINDINGS,)))}
    if isinstance(record, list):
        return [untimed_record(v) for v in record]
    return record


# the certify stage's tables (trashfire.attacks.certification): per smoothing model cell and l2
# eps, and per cell and sample
CERTIFIED_KEYS = ["dataset", "seed", "model", "epochs", "defence", "defence_value", "model_hash"]
CERTIFIED = [
    *CERTIFIED_KEYS,
    "eps",
    "eps_standardised",
    "n_samples",
    "certified_acc",
    "attacked_acc",
    "bracket",
    "abstain_share",
    "attacked_acc_strict",
    "attack_abstain_share",
    "n0",
    "n",
    "alpha",
    "attack_steps",
    "attack_draws",
    "attack_n",
]
CERTIFIED_SAMPLES = [*CERTIFIED_KEYS, "position", "label", "prediction", "pA_lower", "radius", "radius_pixel", "clean_prediction"]
