"""`model=external`: a model trained elsewhere, given by its module (`_target_`, `kwargs`) and a
state_dict file, with its training cost supplied. Here the "elsewhere" is trashfire itself: an
mlp2 trained by the train stage on the tiny digits, its weights saved as .pt and .safetensors,
then imported as an external model and run through every stage; the imported cell must equal
the trained one wherever training does not enter (its accuracy on the same split)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import save_file

from tests.conftest import ROOT, tiny_overrides
from tests.pipeline.test_bad_inputs import own_logging, refusal
from trashfire.core.config import compose, load_params, normalise, validate
from trashfire.core.errors import ConfigError
from trashfire.core.external import reported as publisher_figures
from trashfire.core.grid import training_cells
from trashfire.core.records import read_table
from trashfire.core.schema import TrainRecord
from trashfire.models import mlp, training
from trashfire.params import composed_yaml
from trashfire.stages import aggregate, attack, brittle, figures, prepare, survival, timing, train

# trashfire's own mlp2 builder, as a user's module: it takes its shape as kwargs
MLP2 = "model.external._target_=trashfire.models.mlp"
MLP2_KWARGS = "model.external.kwargs={n_classes:10,input_shape:[1,8,8],hidden:[512]}"
SMALL = ["defence=[none]", "attack=[fgm]", "attack.fgm.norms=[inf]", "survival.fitters=[weibull]", "brittle.n_samples=5"]


ONE_MODEL_SPLIT = "survival.split_by=attack_hash"  # one imported model: the pipeline's survival split needs two groups


def overrides(root: Path, *extra: str) -> list[str]:
    return tiny_overrides(root, *SMALL, *extra)


def external(checkpoint: Path | str, *extra: str) -> list[str]:
    return [MLP2, MLP2_KWARGS, f"model.external.checkpoint={checkpoint}", *extra]


T_TRAIN = "model.external.t_train={process:0.002,wall:0.001}"


def config(root: Path, *extra: str):
    return normalise(validate(compose(overrides(root, *extra), conf=ROOT / "conf")))


pytestmark = pytest.mark.usefixtures("project_conf")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The tiny digits prepared, one mlp2 trained on them (1 epoch), and its weights as a user
    would save them: `checkpoints/mlp2.pt` (torch.save) and `.safetensors`, beside a training
    log of its measured cost."""
    root = tmp_path_factory.mktemp("trained")
    cfg = config(root, "model=[mlp2]")
    with own_logging():
        prepare.run(cfg)
        (record,) = train.run(cfg)
    state = {k.removeprefix("net."): v for k, v in torch.load(root / "models" / record["weights"], weights_only=True).items()}
    user = mlp(10, [1, 8, 8], [512])  # a user's module of the same shape: Float32Input around the net
    user.net.load_state_dict(state)
    (root / "checkpoints").mkdir()
    torch.save(user.state_dict(), root / "checkpoints" / "mlp2.pt")
    save_file(user.state_dict(), str(root / "checkpoints" / "mlp2.safetensors"))
    log = {
        "n_train": record["n_train"],
        "process_seconds": record["t_train_process"] * record["n_train"],
        "wall_seconds": record["t_train_wall"] * record["n_train"],
        "flops": record["t_train_flops"] * record["n_train"],  # the whole run's, so that TRASH exists on the compute clock
    }
    (root / "checkpoints" / "train_log.json").write_text(json.dumps(log))
    return root


