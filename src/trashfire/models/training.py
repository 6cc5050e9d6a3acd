"""Stage `train`: train every cell of the training grid not already cached.

A cell is cached as `models/<hash>.pt` (weights) and `models/<hash>.json` (its record),
written in that order, each atomically: the record is the commit mark, so a run killed
mid-cell leaves nothing a rerun trusts. Predict-time defences need no training cell.

Cells that differ only in epochs are checkpoints of one run: it trains to the largest and
saves each on the way. The last checkpoint also keeps `<hash>.resume.pt` (optimiser and
generator state), so a grid that later asks for more epochs trains on from it.
"""

from __future__ import annotations

import io
import json
import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn
from tqdm import tqdm

from trashfire.core import external
from trashfire.core.clocks import Elapsed, Stopwatch
from trashfire.core.errors import ConfigError, DataError
from trashfire.core.grid import TRAIN_DEFAULTS, TrainCell, training_cells
from trashfire.core.parallel import describe, resolve_workers, run_jobs, threads_per_cell
from trashfire.core.records import atomic_path, cell_file, file_sha256, remove_dead_temps
from trashfire.core.schema import TrainRecord, cell_labels
from trashfire.core.stage import Artefacts
from trashfire.core.stats import accuracy
from trashfire.data.datasets import Split, cached_split
from trashfire.models import external as imported
from trashfire.models import flops
from trashfire.models.architectures import resolve_device
from trashfire.models.build import build_model
from trashfire.models.defences import adversarial_trainer, augment, is_trainer

log = logging.getLogger(__name__)


def weights_path(models: str | Path, cell_hash: str) -> Path:
    return cell_file(models, cell_hash, ".pt")


def record_path(models: str | Path, cell_hash: str) -> Path:
    return cell_file(models, cell_hash, ".json")


def resume_path(models: str | Path, cell_hash: str) -> Path:
    """Optimiser and generator state of a run's last checkpoint, to train on from it."""
    return cell_file(models, cell_hash, ".resume.pt")


def is_cached(models: str | Path, cell: TrainCell) -> bool:
    """A record that parses, was trained on the data this config prepares (its data hash:
    a record from another config's data, or a schema-1 record without one, is trained again) and
    names weights of the recorded size: a finished cell."""
    try:
        record = TrainRecord.read(record_path(models, cell.hash))
    except DataError:
        return False
    weights = weights_path(models, cell.hash)
    return record.data_hash == cell.data_hash and weights.is_file() and weights.stat().st_size == record.weights_bytes


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, device: torch.device, batch_size: int = 256) -> tuple[np.ndarray, Elapsed]:
    model.eval()
    preds = []
    with Stopwatch(device) as watch:
        for start in range(0, len(x), batch_size):
            preds.append(model(x[start : start + batch_size].to(device)).argmax(1).cpu())
    return torch.cat(preds).numpy(), watch.elapsed


