"""From a claim's estimate over independent units to its verdict (DESIGN.md, "Inference";
issue 59), the same rule for every claim of a run:

- a directional claim (a rise, a fall, TRASH above 1) *holds* when its Holm-adjusted two-sided
  test rejects at `alpha` and the estimate lies on the claimed side by at least the claim's
  smallest effect of interest (conf/metrics: metrics.findings.smallest); it is *contradicted*
  when the test rejects and the estimate lies that far on the other side;
- a claim of no effect (pretraining's "no gain", depth's "not more queries") *holds* when its
  equivalence test (TOST, or a one-sided test below the margin) within the claim's margin
  (metrics.findings.margin) rejects after Holm's adjustment; it is *contradicted* when the
  one-sided test that the effect lies past the margin rejects (Bonferroni over the claims);
- otherwise it is *inconclusive*, and says why: *underpowered* (the smallest effect the run
  detects at 80% power exceeds the effect of interest, with about how many units would settle
  it at the effect seen) or *too small* (the effect is real or not, but below what counts).

Holm's adjustment runs over the run's claims on its own clock; a re-test on another clock is a
sensitivity row: adjusted as if it stood in its claim's place, and not counted as a claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from trashfire.core import inference
from trashfire.core.schema import Finding

VERDICTS = ("holds", "contradicted", "inconclusive", "not testable")
HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE = VERDICTS
DIRECTIONAL, EQUIVALENCE, BELOW = "directional", "equivalence", "below"
NAN = math.nan
OTHER_CLOCK = "@"  # a finding's id on another clock than the run's own (`..._fgm@wall`)


@dataclass(frozen=True)
class Tested:
    """A claim's test before the verdict: its finding (verdict not yet set), the raw p that
    enters Holm's adjustment, and what the verdict rule needs."""

    finding: Finding
    kind: str  # DIRECTIONAL: the claimed sign; EQUIVALENCE: |effect| < smallest; BELOW: effect < smallest (no gain)
    sign: int  # the claimed direction (DIRECTIONAL) or the direction ruled out (BELOW)
    effect: float  # the estimate minus its null, in the claim's units
    smallest: float  # the smallest effect of interest, or the equivalence margin
    se: float  # the statistic's standard error (a correlation's on Fisher's z scale)
    method: str  # inference's: "t", "ols", "spearman"
    p_claim: float  # the p that enters Holm: the difference test's, or the equivalence test's
    detectable: float  # the smallest |effect| the run detects at 80% power
    p_beyond: float = NAN  # a claim of no effect: p of the one-sided test that the effect lies past its margin


def tested(finding: Finding, estimate: inference.Estimate, kind: str, sign: int, smallest: float, *, alpha: float) -> Tested:
    """Tested from an inference.Estimate."""
    effect = estimate.value - estimate.null
    if kind == DIRECTIONAL:
        p_claim = estimate.p
    elif kind == EQUIVALENCE:
        p_claim = inference.equivalence_p(estimate, smallest)
    else:  # BELOW: the one-sided test of effect < smallest in the ruled-out direction
        p_claim = _below_p(estimate, sign, smallest)
    detectable = inference.detectable(estimate, alpha)
    finding = replace(finding, smallest_effect=float(smallest), detectable=float(detectable))
    beyond = _beyond_p(estimate, sign if kind == BELOW else int(np.sign(effect)) or 1, smallest) if kind != DIRECTIONAL else NAN
    return Tested(finding, kind, sign, effect, smallest, estimate.se, estimate.method, p_claim, detectable, beyond)


def _beyond_p(estimate: inference.Estimate, sign: int, margin: float) -> float:
    """p of sign x effect > margin: the one-sided test that contradicts a claim of no effect."""
    if not np.isfinite(estimate.se):
        return NAN
    if estimate.se == 0:
        return float(not sign * (estimate.value - estimate.null) > margin)
    from scipy import stats

    return float(stats.t.sf((sign * (estimate.value - estimate.null) - margin) / estimate.se, estimate.df))


def _below_p(estimate: inference.Estimate, sign: int, margin: float) -> float:
    """p of sign x effect < margin (a non-inferiority test turned round: "no gain of margin")."""
    if not np.isfinite(estimate.se) or estimate.se == 0:
        return NAN if not np.isfinite(estimate.se) else float(sign * (estimate.value - estimate.null) >= margin)
    from scipy import stats

    return float(stats.t.cdf((sign * (estimate.value - estimate.null) - margin) / estimate.se, estimate.df))


