"""The record and table schema shared by every stage: the one place that says what a record
holds and which columns a table has.

- Labels: the block of fields that tells one model cell from another (`cell_labels`), the
  same in the train, attack and brittle records and in every table.
- Typed records: `TrainRecord` (models/<train_hash>.json), `BenignRecord` (a model cell's
  benign evaluation, reports/attacks/benign/<model_hash>.json), `AttackRecord`
  (reports/attacks/<attack_hash>.json), `Outcomes` (its per-sample arrays, the .npz beside
  it), `BrittleRecord` (reports/brittle/<hash>.json) and `Finding` (a row of findings.csv).
  Writers build them, readers read through them; on disk they are the same JSON as before
  (same keys, same values, keys sorted).
- Attack families: `attack_family` ("fgm linf", "pgd l2"), the one label of an attack with
  one norm, and `family_identifier` ("fgm_inf"), its form where a name must be an identifier
  (the survival data's dummy columns, attack_fgm_inf).
- Units: an eps is stored once, in the units it was configured in (`attack_value`,
  `attack_units`) with the data set's `pixel_std`; `to_standardised` and `to_pixel` convert.
- Table columns: experiments.csv, survival_data.csv's labels, trash.csv, trash_summary.csv,
  robustness.csv, curves.csv, evp_tau.csv, evp_convergence.csv, auc_table.csv, brittle.csv,
  findings.csv, eps_survival_data.csv, eps_survival.csv, eps_survival_curves.csv, the cards'
  sections and the report's views of them.
- Timed columns: which columns are measured on a clock or the machine, and so differ between
  two runs of one config (the determinism and differential tests leave exactly these out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd

from trashfire.core.errors import DataError
from trashfire.core.records import read_json, write_json


def without(columns: Iterable[str], *dropped: str) -> list[str]:
    """`columns` in their order, less `dropped`."""
    return [c for c in columns if c not in dropped]


# ---------------------------------------------------------------------------------------------
# Labels: what tells one cell from another


@dataclass(frozen=True, kw_only=True)
class TrainedLabels:
    """A trained cell's labels: the data set, what it was fine-tuned from (None: from scratch;
    records from before fine-tuning lack it), the permutation seed, the architecture and its
    depth, the training length and learning rate."""

    dataset: str
    pretrained_on: str | None = None
    seed: int
    model: str
    depth: int
    epochs: int
    lr: float


@dataclass(frozen=True, kw_only=True)
class ModelLabels(TrainedLabels):
    """A model cell's label block (a trained cell and the defence it is trained or evaluated
    with: the grid's name, param and value), declared once: the train, attack and brittle
    records inherit it. Keyword-only, so that a record's own required fields may follow the
    defaulted `pretrained_on`; on disk the keys are sorted, so where a field is declared
    changes no file."""

    defence: str
    defence_param: Any
    defence_value: Any


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


TRAINED_LABELS = field_names(TrainedLabels)
# A model cell: the label block of every record and table, in this order.
MODEL_LABELS = field_names(ModelLabels)
DEFENCE_LABELS = without(MODEL_LABELS, *TRAINED_LABELS)
# A model cell without its seed: one line of a figure, one row over seeds.
SEEDLESS_LABELS = without(MODEL_LABELS, "seed")
# A model cell's configuration as a claim compares it: no seed, no defence, and no depth (the
# model's name fixes it). Two cells sharing it differ only in what the claim compares.
CONFIGURATION = without(TRAINED_LABELS, "seed", "depth")
# An attack cell: the attack, its norm, the attacked parameter and its value (configured units).
ATTACK_LABELS = ["attack", "norm", "attack_param", "attack_value"]


def cell_labels(trained: Any, defence: Mapping[str, Any]) -> dict[str, Any]:
    """The label block of a model cell, in MODEL_LABELS order: the trained cell's labels from
    `trained` (a `grid.TrainCell` or a `TrainRecord`, both have them as attributes) and the
    defence from `defence` (a grid defence: name, param, value). The train, attack and brittle
    records all carry this block."""
    return {key: getattr(trained, key) for key in TRAINED_LABELS} | {
        "defence": defence["name"],
        "defence_param": defence["param"],
        "defence_value": defence["value"],
    }


# ---------------------------------------------------------------------------------------------
# Attack families and eps units


def attack_family(attack: Any, norm: Any) -> Any:
    """The attack-family label: an attack with one norm, 'fgm linf', 'pgd l2', 'pixel l0'.
    Tables, cards, figures and the report group by it. Takes strings or Series."""
    if isinstance(attack, pd.Series) or isinstance(norm, pd.Series):
        return pd.Series(attack).astype(str) + " l" + pd.Series(norm).astype(str)
    return f"{attack} l{norm}"


def family_identifier(family: str) -> str:
    """An attack-family label as an identifier, for where a name must be one (the survival
    data's dummy columns: attack_fgm_inf): attack and norm joined by '_', 'fgm linf' ->
    'fgm_inf', 'pgd l2' -> 'pgd_2'."""
    attack, separator, norm = str(family).rpartition(" l")
    return f"{attack}_{norm}" if separator else str(family)


EPS_UNITS = ("standardised", "pixel")  # eps on the standardised scale the model sees, or in [0, 1] pixel units


def to_standardised(value: Any, units: Any, pixel_std: Any) -> Any:
    """An attack strength on the standardised scale the model sees: a pixel-unit value
    divided by the data set's mean per-channel training std (exact for grey images; on
    CIFAR's channels the stds differ by under 10%), a standardised one as it is. Scalars or
    Series (units per row)."""
    if isinstance(units, pd.Series):
        return value.where(units != "pixel", value / pixel_std)
    value = float(value)
    return value / pixel_std if units == "pixel" else value


def to_pixel(value: Any, units: Any, pixel_std: Any) -> Any:
    """An attack strength in [0, 1] pixel units: a standardised value times the data set's
    pixel std, a pixel-unit one as it is. Scalars or Series (units per row)."""
    if isinstance(units, pd.Series):
        return value.where(units == "pixel", value * pixel_std)
    return value if units == "pixel" else value * pixel_std


def convert_eps(value: Any, units: str, to: str, pixel_std: Any) -> Any:
    """`value` in `units` converted to `to` (one of EPS_UNITS)."""
    return to_pixel(value, units, pixel_std) if to == "pixel" else to_standardised(value, units, pixel_std)


def eps_column(units: str) -> str:
    """curves.csv's eps column in `units`: eps_standardised or eps_pixel."""
    return f"eps_{units}"


# ---------------------------------------------------------------------------------------------
# Typed records

R = TypeVar("R", bound="Record")


class Record:
    """A JSON record as a dataclass. A field without a default is required: a record that
    lacks one is corrupt (one DataError line naming what it lacks and the stage to rerun);
    a field with a default is one older records may lack. Unknown keys are left out."""

    STAGE: ClassVar[str] = ""  # the stage that writes it, for the rerun hint
    LEAD: ClassVar[tuple[str, ...]] = ()  # required keys named first when missing

    @classmethod
    def required(cls) -> list[str]:
        """The keys a record must have: LEAD, the record's own, then the label block's."""
        names = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]  # type: ignore[arg-type]
        return list(dict.fromkeys([*cls.LEAD, *without(names, *MODEL_LABELS), *names]))

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any], source: Any = "record") -> R:
        missing = [key for key in cls.required() if key not in data]
        if missing:
            raise DataError(f"corrupt record {source}: no {', '.join(missing)}; delete it and rerun the {cls.STAGE} stage to recompute it")
        known = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def of(cls: type[R], record: R | Mapping[str, Any], source: Any = "record") -> R:
        """`record` as this type: a record as it is, a mapping (a read JSON) checked."""
        return record if isinstance(record, cls) else cls.from_json(record, source)

    @classmethod
    def read(cls: type[R], path: str | Path) -> R:
        return cls.from_json(read_json(path), path)

    def derived(self) -> dict[str, Any]:
        """Keys the JSON carries that are computed from the fields (written for readers of
        the file, never read back)."""
        return {}

    def to_json(self) -> dict[str, Any]:
        """The record as its JSON holds it, keys sorted as on disk."""
        data = {f.name: getattr(self, f.name) for f in fields(self)} | self.derived()  # type: ignore[arg-type]
        return dict(sorted(data.items()))

    def write(self, path: str | Path) -> None:
        write_json(path, self.to_json())

    def __getitem__(self, key: str) -> Any:
        """Mapping-style access to a field or derived key, as callers of the old dicts read them."""
        try:
            return self.to_json()[key]
        except KeyError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)

    replace = replace


