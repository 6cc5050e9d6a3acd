"""The stage command line: `python -m trashfire.<stage> [--params params.yaml] [key=value ...]`.

A stage reads the composed params.yaml (the snapshot DVC tracks), applies dotted overrides,
validates everything, then runs. A TrashfireError ends the process with one line on stderr
and exit status 2, before any long compute.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from trashfire.config import load_params, validate
from trashfire.errors import ConfigError, TrashfireError


def parse_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    for override in overrides:
        if "=" not in override:
            raise ConfigError(override, "overrides take the form key=value")
    try:
        return OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    except Exception as err:  # OmegaConf's parse errors are several lines
        raise ConfigError("overrides", str(err).splitlines()[0]) from None


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


def run_cli(prog: str, description: str, run: Callable[[DictConfig], Any], argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--params", default="params.yaml", help="composed config (default: params.yaml)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.epochs=[1,2]")
    args = parser.parse_args(argv)
    configure_logging(prog)
    try:
        cfg = validate(parse_overrides(load_params(args.params), args.overrides))
        run(cfg)
    except TrashfireError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except OSError as err:  # an unwritable folder or a full disk: the user's to fix
        print(f"{prog}: cannot access {err.filename or 'a file'}: {err.strerror or err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; finished cells are kept, rerun to continue", file=sys.stderr)
        sys.exit(130)
