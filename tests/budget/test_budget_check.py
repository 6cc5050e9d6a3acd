"""The budget check (issue 48): the larger budget a calibration rerun runs, which model cells it
reruns, the logistic model of "breaks later" and its predictive interval, and the `budget`
stage end to end on the tiny grid."""

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from sklearn.linear_model import LogisticRegression

from tests.conftest import DROP, config_refusal, tiny_config
from trashfire.attacks.spec import pgd_step_size
from trashfire.budget import checks as budget_checks
from trashfire.budget import reruns
from trashfire.budget.model import Design, FamilyModel, estimate, fit_family, logistic
from trashfire.core.config import compose, validate
from trashfire.core.errors import ConfigError
from trashfire.core.grid import model_cells
from trashfire.stages import attack, budget, prepare, train


def test_a_larger_budget_multiplies_max_iter_and_keeps_pgds_step():
    pgd = {"max_iter": 10, "step_scale": 2.5, "value": 0.1}
    larger = reruns.multiplied(pgd, 10)
    assert larger["max_iter"] == 100 and larger["step_scale"] == 25.0
    assert pgd_step_size(larger, 0.1) == pytest.approx(pgd_step_size(pgd, 0.1))  # the run's first steps, continued
    assert reruns.multiplied({"max_iter": 2}, 10) == {"max_iter": 20}  # a search: ten times the iterations
    assert reruns.multiplied({"value": 0.1}, 10) is None  # FGM: one step, nothing to multiply


def test_calibration_takes_a_seeded_share_of_the_model_cells_within_each_defence(tmp_path):
    cfg = tiny_config(tmp_path, "defence=[none,fsq]", "defence.fsq.values=[2,4,5,6]", "split.seeds=[0,1]")
    by_defence = {}
    for model in model_cells(cfg):
        by_defence.setdefault(model.defence["name"], set()).add(model.hash)
    assert {d: len(h) for d, h in by_defence.items()} == {"none": 2, "fsq": 8}
    chosen = reruns.calibration_models(cfg, 0.5, seed=0)
    assert len(chosen & by_defence["none"]) == 1 and len(chosen & by_defence["fsq"]) == 4
    assert chosen == reruns.calibration_models(cfg, 0.5, seed=0) and chosen != reruns.calibration_models(cfg, 0.5, seed=3)
    assert len(reruns.calibration_models(cfg, 0.01, seed=0)) == 2  # at least one per defence


def test_a_one_step_or_absent_attack_cannot_be_calibrated(tmp_path):
    cfg = tiny_config(tmp_path)
    with pytest.raises(ConfigError, match="budget.calibrate.fgm.*no budget to multiply"):
        reruns.larger_budget_config(cfg, 10, ["fgm"])
    with pytest.raises(ConfigError, match="no attack 'hsj' in the grid"):
        reruns.larger_budget_config(cfg, 10, ["hsj"])
    with pytest.raises(ConfigError, match=r"budget.calibrate.fgm: fgm has no max_iter"):
        tiny_config(tmp_path, "budget.calibrate={fgm:0.5}")
    for bad in ("0", "1.5"):
        with pytest.raises(ConfigError, match=rf"budget.calibrate.pgd: got {bad}; must be a finite number in \(0, 1\]"):
            tiny_config(tmp_path, f"budget.calibrate={{pgd:{bad}}}")
    assert tiny_config(tmp_path, "budget.calibrate={hsj:0.5}").budget.calibrate.hsj == 0.5  # not in this grid: skipped by the stage


def test_the_logistic_fit_is_sklearns_unpenalised_fit():
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(400), rng.normal(size=(400, 2))])
    y = (rng.random(400) < 1 / (1 + np.exp(-(x @ [-1.0, 2.0, -0.5])))).astype(float)
    reference = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(x[:, 1:], y)
    np.testing.assert_allclose(logistic(x, y, penalty=0.0), [reference.intercept_[0], *reference.coef_[0]], rtol=1e-5, atol=1e-6)


def calibration_frame(rng, models: int, per_model: int, beta=(-2.0, -1.5)) -> pd.DataFrame:
    """Standing samples whose P(breaks later) is logistic in the log margin, as the model assumes."""
    margin = np.exp(rng.normal(size=models * per_model))
    p = 1 / (1 + np.exp(-(beta[0] + beta[1] * np.log(margin))))
    return pd.DataFrame(
        {
            "attack_hash": np.repeat([f"c{k}" for k in range(models)], per_model),
            "model_hash": np.repeat([f"m{k}" for k in range(models)], per_model),
            "defence": "none",
            "strength": 0.1,
            "margin_at_budget": margin,
            "breaks_later": (rng.random(len(p)) < p).astype(int),
            "p": p,
        }
    )


def test_a_cells_estimate_sums_its_standing_samples_probabilities_over_all_its_samples():
    samples = pd.DataFrame({"attack_hash": ["a", "a", "b"], "margin_at_budget": [1.0, np.e, 1.0], "strength": 0.1, "defence": "none"})
    beta = np.array([np.log(0.25 / 0.75), -1.0])  # p = 0.25 at margin 1; at margin e, logit falls by 1
    model = FamilyModel(Design((), 0.1, 0.0, ()), beta, np.repeat(beta[None, :], 50, axis=0), 3, 1, 1)
    p_e = 1 / (1 + np.exp(-(beta[0] - 1.0)))
    table = estimate(model, samples, pd.Series({"a": 4, "b": 10}), seed=0)
    assert table.loc["a", "still_breakable"] == pytest.approx((0.25 + p_e) / 4)  # two standing of four samples
    assert table.loc["b", "still_breakable"] == pytest.approx(0.25 / 10)
    assert 0 <= table.loc["b", "still_breakable_low"] <= table.loc["b", "still_breakable_high"] <= 0.1  # one standing sample: at most 1 of 10


