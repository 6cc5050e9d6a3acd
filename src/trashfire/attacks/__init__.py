"""ART evasion attacks built from one attack-grid entry."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from art.estimators.classification import PyTorchClassifier
from art.estimators.classification.classifier import ClassGradientsMixin
from art.estimators.estimator import LossGradientsMixin
from hydra.utils import get_class
from torch import nn

from trashfire.core.checks import RULES
from trashfire.core.config import TORCH_ALGORITHMS
from trashfire.core.errors import ConfigError
from trashfire.core.schema import to_standardised
from trashfire.models.defences import predict_defences

NORMS = {"inf": np.inf, "1": 1, "2": 2, "0": 0}


def art_classifier(model: nn.Module, split, defence: dict[str, Any], device) -> PyTorchClassifier:
    """The model as ART sees it, frozen: the attacks need input gradients only, and frozen
    weights make ART's FGM and PGD 1.06-1.3x the plain-torch cost instead of 1.4-1.7x."""
    model.eval().requires_grad_(False)
    return PyTorchClassifier(
        model=model,
        loss=nn.CrossEntropyLoss(),
        input_shape=split.input_shape,
        nb_classes=split.n_classes,
        clip_values=split.clip_values,
        device_type="gpu" if device.type == "cuda" else "cpu",
        **predict_defences(defence, split.clip_values),
    )


def attack_strength(spec: dict[str, Any], pixel_std: float) -> float:
    """The strength on the standardised scale the model sees (schema.to_standardised): units
    pixel means [0, 1] pixel units (004's eps grid), divided by the data set's pixel std."""
    return to_standardised(spec["value"], spec.get("units", "standardised"), pixel_std)


def strength_kind(spec: dict[str, Any]) -> str:
    """count or real, as the attack's rules state (`rules.values.kind`); a spec written by
    hand without rules: count for an integer value, real for any other."""
    kind = (spec.get(RULES) or {}).get("values", {})
    if isinstance(kind, dict) and kind.get("kind") in ("count", "real"):
        return kind["kind"]
    value = spec["value"]
    return "count" if isinstance(value, int) and not isinstance(value, bool) else "real"


def art_strength(spec: dict[str, Any], pixel_std: float = 1.0) -> int | float:
    """The strength ART is given: a count as the configured integer (a class count, pixels,
    255-levels, queries), never a cast; a real on the standardised scale."""
    if strength_kind(spec) == "real":
        return attack_strength(spec, pixel_std)
    value = spec["value"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"attack.{spec.get('name', '?')}.values", f"got {value!r}; must be an integer (its rules make the strength a count)")
    return value


def build_attack(classifier: PyTorchClassifier, spec: dict[str, Any], pixel_std: float = 1.0) -> Any:
    """One grid entry as an ART attack. The strength goes to `param`; norm, batch_size and
    max_iter only to the attacks that take them (DeepFool, PixelAttack and ThresholdAttack
    have one fixed norm); PGD's step is eps*step_scale/max_iter."""
    cls = get_class(spec["target"])
    accepted = inspect.signature(cls.__init__).parameters
    value = art_strength(spec, pixel_std)
    kwargs = {spec["param"]: value, **spec.get("kwargs", {})}
    optional = {"norm": NORMS.get(spec["norm"]), "batch_size": spec.get("batch_size"), "max_iter": spec.get("max_iter")}
    kwargs |= {k: v for k, v in optional.items() if k in accepted and v is not None}
    if "step_scale" in spec:
        kwargs["eps_step"] = pgd_step_size(spec, value)
    estimator = "classifier" if "classifier" in accepted else "estimator"
    return cls(**{estimator: classifier}, **kwargs)


def pgd_step_size(spec: dict[str, Any], eps: float) -> float:
    """PGD's step: eps * step_scale / max_iter (Madry et al.'s 2.5 eps / iterations)."""
    return eps * spec["step_scale"] / spec["max_iter"]


def engine_of(spec: dict[str, Any]) -> str:
    """The configured engine, else the first its rules allow (`rules.engine`), else ART image
    by image (see trashfire.attacks.engine)."""
    return spec.get("engine") or ((spec.get(RULES) or {}).get("engine") or ["per_image"])[0]


def torch_algorithm(spec: dict[str, Any]) -> str:
    """The torch engine's loop that runs this attack, as its rules name it
    (`rules.torch.algorithm`: fgm, pgd or deepfool; trashfire.attacks.engine.ALGORITHMS)."""
    algorithm = ((spec.get(RULES) or {}).get("torch") or {}).get("algorithm")
    if algorithm not in TORCH_ALGORITHMS:
        raise ConfigError(
            f"attack.{spec.get('name', '?')}.{RULES}.torch.algorithm",
            f"got {algorithm!r}; the torch engine runs {', '.join(TORCH_ALGORITHMS)}: name the loop that runs this attack, or use engine: art",
        )
    return algorithm


GRADIENT_MIXINS = (LossGradientsMixin, ClassGradientsMixin)  # ART's estimator interfaces of input gradients


def declaration(target: str) -> dict[str, Any]:
    """What ART declares of an attack class: the estimator interfaces it requires
    (`_estimator_requirements`, by name; None where the class declares none, as our composite
    does) and so whether it needs input gradients (None: undeclared)."""
    required = getattr(get_class(target), "_estimator_requirements", None)
    if required is None:
        return {"target": target, "estimator_requirements": None, "gradients": None}
    classes = _flattened(required)
    names = sorted({cls.__name__ for cls in classes})
    return {"target": target, "estimator_requirements": names, "gradients": any(issubclass(cls, GRADIENT_MIXINS) for cls in classes)}


def _flattened(required: Any) -> list[type]:
    """ART's requirements, a tuple whose items may be tuples of alternatives, as one list."""
    if isinstance(required, (tuple, list)):
        return [cls for item in required for cls in _flattened(item)]
    return [required]


def budget_subset(labels: np.ndarray, n: int | None) -> np.ndarray:
    """Positions of the first n samples taken round-robin over classes: the slow black-box
    attacks run on a class-balanced part of the attack subset."""
    if n is None or n >= len(labels):
        return np.arange(len(labels))
    by_class = [list(np.flatnonzero(labels == k)) for k in np.unique(labels)]
    picked: list[int] = []
    while len(picked) < n:
        for members in by_class:
            if members and len(picked) < n:
                picked.append(members.pop(0))
    return np.sort(np.array(picked))


def perturbation_norms(x: np.ndarray, x_adv: np.ndarray) -> dict[str, np.ndarray]:
    delta = (x_adv - x).reshape(len(x), -1)
    return {
        "norm_l0": (np.abs(delta) > 1e-6).sum(axis=1).astype(np.int64),
        "norm_l1": np.abs(delta).sum(axis=1),
        "norm_l2": np.linalg.norm(delta, axis=1),
        "norm_linf": np.abs(delta).max(axis=1),
    }
