"""A corpus of bad inputs, each refused cleanly by the stage command line.

For every case the stage (or `python -m trashfire.params`, which composes conf/) must end
with exactly one line on stderr that names the offending key or file and what is allowed,
a non-zero exit status and no traceback, and must train nothing: no models/ folder appears,
or the models/ folder of a trained setup keeps exactly its files.

The cases: unknown config group options, malformed and misspelt overrides, wrong types,
out-of-range and non-finite values (eps, epochs, lr, defence strengths, split, device,
metrics), norms an attack does not support, empty grids, missing or bad params files,
missing and corrupt data sets (IDX, gzip, CIFAR pickles), corrupt prepared splits, model
weights, model and attack records and survival data, output folders that cannot be
written, and survival fitters that cannot be built.

Most cases call the stage's `main(argv)` in-process (a fresh interpreter costs seconds per
case); a few run `python -m trashfire.<stage>` to prove the real process path. The stages
log INFO lines to stderr before they fail; in-process, those are told apart by a level
prefix added to the log format, so a stray warning still counts as a second line.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.conftest import ATTACK_OPTIONS, ROOT, SHARED_MNIST, tiny_overrides
from tests.data.test_datasets import write_cifar, write_idx
from trashfire import params
from trashfire.core import cli
from trashfire.core.config import load_params, normalise, validate
from trashfire.core.records import read_table, write_table
from trashfire.params import composed_yaml
from trashfire.stages import aggregate, attack, prepare, survival, timing, train

STAGES = {
    "params": params.main,
    "prepare": prepare.main,
    "train": train.main,
    "attack": attack.main,
    "timing": timing.main,
    "survival": survival.main,
    "aggregate": aggregate.main,
}
PATHS = {"raw": "data/raw", "processed": "data/processed", "models": "models", "attacks": "reports/attacks", "reports": "reports"}
# Every defence and attack family, so that each one's keys are validated; mlp2 is the cheapest model.
FULL = ["model=[mlp2]", "attack=[fgm,pgd,deepfool,pixel,threshold,hsj]"]
# What the file cases corrupt: one mlp2 cell on 200 digits, FGM and PGD at one eps each.
SETUP = [
    "survival.split_by=attack_hash",  # one model: the survival split needs two groups (else no TRASH: trashfire.core.cli.check_pipeline)
    "model=[mlp2]",
    "defence=[none]",
    "data.digits.subsample=200",
    "split.n_attack=10",
    "attack.fgm.values=[0.3]",
    "attack.fgm.norms=[inf]",
    "attack.pgd.values=[0.3]",
]


def path_overrides(root: Path) -> list[str]:
    return [f"paths.{key}={root / value}" for key, value in PATHS.items()]


pytestmark = pytest.mark.usefixtures("project_conf")


@pytest.fixture(scope="module")
def full_params(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("full")
    path = folder / "params.yaml"
    path.write_text(composed_yaml(tiny_overrides(folder, *FULL)))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    """A tiny project after prepare, train, attack and timing: the files the cases corrupt."""
    folder = tmp_path_factory.mktemp("setup")
    (folder / "params.yaml").write_text(composed_yaml(tiny_overrides(folder, *SETUP)))
    cfg = normalise(validate(load_params(folder / "params.yaml")))
    with own_logging():
        logging.getLogger("trashfire").handlers[:] = [logging.NullHandler()]
        for stage in (prepare, train, attack, timing):
            stage.run(cfg)
    return folder


@pytest.fixture
def workspace(setup, tmp_path) -> Path:
    """A private copy of the setup: a case may corrupt any of its files."""
    root = tmp_path / "w"
    shutil.copytree(setup, root)
    return root


@contextmanager
def own_logging():
    """Put the package logger back as it was: a stage's handler writes to the stderr of the
    test that ran it, which pytest closes when that test ends."""
    package = logging.getLogger("trashfire")
    saved = package.handlers[:], package.level, package.propagate
    try:
        yield
    finally:
        package.handlers[:], package.level, package.propagate = saved


@pytest.fixture
def levelled_logs(monkeypatch):
    """The stages' own log format, with the level in front, so INFO lines can be left out."""
    real = cli.configure_logging

    def configure(prog: str) -> None:
        real(prog)
        for handler in logging.getLogger("trashfire").handlers:
            handler.setFormatter(logging.Formatter(f"%(levelname)s {prog}: %(message)s"))

    monkeypatch.setattr(cli, "configure_logging", configure)
    with own_logging():
        yield


