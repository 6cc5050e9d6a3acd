"""ART's side of the attacks: the model as an ART classifier, one attack-grid entry as an
ART attack, and what ART declares of an attack class. Loads ART; what the validator and the
tables need lives in the light `trashfire.attacks.spec`."""

from __future__ import annotations

import inspect
from typing import Any

from art.estimators.classification import PyTorchClassifier
from art.estimators.classification.classifier import ClassGradientsMixin
from art.estimators.estimator import LossGradientsMixin
from hydra.utils import get_class
from torch import nn

from trashfire.attacks.spec import NORMS, art_strength, pgd_step_size
from trashfire.models.defences import predict_defences


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