@dataclass(frozen=True)
class TrainRecord(ModelLabels, Record):
    """A trained cell (models/<train_hash>.json), written by the train stage after its weights."""

    STAGE: ClassVar[str] = "train"

    train_hash: str
    config: dict[str, Any]
    n_train: int
    n_test: int
    acc_ben: float
    # per sample: the whole training run up to this epoch over the training-set size (eq. 7)
    t_train_process: float
    t_train_wall: float
    t_predict_process: float
    t_predict_wall: float
    device: str
    pretrain_hash: str | None = None
    # the compute clock (trashfire.models.flops), per sample like the seconds: the training
    # run's FLOPs up to this epoch over n_train (its attack steps and a fine-tuned cell's base
    # run included), and one forward pass; None: unknown (records from before FLOPs, an
    # external model without them)
    t_train_flops: float | None = None
    t_predict_flops: float | None = None
    threads: int | None = None  # the clocks' CPU seconds and the last bits of the weights depend on it
    torch: str | None = None
    weights: str | None = None  # set when the weights are saved, just before the record
    weights_bytes: int | None = None
    weights_sha256: str | None = None
    # an imported model (trashfire.core.external): where its supplied t_train came from
    # ("config" or "log:<path>"; None: trained and timed here), and the file it came from
    t_train_source: str | None = None
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None


