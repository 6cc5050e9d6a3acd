"""Two nodes share the per-cell caches through git and a DVC remote (docs/cluster.md, "Sharing
the caches between machines"): two clones of one project (its origin a bare git repository, its
DVC remote a folder) split a grid through one Optuna study in a journal file. Node a records its
cells (`dvc commit`, `dvc push`, dvc.lock through git); node b, holding its own cells
uncommitted, merges a's into its working copy, losing none of its own, and its `dvc repro`
trains and attacks nothing; node a's `git pull` + `dvc pull` then gives it every cell too.

What DVC does, found here: a checkout (`dvc pull`) makes a directory output exactly the
directory in dvc.lock, `persist: true` or not. Node b's uncommitted cells make `dvc pull` stop
("Can't remove the following unsaved files without confirmation"); `--force` deletes them, and
cells b had committed to its DVC cache are removed from its working copy without a word, after
which `dvc repro` finds the pipeline up to date on a's half of the grid. `git pull` + `dvc repro`
without a's cells computes them again. A checkout of single files inside the directory adds
them and removes nothing: MERGE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.pipeline.test_dvc import runner, runner_env, scratch_project, stages_run, tiny_default

pytestmark = pytest.mark.cluster  # with the SLURM tests, a CI step of its own (make test-slurm)

# the grid: 2 models x 2 defences, each trial one trained model of its own (a predict-time
# defence would share the undefended model with another trial, which the other node might
# train too), and FGM and PGD at one strength: 4 training cells, 8 attack cells
GROUPS = {"override /model": ["fcnet", "mlp2"], "override /defence": ["none", "gauss_in"]}
CELL_FOLDERS = ("models", "reports/attacks")
DECLARATIONS = "reports/attacks/declarations/"  # one file per attack class, written alike by every node

# the commands of docs/cluster.md, run as a user runs them: a node records its cells (after
# merging those recorded before), and merges the recorded cells into its own
RECORD = "dvc commit -f -d attack && dvc push -d attack && git add dvc.lock && git commit -q -m 'cells of a node' && git push -q"
MERGE = (
    "git pull -q && dvc fetch && "
    "dvc diff --json --targets models reports/attacks"
    ' | python -c \'import json, sys; print(*(e["path"] for e in json.load(sys.stdin)["deleted"]), sep="\\n")\''
    " | xargs -r dvc checkout"
)


def grid_default() -> str:
    """The scratch project's default: the tiny preset (on the FC net) with GROUPS, attacked at one strength."""
    preset = yaml.safe_load(tiny_default().removeprefix("# @package _global_\n"))
    preset["defaults"] = [{key: GROUPS.get(key, value) for key, value in entry.items()} for entry in preset["defaults"]]
    for attack in ("fgm", "pgd"):
        preset["attack"][attack]["values"] = [0.3]
    return "# @package _global_\n" + yaml.safe_dump(preset, sort_keys=False)


