"""Compose conf/ into params.yaml, the snapshot DVC tracks (`make params`).

    python -m trashfire.params [hydra overrides ...] [--out params.yaml] [--check]

The composition is the one `dvc exp run -S` performs (compose, resolve, dump), so the two
never disagree: it is validated, and `defence_cell` stays a key of its own (each stage
normalises what it reads: `trashfire.core.config.normalise`). `--check` exits 1 when the
file on disk is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from trashfire.core import external
from trashfire.core.cli import check_pipeline
from trashfire.core.config import compose, validate
from trashfire.core.errors import TrashfireError
from trashfire.core.records import atomic_path
from trashfire.core.workspace import remember_checked


def composed_yaml(overrides: list[str]) -> str:
    cfg = compose(overrides)
    OmegaConf.resolve(cfg)
    check_pipeline(validate(cfg))
    return OmegaConf.to_yaml(with_checkpoint_hashes(cfg))


def with_checkpoint_hashes(cfg):
    """Each external model's checkpoint content (sha256) written beside its path: DVC tracks
    params, not the file, so new weights at the same path rerun `train` after `make params`.
    The cells are named by the file's own hash in any case (`trashfire.core.external`)."""
    for name, spec in cfg.model.items():
        if external.is_external(spec) and spec.get(external.CHECKPOINT):
            with open_dict(spec):
                spec.checkpoint_sha256 = external.checkpoint_sha256(f"model.{name}.{external.CHECKPOINT}", spec.get(external.CHECKPOINT))
    return cfg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trashfire.params", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=[resnet18] attack.pgd.values=[0.1]")
    parser.add_argument("--out", default="params.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out differs from a fresh composition")
    args = parser.parse_args(argv)
    try:
        text = composed_yaml(args.overrides)
    except TrashfireError as err:
        print(f"trashfire.params: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    out = Path(args.out)
    if args.check:
        if not out.is_file() or out.read_text() != text:
            print(f"trashfire.params: {out} is stale; run `make params`", file=sys.stderr)
            sys.exit(1)
        return
    with atomic_path(out) as tmp:
        tmp.write_text(text)
    remember_checked(out)


if __name__ == "__main__":
    main()