def test_the_estimate_is_calibrated_and_its_interval_covers_on_cells_it_was_not_fitted_on():
    """Fitted on one set of model cells, checked on others drawn alike: the mean estimated share
    is the mean observed one, and the 95% interval holds the observed share in most cells."""
    rng = np.random.default_rng(1)
    calibration, held = calibration_frame(rng, 20, 60), calibration_frame(rng, 100, 60)
    model = fit_family(calibration, draws=200, seed=0)
    samples = pd.Series(100, index=[f"c{k}" for k in range(100)])  # 60 standing of 100 samples each
    table = estimate(model, held, samples, seed=0)
    observed = held.groupby("attack_hash")["breaks_later"].sum().reindex(samples.index) / 100
    assert table["still_breakable"].mean() == pytest.approx(observed.mean(), rel=0.15)
    assert observed.between(table["still_breakable_low"], table["still_breakable_high"]).mean() >= 0.9
    assert (table["still_breakable_high"] > table["still_breakable_low"]).all()  # a cell's own binomial spread


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """The tiny grid attacked, then the budget stage with PGD calibrated on every model cell
    and a black-box search's option in the config that the grid leaves out."""
    tmp = tmp_path_factory.mktemp("budget")
    cfg = tiny_config(tmp, "defence=[none,fsq]", "budget.calibrate={pgd:1.0}", "budget.draws=20")
    prepare.run(cfg)
    train.run(cfg)
    attack.run(cfg)
    budget.run(cfg)
    return cfg


def test_the_budget_stage_reruns_its_calibration_cells_and_counts_what_the_larger_budget_broke(checked):
    reports = OmegaConf.to_container(checked.paths)["reports"]
    table = pd.read_csv(f"{reports}/budget/sufficiency.csv")
    pgd = table[table["attack"] == "pgd"]
    assert len(pgd) == 4 and pgd["calibration"].all() and (table["attack"] != "fgm").all()  # FGM has no budget
    from trashfire.attacks.store import outcomes_path
    from trashfire.core.grid import attack_cells
    from trashfire.core.records import read_npz

    larger = {reruns.key(c): c for c in reruns.attack_cells(reruns.larger_budget_config(checked, 10, ["pgd"]))}
    for cell in attack_cells(checked):
        if cell.attack != "pgd":
            continue
        run = read_npz(outcomes_path(checked.paths.attacks, cell.hash))
        big = read_npz(outcomes_path(f"{reports}/budget_reruns", larger[reruns.key(cell)].hash))
        assert (big["event"] >= run["event"]).all()  # its first max_iter steps are the run's
        row = pgd.set_index("attack_hash").loc[cell.hash]
        assert row["observed"] == pytest.approx((big["event"] & ~run["event"]).mean())
        assert row["broken"] == pytest.approx(run["event"].mean())
        assert np.isnan(run["margin_at_budget"][run["event"]]).all() and (run["margin_at_budget"][~run["event"]] > 0).all()
    families = pd.read_csv(f"{reports}/budget/families.csv").set_index("attack")
    assert bool(families.loc["pgd", "calibrated"]) and families.loc["pgd", "calibration_cells"] == 4


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"budget": DROP}, "budget: missing; compose params.yaml with `make params`"),
        ({"budget.factor": 1}, "budget.factor: got 1; must be a finite number > 1"),
        ({"budget.draws": 9}, "budget.draws: got 9; must be an integer >= 10"),
        ({"budget.seed": -1}, "budget.seed: got -1; must be an integer >= 0"),
        ({"budget.min_search_iter": 0}, "budget.min_search_iter: got 0; must be an integer >= 1"),
        ({"budget.share": 1.5}, "budget.share: got 1.5; must be a finite number in [0, 1]"),
    ],
)
def test_a_bad_budget_setting_is_refused_in_one_line_naming_its_key(changes, line):
    assert config_refusal(budget_checks.check, changes) == f"config error: {line}"


def test_budget_settings_on_their_allowed_bounds_pass():
    bounds = {"budget.factor": 1.5, "budget.draws": 10, "budget.seed": 0, "budget.min_search_iter": 1, "budget.share": 0}
    assert config_refusal(budget_checks.check, bounds) is None


@pytest.mark.parametrize(
    "old, new",
    [("survival.budget.factor", "budget.factor"), ("survival.budget.calibrate", "budget.calibrate"), ("metrics.validity.budget_share", "budget.share")],
)
def test_a_budget_key_from_before_the_stage_had_its_section_names_the_new_key(conf_dir, old, new):
    """`survival.budget` and `metrics.validity.budget_share` moved to the budget stage's own
    section: given on the command line or in a params file, one line names the new key."""
    with pytest.raises(ConfigError) as err:
        compose([f"{old}=5"], conf=conf_dir)
    assert err.value.key == old and f"moved to {new}" in str(err.value)
    stale = compose([], conf=conf_dir)
    OmegaConf.update(stale, old, 5, force_add=True)
    with pytest.raises(ConfigError) as err:
        validate(stale)
    assert old.startswith(err.value.key) and "moved to budget" in str(err.value)  # the section moved whole: its name and the new one's
