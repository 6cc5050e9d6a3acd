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
import logging
import math
from dataclasses import asdict
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from trashfire.attacks import art_classifier, attack_strength, budget_subset, build_attack, engine_of, perturbation_norms, validity
from trashfire.attacks.engine import attack_samples, model_cost, price, warm_up_batch
from trashfire.attacks.target import Target
from trashfire.core.clocks import SECONDS, Stopwatch
from trashfire.core.grid import AttackCell, ModelCell, attack_cells
from trashfire.core.parallel import describe, resolve_workers, run_jobs
from trashfire.core.records import is_recorded, remove_dead_temps, write_npz
from trashfire.core.schema import AttackRecord, BenignRecord, Outcomes, TrainRecord, cell_labels
from trashfire.core.store import attack_record_path, benign_path, outcomes_path
from trashfire.data.datasets import Split, cached_split
from trashfire.metrics import accuracy
from trashfire.models import resolve_device
from trashfire.models.flops import SampleCost
from trashfire.models.training import load_weights, record_path

log = logging.getLogger(__name__)


def _seed_everything(cell_hash: str) -> None:
    """Gauss-out draws noise from NumPy's global generator: seed it per cell."""
    seed = int(cell_hash[:8], 16)
    np.random.seed(seed)
    torch.manual_seed(seed)


def image_seeds(model_hash: str, positions: np.ndarray, strength: float) -> np.ndarray:
    """The seed of each image's search: from the model cell, the sample's position in the
    attack subset and the strength, not from the attack, so that a composite's component
    (autoattack's APGD-CE) repeats the search of that component's own cell on each image."""
    keys = (f"{model_hash}:{int(position)}:{float(strength)!r}".encode() for position in positions)
    return np.array([int.from_bytes(hashlib.sha256(key).digest()[:4], "little") % (2**31 - 2) + 1 for key in keys], dtype=np.int64)


def evaluate_benign(classifier, split: Split, cell: ModelCell, device) -> BenignRecord:
    _seed_everything(cell.hash)
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
        **validity.probe(classifier, split.x_attack.numpy(), split.y_attack.numpy()),
    )


def benign_pending(folder: str | Path, model_hash: str) -> bool:
    """No benign record yet, or one from before the validity probes."""
    path = benign_path(folder, model_hash)
    return not is_recorded(path) or BenignRecord.read(path).query_output_change is None


def run_attack_cell(
    classifier, split: Split, cell: AttackCell, device, shared: dict[str, Any], cost: SampleCost | None = None
) -> tuple[AttackRecord, Outcomes]:
    """One attack cell: its record (`shared`: the model cell's part) and per-sample outcomes.
    `cost`: the model cell's FLOPs per query and gradient (measured here when not given)."""
    _seed_everything(cell.hash)
    keep = budget_subset(split.y_attack.numpy(), cell.spec.get("samples"))
    x, y = split.x_attack.numpy()[keep], split.y_attack.numpy()[keep]
    pixel_std = float(np.mean(split.std))
    engine, early_exit = engine_of(cell.spec), bool(cell.spec.get("early_exit", True))
    strength = attack_strength(cell.spec, pixel_std)
    attack = None if engine == "torch" else build_attack(classifier, cell.spec, pixel_std)
    target = Target(classifier, device)
    cost = cost or model_cost(target, x, y)
    with Stopwatch(device) as watch:
        x_adv, clocked, clock = attack_samples(
            engine, attack, cell.spec, target, x, y, strength, early_exit, image_seeds(cell.model.hash, keep, strength), cost
        )
    priced, rates = price(clock, target, x, y, cell.spec.get("batch_size", 100))
    n = len(x)
    outcomes = Outcomes(position=keep, y_true=y, **clocked, **priced, **perturbation_norms(x, x_adv))
    record = AttackRecord(
        **shared,
        attack_hash=cell.hash,
        attack=cell.attack,
        norm=cell.norm,
        attack_param=cell.param,
        attack_value=cell.value,  # in attack_units; the record derives the standardised strength the engine got
        attack_units=cell.spec.get("units", "standardised"),
        pixel_std=pixel_std,  # converts eps between pixel and standardised units downstream
        config=cell.spec,
        engine=engine,
        early_exit=early_exit,
        n_attack=n,
        n_events=int(clocked["event"].sum()),
        acc_ben_attack_subset=accuracy(y, clocked["y_pred_ben"]),
        acc_adv=accuracy(y, clocked["y_pred_adv"]),
        t_attack_process=watch.elapsed.process / n,
        t_attack_wall=watch.elapsed.wall / n,
        t_attack_flops=float(clocked["flops"].mean()),
        flops_forward=cost.forward,
        flops_gradient=cost.gradient,
        rates={group: asdict(rate) for group, rate in rates.items()},
        **seconds_per_flop(outcomes),
    )
    return record, outcomes