def decide(claim: Tested, p_adjusted: float, alpha: float, claims: int) -> Finding:
    """The verdict of one claim at its Holm-adjusted p, with the reason written into its detail."""
    f = replace(claim.finding, p=claim.p_claim, p_adjusted=p_adjusted)
    if not np.isfinite(p_adjusted):
        why = f"its {f.n} units are all equal, so no spread to test against" if f.n >= 2 else f"{f.n} unit is too few"
        return replace(f, verdict=INCONCLUSIVE, detail=f"{f.detail}; no test: {why}")
    settle = _units_to_settle(claim, alpha / max(claims, 1))
    f = replace(f, units_to_settle=settle)
    significant = p_adjusted < alpha
    p_text = f"Holm-adjusted p {p_adjusted:.3g} (raw {claim.p_claim:.3g}, {claims} claim{'' if claims == 1 else 's'})"
    if claim.kind == DIRECTIONAL:
        toward = claim.sign * claim.effect
        if significant and toward >= claim.smallest:
            return replace(f, verdict=HOLDS, detail=f"{f.detail}; {p_text}; at least the smallest effect of interest {claim.smallest:.3g}")
        if significant and toward <= -claim.smallest:
            return replace(f, verdict=CONTRADICTED, detail=f"{f.detail}; {p_text}; the opposite way, by at least {claim.smallest:.3g}")
        return replace(f, verdict=INCONCLUSIVE, detail=f"{f.detail}; {p_text}; {_why_inconclusive(claim, significant, settle)}")
    if significant:
        return replace(f, verdict=HOLDS, detail=f"{f.detail}; {p_text}; within the margin {claim.smallest:.3g}")
    if claim.p_beyond * claims < alpha:  # a one-sided test that the effect lies past the margin, Bonferroni over the claims
        return replace(f, verdict=CONTRADICTED, detail=f"{f.detail}; {p_text}; an effect beyond the margin {claim.smallest:.3g} (p {claim.p_beyond:.3g})")
    return replace(f, verdict=INCONCLUSIVE, detail=f"{f.detail}; {p_text}; {_why_inconclusive(claim, False, settle)}")


def _why_inconclusive(claim: Tested, significant: bool, settle: float) -> str:
    seen = abs(claim.effect)
    if claim.kind == DIRECTIONAL and (significant or (np.isfinite(claim.detectable) and claim.detectable <= claim.smallest)):
        return f"too small: the effect {claim.effect:+.3g} is below the smallest effect of interest {claim.smallest:.3g}"
    detect = f"the run detects {claim.detectable:.3g} at 80% power" if np.isfinite(claim.detectable) else "no power figure"
    more = f"; about {math.ceil(settle)} units would settle it at the effect seen ({claim.effect:+.3g})" if np.isfinite(settle) else ""
    if claim.kind == DIRECTIONAL and seen < claim.smallest:
        more = f"; the effect seen ({claim.effect:+.3g}) is below the smallest of interest ({claim.smallest:.3g}): more units would show it too small"
    return f"underpowered: {detect}{more}"


def _units_to_settle(claim: Tested, alpha: float) -> float:
    """About how many units would settle the claim at 80% power and `alpha`: detect the effect
    seen where it reaches the smallest effect of interest, else show it below that (its distance
    from it; for a claim of no effect, from the margin). From the run's own standard error, which
    shrinks as 1 / sqrt(units): n x ((z_{1-alpha/2} + z_power) se / distance)^2."""
    if claim.kind == EQUIVALENCE:
        distance = claim.smallest - abs(claim.effect)
    elif claim.kind == DIRECTIONAL and abs(claim.effect) >= claim.smallest:
        distance = abs(claim.effect)  # detect it
    else:  # show it below what counts (a directional claim's effect of interest, or the gain ruled out)
        distance = claim.smallest - claim.sign * claim.effect
    se, n = claim.se, claim.finding.n
    if not (np.isfinite(distance) and distance > 0 and np.isfinite(se) and se > 0 and n > 0):
        return NAN
    if claim.method == "spearman":
        return inference.units_needed(distance, NAN, alpha, method="spearman")
    return inference.units_from_se(distance, se, n, alpha)


def not_testable(finding: Finding) -> Finding:
    return replace(finding, verdict=NOT_TESTABLE)


