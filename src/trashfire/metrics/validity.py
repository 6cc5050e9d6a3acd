"""Validity flags per model cell: signs that an evaluation is fooled rather than the model
robust (Carlini et al. 2019's checklist; Athalye et al. 2018 on obfuscated gradients; Croce &
Hein 2020's AutoAttack flags). Each flag is true, false, or missing where this run cannot
check it (the detail says why), and comes with a sentence of what was seen:

- `non_monotone`: accuracy rises with eps on some attack family's curve (benign point at
  eps = 0 included) by more than `rise_tol`. A stronger attack can never do worse; the attack
  is failing to optimise (e.g. FGM overshooting) or the defence is randomised.
- `black_box_stronger`: at one norm and eps, a black-box attack leaves lower accuracy than
  every white-box one, by more than `black_box_tol`: the gradients mislead the white-box
  attacks (gradient masking). Which attacks are black-box the experiments table says (its
  `black_box` column: the attack's option, else ART's declaration of its class); where it
  does not know an attack's kind, this flag and `largest_eps_not_breaking` are not checked.
- `gradients_masked`: more than `gradient_share` of the samples have zero or non-finite
  input gradients through the defence (obfuscated gradients).
- `randomised`: repeated queries of the same images change the output scores: one attack run
  is one draw, and EOT would be needed; the labels that flip and the accuracy's SD over the
  repeats say by how much.
- `largest_eps_not_breaking`: the strongest white-box eps attack at its largest eps leaves
  more than `near_zero` accuracy. An unbounded attack must reach about zero; when it does
  not, the grid stops short of it or the attack is being masked.
- `softmax_output`: the model returns probabilities, not logits (AutoAttack's
  check_range_output): the margins, the DLR loss and CE on saturated scores mislead.
- `dynamic`: one forward pass computes gradients (AutoAttack's check_dynamic): a defence that
  optimises at inference, which a fixed-budget attack may not evaluate fairly.
- `square_beats_white_box`: in an AutoAttack cell, Square (black-box, run last) broke more
  than `square_tol` of the samples that APGD and FAB left standing (AutoAttack's
  check_square_sr): the gradients mislead the white-box components.
- `budget_too_small`: in some attack cell, a budget `budget.factor` (10) times larger
  breaks more than `budget.share` of its samples beyond those broken (reports/budget/
  sufficiency.csv, the `budget` stage's): its calibration rerun's observed share where the
  stage reran it, else where the lower bound of the 95% interval of its estimate exceeds the
  share: the robust accuracy is an upper bound that more iterations or queries would lower.
  One-step attacks, and attacks the stage did not calibrate, are not checked per model cell;
  an uncalibrated black-box search of too few iterations is flagged once for its family
  (reports/budget/families.csv).
- `black_box_carries`: in a composite's cell (AutoAttack), a black-box component (Square; the
  experiments table's `black_box_components`) broke more samples than the white-box components
  that ran before it together (reports/survival/competing_risks.csv): the black-box search
  carries the evaluation, where gradients should have done most of the work (gradient masking).
- `attack_far_from_best`: some attack of at least MIN_SAMPLES samples and more than one step
  (FGM is not an optimiser: it is ranked, not judged) has an optimality
  (trashfire.metrics.optimality: AttackBench's, against the ensemble of every attack of its
  norm) below `metrics.optimality.far_below`: its robust accuracy overstates the model's by
  more than the other attacks show it has to.
- `attacked_above_certified`: for a randomized-smoothing cell (Gauss-in, the `certify` stage's
  certified.csv), at some l2 eps its n draws can certify, the attacked accuracy of the smoothed
  classifier exceeds its certified accuracy by more than `bracket_tol`: the truth lies somewhere
  in a bracket that wide, and the attacks may be weak. Other defences have no certificate: not
  checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from trashfire.core import schema
from trashfire.core.groups import ByKey
from trashfire.core.schema import FIRST_QUERY

MEANINGS = {
    "non_monotone": "robust accuracy rises with eps",
    "black_box_stronger": "a black-box attack beats every white-box one at the same budget: gradient masking suspected",
    "gradients_masked": "zero or non-finite input gradients on a share of samples: obfuscated gradients",
    "randomised": "the output scores change across repeated queries: one attack run is one draw, EOT needed",
    "largest_eps_not_breaking": "the strongest attack at its largest eps does not drive accuracy near zero",
    "softmax_output": "the model returns probabilities, not logits: margin and DLR-based attacks are misled",
    "dynamic": "the model computes gradients while it predicts: a defence that optimises at inference",
    "square_beats_white_box": "in AutoAttack, Square broke samples its white-box components left standing: gradient masking suspected",
    "budget_too_small": "a larger attack budget would still break samples: the robust accuracy overstates the model's",
    "black_box_carries": "in a composite, a black-box component broke more samples than the white-box ones before it: gradient masking suspected",
    "attack_far_from_best": "an attack's perturbations are far larger than the best any attack of its norm found (optimality below the threshold)",
    "attacked_above_certified": "the smoothed classifier's attacked accuracy exceeds its certified accuracy by more than the tolerance: a wide bracket",
}
MIN_SAMPLES = 10  # attack_far_from_best: an attack of fewer samples (a black-box search's 5) says too little
Check = tuple[Any, str]  # (True, False or None when not checked; the detail)


# accuracies and shares are counts over samples (1 - k/n): a difference of exactly "2 of 100"
# computes as 0.020000000000000018 or 0.019999999999999997 as the two accuracies' values fall,
# so a tolerance of 0.02 ("more than 2 of 100") is compared with this much slack (issue 58)
SHARE_ROUNDING = 1e-9


def non_monotone(curves: pd.DataFrame, rise_tol: float) -> Check:
    """The largest rise of accuracy over its running minimum along eps, over the cell's curves."""
    if curves.empty:
        return None, "not checked: no eps attack family"
    worst = None
    families, acc_all, eps_all = curves["attack_family"].to_numpy(), curves["acc"].to_numpy(float), curves["eps"].to_numpy(float)
    names = sorted(set(families[pd.notna(families)]))  # groupby's families, without a frame each
    for family in names:
        mine = families == family
        acc, eps = acc_all[mine], eps_all[mine]
        floor = np.minimum.accumulate(acc)
        rise = acc - floor
        j = int(np.argmax(rise))
        if worst is None or rise[j] > worst[0]:
            i = int(np.flatnonzero(acc[: j + 1] == floor[j])[0])
            worst = (rise[j], f"{family}: {acc[i]:.2f} at eps {eps[i]:g} -> {acc[j]:.2f} at eps {eps[j]:g}")
    if worst[0] > rise_tol + SHARE_ROUNDING:
        return True, worst[1]
    return False, f"no rise above {rise_tol:g} over {len(names)} curve(s)"


