"""Stage `train`: train every cell of the training grid not already cached.

A cell is cached as `models/<hash>.pt` (weights) and `models/<hash>.json` (its record),
written in that order, each atomically: the record is the commit mark, so a run killed
mid-cell leaves nothing a rerun trusts. Predict-time defences need no training cell.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn
from tqdm import tqdm

from trashfire.cli import run_cli
from trashfire.clocks import Elapsed, Stopwatch
from trashfire.datasets import Split, load_split
from trashfire.defences import adversarial_trainer, augment, is_trainer
from trashfire.errors import DataError
from trashfire.grid import TrainCell, training_cells
from trashfire.metrics import accuracy
from trashfire.models import build_model, resolve_device
from trashfire.records import atomic_path, cell_file, file_sha256, read_json, write_json

log = logging.getLogger("trashfire.train")  # not __name__: it is __main__ under python -m


def weights_path(models: str | Path, cell_hash: str) -> Path:
    return cell_file(models, cell_hash, ".pt")


def record_path(models: str | Path, cell_hash: str) -> Path:
    return cell_file(models, cell_hash, ".json")


def is_cached(models: str | Path, cell_hash: str) -> bool:
    """A record that parses and names weights of the recorded size: a finished cell."""
    try:
        record = read_json(record_path(models, cell_hash))
    except DataError:
        return False
    weights = weights_path(models, cell_hash)
    return weights.is_file() and weights.stat().st_size == record.get("weights_bytes")


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, device: torch.device, batch_size: int = 256) -> tuple[np.ndarray, Elapsed]:
    model.eval()
    preds = []
    with Stopwatch(device) as watch:
        for start in range(0, len(x), batch_size):
            preds.append(model(x[start : start + batch_size].to(device)).argmax(1).cpu())
    return torch.cat(preds).numpy(), watch.elapsed


def fit(model: nn.Module, cell: TrainCell, split: Split, hyper: DictConfig, device: torch.device, progress: bool) -> Elapsed:
    """SGD with momentum over the cell's epochs; the time includes the train-time defence."""
    generator = torch.Generator().manual_seed(cell.seed)
    optimiser = torch.optim.SGD(model.parameters(), lr=cell.lr, momentum=hyper.momentum, weight_decay=hyper.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    model.to(device).train()
    if is_trainer(cell.defence):
        return fit_with_trainer(model, optimiser, cell, split, hyper, device)
    schedule = cell.spec["train"].get("lr_schedule", "constant")
    with Stopwatch(device) as watch:
        for epoch in tqdm(range(cell.epochs), desc=f"train {cell.model} {cell.defence['name']}", disable=not progress, leave=False):
            x, y = split.x_train, split.y_train
            if cell.defence["stage"] == "train":
                x_aug, y_aug = augment(cell.defence, x.numpy(), y.numpy(), split.clip_values, seed=cell.seed * 1000 + epoch)
                x, y = torch.from_numpy(x_aug).float(), torch.from_numpy(np.asarray(y_aug)).long()
            order = torch.randperm(len(x), generator=generator)
            for start in range(0, len(x), hyper.batch_size):
                batch = order[start : start + hyper.batch_size]
                for group in optimiser.param_groups:
                    group["lr"] = scheduled_lr(cell.lr, schedule, (epoch + start / len(x)) / cell.epochs)
                optimiser.zero_grad(set_to_none=True)
                loss = loss_fn(model(x[batch].to(device)), y[batch].to(device))
                loss.backward()
                optimiser.step()
    return watch.elapsed


def scheduled_lr(base: float, schedule: str, progress: float) -> float:
    """constant, or step_half: divided by 10 from half of training on (004). progress is
    the fraction of training done, so a one-epoch run decays too."""
    return base * 0.1 if schedule == "step_half" and progress >= 0.5 else base


def initial_model(cell: TrainCell, split: Split) -> nn.Module:
    """Seeded before building: one seed gives the same initial weights on every data set of
    the same shape (004 matches them across MNIST upscaled and CIFAR-10)."""
    torch.manual_seed(cell.seed)
    return build_model(cell.spec["model"], split.n_classes, split.input_shape)


def fit_with_trainer(model: nn.Module, optimiser, cell: TrainCell, split: Split, hyper: DictConfig, device) -> Elapsed:
    """Adversarial training: ART's trainer runs the epochs (its own progress bar)."""
    np.random.seed(cell.seed)  # ART shuffles and picks its random starts with NumPy
    trainer = adversarial_trainer(cell.defence, model, optimiser, split, device)
    with Stopwatch(device) as watch:
        trainer.fit(split.x_train.numpy(), split.y_train.numpy(), nb_epochs=cell.epochs, batch_size=hyper.batch_size)
    return watch.elapsed


def train_cell(cell: TrainCell, split: Split, cfg: DictConfig, device: torch.device) -> tuple[nn.Module, dict[str, Any]]:
    model = initial_model(cell, split)
    train_time = fit(model, cell, split, cfg.train, device, cfg.train.get("progress", True))
    preds, predict_time = predict(model, split.x_test, device)
    n_train, n_test = len(split.y_train), len(split.y_test)
    record = {
        "train_hash": cell.hash,
        "config": cell.spec,
        "dataset": cell.dataset,
        "seed": cell.seed,
        "model": cell.model,
        "depth": cell.depth,
        "epochs": cell.epochs,
        "lr": cell.lr,
        "defence": cell.defence["name"],
        "defence_param": cell.defence["param"],
        "defence_value": cell.defence["value"],
        "n_train": n_train,
        "n_test": n_test,
        "acc_ben": accuracy(split.y_test.numpy(), preds),
        # per sample: the whole training run over the training-set size (TRASHFIRE eq. 7)
        "t_train_process": train_time.process / n_train,
        "t_train_wall": train_time.wall / n_train,
        "t_predict_process": predict_time.process / n_test,
        "t_predict_wall": predict_time.wall / n_test,
        "device": str(device),
        "torch": torch.__version__,
    }
    return model, record


def save_cell(models: str | Path, model: nn.Module, record: dict[str, Any]) -> None:
    path = weights_path(models, record["train_hash"])
    buffer = io.BytesIO()
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())
    record = record | {"weights": path.name, "weights_bytes": path.stat().st_size, "weights_sha256": file_sha256(path)}
    write_json(record_path(models, record["train_hash"]), record)


