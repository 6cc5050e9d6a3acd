"""Models trained elsewhere: any torch module, built from its `_target_` and `kwargs`, with its
weights from a local state_dict file (`.pt`/`.pth` from torch.save, or `.safetensors`).

An external model option is a model option with a `checkpoint` key (conf/model/external.yaml).
The train stage imports it instead of training it (`trashfire.models.training.import_cell`):
it loads the checkpoint into the module, checks the keys and a forward pass on one prepared
sample, and writes the usual weights and TrainRecord, so that attack and brittle load it as
they load any trained cell. Its identity is the checkpoint's content (sha256), not its path.

We did not train it, so its training cost is supplied: `t_train: {process: s, wall: s}`, the
training seconds per training sample on both clocks, or `train_log: <file>`, a JSON file
(`TRAIN_LOG_KEYS`) with the whole run's seconds on both clocks and its training-set size:

    {"n_train": 60000, "process_seconds": 5123.4, "wall_seconds": 1400.2}

Its training FLOPs (the compute clock, trashfire.models.flops) come from the same place when
given there: `t_train: {..., flops: F}` per training sample, or the log's `"flops"`, the whole
run's FLOPs (divided by its n_train, as the seconds). Otherwise `epochs: E` estimates them as E
training steps per sample (forward and backward to the weights, measured on the module), and
`t_train_source` ends in "; flops estimated"; otherwise they are unknown (None).

Epochs and learning rate are unknown: records and tables hold null (NaN) for them.

What its publisher reports of it, to set beside what trashfire measures: `reported:
{clean_acc, robust_acc, attack, eps}` (accuracies as fractions, eps in pixel units), or
`model_info: <folder>`, RobustBench's model info in its repository's layout
(<folder>/<dataset>/<threat_model>/<name>.json, accuracies in percent, eps as "8/255"). Neither
enters the cell's identity: the cards and the report read them when they are written.
"""

from __future__ import annotations

import json
import logging
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from trashfire.core.errors import ConfigError
from trashfire.core.records import file_sha256
from trashfire.core.schema.units import COMPUTE as FLOPS  # optional beside the clocks: t_train.flops per training sample, a log's whole run
from trashfire.core.schema.units import SECONDS as CLOCKS  # the clocks a supplied t_train must give

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"  # the key that makes a model option external
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".safetensors")
TRAIN_LOG_KEYS = ("n_train", "process_seconds", "wall_seconds")
UNKNOWN = "unknown"  # t_train: unknown, a model whose training cost nobody recorded
ESTIMATED = "; flops estimated"  # t_train_source's suffix when the FLOPs are epochs x a training step
# keys of an external option that are not the module's: the import's and the validator's
REPORTED, MODEL_INFO = "reported", "model_info"
REPORTED_KEYS = ("clean_acc", "robust_acc", "attack", "norm", "eps")
THREAT_NORMS = {"Linf": "inf", "L2": "2"}  # RobustBench's threat models as trashfire's norms
OWN_KEYS = ("_target_", "kwargs", CHECKPOINT, "checkpoint_sha256", "t_train", "train_log", "epochs", "depth", REPORTED, MODEL_INFO, "rules")


def is_external(spec: Any) -> bool:
    """A model option or a cell's hashed model spec that imports a checkpoint."""
    return hasattr(spec, "get") and (CHECKPOINT in spec or "checkpoint_sha256" in spec)


def allowed_checkpoint() -> str:
    return f"an existing state_dict file ({', '.join(CHECKPOINT_SUFFIXES)})"


