"""Typed records: `TrainRecord` (models/<train_hash>.json), `BenignRecord`
(reports/attacks/benign/<model_hash>.json), `AttackRecord` (reports/attacks/<attack_hash>.json),
`Outcomes` (its per-sample arrays, the .npz beside it) and `Finding` (a row of findings.csv);
the brittle stage's record is its own package's (`trashfire.brittle.spec.BrittleRecord`). Writers build them,
readers read through them; on disk a record is JSON with its keys sorted, so where a field is
declared (the label block comes from `labels.ModelLabels`) changes no file.

Every record file carries `schema_version` (SCHEMA_VERSION). A reader brings an older record
up to date through its type's MIGRATIONS, one version at a time (a file without the key is
version 1), so no reader has a branch for older records; a record newer than this code is
refused with one line. A migration fills what can be worked out from the old record; what
cannot (an old record's missing data hash) stays None, which no cache key matches, so that
cell is computed again."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache, reduce
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from trashfire.core.errors import DataError
from trashfire.core.records import read_json, write_json
from trashfire.core.schema.labels import MODEL_LABELS, ModelLabels, without
from trashfire.core.schema.units import COMPUTE, SECONDS, to_standardised

R = TypeVar("R", bound="Record")

SCHEMA_VERSION = 2  # bump with a migration from the version before in each record type's MIGRATIONS
VERSION_KEY = "schema_version"
Migration = Callable[[dict[str, Any]], dict[str, Any]]


class Record:
    """A JSON record as a dataclass. A field without a default is required: a record that
    lacks one is corrupt (one DataError line naming what it lacks and the stage to rerun);
    a field with a default is one older records may lack. Unknown keys are left out."""

    STAGE: ClassVar[str] = ""  # the stage that writes it, for the rerun hint
    LEAD: ClassVar[tuple[str, ...]] = ()  # required keys named first when missing
    # version -> the record at the next version; a version not listed changed nothing here
    MIGRATIONS: ClassVar[dict[int, Migration]] = {}

    @classmethod
    def migrated(cls, data: Mapping[str, Any], source: Any = "record") -> dict[str, Any]:
        """The record as this code's SCHEMA_VERSION lays it out."""
        version = data.get(VERSION_KEY, 1)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
            raise DataError(
                f"record {source}: {VERSION_KEY} {version!r}; this trashfire reads 1 to {SCHEMA_VERSION}: "
                f"update trashfire, or delete it and rerun the {cls.STAGE} stage"
            )
        data = dict(data)
        for step in range(version, SCHEMA_VERSION):
            data = cls.MIGRATIONS.get(step, dict)(data)
        return data | {VERSION_KEY: SCHEMA_VERSION}

    @classmethod
    def required(cls) -> list[str]:
        """The keys a record must have: LEAD, the record's own, then the label block's."""
        return list(_keys(cls)[0])

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any], source: Any = "record") -> R:
        data = cls.migrated(data, source)
        required, known = _keys(cls)
        missing = [key for key in required if key not in data]
        if missing:
            raise DataError(f"corrupt record {source}: no {', '.join(missing)}; delete it and rerun the {cls.STAGE} stage to recompute it")
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

    def written(self) -> dict[str, Any]:
        """The record as its file holds it: its JSON with the schema version."""
        return dict(sorted((self.to_json() | {VERSION_KEY: SCHEMA_VERSION}).items()))

    def write(self, path: str | Path) -> None:
        write_json(path, self.written())

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
    # the identity of the data it was trained on (trashfire.core.grid.split_hashes); None in
    # a schema-1 record that lacks it: no cache key matches None, so the cell is trained again
    data_hash: str | None = None
    pretrain_hash: str | None = None
    # the compute clock (trashfire.models.flops), per sample like the seconds: the training
    # run's FLOPs up to this epoch over n_train (its attack steps and a fine-tuned cell's base
    # run included), and one forward pass; None: unknown (an external model without
    # them, a schema-1 record that lacks them)
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
    # validity probes on the attack subset (trashfire.attacks.validity); a schema-1 record may
    # lack them, and the attack stage probes such a cell again
    probe_samples: int | None = None
    grad_zero_share: float | None = None
    grad_nonfinite_share: float | None = None
    query_repeats: int | None = None
    query_output_change: float | None = None
    query_flip_share: float | None = None
    acc_query_sd: float | None = None
    acc_query_range: float | None = None
    output_probability: bool | None = None  # the model returns probabilities, not logits
    gradient_calls: int | None = None  # gradient calls within one forward pass: a dynamic defence
    data_hash: str | None = None  # the attack subset's identity (trashfire.core.grid.split_hashes); None: a schema-1 record without it, evaluated again


# what the tables downstream read from an attack record, named first when missing
ATTACK_RECORD_LEAD = ("dataset", "attack", "acc_ben", "acc_adv", *(f"t_{q}_{clock}" for q in ("train", "predict", "attack") for clock in SECONDS))