def test_an_external_model_runs_through_every_stage(trained, tmp_path):
    """mlp2 trained here and the same weights imported from .safetensors with a training log,
    side by side in one grid: every table, the survival fit, the cards and the figures take
    the imported cell's unknown epochs and lr."""
    shutil.copytree(trained / "data", tmp_path / "data")
    log = trained / "checkpoints" / "train_log.json"
    cfg = config(tmp_path, "model=[mlp2,external]", *external(trained / "checkpoints" / "mlp2.safetensors", f"model.external.train_log={log}"))
    with own_logging():
        records = {r["model"]: r for r in train.run(cfg)}
        attack.run(cfg)
        timing.run(cfg)
        survival.run(cfg)
        brittle.run(cfg)
        summary = aggregate.run(cfg)
        figures.run(cfg)

    native, imported = records["mlp2"], records["external"]
    assert imported["epochs"] is None and imported["lr"] is None and imported["depth"] == 2  # two Linear layers, counted
    assert imported["acc_ben"] == native["acc_ben"]  # the same weights on the same split
    assert imported["t_train_source"] == f"log:{log}" and imported["n_train"] == native["n_train"]
    logged = TrainRecord.read(next((trained / "models").glob("*.json")))  # the run the log was written from
    assert (imported["t_train_process"], imported["t_train_wall"]) == pytest.approx((logged.t_train_process, logged.t_train_wall))
    assert imported["checkpoint_sha256"] == training.file_sha256(trained / "checkpoints" / "mlp2.safetensors")

    reports = tmp_path / "reports"
    table = pd.read_csv(reports / "experiments.csv")
    rows = table[table["model"] == "external"]
    assert len(rows) == len(table) / 2 and rows["epochs"].isna().all() and rows["lr"].isna().all()
    assert set(rows["t_train_source"]) == {f"log:{log}"} and table.loc[table["model"] == "mlp2", "t_train_source"].isna().all()
    by_model = table.groupby("model")["acc_adv"].apply(list)
    assert by_model["external"] == by_model["mlp2"]  # the attacks see the same model
    for name in ("trash.csv", "robustness.csv", "curves.csv", "brittle.csv"):
        assert set(pd.read_csv(reports / name)["model"]) == {"mlp2", "external"}, name
    assert pd.read_csv(reports / "trash.csv").query("model == 'external'")["trash_adv"].notna().all()
    assert "epochs" not in read_table(reports / "survival_data.parquet")  # unknown for the imported cell: dropped, not guessed
    fits = pd.read_csv(reports / "survival" / "aft_comparison.csv")
    assert fits.loc[fits["fitter"] == "weibull", "status"].iloc[0] == "fitted"
    assert summary["n_train_cells"] == 2

    card = json.loads((reports / "cards" / f"{imported['train_hash']}.json").read_text())
    assert card["training"]["epochs"] is None and card["training"]["lr"] is None
    assert card["provenance"]["trained_by"].startswith("not trashfire")
    assert card["provenance"]["t_train_source"] == f"log:{log}" and str(log) in card["provenance"]["t_train"]
    own = json.loads((reports / "cards" / f"{native['train_hash']}.json").read_text())
    assert own["provenance"]["trained_by"] == "trashfire" and own["provenance"]["t_train_source"] == "measured"
    html = (reports / "report.html").read_text()
    assert f"log:{log}" in html and len(list((reports / "figures").glob("*.png"))) >= 4


def test_a_pt_checkpoint_with_t_train_from_the_config(trained, tmp_path):
    shutil.copytree(trained / "data", tmp_path / "data")
    cfg = config(tmp_path, "model=[external]", *external(trained / "checkpoints" / "mlp2.pt", T_TRAIN))
    with own_logging():
        (record,) = train.run(cfg)
    native = TrainRecord.read(next((trained / "models").glob("*.json")))
    assert record["acc_ben"] == native.acc_ben
    assert (record["t_train_process"], record["t_train_wall"], record["t_train_source"], record["n_train"]) == (0.002, 0.001, "config", None)
    split = training.cached_split(cfg.paths.processed, cfg, "digits", 0)
    (cell,) = training_cells(cfg)
    assert cell.is_external and training.is_cached(cfg.paths.models, cell)
    assert training.load_weights(cfg.paths.models, cell, split).net.state_dict().keys() == torch.load(trained / "checkpoints" / "mlp2.pt").keys()


