"""Budget sufficiency (trashfire.survival.cure.budget_sufficiency): per attack cell, the share
of its samples that a budget ten times larger would still break, from the cure model, against
a rerun at that budget (simulated, and PGD on a real model); and the validity flag
`budget_too_small` that reads it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from lifelines import WeibullAFTFitter
from omegaconf import OmegaConf

from tests.conftest import PixelModel
from trashfire.attacks.engine import model_cost
from trashfire.attacks.failure_log import FailureLog
from trashfire.attacks.gradient import GradientSettings, gradient_attack
from trashfire.core.clocks import LapClock
from trashfire.metrics import validity
from trashfire.survival import fitters as F
from trashfire.survival import per_model
from trashfire.survival.cure import LogLogisticCureFitter, WeibullCureFitter, budget_sufficiency

CURED, SHAPE, FACTOR = 0.3, 1.5, 10.0
LABELS = ["attack_family", "defence", "dataset"]


def latent_times(n: int, seed: int = 0) -> pd.DataFrame:
    """Per sample its covariate x, whether it is cured and its latency (Weibull, shape SHAPE, log
    scale 0.5 + 0.5 x), and its cell (x's quartile)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return pd.DataFrame({"x": x, "cured": rng.random(n) < CURED, "latency": np.exp(0.5 + 0.5 * x) * rng.weibull(SHAPE, n), "cell": pd.qcut(x, 4, labels=False)})


def attacked(samples: pd.DataFrame, budget: float) -> pd.DataFrame:
    """The samples as an attack with `budget` sees them: a failure at its latency within the
    budget, else censored at the budget."""
    event = ~samples["cured"] & (samples["latency"] <= budget)
    frame = pd.DataFrame({"duration": np.where(event, samples["latency"], budget), "event": event.astype(int), "x": samples["x"]})
    return frame.assign(attack_hash=samples["cell"].map("cell{}".format), attack_family="pgd linf", defence="none", dataset="digits", queries=11)


@pytest.fixture  # per test: mutmut ties a function to the tests that call it, and a shared fixture calls it in one test's setup only
def short_budget():
    """A budget of 1.5 (the breakable samples' median latency is about 1.3): many of them stand
    at its end, and a budget ten times larger breaks nearly all of them."""
    samples = latent_times(4000)
    data = attacked(samples, 1.5)
    fitter = WeibullCureFitter(penalizer=0.001).fit(data[["duration", "event", "x"]], "duration", "event")
    budgets = data.groupby("attack_hash")["duration"].max()
    return samples, data, fitter, budget_sufficiency(fitter, data, "attack_hash", LABELS, budgets, FACTOR, draws=200, seed=0)


def test_the_predicted_share_is_what_a_tenfold_budget_breaks(short_budget):
    samples, data, _, table = short_budget
    rerun = attacked(samples, 15.0)
    observed = (rerun["event"] - data["event"]).groupby(data["attack_hash"]).mean()
    table = table.set_index("attack_hash")
    # a short budget leaves the cured share weakly determined (fitted 0.27 for 0.3): the
    # interval, not the point, is the claim
    assert ((table["still_breakable_low"] <= observed) & (observed <= table["still_breakable_high"])).all()
    assert table["still_breakable"].to_numpy() == pytest.approx(observed[table.index].to_numpy(), abs=0.06)
    assert (table["still_breakable"] > 0.02).all() and (observed > 0.02).all()  # flagged, rightly


def test_a_sufficient_budget_leaves_nothing_to_break(short_budget):
    """Where the budget already reaches far into the latency's tail, the share is near zero, as
    the rerun's."""
    samples, _, _, _ = short_budget
    long = attacked(samples, 30.0)
    fitter = WeibullCureFitter(penalizer=0.001).fit(long[["duration", "event", "x"]], "duration", "event")
    table = budget_sufficiency(fitter, long, "attack_hash", LABELS, long.groupby("attack_hash")["duration"].max(), FACTOR, draws=50)
    observed = (attacked(samples, 300.0)["event"] - long["event"]).groupby(long["attack_hash"]).mean()
    assert (table["still_breakable"] < 0.005).all() and (observed < 0.005).all()


def test_the_share_is_each_censored_samples_chance_to_fall_within_the_larger_budget(short_budget):
    _, data, fitter, table = short_budget
    cell = data[data["attack_hash"] == "cell0"]
    standing = cell[cell["event"] == 0]
    survival = fitter.predict_survival_function(standing[["x"]], times=[1.5, 15.0])  # one column per sample
    expected = ((survival.iloc[0] - survival.iloc[1]) / survival.iloc[0]).sum() / len(cell)  # failures add 0
    row = table.set_index("attack_hash").loc["cell0"]
    assert row["still_breakable"] == pytest.approx(expected, rel=1e-6)
    assert row["still_breakable"] <= 1 - row["broken"]  # never more than the samples standing
    assert row["samples"] == len(cell) and row["budget"] == pytest.approx(1.5)


def test_the_censored_samples_go_through_in_chunks_and_add_up_to_the_whole(short_budget, monkeypatch):
    """Memory grows with cells x draws, not samples x draws: the censored rows go through
    falls_within CHUNK_ROWS at a time (cells sorted, so that a chunk lacks some), and the table
    is the one-chunk table; the counts are integers and each cell keeps its own budget, however
    the budgets are ordered."""
    from trashfire.survival import cure

    _, data, fitter, _ = short_budget
    data = data.sort_values("attack_hash", kind="stable").reset_index(drop=True)
    budgets = data.groupby("attack_hash")["duration"].max()
    whole = budget_sufficiency(fitter, data, "attack_hash", LABELS, budgets, FACTOR, draws=50, seed=0)
    sizes = []
    falls_within = type(fitter).falls_within

    def recorded(self, df, standing, factor, draws=None, dtype=np.float64):
        if draws is not None and len(draws) == 1:  # the fit's own shares (the draws' follow in float32)
            sizes.append(len(df))
        return falls_within(self, df, standing, factor, draws, dtype)

    monkeypatch.setattr(type(fitter), "falls_within", recorded)
    monkeypatch.setattr(cure, "CHUNK_ROWS", 700)
    reported = budgets * np.arange(1.0, len(budgets) + 1)  # one per cell, handed over in reverse
    chunked = budget_sufficiency(fitter, data, "attack_hash", LABELS, reported.iloc[::-1], FACTOR, draws=50, seed=0)
    censored = int((data["event"] == 0).sum())
    assert censored > 1400 and len(sizes) == -(-censored // 700) and max(sizes) <= 700 and sum(sizes) == censored
    pd.testing.assert_frame_equal(chunked.drop(columns="budget"), whole.drop(columns="budget"), rtol=1e-12)
    assert whole["samples"].dtype.kind == "i" and chunked.set_index("attack_hash")["budget"].equals(reported)


def test_a_one_step_attack_has_no_budget_to_multiply(short_budget):
    _, data, fitter, _ = short_budget
    one_step = data.assign(queries=np.where(data["event"] == 1, 2, 2))  # FGM: a first query and one step
    table = budget_sufficiency(fitter, one_step, "attack_hash", LABELS, one_step.groupby("attack_hash")["duration"].max(), FACTOR, draws=20)
    assert table["one_step"].all() and table[["still_breakable", "still_breakable_low", "still_breakable_high"]].isna().all().all()


def test_the_interval_comes_from_the_fits_covariance(short_budget):
    _, _, fitter, _ = short_budget
    draws = fitter.parameter_draws(4000, seed=1)
    assert draws.mean(axis=0) == pytest.approx(fitter.params_.to_numpy(), abs=0.02)
    assert draws.std(axis=0) == pytest.approx(fitter.standard_errors_.to_numpy(), rel=0.05)


def sufficiency_rows(shares, families=("pgd linf",)) -> pd.DataFrame:
    return pd.DataFrame(
        {"attack_hash": [f"a{i}" for i in range(len(shares))], "attack_family": list(families) * len(shares), "samples": 100, "factor": 10.0}
        | {"still_breakable": shares, "still_breakable_low": [s / 2 for s in shares], "still_breakable_high": [s * 2 for s in shares]}
    )


def test_budget_too_small_trips_where_the_lower_bound_is_above_the_share_and_names_the_worst_cell():
    tripped, detail = validity.budget_too_small(sufficiency_rows([0.01, 0.05, np.nan]), 0.02)
    assert tripped is True and detail.startswith("pgd linf: a budget 10x larger would break 5.0% more (95% 2.5% to 10.0%) of 100 samples")
    assert validity.budget_too_small(sufficiency_rows([0.01, 0.02]), 0.02)[0] is False  # at the share: not above
    assert validity.budget_too_small(sufficiency_rows([np.nan]), 0.02)[0] is None  # one-step attacks only
    assert validity.budget_too_small(None, 0.02)[0] is None


# PGD on the digits CNN at a budget, the cure model fitted to its per-sample failure clocks, and
# the same cells rerun at ten times the budget (the same step size: the rerun's first steps are the run's)
EPS_PIXELS = (0.05, 0.1, 0.15, 0.2)


def pgd_cell(target, x, y, eps: float, steps: int, step: float) -> tuple[FailureLog, LapClock]:
    cost = model_cost(target, x, y)
    clock = LapClock(len(y), target.device, cost.forward, cost.backward).start()
    log = FailureLog(x.astype(np.float32), y.astype(np.int64), steps)
    gradient_attack(target, log, clock, GradientSettings(np.inf, eps, step, steps), True, len(y))
    return log, clock


def pgd_table(digits_cnn, steps: int, step_share: float) -> pd.DataFrame:
    """One row per sample and eps: its queries to failure or to the budget, event, the eps and
    its benign margin; steps of `step_share` x eps."""
    split, target = digits_cnn
    x, y = split.x_attack.numpy(), split.y_attack.numpy()
    rows = []
    for eps_pixels in EPS_PIXELS:
        eps = PixelModel(target).eps_standardised(eps_pixels)
        log, clock = pgd_cell(target, x, y, eps, steps, step_share * eps)
        rows.append(
            pd.DataFrame({"duration": clock.queries.astype(float), "event": log.event.astype(int), "eps": eps_pixels, "margin": log.margin_ben}).assign(
                attack_hash=f"eps{eps_pixels}", attack_family="pgd linf", defence="none", dataset="digits", queries=clock.queries
            )
        )
    return pd.concat(rows, ignore_index=True)


CUT_SHORT = pytest.mark.xfail(
    strict=True,
    reason="known limitation (docs/survival.md, Budget sufficiency): where failures still arrive at the budget's last step, the cure model's "
    "split of the standing samples into cured and breakable is weakly identified, and its fit takes them as cured: 3 steps of eps/10 "
    "predict at most 1.1% more where 30 steps break 7% to 60% more",
)


@pytest.mark.parametrize("steps, step_share", [pytest.param(3, 0.1, marks=CUT_SHORT, id="cut-short"), pytest.param(20, 0.25, id="converged")])
def test_the_flag_is_right_against_a_rerun_at_ten_times_the_budget(digits_cnn, steps, step_share):
    """Converged: PGD-20 with steps of eps/4 reaches the eps ball's faces, and PGD-200 breaks
    nothing more; the flag stays off. Cut short: 3 steps of eps/10 cannot reach them."""
    run, rerun = pgd_table(digits_cnn, steps, step_share), pgd_table(digits_cnn, 10 * steps, step_share)
    fitter = WeibullCureFitter(penalizer=0.001).fit(run[["duration", "event", "eps", "margin"]], "duration", "event")
    table = budget_sufficiency(fitter, run, "attack_hash", LABELS, run.groupby("attack_hash")["duration"].max(), 10.0, draws=100, seed=0)
    observed = (rerun["event"] - run["event"]).groupby(run["attack_hash"]).mean()
    table = table.set_index("attack_hash").assign(observed=observed)
    assert ((table["still_breakable"] > 0.02) == (table["observed"] > 0.02)).all()


def test_a_standing_samples_chance_is_its_conditional_survival_between_the_budgets(short_budget):
    """falls_within by the fit's own parameters (the default) is (S(b) - S(10 b)) / S(b) of its
    survival function; a parameter vector passed in gives the same; where S(b) underflows to 0
    the sample cannot stand: 1."""
    _, data, fitter, _ = short_budget
    rows = data[data["event"] == 0].head(5)
    standing = rows["duration"].to_numpy()
    survival = fitter.predict_survival_function(rows[["x"]], times=[1.5, 15.0])
    expected = ((survival.iloc[0] - survival.iloc[1]) / survival.iloc[0]).to_numpy()
    chances = fitter.falls_within(rows[["x"]], standing, FACTOR)
    assert chances[:, 0] == pytest.approx(expected, rel=1e-9)
    assert fitter.falls_within(rows[["x"]], standing, FACTOR, fitter.params_.to_numpy()[None, :]) == pytest.approx(chances)
    assert fitter.falls_within(rows[["x"]], standing, 2.0)[:, 0] == pytest.approx(
        (1 - fitter.predict_survival_function(rows[["x"]], times=[3.0]).iloc[0] / survival.iloc[0]).to_numpy(), rel=1e-9
    )
    never = fitter.params_.copy()
    never[("cured_", "Intercept")] = -1000.0  # no sample cured, to the last bit
    assert fitter.falls_within(rows[["x"]], standing * 1e6, FACTOR, never.to_numpy()[None, :]) == pytest.approx(1.0)


def test_the_interval_is_the_percentiles_of_the_draws_and_repeats_exactly(short_budget):
    """still_breakable is the fit's own share; low and high are the 2.5 and 97.5 percentiles of
    the shares under `draws` parameter vectors of seed `seed`; the defaults are 10, 200 and 0."""
    _, data, fitter, table = short_budget
    cell = data[data["attack_hash"] == "cell1"]
    standing = cell[cell["event"] == 0]
    draws = fitter.parameter_draws(200, seed=0)
    shares = fitter.falls_within(standing[["x"]], standing["duration"].to_numpy(), FACTOR, draws, np.float32).astype(float).sum(axis=0) / len(cell)
    row = table.set_index("attack_hash").loc["cell1"]
    interval = (row["still_breakable_low"], row["still_breakable_high"])
    assert interval == pytest.approx(tuple(np.percentile(shares, [2.5, 97.5])), rel=1e-9)
    # the draws' shares in float32: the interval is float64's to 1e-6, far inside its Monte Carlo error
    in_float64 = fitter.falls_within(standing[["x"]], standing["duration"].to_numpy(), FACTOR, draws).sum(axis=0) / len(cell)
    assert interval == pytest.approx(tuple(np.percentile(in_float64, [2.5, 97.5])), rel=1e-6)
    budgets = data.groupby("attack_hash")["duration"].max()
    defaults = budget_sufficiency(fitter, data, "attack_hash", LABELS, budgets)
    pd.testing.assert_frame_equal(defaults, table)  # factor 10, 200 draws, seed 0: the fixture's, bit for bit
    assert (fitter.parameter_draws(5, seed=3) == fitter.parameter_draws(5, seed=3)).all()


def test_a_weighted_row_counts_as_its_samples_in_the_cells_share(short_budget):
    _, data, fitter, _ = short_budget
    part = data.head(400)
    weights = np.random.default_rng(2).integers(1, 4, len(part))
    budgets = part.groupby("attack_hash")["duration"].max()
    weighted = budget_sufficiency(fitter, part.assign(weight=weights), "attack_hash", LABELS, budgets, FACTOR, draws=20)
    repeated = part.loc[part.index.repeat(weights)].assign(weight=1).reset_index(drop=True)
    theirs = budget_sufficiency(fitter, repeated, "attack_hash", LABELS, budgets, FACTOR, draws=20)
    pd.testing.assert_frame_equal(weighted, theirs, check_exact=False, rtol=1e-9)
    assert weighted["samples"].sum() == weights.sum()


def fits_of(cure_fitter) -> dict[str, F.Fit]:
    """Table I's fits as the survival stage holds them: a plain model and two cure models."""
    cure = {name: F.Fit(name, cure_fitter, 0.001, "SLSQP", 1) for name in ("weibull_cure", "weibull_cure_again")}
    return {"weibull": F.Fit("weibull", WeibullAFTFitter(), 0.001, "SLSQP", 1), **cure}


def test_the_stage_writes_each_cure_models_table_in_the_clocks_unit(short_budget, tmp_path):
    _, data, fitter, _ = short_budget
    budgets = data.groupby("attack_hash")["duration"].max()
    settings = OmegaConf.create({"factor": FACTOR, "draws": 50, "seed": 7})
    table = budget_sufficiency(fitter, data, "attack_hash", LABELS, budgets, FACTOR, draws=50, seed=7)
    path = tmp_path / "budget_sufficiency.csv"
    per_model.write_budget_sufficiency(fits_of(fitter), data, budgets, path, settings)
    written = pd.read_csv(path)
    assert list(written.columns) == [
        "fitter", "selected", "attack_hash", *LABELS, "samples", "budget", "factor", "broken", "one_step", "still_breakable", "still_breakable_low", "still_breakable_high"
    ]  # fmt: skip
    assert list(written["fitter"]) == ["weibull_cure"] * 4 + ["weibull_cure_again"] * 4 and (written["factor"] == FACTOR).all()
    assert list(written["selected"]) == [True] * 4 + [False] * 4  # equal AICs: the first
    for column in ("samples", "budget", "broken", "still_breakable", "still_breakable_low", "still_breakable_high"):
        assert written[column].to_numpy() == pytest.approx(np.tile(table[column].to_numpy(float), 2)), column
    assert list(written["attack_hash"]) == list(table["attack_hash"]) * 2 and list(written["one_step"]) == list(table["one_step"]) * 2
    per_model.write_budget_sufficiency(fits_of(fitter), data, budgets, path, settings, unit=1e9)  # fitted in GFLOPs, written in FLOPs
    assert pd.read_csv(path)["budget"].to_numpy() == pytest.approx(written["budget"].to_numpy() * 1e9)
    per_model.write_budget_sufficiency({"weibull": fits_of(fitter)["weibull"]}, data, budgets, path, settings)
    assert not path.exists()  # no cure model, no stale table


def test_expected_times_get_the_selected_cure_models_mean_time_of_the_breakable_samples_per_cell(short_budget):
    _, data, fitter, _ = short_budget
    expected = pd.DataFrame({"attack_hash": ["cell2", "cell0", "cell9"], "E_T": [1.0, 2.0, 3.0]})
    joined = per_model.with_breakable_means(expected, fits_of(fitter), data)
    by_hand = fitter.predict_expectation_breakable(data[["x"]]).groupby(data["attack_hash"]).mean()
    assert joined["E_T_breakable"].iloc[:2].to_numpy() == pytest.approx(by_hand[["cell2", "cell0"]].to_numpy(), rel=1e-12)
    loglogistic = LogLogisticCureFitter(penalizer=0.001).fit(data[["duration", "event", "x"]], "duration", "event")
    both = {**fits_of(fitter), "loglogistic_cure": F.Fit("loglogistic_cure", loglogistic, 0.001, "SLSQP", 1)}
    better = min(("weibull_cure", "loglogistic_cure"), key=lambda name: both[name].fitter.AIC_)
    assert per_model.selected_cure(both) == better
    means = both[better].fitter.predict_expectation_breakable(data[["x"]]).groupby(data["attack_hash"]).mean()
    assert per_model.with_breakable_means(expected, both, data)["E_T_breakable"].iloc[:2].to_numpy() == pytest.approx(means[["cell2", "cell0"]].to_numpy())
    assert np.isnan(joined["E_T_breakable"].iloc[2]) and list(joined["E_T"]) == [1.0, 2.0, 3.0]  # a cell the data lack
    assert per_model.with_breakable_means(expected, {"weibull": fits_of(fitter)["weibull"]}, data) is expected
