"""TRASHFIRE's full grid on a cluster, sized: `hparams_search=paper_grid` over
`experiment=trashfire_paper` (docs/cluster.md quotes this output).

Counts the sweep's trials and the cells they compute (from the project's own grid code),
prices training and the attack grid in FLOPs (the project's counter, trashfire.models.flops:
torch's FlopCounterMode, run on meta tensors, so nothing is computed), converts FLOPs to GPU
hours at an assumed sustained throughput, and estimates the disk the per-cell caches take.
With the study part (the default) it also builds the Optuna study of the grid in a temporary
SQLite file and a journal file (queued, taken, told), and counts the SQL statements each
operation of a sweeper costs, for the database load of N sweepers. About three minutes on one
core (`--no-study`: under one).

    python bench/cluster_sizing.py [--tflops 46.8] [--gpus 32] [--sweepers 64] [--no-study]

Attack work is each cell's budget, an upper bound: early exit (a broken sample leaves the
batch) and searches that stop at success only lower it. The per-image searches' budgets follow
ART's code (PixelAttack/ThresholdAttack: scipy-style differential evolution or CMA-ES;
HopSkipJump), as noted at each formula.
"""

from __future__ import annotations

import argparse
import heapq
import math
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from trashfire.budget.reruns import larger_budget_config
from trashfire.core.config import compose, config_dir, normalise
from trashfire.core.grid import attack_specs, model_cells, training_cells
from trashfire.models import flops
from trashfire.models.build import build_model

# the papers' data sets: images (train and test pooled, then split 80/20 per seed), shape
DATASETS = {"mnist": (70_000, (1, 28, 28)), "cifar10": (60_000, (3, 32, 32)), "cifar100": (60_000, (3, 32, 32))}
# measured on 100-sample attack cells of the default pipeline: ~2.4 kB .json + ~6-7 kB .npz
ATTACK_CELL_BYTES = 9_000
A100_TF32_PEAK = 156.0  # TFLOP/s, dense; cuDNN convolutions run in TF32 by default in fp32 PyTorch on Ampere
DEFAULT_TFLOPS = 0.3 * A100_TF32_PEAK


@dataclass(frozen=True)
class Cost:
    """FLOPs per sample of one model on one data set, and its size."""

    forward: int  # one query
    backward: int  # an input gradient on top of its forward (weights frozen)
    step: int  # one training step: forward and backward to the weights
    params: int  # parameters and buffers


def model_cost(spec: dict, n_classes: int, shape: tuple[int, ...]) -> Cost:
    with torch.device("meta"):
        model = build_model(spec, n_classes, shape)
        x, y = torch.empty(2, *shape), torch.zeros(2, dtype=torch.long)
    forward = flops.forward_flops(model.eval(), x)
    gradient = flops.gradient_flops(model, x, y)
    step = flops.pass_flops(flops.STEP, model.train(), x, y)
    size = sum(t.numel() for t in model.state_dict().values())
    return Cost(forward, gradient - forward, step, size)


