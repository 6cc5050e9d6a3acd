"""The prose of the report: each figure's title, what it shows and how to read it, in the
order the report shows them, and how to read each folded table."""

from __future__ import annotations

from pathlib import Path

# Every figure as (title, what it shows, how to read it), in the order the report shows them:
# the cost ratio first (the headline), then accuracy, EVP, R, brittleness, the survival model.
CAPTIONS = {
    "trash_by_depth_and_defence": (
        "TRASH by depth, defence and attack family (TRASHFIRE Fig. 4)",
        "TRASH score (training time over expected time to failure) by model depth and defence, benign and adversarial, and adversarial by attack family, on "
        "a log axis; violins over cells, the cells as dots, or as a box of their quartiles (white: the median) where a panel has too many to draw one by one.",
        "points above the dashed red line at 1 are models cheaper to break than to train; a defence that works sits lower than the undefended violin; a rise "
        "with depth means training cost grows faster than the adversary's.",
    ),
    "accuracy_by_attack_and_defence": (
        "Accuracy by defence and attack family (TRASHFIRE Fig. 1)",
        "Benign accuracy by defence, adversarial accuracy by defence and by attack family: violins over cells (the cells as dots, or where a panel has too "
        "many to draw one by one a box of their quartiles, white: the median), diamonds the pooled accuracy over every "
        "attacked sample with its 95% Wilson interval. The family worst_case counts a sample as robust only if none of its model cell's attacks at that "
        "norm and eps broke it.",
        "the drop from the benign panel to the adversarial ones is what the attacks take; a defence helps where its adversarial violin sits above the "
        "undefended one; diamonds whose intervals do not overlap differ beyond sampling noise.",
    ),
    "accuracy_eps_curves": (
        "Accuracy against attack strength eps (normalised-AUC paper Fig. 2, 4)",
        "Accuracy (top) and accuracy normalised by the benign accuracy (bottom) against eps in pixel units, mean over seeds with a ±1 SD band; the shaded "
        "interval is the one R integrates over. The worst_case panels take, per sample, every attack of the cell at that norm and eps.",
        "a curve that stays high for longer is more robust; the bottom row removes differences in benign accuracy, and the area under it over the shaded "
        "interval, relative to the interval, is R.",
    ),
    "accuracy_vs_queries": (
        "Robust accuracy against the attack's work (AttackBench's accuracy against queries)",
        "Per data set and norm, at one eps (pixel units), each attack family's robust accuracy after p forward queries plus input gradients per sample, "
        "the mean over the undefended model cells, read off the per-sample clocks: a fixed-eps attack's cell at that eps; a minimal-norm attack (FMN, DDN) "
        "from the step at which its smallest norm first fell to that eps; an image-by-image search from the passes it had spent when it ended.",
        "a curve that falls sooner breaks samples with less work; where it ends is the attack's robust accuracy at its budget; a minimal-norm attack "
        "is not told the eps, so it reaches a given eps later than an attack aimed at it but reads every eps from one run.",
    ),
    "eps_survival_curves": (
        "Survival in ε: the share of samples still standing against the perturbation size",
        "Kaplan-Meier estimate of the share of attacked samples not yet broken against ε, one panel per data set and attack family, one line per model cell "
        "(mean over seeds). Grid families (FGM, PGD): each sample's smallest grid ε that broke it, in the attack's units, points at the grid's ε; "
        "minimal-perturbation attacks (DeepFool): the norm of each sample's adversarial example, in its own norm and units, as steps. The legend gives each "
        "line's normalised area up to the panel's largest ε.",
        "a line that stays high for longer withstands larger perturbations; its area over the panel's ε range is the table's `area` (1: nobody breaks); a "
        "start below 1 at ε = 0 is the samples wrong before any perturbation; linf grid and l2 DeepFool panels are in different norms and do not compare "
        "across panels.",
    ),
    "eps_survival_vs_evp_r": (
        "Area under the ε-survival curve against EVP and R",
        "Per eps attack family (rows), the normalised area under each model cell's ε-survival curve against its EVP (left) and R (right), one colour per "
        "defence, with Spearman's rank correlation over the sound model cells. Where a panel has too many cells to draw one by one, a grey density "
        "(hexbin, log counts) shows where they lie and each defence is its median with bars over the quartiles of each axis.",
        "all three come from one attack grid, so a strong positive ρ is expected; points below the trend are cells whose accuracy curve overstates them "
        "(samples broken at a small ε but standing at a larger one: the table's n_nonmonotone), and a negative ρ would be a finding to explain.",
    ),
    "evp_vs_tau": (
        "EVP against the viability threshold τ (EVP paper Fig. 7)",
        "Expected viable performance against the viability threshold tau, one line per model cell (mean over seeds); the dotted line is the default tau(K) "
        "of the data set.",
        "read each line at the dotted default τ: higher means viable accuracy against stronger attacks; lines that cross rank the models differently at "
        "different thresholds.",
    ),
    "evp_convergence": (
        "EVP against the number of eps intervals (EVP paper Fig. 8)",
        "EVP on nested sub-grids of the recorded eps grid against the number of eps intervals.",
        "a line flat at its right end means the eps grid is fine enough for that EVP; a line still moving there means a finer grid would change it.",
    ),
    "brittle_vs_robust_acc": (
        "Brittle-score against robust accuracy (brittle-score paper Fig. 4)",
        "Brittle-score against robust accuracy, one colour per defence, with Spearman's rank correlation per data set over the trained models (filled); "
        "predict-time defences (hollow) wrap a trained model's outputs and are outside the paper's claim. Where a panel has too many model cells to draw "
        "one by one, a grey density (hexbin, log counts) shows where they lie and each defence is its median with bars over the quartiles of each axis; "
        "every cell is in the brittle table below.",
        "the paper expects the filled points to fall from top left to bottom right (ρ < 0); a ρ near 0 or a large p means no such relation in this run; "
        "hollow points far left of their model's filled point are a wrapper that lowers the brittle-score without adding robustness.",
    ),
    "kaplan_meier": (
        "Kaplan-Meier survival per attack family and defence",
        "Kaplan-Meier survival of the attacked samples per attack family and defence (solid) and the selected survival model's predicted survival of the "
        "same samples (dashed).",
        "each curve is the share of samples not yet misclassified after that much adversary compute; lower and further left is broken sooner; dashed close "
        "to solid means the survival model behind E[T] fits.",
    ),
    "coefficients": (
        "Coefficients of the selected survival model (TRASHFIRE Fig. 3)",
        "Coefficients of the selected survival model with 95% intervals, thick cluster-robust (clusters: the train/test split's groups, trained models by "
        "default), thin naive.",
        "an interval clear of 0 is an effect beyond noise; above 0 a longer time to failure (more robust), below 0 a shorter one; dummies are against their "
        "reference level, covariates per +1 SD.",
    ),
    "calibration": (
        "Calibration of every survival model (TRASHFIRE Fig. 2)",
        "Calibration of every survival model on the training split, and of the selected one on the test split: observed against predicted failure probability.",
        "a red curve on the dashed diagonal is perfectly calibrated; above it the model predicts too few failures, below it too many; ICI is the mean "
        "distance from the diagonal, and the selected model's test panel is the one that counts (the others are not scored on the test split).",
    ),
    "competing_risks": (
        "Which component of a composite breaks the samples (competing risks)",
        "Cumulative incidence of failure by the component that broke each sample (Aalen-Johansen), per attack family and defence, pooled over its "
        "cells, stacked in the composite's order; first_query is the samples wrong before any component ran.",
        "the top edge is the failure share; the first gradient component (APGD-CE) should carry most of it; a wide band of Square, a black-box "
        "component, above the white-box ones means their gradients mislead them (the validity flag black_box_carries).",
    ),
}

