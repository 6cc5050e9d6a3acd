"""Randomized smoothing: a certified floor under the attacked accuracy of a Gaussian-noise model.

A base classifier f (here a model trained with Gauss-in, ART's GaussianAugmentation) defines
the smoothed classifier g(x) = argmax_c P(f(x + d) = c), d ~ N(0, sigma^2 I), with sigma the
Gauss-in sigma on the standardised scale the model sees. Cohen, Rosenfeld & Kolter ("Certified
Adversarial Robustness via Randomized Smoothing", ICML 2019) show that if the top class has
probability pA >= pA_lower > 1/2, g returns it everywhere within the l2 radius
R = sigma * Phi^-1(pA_lower). Here:

- `certify`: their CERTIFY. n0 noisy copies pick the top class cA; n fresh copies count it (k
  of n); pA_lower is the one-sided (1 - alpha) Clopper-Pearson lower bound
  beta.ppf(alpha, k, n - k + 1) (0 when k = 0). pA_lower > 1/2: prediction cA, radius R;
  otherwise it abstains (prediction ABSTAIN = -1, radius -inf). With probability >= 1 - alpha a
  returned certificate is true of g.
- `predict`: their PREDICT, g's decision at a point: the two-sided binomial test of the top
  two counts of n copies at level alpha; abstains unless it rejects. It returns a class other
  than g(x) with probability <= alpha.
- `attack_smoothed`: the attacked robust accuracy of the same g (Salman et al., "Provably
  Robust Deep Learning via Adversarially Trained Smoothed Classifiers", NeurIPS 2019,
  "SmoothAdv"): l2 PGD on the smoothed soft classifier under EOT, each step the gradient of the
  cross-entropy of the mean softmax over `draws` fresh noise copies, steps of
  step_scale * eps / steps from the clean point, projected onto the eps ball and the valid
  image box; then PREDICT decides each attacked point.

Definitions (per eps), all about g: certified accuracy = the share of samples that CERTIFY
predicts correctly with radius > eps (an abstention is not certified); attacked accuracy = the
share that PREDICT does not show broken: neither PREDICT(x) nor PREDICT(x_adv) returns a class
other than y. An abstention there is no evidence either way (g itself never abstains; PREDICT
abstains where its n draws cannot tell the top two classes apart), so it does not count as a
break: a sample certified at eps whose attacked point PREDICT abstains on (seen on the digits at
n = 100) would otherwise put the "upper" end below the certified floor. Then, with high
probability, certified <= g's true robust accuracy <= attacked, and the bracket
attacked - certified is how far apart the floor and the ceiling still are: narrow, the attack
found (nearly) every break the certificate could not rule out; wide, the attack is weak, the
certificate loose (small n caps it, below), or both. Cohen et al.'s convention for the deployed
classifier, abstaining counts as an error, is kept beside it as the strict attacked accuracy
(`Attacked.strict`): PREDICT(x) == y and PREDICT(x_adv) == y.

Monte Carlo choices: noise is not clipped to the image box (Cohen et al. do not clip; the
certificate is about the unclipped Gaussian), though the attacked points themselves stay in
the box; the noise comes from one seeded torch generator on the model's device, drawn in
batches of `batch_size` copies in a fixed order, so a run is reproducible on a device. At the
clean point PREDICT reads CERTIFY's n counting draws instead of drawing its own (each
procedure's guarantee holds on its draws alone; a union bound covers both at 2 alpha). The
largest radius n draws can certify is sigma * Phi^-1(alpha^(1/n)) (every copy correct):
with n = 1000 and alpha = 0.001, 2.46 sigma; Cohen et al.'s n = 100,000 reaches 3.8 sigma.

Perturbation units: `scale` maps an attacker's perturbation to the standardised scale
(d_standardised = d / scale per channel, e.g. the training std for [0, 1] pixel units), so the
attack searches exactly the ball it is given; the caller compares radii with eps converted by
the smallest channel's scale, which covers the whole ball (exact for grey images).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from trashfire.attacks.target import Target

ABSTAIN = -1


def lower_confidence_bound(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """The one-sided (1 - alpha) Clopper-Pearson lower bound on a success probability from k
    successes of n (0 where k = 0, where the beta quantile is undefined)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        bound = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k > 0, bound, 0.0)


