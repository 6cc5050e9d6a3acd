"""The composed configs validate, bad values name their key, and params.yaml is fresh."""

import subprocess
import sys

import pytest

from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError
from tests.conftest import ROOT


def test_default_config_composes_and_validates(conf_dir):
    cfg = validate(compose([], conf=conf_dir))
    assert set(cfg.model) == {"cifar_resnet8", "cifar_resnet14", "cifar_resnet20"}
    assert set(cfg.defence) == {"none", "gauss_in", "gauss_out", "conf", "fsq", "adv_train"}
    assert set(cfg.attack) == {"fgm", "pgd", "deepfool", "pixel", "threshold", "hsj"}
    assert set(cfg.data) == {"digits"}


def test_one_option_and_a_list_compose_to_the_same_shape(conf_dir):
    single = compose(["model=resnet34"], conf=conf_dir)
    listed = compose(["model=[resnet34]"], conf=conf_dir)
    assert single.model == listed.model and list(single.model) == ["resnet34"]


@pytest.mark.parametrize(
    "override, key",
    [
        ("attack.pgd.values=[-0.1]", "attack.pgd.values"),
        ("attack.fgm.values=[.nan]", "attack.fgm.values"),
        ("attack.fgm.values=[]", "attack.fgm.values"),
        ("attack.pgd.norms=[0]", "attack.pgd.norms"),
        ("train.epochs=[0]", "train.epochs"),
        ("train.epochs=[2.5]", "train.epochs"),
        ("train.lr=[0]", "train.lr"),
        ("train.batch_size=0", "train.batch_size"),
        ("train.device=tpu", "train.device"),
        ("defence.fsq.values=[65]", "defence.fsq.values"),
        ("defence.conf.values=[1.0]", "defence.conf.values"),
        ("defence.gauss_in.values=[-1]", "defence.gauss_in.values"),
        ("split.test_size=1.5", "split.test_size"),
        ("split.seeds=[]", "split.seeds"),
        ("timing.clock=sundial", "timing.clock"),
        ("survival.chosen=cox", "survival.chosen"),
        ("survival.fitters=[gompertz]", "survival.fitters"),
        ("survival.fitters=[]", "survival.fitters"),
        ("survival.select_by=r2", "survival.select_by"),
        ("survival.data.covariates=[height]", "survival.data.covariates"),
        ("survival.data.dummies=[model]", "survival.data.dummies"),
        ("survival.data.misclassified_before_attack=zero", "survival.data.misclassified_before_attack"),
        ("survival.data.nonpositive_durations=clip", "survival.data.nonpositive_durations"),
        ("survival.models.weibull.fitter.penalizer=-1", "survival.models.weibull.fitter.penalizer"),
        ("survival.models.weibull.optimiser=newton", "survival.models.weibull.optimiser"),
        ("survival.models.cox.t0_quantile=1.5", "survival.models.cox.t0_quantile"),
        ("survival.retries=[{tries:3}]", "survival.retries[0]"),
        ("survival.test_size=0", "survival.test_size"),
        ("metrics.auc.eps1=0.0", "metrics.auc.eps1"),
        ("metrics.auc.units=percent", "metrics.auc.units"),
        ("metrics.evp.tau_grid=1", "metrics.evp.tau_grid"),
        ("metrics.evp.table_classes=[1]", "metrics.evp.table_classes"),
        ("metrics.evp.tau=1.5", "metrics.evp.tau"),
        ("metrics.trash.bootstrap=0", "metrics.trash.bootstrap"),
        ("model.resnet18.depth=34", "model.resnet18.depth"),
        ("train.lr_schedule=cosine", "train.lr_schedule"),
        ("attack.fgm.units=percent", "attack.fgm.units"),
        ("+train.pretrained_on.digits=[digits]", "train.pretrained_on.digits"),
        ("+train.pretrained_on.digits=[]", "train.pretrained_on.digits"),
        ("+train.per_model.resnet18={lr:[-1]}", "train.per_model.resnet18.lr"),
        ("+train.per_model.resnet18={momentum:0.5}", "train.per_model.resnet18"),
    ],
)
def test_bad_values_name_their_key(conf_dir, override, key):
    with pytest.raises(ConfigError) as err:
        validate(compose(["model=[resnet18]", override], conf=conf_dir))
    assert err.value.key == key
    assert "\n" not in str(err.value)