def seconds_per_flop(outcomes: Outcomes) -> dict[str, float]:
    """The cell's priced seconds per FLOP on each clock, over its samples: what converts its
    compute-clock E[T] to seconds."""
    flops = float(outcomes.flops.sum())
    return {f"seconds_per_flop_{clock}": float(outcomes.duration(clock).sum()) / flops if flops else math.nan for clock in SECONDS}


def attack_model_cell(cfg: DictConfig, model_cell: ModelCell, cells: list[AttackCell], split: Split, device) -> None:
    folder = Path(cfg.paths.attacks)
    train = TrainRecord.read(record_path(cfg.paths.models, model_cell.train.hash))
    classifier = art_classifier(load_weights(cfg.paths.models, model_cell.train, split).to(device), split, model_cell.defence, device)
    benign_file = benign_path(folder, model_cell.hash)
    if benign_pending(folder, model_cell.hash):
        evaluate_benign(classifier, split, model_cell, device).write(benign_file)
    benign = BenignRecord.read(benign_file)
    shared = {
        "train_hash": model_cell.train.hash,
        "model_hash": model_cell.hash,
        **cell_labels(train, model_cell.defence),
        "n_train": train.n_train,
        "t_train_process": train.t_train_process,
        "t_train_wall": train.t_train_wall,
        "t_train_flops": train.get("t_train_flops"),
        "t_train_source": train.t_train_source,
        "acc_ben": benign.acc_ben,
        "t_predict_process": benign.t_predict_process,
        "t_predict_wall": benign.t_predict_wall,
        "device": str(device),
        "threads": torch.get_num_threads(),
    }
    target = Target(classifier, device)
    cost = model_cost(target, split.x_attack.numpy(), split.y_attack.numpy())
    shared["t_predict_flops"] = float(cost.forward)  # one forward query per sample, the defence included
    for batch_size in sorted({cell.spec.get("batch_size", 100) for cell in cells if engine_of(cell.spec) == "torch"}):
        warm_up_batch(target, split.x_attack.numpy(), split.y_attack.numpy(), batch_size)  # the first cell's step 0 measures the model, not the set-up
    for cell in cells:
        record, outcomes = run_attack_cell(classifier, split, cell, device, shared, cost)
        write_npz(outcomes_path(folder, cell.hash), **outcomes.to_arrays())
        record.write(attack_record_path(folder, cell.hash))


def attack_job(cfg: DictConfig, model_cell: ModelCell, cells: list[AttackCell]) -> int:
    """One model cell's pending attack cells (one worker's job); returns how many."""
    device = resolve_device(cfg.train.device)
    train = model_cell.train
    split = cached_split(cfg.paths.processed, train.dataset, train.seed, cfg.data[train.dataset].n_classes)
    attack_model_cell(cfg, model_cell, cells, split, device)
    return len(cells)


def attack_grid(cfg: DictConfig) -> int:
    """Attack every pending cell; returns how many were computed."""
    device = resolve_device(cfg.train.device)
    folder = Path(cfg.paths.attacks)
    cells = attack_cells(cfg)
    if folder.is_dir():
        remove_dead_temps(folder)
    pending = [cell for cell in cells if not is_recorded(attack_record_path(folder, cell.hash))]
    workers = resolve_workers(cfg.train.get("workers", "auto"), device.type)
    log.info("%d attack cells, %d recorded, %d to run on %s (%s)", len(cells), len(cells) - len(pending), len(pending), device, describe(workers))
    jobs = [(cfg, model_cell, list(group)) for model_cell, group in groupby(pending, key=lambda cell: cell.model)]
    queued = {job[1].hash for job in jobs}
    models = {cell.model.hash: cell.model for cell in cells}
    jobs += [(cfg, model, []) for h, model in models.items() if h not in queued and benign_pending(folder, h)]  # probes for older records
    jobs.sort(key=lambda job: job[1].train.depth * len(job[2]), reverse=True)  # the longest first keeps the workers busy to the end
    with tqdm(total=len(pending), desc="attack cells", disable=not cfg.train.get("progress", True)) as progress:
        run_jobs(attack_job, jobs, workers, progress, log.name)
    return len(pending)