def certified_radius(p_lower: np.ndarray | float, sigma: float) -> np.ndarray:
    """sigma * Phi^-1(pA_lower) where pA_lower > 1/2, else -inf (no certificate)."""
    p_lower = np.asarray(p_lower, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(p_lower > 0.5, sigma * stats.norm.ppf(p_lower), -np.inf)


def binomial_p_value(n_a: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """The two-sided exact binomial test of n_a successes in n_a + n_b trials against 1/2
    (scipy's binomtest; symmetric at 1/2, so twice the smaller tail)."""
    n_a, n_b = np.asarray(n_a), np.asarray(n_b)
    return np.minimum(1.0, 2.0 * stats.binom.cdf(np.minimum(n_a, n_b), n_a + n_b, 0.5))


def noise_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def gaussian(shape: Sequence[int], sigma: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=generator, device=generator.device) * sigma


@torch.no_grad()
def class_counts(target: Target, x: torch.Tensor, sigma: float, n: int, n_classes: int, generator: torch.Generator, batch_size: int = 1000) -> np.ndarray:
    """How often the base model picks each class on n noisy copies of each sample: an
    (len(x), n_classes) array. Copies of several samples share a forward pass of batch_size."""
    x = x.to(target.device)
    total = len(x) * n
    counts = torch.zeros(len(x) * n_classes, dtype=torch.long, device=target.device)
    for start in range(0, total, batch_size):
        owner = torch.arange(start, min(start + batch_size, total), device=target.device) // n
        noisy = x[owner] + gaussian((len(owner), *x.shape[1:]), sigma, generator)
        picked = target.logits(noisy).argmax(1)
        counts += torch.bincount(owner * n_classes + picked, minlength=len(counts))
    return counts.view(len(x), n_classes).cpu().numpy()


@dataclass(frozen=True)
class Certificates:
    prediction: np.ndarray  # cA, or ABSTAIN
    p_lower: np.ndarray  # pA_lower of cA
    radius: np.ndarray  # certified l2 radius on the standardised scale, -inf where it abstains
    counts: np.ndarray  # class counts of the n counting draws (PREDICT reads them at the clean point)


def certify(
    target: Target, x: torch.Tensor, sigma: float, n0: int, n: int, alpha: float, n_classes: int, generator: torch.Generator, batch_size: int = 1000
) -> Certificates:
    """Cohen et al.'s CERTIFY on each sample of x (standardised images)."""
    selected = class_counts(target, x, sigma, n0, n_classes, generator, batch_size).argmax(1)
    counts = class_counts(target, x, sigma, n, n_classes, generator, batch_size)
    p_lower = lower_confidence_bound(counts[np.arange(len(x)), selected], n, alpha)
    radius = certified_radius(p_lower, sigma)
    prediction = np.where(np.isfinite(radius), selected, ABSTAIN)
    return Certificates(prediction, p_lower, radius, counts)


def decide(counts: np.ndarray, alpha: float) -> np.ndarray:
    """PREDICT's decision from each sample's class counts: the top class where the binomial
    test of the top two counts rejects at alpha, else ABSTAIN."""
    order = np.argsort(-counts, axis=1, kind="stable")
    top_two = np.take_along_axis(counts, order[:, :2], axis=1)
    n_a, n_b = top_two[:, 0], (top_two[:, 1] if counts.shape[1] > 1 else np.zeros(len(counts), dtype=int))
    return np.where(binomial_p_value(n_a, n_b) <= alpha, order[:, 0], ABSTAIN)


def predict(
    target: Target, x: torch.Tensor, sigma: float, n: int, alpha: float, n_classes: int, generator: torch.Generator, batch_size: int = 1000
) -> np.ndarray:
    """Cohen et al.'s PREDICT on each sample of x: the smoothed classifier's decision, or ABSTAIN."""
    return decide(class_counts(target, x, sigma, n, n_classes, generator, batch_size), alpha)


def smoothed_cross_entropy(target: Target, x: torch.Tensor, y: torch.Tensor, sigma: float, draws: int, generator: torch.Generator) -> torch.Tensor:
    """Per sample, -log of the mean over `draws` noisy copies of the true class's softmax: the
    soft smoothed classifier's loss (SmoothAdv), by logsumexp for stability."""
    noisy = x.repeat_interleave(draws, 0) + gaussian((len(x) * draws, *x.shape[1:]), sigma, generator)
    log_p = torch.log_softmax(target.logits(noisy), 1).view(len(x), draws, -1)
    log_mean = torch.logsumexp(log_p, 1) - np.log(draws)
    return -log_mean.gather(1, y[:, None]).squeeze(1)


def per_sample_norm(d: torch.Tensor) -> torch.Tensor:
    return d.flatten(1).norm(dim=1).view(-1, *[1] * (d.dim() - 1))


def smooth_adv(
    target: Target,
    x: torch.Tensor,
    y: torch.Tensor,
    sigma: float,
    eps: float,
    steps: int,
    step_scale: float,
    draws: int,
    generator: torch.Generator,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """l2 PGD of radius eps (in the units `scale` converts from) on the soft smoothed
    classifier, from the clean point; the attacked points, standardised, in the image box."""
    scale = torch.ones(1, device=x.device) if scale is None else scale.to(x.device).view(1, -1, *[1] * (x.dim() - 2))
    low, high = target.clip_values
    step = step_scale * eps / steps
    delta = torch.zeros_like(x)  # the perturbation in the attacker's units
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = smoothed_cross_entropy(target, x + delta / scale, y, sigma, draws, generator).sum()
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            delta = delta + step * grad / per_sample_norm(grad).clamp_min(1e-12)
            delta = delta * (eps / per_sample_norm(delta).clamp_min(1e-12)).clamp(max=1.0)
            delta = ((x + delta / scale).clamp(low, high) - x) * scale  # clamping moves toward x: the norm only shrinks
    return (x + delta.detach() / scale).clamp(low, high)


@dataclass(frozen=True)
class Attacked:
    clean: np.ndarray  # PREDICT at the clean points
    attacked: np.ndarray  # (len(eps), samples): PREDICT at the attacked points (the clean decision where that is already wrong)
    labels: np.ndarray

    @property
    def robust(self) -> np.ndarray:
        """(len(eps), samples): not shown broken, PREDICT returned no wrong class at x or x_adv."""
        return ~(shown_wrong(self.clean, self.labels)[None, :] | shown_wrong(self.attacked, self.labels[None, :]))

    @property
    def strict(self) -> np.ndarray:
        """(len(eps), samples): PREDICT returned y at x and at x_adv (an abstention is an error)."""
        return (self.clean == self.labels)[None, :] & (self.attacked == self.labels[None, :])


def shown_wrong(decisions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return (decisions != labels) & (decisions != ABSTAIN)


def attack_smoothed(
    target: Target,
    x: torch.Tensor,
    y: torch.Tensor,
    sigma: float,
    eps: Sequence[float],
    *,
    n: int,
    alpha: float,
    n_classes: int,
    steps: int,
    step_scale: float,
    draws: int,
    generator: torch.Generator,
    scale: torch.Tensor | None = None,
    clean: np.ndarray | None = None,
    batch_size: int = 1000,
) -> Attacked:
    """The smoothed classifier at SmoothAdv's points of each eps, decided by PREDICT.
    `clean`: PREDICT's decisions at x where already made (CERTIFY's counting draws serve); a
    sample shown wrong there is broken at every eps and is not attacked."""
    x, y = x.to(target.device), y.to(target.device)
    labels = y.cpu().numpy()
    if clean is None:
        clean = predict(target, x, sigma, n, alpha, n_classes, generator, batch_size)
    attacked = np.tile(clean, (len(eps), 1))
    chunk = max(1, batch_size // draws)
    rows = np.flatnonzero(~shown_wrong(clean, labels))
    for e, radius in enumerate(eps):
        for start in range(0, len(rows), chunk):
            index = torch.as_tensor(rows[start : start + chunk], device=target.device)
            x_adv = smooth_adv(target, x[index], y[index], sigma, float(radius), steps, step_scale, draws, generator, scale)
            attacked[e, index.cpu().numpy()] = predict(target, x_adv, sigma, n, alpha, n_classes, generator, batch_size)
    return Attacked(clean, attacked, labels)
