"""Fixtures compose the real conf/ and shrink it, so tests exercise the configs users run."""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path

# Under pytest-xdist (`make test` runs one worker per core), one thread per worker: the
# workers share the cores, and torch's default of one thread per core in each would
# oversubscribe them. Set before torch is imported, which reads it once.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") != "1":
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402 -- after the thread setting
import pytest  # noqa: E402
from omegaconf import OmegaConf, open_dict  # noqa: E402

from tests.helpers.paths import MNIST_ROOT as SHARED_MNIST  # noqa: E402, F401 -- the tests' name for it
from tests.helpers.paths import ROOT  # noqa: E402
from trashfire.core.config import compose, normalise, validate  # noqa: E402
from trashfire.core.errors import ConfigError  # noqa: E402
from trashfire.core.records import write_table  # noqa: E402

# float32 examples that differ only by the order in which a CPU's kernels sum (another batch
# shape, another ISA: AVX2 against AVX-512), in standardised units; seen up to 6.9e-7
ROUNDING = 1e-5

# Every defence family, both FGM norms and PGD, two strengths each, on 400 digits (the other
# attack families have their own tests).
# conf/experiment/tiny.yaml, the one quick pipeline of the tests and the bench; in-process
# training, as the tests' monkeypatches expect (test_parallel and the kill test run workers)
TINY = ["experiment=tiny", "compute.workers=1"]


def artefacts_of(stage, **folders: Path):
    """The artefacts `stage` (a stage module) hands its library, in a layout of `folders` by
    paths key (reports=...): for tests that call the library without a whole config."""
    return stage.STAGE.resolved(OmegaConf.create({"paths": {key: str(folder) for key, folder in folders.items()}}))


def tiny_overrides(tmp: Path, *extra: str) -> list[str]:
    paths = {"raw": "data/raw", "processed": "data/processed", "models": "models", "attacks": "reports/attacks", "reports": "reports"}
    return TINY + [f"paths.{k}={tmp / v}" for k, v in paths.items()] + list(extra)


def tiny_config(folder: Path, *extra: str):
    """The tiny grid, validated and normalised, with its paths under `folder`."""
    return normalise(validate(compose(tiny_overrides(folder, *extra), conf=ROOT / "conf")))


@pytest.fixture
def tiny_cfg(tmp_path):
    os.environ.setdefault("TRASHFIRE_CONFIG_DIR", str(ROOT / "conf"))
    return tiny_config(tmp_path)


def stage_cfg(tmp_path: Path, data, *overrides: str):
    """The tiny config with `data` written as its survival data set: the survival stage alone.
    Hand-made data are in seconds: the process clock, unless `overrides` name another."""
    cfg = normalise(validate(compose(tiny_overrides(tmp_path, "clock=process", *overrides), conf=ROOT / "conf")))
    (tmp_path / "reports").mkdir(exist_ok=True)
    write_table(data, tmp_path / "reports" / "survival_data.parquet")
    return cfg


@pytest.fixture(scope="module")
def project_conf():
    """The stages' CLIs read conf/ through TRASHFIRE_CONFIG_DIR: this checkout's, for one module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRASHFIRE_CONFIG_DIR", str(ROOT / "conf"))
        yield


@pytest.fixture(scope="session")
def conf_dir() -> Path:
    return ROOT / "conf"


ATTACK_OPTIONS = ", ".join(sorted(path.stem for path in (ROOT / "conf" / "attack").glob("*.yaml")))  # as a refusal lists them

TIMING_KEYS = ("t_", "device", "rates", "seconds_per_flop")  # measured on a clock or the machine
TIMING_ARRAYS = ("duration_",)  # the per-sample clocks


DROP = object()  # a config_refusal change that removes the key, as a params.yaml from before it would lack it


@functools.cache
def default_config():
    """conf/ composed with no overrides, once per session (config_refusal works on copies)."""
    return compose([], conf=ROOT / "conf")


def config_refusal(check, changes: dict) -> str | None:
    """The error line a section's check (trashfire.core.checks.register) gives the default
    config with `changes` (dotted key: value, or DROP), None if it passes. The checks alone,
    without `validate`'s composition, so that a test of many values stays fast."""
    cfg = copy.deepcopy(default_config())
    with open_dict(cfg):
        for key, value in changes.items():
            if value is DROP:
                parent, _, leaf = key.rpartition(".")
                del OmegaConf.select(cfg, parent)[leaf]
            else:
                OmegaConf.update(cfg, key, value, merge=False)
    try:
        check(cfg)
    except ConfigError as err:
        return str(err)
    return None