# mlp2 on 8x8 digits: Flatten, Linear(64, 512), ReLU, Linear(512, 10); 2 FLOPs per multiply-accumulate
MLP2_FORWARD = 2 * (64 * 512 + 512 * 10)
# a training step: the forward, both layers' weight gradients, the second layer's input gradient
MLP2_STEP = MLP2_FORWARD + 2 * (64 * 512) + 2 * (2 * 512 * 10)


def test_external_training_flops_from_the_config_the_log_an_estimate_or_unknown(trained, tmp_path, caplog):
    shutil.copytree(trained / "data", tmp_path / "data")
    checkpoint = trained / "checkpoints" / "mlp2.pt"
    log = tmp_path / "log.json"
    log.write_text(json.dumps({"n_train": 400, "process_seconds": 0.8, "wall_seconds": 0.4, "flops": 6.4e9}))  # the whole run's
    cases = {
        "config": external(checkpoint, "model.external.t_train={process:0.002,wall:0.001,flops:1.5e6}"),  # per sample
        "log": external(checkpoint, f"model.external.train_log={log}"),
        "estimated": external(checkpoint, T_TRAIN, "model.external.epochs=3"),
        "unknown": external(checkpoint, T_TRAIN),
    }
    records, cells = {}, {}
    for case, extra in cases.items():
        cfg = config(tmp_path, "model=[external]", *extra)
        (cells[case],) = training_cells(cfg)
        with own_logging(), caplog.at_level(logging.INFO, logger="trashfire.models.training"):
            caplog.clear()
            (records[case],) = train.run(cfg)
        records[case]["log"] = caplog.text
    expected = {
        "config": (1.5e6, "config"),
        "log": (6.4e9 / 400, f"log:{log}"),
        "estimated": (3.0 * MLP2_STEP, "config; flops estimated"),  # epochs x one training step per sample
        "unknown": (None, "config"),
    }
    assert {case: (r["t_train_flops"], r["t_train_source"]) for case, r in records.items()} == expected
    assert {r["t_predict_flops"] for r in records.values()} == {MLP2_FORWARD}
    assert "training FLOPs are unknown" in records["unknown"]["log"] and "unknown" not in records["config"]["log"]
    assert records["log"]["t_train_process"] == 0.8 / 400
    # the supplied costs are the cell's identity; a config without FLOPs or epochs hashes as before them
    assert len({cell.hash for cell in cells.values()}) == 4
    assert set(cells["unknown"].spec["t_train"]) == {"process", "wall", "source", "n_train"}


def test_new_weights_at_the_same_path_make_a_new_cell(trained, tmp_path):
    checkpoint = tmp_path / "net.pt"
    shutil.copy(trained / "checkpoints" / "mlp2.pt", checkpoint)
    first = training_cells(config(tmp_path, "model=[external]", *external(checkpoint, T_TRAIN)))[0].hash
    again = training_cells(config(tmp_path, "model=[external]", *external(checkpoint, T_TRAIN, "train.epochs=[3]", "train.lr=[0.5]")))[0].hash
    assert again == first  # the training grid does not apply to an imported model
    state = torch.load(checkpoint)
    state["net.1.bias"] += 1.0
    torch.save(state, checkpoint)
    changed = training_cells(config(tmp_path, "model=[external]", *external(checkpoint, T_TRAIN)))[0].hash
    assert changed != first
    cost = training_cells(config(tmp_path, "model=[external]", *external(checkpoint, "model.external.t_train={process:0.003,wall:0.001}")))[0].hash
    assert cost not in (first, changed)  # the supplied cost is recorded, so it is part of the cell


