"""An imported model's torch half: its module built from the user's `_target_`, its weight
layers counted, its checkpoint read, and each problem one ConfigError line. The torch-free
half (what makes an option external, the checkpoint's hash, the supplied training cost) is
`trashfire.core.external`, which the cell grid reads."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from trashfire.core.errors import ConfigError
from trashfire.core.external import allowed_checkpoint, checkpoint_path, module_spec

SHOWN = 4  # keys named in an error about a checkpoint's keys


def build(key: str, spec: Any):
    """The user's module, wrapped to take ART's float64 arrays as the builders' modules do;
    an import or constructor failure is one ConfigError line."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from trashfire.models.architectures import Float32Input

    module = module_spec(spec)
    if not isinstance(module["_target_"], str) or not module["_target_"]:
        raise ConfigError(
            f"{key}._target_", f"got {module['_target_']!r}; allowed: your torch.nn.Module class as a dotted import path, e.g. mypackage.nets.Net"
        )
    if not isinstance(module["kwargs"], dict):
        raise ConfigError(f"{key}.kwargs", f"got {module['kwargs']!r}; allowed: a mapping of the module's constructor arguments")
    try:
        net = instantiate({"_target_": module["_target_"], **module["kwargs"]})
    except InstantiationException as err:
        reason = (str(err.__cause__) if err.__cause__ else str(err)).strip().splitlines()[0]
        raise ConfigError(f"{key}._target_", f"cannot build {module['_target_']}({_kwargs_text(module['kwargs'])}): {reason}") from None
    import torch

    if not isinstance(net, torch.nn.Module):
        raise ConfigError(f"{key}._target_", f"{module['_target_']} gives a {type(net).__name__}; allowed: a torch.nn.Module class")
    return Float32Input(net)


def _kwargs_text(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def counted_depth(key: str, spec: Any) -> int:
    """`depth` as given, else the module's weight layers (trashfire.models.architectures.count_weight_layers)."""
    if spec.get("depth") is not None:
        return int(spec["depth"])
    module = module_spec(spec)
    return _counted(key, json.dumps(module, sort_keys=True, default=str))


@lru_cache(maxsize=64)
def _counted(key: str, module_json: str) -> int:
    from trashfire.models.architectures import count_weight_layers

    depth = count_weight_layers(build(key, json.loads(module_json)))
    if depth < 1:
        raise ConfigError(f"{key}.depth", "the module has no Conv2d or Linear layer to count; give depth: <weight layers> (>= 1)")
    return depth


def load_state_dict(key: str, value: Any) -> dict[str, Any]:
    """The checkpoint's tensors by name; a file torch or safetensors cannot read is one line."""
    import torch

    path = checkpoint_path(key, value)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch's unpickling and safetensors' errors differ per corruption
        fmt = "safetensors" if path.suffix == ".safetensors" else "torch.save"
        reason = _first_line(err)
        if reason.startswith("Weights only load failed"):  # torch's paragraph on weights_only, for garbage and pickled modules alike
            reason = "torch.load(weights_only=True) cannot read it: corrupt, or more than tensors (a whole pickled model)"
        raise ConfigError(key, f"{value} is not a readable {fmt} state_dict ({reason}); allowed: {allowed_checkpoint()} written by {_writer(path)}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(key, f"{value} holds a {type(state).__name__}, not a state_dict of tensors; save model.state_dict() with {_writer(path)}")
    return state


def _writer(path: Path) -> str:
    return "safetensors.torch.save_file(model.state_dict(), path)" if path.suffix == ".safetensors" else "torch.save(model.state_dict(), path)"


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def check_keys(key: str, value: str, target: str, missing: list[str], unexpected: list[str]) -> None:
    """Missing or unexpected keys are a checkpoint of another module: name a few of each."""
    problems = [f"{label} {_some(keys)}" for label, keys in (("missing keys", missing), ("unexpected keys", unexpected)) if keys]
    if problems:
        raise ConfigError(key, f"{value} does not fit {target}: {'; '.join(problems)}; allowed: a state_dict of this module with these kwargs")


def _some(keys: list[str]) -> str:
    more = f" (+{len(keys) - SHOWN} more)" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more


MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[.*?\])\) from checkpoint, the shape in current model is torch\.Size\((\[.*?\])\)"
)


def size_mismatch(value: str, target: str, message: str) -> str:
    """torch's size-mismatch paragraph as a few `name checkpoint-shape vs module-shape`."""
    found = MISMATCH.findall(message)
    shown = "; ".join(f"{name} is {ours} in the checkpoint, {theirs} in the module" for name, ours, theirs in found[:SHOWN])
    more = f" (+{len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return f"{value} does not fit {target}: {shown or message.strip().splitlines()[0]}{more}; allowed: a state_dict of this module with these kwargs"


def shape_error(key: str, target: str, dataset: str, shape: tuple[int, ...], problem: str) -> ConfigError:
    return ConfigError(
        key,
        f"{target} does not fit {dataset}: {problem}; allowed: a module that maps prepared images of shape (N, {', '.join(map(str, shape))}) to (N, classes) logits",
    )