@dataclass(frozen=True)
class BenignRecord(Record):
    """A model cell's benign evaluation with its defence (reports/attacks/benign/<model_hash>.json)."""

    STAGE: ClassVar[str] = "attack"

    model_hash: str
    acc_ben: float
    t_predict_process: float
    t_predict_wall: float
    n_test: int
    # validity probes on the attack subset (trashfire.attacks.validity); records from before
    # them lack these, and the attack stage probes such a cell again
    probe_samples: int | None = None
    grad_zero_share: float | None = None
    grad_nonfinite_share: float | None = None
    query_repeats: int | None = None
    query_output_change: float | None = None
    query_flip_share: float | None = None
    acc_query_sd: float | None = None
    acc_query_range: float | None = None


# what the tables downstream read from an attack record, named first when missing
ATTACK_RECORD_LEAD = ("dataset", "attack", "acc_ben", "acc_adv", *(f"t_{q}_{clock}" for q in ("train", "predict", "attack") for clock in ("process", "wall")))


@dataclass(frozen=True)
class AttackRecord(ModelLabels, Record):
    """An attack cell (reports/attacks/<attack_hash>.json): its model cell's labels, training
    and benign results, then the attack's. The eps is stored once: `attack_value` in
    `attack_units` with the data set's `pixel_std`; the JSON's `attack_value_standardised` is
    derived from them (to_standardised)."""

    STAGE: ClassVar[str] = "attack"
    LEAD: ClassVar[tuple[str, ...]] = ATTACK_RECORD_LEAD

    attack_hash: str
    train_hash: str
    model_hash: str
    # the trained cell and the model cell's benign evaluation
    n_train: int
    t_train_process: float
    t_train_wall: float
    acc_ben: float
    t_predict_process: float
    t_predict_wall: float
    # the attack
    attack: str
    norm: str
    attack_param: str
    attack_value: float  # in attack_units
    n_attack: int
    acc_adv: float
    t_attack_process: float  # the engine's whole run per sample, measured from outside
    t_attack_wall: float
    attack_units: str = "standardised"
    pixel_std: float = math.nan  # converts eps between pixel and standardised units downstream
    config: dict[str, Any] = field(default_factory=dict)
    engine: str | None = None
    early_exit: bool | None = None
    n_events: int | None = None
    acc_ben_attack_subset: float | None = None
    device: str | None = None
    threads: int | None = None
    t_train_source: str | None = None  # an imported model's (TrainRecord.t_train_source)
    # the compute clock (trashfire.core.clocks.LapClock): FLOPs per sample of training (None:
    # unknown), of a benign prediction and of the attack (its samples' mean); the model's FLOPs
    # per query and per input gradient; each pricing group's seconds per FLOP at full batch
    # (rate, spread, units, source) and the cell's priced seconds per FLOP on each clock
    t_train_flops: float | None = None
    t_predict_flops: float | None = None
    t_attack_flops: float | None = None
    flops_forward: int | None = None
    flops_gradient: int | None = None
    rates: dict[str, Any] | None = None
    seconds_per_flop_process: float | None = None
    seconds_per_flop_wall: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: Any = "record") -> AttackRecord:
        if "pixel_std" not in data and "attack_value" in data:  # a record from before pixel_std was kept
            data = dict(data) | {"pixel_std": legacy_pixel_std(data)}
        return super().from_json(data, source)

    @property
    def attack_value_standardised(self) -> float:
        return to_standardised(self.attack_value, self.attack_units, self.pixel_std)

    def derived(self) -> dict[str, Any]:
        return {"attack_value_standardised": self.attack_value_standardised}

    def row(self) -> dict[str, Any]:
        """The record as a row of experiments.csv, before the outcome counts: every field but
        the config, less the optional ones an older record did not have (None), so that its
        table has no column for them."""
        kept = set(self.required()) | set(MODEL_LABELS)
        return {k: v for k, v in self.to_json().items() if k not in ("config", "rates") and (v is not None or k in kept)}