def test_params_yaml_records_the_checkpoint_hash_so_dvc_sees_new_weights(trained, tmp_path, caplog):
    checkpoint = tmp_path / "net.pt"
    shutil.copy(trained / "checkpoints" / "mlp2.pt", checkpoint)
    composed = OmegaConf.create(composed_yaml(overrides(tmp_path, "model=[external]", ONE_MODEL_SPLIT, *external(checkpoint, T_TRAIN))))
    assert composed.model.external.checkpoint_sha256 == training.file_sha256(checkpoint)
    state = torch.load(checkpoint)
    state["net.1.bias"] += 1.0
    torch.save(state, checkpoint)
    with caplog.at_level(logging.WARNING):
        cell = training_cells(normalise(validate(composed)))[0]
    assert cell.spec["model"]["checkpoint_sha256"] == training.file_sha256(checkpoint)  # imported as what it is now
    assert "changed since `make params`" in caplog.text
    recomposed = OmegaConf.create(composed_yaml(overrides(tmp_path, "model=[external]", ONE_MODEL_SPLIT, *external(checkpoint, T_TRAIN))))
    assert recomposed.model.external.checkpoint_sha256 != composed.model.external.checkpoint_sha256  # a params change DVC reruns train on


# --- bad input: one line, a non-zero exit, nothing imported or trained ---------------------------


@pytest.fixture
def project(trained, tmp_path) -> Path:
    """The prepared digits and the checkpoints, and broken checkpoints beside them."""
    shutil.copytree(trained / "data", tmp_path / "data")
    shutil.copytree(trained / "checkpoints", tmp_path / "checkpoints")
    (tmp_path / "checkpoints" / "corrupt.pt").write_bytes(b"not a torch file")
    (tmp_path / "checkpoints" / "corrupt.safetensors").write_bytes((trained / "checkpoints" / "mlp2.safetensors").read_bytes()[:100])
    torch.save(mlp(7, [1, 8, 8], [512]).state_dict(), tmp_path / "checkpoints" / "seven_classes.pt")
    torch.save(mlp(10, [1, 28, 28], [512]).state_dict(), tmp_path / "checkpoints" / "mnist_shaped.pt")
    state = torch.load(trained / "checkpoints" / "mlp2.pt")
    state["net.extra.weight"] = state.pop("net.3.weight")
    torch.save(state, tmp_path / "checkpoints" / "renamed.pt")
    (tmp_path / "checkpoints" / "flops_log.json").write_text(json.dumps({"n_train": 10, "process_seconds": 1.0, "wall_seconds": 1.0, "flops": "many"}))
    return tmp_path


def write_params(root: Path, *extra: str) -> Path:
    (root / "params.yaml").write_text(composed_yaml(overrides(root, "model=[external]", ONE_MODEL_SPLIT, *extra)))
    return root / "params.yaml"


def refused(root: Path, capsys, *extra: str) -> str:
    """The train stage's one line over a params.yaml of `extra`; models/ must stay empty."""
    params = write_params(root, *extra)
    with own_logging():
        logging.getLogger("trashfire").handlers[:] = [logging.NullHandler()]
        code, line = refusal("train", ["--params", str(params)], capsys)
    assert code == 2 and line.startswith("trashfire.stages.train: config error: model.external")
    assert not list((root / "models").glob("*.json")) if (root / "models").is_dir() else True
    return line


CHECKPOINT_CASES = [
    pytest.param("corrupt.pt", [], ("model.external.checkpoint", "corrupt.pt", "not a readable torch.save state_dict", "weights_only=True"), id="corrupt-pt"),
    pytest.param("corrupt.safetensors", [], ("model.external.checkpoint", "not a readable safetensors state_dict"), id="corrupt-safetensors"),
    pytest.param(
        "renamed.pt",
        [],
        ("does not fit trashfire.models.mlp", "missing keys net.3.weight", "unexpected keys net.extra.weight"),
        id="missing-and-unexpected-keys",
    ),
    pytest.param(
        "seven_classes.pt",
        ["model.external.kwargs={n_classes:7,input_shape:[1,8,8],hidden:[512]}"],
        ("model.external:", "output shape (1, 7)", "digits has 10 classes", "(N, 1, 8, 8)"),
        id="wrong-number-of-classes",
    ),
    pytest.param(
        "mnist_shaped.pt",
        ["model.external.kwargs={n_classes:10,input_shape:[1,28,28],hidden:[512]}"],
        ("model.external:", "forward pass on one sample of shape (1, 1, 8, 8) fails"),
        id="wrong-input-shape",
    ),
    pytest.param(
        "mlp2.pt",
        ["model.external.kwargs={n_classes:10,input_shape:[1,8,8],hidden:[256]}"],
        ("model.external.checkpoint", "net.1.weight is [512, 64] in the checkpoint, [256, 64] in the module"),
        id="wrong-layer-sizes",
    ),
]