def black_box_stronger(rows: pd.DataFrame, black_box: list[str], tol: float) -> Check:
    """Per budget (norm, eps) the cell was attacked at by both kinds on the same number of
    samples (the black-box attacks often run on a class-balanced part of the subset, and
    accuracies on different samples do not compare): the best black-box accuracy against
    the best white-box one. A composite (engine `sequence`, AutoAttack) is neither kind."""
    engine = rows["engine"].to_numpy() if "engine" in rows else np.full(len(rows), "")
    eps = (rows["attack_param"].to_numpy() == "eps") & (engine != "sequence")
    budget = np.round(rows["attack_value_standardised"].to_numpy(float), 9)
    n = rows["n_attack"].to_numpy() if "n_attack" in rows else np.zeros(len(rows), dtype=int)
    keys, acc, black_rows = list(zip(rows["norm"].to_numpy(), budget, n)), rows["acc_adv"].to_numpy(float), rows["attack"].isin(black_box).to_numpy()
    black, white = _lowest(keys, acc, eps & black_rows), _lowest(keys, acc, eps & ~black_rows)
    shared = sorted(set(black) & set(white))  # groupby's order: the keys sorted
    if not shared:
        return None, "not checked: no black-box attack shares a norm, eps and sample count with a white-box one (add square at a white-box grid and samples)"
    gap = pd.Series([white[k] - black[k] for k in shared]).sort_values(ascending=False)  # pandas' sort: its order among ties
    (norm, budget, n), worst = shared[gap.index[0]], gap.iloc[0]
    seen = f"at norm {norm}, eps {budget:g} (standardised), {n} samples: black-box {black[(norm, budget, n)]:.2f}, white-box {white[(norm, budget, n)]:.2f}"
    return bool(worst > tol + SHARE_ROUNDING), seen