def checkpoint_path(key: str, value: Any) -> Path:
    """The checkpoint file, relative paths from the project root (where the stages run)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"got {value!r}; allowed: {allowed_checkpoint()}, e.g. checkpoints/net.pt")
    path = Path(value)
    if path.suffix not in CHECKPOINT_SUFFIXES:
        raise ConfigError(key, f"got {value!r}; allowed: {allowed_checkpoint()} (the suffix picks the format)")
    if not path.is_file():
        raise ConfigError(key, f"{value} not found (from {Path.cwd()}); allowed: {allowed_checkpoint()}")
    return path


def checkpoint_sha256(key: str, value: Any) -> str:
    path = checkpoint_path(key, value)
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    """Every stage computes the grid, so a large checkpoint is hashed once per process and
    again only when the file changes (its time or size)."""
    return file_sha256(path)


def current_sha256(key: str, spec: Any) -> str:
    """The checkpoint's hash now. params.yaml records it at `make params`; weights replaced
    since then are still imported as what they are, with a warning that DVC did not see the
    change."""
    actual = checkpoint_sha256(f"{key}.{CHECKPOINT}", spec.get(CHECKPOINT))
    recorded = spec.get("checkpoint_sha256")
    if recorded and actual != recorded:
        log.warning(
            "%s.%s changed since `make params` (params.yaml has sha256 %s..., the file %s...); run `make params` so that DVC sees it",
            key,
            CHECKPOINT,
            recorded[:12],
            actual[:12],
        )
    return actual


def t_train(key: str, spec: Any) -> dict[str, Any]:
    """The supplied training cost: {process, wall} seconds per training sample, `source`
    ("config" or "log:<path>") and `n_train` (the log's; None from the config); `flops` per
    training sample when supplied, or `epochs` to estimate them from (`source` then ends in
    ESTIMATED). Neither key is there when not given, so cells of configs without them keep
    their hash."""
    given, log_file = spec.get("t_train"), spec.get("train_log")
    allowed = (
        "t_train: {process: <s>, wall: <s>} (training seconds per training sample on both clocks), or train_log: <a JSON file with n_train, "
        f"process_seconds, wall_seconds>, or t_train: {UNKNOWN} (then no TRASH)"
    )
    if given == UNKNOWN and log_file is None:  # a checkpoint of someone else's training (RobustBench's): TRASH is missing, the rest stands
        return _with_epochs(key, {"process": None, "wall": None, "source": UNKNOWN, "n_train": None}, spec.get("epochs"))
    if given is not None and log_file is not None:
        raise ConfigError(f"{key}.t_train", f"given twice, as t_train and as train_log {log_file}; allowed: one of {allowed}")
    if given is None and log_file is None:
        raise ConfigError(f"{key}.t_train", f"missing; trashfire did not train this model, so its training cost must be supplied: {allowed}")
    if given is not None:
        if not hasattr(given, "keys") or not set(CLOCKS) <= set(given.keys()) <= {*CLOCKS, FLOPS}:
            raise ConfigError(
                f"{key}.t_train",
                f"got {_plain(given)!r}; allowed: {{process: <s>, wall: <s>}}, seconds per training sample, and optionally flops: <FLOPs per training sample>",
            )
        per_sample = {clock: _seconds(f"{key}.t_train.{clock}", given[clock]) for clock in CLOCKS}
        supplied = {**per_sample, "source": "config", "n_train": None}
        if given.get(FLOPS) is not None:
            supplied[FLOPS] = _flops(f"{key}.t_train.{FLOPS}", given[FLOPS])
    else:
        supplied = _read_log(f"{key}.train_log", log_file)
    return _with_epochs(key, supplied, spec.get("epochs"))


def _with_epochs(key: str, supplied: dict[str, Any], epochs: Any) -> dict[str, Any]:
    """`epochs`, when given, prices the training FLOPs the config or log do not give."""
    if epochs is None:
        return supplied
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"{key}.epochs", f"got {epochs!r}; must be an integer >= 1 (the training epochs, to estimate the training FLOPs)")
    if FLOPS in supplied:
        where = "t_train.flops" if supplied["source"] == "config" else f"the log {supplied['source'].removeprefix('log:')}"
        raise ConfigError(f"{key}.epochs", f"given with the training FLOPs of {where}; allowed: one of them (epochs only estimates FLOPs not supplied)")
    return {**supplied, "epochs": epochs, "source": supplied["source"] + ESTIMATED}


def _read_log(key: str, value: Any) -> dict[str, Any]:
    allowed = f"a JSON file holding {{{', '.join(f'{k!r}: ...' for k in TRAIN_LOG_KEYS)}}}, the whole training run's seconds"
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"got {value!r}; allowed: {allowed}")
    path = Path(value)
    if not path.is_file():
        raise ConfigError(key, f"{value} not found (from {Path.cwd()}); allowed: {allowed}")
    try:
        log = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(key, f"{value} is not JSON ({err}); allowed: {allowed}") from None
    missing = [k for k in TRAIN_LOG_KEYS if not isinstance(log, dict) or k not in log]
    if missing:
        raise ConfigError(key, f"{value} has no {', '.join(missing)}; allowed: {allowed}")
    n_train = log["n_train"]
    if isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1:
        raise ConfigError(key, f"{value}: n_train is {n_train!r}; must be an integer >= 1")
    per_sample = {clock: _seconds(f"{key} ({value}: {clock}_seconds)", log[f"{clock}_seconds"]) / n_train for clock in CLOCKS}
    supplied = {**per_sample, "source": f"log:{value}", "n_train": n_train}
    if log.get(FLOPS) is not None:  # optional: the whole run's FLOPs
        supplied[FLOPS] = _flops(f"{key} ({value}: {FLOPS})", log[FLOPS]) / n_train
    return supplied


def _seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"got {value!r}; must be a finite number of seconds > 0")
    return float(value)


def _flops(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"got {value!r}; must be a finite number of FLOPs > 0")
    return float(value)


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def module_spec(spec: Any) -> dict[str, Any]:
    """The module's own config: its `_target_` and its `kwargs`."""
    spec = _plain(spec)
    return {"_target_": spec.get("_target_"), "kwargs": spec.get("kwargs") or {}}


def reported(key: str, spec: Any) -> dict[str, Any] | None:
    """The publisher's figures of an imported model ({clean_acc, robust_acc, attack, eps,
    source}), from `reported` or from RobustBench's model info; None where neither is given.
    Each problem is one ConfigError line naming what is allowed."""
    given, folder = spec.get(REPORTED), spec.get(MODEL_INFO)
    if given is not None and folder is not None:
        raise ConfigError(f"{key}.{REPORTED}", f"given twice, as {REPORTED} and as {MODEL_INFO} {folder}; allowed: one of them")
    if folder is not None:
        return _model_info(f"{key}.{MODEL_INFO}", folder, module_spec(spec)["kwargs"])
    if given is None:
        return None
    given = _plain(given)
    allowed = "{clean_acc: <fraction>, robust_acc: <fraction>, attack: <name>, norm: inf|1|2, eps: <pixel units>}"
    if not isinstance(given, dict) or set(given) - set(REPORTED_KEYS) or "clean_acc" not in given:
        raise ConfigError(f"{key}.{REPORTED}", f"got {given!r}; allowed: {allowed} (clean_acc required)")
    figures = {k: given.get(k) for k in REPORTED_KEYS}
    for name in ("clean_acc", "robust_acc"):
        if figures[name] is not None:
            figures[name] = _fraction(f"{key}.{REPORTED}.{name}", figures[name])
    if figures["eps"] is not None:
        figures["eps"] = _eps(f"{key}.{REPORTED}.eps", figures["eps"])
    if figures["norm"] is not None:
        figures["norm"] = str(figures["norm"])
    return {**figures, "source": "config"}


def _model_info(key: str, folder: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    allowed = "a folder in RobustBench's model_info layout: <folder>/<dataset>/<threat_model>/<name>.json"
    if not isinstance(folder, str) or not folder:
        raise ConfigError(key, f"got {folder!r}; allowed: {allowed}")
    names = [kwargs.get(k) for k in ("dataset", "threat_model", "name")]
    if not all(isinstance(n, str) and n for n in names):
        raise ConfigError(key, "needs the model's kwargs dataset, threat_model and name (model=robustbench) to find its file")
    path = Path(folder, *names[:2], f"{names[2]}.json")
    if not path.is_file():
        raise ConfigError(key, f"{path} not found (from {Path.cwd()}); allowed: {allowed}")
    try:
        info = json.loads(path.read_text())
        clean, robust = float(info["clean_acc"]) / 100, info.get("autoattack_acc")
        figures = {"clean_acc": clean, "robust_acc": None if robust is None else float(robust) / 100}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as err:
        raise ConfigError(
            key, f"{path} is not RobustBench model info ({type(err).__name__}: {err}); it needs clean_acc and autoattack_acc in percent"
        ) from None
    for name in ("clean_acc", "robust_acc"):
        if figures[name] is not None:
            _fraction(f"{key} ({path}: {name})", figures[name])
    eps = _eps(f"{key} ({path}: eps)", info["eps"]) if info.get("eps") is not None else None
    attack = "autoattack" if figures["robust_acc"] is not None else None
    return {**figures, "attack": attack, "norm": THREAT_NORMS.get(names[1]), "eps": eps, "source": f"RobustBench model info {path}"}


def _fraction(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(key, f"got {value!r}; must be an accuracy in [0, 1]")
    return float(value)


def _eps(key: str, value: Any) -> float:
    """eps in pixel units: a number, or a fraction written as RobustBench does ("8/255")."""
    try:
        if isinstance(value, str) and "/" in value:
            numerator, denominator = value.split("/")
            eps = float(numerator) / float(denominator)
        elif isinstance(value, bool):
            raise ValueError
        else:
            eps = float(value)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(key, f"got {value!r}; allowed: a number or a fraction such as 8/255 (pixel units)") from None
    if not math.isfinite(eps) or eps <= 0:
        raise ConfigError(key, f"got {value!r}; must be > 0 (pixel units)")
    return eps