@pytest.mark.parametrize("checkpoint, extra, needles", CHECKPOINT_CASES)
def test_a_checkpoint_that_does_not_fit_stops_the_train_stage(project, capsys, checkpoint, extra, needles):
    line = refused(project, capsys, *external(project / "checkpoints" / checkpoint, T_TRAIN), *extra)
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"


CONFIG_CASES = [
    pytest.param(
        external("checkpoints/missing.pt", T_TRAIN), ("model.external.checkpoint", "checkpoints/missing.pt not found", ".safetensors"), id="missing-checkpoint"
    ),
    pytest.param(external("checkpoints/mlp2.onnx", T_TRAIN), ("model.external.checkpoint", "suffix picks the format"), id="unknown-suffix"),
    pytest.param(external("checkpoints/mlp2.pt"), ("model.external.t_train", "missing", "train_log"), id="missing-t-train"),
    pytest.param(
        external("checkpoints/mlp2.pt", T_TRAIN, "model.external.train_log=checkpoints/train_log.json"),
        ("model.external.t_train", "given twice"),
        id="t-train-twice",
    ),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.t_train={process:0.1}"), ("model.external.t_train", "{process: <s>, wall: <s>}"), id="t-train-one-clock"
    ),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.t_train={process:0.1,wall:0.1,gflops:2}"),
        ("model.external.t_train", "optionally flops: <FLOPs per training sample>"),
        id="t-train-unknown-key",
    ),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.t_train={process:0.1,wall:0.1,flops:-1}"),
        ("model.external.t_train.flops", "got -1", "finite number of FLOPs > 0"),
        id="t-train-flops-negative",
    ),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.train_log=checkpoints/flops_log.json"),
        ("model.external.train_log", "flops", "got 'many'", "finite number of FLOPs > 0"),
        id="log-flops-not-a-number",
    ),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.t_train={process:0.1,wall:0.1,flops:1e6}", "model.external.epochs=3"),
        ("model.external.epochs", "given with the training FLOPs of t_train.flops", "one of them"),
        id="epochs-and-flops",
    ),
    pytest.param(external("checkpoints/mlp2.pt", T_TRAIN, "model.external.epochs=0"), ("model.external.epochs", "got 0", "integer >= 1"), id="epochs-zero"),
    pytest.param(
        external("checkpoints/mlp2.pt", "model.external.train_log=checkpoints/none.json"), ("model.external.train_log", "none.json not found"), id="missing-log"
    ),
    pytest.param(external("checkpoints/mlp2.pt", "model.external.train_log=checkpoints/mlp2.pt"), ("model.external.train_log", "not JSON"), id="log-not-json"),
    pytest.param(
        [MLP2, "model.external.checkpoint=checkpoints/mlp2.pt", T_TRAIN],
        ("model.external._target_", "cannot build trashfire.models.mlp()", "n_classes"),
        id="kwargs-missing",
    ),
    pytest.param(["model.external.checkpoint=checkpoints/mlp2.pt", T_TRAIN], ("model.external._target_", "torch.nn.Module class"), id="no-target"),
]


