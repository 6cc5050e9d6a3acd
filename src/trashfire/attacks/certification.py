"""Stage `certify`: the certified floor and the attacked ceiling of each smoothing model cell.

A model cell is certified where its train-time defence declares `smoothing: true` (Gauss-in:
its value is the sigma of Gaussian noise on the standardised scale, so the model is the base
classifier of randomized smoothing at that sigma). Per such cell, on the first
`certify.samples` images of its attack subset (all by default), `trashfire.attacks.smoothing`
runs CERTIFY, and SmoothAdv + PREDICT at each eps of `certify.eps` (l2). Writes, whole or not at
all:

- `certified.csv`: per cell x eps: eps (pixel), eps_standardised (what a radius must exceed),
  n_samples, certified_acc, attacked_acc (PREDICT shows no break), bracket = attacked -
  certified, abstain_share (CERTIFY's), attacked_acc_strict (an abstention counts as an
  error: Cohen et al.'s convention), attack_abstain_share (PREDICT's at the attacked points)
  and the Monte Carlo settings;
- `certified_samples.csv`: per cell x sample: position in the attack subset, label, CERTIFY's
  prediction (-1: abstain), pA_lower, radius (standardised; -inf: abstain) and radius_pixel,
  and PREDICT's clean decision.

No smoothing cell: both files with their header and no rows (no certificate).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig

from trashfire.attacks.art_attacks import art_classifier
from trashfire.attacks.smoothing import ABSTAIN, Attacked, Certificates, attack_smoothed, certify, decide, noise_generator
from trashfire.attacks.target import Target
from trashfire.core.errors import ConfigError, DataError
from trashfire.core.grid import ModelCell, model_cells
from trashfire.core.parallel import describe, resolve_workers, results_as_completed, threads_per_cell
from trashfire.core.records import write_csv
from trashfire.core.schema import CERTIFIED, CERTIFIED_KEYS, CERTIFIED_SAMPLES, to_pixel, to_standardised
from trashfire.core.stage import Artefacts
from trashfire.data.datasets import cached_split
from trashfire.data.splits import Split
from trashfire.models import training
from trashfire.models.architectures import resolve_device

log = logging.getLogger(__name__)

SMOOTHING = "smoothing"  # a defence option's property: its value is the sigma of its training noise
CELL_KEYS, CELL_COLUMNS, SAMPLE_COLUMNS = CERTIFIED_KEYS, CERTIFIED, CERTIFIED_SAMPLES  # the tables' columns (trashfire.core.schema)


def smoothing_cells(cfg: DictConfig) -> list[ModelCell]:
    """The model cells whose train-time defence declares `smoothing: true`."""
    return [cell for cell in model_cells(cfg) if cell.defence["stage"] == "train" and bool((cfg.defence.get(cell.defence["name"]) or {}).get(SMOOTHING))]


def certify_grid(cfg: DictConfig, artefacts: Artefacts) -> pd.DataFrame:
    """Certify and attack every smoothing cell; write both tables; returns the per-cell table."""
    settings = cfg.get("certify")
    if settings is None:
        raise ConfigError("certify", "missing section; compose params.yaml with `make params`")
    cells = smoothing_cells(cfg) if settings.get("enabled", True) else []
    device = resolve_device(cfg.compute.device)
    if not settings.get("enabled", True):
        log.info("certify: off (certify.enabled: false; experiment=certified turns it on): no certificate")
    elif not cells:
        log.info("certify: no model cell of a defence with smoothing: true (such as gauss_in) in this grid: no certificate")
    # one cell per worker at compute.threads threads, as the attack stage runs its cells: the
    # tables are then the same for any number of workers
    workers = min(resolve_workers(cfg.compute.workers, device.type), max(1, len(cells)))
    threads = threads_per_cell(workers, cfg.compute.threads)
    log.info("certify: %d model cells on %s (%s)", len(cells), device, describe(workers, threads, len(cells)))
    jobs = [(cfg, settings, artefacts, cell, device) for cell in cells]
    results: list = [None] * len(cells)
    for index, result in results_as_completed(certify_cell, jobs, workers, log.name, threads):
        results[index] = result
        log.info("certify: %s in %.1f s", summary(cells[index], result[0]), result[2])
    tables, samples = [r[0] for r in results], [r[1] for r in results]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=CELL_COLUMNS)
    write_csv(table[CELL_COLUMNS], artefacts.output("certified.csv"))
    per_sample = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame(columns=SAMPLE_COLUMNS)
    write_csv(per_sample[SAMPLE_COLUMNS], artefacts.output("certified_samples.csv"))
    return table


def certify_cell(
    cfg: DictConfig, settings: DictConfig, artefacts: Artefacts, cell: ModelCell, device: torch.device
) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """One cell's rows of both tables, and the seconds they took (one worker's job)."""
    started = time.perf_counter()
    split = cached_split(artefacts.input("processed"), cfg, cell.train.dataset, cell.train.seed)
    target = Target(art_classifier(load_model(artefacts, cell, split).to(device), split, cell.defence, device), device)
    count = len(split.y_attack) if settings.samples is None else min(int(settings.samples), len(split.y_attack))
    x, y = split.x_attack[:count], split.y_attack[:count]
    sigma, alpha, batch = float(cell.defence["value"]), float(settings.alpha), int(settings.batch_size)
    generator = noise_generator(device, settings.seed)  # per cell: every cell sees the same noise sequence
    certificates = certify(target, x, sigma, int(settings.n0), int(settings.n), alpha, split.n_classes, generator, batch)
    clean = decide(certificates.counts, alpha)  # PREDICT on CERTIFY's n counting draws
    attack = settings.attack
    attacked = attack_smoothed(
        target,
        x,
        y,
        sigma,
        [float(eps) for eps in settings.eps],
        n=int(attack.n),
        alpha=alpha,
        n_classes=split.n_classes,
        steps=int(attack.steps),
        step_scale=float(attack.step_scale),
        draws=int(attack.draws),
        generator=generator,
        scale=torch.from_numpy(split.std) if settings.units == "pixel" else None,
        clean=clean,
        batch_size=batch,
    )
    # the smallest channel std maps the whole pixel ball into the standardised one (grey: exact)
    std, keys = float(np.min(split.std)), cell_keys(cell)
    table = eps_table(keys, settings, std, y.numpy(), certificates, attacked)
    return table, sample_table(keys, y.numpy(), certificates, clean, std), time.perf_counter() - started


def eps_table(keys: dict, settings: DictConfig, std: float, labels: np.ndarray, certificates: Certificates, attacked: Attacked) -> pd.DataFrame:
    """Per eps: the certified floor, the attacked ceiling and the bracket between them."""
    rows = []
    for e, eps in enumerate(float(eps) for eps in settings.eps):
        eps_standardised = to_standardised(eps, settings.units, std)
        certified = (certificates.prediction == labels) & (certificates.radius > eps_standardised)
        rows.append(
            {
                **keys,
                "eps": to_pixel(eps, settings.units, std),
                "eps_standardised": eps_standardised,
                "n_samples": len(labels),
                "certified_acc": float(certified.mean()),
                "attacked_acc": float(attacked.robust[e].mean()),
                "abstain_share": float(np.mean(certificates.prediction == ABSTAIN)),
                "attacked_acc_strict": float(attacked.strict[e].mean()),
                "attack_abstain_share": float(np.mean(attacked.attacked[e] == ABSTAIN)),
                "n0": int(settings.n0),
                "n": int(settings.n),
                "alpha": float(settings.alpha),
                "attack_steps": int(settings.attack.steps),
                "attack_draws": int(settings.attack.draws),
                "attack_n": int(settings.attack.n),
            }
        )
    table = pd.DataFrame(rows)
    return table.assign(bracket=table["attacked_acc"] - table["certified_acc"])


def load_model(artefacts: Artefacts, cell: ModelCell, split: Split) -> torch.nn.Module:
    models = artefacts.input("models")
    if not training.is_cached(models, cell.train):
        raise DataError(f"{training.record_path(models, cell.train.hash)}: no trained model of cell {cell_label(cell)}; run the train stage first")
    return training.load_weights(models, cell.train, split)


def cell_keys(cell: ModelCell) -> dict:
    train = cell.train
    return {
        "dataset": train.dataset,
        "seed": train.seed,
        "model": train.model,
        "epochs": train.epochs,
        "defence": cell.defence["name"],
        "defence_value": float(cell.defence["value"]),
        "model_hash": cell.hash,
    }


def sample_table(keys: dict, labels: np.ndarray, certificates: Certificates, clean: np.ndarray, std: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            **keys,
            "position": np.arange(len(labels)),
            "label": labels,
            "prediction": certificates.prediction,
            "pA_lower": certificates.p_lower,
            "radius": certificates.radius,
            "radius_pixel": certificates.radius * std,
            "clean_prediction": clean,
        }
    )


def cell_label(cell: ModelCell) -> str:
    train = cell.train
    return f"{train.dataset} seed {train.seed} {train.model} {train.epochs} epochs {cell.defence['name']}@{cell.defence['value']:g}"


def summary(cell: ModelCell, table: pd.DataFrame) -> str:
    eps = ", ".join(f"eps {r.eps:g}: certified {r.certified_acc:.2f}, attacked {r.attacked_acc:.2f}" for r in table.itertuples())
    return f"{cell_label(cell)} ({int(table['n_samples'].iloc[0])} samples): {eps}"
