"""AutoAttack on the torch engine (trashfire.attacks.standard): its components in the authors'
order, each on the samples still standing, break the samples the authors' AutoAttack breaks
on the same model, images and seed; the composite keeps the per-sample clock (a sample's
queries up to the component that broke it, the budget for one never broken), names the
component that broke each sample, and refuses a standard version that is not AutoAttack's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyautoattack import AutoAttack
from pyautoattack.autopgd_base import APGDAttack, APGDAttack_targeted

from tests.conftest import PixelModel, tiny_config
from trashfire.attacks import standard
from trashfire.attacks.engine import model_cost
from trashfire.attacks.failure_log import FailureLog
from trashfire.attacks.loops import autoattack
from trashfire.core.clocks import LapClock
from trashfire.core.errors import ConfigError
from trashfire.core.grid import attack_specs

N_IMAGES = 40
# the standard version's components at budgets a test affords: (algorithm, iterations or
# queries, kwargs)
REDUCED = {
    "apgd_ce": ("apgd", 20, {"loss_type": "cross_entropy", "n_targets": 0}),
    "apgd_t": ("apgd", 20, {"loss_type": "difference_logits_ratio", "n_targets": 3}),
    "fab_t": ("fab", 20, {"n_targets": 3}),
    "square": ("square", 300, {"p_init": 0.8}),
}


def custom_spec(components=REDUCED, norm="inf"):
    return {
        "name": "autoattack",
        "norm": norm,
        "version": "custom",
        "kwargs": {"components": {n: {"max_iter": it, "kwargs": kw, "rules": {"torch": {"algorithm": a}}} for n, (a, it, kw) in components.items()}},
    }


def ours(target, x, y, spec, eps, seed=0, batch_size=100):
    cost = model_cost(target, x, y)
    clock = LapClock(len(y), target.device, cost.forward, cost.backward).start()
    log = FailureLog(x.astype(np.float32), y.astype(np.int64), autoattack.budget_of(spec))
    norm = autoattack.NORMS[spec["norm"]]
    components = {n: autoattack.runner(n, c, norm, eps)[0] for n, c in autoattack.component_settings(spec).items()}
    standard.evaluate(target, log, clock, components, batch_size, seed)
    return log, clock


def reference_robust(target, x, y, eps_pixels, seed=0):
    """The authors' AutoAttack, version custom with the components and budgets of REDUCED
    (APGD built at its iteration count: its checkpoints are set in its constructor)."""
    model = PixelModel(target)
    aa = AutoAttack(model, norm="Linf", eps=eps_pixels, version="custom", attacks=["apgd-ce", "apgd-t", "fab-t", "square"], seed=seed, device="cpu")
    aa.logger.disabled = True
    aa.apgd = APGDAttack(model, n_iter=REDUCED["apgd_ce"][1], norm="Linf", eps=eps_pixels, seed=seed, device="cpu", logger=aa.logger)
    aa.apgd_targeted = APGDAttack_targeted(
        model, n_iter=REDUCED["apgd_t"][1], norm="Linf", eps=eps_pixels, seed=seed, device="cpu", n_target_classes=3, logger=aa.logger
    )
    aa.fab.n_iter, aa.fab.n_target_classes = REDUCED["fab_t"][1], 3
    aa.square.n_queries = REDUCED["square"][1]
    x_adv, _ = aa.run_standard_evaluation(model.to_pixels(torch.from_numpy(x)), torch.from_numpy(y), batch_size=100)
    with torch.no_grad():
        return model(x_adv).argmax(1).numpy() == y


@pytest.mark.parametrize("eps_pixels", [0.05, 0.1])
def test_it_breaks_the_samples_the_authors_autoattack_breaks(digits_cnn, eps_pixels):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    log, _ = ours(target, x, y, custom_spec(), PixelModel(target).eps_standardised(eps_pixels))
    robust = reference_robust(target, x, y, eps_pixels)
    np.testing.assert_array_equal(~log.event, robust)
    assert 0 < robust.sum() < (log.broken_by != standard.FIRST_QUERY).sum()


def test_each_sample_is_charged_up_to_the_component_that_broke_it(digits_cnn):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    spec = custom_spec()
    log, clock = ours(target, x, y, spec, PixelModel(target).eps_standardised(0.05))
    budget = autoattack.budget_of(spec)
    censored = ~log.event
    assert censored.any() and set(log.broken_by[log.event]) >= {standard.FIRST_QUERY, "apgd_ce"}
    assert (log.broken_by[censored] == "").all()
    np.testing.assert_array_equal(clock.queries[censored], budget)
    np.testing.assert_array_equal(log.failure_step[censored], budget)
    np.testing.assert_array_equal(log.failure_step[log.event], clock.queries[log.event])
    assert (clock.queries[log.broken_by == standard.FIRST_QUERY] == 1).all()
    # a later component's sample spent every earlier component's budget first
    first_budget = 1 + autoattack.runner("apgd_ce", autoattack.component_settings(spec)["apgd_ce"], np.inf, 1.0)[1]
    assert (clock.queries[np.isin(log.broken_by, ["apgd_t", "fab_t", "square"])] > first_budget).all()


def test_two_runs_are_identical(digits_cnn):
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:20], split.y_attack.numpy()[:20]
    eps = PixelModel(target).eps_standardised(0.05)
    first, second = (ours(target, x, y, custom_spec(), eps)[0] for _ in range(2))
    np.testing.assert_array_equal(first.x_adv, second.x_adv)
    np.testing.assert_array_equal(first.broken_by, second.broken_by)
    np.testing.assert_array_equal(first.failure_step, second.failure_step)


def test_the_standard_version_is_the_authors_budgets_or_refused(tmp_path):
    (spec, *_) = attack_specs(tiny_config(tmp_path, "attack=[autoattack]", "attack.autoattack.values=[0.1]", "metrics.auc.eps1=0.1"))
    assert spec["version"] == "standard" and spec["engine"] == "torch"
    assert list(autoattack.component_settings(spec)) == ["apgd_ce", "apgd_t", "fab_t", "square"]
    assert autoattack.budget_of(spec) == 1 + 101 + (9 * 101 + 1) + autoattack.runner("fab_t", autoattack.STANDARD["fab_t"], np.inf, 1.0)[1] + 5001
    changed = {**spec, "kwargs": {"components": {**spec["kwargs"]["components"], "square": {**spec["kwargs"]["components"]["square"], "max_iter": 100}}}}
    with pytest.raises(ConfigError, match="square differ; set attack.autoattack.version=custom"):
        autoattack.check_spec(changed)
    assert list(autoattack.component_settings({**spec, "version": "rand"})) == ["apgd_ce", "apgd_dlr"]
    autoattack.check_spec({**changed, "version": "custom"})


def test_the_validator_refuses_a_standard_version_at_other_budgets_before_any_compute(tmp_path):
    grid = ("attack=[autoattack]", "attack.autoattack.values=[0.1]", "metrics.auc.eps1=0.1", "attack.autoattack.kwargs.components.apgd_t.max_iter=20")
    with pytest.raises(ConfigError, match=r"attack.autoattack.kwargs.components: .*apgd_t differ; set attack.autoattack.version=custom"):
        tiny_config(tmp_path, *grid)
    (spec, *_) = attack_specs(tiny_config(tmp_path, *grid, "attack.autoattack.version=custom"))
    assert autoattack.component_settings(spec)["apgd_t"]["max_iter"] == 20


@pytest.mark.parametrize(
    "preset, version, samples, budget", [("autoattack", "standard", None, 7813), ("autoattack_reduced", "custom", 20, 1 + 11 + (3 * 11 + 1) + 3 * 20 + 101)]
)
def test_the_presets_run_the_standard_version_on_every_image_or_a_reduced_one(conf_dir, preset, version, samples, budget):
    from trashfire.core.config import compose, normalise, validate

    specs = [s for s in attack_specs(normalise(validate(compose([f"experiment={preset}"], conf=conf_dir)))) if s["name"] == "autoattack"]
    assert {s["version"] for s in specs} == {version} and {s.get("samples") for s in specs} == {samples}
    assert {s["value"] for s in specs} == {0.05, 0.1, 0.2, 0.3} and {s["engine"] for s in specs} == {"torch"}
    autoattack.check_spec(specs[0])
    assert autoattack.budget_of(specs[0]) == budget


def test_the_rand_version_runs_only_on_the_defences_that_draw_at_random(conf_dir):
    from trashfire.core.config import compose, normalise, validate
    from trashfire.core.grid import attack_cells

    cfg = normalise(validate(compose(["experiment=autoattack"], conf=conf_dir)))
    cells = attack_cells(cfg)
    rand = [c for c in cells if c.attack == "autoattack_rand"]
    assert {c.model.defence["name"] for c in rand} == {"gauss_out"} and {c.spec["version"] for c in rand} == {"rand"}
    gauss_out = {c.model.hash for c in cells if c.model.defence["name"] == "gauss_out"}
    assert len(rand) == 4 * len(gauss_out)  # every Gauss-out model cell, at PGD's four eps
    assert {c.model.defence["name"] for c in cells if c.attack == "pgd"} > {"gauss_out", "none"}
    autoattack.check_spec(rand[0].spec)
