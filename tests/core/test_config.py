"""The composed configs validate, bad values name their key, and params.yaml is fresh."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf, open_dict

from tests.conftest import ROOT
from trashfire.core.cli import check_pipeline
from trashfire.core.config import compose, normalise, validate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import attack_cells, model_cells, training_cells


def test_default_config_composes_and_validates(conf_dir):
    cfg = validate(compose([], conf=conf_dir))
    assert set(cfg.model) == {"cifar_resnet8", "cifar_resnet14", "cifar_resnet20"}
    assert set(cfg.defence) == {"none", "gauss_in", "gauss_out", "conf", "fsq", "adv_train"}
    assert set(cfg.attack) == {"fgm", "pgd", "deepfool", "pixel", "threshold", "hsj", "fmn"}
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
        ("compute.device=tpu", "compute.device"),
        ("defence.fsq.values=[65]", "defence.fsq.values"),
        ("defence.conf.values=[1.0]", "defence.conf.values"),
        ("defence.gauss_in.values=[-1]", "defence.gauss_in.values"),
        ("split.test_size=1.5", "split.test_size"),
        ("split.seeds=[]", "split.seeds"),
        ("clock=sundial", "clock"),
        ("survival.chosen=cox", "survival.chosen"),
        ("survival.fitters=[gompertz]", "survival.fitters"),
        ("survival.select_by=r2", "survival.select_by"),
        ("timing.survival_data.covariates=[height]", "timing.survival_data.covariates"),
        ("report.formats=[pdf]", "report.formats"),
        ("report.formats=[png,jpeg]", "report.formats"),
        ("report.formats=[png,png]", "report.formats"),
        ("report.formats=[]", "report.formats"),
        ("timing.survival_data.dummies=[model]", "timing.survival_data.dummies"),
        ("timing.survival_data.misclassified_before_attack=zero", "timing.survival_data.misclassified_before_attack"),
        ("timing.survival_data.nonpositive_durations=clip", "timing.survival_data.nonpositive_durations"),
        ("survival.models.weibull.fitter.penalizer=-1", "survival.models.weibull.fitter.penalizer"),
        ("survival.models.weibull.optimiser=newton", "survival.models.weibull.optimiser"),
        ("survival.models.cox.t0_quantile=1.5", "survival.models.cox.t0_quantile"),
        ("survival.retries=[{tries:3}]", "survival.retries[0]"),
        ("survival.test_size=0", "survival.test_size"),
        ("survival.km_check_tolerance=0", "survival.km_check_tolerance"),
        ("metrics.auc.eps1=0.0", "metrics.auc.eps1"),
        ("metrics.auc.units=percent", "metrics.auc.units"),
        ("metrics.evp.tau_grid=1", "metrics.evp.tau_grid"),
        ("metrics.evp.table_classes=[1]", "metrics.evp.table_classes"),
        ("viability.tau=1.5", "viability.tau"),
        ("metrics.findings.smallest.004_r_rises_with_epochs=0", "metrics.findings.smallest.004_r_rises_with_epochs"),
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
    with pytest.raises(
        ConfigError,
        match="unknown option 'cw'; available: apgd_ce, apgd_dlr, autoattack, autoattack_rand, ddn, deepfool, fgm, fmn, hsj, pgd, pixel, square, threshold",
    ):
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
    reduced = validate(compose(["experiment=auc_paper", "data=[mnist]", "train.pretrained_on.mnist=[null]", "model=[lenet5]"], conf=conf_dir))
    assert list(reduced.model) == ["lenet5"] and list(reduced.train.per_model.lenet5.epochs)[-1] == 300


def test_narrowing_a_preset_drops_the_members_it_only_gave_values(conf_dir):
    cfg = validate(compose(["experiment=trashfire_paper", "attack=[fgm]", "defence=[none,fsq]"], conf=conf_dir))
    assert list(cfg.attack) == ["fgm"] and list(cfg.defence) == ["none", "fsq"]
    assert list(cfg.defence.fsq["values"]) == [2, 4, 8, 16, 32, 64]  # the preset's values still apply


def test_defence_cell_keeps_one_defence_at_one_value(conf_dir):
    fsq = normalise(validate(compose(["defence_cell=fsq@4"], conf=conf_dir)))
    assert list(fsq.defence) == ["fsq"] and list(fsq.defence.fsq["values"]) == [4]
    gauss = normalise(validate(compose(["defence_cell=gauss_in@0.001"], conf=conf_dir)))
    assert list(gauss.defence) == ["gauss_in"] and list(gauss.defence.gauss_in["values"]) == [0.001]
    for bad in ("fsq", "nosuch@1", "fsq@"):
        with pytest.raises(
            ConfigError, match=r"defence_cell: got .*; allowed: <defence>@<value> with a selected defence \(none, gauss_in, gauss_out, conf, fsq, adv_train\)"
        ):
            validate(compose([f"defence_cell={bad}"], conf=conf_dir))
    with pytest.raises(ConfigError, match=r"defence_cell: got 0; must be an integer in \[1, 64\] \(the value of fsq: defence.fsq.rules.values\)"):
        validate(compose(["defence_cell=fsq@0"], conf=conf_dir))


def test_validate_leaves_its_input_unchanged_and_normalise_returns_a_new_config(conf_dir):
    """A config that normalisation changes twice over: pgd has only a preset's values (as
    `dvc exp run -S experiment=trashfire_paper attack=[fgm]` composes it), and defence_cell
    narrows the defences to fsq at 4 bits."""
    composed = compose(["experiment=trashfire_paper", "attack=[fgm]", "defence=[none,fsq]", "defence_cell=fsq@4"], conf=conf_dir)
    cfg = OmegaConf.merge(composed, {})  # a copy
    with open_dict(cfg):
        cfg.attack.pgd = {"values": [0.1, 0.3], "norms": ["inf"]}
    before = OmegaConf.to_container(cfg)
    assert validate(cfg) is cfg
    assert OmegaConf.to_container(cfg) == before
    normalised = normalise(cfg)
    assert OmegaConf.to_container(cfg) == before  # normalise works on a copy
    assert list(normalised.attack) == ["fgm"] and list(normalised.defence) == ["fsq"] and list(normalised.defence.fsq["values"]) == [4]
    assert OmegaConf.to_container(normalise(normalised)) == OmegaConf.to_container(normalised)  # idempotent


def cell_hashes(cfg):
    return [sorted(cell.hash for cell in cells(cfg)) for cells in (training_cells, model_cells, attack_cells)]


def test_rules_enter_no_cell_hash(conf_dir):
    """Stating or changing an option's rules keeps every cached model and attack record."""
    cfg = normalise(validate(compose(["model=[cifar_resnet8,resnet18,mlp2]"], conf=conf_dir)))
    bare = normalise(cfg)
    for group in ("data", "model", "defence", "attack"):
        for spec in bare[group].values():
            with open_dict(spec):
                del spec["rules"]
    assert cell_hashes(cfg) == cell_hashes(bare)
    changed = normalise(cfg)  # a copy
    OmegaConf.set_struct(changed, False)
    changed.attack.fgm.rules["values"]["low"] = 0.01
    changed.model.mlp2.rules.hidden["high"] = 4096
    assert cell_hashes(cfg) == cell_hashes(validate(changed))
    assert all("rules" not in cell.spec["model"] for cell in training_cells(cfg))  # the builder takes no rules


