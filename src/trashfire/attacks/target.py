"""The defended model as our attack engine queries it, on the device: logits through the
predict-time preprocessing as ART's gradients see it, and the defended decision as ART's
`predict` makes it (its postprocessors applied to those logits)."""

from __future__ import annotations

import numpy as np
import torch
from art.defences.postprocessor import ClassLabels, HighConfidence, Rounded
from art.defences.preprocessor import FeatureSqueezing
from art.defences.preprocessor.preprocessor import PreprocessorPyTorch
from art.estimators.classification import PyTorchClassifier

from trashfire.attacks.network import attack_network
from trashfire.core.errors import ConfigError
from trashfire.models.defences import Softmax

DETERMINISTIC_POSTPROCESSORS = (Softmax, HighConfidence, Rounded, ClassLabels)


class Target:
    def __init__(self, classifier: PyTorchClassifier, device: torch.device):
        self.classifier = classifier
        self.model = classifier.model
        self.network = attack_network(classifier.model)  # the model with its faster eval BatchNorm gradient
        self.device = device
        self.clip_values = tuple(float(v) for v in classifier.clip_values)
        self.preprocessors = [torch_preprocessor(p, self.clip_values) for p in classifier.preprocessing_defences or []]
        self.postprocessors = list(classifier.postprocessing_defences or [])

    @property
    def deterministic(self) -> bool:
        """Whether a point's logits and decision are the same however often it is asked: only
        feature squeezing before the model and only postprocessors that draw nothing after it
        (Gauss-out draws; a defence not known to draw nothing counts as one that does)."""
        before = all(isinstance(p, FeatureSqueezing) for p in self.classifier.preprocessing_defences or [])
        return before and all(isinstance(p, DETERMINISTIC_POSTPROCESSORS) for p in self.postprocessors)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.network.training != self.model.training:  # the model's mode changed since: copy it again
            self.network = attack_network(self.model)
        return self.network(self.preprocessed(x))

    def model_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of the model as given (PyTorch's own modules): what a reference
        implementation, such as the AutoAttack authors' code, is run on."""
        return self.model(self.preprocessed(x))

    def preprocessed(self, x: torch.Tensor) -> torch.Tensor:
        for preprocess in self.preprocessors:
            x = preprocess(x)
        return x

    def decide(self, logits: torch.Tensor) -> np.ndarray:
        """The defended prediction: ART's postprocessors (which draw from NumPy's generator,
        as in ART's predict) on the logits, else the logits' argmax."""
        if not self.postprocessors:
            return logits.argmax(1).cpu().numpy()
        preds = logits.detach().cpu().numpy()
        for postprocess in self.postprocessors:
            preds = postprocess(preds)
        return preds.argmax(1)


def torch_preprocessor(defence, clip_values: tuple[float, float]):
    """An ART preprocessor as a differentiable torch function, with ART's gradient."""
    if isinstance(defence, FeatureSqueezing):
        return lambda x: squeeze_features(x, defence.bit_depth, clip_values)
    if isinstance(defence, PreprocessorPyTorch):
        return lambda x: defence.forward(x)[0]
    raise ConfigError("defence", f"{type(defence).__name__}: the attack engine runs ART's FeatureSqueezing and PyTorch preprocessors only")


def squeeze_features(x: torch.Tensor, bit_depth: int, clip_values: tuple[float, float]) -> torch.Tensor:
    """ART's FeatureSqueezing in torch, with its gradient estimate (the identity, BPDA)."""
    low, high = clip_values
    levels = float(np.rint(2**bit_depth - 1))
    squeezed = torch.round((x - low) / (high - low) * levels) / levels * (high - low) + low
    return x + (squeezed - x).detach()


def margins(logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """True-class logit minus the best other logit (negative: misclassified)."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], float("-inf")).max(1).values
    return (true - others).detach().double().cpu().numpy()