def legacy_pixel_std(record: Mapping[str, Any]) -> float:
    """Records from before pixel_std was kept: a pixel-unit strength still holds the ratio."""
    if record.get("attack_units") == "pixel" and record.get("attack_value_standardised"):
        return record["attack_value"] / record["attack_value_standardised"]
    return math.nan


@dataclass(frozen=True)
class Outcomes:
    """An attack cell's per-sample outcomes (reports/attacks/<attack_hash>.npz), from the
    engine's per-sample failure clock: the attack-subset position, true label, the first
    query's prediction and benign margin (true-class logit minus the best other), the
    adversarial prediction, the failure step (-1: unknown), the compute it took part in until
    it failed or its budget ran out (forward `queries`, input `gradients`, and `flops`), its
    seconds on both clocks priced from that compute (`duration_<clock>`: FLOPs x the cell's
    seconds per FLOP at full batch) and shared (`duration_<clock>_shared`: equal shares of
    each lap, which sum to the cell's time), the event (misclassified within the budget) and
    the l0/l1/l2/linf norms of the returned example.
    A composite's cells (engine sequence) add `broken_by`: the component that broke each
    sample ("first_query": misclassified before any ran; "": none broke it)."""

    y_true: np.ndarray
    y_pred_ben: np.ndarray
    y_pred_adv: np.ndarray
    margin_ben: np.ndarray
    failure_step: np.ndarray
    event: np.ndarray
    queries: np.ndarray
    gradients: np.ndarray
    flops: np.ndarray
    duration_process: np.ndarray
    duration_wall: np.ndarray
    duration_process_shared: np.ndarray
    duration_wall_shared: np.ndarray
    position: np.ndarray | None = None
    norm_l0: np.ndarray | None = None
    norm_l1: np.ndarray | None = None
    norm_l2: np.ndarray | None = None
    norm_linf: np.ndarray | None = None
    broken_by: np.ndarray | None = None

    # the order of the arrays in the file
    ORDER: ClassVar[tuple[str, ...]] = (
        "position",
        "y_true",
        "y_pred_ben",
        "y_pred_adv",
        "margin_ben",
        "failure_step",
        "event",
        "queries",
        "gradients",
        "flops",
        "duration_process",
        "duration_wall",
        "duration_process_shared",
        "duration_wall_shared",
        "norm_l0",
        "norm_l1",
        "norm_l2",
        "norm_linf",
        "broken_by",
    )

    @classmethod
    def required(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.default is MISSING]

    @classmethod
    def of(cls, arrays: Outcomes | Mapping[str, np.ndarray], source: Any = "outcome arrays") -> Outcomes:
        """`arrays` as Outcomes; arrays that predate the per-sample failure clock are one
        DataError line naming what they lack."""
        if isinstance(arrays, cls):
            return arrays
        missing = [name for name in cls.required() if name not in arrays]
        if missing:
            raise DataError(
                f"{source}: outcome arrays without {', '.join(missing)}, written before the compute clock; "
                "rerun the attack stage (delete reports/attacks or rerun `dvc repro`)"
            )
        known = {f.name for f in fields(cls)}
        return cls(**{name: array for name, array in arrays.items() if name in known})

    def duration(self, clock: str) -> np.ndarray:
        """Each sample's duration on `clock`: its FLOPs (compute), or its priced seconds."""
        return self.flops.astype(float) if clock == COMPUTE else getattr(self, f"duration_{clock}")

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.ORDER if getattr(self, name) is not None}

    def __getitem__(self, name: str) -> np.ndarray:
        return getattr(self, name)