def search_queries(spec: dict, shape: tuple[int, ...]) -> int:
    """Queries of one image-by-image search at its budget, ART's own predict of the image
    included (its benign check, our first query and the verify are added by the caller)."""
    channels, height, width = shape
    kwargs, iterations = spec.get("kwargs") or {}, int(spec.get("max_iter") or 1)
    name, value = spec["name"], int(spec["value"])
    if name in ("pixel", "threshold"):
        # Pixel: th pixels, each (row, column, one value per channel); Threshold: every input value
        dims = value * (2 + channels) if name == "pixel" else channels * height * width
        if kwargs.get("es", 1) == 1:  # differential evolution: popsize = max(1, 400 // dims) per parameter
            population = max(5, max(1, 400 // dims) * dims)
            return 1 + (iterations + 1) * population + iterations  # + one success check per generation
        population = 4 + int(3 * math.log(dims))  # CMA-ES's default population
        return 1 + iterations * (population + 1)
    if name == "hsj":
        dims = channels * height * width
        search = math.ceil(math.log2(math.sqrt(dims) / 0.01))  # binary search to theta = 0.01 / sqrt(d) (L2)
        init = int(kwargs.get("init_size", 100)) + math.ceil(math.log2(1 / 0.001))  # random starts, then a binary search
        init_eval, max_eval = int(kwargs.get("init_eval", 100)), value
        # each iteration: a binary search, the gradient estimate (init_eval * sqrt(i + 1), at
        # most max_eval queries) and a step-size search (one query when the first step holds)
        return 1 + init + sum(search + min(int(init_eval * math.sqrt(i + 1)), max_eval) + 1 for i in range(iterations))
    raise ValueError(f"no query budget for {name}")


def attack_passes(spec: dict, shape: tuple[int, ...], n_classes: int) -> tuple[int, int]:
    """(forwards, input backwards) per sample of one attack cell at its budget, the margin
    at the budget's forward included (trashfire.attacks.engine)."""
    iterations = int(spec.get("max_iter") or 1)
    if spec["engine"] == "torch":
        # FGM/PGD: a forward and a backward per step, a last check; DeepFool: one backward
        # per class of the batch's class set, which holds every label of a class-balanced batch
        grads = n_classes if spec["name"] == "deepfool" else 1
        return iterations + 2, iterations * grads
    return search_queries(spec, shape) + 3, 0


def hours(total_flops: float, tflops: float) -> float:
    return total_flops / (tflops * 1e12) / 3600


def sweep_grid() -> tuple[list[dict], dict]:
    """The sweep's grid points, in queue order, and their distributions."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from trashfire.sweep.space import grid_choices, grid_points, search_space

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["experiment=trashfire_paper", "hparams_search=paper_grid"], return_hydra_config=True)
    space, _ = search_space([f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()])
    return grid_points({name: grid_choices(name, dist) for name, dist in space.items()}), space


def gb(n: float) -> str:
    return f"{n / 1e9:,.0f} GB" if n < 1e12 else f"{n / 1e12:,.1f} TB"


def grid_part(args) -> float:
    points, _space = sweep_grid()
    full = normalise(compose(["experiment=trashfire_paper"]))
    seeds = len(full.split.seeds)
    one_seed = normalise(compose(["experiment=trashfire_paper", "split.seeds=[0]"]))  # the grid per seed: 1/10 of the cells, read fast
    trains, models, specs = training_cells(one_seed), model_cells(one_seed), attack_specs(one_seed)
    print(
        f"trials (sweep grid points): {len(points):,} = " + " x ".join(str(len({str(p[k]) for p in points})) for k in points[0]) + f" ({', '.join(points[0])})"
    )
    print(f"per trial: {len(full.data)} data sets x {seeds} seeds = {len(full.data) * seeds} model cells, {len(specs)} attack cells each")
    print(
        f"whole grid: {len(trains) * seeds:,} training cells in {len({c.run_key for c in trains}) * seeds:,} runs, "
        f"{len(models) * seeds:,} model cells, {len(models) * seeds * len(specs):,} attack cells, "
        f"{len(models) * seeds * len(specs) * full.split.n_attack:,} attacked samples"
    )
    assert len(models) * seeds == len(points) * len(full.data) * seeds, "a trial's model cells are not the grid's share"

    costs = {}
    print("\nFLOPs per sample (forward query / input gradient / training step), parameters")
    for dname, (_n, shape) in DATASETS.items():
        for mname in full.model:
            spec = OmegaConf.to_container(full.model[mname], resolve=True)
            costs[dname, mname] = cost = model_cost(spec, int(full.data[dname].n_classes), shape)
            print(
                f"  {dname:9s} {mname:10s} {cost.forward / 1e9:6.2f} / {(cost.forward + cost.backward) / 1e9:6.2f} / {cost.step / 1e9:6.2f} GFLOP  {cost.params / 1e6:5.1f} M"
            )

    # training: each run once to its largest epoch count (checkpoints resumed), or each cell
    # from scratch (trials of one run side by side)
    runs: dict[str, list] = defaultdict(list)
    for cell in trains:
        runs[cell.run_key].append(cell)
    train_low = train_high = 0.0
    weights = 0
    for group in runs.values():
        cell = group[0]
        n, _shape = DATASETS[cell.dataset]
        n_train = n - math.ceil(full.split.test_size * n)
        kwargs = cell.defence.get("kwargs") or {}
        samples = n_train * (1 + float(kwargs.get("ratio", 0)) if kwargs.get("augmentation") else 1)  # Gauss-in appends noisy copies
        step = costs[cell.dataset, cell.model].step
        train_low += max(c.epochs for c in group) * samples * step * seeds
        train_high += sum(c.epochs for c in group) * samples * step * seeds
        weights += (len(group) + 1) * 4 * costs[cell.dataset, cell.model].params * seeds  # each checkpoint, and the run's momentum

    n_models = defaultdict(int)
    for m in models:
        n_models[m.train.dataset, m.train.model] += seeds
    per_cell: dict[tuple[str, str], float] = {}
    by_family: dict[str, float] = defaultdict(float)
    for (dname, mname), cost in costs.items():
        _n, shape = DATASETS[dname]
        total = 0.0
        for spec in specs:
            forwards, backwards = attack_passes(spec, shape, int(full.data[dname].n_classes))
            samples = min(int(spec.get("samples") or full.split.n_attack), full.split.n_attack)
            work = samples * (forwards * cost.forward + backwards * cost.backward)
            total += work
            by_family[spec["name"]] += work * n_models[dname, mname]
        per_cell[dname, mname] = total
    attack = sum(by_family.values())
    # the budget stage (dvc repro after the sweep) reruns a share of the model cells at a larger budget
    settings = full.budget
    reruns = 0.0
    for family, share in (settings.get("calibrate") or {}).items():
        larger = attack_specs(larger_budget_config(one_seed, float(settings.factor), [family]))
        for (dname, mname), cost in costs.items():
            for spec in larger:
                forwards, backwards = attack_passes(spec, DATASETS[dname][1], int(full.data[dname].n_classes))
                reruns += float(share) * n_models[dname, mname] * full.split.n_attack * (forwards * cost.forward + backwards * cost.backward)
    calibrated = ", ".join(f"{k} {float(settings.factor):g}x, {float(v):.0%} of cells" for k, v in (settings.get("calibrate") or {}).items())
    n_attack_cells = len(models) * seeds * len(specs)

    t = args.tflops
    print(f"\nGPU hours at {t:g} TFLOP/s sustained (30% of an A100's {A100_TF32_PEAK:g} TFLOP/s TF32 peak unless --tflops):")
    print(f"  {'work':66s} {'FLOPs':>9s} {'GPU h':>9s}")
    rows = [
        ("training, each run once to its largest epochs (resumed)", train_low),
        ("training, every epochs cell from scratch", train_high),
    ]
    rows += [(f"attack budget: {name}", value) for name, value in sorted(by_family.items(), key=lambda kv: -kv[1])]
    rows += [
        ("attack budget, all families", attack),
        ("total: training (resumed) + attack budget", train_low + attack),
        ("total: training (from scratch) + attack budget", train_high + attack),
        (f"after the sweep, dvc repro's budget reruns ({calibrated})", reruns),
    ]
    for label, value in rows:
        print(f"  {label:66s} {value:9.2e} {hours(value, t):9,.0f}")

    print("\none trial's GPU hours (its 30 training cells from scratch + its 30 model cells' attack budget):")
    longest = 0.0
    for mname in full.model:
        for epochs, defence, factor, trains_too in ((10, "none@0", 1.0, True), (100, "gauss_in@*", 1.5, True), (100, "fsq@* (cached weights)", 1.0, False)):
            train = sum(seeds * epochs * factor * (n - math.ceil(full.split.test_size * n)) * costs[d, mname].step for d, (n, _s) in DATASETS.items())
            attacks = sum(seeds * per_cell[d, mname] for d in DATASETS)
            total = (train if trains_too else 0.0) + attacks
            longest = max(longest, total)
            print(f"  {mname:10s} epochs {epochs:3d} {defence:24s} {hours(total, t):7.1f} h")
    mean_trial_h = hours(train_low + attack, t) / len(points)
    print(f"  mean over the grid (training resumed): {mean_trial_h:.1f} h")

    # the trials in queue order, each run's checkpoints resumed (an epochs trial trains on from
    # the one before it; predict-time defences find the undefended weights the none@0 trials left)
    epochs_grid = sorted({int(p["train.epochs"]) for p in points})
    trial_hours = []
    for point in points:
        defence, mname, epochs = str(point["defence_cell"]).split("@")[0], point["model"], int(point["train.epochs"])
        stage = full.defence[defence].stage
        factor = 1 + float(full.defence[defence].kwargs.get("ratio", 0)) if stage == "train" and full.defence[defence].kwargs.get("augmentation") else 1
        before = max([e for e in epochs_grid if e < epochs], default=0)
        train = sum(seeds * (epochs - before) * factor * (n - math.ceil(full.split.test_size * n)) * costs[d, mname].step for d, (n, _s) in DATASETS.items())
        attacks = sum(seeds * per_cell[d, mname] for d in DATASETS)
        trial_hours.append(hours((train if stage != "predict" else 0.0) + attacks, t))
    gpus = args.gpus
    batches = [trial_hours[i : i + gpus] for i in range(0, len(trial_hours), gpus)]
    wall_a = sum(max(b) for b in batches)
    free = [0.0] * gpus  # independent sweepers: each takes the next queued trial when it is free
    for h in trial_hours:
        heapq.heapreplace(free, free[0] + h)
    wall_b = max(free)
    busy = sum(trial_hours)
    print(f"\n{gpus} GPUs, trials in queue order, training resumed ({busy:,.0f} GPU h of trials):")
    print(f"  one sweeper, launcher=slurm, batches of {gpus}: {wall_a:,.0f} h ({wall_a / 24:.0f} days) wall, GPUs busy {busy / (gpus * wall_a):.0%}")
    print(f"  {gpus} independent sweepers:                 {wall_b:,.0f} h ({wall_b / 24:.0f} days) wall, GPUs busy {busy / (gpus * wall_b):.0%}")

    print("\ndisk:")
    processed = sum(n * math.prod(shape) * 4 for n, shape in DATASETS.values()) * seeds
    print(f"  data/processed/: {gb(processed)} ({len(DATASETS) * seeds} splits, float32 images)")
    print(f"  models/: {gb(weights)} in {len(trains) * seeds:,} checkpoints (fp32 weights; each run's last keeps its momentum beside)")
    print(f"  reports/attacks/: {gb(n_attack_cells * ATTACK_CELL_BYTES)} in {2 * n_attack_cells:,} files (~{ATTACK_CELL_BYTES / 1e3:g} kB per attack cell)")
    return mean_trial_h * 3600


class Statements:
    """SQL statements an engine runs, counted by SQLAlchemy's cursor event."""

    def __init__(self, *engines):
        import sqlalchemy as sa

        self.n = 0
        for engine in engines:
            sa.event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, *_args) -> None:
        self.n += 1

    def of(self, work) -> int:
        before = self.n
        work()
        return self.n - before


def study_part(args, trial_seconds: float) -> None:
    import optuna
    import sqlalchemy as sa
    from optuna.trial import TrialState

    from trashfire.sweep.heartbeat import SqlBeats
    from trashfire.sweep.storage import optuna_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    points, space = sweep_grid()
    fixed = {"experiment": "trashfire_paper"}  # the command line's fixed overrides, kept as user attributes
    queue = [optuna.trial.create_trial(state=TrialState.WAITING, params=p, distributions=space, user_attrs=fixed) for p in points]
    running = (TrialState.RUNNING,)
    unfinished = (TrialState.WAITING, TrialState.RUNNING)
    print(f"\nOptuna study of the grid ({len(points):,} trials; SQLite and a journal file built here, in a temporary folder)")
    with tempfile.TemporaryDirectory() as tmp:
        # the journal: queued as the first sweeper queues it, each trial then finished as a sweeper does
        journal = optuna_storage(f"journal:///{tmp}/optuna.log")
        study = optuna.create_study(study_name="paper_grid", storage=journal, direction="maximize")
        started = time.perf_counter()
        study.add_trials(queue)
        queued = time.perf_counter() - started
        study_id = journal.get_study_id_from_name("paper_grid")
        for number in range(len(points)):
            trial_id = journal.get_trial_id_from_study_id_trial_number(study_id, number)
            journal.set_trial_state_values(trial_id, TrialState.RUNNING)
            journal.set_trial_user_attr(trial_id, "slurm_job_id", f"1234567_{number}")
            journal.set_trial_state_values(trial_id, TrialState.COMPLETE, [0.5])
        print(f"  journal: {Path(tmp, 'optuna.log').stat().st_size / 1e6:.1f} MB; queueing the grid took {queued:.1f} s here")

        # SQLite: the SQL statements of each operation, counted at the start and in the tail
        url = f"sqlite:///{tmp}/optuna.db"
        storage = optuna_storage(url)
        study = optuna.create_study(study_name="paper_grid", storage=storage, direction="maximize")
        beats = SqlBeats(url, "paper_grid")
        count = Statements(storage.engine, beats.engine)
        started = time.perf_counter()
        study.add_trials(queue)
        queued = time.perf_counter() - started
        study_id = storage.get_study_id_from_name("paper_grid")
        started = time.perf_counter()
        cost = {"list the queue (start)": count.of(lambda: study.get_trials(deepcopy=False, states=unfinished))}
        listing = time.perf_counter() - started
        tail = len(points) - 3
        for number in range(len(points)):
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
            if number == tail:  # the last trials: the queue is empty but for them
                study.get_trials(deepcopy=False)  # the study's cache as a sweeper's listings keep it (it rereads unfinished trials only)
                cost["take"] = 1 + count.of(lambda: storage.set_trial_state_values(trial_id, TrialState.RUNNING))  # + the id lookup
                cost["take, lost race"] = 1 + count.of(lambda: storage.set_trial_state_values(trial_id, TrialState.RUNNING))
                cost["beat"] = count.of(lambda: beats.beat([number]))
                cost["wait poll (tail)"] = count.of(lambda: beats.ages([t.number for t in study.get_trials(deepcopy=False, states=running)]))
                cost["list the queue (tail)"] = count.of(lambda: study.get_trials(deepcopy=False, states=unfinished))
                trial = optuna.Trial(study, trial_id)
                cost["tell"] = count.of(lambda: (trial.set_user_attr("slurm_job_id", "1234567_1"), study.tell(trial, 0.5), beats.forget([number])))
                continue
            storage.set_trial_user_attr(trial_id, "slurm_job_id", f"1234567_{number}")
            storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [0.5])
        with storage.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            tables = [r[0] for r in connection.execute(sa.text("SELECT name FROM sqlite_master WHERE type = 'table'"))]
            rows = {t: connection.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar() for t in tables}
        size = Path(tmp, "optuna.db").stat().st_size
        print(f"  SQLite: {size / 1e6:.1f} MB; queueing the grid took {queued:.1f} s here, listing the whole queue {listing:.2f} s")
        print("  rows: " + ", ".join(f"{t} {n:,}" for t, n in sorted(rows.items(), key=lambda kv: -kv[1]) if n))
        print("  SQL statements per operation: " + ", ".join(f"{k} {v}" for k, v in cost.items()))

    n, beat_s, poll_s = args.sweepers, 10, 5.0  # the sweeper's defaults: heartbeat_interval, poll_interval
    takes = n / trial_seconds * (cost["take"] + (n - 1) * cost["take, lost race"] + cost["tell"])
    polls = n * (cost["wait poll (tail)"] + cost["list the queue (tail)"] + 2) / poll_s  # + the study lock's two
    print(f"\ndatabase load of {n} sweepers (heartbeat_interval {beat_s} s, poll_interval {poll_s:g} s):")
    print(f"  heartbeats: {n * cost['beat'] / beat_s:.1f} statements/s while trials run")
    print(f"  taking and telling trials ({trial_seconds / 3600:.1f} h per trial, ~{n - 1} lost races per take): {takes:.2f} statements/s")
    print(f"  start: each sweeper lists the whole queue once ({cost['list the queue (start)']} statements, {listing:.1f} s here)")
    print(f"  tail (sweepers waiting for the last trials): {polls:.0f} statements/s, and {n / poll_s:.0f} connections/s opened for PostgreSQL's study lock")
    print(f"  connections: about {2 * n} open (each sweeper's Optuna pool and heartbeat pool), {3 * n} at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tflops", type=float, default=DEFAULT_TFLOPS, help="sustained TFLOP/s per GPU (default: 30%% of an A100's TF32 peak)")
    parser.add_argument("--gpus", type=int, default=32, help="GPUs for the wall-time comparison (launcher=slurm's batch, or that many sweepers)")
    parser.add_argument("--sweepers", type=int, default=64, help="independent sweepers for the database load")
    parser.add_argument("--no-study", action="store_true", help="skip building the Optuna study")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trial_seconds = grid_part(args)
    if not args.no_study:
        study_part(args, trial_seconds)


if __name__ == "__main__":
    main()
