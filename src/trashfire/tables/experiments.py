"""Stage `timing`, its first half: compile the records of the current grid into tidy tables.

`reports/experiments.csv`: one row per (trained cell x attack cell), per-sample costs on the
configured clock (t_train, t_predict, t_attack) and on every clock (suffixed with its name:
FLOPs on the compute clock `flops`, seconds on `process` and `wall`), and
each cell's outcome counts (misclassified before the attack, broken by it, survived) and
failure-clock counts (events within the budget, censored samples, event share, median step
of a failure), and the attack's properties (`attack_properties`: black_box, minimal). After
them, a `worst_case` row per model cell, norm and eps that two or more eps-bounded attacks
share: the per-sample minimum over them (`trashfire.tables.worst_case`). The stage's survival data sets are built from the same read by `trashfire.tables.datasets`
(the survival floor sits above this one).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from trashfire.attacks.spec import black_box_of
from trashfire.attacks.store import attack_record_path, benign_path, declaration_path, outcomes_path
from trashfire.core import schema
from trashfire.core.errors import DataError
from trashfire.core.grid import AttackCell, attack_cells
from trashfire.core.parallel import FORK_CELLS, results_as_completed, torch_loaded
from trashfire.core.records import read_ahead, read_json, read_npz, write_csv
from trashfire.core.schema import AttackRecord, BenignRecord, Outcomes
from trashfire.core.shared_arrays import ArrayChannel, Layout
from trashfire.core.stage import Artefacts
from trashfire.core.stats import degeneracy_threshold
from trashfire.tables.worst_case import worst_case_rows

log = logging.getLogger(__name__)


def experiments_table(cfg: DictConfig, attacks: Path, outcomes: bool = True) -> pd.DataFrame:
    """One row per attack cell of the grid, from the attack records in `attacks`; `outcomes=False`
    leaves out the counts from the per-sample arrays (a sweep's objectives need only the records)."""
    return tabulate(cfg, attacks, read_cells(cfg, attacks, outcomes))


SPLIT_READ_CELLS = FORK_CELLS  # a grid this large is read by two processes (workers > 1)


class Cell(NamedTuple):
    """An attack cell as read: its hash, its per-sample outcome arrays (None: not read) and its
    row of the experiments table (before the table-wide columns), made from its record."""

    attack_hash: str
    outcomes: Outcomes | None
    row: dict


def read_cells(cfg: DictConfig, attacks: Path, outcomes: bool = True, workers: int = 1) -> list[Cell]:
    """Each attack cell's hash, (with `outcomes`) its per-sample outcome arrays, and its row
    (from its record).
    With `workers` > 1 at SPLIT_READ_CELLS cells or more, a forked worker reads the last cells
    while this process reads the first (at 10^5 cells the read took a minute on one core): a
    share less than half (WORKER_SHARE), since the worker then packs and sends its arrays."""
    cells = attack_cells(cfg)
    n_classes = {name: int(spec.n_classes) for name, spec in cfg.data.items()}
    if workers <= 1 or len(cells) < SPLIT_READ_CELLS or torch_loaded():
        return _read_block(attacks, cells, n_classes, outcomes)
    mine = len(cells) - round(len(cells) * WORKER_SHARE)
    first: list[Cell] = []
    meanwhile = lambda: first.extend(_read_block(attacks, cells[:mine], n_classes, outcomes))  # noqa: E731
    channel = ArrayChannel()
    _INHERITED[CELLS], _INHERITED[CHANNEL] = cells[mine:], channel  # the forked worker's, not pickled to it
    try:
        ((_, (hashes, layout, packed, rows)),) = results_as_completed(
            _read_packed, [(attacks, n_classes, outcomes)], 2, __name__, threads=1, away=True, fork=True, meanwhile=meanwhile
        )
        if packed is not None:
            packed |= {name: (values, packed[name][1]) for name, values in channel.get(layout).items()}
    finally:
        _INHERITED.pop(CELLS, None)
        _INHERITED.pop(CHANNEL, None)
        channel.close()
    return first + [Cell(*cell) for cell in zip(hashes, unpack_outcomes(packed, len(hashes)), rows, strict=True)]


# the forked reader's share of the cells: reading a cell took 325 us, its packing, sending and
# unpickling a further 70 us (10^5 cells), so that with halves this process waited 5 s of 30
WORKER_SHARE = 0.45
CELLS, CHANNEL, READ = "cells", "channel", "read"
_INHERITED: dict[str, Any] = {}


def _read_block(attacks: Path, cells: list[AttackCell], n_classes: dict[str, int], outcomes: bool) -> list[Cell]:
    hashes = [cell.hash for cell in cells]
    files = [(attack_record_path(attacks, cell_hash), outcomes_path(attacks, cell_hash))[: 2 if outcomes else 1] for cell_hash in hashes]
    read_ahead(path for pair in files[:READ_AHEAD] for path in pair)
    for record_path, *_ in files:  # every record there before any is read
        if not record_path.is_file():
            raise DataError(f"attack record missing: {record_path}; run the attack stage first")
    read = []
    for start in range(0, len(hashes), READ_AHEAD):
        # the next cells' files fetched by the kernel while these are read (from a cold disk the read took twice as long)
        read_ahead(path for pair in files[start + READ_AHEAD : start + 2 * READ_AHEAD] for path in pair)
        for record_path, *arrays_path in files[start : start + READ_AHEAD]:
            record = AttackRecord.read(record_path)
            arrays = outcomes_at(arrays_path[0]) if outcomes else None
            read.append(Cell(record.attack_hash, arrays, experiment_row(record, arrays, n_classes[record.dataset])))
    return read


READ_AHEAD = 256  # cells


def _read_packed(attacks: Path, n_classes: dict[str, int], outcomes: bool) -> tuple[list[str], Layout, dict | None, list[dict]]:
    """_read_block of the inherited cells in a forked worker: the outcome arrays as one array
    per field (pack_outcomes), not 20 small arrays per cell, written into the inherited
    channel (its layout returned, and the packing without those arrays), and no records
    (unpickling 10^5 records took seconds; their rows carry what the tables read)."""
    cells = _read_block(attacks, _INHERITED[CELLS], n_classes, outcomes)
    _INHERITED[READ] = cells  # freed with the worker: freeing 10^5 cells' arrays one by one delayed its answer by seconds
    hashes, rows = [cell.attack_hash for cell in cells], [cell.row for cell in cells]
    if not outcomes:
        return hashes, {}, None, rows
    packed = pack_outcomes([cell.outcomes for cell in cells])
    layout = _INHERITED[CHANNEL].put({name: present for name, (present, _) in packed.items() if present is not None})
    return hashes, layout, {name: (None, shapes) for name, (_, shapes) in packed.items()}, rows


def pack_outcomes(cells: list[Outcomes]) -> dict[str, tuple]:
    """Cells' outcome arrays per field: (the present arrays in the cells' order, and each
    cell's shape, None where it lacks the field); a field whose arrays differ in dtype (text
    of several widths) as (None, the list of them)."""
    packed = {}
    for name in Outcomes.ORDER:
        arrays = [getattr(cell, name) for cell in cells]
        present = [array for array in arrays if array is not None]
        if not present:
            continue
        if len({array.dtype for array in present}) > 1:
            packed[name] = (None, arrays)
        else:
            packed[name] = (present, [None if array is None else array.shape for array in arrays])
    return packed


def unpack_outcomes(packed: dict[str, tuple] | None, count: int) -> list[Outcomes | None]:
    """pack_outcomes' cells again from each field's present arrays one after another in one
    array (as ArrayChannel.get gives them), each cell's array a view of it (a field of several
    dtypes: the arrays sent)."""
    if packed is None:
        return [None] * count
    fields: dict[str, list] = {}
    for name, (values, shapes) in packed.items():
        if values is None:
            fields[name] = shapes
            continue
        sizes = [0 if shape is None else math.prod(shape) for shape in shapes]
        ends = np.cumsum(sizes).tolist()
        fields[name] = [
            None if shape is None else values[end - size : end] if len(shape) == 1 else values[end - size : end].reshape(shape)
            for shape, size, end in zip(shapes, sizes, ends)
        ]
    names = list(fields)
    return [Outcomes(**dict(zip(names, arrays))) for arrays in zip(*fields.values())]  # every cell has the required fields


def read_outcomes(folder: str | Path, attack_hash: str) -> Outcomes:
    return outcomes_at(outcomes_path(folder, attack_hash))


def outcomes_at(path: Path) -> Outcomes:
    return Outcomes.of(read_npz(path), str(path))


def tabulate(cfg: DictConfig, attacks: Path, cells: list[Cell]) -> pd.DataFrame:
    table = flag_degenerate(with_clock(pd.DataFrame([cell.row for cell in cells]), cfg.clock), cfg.timing.degenerate, cfg.viability)
    table = with_properties(table, attack_properties(cfg.attack, attacks))
    return in_order(with_probes(table, attacks), schema.EXPERIMENTS)


def attack_properties(attacks: DictConfig, folder: str | Path) -> dict[str, dict]:
    """Per attack option: `black_box` (its option's key, else what ART declares of its
    class, as the attack stage recorded it: trashfire.attacks.spec.black_box_of; None where
    neither says) and `minimal` (its option's key; absent: false). Read from the option and
    the declarations, not from a list of attack names."""
    properties = {}
    for name, spec in attacks.items():
        path = declaration_path(folder, spec._target_)
        declared = read_json(path) if path.is_file() else None
        properties[name] = {
            "black_box": black_box_of(spec, declared),
            "minimal": bool(spec.get("minimal") or False),
            "black_box_components": black_box_components(spec, folder),
        }
    unknown = sorted(name for name, known in properties.items() if known["black_box"] is None)
    if unknown:
        log.warning(
            "black_box unknown for %s: no declaration of its class recorded (run the attack stage); the validity flags that need it stay unchecked",
            ", ".join(unknown),
        )
    return properties


def black_box_components(spec: DictConfig, folder: str | Path) -> str:
    """A composite's black-box components, comma-separated in its order: each component's
    `black_box`, else what ART declares of its class (where the attack stage recorded it).
    AutoAttack's rand version runs its own (APGD) components: none."""
    components = (spec.get("kwargs") or {}).get("components") or {}
    if spec.get("version") == "rand":
        return ""
    found = []
    for name, component in components.items():
        path = declaration_path(folder, component._target_)
        if black_box_of(component, read_json(path) if path.is_file() else None):
            found.append(name)
    return ",".join(found)


def with_properties(table: pd.DataFrame, properties: dict[str, dict]) -> pd.DataFrame:
    """Each row's attack properties (schema.ATTACK_PROPERTIES) as columns."""
    if table.empty:
        return table.assign(**{column: pd.Series(dtype=object) for column in schema.ATTACK_PROPERTIES})
    return table.assign(**{column: table["attack"].map(lambda attack, c=column: properties[attack][c]) for column in schema.ATTACK_PROPERTIES})


def with_probes(table: pd.DataFrame, folder: str | Path) -> pd.DataFrame:
    """Each row's model-cell validity probes from its benign record (trashfire.attacks.validity);
    empty where the record has none (written before the probes, or absent)."""
    if table.empty:
        return table.assign(**{column: pd.Series(dtype=float) for column in schema.PROBES})
    probes = pd.DataFrame([read_probes(folder, model_hash) for model_hash in table["model_hash"].unique()])
    return table.drop(columns=[c for c in schema.PROBES if c in table]).merge(probes, on="model_hash", how="left")


def read_probes(folder: str | Path, model_hash: str) -> dict:
    path = benign_path(folder, model_hash)
    record = BenignRecord.read(path).to_json() if path.is_file() else {}
    return {"model_hash": model_hash} | {column: record.get(column) for column in schema.PROBES}


def flag_degenerate(table: pd.DataFrame, degenerate: DictConfig, viability: DictConfig) -> pd.DataFrame:
    """`degenerate`: the model cell's benign test accuracy does not exceed chance by
    timing.degenerate.margin (default: the viability threshold tau(K), `viability`). Downstream,
    such cells are left out of R, EVP, the brittle correlations and the headline means."""
    if table.empty:
        return table.assign(degenerate=pd.Series(dtype=bool))
    margin, w, tau = degenerate.get("margin"), viability.w, viability.get("tau")
    # once per class count, not per row: reading the config 10^5 times took seconds
    by_classes = {k: degeneracy_threshold(int(k), margin, w, tau) for k in table["n_classes"].unique()}
    thresholds = table["n_classes"].map(by_classes)
    table = table.assign(degenerate=table["acc_ben"] <= thresholds)
    flagged = table.loc[table["degenerate"]].drop_duplicates("model_hash")
    if len(flagged):
        log.warning(
            "%d model cell(s) degenerate (benign accuracy <= %s): %s; left out of R, EVP, the brittle correlations and the headline means",
            len(flagged),
            "tau(K)" if margin is None else f"1/K + {margin:g}",
            ", ".join(f"{r.model} {r.defence} seed {r.seed} ({r.acc_ben:.2f})" for r in flagged.head(5).itertuples()) + (" ..." if len(flagged) > 5 else ""),
        )
    return table


def experiment_row(record: AttackRecord | dict, outcomes: Outcomes | dict | None, n_classes: int) -> dict:
    """An attack cell's record with its outcome and event counts from the per-sample arrays,
    if given."""
    record = AttackRecord.of(record)
    row = record.row() | {"evaluation": evaluation(record)}
    if outcomes is not None:
        outcomes = Outcomes.of(outcomes, f"attack cell {record.attack_hash}")
        row["n_failed"] = int((outcomes.y_pred_adv != outcomes.y_true).sum())
        row |= outcome_counts(outcomes.y_true, outcomes.y_pred_ben, outcomes.y_pred_adv)
        row |= event_counts(outcomes.event, outcomes.failure_step)
        row["queries_mean"] = float(outcomes.queries.mean())  # E[queries to failure], restricted to the budget
        row["gradients_mean"] = float(outcomes.gradients.mean())
        # a composite with Square: what its black-box component broke after the white-box ones
        row["n_broken_by_square"] = int((outcomes.broken_by == "square").sum()) if runs_square(record.config) and outcomes.broken_by is not None else np.nan
    row["n_classes"] = n_classes
    return row


def runs_square(config: dict) -> bool:
    """A composite whose components include Square (AutoAttack's standard version, or a custom
    one that lists it); the rand version does not."""
    return config.get("version") != "rand" and "square" in ((config.get("kwargs") or {}).get("components") or {})


def evaluation(record: AttackRecord) -> str:
    """What measured the cell, as a robustness card states it: 'AutoAttack standard, 100
    images, eps 0.1 (pixel, linf)'; an attack without a version by its option's name."""
    version = record.config.get("version")
    name = f"AutoAttack {version}" if version else record.attack
    return f"{name}, {record.n_attack} images, {record.attack_param} {record.attack_value:g} ({record.attack_units}, l{record.norm})"


def read_experiments(path: Path) -> pd.DataFrame:
    """experiments.csv (at `path`) with norms kept as the strings they are ("inf", "2")."""
    return pd.read_csv(path, dtype=schema.EXPERIMENTS_DTYPES)


def with_clock(table: pd.DataFrame, clock: str) -> pd.DataFrame:
    """t_x on the configured clock; t_x_<clock> keeps every clock (FLOPs per sample on the
    compute clock, seconds per sample on the others). A record without the compute clock's
    count (an imported model whose training cost is unknown) has NaN there."""
    for quantity in schema.TIMED:
        for each in schema.CLOCKS:
            if f"{quantity}_{each}" not in table:
                table[f"{quantity}_{each}"] = float("nan")
        table[quantity] = table[f"{quantity}_{clock}"]
    table["clock"] = clock
    return in_order(table, schema.EXPERIMENTS)


def in_order(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`table` with the schema's `columns` it has first, in their order, then any others."""
    leading = [c for c in columns if c in table]
    return table[leading + [c for c in table.columns if c not in leading]]


def outcome_counts(y_true: np.ndarray, y_pred_ben: np.ndarray, y_pred_adv: np.ndarray) -> dict[str, int]:
    """Per attack cell: samples wrong before the attack, broken by it, and survivors."""
    right_before = y_pred_ben == y_true
    return {
        "n_misclassified_before": int((~right_before).sum()),
        "n_broken": int((right_before & (y_pred_adv != y_true)).sum()),
        "n_survived": int((right_before & (y_pred_adv == y_true)).sum()),
    }


def event_counts(event: np.ndarray, failure_step: np.ndarray) -> dict[str, int | float]:
    """Per attack cell: failures within the budget (events), censored samples, the event
    share and the median step (iteration or query) of a failure."""
    event = np.asarray(event).astype(bool)
    n = len(event)
    return {
        "n_events": int(event.sum()),
        "n_censored": int(n - event.sum()),
        "event_share": float(event.mean()) if n else float("nan"),
        "median_event_step": _median_known_step(failure_step[event]),
    }


def _median_known_step(steps: np.ndarray) -> float:
    """Steps of -1 are unknown (ART's reference engine shows none)."""
    known = steps[steps >= 0]
    return float(np.median(known)) if len(known) else float("nan")


def read_experiments_of_grid(cfg: DictConfig, artefacts: Artefacts, workers: int = 1) -> tuple[pd.DataFrame, dict[str, Outcomes]]:
    """The experiments table's attacks' rows (without the worst cases) with each attack cell's
    outcome arrays, by attack hash, for the survival data sets built from the same read
    (`trashfire.tables.datasets`). `workers`: read_cells'."""
    attacks = artefacts.input("attacks")
    cells = read_cells(cfg, attacks, workers=workers)
    return tabulate(cfg, attacks, cells), {cell.attack_hash: cell.outcomes for cell in cells}


def write_experiments(artefacts: Artefacts, experiments: pd.DataFrame, outcomes: dict[str, Outcomes]) -> None:
    """experiments.csv: the attacks' rows with the worst cases."""
    write_csv(with_worst_cases(experiments, outcomes), artefacts.output("experiments.csv"))


def with_worst_cases(experiments: pd.DataFrame, outcomes: dict[str, Outcomes]) -> pd.DataFrame:
    """The attacks' rows, then the worst case per sample of each model cell, norm and eps that
    two or more eps-bounded attacks share (trashfire.tables.worst_case)."""
    worst = worst_case_rows(experiments, outcomes)
    table = experiments if worst.empty else pd.concat([experiments, worst], ignore_index=True)
    missing = {column: np.nan for column in schema.WORST_CASE_COLUMNS if column not in table}  # its columns, even without rows
    return in_order(table.assign(**missing), schema.EXPERIMENTS)