def with_pixel_std(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 to 2: an attack record of version 1 may lack pixel_std; a pixel-unit strength
    still holds it as the ratio of its two eps values (a standardised one needs none)."""
    if "pixel_std" in record or "attack_value" not in record:
        return record
    ratio = record.get("attack_units") == "pixel" and record.get("attack_value_standardised")
    return record | {"pixel_std": record["attack_value"] / record["attack_value_standardised"] if ratio else math.nan}


@dataclass(frozen=True)
class AttackRecord(ModelLabels, Record):
    """An attack cell (reports/attacks/<attack_hash>.json): its model cell's labels, training
    and benign results, then the attack's. The eps is stored once: `attack_value` in
    `attack_units` with the data set's `pixel_std`; the JSON's `attack_value_standardised` is
    derived from them (to_standardised)."""

    STAGE: ClassVar[str] = "attack"
    LEAD: ClassVar[tuple[str, ...]] = ATTACK_RECORD_LEAD
    MIGRATIONS: ClassVar[dict[int, Migration]] = {1: with_pixel_std}

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
    data_hash: str | None = None  # the attacked images' identity (trashfire.core.grid.split_hashes); None: a schema-1 record without it, attacked again
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


@cache
def _keys(cls: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """A record type's required keys (Record.required) and the keys its constructor takes, read
    once: `dataclasses.fields` per record was seconds at 10^5 attack cells."""
    names = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    required = tuple(dict.fromkeys([*cls.LEAD, *without(names, *MODEL_LABELS), *names]))
    return required, frozenset(f.name for f in fields(cls) if f.init)


def _ascending(values: np.ndarray, strictly: bool = False) -> bool:
    values = np.asarray(values)
    return bool((values[1:] > values[:-1]).all() if strictly else (values[1:] >= values[:-1]).all())


@cache
def _field_defaults(cls: type) -> tuple[tuple[str, Any], ...]:
    """A dataclass's fields and defaults, read once: `dataclasses.fields` per read of 10^5
    attack cells' arrays was seconds."""
    return tuple((f.name, f.default) for f in fields(cls))


@dataclass(frozen=True)
class Outcomes:
    """An attack cell's per-sample outcomes (reports/attacks/<attack_hash>.npz), from the
    engine's per-sample failure clock: the attack-subset position, true label, the first
    query's prediction and benign margin (true-class logit minus the best other), the
    adversarial prediction, the failure step (-1: unknown), the compute it took part in until
    it failed or its budget ran out (forward `queries`, input `gradients`, and `flops`), its
    seconds on both clocks priced from that compute (`duration_<clock>`: FLOPs x the cell's
    seconds per FLOP at full batch) and shared (`duration_<clock>_shared`: equal shares of
    each lap, which sum to the cell's time), the event (misclassified within the budget), the
    l0/l1/l2/linf norms of the returned example and, for a sample still standing at the end
    of its budget, `margin_at_budget`: the true-class logit minus the best other at the
    returned example (NaN where it broke; None in a record written before it was kept).
    A composite's cells (engine sequence) add `broken_by`: the component that broke each
    sample ("first_query": misclassified before any ran; "": none broke it). A minimal-norm
    attack's cells (FMN, DDN) add `norm_by_step` (samples x steps): the smallest adversarial
    norm it had found by each step, in its own norm on the standardised scale (inf before its
    first), from which robust accuracy against queries is read at any eps."""

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
    margin_at_budget: np.ndarray | None = None
    norm_by_step: np.ndarray | None = None

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
        "margin_at_budget",
        "norm_by_step",
    )

    @classmethod
    def required(cls) -> list[str]:
        return [name for name, default in _field_defaults(cls) if default is MISSING]

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
        known = {name for name, _ in _field_defaults(cls)}
        return cls(**{name: array for name, array in arrays.items() if name in known})

    def positions(self) -> np.ndarray:
        """The samples' positions in the attack subset; arrays without them are in subset order."""
        return np.arange(len(self.y_true)) if self.position is None else np.asarray(self.position)

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The rows at `positions` (every one of them attacked here)."""
        where = self.positions()
        if _ascending(where):  # as the attack stage writes them: argsort's order is the rows' own
            return np.searchsorted(where, positions)
        order = np.argsort(where, kind="stable")
        return order[np.searchsorted(where, positions, sorter=order)]

    @staticmethod
    def shared_positions(cells: Sequence[Outcomes]) -> np.ndarray:
        """The positions every cell attacked (cells with another `samples` budget attack other
        subsets); one cell's as it has them."""
        # sorted and distinct, as the attack stage writes them, the positions need no np.unique
        # inside intersect1d (at 10^5 cells its hash-based unique cost seconds)
        positions = [cell.positions() for cell in cells]
        if len(positions) == 1:
            return positions[0]
        distinct = [where if _ascending(where, strictly=True) else np.unique(where) for where in positions]
        if all(np.array_equal(where, distinct[0]) for where in distinct[1:]):  # a family's cells attack one subset: no sort
            return distinct[0]
        return reduce(lambda shared, where: np.intersect1d(shared, where, assume_unique=True), distinct)

    def duration(self, clock: str) -> np.ndarray:
        """Each sample's duration on `clock`: its FLOPs (compute), or its priced seconds."""
        return self.flops.astype(float) if clock == COMPUTE else getattr(self, f"duration_{clock}")

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.ORDER if getattr(self, name) is not None}

    def __getitem__(self, name: str) -> np.ndarray:
        return getattr(self, name)


@dataclass(frozen=True)
class Finding:
    """A claim of the four papers tested on a run: a row of findings.csv. `n` counts independent
    units (trained models, or (configuration, seed) units; `units` names them), never cells of
    one model; `p` is the claim's raw p and `p_adjusted` Holm's over the run's claims (issue 59)."""

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
    units: str = ""  # what n counts
    p_adjusted: float = math.nan  # Holm-adjusted over the run's claims (a sensitivity row: in its claim's place)
    smallest_effect: float = math.nan  # the smallest effect of interest, or the equivalence margin (conf/metrics)
    detectable: float = math.nan  # the smallest |effect| this run detects at 80% power
    units_to_settle: float = math.nan  # about how many units would settle the claim at the effect seen