# How to read each folded table of the report
TABLE_CAPTIONS = {
    "worst_case": (
        "the headline robust accuracy: per model cell, norm and eps, a sample counts as robust only if no attack at that norm and eps broke it "
        "(AutoAttack's rule over the whole grid). carried_by names the single attack with the lowest robust accuracy (ties list every one); "
        "beyond_carrier counts the samples it left standing that another attack broke; beside them, each attack's own robust accuracy."
    ),
    "tau": (
        "τ(K) is the accuracy a K-class model must keep to count as viable (Cohen's w against chance 1/K); EVP counts accuracy only while it is at least τ."
    ),
    "trash": (
        "one row per model cell and attack family; TRASH = t_train / E[T] as the geometric mean [95% t interval of its log over seeds, the trained models]; above 1 the attack costs less than "
        "training; f is failures per unit of the clock (per second, or per FLOP on the compute clock)."
    ),
    "trash_clocks": (
        "median TRASH over seeds and strengths on each clock: trash_adv_flops divides training FLOPs by the FLOPs spent until failure (the model's work: the "
        "same on any machine); the process and wall columns divide seconds by seconds, this machine's prices of the same work, so only they change between "
        "machines."
    ),
    "depth": (
        "per depth of the undefended models: E_Q, the queries to failure per sample (restricted to the budget: what the model resists), beside the latency "
        "per query in FLOPs and in seconds (what each query costs); E_T on each clock is roughly their product. TRASHFIRE says deeper models gain in E[T] "
        "through latency, not through queries (finding 003_depth_latency_not_queries)."
    ),
    "auc": (
        "one row per model cell and attack family; R is the area under normalised accuracy over the eps interval (1 no loss, 0 lost at once), S = 1 − R, "
        "mean ± SD over seeds."
    ),
    "robustness": (
        "one row per trained seed, model cell and eps attack family; auc_R is the R of the table above for one seed; `note` says why a value is missing or "
        "only a lower bound. Per curve:"
    ),
    "brittle": (
        "one row per model cell; a higher brittle-score means larger LIME weights per superpixel; R.I. is the % by which it is below the undefended model's; "
        "robust_acc is the accuracy under the named attack."
    ),
    "survival": (
        "one row per survival model and the two baselines; lower AIC/BIC fit better; concordance (Harrell's and Uno's C) 0.5 is a coin toss, 1 perfect; "
        "ICI, E50 and the integrated Brier score (IBS) are errors (lower is better); `selected`, chosen by the cv_ score (cross-validation inside the "
        "training split), feeds E[T] into TRASH and alone has test_ scores, with 95% intervals over held-out trained models."
    ),
    "logrank": ("each defence against none within an attack family; a small p means the two survival curves differ."),
    "concordance_within": (
        "held-out (test) concordance with only samples of one attack cell compared, pooled over cells by their comparable pairs, over every attack family "
        "(all) and per family: whether a model knows which samples of one attack fail first, beyond which attacks are costly; the baselines give every "
        "sample of a cell one score, 0.5 here by construction. Training values are in survival/concordance_within.csv."
    ),
    "km_check": (
        "one row per attack cell, furthest off first: E_T is the selected model's restricted mean to the cell's budget t_star (what TRASH uses), E_T_km the "
        "Kaplan-Meier restricted mean of the cell's samples to the same t_star, with no model; flagged where their ratio is off 1 by more than the tolerance "
        "(survival.km_check_tolerance). Flagged cells are misfitted by the model: compare its dashed curve with the Kaplan-Meier one, try another fitter "
        "(survival.chosen; Table I's km_ columns compare them), or read E_T_km for those cells."
    ),
    "eps_survival": (
        "one row per model cell and attack family with an eps grid (FGM, PGD) or a minimal perturbation (DeepFool); area is the normalised area under the "
        "share of samples still standing against eps up to eps_max (1: nobody breaks), area_lo and area_hi bound it where the grid leaves a sample's "
        "threshold between two grid points; median_eps is where half are broken (empty: more than half stand at eps_max); n_nonmonotone counts samples "
        "broken at some eps but standing at a larger one."
    ),
    "cards": (
        "one JSON card per trained model under reports/cards/, holding its model cells (predict-time defences) with their accuracy, attacks, TRASH, EVP and "
        "R; `degenerate` counts its cells at chance."
    ),
}


def caption_for(path: Path) -> tuple[str, str, str]:
    """(title, what it shows, how to read it) of a figure: a paper figure's or the survival
    stage's from CAPTIONS, a per-model coefficient plot's, or a plain one for any other."""
    if path.stem in CAPTIONS:
        return CAPTIONS[path.stem]
    if path.parent.name == "coefficients":
        sign = (
            "above 0 a higher hazard, i.e. earlier failure" if path.stem == "cox" else "above 0 a longer time to failure (more robust), below 0 a shorter one"
        )
        return (
            f"Coefficients of the {path.stem} survival model",
            "95% intervals (thick cluster-robust, thin naive): dummies against their reference level, covariates per +1 SD (TRASHFIRE Fig. 3).",
            f"an interval clear of 0 is an effect beyond noise: {sign}; a thick bar much wider than the thin one means samples of one model fail together.",
        )
    return path.stem.replace("_", " "), "a figure of the survival stage.", "see the survival stage's documentation."