def refusal(stage: str, argv: list[str], capsys) -> tuple[int, str]:
    """Run the stage in-process; return its exit status and its one line of error."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        STAGES[stage](argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("INFO ")]
    assert len(lines) == 1, err
    assert stopped.value.code not in (0, None), err
    return stopped.value.code, lines[0]


def assert_names(line: str, needles) -> None:
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"


def model_files(root: Path) -> dict[str, int] | None:
    folder = root / "models"
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} if folder.is_dir() else None


# --- composing conf/ with `python -m trashfire.params` ---------------------------------------

COMPOSE_CASES = [
    pytest.param(
        ["model=[resnet99]"], ("model", "'resnet99'", "available: cifar_resnet14, cifar_resnet20, cifar_resnet8, cnn3"), id="compose-unknown-model-resnet99"
    ),
    pytest.param(["attack=[fgm,carlini]"], ("attack", "'carlini'", f"available: {ATTACK_OPTIONS}"), id="compose-unknown-attack-carlini"),
    pytest.param(["defence=nonsense"], ("defence", "'nonsense'", "available: adv_train, conf, fsq"), id="compose-unknown-defence-nonsense"),
    pytest.param(["data=[imagenet]"], ("data", "'imagenet'", "available: cifar10, cifar100, digits"), id="compose-unknown-data-imagenet"),
    pytest.param(["experiment=fast"], ("experiment", "'fast'", "available: auc_paper"), id="compose-unknown-experiment-preset"),
    pytest.param(["train.epoch=[1]"], ("train.epoch", "no such key", "epochs", "+train.epoch"), id="compose-misspelt-key-train-epoch"),
    pytest.param(["train.epochs"], ("train.epochs", "key=value"), id="compose-override-without-equals"),
    pytest.param(["train.epochs=[1"], ("train.epochs", "cannot parse", "[a,b]"), id="compose-override-unbalanced-bracket"),
    pytest.param(["model=[]"], ("model", "select at least one option"), id="compose-empty-model-list"),
    pytest.param(["attack=[]"], ("attack", "select at least one option"), id="compose-empty-attack-list"),
    pytest.param(["attack.fgm.values=[-1]"], ("attack.fgm.values", "got -1", "> 0"), id="compose-negative-eps"),
]


@pytest.mark.parametrize("overrides, needles", COMPOSE_CASES)
def test_composition_refuses(overrides, needles, tmp_path, capsys):
    out = tmp_path / "params.yaml"
    code, line = refusal("params", [*overrides, "--out", str(out)], capsys)
    assert code == 2 and line.startswith("trashfire.params: config error: ")
    assert_names(line, needles)
    assert not out.exists()


# --- a value on the stage command line, over a composed params.yaml --------------------------

CONFIG_CASES = [
    # wrong types
    pytest.param("train", ["train.epochs=[ten]"], ("train.epochs", "'ten'", "integer >= 1"), id="epochs-string"),
    pytest.param("train", ["train.epochs=true"], ("train.epochs", "True", "integer >= 1"), id="epochs-bool"),
    pytest.param("train", ["train.epochs=[2.5]"], ("train.epochs", "2.5", "integer >= 1"), id="epochs-float"),
    pytest.param("train", ["train.lr=[fast]"], ("train.lr", "'fast'", "finite number > 0"), id="lr-string"),
    pytest.param("train", ["train.batch_size=[64]"], ("train.batch_size", "[64]", "integer >= 1"), id="batch-size-list-for-scalar"),
    pytest.param("train", ["train.momentum=[0.9]"], ("train.momentum", "[0.9]", "in [0, 1)"), id="momentum-list-for-scalar"),
    pytest.param("attack", ["attack.fgm.values=[strong]"], ("attack.fgm.values", "'strong'", "finite number > 0"), id="eps-string"),
    pytest.param("prepare", ["split.n_attack=many"], ("split.n_attack", "'many'", "integer >= 1"), id="n-attack-string"),
    pytest.param("train", ["paths.models=[a,b]"], ("paths.models", "['a', 'b']", "a folder path"), id="models-path-list"),
    # eps
    pytest.param("attack", ["attack.fgm.values=[-0.1]"], ("attack.fgm.values", "-0.1", "> 0"), id="eps-negative"),
    pytest.param("attack", ["attack.fgm.values=[0]"], ("attack.fgm.values", "got 0", "> 0"), id="eps-zero"),
    pytest.param("attack", ["attack.pgd.values=[.nan]"], ("attack.pgd.values", "nan", "finite number > 0"), id="eps-nan"),
    pytest.param("attack", ["attack.pgd.values=[.inf]"], ("attack.pgd.values", "inf", "finite number > 0"), id="eps-inf"),
    pytest.param("attack", ["attack.fgm.values=[0.1,-.inf]"], ("attack.fgm.values", "-inf", "finite number > 0"), id="eps-minus-inf-in-grid"),
    pytest.param("attack", ["attack.deepfool.values=[0]"], ("attack.deepfool.values", "got 0", "integer >= 1"), id="deepfool-grads-zero"),
    pytest.param("attack", ["attack.hsj.values=[1.5]"], ("attack.hsj.values", "1.5", "integer >= 1"), id="hsj-evals-fraction"),
    # norms an attack does not support
    pytest.param("attack", ["attack.pgd.norms=[0]"], ("attack.pgd.norms", "'0'", "allowed: inf, 1, 2"), id="norm-l0-for-pgd"),
    pytest.param("attack", ["attack.fgm.norms=[3]"], ("attack.fgm.norms", "'3'", "allowed: inf, 1, 2"), id="norm-l3-for-fgm"),
    pytest.param("attack", ["attack.deepfool.norms=[inf]"], ("attack.deepfool.norms", "'inf'", "allowed: 2"), id="norm-linf-for-deepfool"),
    pytest.param("attack", ["attack.pixel.norms=[2]"], ("attack.pixel.norms", "'2'", "allowed: 0"), id="norm-l2-for-pixel"),
    pytest.param("attack", ["attack.threshold.norms=[1]"], ("attack.threshold.norms", "'1'", "allowed: inf"), id="norm-l1-for-threshold"),
    # attack engines
    pytest.param("attack", ["attack.pixel.engine=torch"], ("attack.pixel.engine", "fgm, pgd, deepfool only", "per_image, art"), id="torch-engine-for-pixel"),
    pytest.param("attack", ["attack.fgm.engine=jax"], ("attack.fgm.engine", "'jax'", "allowed: torch, per_image, art"), id="unknown-engine"),
    pytest.param("attack", ["attack.pgd.early_exit=3"], ("attack.pgd.early_exit", "got 3", "true or false"), id="early-exit-not-bool"),
    pytest.param(
        "attack",
        ["attack.pgd.kwargs.num_random_init=1"],
        ("attack.pgd.kwargs.num_random_init", "got 1", "ART's default (0)", "engine: art"),
        id="torch-engine-random-init",
    ),
    pytest.param(
        "attack", ["+attack.deepfool.early_exit=false"], ("attack.deepfool.early_exit", "fgm, pgd on the torch engine only"), id="early-exit-for-deepfool"
    ),
    # epochs and learning rate
    pytest.param("train", ["train.epochs=[0]"], ("train.epochs", "got 0", "integer >= 1"), id="epochs-zero"),
    pytest.param("train", ["train.epochs=[1,-3]"], ("train.epochs", "got -3", "integer >= 1"), id="epochs-negative"),
    pytest.param("train", ["train.lr=[0]"], ("train.lr", "got 0", "finite number > 0"), id="lr-zero"),
    pytest.param("train", ["train.lr=[-0.01]"], ("train.lr", "-0.01", "finite number > 0"), id="lr-negative"),
    pytest.param("train", ["train.lr=[.nan]"], ("train.lr", "nan", "finite number > 0"), id="lr-nan"),
    pytest.param("train", ["train.lr=[.inf]"], ("train.lr", "inf", "finite number > 0"), id="lr-inf"),
    # defence strengths
    pytest.param("train", ["defence.fsq.values=[0]"], ("defence.fsq.values", "got 0", "integer in [1, 64]"), id="fsq-bits-zero"),
    pytest.param("train", ["defence.fsq.values=[4,65]"], ("defence.fsq.values", "got 65", "integer in [1, 64]"), id="fsq-bits-65"),
    pytest.param("train", ["defence.fsq.values=[4.5]"], ("defence.fsq.values", "4.5", "integer in [1, 64]"), id="fsq-bits-fraction"),
    pytest.param("train", ["defence.conf.values=[0]"], ("defence.conf.values", "got 0", "in (0, 1)"), id="conf-zero"),
    pytest.param("train", ["defence.conf.values=[1.0]"], ("defence.conf.values", "1.0", "in (0, 1)"), id="conf-one"),
    pytest.param("train", ["defence.conf.values=[1.5]"], ("defence.conf.values", "1.5", "in (0, 1)"), id="conf-above-one"),
    pytest.param("train", ["defence.gauss_in.values=[-0.1]"], ("defence.gauss_in.values", "-0.1", "> 0"), id="gauss-in-sigma-negative"),
    pytest.param("train", ["defence.gauss_out.values=[-1]"], ("defence.gauss_out.values", "-1", "> 0"), id="gauss-out-scale-negative"),
    # empty grids
    pytest.param("attack", ["attack.fgm.values=[]"], ("attack.fgm.values", "non-empty list"), id="empty-eps-list"),
    pytest.param("attack", ["attack.fgm.norms=[]"], ("attack.fgm.norms", "non-empty list"), id="empty-norm-list"),
    pytest.param("train", ["train.epochs=[]"], ("train.epochs", "non-empty list"), id="empty-epochs"),
    pytest.param("train", ["train.lr=[]"], ("train.lr", "non-empty list"), id="empty-lr"),
    pytest.param("prepare", ["split.seeds=[]"], ("split.seeds", "non-empty list"), id="empty-seeds"),
    pytest.param("train", ["defence.fsq.values=[]"], ("defence.fsq.values", "non-empty list"), id="empty-defence-values"),
    # split and data
    pytest.param("prepare", ["split.test_size=0"], ("split.test_size", "got 0", "in (0, 1)"), id="test-size-zero"),
    pytest.param("prepare", ["split.test_size=1.5"], ("split.test_size", "1.5", "in (0, 1)"), id="test-size-above-one"),
    pytest.param("prepare", ["split.n_attack=0"], ("split.n_attack", "got 0", "integer >= 1"), id="n-attack-zero"),
    pytest.param("prepare", ["split.seeds=[-1]"], ("split.seeds", "-1", "integer >= 0"), id="seed-negative"),
    pytest.param("prepare", ["data.digits.subsample=10"], ("data.digits.subsample", "got 10", "integer >= 40"), id="subsample-below-attack-subset"),
    pytest.param("prepare", ["data.digits.source=imagenet"], ("data.digits.source", "'imagenet'", "allowed: sklearn_digits"), id="data-source-unknown"),
    pytest.param("prepare", ["data.digits.n_classes=1"], ("data.digits.n_classes", "got 1", "integer >= 2"), id="n-classes-one"),
    # device, schedule, clock
    pytest.param("train", ["compute.device=tpu"], ("compute.device", "'tpu'", "auto, cpu, cuda, cuda:N"), id="device-unknown"),
    pytest.param("train", ["train.lr_schedule=cosine"], ("train.lr_schedule", "'cosine'", "constant, step_half"), id="lr-schedule-unknown"),
    pytest.param("timing", ["clock=sundial"], ("clock", "'sundial'", "allowed: flops, process, wall"), id="clock-unknown"),
    # metrics
    pytest.param("aggregate", ["viability.tau=1.5"], ("viability.tau", "1.5", "in (0, 1]"), id="tau-above-one"),
    pytest.param("aggregate", ["viability.tau=0"], ("viability.tau", "got 0", "in (0, 1]"), id="tau-zero"),
    pytest.param("aggregate", ["viability.tau=.nan"], ("viability.tau", "nan", "in (0, 1]"), id="tau-nan"),
    pytest.param("aggregate", ["viability.w=-0.5"], ("viability.w", "-0.5", "> 0"), id="cohens-w-negative"),
    pytest.param("aggregate", ["metrics.auc.eps1=0.0"], ("metrics.auc.eps1", "got 0.0", "> 0.0"), id="eps1-equal-to-eps0"),
    pytest.param("aggregate", ["metrics.auc.eps0=0.2", "metrics.auc.eps1=0.1"], ("metrics.auc.eps1", "0.1", "> 0.2"), id="eps1-below-eps0"),
    pytest.param("aggregate", ["metrics.auc.eps0=-0.1"], ("metrics.auc.eps0", "-0.1", ">= 0"), id="eps0-negative"),
    pytest.param(
        "aggregate", ["metrics.auc.units=standardised", "metrics.auc.eps1=5.0"], ("metrics.auc.eps1", "exceeds the largest eps"), id="eps1-past-the-grid"
    ),
    # survival
    pytest.param(
        "survival",
        ["timing.survival_data.covariates=[epochs,height]"],
        ("timing.survival_data.covariates", "'height'", "allowed: epochs, depth"),
        id="covariate-unknown",
    ),
    pytest.param(
        "survival",
        ["timing.survival_data.misclassified_before_attack=attack_time"],
        ("timing.survival_data.misclassified_before_attack", "removed with the per-sample failure clock", "first_query"),
        id="before-attack-policy-removed",
    ),
    pytest.param(
        "survival", ["timing.survival_data.dummies=[model]"], ("timing.survival_data.dummies", "'model'", "allowed: attack, defence, data"), id="dummy-unknown"
    ),
    pytest.param("survival", ["survival.fitters=[weibull,gompertz]"], ("survival.fitters", "'gompertz'", "allowed: weibull, lognormal"), id="fitter-unknown"),
    pytest.param("survival", ["survival.chosen=cox"], ("survival.chosen", "'cox'", "allowed: weibull"), id="chosen-not-aft"),
    pytest.param("survival", ["survival.models.weibull.aft=maybe"], ("survival.models.weibull.aft", "'maybe'", "allowed: true"), id="aft-flag-string"),
    # malformed and misspelt stage overrides
    pytest.param("train", ["train.epochs"], ("train.epochs", "key=value"), id="override-without-equals"),
    pytest.param("train", ["train.epochs=[1"], ("train.epochs", "cannot parse", "[a,b]"), id="override-unbalanced-bracket"),
    pytest.param("train", ["train.epoch=[1]"], ("train.epoch", "no such key", "epochs", "+train.epoch"), id="override-misspelt-key"),
    pytest.param("train", ["=[1]"], ("=[1]", "key=value"), id="override-without-key"),
    pytest.param("prepare", ["split=0.2"], ("split", "got 0.2", "allowed: a mapping"), id="override-scalar-for-a-section"),
]


@pytest.mark.parametrize("stage, overrides, needles", CONFIG_CASES)
def test_bad_value_is_refused_before_training(stage, overrides, needles, full_params, tmp_path, capsys, levelled_logs):
    code, line = refusal(stage, ["--params", str(full_params), *path_overrides(tmp_path), *overrides], capsys)
    assert code == 2 and line.startswith(f"trashfire.stages.{stage}: config error: ")
    assert_names(line, needles)
    assert not (tmp_path / "models").exists() and not (tmp_path / "data").exists()


# --- params files -----------------------------------------------------------------------------


def write_params(text: str):
    return lambda root: (root / "params.yaml").write_text(text)


PARAMS_CASES = [
    pytest.param(lambda root: (root / "params.yaml").unlink(), ("params.yaml not found", "make params"), id="params-file-missing"),
    pytest.param(write_params("data: [digits\nmodel: {"), ("params.yaml is not valid YAML",), id="params-file-not-yaml"),
    pytest.param(write_params("- data\n- model\n"), ("params.yaml must hold a mapping",), id="params-file-a-list"),
    pytest.param(
        lambda root: OmegaConf.save(OmegaConf.merge(OmegaConf.load(root / "params.yaml"), {"data": None}), root / "params.yaml"),
        ("data", "missing or empty", "select at least one option"),
        id="params-file-empty-data",
    ),
    pytest.param(write_params("split: {seeds: [0]}\n"), ("data", "missing or empty", "make params"), id="params-file-missing-sections"),
]


@pytest.mark.parametrize("arrange, needles", PARAMS_CASES)
def test_bad_params_file_is_refused(arrange, needles, full_params, tmp_path, capsys, levelled_logs):
    shutil.copy(full_params, tmp_path / "params.yaml")
    arrange(tmp_path)
    code, line = refusal("train", ["--params", str(tmp_path / "params.yaml")], capsys)
    assert code == 2
    assert_names(line, needles)
    assert not (tmp_path / "models").exists()


# --- data sets, prepared data, models, records and output folders -----------------------------


def mnist_at(folder: Path) -> list[str]:
    """The digits member reads MNIST-layout IDX files from `folder` instead."""
    return ["data.digits.source=torchvision_mnist", f"data.digits.root={folder}"]


def empty_mnist_folder(root: Path) -> list[str]:
    (root / "empty").mkdir()
    return mnist_at(root / "empty")


def truncated_idx(root: Path) -> list[str]:
    write_idx(root / "idx", n=30)
    images = root / "idx" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:5000])
    return mnist_at(root / "idx")


def garbage_idx_labels(root: Path) -> list[str]:
    write_idx(root / "idx", n=30)
    (root / "idx" / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\xff\x07 not an idx file")
    return mnist_at(root / "idx")


def garbage_gz(root: Path) -> list[str]:
    write_idx(root / "idx", n=30, packed=True)
    (root / "idx" / "t10k-labels-idx1-ubyte.gz").write_bytes(os.urandom(200))
    return mnist_at(root / "idx")


def truncated_real_mnist(root: Path) -> list[str]:
    """The real MNIST archives, the training images cut off after 100 kB."""
    folder = root / "mnist"
    folder.mkdir()
    for source in SHARED_MNIST.glob("*.gz"):
        (folder / source.name).symlink_to(source)
    images = folder / "train-images-idx3-ubyte.gz"
    images.unlink()
    images.write_bytes((SHARED_MNIST / images.name).read_bytes()[:100_000])
    return mnist_at(folder)


def cifar_at(folder: Path, *extra: str) -> list[str]:
    """The digits member reads CIFAR-10's python batches under `folder` instead (a key digits
    lacks is added with +, as in Hydra)."""
    return ["data.digits.source=torchvision_cifar", f"data.digits.root={folder}", "+data.digits.classes=10", *extra]


def empty_cifar_folder(root: Path) -> list[str]:
    (root / "cifar").mkdir()
    return cifar_at(root / "cifar")


def garbage_cifar_batch(root: Path) -> list[str]:
    write_cifar(root / "cifar")
    (root / "cifar" / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"\x80\x04garbage")
    return cifar_at(root / "cifar", "+data.digits.verify=false")


def processed(root: Path, name: str) -> Path:
    (folder,) = (root / "data" / "processed" / "digits").iterdir()  # the one config prepared there
    return folder / name


def untrained(root: Path, *extra: str) -> list[str]:
    """An empty models folder, so the train stage must load the split to train."""
    return [f"paths.models={root / 'fresh_models'}", *extra]


def garbage_split(root: Path) -> list[str]:
    processed(root, "split_0.npz").write_bytes(b"PK\x03\x04 not a zip archive" * 20)
    return untrained(root)


def truncated_split(root: Path) -> list[str]:
    split = processed(root, "split_0.npz")
    split.write_bytes(split.read_bytes()[:300])
    return untrained(root)


def garbage_images(root: Path) -> list[str]:
    processed(root, "images.npy").write_bytes(os.urandom(512))
    return untrained(root)


def split_without_statistics(root: Path) -> list[str]:
    split = processed(root, "split_0.npz")
    with np.load(split) as arrays:
        kept = {k: arrays[k] for k in arrays.files if k not in ("mean", "std")}
    np.savez(split, **kept)
    return untrained(root)


def missing_labels(root: Path) -> list[str]:
    processed(root, "labels.npy").unlink()
    return untrained(root)


def unprepared_seed(root: Path) -> list[str]:
    return untrained(root, "split.seeds=[1]")


def only(folder: Path, pattern: str) -> Path:
    (match,) = [p for p in folder.glob(pattern) if "." not in p.stem]
    return match


def fresh_attacks(root: Path) -> str:
    return f"paths.attacks={root / 'fresh_attacks'}"


def garbage_weights(root: Path) -> list[str]:
    only(root / "models", "*.pt").write_bytes(os.urandom(4096))
    return [fresh_attacks(root)]


def missing_weights(root: Path) -> list[str]:
    only(root / "models", "*.pt").unlink()
    return [fresh_attacks(root)]


def garbage_model_record(root: Path) -> list[str]:
    only(root / "models", "*.json").write_text('{"train_hash": "abc", "acc_ben": 0.')
    return [fresh_attacks(root)]


def list_model_record(root: Path) -> list[str]:
    only(root / "models", "*.json").write_text("[1, 2, 3]\n")
    return [fresh_attacks(root)]


def untrained_models(root: Path) -> list[str]:
    return [f"paths.models={root / 'no_models'}", fresh_attacks(root)]


def attack_record(root: Path) -> Path:
    return sorted((root / "reports" / "attacks").glob("*.json"))[0]


def garbage_attack_record(root: Path) -> list[str]:
    attack_record(root).write_bytes(os.urandom(300))
    return []


def empty_attack_record(root: Path) -> list[str]:
    attack_record(root).write_text("")
    return []


def list_attack_record(root: Path) -> list[str]:
    attack_record(root).write_text('["fgm", 0.3]\n')
    return []


def attack_record_without_results(root: Path) -> list[str]:
    attack_record(root).write_text('{"dataset": "digits"}\n')
    return []


def garbage_outcomes(root: Path) -> list[str]:
    attack_record(root).with_suffix(".npz").write_bytes(b"\x93NUMPY garbage")
    return []


def no_attack_records(root: Path) -> list[str]:
    return [fresh_attacks(root)]


def a_file_at(root: Path, key: str, *parts: str) -> list[str]:
    """A plain file where an output folder must go."""
    blocker = root / "blocker"
    blocker.write_text("a file, not a folder")
    return [f"paths.{key}={blocker.joinpath(*parts)}"]


def survival_table_path(root: Path) -> Path:
    return root / "reports" / "survival_data.parquet"


def garbage_survival_data(root: Path) -> list[str]:
    survival_table_path(root).write_bytes(os.urandom(2000))
    return []


def survival_data_without_durations(root: Path) -> list[str]:
    write_table(read_table(survival_table_path(root)).drop(columns="duration"), survival_table_path(root))
    return []


def zero_survival_durations(root: Path) -> list[str]:
    write_table(read_table(survival_table_path(root)).assign(duration=0.0), survival_table_path(root))
    return []


def missing_survival_data(root: Path) -> list[str]:
    survival_table_path(root).unlink()
    return []


FILE_CASES = [
    # raw data sets
    pytest.param(
        "prepare", empty_mnist_folder, ("MNIST files not found", "empty", "train-images-idx3-ubyte", "point the data set's root"), id="mnist-folder-empty"
    ),
    pytest.param("prepare", truncated_idx, ("corrupt MNIST file", "train-images-idx3-ubyte", "IDX"), id="mnist-idx-truncated"),
    pytest.param("prepare", garbage_idx_labels, ("corrupt MNIST file", "t10k-labels-idx1-ubyte", "IDX"), id="mnist-idx-bad-magic"),
    pytest.param("prepare", garbage_gz, ("corrupt archive", "t10k-labels-idx1-ubyte.gz"), id="mnist-gz-garbage"),
    pytest.param("prepare", truncated_real_mnist, ("corrupt archive", "train-images-idx3-ubyte.gz"), id="real-mnist-gz-truncated"),
    pytest.param("prepare", empty_cifar_folder, ("CIFAR-10 files missing", "data_batch_1", "point data.cifar10.root"), id="cifar-folder-empty"),
    pytest.param("prepare", garbage_cifar_batch, ("cannot read CIFAR-10", "cifar-10-batches-py"), id="cifar-batch-garbage"),
    # prepared data
    pytest.param("train", garbage_split, ("corrupt prepared data", "split_0.npz", "rerun the prepare stage"), id="split-npz-garbage"),
    pytest.param("train", truncated_split, ("corrupt prepared data", "split_0.npz", "rerun the prepare stage"), id="split-npz-truncated"),
    pytest.param(
        "train",
        split_without_statistics,
        ("corrupt prepared data", "split_0.npz", "['mean', 'std'] missing", "rerun the prepare stage"),
        id="split-npz-without-statistics",
    ),
    pytest.param("train", garbage_images, ("corrupt prepared data", "images.npy", "rerun the prepare stage"), id="images-npy-garbage"),
    pytest.param("train", missing_labels, ("prepared data missing", "labels.npy", "run the prepare stage"), id="labels-npy-missing"),
    pytest.param("train", unprepared_seed, ("prepared data missing", "split_1.npz", "run the prepare stage"), id="split-seed-not-prepared"),
    # models and their records
    pytest.param("attack", garbage_weights, (".pt", "do not match their record", "rerun train"), id="model-weights-garbage"),
    pytest.param("attack", missing_weights, (".pt", "are missing", "rerun train"), id="model-weights-missing"),
    pytest.param("attack", garbage_model_record, ("corrupt record", ".json", "delete it and rerun"), id="model-record-truncated-json"),
    pytest.param("attack", list_model_record, ("corrupt record", ".json", "a JSON object"), id="model-record-not-an-object"),
    pytest.param("attack", untrained_models, ("record not found", "no_models", "run the stage"), id="models-never-trained"),
    # attack records
    pytest.param("timing", garbage_attack_record, ("corrupt record", ".json", "delete it and rerun"), id="attack-record-garbage-bytes"),
    pytest.param("timing", empty_attack_record, ("corrupt record", ".json", "delete it and rerun"), id="attack-record-empty"),
    pytest.param("timing", list_attack_record, ("corrupt record", ".json", "a JSON object"), id="attack-record-not-an-object"),
    pytest.param(
        "timing",
        attack_record_without_results,
        ("corrupt record", ".json", "no attack, acc_ben, acc_adv", "rerun the attack stage"),
        id="attack-record-without-results",
    ),
    pytest.param("timing", garbage_outcomes, ("corrupt array file", ".npz", "delete it and rerun"), id="attack-outcomes-npz-garbage"),
    pytest.param("timing", no_attack_records, ("attack record missing", "fresh_attacks", "run the attack stage"), id="attack-records-missing"),
    # output folders that cannot be written
    pytest.param("prepare", lambda root: a_file_at(root, "processed"), ("paths.processed", "blocker", "a folder"), id="processed-folder-is-a-file"),
    pytest.param("train", lambda root: a_file_at(root, "models", "models"), ("paths.models", "blocker", "a folder"), id="models-folder-under-a-file"),
    pytest.param("timing", lambda root: a_file_at(root, "reports"), ("paths.reports", "blocker", "a folder"), id="reports-folder-is-a-file"),
    pytest.param("attack", lambda root: a_file_at(root, "attacks", "x", "y"), ("paths.attacks", "blocker", "a folder"), id="attacks-folder-under-a-file"),
    # survival data and fitters
    pytest.param("survival", garbage_survival_data, ("survival_data.parquet", "rerun the timing stage"), id="survival-data-garbage"),
    pytest.param(
        "survival",
        survival_data_without_durations,
        ("survival_data.parquet", "['duration'] missing", "rerun the timing stage"),
        id="survival-data-no-duration-column",
    ),
    pytest.param("survival", zero_survival_durations, ("survival_data.parquet", "finite and > 0"), id="survival-durations-zero"),
    pytest.param("survival", missing_survival_data, ("survival data not found", "survival_data.parquet", "run the timing stage"), id="survival-data-missing"),
    pytest.param(
        "survival",
        lambda root: ["survival.models.weibull.fitter._target_=lifelines.GompertzAFTFitter"],
        ("survival.models.weibull.fitter", "lifelines.GompertzAFTFitter", "lifelines fitter class"),
        id="survival-fitter-class-unknown",
    ),
]


@pytest.mark.parametrize("stage, arrange, needles", FILE_CASES)
def test_bad_file_is_refused(stage, arrange, needles, workspace, capsys, levelled_logs):
    extra = arrange(workspace)
    models = model_files(workspace)
    code, line = refusal(stage, ["--params", str(workspace / "params.yaml"), *path_overrides(workspace), *extra], capsys)
    assert line.startswith(f"trashfire.stages.{stage}: ")
    assert_names(line, needles)
    assert model_files(workspace) == models
    assert not any((workspace / name).exists() for name in ("fresh_models", "no_models"))


# --- the real process path ---------------------------------------------------------------------


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def assert_one_line(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert_names(lines[0], needles)


def test_process_refuses_an_unknown_model(tmp_path):
    result = run_module("trashfire.params", "model=[resnet99]", "--out", str(tmp_path / "p.yaml"))
    assert_one_line(result, "model", "'resnet99'", "available:")
    assert not (tmp_path / "p.yaml").exists()


def test_process_refuses_a_truncated_mnist_archive(workspace):
    extra = truncated_real_mnist(workspace)
    result = run_module("trashfire.stages.prepare", "--params", str(workspace / "params.yaml"), *path_overrides(workspace), *extra)
    assert_one_line(result, "corrupt archive", "train-images-idx3-ubyte.gz")


def test_process_refuses_corrupt_model_weights(workspace):
    """The attack stage logs its plan first; the error is then the one line after it."""
    extra = garbage_weights(workspace)
    models = model_files(workspace)
    result = run_module("trashfire.stages.attack", "--params", str(workspace / "params.yaml"), *path_overrides(workspace), *extra)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "attack cells, 0 recorded" in lines[0], result.stderr
    assert_names(lines[1], (".pt", "do not match their record", "rerun train"))
    assert model_files(workspace) == models