def test_an_auc_interval_past_a_grid_in_the_same_units_is_rejected(conf_dir):
    with pytest.raises(ConfigError, match=r"exceeds the largest eps 0.3 of attack.fgm \(pixel units\)"):
        validate(compose(["metrics.auc.units=pixel", "metrics.auc.eps1=0.5"], conf=conf_dir))
    validate(compose(["metrics.auc.units=standardised", "metrics.auc.eps1=5.0"], conf=conf_dir))  # checked per data set later


def test_unknown_group_option_lists_the_available_ones(conf_dir):
    with pytest.raises(ConfigError, match="unknown option 'cw'; available: deepfool, fgm, hsj, pgd, pixel, threshold"):
        compose(["attack=[fgm,cw]"], conf=conf_dir)


def test_params_yaml_is_fresh():
    """params.yaml must be `make params` of conf/: a stale snapshot misleads DVC."""
    result = subprocess.run([sys.executable, "-m", "trashfire.params", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_dvc_hydra_composition_equals_make_params(tmp_path, conf_dir):
    """`dvc exp run -S` composes params.yaml itself; it must write what `make params` writes."""
    from dvc.utils.hydra import compose_and_dump

    from trashfire.params import composed_yaml

    overrides = ["model=resnet34", "attack.pgd.values=[0.1,0.3]"]
    out = tmp_path / "params.yaml"
    compose_and_dump(out, str(conf_dir), None, "config", str(tmp_path / "no_plugins"), overrides)
    assert out.read_text() == composed_yaml(overrides)


def test_experiment_presets_override_the_root_config(conf_dir):
    smoke = validate(compose(["experiment=smoke"], conf=conf_dir))
    assert smoke.split.n_attack == 20 and smoke.data.digits.subsample == 300
    assert len(smoke.model) == 10 and "adv_train" in smoke.defence
    paper = validate(compose(["experiment=trashfire_paper"], conf=conf_dir))
    assert paper.split.seeds == list(range(10)) and set(paper.data) == {"mnist", "cifar10", "cifar100"}
    assert list(paper.defence.fsq["values"]) == [2, 4, 8, 16, 32, 64]
    reduced = validate(compose(["experiment=auc_paper", "data=[mnist]", "train.pretrained_on.mnist=[null]", "model=[lenet]"], conf=conf_dir))
    assert list(reduced.model) == ["lenet"] and list(reduced.train.per_model.lenet.epochs)[-1] == 300


def test_narrowing_a_preset_drops_the_members_it_only_gave_values(conf_dir):
    cfg = validate(compose(["experiment=trashfire_paper", "attack=[fgm]", "defence=[none,fsq]"], conf=conf_dir))
    assert list(cfg.attack) == ["fgm"] and list(cfg.defence) == ["none", "fsq"]
    assert list(cfg.defence.fsq["values"]) == [2, 4, 8, 16, 32, 64]  # the preset's values still apply


def test_defence_cell_keeps_one_defence_at_one_value(conf_dir):
    fsq = validate(compose(["defence_cell=fsq@4"], conf=conf_dir))
    assert list(fsq.defence) == ["fsq"] and list(fsq.defence.fsq["values"]) == [4]
    gauss = validate(compose(["defence_cell=gauss_in@0.001"], conf=conf_dir))
    assert list(gauss.defence) == ["gauss_in"] and list(gauss.defence.gauss_in["values"]) == [0.001]
    for bad in ("fsq", "nosuch@1", "fsq@"):
        with pytest.raises(ConfigError, match=r"defence_cell: got .*; allowed: <defence>@<value> with a selected defence \(none, gauss_in, gauss_out, conf, fsq, adv_train\)"):
            validate(compose([f"defence_cell={bad}"], conf=conf_dir))
    with pytest.raises(ConfigError, match="defence.fsq.values: got 0"):
        validate(compose(["defence_cell=fsq@0"], conf=conf_dir))