@pytest.mark.parametrize(
    "override, key, needle",
    [
        ("~attack.fgm.rules", "attack.fgm.rules", "missing; every attack option states what it allows"),
        ("~attack.pgd.rules.values", "attack.pgd.rules.values", "missing; every attack option declares it"),
        ("attack.fgm.rules.values.kind=integer", "attack.fgm.rules.values.kind", "got 'integer'; allowed: count, real, path, flag, text"),
        ("attack.hsj.rules.values.kind=text", "attack.hsj.rules.values.kind", "got 'text'; allowed: count, real"),
        ("+attack.fgm.rules.values.lowest=0", "attack.fgm.rules.values", "unknown fields ['lowest']"),
        ("attack.pixel.rules.engine=[torch,gpu]", "attack.pixel.rules.engine", "got 'gpu'; allowed: torch, per_image, sequence, art"),
        ("~defence.fsq.rules.values", "defence.fsq.rules.values", "missing; a predict-time defence declares its value's kind"),
        ("defence.fsq.stage=train", "defence.fsq.stage", "got 'train'; allowed: predict"),
        ("~model.resnet18.rules", "model.resnet18.rules", "missing"),
        ("model.resnet18.arch=resnet34", "model.resnet18.arch", "got 'resnet34'; allowed: resnet18"),
        ("model.resnet18.depth=34", "model.resnet18.depth", "got 34; allowed: 18 (torchvision's resnet18 has 18 layers)"),
        ("data.digits.n_classes=1", "data.digits.n_classes", "got 1; must be an integer >= 2"),
        ("attack.pixel.units=pixel", "attack.pixel.units", "pixel units convert a real strength (eps), and pixel's values are counts"),
        ("attack.hsj.values=[50.0]", "attack.hsj.values", "got 50.0; must be an integer >= 1"),
        (
            "~attack.pgd.rules.torch.algorithm",
            "attack.pgd.rules.torch.algorithm",
            "missing; allowed: apgd, autoattack, ddn, deepfool, fab, fgm, fmn, pgd, square",
        ),
        (
            "attack.fgm.rules.torch.algorithm=bim",
            "attack.fgm.rules.torch.algorithm",
            "got 'bim'; allowed: apgd, autoattack, ddn, deepfool, fab, fgm, fmn, pgd, square",
        ),
        ("+attack.hsj.black_box=yes", "attack.hsj.black_box", "got 'yes'; allowed: true, false"),
        ("attack.deepfool.minimal=1", "attack.deepfool.minimal", "got 1; allowed: true, false"),
        ("data.digits.unhashed=[subsample]", "data.digits.unhashed", "a list of this option's keys that never change the images (root)"),
        ("+metrics.validity.black_box=[square]", "metrics.validity.black_box", "removed: an attack's option says it"),
        ("+timing.eps_survival.minimal=[deepfool]", "timing.eps_survival.minimal", "removed: an attack's option says it"),
    ],
)
def test_rules_come_from_the_option(conf_dir, override, key, needle):
    with pytest.raises(ConfigError) as err:
        validate(compose(["model=[resnet18]", override], conf=conf_dir))
    assert err.value.key == key and needle in err.value.problem, str(err.value)
    assert "\n" not in str(err.value)


