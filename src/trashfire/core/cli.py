"""The stage command line: `python -m trashfire.<stage> [--params params.yaml] [key=value ...]`.

A stage reads the composed params.yaml (the snapshot DVC tracks), applies dotted overrides,
validates everything, normalises it (`config.normalise`), then runs. A TrashfireError ends
the process with one line on stderr and exit status 2, before any long compute; a config
error inside `dvc exp run` puts params.yaml back as it last passed the check
(trashfire.core.workspace).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trashfire.core.checks import refuse_moved
from trashfire.core.config import load_params, normalise, validate
from trashfire.core.errors import ConfigError, TrashfireError
from trashfire.core.grid import split_groups
from trashfire.core.workspace import remember_checked, restore_checked

_ABSENT = object()


def parse_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Apply `key=value` overrides to keys params.yaml has; `+key=value` adds a key, as in
    Hydra, so that a misspelt key is refused instead of passing silently for a new one."""
    updates = [_parse(cfg, override) for override in overrides]
    try:
        return OmegaConf.merge(cfg, *(update for _, update in updates))  # one merge: each costs a copy of cfg
    except Exception:  # find the override that does not fit, and name it
        for key, update in updates:
            try:
                cfg = OmegaConf.merge(cfg, update)
            except Exception as err:  # OmegaConf's messages are several lines
                raise ConfigError(key, f"cannot set it: {str(err).splitlines()[0]}") from None
        raise


def _parse(cfg: DictConfig, override: str) -> tuple[str, DictConfig]:
    key, sep, value = override.partition("=")
    adding, key = key.startswith("+"), key.lstrip("+")
    if not sep or not key:
        raise ConfigError(override, "overrides take the form key=value (+key=value adds a key)")
    refuse_moved(key)
    if not adding and OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False) is _ABSENT:
        raise ConfigError(key, f"no such key in the params file; {_keys_beside(cfg, key)} (+{key}=<value> adds a new one)")
    try:
        return key, OmegaConf.from_dotlist([f"{key}={value}"])
    except Exception as err:  # OmegaConf's parse errors are several lines
        raise ConfigError(key, f"cannot parse {value!r}: {str(err).splitlines()[0]}; lists are written [a,b], mappings {{k: v}}") from None


def _keys_beside(cfg: DictConfig, key: str) -> str:
    """The keys of the deepest mapping on the way to `key` that exists."""
    parent = key.rpartition(".")[0]
    while parent and not OmegaConf.is_dict(OmegaConf.select(cfg, parent, default=None, throw_on_missing=False)):
        parent = parent.rpartition(".")[0]
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return f"allowed {'in ' + parent if parent else 'at the top'}: {', '.join(map(str, node))}"


def configure_logging(prog: str) -> None:
    """Our INFO lines on stderr. ART configures logging on import and disables the loggers
    that exist by then, ours among them: switch them back on."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"{prog}: %(message)s"))
    package = logging.getLogger("trashfire")
    package.handlers[:] = [handler]
    package.setLevel(logging.INFO)
    package.propagate = False
    logging.getLogger("art").setLevel(logging.WARNING)  # per-batch "success rate" lines
    for name, logger in logging.Logger.manager.loggerDict.items():
        if name.startswith("trashfire") and isinstance(logger, logging.Logger):
            logger.disabled = False


def check_pipeline(cfg: DictConfig) -> str | None:
    """What the whole pipeline needs of a config beyond each stage's own checks, said by `make
    params` and by every stage's command before it computes, not after the attacks: the
    survival stage's train/test split by `survival.split_by` needs two groups. Without them the
    pipeline still runs (the survival stage fits no model and says why; every metric but TRASH
    stands), so this is a warning, returned. A sweep trial (one cell of a grid,
    trashfire.experiment) and the library's own calls are not held to it."""
    if not cfg.survival.get("fitters"):
        return None  # survival left out on purpose
    by = cfg.survival.split_by
    groups = split_groups(cfg, by)
    if groups >= 2:
        return None
    warning = (
        f"survival.split_by: the grid gives {groups} {by} group; the survival stage's train/test split by {by} needs at least 2, "
        "so it will fit no model and TRASH will be missing (every other metric stands): add a model, seed or train-time defence, "
        "split by model_hash (adds predict-time defences) or attack_hash, or set survival.fitters=[] to leave survival out"
    )
    logging.getLogger("trashfire").warning("%s", warning)
    return warning


def run_cli(prog: str, description: str, run: Callable[[DictConfig], Any], argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--params", default="params.yaml", help="composed config (default: params.yaml)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.epochs=[1,2]")
    args = parser.parse_args(argv)
    configure_logging(prog)
    try:
        cfg = validate(parse_overrides(load_params(args.params), args.overrides))
        check_pipeline(cfg)
        if not args.overrides:
            remember_checked(args.params)
        run(normalise(cfg))
    except ConfigError as err:
        restored = restore_checked(args.params)  # a `dvc exp run -S` that fails the check leaves params.yaml as it was
        print(f"{prog}: {err}" + (f"; {args.params} is back as it last passed the check" if restored else ""), file=sys.stderr)
        sys.exit(err.exit_code)
    except TrashfireError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except OSError as err:  # an unwritable folder or a full disk: the user's to fix
        print(f"{prog}: cannot access {err.filename or 'a file'}: {err.strerror or err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; finished cells are kept, rerun to continue", file=sys.stderr)
        sys.exit(130)