def sweep(node, study: Path, models: str) -> str:
    command = [
        sys.executable,
        "-m",
        "trashfire.experiment",
        "--multirun",
        "hparams_search=training_grid",
        f"model=choice({models})",
        "defence=choice(none,gauss_in)",
        "train.epochs=choice(3)",
        f"hydra.sweep.dir={node.repo / 'multirun'}",
    ]
    environment = runner_env(node.repo) | {"TRASHFIRE_STUDY_URL": f"journal://{study}"}
    result = subprocess.run(command, cwd=node.repo, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def shell(node, line: str) -> str:
    result = subprocess.run(["bash", "-c", line], cwd=node.repo, env=runner_env(node.repo), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{line}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def cells(node) -> dict[str, int]:
    """Every file of the cell caches, with its mtime."""
    return {str(p.relative_to(node.repo)): p.stat().st_mtime_ns for folder in CELL_FOLDERS for p in (node.repo / folder).rglob("*") if p.is_file()}


def contents(node, names) -> dict[str, bytes]:
    return {name: (node.repo / name).read_bytes() for name in names}


def nodes(tmp_path: Path):
    """A project whose default is the grid, params.yaml composed and a DVC remote in a folder,
    in a bare git repository (the origin); two clones of it (the nodes)."""
    seed = scratch_project(tmp_path / "seed")
    (seed.repo / "conf" / "experiment" / "default.yaml").write_text(grid_default())
    seed(sys.executable, "-m", "trashfire.params")
    seed("dvc", "remote", "add", "-d", "shared", str(tmp_path / "dvc-remote"))
    seed("git", "add", "-A")
    seed("git", "commit", "-q", "-m", "the grid, its params.yaml, the shared remote")
    subprocess.run(["git", "clone", "-q", "--bare", str(seed.repo), str(tmp_path / "origin.git")], check=True)
    clones = []
    for name in ("a", "b"):
        subprocess.run(["git", "clone", "-q", str(tmp_path / "origin.git"), str(tmp_path / name)], check=True)
        clones.append(runner(tmp_path / name))
    return clones


def test_two_nodes_split_a_grid_and_the_second_repro_recomputes_nothing_of_the_first(tmp_path):
    a, b = nodes(tmp_path)
    study = tmp_path / "shared" / "optuna.log"
    study.parent.mkdir()
    # node a takes the fcnet half of the study's grid before node b joins (a split that does
    # not depend on which node's sweeper starts first); b's sweep of the whole grid runs the rest
    sweep(a, study, "fcnet")
    assert "2 queued by this run, 2 already done" in sweep(b, study, "fcnet,mlp2")
    own_a, own_b = cells(a), cells(b)
    shared = {name for name in own_a if name.startswith(DECLARATIONS)}  # each node declares the attacks it ran
    assert shared and contents(a, shared) == contents(b, shared)
    assert not (set(own_a) & set(own_b)) - shared  # no cell computed on both nodes
    for node_cells in (own_a, own_b):
        assert count(node_cells, "models/*.json") == 2 and count(node_cells, "reports/attacks/*.json") == 4

    shell(a, MERGE)  # the first node to record: nothing to merge yet
    shell(a, RECORD)

    # a plain `dvc pull` would make b's folders a's manifest: DVC refuses, b's cells unsaved
    pull = subprocess.run(["bash", "-c", "git pull -q && dvc pull"], cwd=b.repo, env=runner_env(b.repo), capture_output=True, text=True, timeout=600)
    assert pull.returncode != 0 and "Can't remove the following unsaved files without confirmation" in pull.stderr, pull.stdout + pull.stderr
    assert cells(b) == own_b
    shell(b, MERGE)
    merged = cells(b)
    assert set(merged) == set(own_a) | set(own_b) and count(merged, "models/*.json") == 4 and count(merged, "reports/attacks/*.json") == 8
    assert {name: merged[name] for name in own_b} == own_b  # b's own cells untouched
    assert contents(b, own_a) == contents(a, own_a)  # a's cells as a computed them

    repro = b("dvc", "repro", "attack")  # the stages that keep cells; the analysis after them reads them
    assert "4 training cells, 4 cached, 0 to train" in repro and "8 attack cells, 8 recorded, 0 to run" in repro, repro
    assert {"train", "attack"} <= stages_run(repro), repro  # their outputs were not dvc.lock's: DVC ran them, and they found every cell
    assert cells(b) == merged  # no cell written again
    shell(b, "dvc push && git add dvc.lock && git commit -q -m 'every cell' && git push -q")

    # node a: its own cells were committed, so a plain pull adds b's and removes nothing (of
    # the stages up to attack: the others have not run, and `dvc pull` would miss their outputs)
    shell(a, "git pull -q && dvc pull -d attack")
    pulled = cells(a)
    assert set(pulled) == set(merged) and {name: pulled[name] for name in own_a} == own_a
    assert contents(a, merged) == contents(b, merged)
    assert stages_run(a("dvc", "repro", "attack")) == set()  # every cell in both working copies, exactly once


def count(node_cells: dict[str, int], pattern: str) -> int:
    return sum(Path(name).match(pattern) for name in node_cells)