def load_weights(models: str | Path, cell: TrainCell, split: Split) -> nn.Module:
    record = read_json(record_path(models, cell.hash))
    path = weights_path(models, cell.hash)
    if not path.is_file() or file_sha256(path) != record.get("weights_sha256"):
        raise DataError(f"weights {path} are missing or do not match their record; delete {record_path(models, cell.hash)} and rerun train")
    model = build_model(cell.spec["model"], split.n_classes, split.input_shape)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    device = resolve_device(cfg.train.device)
    models = Path(cfg.paths.models)
    cells = training_cells(cfg)
    pending = [cell for cell in cells if not is_cached(models, cell.hash)]
    log.info("%d training cells, %d cached, %d to train on %s", len(cells), len(cells) - len(pending), len(pending), device)
    splits: dict[tuple[str, int], Split] = {}
    for cell in tqdm(pending, desc="train cells", disable=not cfg.train.get("progress", True)):
        key = (cell.dataset, cell.seed)
        if key not in splits:
            splits[key] = load_split(cfg.paths.processed, cell.dataset, cell.seed, cfg.data[cell.dataset].n_classes)
        model, record = train_cell(cell, splits[key], cfg, device)
        save_cell(models, model, record)
        log.info("trained %s %s epochs=%d lr=%g %s: acc_ben=%.3f", cell.dataset, cell.model, cell.epochs, cell.lr, cell.defence["name"], record["acc_ben"])
    return [read_json(record_path(models, cell.hash)) for cell in cells]


def main(argv: list[str] | None = None) -> None:
    run_cli("trashfire.train", __doc__, run, argv)


if __name__ == "__main__":
    main()
