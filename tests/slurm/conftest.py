"""The `slurm` tests submit real jobs to a running SLURM cluster: `make test-slurm` starts a
single-node one (tools/slurm/start.sh) and stops it after. Where no `sinfo` answers they are
skipped, with the reason; under TRASHFIRE_REQUIRE_SLURM=1 (CI, make test-slurm) they fail
instead, so that a cluster that did not start is not a green run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def cluster_answers() -> str | None:
    """None where a SLURM cluster answers, else why not."""
    if shutil.which("sinfo") is None:
        return "no SLURM here (no sinfo on PATH): tools/slurm/start.sh installs and starts a single-node cluster"
    try:
        shown = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s: is slurmctld running? (tools/slurm/start.sh)"
    if shown.returncode != 0 or not any(state.rstrip("*") in ("idle", "mixed", "allocated") for state in shown.stdout.split()):
        return f"no SLURM node is up (sinfo: {(shown.stdout + shown.stderr).strip()[:200]}); start one with tools/slurm/start.sh"
    return None


@pytest.hookimpl(
    trylast=True
)  # after `-m`'s deselection: a run that selects no slurm test (`make test`) asks no sinfo, whose time-out would hold up each collection
def pytest_collection_modifyitems(config, items):
    why = None
    for item in items:
        if item.get_closest_marker("slurm") is None:
            continue
        why = why or cluster_answers() or ""
        if why and os.environ.get("TRASHFIRE_REQUIRE_SLURM") != "1":
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(autouse=True)
def _cluster_required(request):
    if request.node.get_closest_marker("slurm") is not None and os.environ.get("TRASHFIRE_REQUIRE_SLURM") == "1":
        why = cluster_answers()
        if why:
            pytest.fail(f"TRASHFIRE_REQUIRE_SLURM=1 but {why}")
