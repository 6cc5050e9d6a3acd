"""Stage `attack`: every model cell (a trained cell plus its predict-time defence) against
every entry of the attack grid, skipping cells already recorded.

Per model cell, a benign record (accuracy and prediction time on the test split, with the
defence) is kept under `benign/`. Per attack cell, `<hash>.npz` holds the per-sample
outcomes of `trashfire.attacks.engine` (attack-subset position, true label, the first
query's prediction and benign margin, the adversarial prediction, failure step, the compute
counted (queries, gradients, FLOPs), the durations priced and shared on both clocks, event,
and the l0/l1/l2/linf norms of the returned example) and `<hash>.json` the cell's record,
written after the arrays as its commit mark. The record's t_attack is the engine's whole
run measured from outside; the shared durations sum to it. The model's FLOPs per query and
per gradient are measured once per model cell (trashfire.models.flops).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import asdict, dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from trashfire.attacks import loops, validity
from trashfire.attacks.art_attacks import art_classifier, build_attack, declaration
from trashfire.attacks.engine import attack_samples, calibrate, margin_at_budget, model_cost, price, warm_up_batch
from trashfire.attacks.samples import budget_subset, perturbation_norms
from trashfire.attacks.spec import AttackSpec, attack_strength, black_box_of, engine_of
from trashfire.attacks.store import attack_record_path, benign_path, declaration_path, outcomes_path
from trashfire.attacks.target import Target
from trashfire.core.clocks import SECONDS, STEPS, Elapsed, LapClock, Rate, Stopwatch, pooled_rate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import AttackCell, ModelCell, attack_cells
from trashfire.core.parallel import describe, resolve_workers, run_jobs, threads_per_cell, tick
from trashfire.core.records import is_recorded, read_json, recorded, remove_dead_temps, write_json, write_npz
from trashfire.core.schema import AttackRecord, BenignRecord, Outcomes, TrainRecord, cell_labels
from trashfire.core.stage import Artefacts
from trashfire.core.stats import accuracy
from trashfire.data.datasets import Split, cached_split
from trashfire.models.architectures import resolve_device
from trashfire.models.flops import SampleCost
from trashfire.models.training import load_weights, record_path

log = logging.getLogger(__name__)


def _seed_everything(seed_key: str) -> None:
    """Gauss-out draws noise from NumPy's global generator: seed it per cell (its seed key,
    trashfire.core.grid: the cache version does not change the draws)."""
    seed = int(seed_key[:8], 16)
    np.random.seed(seed)
    torch.manual_seed(seed)


def image_seeds(model_key: str, positions: np.ndarray, strength: float) -> np.ndarray:
    """The seed of each image's search: from the model cell, the sample's position in the
    attack subset and the strength, not from the attack, so that a composite's component
    (autoattack's APGD-CE) repeats the search of that component's own cell on each image."""
    keys = (f"{model_key}:{int(position)}:{float(strength)!r}".encode() for position in positions)
    return np.array([int.from_bytes(hashlib.sha256(key).digest()[:4], "little") % (2**31 - 2) + 1 for key in keys], dtype=np.int64)


def evaluate_benign(classifier, split: Split, cell: ModelCell, device) -> BenignRecord:
    _seed_everything(cell.seed_key)
    x_test = split.x_test.numpy()
    with Stopwatch(device) as watch:
        preds = classifier.predict(x_test, batch_size=256).argmax(1)
    n = len(x_test)
    return BenignRecord(
        model_hash=cell.hash,
        acc_ben=accuracy(split.y_test.numpy(), preds),
        t_predict_process=watch.elapsed.process / n,
        t_predict_wall=watch.elapsed.wall / n,
        n_test=n,
        data_hash=split.attack_data_hash,
        **validity.probe(classifier, split.x_attack.numpy(), split.y_attack.numpy()),
    )


def benign_pending(folder: str | Path, model_hash: str, data_hash: str) -> bool:
    """No benign record yet, one of other data (`data_hash`: the attack subset's identity,
    trashfire.core.grid.split_hashes), or one without the validity probes (a schema-1 record, or one before their last probe)."""
    path = benign_path(folder, model_hash)
    record = recorded(path)
    if record is None:
        return True
    benign = BenignRecord.of(record, path)  # read once, checked as BenignRecord.read checks it
    return benign.data_hash != data_hash or benign.gradient_calls is None


def attack_recorded(folder: str | Path, cell: AttackCell) -> bool:
    """A whole record of the cell, attacked on the images this config prepares: one of other
    data, or a schema-1 record without a data hash, is attacked again."""
    record = recorded(attack_record_path(folder, cell.hash))
    return record is not None and record.get("data_hash") == cell.data_hash


@dataclass
class Attacked:
    """An attack cell run, its compute counted and not yet priced."""

    cell: AttackCell
    keep: np.ndarray  # positions in the attack subset
    x: np.ndarray
    y: np.ndarray
    x_adv: np.ndarray
    clocked: dict[str, np.ndarray]
    clock: LapClock
    elapsed: Elapsed  # the engine's whole run, measured from outside
    engine: str
    early_exit: bool
    pixel_std: float

    @property
    def pool(self) -> int | None:
        """The torch loop's cells of one model cell share their steps' rate per batch size."""
        return int(self.cell.spec.get("batch_size", 100)) if self.engine == "torch" else None


def attack_cell(classifier, split: Split, cell: AttackCell, target: Target, cost: SampleCost) -> Attacked:
    """Run one attack cell on its samples, its compute counted (`price_cell` prices it)."""
    _seed_everything(cell.seed_key)
    keep = budget_subset(split.y_attack.numpy(), cell.spec.get("samples"))
    x, y = split.x_attack.numpy()[keep], split.y_attack.numpy()[keep]
    pixel_std = float(np.mean(split.std))
    engine, early_exit = engine_of(cell.spec), bool(cell.spec.get("early_exit", True))
    strength = attack_strength(cell.spec, pixel_std)
    attack = None if engine == "torch" else build_attack(classifier, cell.spec, pixel_std)
    with Stopwatch(target.device) as watch:
        x_adv, clocked, clock = attack_samples(
            engine, attack, cell.spec, target, x, y, strength, early_exit, image_seeds(cell.model.seed_key, keep, strength), cost
        )
    clocked["margin_at_budget"] = margin_at_budget(target, x_adv, y, clocked["event"], cell.spec.get("batch_size", 100))  # outside the attack's time
    return Attacked(cell, keep, x, y, x_adv, clocked, clock, watch.elapsed, engine, early_exit, pixel_std)


def steps_rates(attacked: list[Attacked], target: Target) -> dict[int, Rate]:
    """The torch loop's seconds per FLOP at full batch, one per batch size over the model
    cell's FGM, PGD and DeepFool cells run together: the median of all their reference steps
    (many more than one cell has, so the rate measures the model, not a moment's load); a
    cell smaller than its batch (DeepFool's 20 images) takes it from the others, and a pool
    where no cell ran a whole batch is calibrated once."""
    pools: dict[int, list[Attacked]] = {}
    for run in attacked:
        if run.pool is not None:
            pools.setdefault(run.pool, []).append(run)
    rates = {}
    for batch_size, runs in pools.items():
        names = sorted({run.cell.spec["name"] for run in runs})
        rate = pooled_rate([run.clock for run in runs], STEPS, f"model cell: {len(runs)} cell(s) of {', '.join(names)}")
        rates[batch_size] = rate or calibrate(target, runs[0].clock, runs[0].x, runs[0].y, batch_size)
    return rates


def price_cell(run: Attacked, target: Target, shared: dict[str, Any], cost: SampleCost, steps_rate: Rate | None) -> tuple[AttackRecord, Outcomes]:
    """An attack cell's record (`shared`: the model cell's part) and per-sample outcomes, its
    compute priced (`steps_rate`: the model cell's rate of the torch loop's steps)."""
    cell, n = run.cell, len(run.x)
    priced, rates = price(run.clock, target, run.x, run.y, cell.spec.get("batch_size", 100), steps_rate)
    outcomes = Outcomes(position=run.keep, y_true=run.y, **run.clocked, **priced, **perturbation_norms(run.x, run.x_adv))
    record = AttackRecord(
        **shared,
        attack_hash=cell.hash,
        attack=cell.attack,
        norm=cell.norm,
        attack_param=cell.param,
        attack_value=cell.value,  # in attack_units; the record derives the standardised strength the engine got
        attack_units=AttackSpec.of(cell.spec).units,
        pixel_std=run.pixel_std,  # converts eps between pixel and standardised units downstream
        config=cell.spec,
        engine=run.engine,
        early_exit=run.early_exit,
        n_attack=n,
        n_events=int(run.clocked["event"].sum()),
        acc_ben_attack_subset=accuracy(run.y, run.clocked["y_pred_ben"]),
        acc_adv=accuracy(run.y, run.clocked["y_pred_adv"]),
        t_attack_process=run.elapsed.process / n,
        t_attack_wall=run.elapsed.wall / n,
        t_attack_flops=float(run.clocked["flops"].mean()),
        flops_forward=cost.forward,
        flops_gradient=cost.gradient,
        rates={group: asdict(rate) for group, rate in rates.items()},
        **seconds_per_flop(outcomes),
    )
    return record, outcomes


def run_attack_cell(
    classifier, split: Split, cell: AttackCell, device, shared: dict[str, Any], cost: SampleCost | None = None
) -> tuple[AttackRecord, Outcomes]:
    """One attack cell alone, priced at its own reference steps: its record and outcomes.
    `cost`: the model cell's FLOPs per query and gradient (measured here when not given)."""
    target = Target(classifier, device)
    cost = cost or model_cost(target, split.x_attack.numpy(), split.y_attack.numpy())
    run = attack_cell(classifier, split, cell, target, cost)
    return price_cell(run, target, shared, cost, steps_rates([run], target).get(run.pool))


def seconds_per_flop(outcomes: Outcomes) -> dict[str, float]:
    """The cell's priced seconds per FLOP on each clock, over its samples: what converts its
    compute-clock E[T] to seconds."""
    flops = float(outcomes.flops.sum())
    return {f"seconds_per_flop_{clock}": float(outcomes.duration(clock).sum()) / flops if flops else math.nan for clock in SECONDS}


def attack_model_cell(artefacts: Artefacts, model_cell: ModelCell, cells: list[AttackCell], split: Split, device) -> None:
    folder, models = artefacts.output("attacks"), artefacts.input("models")
    train = TrainRecord.read(record_path(models, model_cell.train.hash))
    classifier = art_classifier(load_weights(models, model_cell.train, split).to(device), split, model_cell.defence, device)
    benign_file = benign_path(folder, model_cell.hash)
    if benign_pending(folder, model_cell.hash, split.attack_data_hash):
        evaluate_benign(classifier, split, model_cell, device).write(benign_file)
    benign = BenignRecord.read(benign_file)
    shared = {
        "data_hash": split.attack_data_hash,
        "train_hash": model_cell.train.hash,
        "model_hash": model_cell.hash,
        **cell_labels(train, model_cell.defence),
        "n_train": train.n_train,
        **{f"t_train_{clock}": getattr(train, f"t_train_{clock}") for clock in SECONDS},  # each seconds clock's field of the records
        "t_train_flops": train.t_train_flops,
        "t_train_source": train.t_train_source,
        "acc_ben": benign.acc_ben,
        **{f"t_predict_{clock}": getattr(benign, f"t_predict_{clock}") for clock in SECONDS},
        "device": str(device),
        "threads": torch.get_num_threads(),
    }
    target = Target(classifier, device)
    cost = cached_cost(target, model_cell, split)
    shared["t_predict_flops"] = float(cost.forward)  # one forward query per sample, the defence included
    for batch_size in sorted({cell.spec.get("batch_size", 100) for cell in cells if engine_of(cell.spec) == "torch"}):
        warm_up_batch(target, split.x_attack.numpy(), split.y_attack.numpy(), batch_size)  # the first cell's step 0 measures the model, not the set-up
    # the cells run first and are priced together: the torch loop's steps of all of them
    # measure one rate; each cell is written (arrays, then its record) once priced
    attacked = []
    for cell in cells:
        attacked.append(attack_cell(classifier, split, cell, target, cost))
        tick()  # the stage's bar moves per attack cell, as each is computed
    rates = steps_rates(attacked, target)
    for run in attacked:
        record, outcomes = price_cell(run, target, shared, cost, rates.get(run.pool))
        write_npz(outcomes_path(folder, run.cell.hash), **outcomes.to_arrays())
        record.write(attack_record_path(folder, run.cell.hash))


_COSTS: dict[str, SampleCost] = {}


def cached_cost(target: Target, model_cell: ModelCell, split: Split) -> SampleCost:
    """The model's FLOPs per query and gradient: counted once per architecture and data shape
    in this process (FLOPs do not depend on the weights, so every seed and train-time defence
    of an architecture shares them), and anew for a predict-time preprocessor (its work is
    part of the query)."""
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    if target.preprocessors:
        return model_cost(target, x, y)
    key = json.dumps([model_cell.train.spec["model"], list(split.input_shape), split.n_classes], sort_keys=True, default=str)
    if key not in _COSTS:
        _COSTS[key] = model_cost(target, x, y)
    return _COSTS[key]


def attack_job(cfg: DictConfig, artefacts: Artefacts, model_cell: ModelCell, cells: list[AttackCell]) -> int:
    """One model cell's pending attack cells (one worker's job); returns how many."""
    device = resolve_device(cfg.compute.device)
    train = model_cell.train
    split = cached_split(artefacts.input("processed"), cfg, train.dataset, train.seed)
    attack_model_cell(artefacts, model_cell, cells, split, device)
    return len(cells)


def declare_attacks(cfg: DictConfig, folder: Path) -> None:
    """Record what ART declares of each attack class of the grid (`declaration_path`), which
    the tables read (black_box: trashfire.attacks.spec.black_box_of); refuse, before any cell
    runs, an attack whose class declares nothing and whose option does not say."""
    declarations = declaration_path(folder, "_").parent
    if declarations.is_dir():
        remove_dead_temps(declarations)
    for name, spec in cfg.attack.items():
        declared = declaration(spec._target_)
        if black_box_of(spec, declared) is None:
            raise ConfigError(
                f"attack.{name}.black_box",
                f"missing; {spec._target_} declares no estimator requirements (ART's _estimator_requirements): state black_box: true (it only queries the model's outputs) or false",
            )
        path = declaration_path(folder, spec._target_)
        if not is_recorded(path) or read_json(path) != declared:
            write_json(path, declared)


def spread(cells: list[AttackCell], workers: int, models: int) -> list[list[AttackCell]]:
    """One model cell's pending attack cells as jobs: one, or, where the `models` with pending
    cells are fewer than the workers, as many as keep every worker busy (dealt in turn, so
    each job gets of every attack). Each job prices its cells' steps at the rate of its own
    cells' laps."""
    parts = min(len(cells), -(-workers // models)) if models < workers else 1
    return [cells[k::parts] for k in range(parts)]


def attack_grid(cfg: DictConfig, artefacts: Artefacts, cells: list[AttackCell] | None = None, desc: str = "attack cells") -> int:
    """Attack every pending cell of the grid (or of `cells`, a part of it); returns how many
    were computed."""
    device = resolve_device(cfg.compute.device)
    folder = artefacts.output("attacks")
    cells = attack_cells(cfg) if cells is None else cells
    if folder.is_dir():
        remove_dead_temps(folder)
    declare_attacks(cfg, folder)
    for cell in cells:  # before any compute: what a torch loop refuses (a standard version that is not AutoAttack's)
        if engine_of(cell.spec) == "torch" and (check := loops.of(cell.spec).check) is not None:
            check(cell.spec)
    pending = [cell for cell in cells if not attack_recorded(folder, cell)]
    workers = resolve_workers(cfg.compute.workers, device.type)
    threads = threads_per_cell(workers, cfg.compute.threads)
    jobs = [
        (cfg, artefacts, model_cell, chunk)
        for model_cell, group in groupby(pending, key=lambda cell: cell.model)
        for chunk in spread(list(group), workers, len({cell.model.hash for cell in pending}))
    ]
    queued = {job[2].hash for job in jobs}
    models = {cell.model.hash: cell for cell in cells}
    jobs += [(cfg, artefacts, c.model, []) for h, c in models.items() if h not in queued and benign_pending(folder, h, c.data_hash)]  # probes for older records
    jobs.sort(key=lambda job: (job[2].train.depth or 1) * len(job[3]), reverse=True)  # the longest first keeps the workers busy to the end
    log.info(
        "%d attack cells, %d recorded, %d to run on %s (%s)", len(cells), len(cells) - len(pending), len(pending), device, describe(workers, threads, len(jobs))
    )
    with tqdm(total=len(pending), desc=desc, disable=not cfg.compute.progress) as progress:
        run_jobs(attack_job, jobs, workers, progress, log.name, threads)
    return len(pending)