@pytest.mark.parametrize("extra, needles", CONFIG_CASES)
def test_bad_external_options_stop_params_composition(project, capsys, monkeypatch, extra, needles):
    monkeypatch.chdir(project)  # relative checkpoint paths are from the project root
    out = project / "params.yaml"
    with own_logging():
        code, line = refusal("params", [*overrides(project, "model=[external]", *extra), "--out", str(out)], capsys)
    assert code == 2 and line.startswith("trashfire.params: config error: ")
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    assert not out.exists()


def test_a_checkpoint_deleted_after_params_stops_the_stage(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    shutil.copy(project / "checkpoints" / "mlp2.pt", project / "gone.pt")
    write_params(project, *external("gone.pt", T_TRAIN))
    (project / "gone.pt").unlink()
    with own_logging():
        code, line = refusal("train", ["--params", str(project / "params.yaml")], capsys)
    assert code == 2 and "model.external.checkpoint: gone.pt not found" in line
    assert load_params(project / "params.yaml").model.external.checkpoint == "gone.pt"


# ---------------------------------------------------------------------------------------------
# what the publisher reports: RobustBench's model info, or `reported` by hand


def robustbench_info(folder: Path, name: str = "Engstrom2019Robustness", **fields) -> Path:
    """A model info file as RobustBench's repository writes it: percentages and eps as text."""
    info = {"clean_acc": "87.03", "autoattack_acc": "49.25", "eps": "8/255", "architecture": "ResNet-50"} | fields
    path = folder / "cifar10" / "Linf" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    return path


def robustbench_option(**keys):
    return OmegaConf.create({"_target_": "x.Net", "kwargs": {"name": "Engstrom2019Robustness", "dataset": "cifar10", "threat_model": "Linf"}, **keys})


def test_robustbench_model_info_gives_its_accuracies_as_fractions_at_its_eps_in_pixels(tmp_path):
    path = robustbench_info(tmp_path)
    figures = publisher_figures("model.rb", robustbench_option(model_info=str(tmp_path)))
    assert figures == {
        "clean_acc": pytest.approx(0.8703),
        "robust_acc": pytest.approx(0.4925),
        "attack": "autoattack",
        "norm": "inf",
        "eps": pytest.approx(8 / 255),
        "source": f"RobustBench model info {path}",
    }


def test_figures_given_by_hand_are_checked_and_neither_is_none(tmp_path):
    by_hand = publisher_figures(
        "model.rb", robustbench_option(reported={"clean_acc": 0.9, "robust_acc": 0.5, "attack": "apgd-ce", "norm": "inf", "eps": "4/255"})
    )
    assert by_hand["eps"] == pytest.approx(4 / 255) and by_hand["source"] == "config"
    assert publisher_figures("model.rb", robustbench_option()) is None


@pytest.mark.parametrize(
    "keys, says",
    [
        ({"reported": {"clean_acc": 87.0}}, "model.rb.reported.clean_acc: got 87.0; must be an accuracy in [0, 1]"),
        ({"reported": {"robust_acc": 0.5}}, "clean_acc required"),
        ({"reported": {"clean_acc": 0.9, "eps": "8/0"}}, "model.rb.reported.eps: got '8/0'"),
        ({"reported": {"clean_acc": 0.9}, "model_info": "info"}, "given twice"),
        ({"model_info": "nowhere"}, "nowhere/cifar10/Linf/Engstrom2019Robustness.json not found"),
    ],
    ids=["percent-as-fraction", "no-clean", "eps-zero-division", "both", "missing-file"],
)
def test_bad_publisher_figures_are_one_line_naming_what_is_allowed(keys, says):
    with pytest.raises(ConfigError) as err:
        publisher_figures("model.rb", robustbench_option(**keys))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_model_info_file_without_its_accuracies_is_refused_naming_the_file(tmp_path):
    path = robustbench_info(tmp_path, clean_acc="n/a")
    with pytest.raises(ConfigError, match=f"{path} is not RobustBench model info"):
        publisher_figures("model.rb", robustbench_option(model_info=str(tmp_path)))