def is_timing_key(key: str) -> bool:
    """A record key measured on a clock; the compute clock's (t_train_flops ...) is counted, not measured."""
    return key.startswith(TIMING_KEYS) and not key.endswith("_flops")


def comparable(array: np.ndarray) -> list:
    """An array as a list that compares equal to its copy: NaN (a broken sample's margin at the
    budget) as None."""
    if array.dtype.kind == "f":
        return [None if np.isnan(v) else v for v in array.tolist()]
    return array.tolist()


def recorded(folder: Path) -> dict[str, dict]:
    """A results folder's record files (timings and device left out) and outcome arrays (as
    lists, the per-sample durations left out), by file name: what two runs of one config
    must agree on."""
    found: dict[str, dict] = {}
    for path in sorted(Path(folder).iterdir()):
        if path.suffix == ".json":
            found[path.name] = {k: v for k, v in json.loads(path.read_text()).items() if not is_timing_key(k)}
        elif path.suffix == ".npz":
            with np.load(path) as arrays:
                found[path.name] = {k: comparable(arrays[k]) for k in arrays.files if not k.startswith(TIMING_ARRAYS)}
    return found


@pytest.fixture(scope="session")
def digits_cnn(tmp_path_factory):
    """A 3-layer CNN trained for 3 epochs on 400 digits, as the attack engine sees it: the
    split and the `Target` (undefended, CPU). Session-wide: AutoAttack's component tests
    share it."""
    import torch

    from trashfire.attacks.art_attacks import art_classifier
    from trashfire.attacks.target import Target
    from trashfire.core.grid import UNDEFENDED, training_cells
    from trashfire.data.datasets import load_split
    from trashfire.models import training
    from trashfire.stages import prepare, train

    tmp = tmp_path_factory.mktemp("digits_cnn")
    cfg = tiny_config(tmp, "model=[cnn3]", "defence=[none]", "train.epochs=[3]", "attack=[pgd]", "split.n_attack=60")
    prepare.run(cfg)
    train.run(cfg)
    split = load_split(cfg.paths.processed, cfg, "digits", 0)
    model = training.load_weights(cfg.paths.models, training_cells(cfg)[0], split)
    cpu = torch.device("cpu")
    return split, Target(art_classifier(model, split, dict(UNDEFENDED), cpu), cpu)


class PixelModel:
    """A `Target`'s logits on [0, 1] pixel inputs, as the AutoAttack authors' code
    (`pyautoattack`) calls a model: the standardised input is low + x * (high - low), so an
    eps in pixels is eps * (high - low) on the standardised scale (one channel: exact)."""

    def __init__(self, target):
        import torch

        self.target = target
        self.low, self.high = target.clip_values
        self.module = torch.nn.Module()  # pyautoattack's check_dynamic traces a call

    def __call__(self, x):
        return self.target.logits(self.low + x * (self.high - self.low))

    def to_pixels(self, x_standardised):
        return (x_standardised - self.low) / (self.high - self.low)

    def eps_standardised(self, eps_pixels: float) -> float:
        return eps_pixels * (self.high - self.low)


def first_query(target, x: np.ndarray, y: np.ndarray, budget: int):
    """A log and clock after every sample's first query, as the torch engine's AutoAttack
    starts (trashfire.attacks.standard.first_query): (log, clock, the standing rows)."""
    from trashfire.attacks.engine import model_cost
    from trashfire.attacks.failure_log import FailureLog
    from trashfire.attacks.standard import first_query as check_every_sample
    from trashfire.core.clocks import LapClock

    cost = model_cost(target, x, y)
    clock = LapClock(len(y), target.device, cost.forward, cost.backward).start()
    log = FailureLog(x.astype(np.float32), y.astype(np.int64), budget)
    return log, clock, check_every_sample(target, log, clock, batch_size=len(y))