@dataclass(frozen=True)
class BrittleRecord(ModelLabels, Record):
    """A model cell's brittle-score under one set of LIME settings (reports/brittle/<brittle_hash>.json)."""

    STAGE: ClassVar[str] = "brittle"

    brittle_hash: str
    model_hash: str
    train_hash: str
    n_samples: int
    n_features_mean: float
    brittle_score: float
    brittle_score_sd: float
    image_scores: list[float]
    positions: list[int]
    lime_samples: int
    perturbations_per_eval: int
    brittle_seed: int
    segments: dict[str, Any]
    t_brittle_process: float  # the LIME runs (predictions and explanations), whole, not per sample
    t_brittle_wall: float
    device: str


@dataclass(frozen=True)
class Finding:
    """A claim of the four papers tested on a run: a row of findings.csv."""

    id: str
    paper: str
    claim: str
    test: str
    n: int
    value: float
    lo: float
    hi: float
    p: float
    verdict: str
    detail: str
    clock: str = ""  # the clock a finding about time was tested on; empty: it involves no time


# ---------------------------------------------------------------------------------------------
# Table columns

ACCURACIES = ["acc_ben", "acc_adv"]
COMPUTE = "flops"  # the compute clock (FLOPs per sample); the others measure seconds
SECONDS = ("process", "wall")
CLOCKS = (COMPUTE, *SECONDS)
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
]
HASHES = ["train_hash", "model_hash", "attack_hash"]
# the model cell's validity probes (BenignRecord), joined to every attack cell of it by timing
PROBES = ["grad_zero_share", "grad_nonfinite_share", "query_repeats", "query_output_change", "query_flip_share", "acc_query_sd", "acc_query_range"]

# experiments.csv (timing): one row per attack cell
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
    "seconds_per_flop_process",
    "seconds_per_flop_wall",
    "threads",
    "degenerate",
    *PROBES,
]
# how the tables' text columns read back: norms stay "inf", "2"; an empty label stays text
EXPERIMENTS_DTYPES = {"norm": str, "defence_param": str}
TEXT_COLUMNS = {"id": str, "paper": str, "norm": str, "defence_param": str, "pretrained_on": str, "attack_family": str}