def adjust(claims: list[Tested | Finding], alpha: float) -> list[Finding]:
    """Every claim's verdict: Holm over the primary claims (ids without OTHER_CLOCK) that have a
    test; each sensitivity row adjusted as if it stood in place of its primary claim."""
    primary = [c for c in claims if isinstance(c, Tested) and OTHER_CLOCK not in c.finding.id and np.isfinite(c.p_claim)]
    ids = [c.finding.id for c in primary]
    pvalues = np.array([c.p_claim for c in primary])
    adjusted = dict(zip(ids, inference.holm(pvalues)))
    out = []
    for claim in claims:
        if not isinstance(claim, Tested):
            out.append(claim)
            continue
        base = claim.finding.id.split(OTHER_CLOCK)[0]
        if OTHER_CLOCK in claim.finding.id and base in ids and np.isfinite(claim.p_claim):
            swapped = pvalues.copy()
            swapped[ids.index(base)] = claim.p_claim
            out.append(decide(claim, float(inference.holm(swapped)[ids.index(base)]), alpha, len(ids)))
        else:
            out.append(decide(claim, adjusted.get(claim.finding.id, NAN), alpha, len(ids)))
    return out


# ---------------------------------------------------------------------------------------------
# A reproduction against a paper (the reproduction page): agrees, differs or underpowered

AGREEMENT = ("agrees", "differs", "underpowered")
AGREES, DIFFERS, UNDERPOWERED = AGREEMENT


@dataclass(frozen=True)
class Agreement:
    """One comparison's verdict: `p_agree` (the equivalence test within `margin`, or for a
    direction-only claim the test of its direction) and `p_differ` (the difference test, or the
    test that the effect falls short of `margin`), both Holm-adjusted over the table's rows;
    `detectable`: the smallest difference the run detects at 80% power."""

    verdict: str
    margin: float
    detectable: float
    p_agree: float
    p_differ: float
    reason: str

    @property
    def text(self) -> str:
        return self.verdict if not self.reason else f"{self.verdict}: {self.reason}"


def agreements(estimates: list[inference.Estimate], margins: list[float], alpha: float = 0.05, ours: str = "ours") -> list[Agreement]:
    """Ours minus the paper's per row: *agrees* when TOST within the row's margin rejects,
    *differs* when the test of no difference rejects, else *underpowered* (Holm over the rows
    for each test). A difference that is real but within the margin agrees."""
    agree = inference.holm([inference.equivalence_p(e, m) for e, m in zip(estimates, margins)])
    differ = inference.holm([e.p for e in estimates])
    out = []
    for e, margin, p_agree, p_differ in zip(estimates, margins, agree, differ):
        power = inference.detectable(e, alpha)
        if p_agree < alpha:
            out.append(Agreement(AGREES, margin, power, p_agree, p_differ, ""))
        elif p_differ < alpha:
            out.append(Agreement(DIFFERS, margin, power, p_agree, p_differ, f"{ours} {'higher' if e.value > 0 else 'lower'} by {abs(e.value):.3g}"))
        else:
            out.append(Agreement(UNDERPOWERED, margin, power, p_agree, p_differ, _short_of(power, margin)))
    return out


def direction_agreements(estimates: list[inference.Estimate], sign: int, smallest: float, alpha: float = 0.05) -> list[Agreement]:
    """A paper that states a direction only: *agrees* when the test rejects on its side and the
    effect reaches `smallest` there (the findings' rule); *differs* when the one-sided test that
    the effect falls short of `smallest` on that side rejects; else *underpowered*."""
    toward = inference.holm([e.one_sided_p(sign) for e in estimates])
    short = inference.holm([_below_p(e, sign, smallest) for e in estimates])  # p of sign x effect < smallest
    out = []
    for e, p_agree, p_differ in zip(estimates, toward, short):
        power = inference.detectable(e, alpha)
        if p_agree < alpha and sign * e.value >= smallest:
            out.append(Agreement(AGREES, smallest, power, p_agree, p_differ, ""))
        elif p_differ < alpha:
            out.append(Agreement(DIFFERS, smallest, power, p_agree, p_differ, f"short of {smallest:.3g} on the paper's side"))
        else:
            out.append(Agreement(UNDERPOWERED, smallest, power, p_agree, p_differ, _short_of(power, smallest, sign * e.value)))
    return out


def _short_of(detectable: float, margin: float, toward: float = NAN) -> str:
    """Why neither test rejected: no interval, too few units to detect the margin, or (a
    direction-only claim) an effect whose interval reaches both sides of the margin."""
    if not np.isfinite(detectable):
        return "no interval"
    if np.isfinite(toward) and detectable <= margin:
        return f"the effect {toward:.3g} on the paper's side lies too near the margin {margin:.3g} to tell (the run detects {detectable:.3g} at 80% power)"
    return f"detects {detectable:.3g} at 80% power, margin {margin:.3g}"