def _lowest(keys: list[tuple], values: np.ndarray, chosen: np.ndarray) -> dict[tuple, float]:
    """groupby(keys).min() of the chosen rows' values as a dict: NaN values left out of a
    group's minimum, rows with a missing key out of every group."""
    lowest: dict[tuple, float] = {}
    for key, value, take in zip(keys, values, chosen):
        if take and not any(pd.isna(part) for part in key):
            lowest[key] = np.fmin(lowest.get(key, np.nan), value)  # fmin: NaN gives way to a number
    return lowest


def gradients_masked(first: pd.Series, share: float) -> Check:
    zero, nonfinite = _number(first.get("grad_zero_share")), _number(first.get("grad_nonfinite_share"))
    if np.isnan(zero) or np.isnan(nonfinite):
        return None, "not checked: the benign record has no gradient probe (rerun the attack stage)"
    seen = f"{zero:.0%} of samples with zero and {nonfinite:.0%} with non-finite input gradients"
    return bool(zero + nonfinite > share + SHARE_ROUNDING), seen


def randomised(first: pd.Series, output_tol: float = 1e-5) -> Check:
    """Scores that change between queries of the same images (beyond float noise) mark a
    randomised model; the label flips and the accuracy's spread say how much it matters."""
    change, flips, sd, spread = (_number(first.get(c)) for c in ("query_output_change", "query_flip_share", "acc_query_sd", "acc_query_range"))
    if np.isnan(change):
        return None, "not checked: the benign record has no repeated-query probe (rerun the attack stage)"
    repeats = int(_number(first.get("query_repeats")))
    if change <= output_tol:
        return False, f"the same scores over {repeats} queries"
    return True, (
        f"scores change by up to {change:.3g} over {repeats} queries; {flips:.0%} of samples change label, "
        f"accuracy SD {sd:.3f}, range {spread:.2f}: one attack run is one draw, evaluate with EOT"
    )


def softmax_output(first: pd.Series) -> Check:
    value = first.get("output_probability")
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None, "not checked: the benign record has no output probe (rerun the attack stage)"
    if str(value).lower() == "true":
        return True, "every score in [0, 1] and each row sums to 1: the attacks need the logits"
    return False, "the outputs are not a probability distribution (logits)"


def dynamic(first: pd.Series) -> Check:
    calls = _number(first.get("gradient_calls"))
    if np.isnan(calls):
        return None, "not checked: the benign record has no dynamic probe (rerun the attack stage)"
    return bool(calls > 0), f"{int(calls)} gradient call(s) within one forward pass"


def square_beats_white_box(rows: pd.DataFrame, tol: float) -> Check:
    """The largest share of an AutoAttack cell's samples that only Square broke."""
    present = rows["n_broken_by_square"].notna().to_numpy() if "n_broken_by_square" in rows else np.zeros(len(rows), dtype=bool)
    if not present.any():
        return None, "not checked: no AutoAttack cell with Square (attack autoattack, version standard)"
    cells = rows[present]
    shares = cells["n_broken_by_square"].astype(float) / cells["n_attack"].astype(float)
    worst = cells.loc[shares.idxmax()]
    seen = f"Square broke {int(worst['n_broken_by_square'])} of {int(worst['n_attack'])} samples at {worst['attack']} eps {worst['attack_value']:g}"
    return bool(shares.max() > tol), seen