# survival_data.csv (timing): labels, never covariates, then the survival columns, then covariates
SURVIVAL_LABELS = ["attack_hash", "train_hash", "model_hash", "attack_family", "defence", "dataset"]
# each sample's compute until it failed or its budget ran out (never covariates)
SURVIVAL_COMPUTE = ["queries", "gradients", "flops"]
SURVIVAL_IDS = SURVIVAL_LABELS + ["duration", "event", "weight", *SURVIVAL_COMPUTE]

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
LATENCY = ["flops_per_query", *(f"seconds_per_query_{clock}" for clock in SECONDS)]
TRASH = (
    CELL
    + ["t_train", "t_predict", "acc_ben", "acc_adv", "t_attack", "E_T", "f_adv", "eps_max", "f_ben", "trash_adv", "trash_ben"]
    + ON_CLOCKS
    + ["E_Q", "E_G", *LATENCY, "degenerate"]
)
DEPTH_DECOMPOSITION = (
    ["dataset", "model", "depth", "epochs", "attack_family", "n_model_cells", "E_Q", "E_G", *LATENCY]
    + [f"E_T_{c}" for c in CLOCKS]
    + [f"t_train_{c}" for c in CLOCKS]
)
TRASH_SUMMARY = OVER_SEEDS + ["n_seeds", *(f"{m}_{s}" for m in ("trash_adv", "trash_ben") for s in ("mean", "lo", "hi")), "f_ben_mean", "f_adv_mean"]
CURVES = CELL + ["n_classes", "eps", "eps_standardised", "eps_pixel", "acc", "acc_norm"]
EVP_TAU = CELL + ["tau", "evp"]
EVP_CONVERGENCE = CELL + ["n_intervals", "evp", "tau"]
AUC_TABLE = without(OVER_SEEDS, "attack", "norm") + ["n_seeds", "R_mean", "R_sd", "S_mean", "S_sd"]
TAU_TABLE = ["n_classes", "tau", "w", "source"]
# validity.csv (aggregate): per model cell, each flag (true, false, or empty: not checked) and its detail
VALIDITY_FLAGS = ["non_monotone", "black_box_stronger", "gradients_masked", "randomised", "largest_eps_not_breaking"]
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
BRITTLE = sorted(f.name for f in fields(BrittleRecord)) + ["brittle_ri", "robust_acc", "robust_attack", "degenerate", "defence_stage"]
FINDINGS = [f.name for f in fields(Finding)]


def robustness_columns(curve_metrics: Sequence[str]) -> list[str]:
    """robustness.csv: per model cell and eps family, its threshold, the per-curve metrics of
    the registry (trashfire.metrics.registry.CURVE_METRICS: EVP ...), R and S and the guards."""
    return CELL + ["n_classes", "acc_ben", "tau", *curve_metrics, *AUC, *GUARDS]


# the survival stage's checks of what the model adds: the within-attack-cell concordance per
# fitter (and baseline) and attack family (`all`: every family), and per attack cell the
# selected model's E[T] against the Kaplan-Meier restricted mean to the same budget t*
CONCORDANCE_WITHIN = ["fitter", "model", "status", "attack_family", "concordance_within", "test_concordance_within"]
KM_CHECK = ["attack_hash", "attack_family", "defence", "dataset", "n", "events", "t_star", "E_T", "E_T_km", "ratio", "log_ratio", "flagged", "tolerance"]


# A card per trained cell (reports/cards/<train_hash>.json), in sections
CARD_TRAINING = TRAINED_LABELS + ["n_train"]
CARD_TIMES = ["clock", "t_train", "t_train_flops", "t_train_process", "t_train_wall"]
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
    "t_attack",
    "t_attack_process",
    "t_attack_wall",
    "attack_hash",
]
CARD_FAMILY = ["attack_family", "E_T", "trash_adv", "trash_ben", "f_adv", "f_ben", "E_Q", "flops_per_query", *(f"trash_adv_{c}" for c in CLOCKS)]


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
