"""AutoAttack's components (Croce & Hein 2020) as ART attacks, and their composite.

ART's own `AutoAttack` puts DeepFool where FAB-T belongs, so its robust accuracy is not
AutoAttack's; the components are built here from ART's parts instead:

- `AutoPGD`: ART's AutoProjectedGradientDescent (its arithmetic untouched) with AutoAttack's
  first step of 2 eps whatever the iteration count, and APGD-T's targets: with
  `n_targets > 0` it attacks the most likely wrong classes of the clean input in turn, each
  on the samples the previous targets left standing.
- `Sequence`: the components in order, each on the samples still classified correctly, the
  worst case per sample. It is the reference (`engine: art`); the `sequence` engine of
  trashfire.attacks.engine runs the same components image by image with the failure clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from art.attacks.evasion import AutoProjectedGradientDescent

DLR = "difference_logits_ratio"
DLR_CLASSES = 3  # ART's DLR divides by z_1 - z_3, the gap to the third largest logit
NORM_NAMES = {np.inf: "inf", 1: "1", 2: "2"}


class AutoPGD(AutoProjectedGradientDescent):
    """ART's APGD with the step relative to eps (`step_size` * eps: AutoAttack's 2 eps) and,
    for `n_targets` > 0, APGD-T's loop over target classes (ART runs one target per call).

    The targeted runs keep ART's semantics: ART's targeted APGD keeps an iterate only when it
    reaches its target (AutoAttack keeps any misclassification), and its DLR is the
    untargeted ratio with the sign flipped, -(z_t - max_{i!=t} z_i) / (z_1 - z_3), not
    Croce & Hein's targeted DLR (which needs 4 classes)."""

    def __init__(
        self,
        estimator: Any,
        norm: int | float | str = np.inf,
        eps: float = 0.3,
        step_size: float = 2.0,
        max_iter: int = 100,
        nb_random_init: int = 1,
        batch_size: int = 32,
        loss_type: str | None = "cross_entropy",
        n_targets: int = 0,
        verbose: bool = False,
    ):
        if loss_type == DLR and estimator.nb_classes < DLR_CLASSES:
            raise ValueError(f"APGD's {DLR} loss needs >= {DLR_CLASSES} classes (it divides by the gap to the third largest logit); got {estimator.nb_classes}")
        if not isinstance(n_targets, int) or isinstance(n_targets, bool) or n_targets < 0:
            raise ValueError(f"n_targets: got {n_targets!r}; must be an integer >= 0 (0: untargeted)")
        # ART refuses an estimator whose predict looks like probabilities; a predict-time
        # postprocessor (Gauss-out, Conf: softmax first) makes it so, though the losses are on
        # the model's logits and the postprocessor only decides. Hidden for ART's check, kept
        # for every decision of the attack.
        postprocessing = estimator.postprocessing_defences
        estimator.postprocessing_defences = []
        try:
            super().__init__(
                estimator,
                norm=norm,
                eps=eps,
                eps_step=step_size * eps,
                max_iter=max_iter,
                targeted=n_targets > 0,
                nb_random_init=nb_random_init,
                batch_size=batch_size,
                loss_type=loss_type,
                verbose=verbose,
            )
        finally:
            estimator.postprocessing_defences = postprocessing
        self.estimator.postprocessing_defences = postprocessing
        self.n_targets = min(n_targets, estimator.nb_classes - 1)

    def generate(self, x: np.ndarray, y: np.ndarray | None = None, **kwargs) -> np.ndarray:
        """Untargeted: ART's generate. Targeted: `y` are the true labels (the predictions when
        None); each sample is attacked towards its k-th most likely wrong class for k = 1..
        n_targets until it is misclassified."""
        if not self.targeted:
            return super().generate(x, y, **kwargs)
        scores = self.estimator.predict(x, batch_size=self.batch_size)
        labels = scores.argmax(1) if y is None else (np.asarray(y).argmax(1) if np.ndim(y) == 2 else np.asarray(y))
        targets = wrong_classes(scores, labels, self.n_targets)
        x_adv = x.astype(np.float32).copy()
        standing = np.ones(len(x), dtype=bool)
        for k in range(self.n_targets):
            rows = np.flatnonzero(standing)
            if not len(rows):
                break
            x_adv[rows] = super().generate(x[rows], targets[rows, k], **kwargs)
            broken = self.estimator.predict(x_adv[rows], batch_size=self.batch_size).argmax(1) != labels[rows]
            standing[rows[broken]] = False
        return x_adv


def wrong_classes(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per sample, its k most likely classes other than its label, most likely first (APGD-T's
    targets: for a correctly classified sample, the 2nd to (k+1)-th of the clean scores)."""
    ranked = np.argsort(-scores, axis=1, kind="stable")
    return np.stack([row[row != label][:k] for row, label in zip(ranked, labels)]) if len(labels) else np.zeros((0, k), dtype=np.int64)


def component_spec(name: str, component: dict[str, Any], norm: str, eps: float) -> dict[str, Any]:
    """A component of a composite as an attack spec for `build_attack`: the composite's norm
    and eps (already on the standardised scale the model sees)."""
    spec = {
        "name": name,
        "target": component["_target_"],
        "param": component.get("param", "eps"),
        "norm": norm,
        "value": float(eps),
        "units": "standardised",
        "kwargs": dict(component.get("kwargs") or {}),
    }
    return spec | {key: component[key] for key in ("batch_size", "max_iter", "step_scale") if component.get(key) is not None}


def runs_on_art(component: Any) -> bool:
    """Whether ART can run this component: FAB-T, which ART lacks, runs on the torch engine
    only (its rules allow no other), and the ART engines leave it out."""
    engines = ((component.get("rules") or {}).get("engine")) or ["per_image"]
    return set(engines) != {"torch"}


class Sequence:
    """AutoAttack's protocol: each component (a mapping, in order) attacks the clean inputs of
    the samples still classified correctly after the previous ones; a sample's example is
    the one of the component that broke it (else the last component's). Components that run
    on the torch engine only (FAB-T: ART has no FAB) are left out."""

    def __init__(self, estimator: Any, eps: float, components: dict[str, Any], norm: int | float | str = np.inf):
        from trashfire.attacks.art_attacks import build_attack

        self.estimator = estimator
        norm_name = NORM_NAMES.get(norm, str(norm))
        self.components = {name: build_attack(estimator, component_spec(name, dict(c), norm_name, eps)) for name, c in components.items() if runs_on_art(c)}

    def generate(self, x: np.ndarray, y: np.ndarray, **kwargs) -> np.ndarray:
        x_adv = x.astype(np.float32).copy()
        standing = self.estimator.predict(x).argmax(1) == y
        for attack in self.components.values():
            rows = np.flatnonzero(standing)
            if not len(rows):
                break
            x_adv[rows] = attack.generate(x=x[rows], y=y[rows])
            standing[rows[self.estimator.predict(x_adv[rows]).argmax(1) != y[rows]]] = False
        return x_adv