def budget_too_small(sufficiency: pd.DataFrame | None, share: float) -> Check:
    """The attack cell of this model cell (budget/sufficiency.csv's rows) where a larger budget
    breaks the most: tripped where its rerun observed more than `share`, or, not rerun, where
    its estimate's lower bound exceeds `share`."""
    if sufficiency is None:
        return None, "not checked: no budget/sufficiency.csv (run the budget stage)"
    observed = sufficiency["observed"].to_numpy(float) if "observed" in sufficiency else np.full(len(sufficiency), np.nan)
    breakable = sufficiency["still_breakable"].to_numpy(float)
    known = np.flatnonzero(~np.isnan(observed) | ~np.isnan(breakable))
    if not len(known):
        return None, "not checked: no calibrated attack cell (budget.calibrate; one-step attacks have no budget to multiply)"
    rerun = ~np.isnan(observed[known])
    shares = np.where(rerun, observed[known], breakable[known])
    tripped = np.where(rerun, shares, sufficiency["still_breakable_low"].to_numpy(float)[known]) > share
    best = int(np.argmax(shares))  # idxmax's: the first of the largest
    worst, largest = sufficiency.iloc[known[best]], shares[best]
    value = worst.get("attack_value", np.nan)
    where = f"{worst['attack_family']}" + ("" if pd.isna(value) else f" eps {value:g}")
    if pd.notna(worst.get("observed", np.nan)):
        seen = f"{where}: its rerun at a budget {worst['factor']:g}x larger broke {largest:.1%} more of {int(worst['samples'])} samples"
    else:
        seen = (
            f"{where}: a budget {worst['factor']:g}x larger would break {worst['still_breakable']:.1%} more "
            f"(95% {worst['still_breakable_low']:.1%} to {worst['still_breakable_high']:.1%}) of {int(worst['samples'])} samples"
        )
    return bool(tripped.any()), seen


def black_box_carries(rows: pd.DataFrame, competing: pd.DataFrame | None) -> Check:
    """The composite cell where a black-box component's failures most exceed those of the
    white-box components before it (competing_risks.csv's rows, in the composite's order)."""
    components = rows["black_box_components"].to_numpy() if "black_box_components" in rows else np.full(len(rows), "")
    composites = rows[np.array([pd.notna(c) and str(c) != "" for c in components], dtype=bool)]
    if composites.empty:
        return None, "not checked: no composite cell with a black-box component (AutoAttack standard)"
    if competing is None:
        return None, "not checked: no competing_risks.csv (rerun the survival stage)"
    worst = None
    for cell in composites.itertuples():
        black = set(str(cell.black_box_components).split(","))
        part = competing[competing["attack_hash"] == cell.attack_hash].sort_values("order")
        for row in part[part["component"].isin(black)].itertuples():
            white = part[(part["order"] < row.order) & ~part["component"].isin(black | {FIRST_QUERY})]
            excess = int(row.broken) - int(white["broken"].sum())
            if worst is None or excess > worst[0]:
                before = ", ".join(f"{w.component} {int(w.broken)}" for w in white.itertuples()) or "none"
                worst = (
                    excess,
                    f"{row.component} broke {int(row.broken)} of {int(row.samples)} samples at {cell.attack} eps {cell.attack_value:g}; the white-box components before it: {before}",
                )
    if worst is None:
        return False, "no black-box component broke a sample"
    return bool(worst[0] > 0), worst[1]


def one_step_families(experiments: pd.DataFrame) -> list[str]:
    """Attack families that take one step (FGM: at most one gradient and two queries per
    sample in every cell): not optimisers, so never judged far from the best (only ranked)."""
    if experiments.empty or "gradients_mean" not in experiments:
        return []
    most = experiments.groupby("attack_family")[["gradients_mean", "queries_mean"]].max()
    return sorted(most.index[(most["gradients_mean"] <= 1) & (most["queries_mean"] <= 2)])


def attack_far_from_best(optimality: pd.DataFrame | None, far_below: float | None, one_step: list[str] | None = None) -> Check:
    """The attack of this model cell (optimality.csv's rows) farthest from the ensemble's best,
    of those with MIN_SAMPLES samples or more and more than one step."""
    if optimality is None or far_below is None:
        return None, "not checked: no optimality table (metrics.optimality)"
    value = optimality["optimality"].to_numpy(float)
    checked = np.flatnonzero(~optimality["attack_family"].isin(one_step or []).to_numpy() & (optimality["n"].to_numpy() >= MIN_SAMPLES) & ~np.isnan(value))
    if not len(checked):
        return None, f"not checked: no norm with two or more attacks of {MIN_SAMPLES} or more samples"
    ranked = checked[np.argsort(value[checked], kind="stable")]
    families = optimality["attack_family"].to_numpy()
    seen = "; ".join(f"{families[i]} {value[i]:.2f}" for i in ranked)
    return bool(value[ranked[0]] < far_below), f"optimality against the ensemble of its norm: {seen} (threshold {far_below:g})"