@dataclass
class Run:
    """One training run shared by the cells that differ only in epochs: weights, optimiser,
    generators and clocks carry from one checkpoint to the next, so a study's epochs
    (1, 10, 25, ...) cost one run to the largest, not one run each."""

    model: nn.Module
    optimiser: torch.optim.Optimizer
    generator: torch.Generator  # the batch order
    trainer: Any = None  # ART's AdversarialTrainer for adv_train cells
    epoch: int = 0
    train_time: Elapsed = field(default_factory=Elapsed)  # cumulative, training only
    # cumulative FLOPs of this run's passes (PassCounter's rows x pass_flops; None: unknown,
    # a run resumed from a state saved before FLOPs were counted)
    train_flops: int | None = 0
    base_flops: int | None = 0  # a fine-tuned run's base: that whole run's FLOPs (None: unknown)
    base_time: Elapsed = field(default_factory=Elapsed)  # and its whole run's seconds
    pass_cost: dict[str, int] = field(default_factory=dict)  # FLOPs per row of each kind of pass (pass_costs)

    def flops_of(self, rows: dict[str, int], split: Split, device: torch.device) -> int:
        """The FLOPs of the passes counted, each kind priced on its first use (outside any clock)."""
        for kind, n in rows.items():
            if n and kind not in self.pass_cost:
                self.pass_cost[kind] = flops.pass_flops(kind, self.model, split.x_train[:1].to(device), split.y_train[:1].to(device))
        return flops.priced(rows, self.pass_cost)

    def state(self) -> dict[str, Any]:
        return {
            "optimiser": self.optimiser.state_dict(),
            "generator": self.generator.get_state(),
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "epoch": self.epoch,
            "train_time": [self.train_time.process, self.train_time.wall],
            "train_flops": self.train_flops,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.optimiser.load_state_dict(state["optimiser"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch"])
        np.random.set_state(state["numpy"])
        self.epoch = int(state["epoch"])
        self.train_time = Elapsed(*state["train_time"])
        self.train_flops = state.get("train_flops")  # None: saved before FLOPs were counted
        if self.train_flops is None:
            log.info("the run's state predates FLOP counting: its checkpoints' t_train_flops are unknown (null)")


def start_run(cell: TrainCell, split: Split, hyper: DictConfig, device: torch.device, models: Path | None = None) -> Run:
    model = initial_model(cell, split)
    if cell.base is not None:
        model.load_state_dict(pretrained_weights(models, cell, split))
    model = model.to(device)
    optimiser = make_optimiser(cell.spec["train"].get("optimiser", TRAIN_DEFAULTS["optimiser"]), model, cell.lr, hyper)
    np.random.seed(cell.seed)  # ART shuffles and draws its random starts with NumPy
    trainer = adversarial_trainer(cell.defence, model, optimiser, split, device) if is_trainer(cell.defence) else None
    return Run(
        model,
        optimiser,
        torch.Generator().manual_seed(cell.seed),
        trainer,
        base_flops=base_run_flops(models, cell),
        base_time=base_run_time(models, cell),
        pass_cost=pass_costs(cell, split),
    )


def make_optimiser(name: str, model: nn.Module, lr: float, hyper: DictConfig) -> torch.optim.Optimizer:
    """SGD with momentum (TRASHFIRE, 004) or Adam with torch's betas (002's lr 1e-3 is Adam's
    default; Adam ignores momentum). Both take the weight decay."""
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=hyper.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=hyper.momentum, weight_decay=hyper.weight_decay)


_PASS_COSTS: dict[str, dict[str, int]] = {}


def pass_costs(cell: TrainCell, split: Split) -> dict[str, int]:
    """FLOPs per row of each kind of pass, shared by the runs of one architecture and input
    shape in this process (FLOPs do not depend on the weights): measured once, not per run."""
    key = json.dumps([cell.spec["model"], list(split.input_shape), split.n_classes], sort_keys=True, default=str)
    return _PASS_COSTS.setdefault(key, {})


def base_run_flops(models: Path | None, cell: TrainCell) -> int | None:
    """A fine-tuned cell's base: its whole training run's FLOPs (its record's per-sample count
    x its n_train, the integer count it was divided from), so that the fine-tuned cell's
    t_train_flops includes its pretraining; 0 from scratch, None when the base's record
    predates FLOP counting."""
    if cell.base is None:
        return 0
    base = TrainRecord.read(record_path(models, cell.base.hash))
    if base.t_train_flops is None:
        log.info("%s's base %s has no t_train_flops (trained before FLOPs were counted): its t_train_flops are unknown", cell.dataset, cell.pretrained_on)
        return None
    return round(base.t_train_flops * base.n_train)


def base_run_time(models: Path | None, cell: TrainCell) -> Elapsed:
    """A fine-tuned cell's base: its whole training run's seconds on both clocks, so that
    t_train, like t_train_flops, is the cost of everything the model was trained on."""
    if cell.base is None:
        return Elapsed()
    base = TrainRecord.read(record_path(models, cell.base.hash))
    return Elapsed(base.t_train_process * base.n_train, base.t_train_wall * base.n_train)


def advance(run: Run, cell: TrainCell, split: Split, hyper: DictConfig, device: torch.device, progress: bool) -> None:
    """Train from the run's epoch to the cell's; the time and the FLOPs include the train-time
    defence. The FLOPs are the passes through the model counted by kind (flops.PassCounter:
    every training step's rows, adversarial training's attack steps and ART's predictions),
    priced per row after the clocks stop."""
    run.model.train()
    schedule = cell.spec["train"].get("lr_schedule", TRAIN_DEFAULTS["lr_schedule"])  # absent from a spec: the default
    horizon = cell.spec["train"].get("horizon", cell.epochs)
    loss_fn = nn.CrossEntropyLoss()
    with flops.PassCounter().watching(run.model) as passes, Stopwatch(device) as watch:
        for epoch in tqdm(range(run.epoch, cell.epochs), desc=f"train {cell.model} {cell.defence['name']}", disable=not progress, leave=False):
            if run.trainer is not None:  # ART's loop: the learning rate steps per epoch
                set_lr(run.optimiser, scheduled_lr(cell.lr, schedule, epoch / horizon))
                x, y = split.train_epoch(epoch)
                run.trainer.fit(x.numpy(), y.numpy(), nb_epochs=1, batch_size=hyper.batch_size)
                continue
            x, y = split.train_epoch(epoch)
            if cell.defence["stage"] == "train":
                x_aug, y_aug = augment(cell.defence, x.numpy(), y.numpy(), split.clip_values, seed=cell.seed * 1000 + epoch)
                x, y = torch.from_numpy(x_aug).float(), torch.from_numpy(np.asarray(y_aug)).long()
            order = torch.randperm(len(x), generator=run.generator)
            for start in range(0, len(x), hyper.batch_size):
                batch = order[start : start + hyper.batch_size]
                set_lr(run.optimiser, scheduled_lr(cell.lr, schedule, (epoch + start / len(x)) / horizon))
                run.optimiser.zero_grad(set_to_none=True)
                loss_fn(run.model(x[batch].to(device)), y[batch].to(device)).backward()
                run.optimiser.step()
    run.epoch = cell.epochs
    run.train_time = Elapsed(run.train_time.process + watch.elapsed.process, run.train_time.wall + watch.elapsed.wall)
    if run.train_flops is not None:
        run.train_flops += run.flops_of(passes.rows, split, device)


def set_lr(optimiser: torch.optim.Optimizer, lr: float) -> None:
    for group in optimiser.param_groups:
        group["lr"] = lr


ONE_CYCLE_WARMUP = 0.3  # torch's OneCycleLR defaults: 30% warm-up from base/25, cosine
ONE_CYCLE_DIV, ONE_CYCLE_FINAL_DIV = 25.0, 1e4  # annealing to base/25/1e4


def scheduled_lr(base: float, schedule: str, progress: float) -> float:
    """constant; step_half: divided by 10 from half of training on (004); one_cycle: the
    learning rate of torch's OneCycleLR (the default's recipe). progress is the fraction of
    the run's horizon done, so a one-epoch run decays too."""
    if schedule == "step_half":
        return base * 0.1 if progress >= 0.5 else base
    if schedule == "one_cycle":
        start, end = base / ONE_CYCLE_DIV, base / ONE_CYCLE_DIV / ONE_CYCLE_FINAL_DIV
        if progress < ONE_CYCLE_WARMUP:
            return _cosine(start, base, progress / ONE_CYCLE_WARMUP)
        return _cosine(base, end, min(1.0, (progress - ONE_CYCLE_WARMUP) / (1 - ONE_CYCLE_WARMUP)))
    return base


def _cosine(start: float, end: float, fraction: float) -> float:
    return end + (start - end) * (1 + math.cos(math.pi * fraction)) / 2


def initial_model(cell: TrainCell, split: Split) -> nn.Module:
    """Seeded before building: one seed gives the same initial weights on every data set of
    the same shape (004 matches them across MNIST upscaled and CIFAR-10)."""
    torch.manual_seed(cell.seed)
    return build_model(cell.spec["model"], split.n_classes, split.input_shape)


def pretrained_weights(models: Path | None, cell: TrainCell, split: Split) -> dict[str, torch.Tensor]:
    """The base cell's final weights; fine-tuning reuses every layer, the head included
    (004 fine-tunes between ten-class data sets of one shape)."""
    if models is None or not is_cached(models, cell.base):
        raise DataError(f"{cell.dataset} {cell.model} is fine-tuned from {cell.pretrained_on}, whose weights are not trained yet")
    try:
        return load_weights(models, cell.base, split).state_dict()
    except RuntimeError as err:  # shapes differ
        raise DataError(
            f"cannot fine-tune {cell.model} on {cell.dataset} from {cell.pretrained_on}: the data sets' shapes or classes "
            f"differ ({str(err).splitlines()[0]}); give both size/channels alike (e.g. data.mnist.size=32 data.mnist.channels=3)"
        ) from None


def checkpoint_record(run: Run, cell: TrainCell, split: Split, device: torch.device) -> TrainRecord:
    preds, predict_time = predict(run.model, split.x_test, device)
    n_train, n_test = len(split.y_train), len(split.y_test)
    return TrainRecord(
        train_hash=cell.hash,
        data_hash=split.data_hash,
        config=cell.spec,
        **cell_labels(cell, cell.defence),
        pretrain_hash=cell.base.hash if cell.base is not None else None,
        n_train=n_train,
        n_test=n_test,
        acc_ben=accuracy(split.y_test.numpy(), preds),
        # per sample: the whole training run up to this epoch (a fine-tuned cell's base run
        # included) over the training-set size (eq. 7)
        t_train_process=(run.train_time.process + run.base_time.process) / n_train,
        t_train_wall=(run.train_time.wall + run.base_time.wall) / n_train,
        t_predict_process=predict_time.process / n_test,
        t_predict_wall=predict_time.wall / n_test,
        device=str(device),
        threads=torch.get_num_threads(),  # the clocks' CPU seconds and the last bits of the weights depend on it
        torch=torch.__version__,
        # FLOPs per training sample: the run's passes up to this epoch, a fine-tuned cell's base run included
        t_train_flops=None if run.train_flops is None or run.base_flops is None else (run.train_flops + run.base_flops) / n_train,
        t_predict_flops=float(run.flops_of({flops.FORWARD: 1}, split, device)),  # one forward, as predict runs it
    )


def predict_flops(model: nn.Module, split: Split, device: torch.device) -> float:
    """One forward pass per test sample, as `predict` runs it (eval mode, no predict-time defence)."""
    return float(flops.pass_flops(flops.FORWARD, model, split.x_test[:1].to(device), split.y_test[:1].to(device)))


def train_cell(cell: TrainCell, split: Split, cfg: DictConfig, device: torch.device, models: Path | None = None) -> tuple[nn.Module, TrainRecord]:
    """One cell trained in a run of its own (what a run's checkpoint at this epoch equals)."""
    run = start_run(cell, split, cfg.train, device, models)
    advance(run, cell, split, cfg.train, device, cfg.compute.progress)
    return run.model, checkpoint_record(run, cell, split, device)


def resume_point(models: Path, cell: TrainCell) -> TrainCell | None:
    """The latest finished checkpoint of the same run, at or before the cell's epoch, that
    kept its optimiser state: training goes on from there."""
    for epochs in range(cell.epochs, 0, -1):
        earlier = cell.at_epochs(epochs)
        if is_cached(models, earlier) and resume_path(models, earlier.hash).is_file():
            return earlier
    return None


def train_group(cells: list[TrainCell], split: Split, cfg: DictConfig, device: torch.device, models: Path, epoch_bars: bool = True) -> None:
    """The pending cells of one run, by ascending epochs: train once, save each checkpoint."""
    run = start_run(cells[0], split, cfg.train, device, models)
    earlier = resume_point(models, cells[0])
    if earlier is not None:
        run.model.load_state_dict(load_weights(models, earlier, split).state_dict())
        run.restore(torch.load(resume_path(models, earlier.hash), map_location="cpu", weights_only=False))
        log.info("resuming %s %s %s from epoch %d", cells[0].dataset, cells[0].model, cells[0].defence["name"], run.epoch)
    for cell in cells:
        advance(run, cell, split, cfg.train, device, epoch_bars and cfg.compute.progress)
        record = checkpoint_record(run, cell, split, device)
        save_cell(models, run.model, record, run.state() if cell is cells[-1] else None)
        log.info("trained %s %s epochs=%d lr=%g %s: acc_ben=%.3f", cell.dataset, cell.model, cell.epochs, cell.lr, cell.defence["name"], record.acc_ben)
    if earlier is not None:
        resume_path(models, earlier.hash).unlink(missing_ok=True)  # the run's state lives on in the last checkpoint


def save_cell(models: str | Path, model: nn.Module, record: TrainRecord, run_state: dict[str, Any] | None = None) -> None:
    """Weights, then the run's state (the last checkpoint of a run), then the record, which
    marks the cell finished."""
    path = weights_path(models, record.train_hash)
    _save_atomically({k: v.cpu() for k, v in model.state_dict().items()}, path)
    if run_state is not None:
        _save_atomically(run_state, resume_path(models, record.train_hash))
    record = record.replace(weights=path.name, weights_bytes=path.stat().st_size, weights_sha256=file_sha256(path))
    record.write(record_path(models, record.train_hash))


def _save_atomically(obj: Any, path: Path) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def load_weights(models: str | Path, cell: TrainCell, split: Split) -> nn.Module:
    record = TrainRecord.read(record_path(models, cell.hash))
    path = weights_path(models, cell.hash)
    if not path.is_file() or file_sha256(path) != record.weights_sha256:
        raise DataError(f"weights {path} are missing or do not match their record; delete {record_path(models, cell.hash)} and rerun train")
    model = build_model(cell.spec["model"], split.n_classes, split.input_shape)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model


def runs(cells: list[TrainCell]) -> list[list[TrainCell]]:
    """Cells grouped by run (all but epochs equal), each group by ascending epochs."""
    groups: dict[str, list[TrainCell]] = {}
    for cell in cells:
        groups.setdefault(cell.run_key, []).append(cell)
    return [sorted(group, key=lambda c: c.epochs) for group in groups.values()]


def train_job(cfg: DictConfig, artefacts: Artefacts, group: list[TrainCell], epoch_bars: bool) -> int:
    """One training run's pending checkpoints (one worker's job); returns how many."""
    cell = group[0]
    split = cached_split(artefacts.input("processed"), cfg, cell.dataset, cell.seed)
    train_group(group, split, cfg, resolve_device(cfg.compute.device), artefacts.output("models"), epoch_bars)
    return len(group)


# Training cost relative to plain training: adversarial training also attacks a share
# (`ratio`) of each batch with a PGD of `max_iter` steps, each about one forward-backward pass.
def expected_cost(group: list[TrainCell]) -> float:
    """A run's relative cost, to start the longest first: depth x epochs x its defence's factor."""
    kwargs = group[0].defence.get("kwargs") or {}
    factor = 1.0
    if group[0].defence["name"] == "adv_train":
        factor += float(kwargs.get("ratio", 0.5)) * (int((kwargs.get("attack") or {}).get("max_iter", 10)) + 1)
    return group[0].depth * group[-1].epochs * factor


def waves(groups: list[list[TrainCell]]) -> list[list[list[TrainCell]]]:
    """The runs in waves whose runs start only from weights of earlier waves: a fine-tuning
    run waits for the run of its pretrained base when that is pending too."""
    wave_of_cell: dict[str, int] = {}
    wave_of_group = []
    for group in groups:  # bases come first (run orders them so)
        base = group[0].base
        wave = wave_of_cell[base.hash] + 1 if base is not None and base.hash in wave_of_cell else 0
        wave_of_cell.update({cell.hash: wave for cell in group})
        wave_of_group.append(wave)
    return [[g for g, w in zip(groups, wave_of_group) if w == wave] for wave in range(max(wave_of_group, default=-1) + 1)]


def load_checkpoint(key: str, model: nn.Module, mspec: DictConfig) -> None:
    """The checkpoint's state_dict into the user's module, every key accounted for."""
    state = imported.load_state_dict(f"{key}.{external.CHECKPOINT}", mspec[external.CHECKPOINT])
    try:
        missing, unexpected = model.net.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a key of the right name with the wrong shape
        raise ConfigError(f"{key}.{external.CHECKPOINT}", imported.size_mismatch(mspec[external.CHECKPOINT], mspec._target_, str(err))) from None
    imported.check_keys(f"{key}.{external.CHECKPOINT}", mspec[external.CHECKPOINT], mspec._target_, list(missing), list(unexpected))


def import_cell(cell: TrainCell, split: Split, mspec: DictConfig, device: torch.device) -> tuple[nn.Module, TrainRecord]:
    """An external model (trashfire.core.external) in place of training: the checkpoint
    loaded into its module, its keys checked, one prepared sample through it, then the
    benign evaluation every trained cell gets. Each problem is one ConfigError line."""
    key = f"model.{cell.model}"
    target = mspec._target_
    model = build_model(cell.spec["model"], split.n_classes, split.input_shape)
    if cell.depth is None:
        cell = replace(cell, depth=imported.counted_depth(key, mspec))
    if hasattr(model.net, "import_weights"):  # a module that reads its own checkpoint (trashfire.models.robustbench)
        model.net.import_weights(split.mean, split.std)
    else:
        load_checkpoint(key, model, mspec)
    model = model.to(device).eval()
    shape = tuple(split.input_shape)
    try:
        with torch.no_grad():
            out = model(split.x_test[:1].to(device))
    except Exception as err:  # the user's forward: any error is a shape it cannot take
        raise imported.shape_error(
            key,
            target,
            cell.dataset,
            shape,
            f"a forward pass on one sample of shape (1, {', '.join(map(str, shape))}) fails: {str(err).strip().splitlines()[0]}",
        ) from None
    if tuple(out.shape) != (1, split.n_classes):
        raise imported.shape_error(
            key, target, cell.dataset, shape, f"one sample gives output shape {tuple(out.shape)}, and {cell.dataset} has {split.n_classes} classes"
        )
    preds, predict_time = predict(model, split.x_test, device)
    n_test, supplied = len(split.y_test), cell.spec["t_train"]
    t_train_flops = supplied.get(external.FLOPS)
    if t_train_flops is None and supplied.get("epochs") is not None:  # estimated: epochs training steps per sample
        t_train_flops = float(supplied["epochs"] * flops.pass_flops(flops.STEP, model, split.x_test[:1].to(device), split.y_test[:1].to(device)))
    elif t_train_flops is None:
        log.info("%s: its training FLOPs are unknown (t_train_flops null); give %s.t_train.flops, a log's flops or %s.epochs", key, key, key)
    record = TrainRecord(
        train_hash=cell.hash,
        data_hash=split.data_hash,
        config=cell.spec,
        **cell_labels(cell, cell.defence),
        n_train=supplied["n_train"],
        n_test=n_test,
        acc_ben=accuracy(split.y_test.numpy(), preds),
        t_train_process=supplied["process"],
        t_train_wall=supplied["wall"],
        t_predict_process=predict_time.process / n_test,
        t_predict_wall=predict_time.wall / n_test,
        device=str(device),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        t_train_source=supplied["source"],
        t_train_flops=t_train_flops,
        t_predict_flops=predict_flops(model, split, device),
        checkpoint=str(mspec[external.CHECKPOINT]),
        checkpoint_sha256=cell.spec["model"]["checkpoint_sha256"],
    )
    return model, record


def import_external(cfg: DictConfig, artefacts: Artefacts, cells: list[TrainCell]) -> None:
    """Imports take a forward pass each: they run first, so that a checkpoint that does not
    fit stops the stage before any training."""
    device = resolve_device(cfg.compute.device)
    for cell in cells:
        split = cached_split(artefacts.input("processed"), cfg, cell.dataset, cell.seed)
        model, record = import_cell(cell, split, cfg.model[cell.model], device)
        save_cell(artefacts.output("models"), model, record)
        log.info(
            "imported %s on %s seed %d from %s: acc_ben=%.3f, t_train from %s",
            cell.model,
            cell.dataset,
            cell.seed,
            record.checkpoint,
            record.acc_ben,
            record.t_train_source,
        )


def train_grid(cfg: DictConfig, artefacts: Artefacts) -> list[dict[str, Any]]:
    device = resolve_device(cfg.compute.device)
    models = artefacts.output("models")
    cells = training_cells(cfg)
    # bases first, and a base that is not itself in the grid is trained all the same
    bases = [cell.base for cell in cells if cell.base is not None]
    ordered = list({cell.hash: cell for cell in bases + cells}.values())
    if models.is_dir():
        remove_dead_temps(models)
    pending = [cell for cell in ordered if not is_cached(models, cell)]
    import_external(cfg, artefacts, [cell for cell in pending if cell.is_external])
    pending = [cell for cell in pending if not cell.is_external]
    workers = resolve_workers(cfg.compute.workers, device.type)
    threads = threads_per_cell(workers, cfg.compute.threads)
    groups = runs(pending)
    planned = waves(groups)
    largest = max((len(wave) for wave in planned), default=0)
    log.info(
        "%d training cells, %d cached, %d to train on %s (%s)",
        len(ordered),
        len(ordered) - len(pending),
        len(pending),
        device,
        describe(workers, threads, largest),
    )
    with tqdm(total=len(pending), desc="training cells", disable=not cfg.compute.progress) as progress:
        for wave in planned:
            wave.sort(key=expected_cost, reverse=True)  # the longest first keeps the workers busy to the end
            in_process = workers == 1 or len(wave) == 1  # a lone job runs here (results_as_completed): its epochs get bars
            jobs = [(cfg, artefacts, group, in_process) for group in wave]
            run_jobs(train_job, jobs, workers, progress, log.name, threads)
    return [TrainRecord.read(record_path(models, cell.hash)).to_json() for cell in cells]
