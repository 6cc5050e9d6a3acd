"""The params file as it last passed the config check, so that a `dvc exp run -S` whose
values fail the check leaves the workspace as it was.

DVC composes params.yaml from conf/ with the `-S` overrides, and stages it in git, before any
stage runs; a stage that then refuses the config cannot stop DVC from writing it. So every
params file that passes the check (`make params`, or a stage that starts) is copied to
`.dvc/tmp/trashfire/params.yaml`, and a stage that refuses the config inside a DVC
experiment (DVC_EXP_NAME set) puts that copy back (or, in a fresh clone, the experiment's
baseline commit's), and git's index entry with it. The first stage refuses before any stage
has run, so dvc.lock is untouched as well.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from trashfire.core.records import atomic_path

DVC_EXPERIMENT = "DVC_EXP_NAME"  # DVC sets it for the stages an experiment runs
BASELINE = "DVC_EXP_BASELINE_REV"  # and the commit the experiment starts from


def checked_copy(params: Path) -> Path | None:
    """Where the last params file that passed the check is kept (None outside a DVC project)."""
    dvc = _dvc_folder(params)
    return None if dvc is None else dvc / "tmp" / "trashfire" / params.name


def remember_checked(params: str | Path) -> None:
    """Keep a copy of `params`, which has just passed the config check."""
    params = Path(params)
    copy = checked_copy(params)
    if copy is None or not params.is_file():
        return
    copy.parent.mkdir(parents=True, exist_ok=True)
    text = params.read_bytes()
    if copy.is_file() and copy.read_bytes() == text:
        return
    with atomic_path(copy) as tmp:
        tmp.write_bytes(text)


def restore_checked(params: str | Path) -> bool:
    """Inside a DVC experiment, put the last checked params file back in place of `params`
    (and in git's index, where DVC staged the refused one), or where none was kept (a fresh
    clone) the experiment's baseline commit's; returns whether it did."""
    params = Path(params)
    if not os.environ.get(DVC_EXPERIMENT):
        return False
    copy = checked_copy(params)
    text = copy.read_bytes() if copy is not None and copy.is_file() else _committed(params, os.environ.get(BASELINE, "HEAD"))
    if text is None:
        return False
    with atomic_path(params) as tmp:
        tmp.write_bytes(text)
    _git(params, "add", "--", params.name)
    return True


def _committed(params: Path, revision: str) -> bytes | None:
    shown = _git(params, "show", f"{revision}:./{params.name}")
    return shown.stdout if shown.returncode == 0 else None


def _git(params: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *arguments], cwd=params.resolve().parent, capture_output=True, check=False)


def _dvc_folder(params: Path) -> Path | None:
    folder = params.resolve().parent
    return folder / ".dvc" if (folder / ".dvc").is_dir() else None