def certifiable_radius(sigma: float, alpha: float, n: int) -> float:
    """The largest l2 radius (standardised) n draws can certify at level alpha: every draw on
    the top class gives pA_lower = alpha^(1/n), radius sigma * Phi^-1 of it."""
    from scipy.stats import norm

    return float(sigma * norm.ppf(alpha ** (1 / n)))


def attacked_above_certified(certified: pd.DataFrame | None, tol: float) -> Check:
    """This model cell's rows of certified.csv (none: no certificate) at the eps its draws can
    certify: the widest bracket (attacked - certified)."""
    if certified is None or certified.empty:
        return None, "not checked: no certificate (randomized smoothing certifies a model trained with Gaussian noise, gauss_in, with certify.enabled)"
    reach = [certifiable_radius(float(r.defence_value), float(r.alpha), int(r.n)) for r in certified.itertuples()]
    within = certified[certified["eps_standardised"].to_numpy(float) < np.asarray(reach)]
    if within.empty:
        return None, f"not checked: every eps is beyond what n = {int(certified['n'].iloc[0])} draws can certify"
    widest = within.loc[within["bracket"].idxmax()]
    seen = "; ".join(f"eps {r.eps:g}: certified {r.certified_acc:.2f}, attacked {r.attacked_acc:.2f}" for r in within.itertuples())
    return bool(widest["bracket"] > tol + SHARE_ROUNDING), f"{seen} (l2, pixel units; tolerance {tol:g})"


def largest_eps_not_breaking(curves: pd.DataFrame, black_box: list[str], near_zero: float) -> Check:
    eps = curves["eps"].to_numpy(float)
    white = np.flatnonzero(~curves["attack"].isin(black_box).to_numpy() & (eps > 0))
    if not len(white):
        return None, "not checked: no white-box eps attack family"
    white = white[np.argsort(eps[white], kind="stable")]
    families, acc = curves["attack_family"].to_numpy(), curves["acc"].to_numpy(float)
    last = {families[i]: rank for rank, i in enumerate(white) if pd.notna(families[i])}  # each family's last row by eps
    tails = white[sorted(last.values())]
    tails = tails[np.argsort(acc[tails], kind="stable")]
    seen = "; ".join(f"{families[i]} {acc[i]:.2f} at eps {eps[i]:g}" for i in tails)
    return bool(acc[tails[0]] > near_zero), f"accuracy at the largest eps: {seen}"


