"""Validity flags: models built to trip them (zeroed gradients, a randomised output), a clean
model that trips none, and each flag's rule on hand-made curves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from art.attacks.evasion import ProjectedGradientDescent, SquareAttack
from art.estimators.classification import PyTorchClassifier
from omegaconf import OmegaConf
from sklearn.datasets import load_digits
from torch import nn

from trashfire.attacks import validity as probes
from trashfire.core import schema
from trashfire.core.config import compose
from trashfire.metrics import validity
from trashfire.metrics.aggregate import eps_curves, with_family

SETTINGS = OmegaConf.create(validity.tolerances(compose([])))
EPS = [0.5, 1.0, 2.0, 4.0]  # standardised; 4 standard deviations reach any pixel value


class Quantised(nn.Module):
    """Rounds its input to quarter steps first: the same answers as a plain net, but a zero
    input gradient everywhere (round's derivative), the textbook obfuscated gradient."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(torch.round(x * 4) / 4)


class NoisyLogits(nn.Module):
    """Adds fresh Gaussian noise to the logits at every query, as Gauss-out does."""

    def __init__(self, net: nn.Module, scale: float):
        super().__init__()
        self.net, self.scale = net, scale

    def forward(self, x):
        logits = self.net(x)
        return logits + self.scale * torch.randn_like(logits)


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    mean, std = x[:1500].mean(), x[:1500].std()
    x = (x - mean) / std
    return x[:1500], data.target[:1500].astype(np.int64), x[1500:1560], data.target[1500:1560].astype(np.int64)


def trained(digits, wrap=lambda net: net) -> nn.Module:
    torch.manual_seed(0)
    x, y = torch.from_numpy(digits[0]), torch.from_numpy(digits[1])
    model = wrap(nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(300):
        optimiser.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimiser.step()
    return model.eval()


def classifier(model: nn.Module, digits) -> PyTorchClassifier:
    low, high = float(digits[0].min()), float(digits[0].max())
    return PyTorchClassifier(model, loss=nn.CrossEntropyLoss(), input_shape=(1, 8, 8), nb_classes=10, clip_values=(low, high))


def evaluated(name: str, model: nn.Module, digits) -> pd.DataFrame:
    """The experiments rows of one model cell: PGD (white-box) and Square (black-box) over
    EPS, with the benign probes of the attack stage."""
    np.random.seed(0)
    torch.manual_seed(0)
    art = classifier(model, digits)
    x, y = digits[2], digits[3]
    benign = (art.predict(x).argmax(1) == y).mean()
    rows = []
    for eps in EPS:
        attacks = {
            "pgd": ProjectedGradientDescent(art, eps=eps, eps_step=eps / 8, max_iter=20, num_random_init=0, verbose=False),
            "square": SquareAttack(art, eps=eps, max_iter=50, nb_restarts=1, verbose=False),
        }
        for attack, built in attacks.items():
            acc = float((art.predict(built.generate(x, y)).argmax(1) == y).mean())
            rows.append({"attack": attack, "attack_value": eps, "attack_value_standardised": eps, "acc_adv": acc})
    return experiment_rows(rows, name, benign, probes.probe(art, x, y))


def experiment_rows(rows: list[dict], model_hash: str, benign: float, probe: dict) -> pd.DataFrame:
    """Attack cells of one undefended linf model cell as experiments.csv has them."""
    labels = {"train_hash": model_hash, "dataset": "digits", "pretrained_on": "", "seed": 0, "model": "mlp", "depth": 2, "epochs": 1, "lr": 0.01}
    labels |= {"defence": "none", "defence_param": "", "defence_value": 0, "norm": "inf", "attack_param": "eps", "attack_units": "standardised"}
    table = pd.DataFrame(rows).assign(model_hash=model_hash, pixel_std=1.0, n_classes=10, acc_ben_attack_subset=benign, degenerate=False, **labels, **probe)
    table["black_box"] = table["attack"].eq("square")  # as timing reads it from ART's declaration of SquareAttack
    return with_family(table)


def flags_of(experiments: pd.DataFrame) -> dict:
    """The cell's flags as True, False or None (not checked), beside their details."""
    row = validity.validity_table(experiments, eps_curves(experiments), SETTINGS).iloc[0].to_dict()
    return row | {name: None if pd.isna(row[name]) else bool(row[name]) for name in schema.VALIDITY_FLAGS}


def test_a_clean_model_trips_no_flag(digits):
    row = flags_of(evaluated("clean", trained(digits), digits))
    assert row["flags"] == "", {name: row[f"{name}_detail"] for name in schema.VALIDITY_FLAGS}
    checked = [name for name in schema.VALIDITY_FLAGS if row[name] is not None]
    unchecked = (
        "square_beats_white_box",
        "budget_too_small",
        "black_box_carries",
        "attack_far_from_best",
        "attacked_above_certified",
    )  # no AutoAttack cell, no survival stage, no optimality table, no certificate here
    assert checked == [name for name in schema.VALIDITY_FLAGS if name not in unchecked]  # every other flag was checked, not skipped
    assert row["square_beats_white_box_detail"].startswith("not checked: no AutoAttack cell")  # PGD and ART's Square alone
    assert row["budget_too_small_detail"].startswith("not checked: no budget/sufficiency.csv")
    assert row["black_box_carries_detail"].startswith("not checked: no composite cell")


def test_zeroed_gradients_trip_masking_the_black_box_check_and_the_largest_eps(digits):
    row = flags_of(evaluated("quantised", trained(digits, Quantised), digits))
    assert row["gradients_masked"] is True and "100% of samples with zero" in row["gradients_masked_detail"]
    assert row["black_box_stronger"] is True  # PGD stands still, Square does not
    assert row["largest_eps_not_breaking"] is True
    assert row["randomised"] is False


def test_a_randomised_output_trips_the_repeated_query_flag_and_says_how_much_accuracy_varies(digits):
    experiments = evaluated("noisy", NoisyLogits(trained(digits), scale=3.0), digits)
    row = flags_of(experiments)
    assert row["randomised"] is True
    assert experiments["query_flip_share"].iloc[0] > 0 and experiments["acc_query_sd"].iloc[0] > 0
    assert "EOT" in row["randomised_detail"] and "accuracy SD" in row["randomised_detail"]
    assert row["gradients_masked"] is False


def test_noise_too_small_to_flip_a_label_still_marks_the_model_randomised(digits):
    x, y = digits[2], digits[3]
    spread = probes.query_spread(classifier(NoisyLogits(trained(digits), scale=1e-3), digits), x, y)
    assert spread["query_flip_share"] == 0 and spread["query_output_change"] > 1e-5
    row = flags_of(curve_cells({"pgd": [0.3, 0.1, 0.0]}, **spread))
    assert row["randomised"] is True and "0% of samples change label" in row["randomised_detail"]


def test_non_finite_gradients_count_as_masked():
    class NanGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return torch.full_like(grad, float("nan"))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            return self.linear(NanGradient.apply(x))

    art = PyTorchClassifier(Net(), loss=nn.CrossEntropyLoss(), input_shape=(4,), nb_classes=3, clip_values=(0.0, 1.0))
    x = np.random.default_rng(0).random((10, 4), dtype=np.float32)
    assert probes.gradient_shares(art, x, np.zeros(10, dtype=np.int64)) == (0.0, 1.0)


def curve_cells(acc_by_attack: dict[str, list[float]], eps=(0.1, 0.2, 0.3), benign=0.9, **probe) -> pd.DataFrame:
    rows = [
        {"attack": attack, "attack_value": e, "attack_value_standardised": e, "acc_adv": a} for attack, accs in acc_by_attack.items() for e, a in zip(eps, accs)
    ]
    probe = {
        "grad_zero_share": 0.0,
        "grad_nonfinite_share": 0.0,
        "query_repeats": 5,
        "query_output_change": 0.0,
        "query_flip_share": 0.0,
        "acc_query_sd": 0.0,
        "acc_query_range": 0.0,
        "output_probability": False,
        "gradient_calls": 0,
    } | probe
    return experiment_rows(rows, "m", benign, probe)


def test_non_monotone_is_a_rise_over_the_running_minimum_beyond_the_tolerance():
    row = flags_of(curve_cells({"fgm": [0.5, 0.2, 0.25]}))
    assert row["non_monotone"] is True and "fgm linf: 0.20 at eps 0.2 -> 0.25 at eps 0.3" in row["non_monotone_detail"]
    assert flags_of(curve_cells({"fgm": [0.5, 0.2, 0.21]}))["non_monotone"] is False  # 0.01 <= rise_tol 0.02
    assert flags_of(curve_cells({"fgm": [0.95, 0.5, 0.0]}))["non_monotone"] is True  # above the benign point 0.9


def test_black_box_stronger_compares_the_best_of_each_kind_at_one_budget():
    row = flags_of(curve_cells({"fgm": [0.6, 0.4, 0.2], "pgd": [0.3, 0.1, 0.0], "square": [0.2, 0.05, 0.0]}))
    assert row["black_box_stronger"] is True and "black-box 0.20, white-box 0.30" in row["black_box_stronger_detail"]
    assert flags_of(curve_cells({"pgd": [0.3, 0.1, 0.0], "square": [0.29, 0.1, 0.0]}))["black_box_stronger"] is False
    unchecked = flags_of(curve_cells({"pgd": [0.3, 0.1, 0.0]}))
    assert unchecked["black_box_stronger"] is None and "not checked" in unchecked["black_box_stronger_detail"]
    cells = curve_cells({"pgd": [0.3, 0.1, 0.0], "square": [0.2, 0.05, 0.0]})
    on_fewer = cells.assign(n_attack=cells["attack"].map({"pgd": 100, "square": 20}))
    assert flags_of(on_fewer)["black_box_stronger"] is None  # accuracies on different samples do not compare
    composite = cells.assign(engine=cells["attack"].map({"pgd": "sequence", "square": "per_image"}))
    assert flags_of(composite)["black_box_stronger"] is None  # AutoAttack's worst case is neither kind


def test_an_attacks_kind_is_the_tables_black_box_column_not_its_name():
    cells = curve_cells({"pgd": [0.3, 0.1, 0.0], "mine": [0.2, 0.05, 0.0]})
    assert flags_of(cells.assign(black_box=cells["attack"].eq("mine")))["black_box_stronger"] is True
    assert flags_of(cells.assign(black_box=False))["black_box_stronger"] is None  # two white-box attacks: nothing to compare
    as_csv = cells.assign(black_box=cells["attack"].map({"pgd": "False", "mine": "True"}))  # read back from experiments.csv
    assert flags_of(as_csv)["black_box_stronger"] is True
    unknown = flags_of(cells.assign(black_box=cells["attack"].map({"pgd": False, "mine": None})))
    assert unknown["black_box_stronger"] is None and unknown["largest_eps_not_breaking"] is None
    assert "whether mine is black-box" in unknown["black_box_stronger_detail"] and "rerun the attack stage" in unknown["largest_eps_not_breaking_detail"]


def test_largest_eps_not_breaking_reads_the_strongest_white_box_attack_at_its_largest_eps():
    assert flags_of(curve_cells({"fgm": [0.6, 0.5, 0.4], "pgd": [0.3, 0.1, 0.05]}))["largest_eps_not_breaking"] is False
    row = flags_of(curve_cells({"fgm": [0.6, 0.5, 0.4], "pgd": [0.5, 0.3, 0.2]}))
    assert row["largest_eps_not_breaking"] is True and "pgd linf 0.20 at eps 0.3" in row["largest_eps_not_breaking_detail"]


def test_probes_missing_from_an_older_record_leave_their_flags_unchecked_not_false():
    cells = curve_cells({"pgd": [0.3, 0.1, 0.0]}).drop(columns=schema.PROBES)
    row = flags_of(cells)
    assert row["gradients_masked"] is None and row["randomised"] is None
    assert row["softmax_output"] is None and row["dynamic"] is None
    assert "rerun the attack stage" in row["gradients_masked_detail"]
    assert row["softmax_output_detail"] == "not checked: the benign record has no output probe (rerun the attack stage)"
    assert row["dynamic_detail"] == "not checked: the benign record has no dynamic probe (rerun the attack stage)"


def test_the_summary_counts_checked_and_tripped_over_sound_cells():
    tripped = validity.validity_table(curve_cells({"fgm": [0.5, 0.2, 0.25]}), eps_curves(curve_cells({"fgm": [0.5, 0.2, 0.25]})), SETTINGS)
    degenerate = tripped.assign(model_hash="d", degenerate=True)
    summary = validity.validity_summary(pd.concat([tripped, degenerate]))
    assert summary["non_monotone"] == {"tripped": 1, "checked": 1}
    assert summary["black_box_stronger"] == {"tripped": 0, "checked": 0}


class Softmax(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return torch.softmax(self.net(x), dim=1)


class Refining(nn.Module):
    """A defence that optimises at inference: one gradient step on its input before predicting."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.net(x).logsumexp(1).sum(), x)
        return self.net((x - 0.01 * grad).detach())


def test_the_probes_see_probability_outputs_and_gradients_taken_while_predicting(digits):
    x = digits[2]
    net = trained(digits)
    clean = classifier(net, digits)
    assert not probes.output_is_probability(clean, x) and probes.gradient_calls(clean, x) == 0
    assert probes.output_is_probability(classifier(Softmax(net), digits), x)
    assert probes.gradient_calls(classifier(Refining(net), digits), x) >= 1


def test_probability_outputs_and_gradients_at_inference_trip_autoattacks_checks():
    clean = flags_of(curve_cells({"pgd": [0.5, 0.2, 0.0]}))
    assert clean["softmax_output"] is False and clean["softmax_output_detail"] == "the outputs are not a probability distribution (logits)"
    assert clean["dynamic"] is False and clean["dynamic_detail"] == "0 gradient call(s) within one forward pass"
    row = flags_of(curve_cells({"pgd": [0.5, 0.2, 0.0]}, output_probability=True, gradient_calls=2))
    assert row["softmax_output"] is True and row["softmax_output_detail"] == "every score in [0, 1] and each row sums to 1: the attacks need the logits"
    assert row["dynamic"] is True and row["dynamic_detail"] == "2 gradient call(s) within one forward pass"
    assert flags_of(curve_cells({"pgd": [0.5, 0.2, 0.0]}, gradient_calls=1))["dynamic"] is True  # one call is enough
    # a probe read back as a number (a table written by another tool): 0.0 is a checked "no"
    assert flags_of(curve_cells({"pgd": [0.5, 0.2, 0.0]}, output_probability=0.0))["softmax_output"] is False
    assert "softmax_output" in row["flags"] and "dynamic" in row["flags"]


def test_square_breaking_what_autoattacks_white_box_components_left_trips_its_flag():
    cells = curve_cells({"autoattack": [0.5, 0.2, 0.0]}).assign(n_attack=100, n_broken_by_square=[0, 1, 0])
    row = flags_of(cells)
    assert row["square_beats_white_box"] is True and row["square_beats_white_box_detail"] == "Square broke 1 of 100 samples at autoattack eps 0.2"
    assert flags_of(cells.assign(n_broken_by_square=0))["square_beats_white_box"] is False
    # AutoAttack's alpha: 0.2% of the samples; one of 1000 is within it
    assert flags_of(cells.assign(n_attack=1000))["square_beats_white_box"] is False
    at_the_alpha = cells.assign(n_attack=1000, n_broken_by_square=[0, 2, 0])  # 2 of 1000 is the alpha itself: not above it
    assert flags_of(at_the_alpha)["square_beats_white_box"] is False
    # metrics.validity.square_tol sets the share
    two = cells.assign(n_broken_by_square=[0, 2, 0])
    for settings, tripped in ((OmegaConf.merge(SETTINGS, {"square_tol": 0.05}), False), (SETTINGS, True)):
        row = validity.validity_table(two, eps_curves(two), settings).iloc[0]
        assert bool(row["square_beats_white_box"]) is tripped, settings
    without = flags_of(curve_cells({"pgd": [0.5, 0.2, 0.0]}))  # no AutoAttack cell: not checked
    assert without["square_beats_white_box"] is None
    assert without["square_beats_white_box_detail"] == "not checked: no AutoAttack cell with Square (attack autoattack, version standard)"


def two_model_cells(attack: str, **columns) -> pd.DataFrame:
    """Model cells m and n, each with `attack` at three eps, one attack_hash per attack cell."""
    cells = pd.concat(
        [curve_cells({attack: [0.5, 0.2, 0.0]}), curve_cells({attack: [0.5, 0.2, 0.0]}).assign(model_hash="n", train_hash="n")], ignore_index=True
    )
    return cells.assign(attack_hash=[f"{model}{i}" for i, model in enumerate(cells["model_hash"])], **columns)


def test_each_model_cell_reads_the_budget_check_of_its_own_attack_cells_at_the_configured_share():
    """A rerun cell trips on its observed share, another on its estimate's lower bound, not
    its point: an estimate of 3% whose interval reaches down to 0.5% does not trip at 2%."""
    cells = two_model_cells("pgd")
    point = {"m0": 0.01, "m1": 0.03, "m2": 0.0, "n3": 0.0, "n4": 0.01, "n5": 0.015}
    low = {"m0": 0.0, "m1": 0.025, "m2": 0.0, "n3": 0.0, "n4": 0.0, "n5": 0.005}
    sufficiency = pd.DataFrame(
        {
            "attack_hash": list(point),
            "attack_family": "pgd linf",
            "attack_value": [0.1, 0.2, 0.3] * 2,
            "samples": 100,
            "factor": 10.0,
            "observed": np.nan,
            "still_breakable": list(point.values()),
            "still_breakable_low": list(low.values()),
            "still_breakable_high": 0.05,
        }
    )

    def budget_flags(settings, table=sufficiency):
        rows = validity.validity_table(cells, eps_curves(cells), settings, table).set_index("model_hash")
        return {
            m: (None if pd.isna(rows.loc[m, "budget_too_small"]) else bool(rows.loc[m, "budget_too_small"]), rows.loc[m, "budget_too_small_detail"])
            for m in "mn"
        }

    flags = budget_flags(SETTINGS)
    assert flags["m"] == (True, "pgd linf eps 0.2: a budget 10x larger would break 3.0% more (95% 2.5% to 5.0%) of 100 samples")
    assert flags["n"][0] is False and "1.5% more" in flags["n"][1]  # n's own worst cell, not m's
    assert {m: f[0] for m, f in budget_flags(OmegaConf.merge(SETTINGS, {"budget_share": 0.004})).items()} == {"m": True, "n": True}
    assert {m: f[0] for m, f in budget_flags(OmegaConf.merge(SETTINGS, {"budget_share": 0.025})).items()} == {"m": False, "n": False}
    rerun = sufficiency.assign(observed=np.where(sufficiency["attack_hash"] == "n5", 0.04, np.nan))
    assert budget_flags(SETTINGS, rerun)["n"] == (True, "pgd linf eps 0.3: its rerun at a budget 10x larger broke 4.0% more of 100 samples")
    assert budget_flags(SETTINGS, None)["m"] == (None, "not checked: no budget/sufficiency.csv (run the budget stage)")
    uncalibrated = sufficiency.assign(still_breakable=np.nan, still_breakable_low=np.nan)
    assert budget_flags(SETTINGS, uncalibrated)["n"][0] is None and "no calibrated attack cell" in budget_flags(SETTINGS, uncalibrated)["n"][1]


def test_each_model_cell_reads_the_competing_risks_of_its_own_composite_cells():
    cells = two_model_cells("autoattack", black_box_components="square")
    rows = []
    for cell, square in (("m1", 6), ("n4", 1)):
        for order, (component, broken) in enumerate((("apgd_ce", 3), ("square", square)), start=1):
            rows.append({"attack_hash": cell, "component": component, "order": order, "broken": broken, "samples": 100})
    table = validity.validity_table(cells, eps_curves(cells), SETTINGS, None, pd.DataFrame(rows)).set_index("model_hash")
    assert bool(table.loc["m", "black_box_carries"]) is True and "black_box_carries" in table.loc["m", "flags"]
    assert table.loc["m", "black_box_carries_detail"] == "square broke 6 of 100 samples at autoattack eps 0.2; the white-box components before it: apgd_ce 3"
    assert bool(table.loc["n", "black_box_carries"]) is False and table.loc["n", "black_box_carries_detail"].startswith("square broke 1 of 100")
    unread = validity.validity_table(cells, eps_curves(cells), SETTINGS).set_index("model_hash")
    assert (
        unread["black_box_carries"].isna().all()
        and (unread["black_box_carries_detail"] == "not checked: no competing_risks.csv (rerun the survival stage)").all()
    )