def test_a_count_strength_is_never_cast(conf_dir):
    """hsj's max_eval is a count by its rules: 50.0 is refused, not silently made 50; a real
    strength not named eps is a real, whatever its name."""
    from trashfire.attacks.spec import art_strength

    cfg = normalise(
        validate(compose(["attack=[hsj,fgm]", "attack.fgm.param=epsilon", "attack.fgm.values=[0.5]", "attack.fgm.units=standardised"], conf=conf_dir))
    )
    hsj, fgm = ({s["name"]: s for s in (c.spec for c in attack_cells(cfg))}[n] for n in ("hsj", "fgm"))
    assert art_strength(hsj) == 50 and isinstance(art_strength(hsj), int)
    assert art_strength(fgm) == 0.5 and isinstance(art_strength(fgm), float)
    with pytest.raises(ConfigError, match="attack.hsj.values: got 50.0; must be an integer"):
        art_strength({**hsj, "value": 50.0})


def test_a_grid_of_one_survival_split_group_is_warned_of_before_any_stage_runs(conf_dir, caplog):
    """The survival stage's split by trained model needs two of them: `make params` and every
    stage's command warn at once, not after the attack stage, and name the ways out; the run
    goes on (the survival stage then fits nothing and says why, the other metrics stand). A
    sweep trial's one cell (trashfire.experiment) and the library are not held to it."""
    one_model = ["model=[fcnet]", "defence=[none,fsq]", "split.seeds=[0]", "train.epochs=[1]"]
    warning = check_pipeline(validate(compose(one_model, conf=conf_dir)))
    assert warning.startswith("survival.split_by: the grid gives 1 train_hash group") and "survival.fitters=[]" in warning
    assert warning in caplog.text
    assert check_pipeline(validate(compose([*one_model, "survival.fitters=[]"], conf=conf_dir))) is None  # left out on purpose
    assert check_pipeline(validate(compose([*one_model, "survival.split_by=model_hash"], conf=conf_dir))) is None  # none and fsq: two model cells
    assert check_pipeline(validate(compose([*one_model, "defence=[none,gauss_in]"], conf=conf_dir))) is None  # gauss_in trains a second model