def attack_kinds(experiments: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The attacks the table marks black-box, and those whose kind it does not know (no
    `black_box` column, or an empty value: a declaration the attack stage has not recorded)."""
    if experiments.empty:
        return [], []
    stated = experiments.drop_duplicates("attack").set_index("attack").get("black_box", pd.Series(np.nan, index=experiments["attack"].unique()))
    text = stated.map(lambda value: str(value).lower())
    return sorted(text.index[text == "true"]), sorted(text.index[~text.isin(["true", "false"])])


def validity_table(
    experiments: pd.DataFrame,
    curves: pd.DataFrame,
    settings,
    sufficiency: pd.DataFrame | None = None,
    competing: pd.DataFrame | None = None,
    optimality: pd.DataFrame | None = None,
    far_below: float | None = None,
    certified: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per model cell: each flag, its detail, and the tripped flags by name.
    `sufficiency` and `competing`: the survival stage's budget_sufficiency.csv and
    competing_risks.csv, None where it wrote none; `optimality`: optimality.csv's rows and
    `far_below` its threshold; `certified`: the certify stage's certified.csv."""
    black_box, unknown = attack_kinds(experiments)
    one_step = one_step_families(experiments)
    unchecked = (None, f"not checked: the experiments table does not say whether {', '.join(unknown)} is black-box (rerun the attack stage)")
    tol = _tolerances(settings) if len(experiments) else {}  # read once, where there is a cell to check
    # each table's rows per model cell, found by lookup (a filter per cell grows with the square of the cells)
    own_curves, own_optimality, own_certified = (ByKey(t, "model_hash") if t is not None else None for t in (curves, optimality, certified))
    own_sufficiency, own_competing = (ByKey(t, t["attack_hash"].map(_owners(experiments))) if t is not None else None for t in (sufficiency, competing))
    # the columns the checks read, so that a cell's rows are a narrow frame (experiments.csv has ~80)
    cells = ByKey(experiments[[c for c in experiments.columns if c in CELL_COLUMNS]], "model_hash")
    firsts = experiments.drop_duplicates("model_hash")
    firsts = firsts[[c for c in firsts.columns if c in FIRST_COLUMNS]].set_index(firsts["model_hash"])
    rows = []
    for model_hash in experiments["model_hash"].dropna().unique():  # groupby(sort=False)'s order
        cell, first, mine = cells.rows(model_hash), firsts.loc[model_hash], own_curves.rows(model_hash)
        checks = {
            "non_monotone": non_monotone(mine, tol["rise_tol"]),
            "black_box_stronger": unchecked if unknown else black_box_stronger(cell, black_box, tol["black_box_tol"]),
            "gradients_masked": gradients_masked(first, tol["gradient_share"]),
            "randomised": randomised(first),
            "largest_eps_not_breaking": unchecked if unknown else largest_eps_not_breaking(mine, black_box, tol["near_zero"]),
            "softmax_output": softmax_output(first),
            "dynamic": dynamic(first),
            "square_beats_white_box": square_beats_white_box(cell, tol["square_tol"]),
            "budget_too_small": budget_too_small(_rows(own_sufficiency, model_hash), tol["budget_share"]),
            "black_box_carries": black_box_carries(cell, _rows(own_competing, model_hash)),
            "attack_far_from_best": attack_far_from_best(_rows(own_optimality, model_hash), far_below, one_step),
            "attacked_above_certified": attacked_above_certified(_rows(own_certified, model_hash), tol["bracket_tol"]),
        }
        row = {column: first.get(column) for column in schema.MODEL_CELL + ["train_hash", "degenerate"]}
        row["flags"] = ", ".join(name for name, (tripped, _) in checks.items() if tripped is True)
        for name, (tripped, detail) in checks.items():
            row[name], row[f"{name}_detail"] = tripped, detail
        rows.append(row)
    return pd.DataFrame(rows, columns=schema.VALIDITY)


# what the checks read of a model cell's attack cells (its rows of experiments.csv) and of its first row
CELL_COLUMNS = {"model_hash", "attack", "attack_param", "attack_value", "attack_value_standardised", "acc_adv", "norm", "engine", "n_attack"} | {
    "n_broken_by_square",
    "black_box_components",
    "attack_hash",
}
PROBES = {"grad_zero_share", "grad_nonfinite_share", "query_output_change", "query_flip_share", "acc_query_sd", "acc_query_range", "query_repeats"}
FIRST_COLUMNS = {*schema.MODEL_CELL, "train_hash", "degenerate", "output_probability", "gradient_calls"} | PROBES
TOLERANCES = ("rise_tol", "black_box_tol", "gradient_share", "near_zero", "square_tol", "budget_share", "bracket_tol")


def tolerances(cfg) -> dict[str, float]:
    """The flags' tolerances of a config: metrics.validity's (conf/metrics/default.yaml) and
    the budget stage's share (budget.share, conf/budget/default.yaml)."""
    return {**OmegaConf.to_container(cfg.metrics.validity), "budget_share": cfg.budget.share}


def _tolerances(settings) -> dict[str, float]:
    """The tolerances the flags read (a config's item costs more to read than a check)."""
    return {name: settings[name] for name in TOLERANCES}


def _owners(experiments: pd.DataFrame) -> pd.Series:
    """The model cell of each attack cell, by attack hash."""
    return experiments.drop_duplicates("attack_hash").set_index("attack_hash")["model_hash"]


def _rows(table: ByKey | None, model_hash: str) -> pd.DataFrame | None:
    return None if table is None else table.rows(model_hash)


def validity_summary(validity: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per flag, over the sound (not degenerate) model cells: how many were checked and how
    many tripped it."""
    sound = validity[~validity["degenerate"].astype(str).str.lower().eq("true")]
    return {
        name: {"tripped": int((sound[name] == True).sum()), "checked": int(sound[name].notna().sum())}  # noqa: E712  (object column of True/False/None)
        for name in schema.VALIDITY_FLAGS
    }


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
