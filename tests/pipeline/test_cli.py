"""The command line refuses bad input with one clear line and a non-zero exit, before any
training."""

import subprocess
import sys

import pytest

from tests.conftest import ATTACK_OPTIONS, ROOT, tiny_overrides
from trashfire.params import composed_yaml


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_one_line_error(result, *needles):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_unknown_attack_name_stops_params(tmp_path):
    result = run("trashfire.params", "attack=[fgm,carlini]", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(result, "attack", "carlini", f"available: {ATTACK_OPTIONS}")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    "override, needles",
    [
        ("attack.pgd.values=[0.1,-0.3]", ("attack.pgd.values", "-0.3", "> 0")),
        ("train.epochs=[0]", ("train.epochs", "got 0", ">= 1")),
    ],
)
def test_bad_values_stop_the_train_stage_before_training(tmp_path, override, needles):
    params = tmp_path / "params.yaml"
    params.write_text(composed_yaml(tiny_overrides(tmp_path)))
    result = run("trashfire.stages.train", "--params", str(params), override)
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "models").exists()


def test_bad_values_stop_params_composition(tmp_path):
    result = run("trashfire.params", "attack.fgm.values=[-1]", "--out", str(tmp_path / "p.yaml"))
    assert_one_line_error(result, "attack.fgm.values", "-1")


def test_missing_params_file_names_the_fix(tmp_path):
    result = run("trashfire.stages.train", "--params", str(tmp_path / "nope.yaml"))
    assert_one_line_error(result, "nope.yaml", "make params")


def test_unwritable_output_folder_is_one_line(tmp_path):
    """A file where an output folder must go is a config error, found before any work."""
    params = tmp_path / "params.yaml"
    locked = tmp_path / "locked"
    locked.mkdir()
    params.write_text(composed_yaml(tiny_overrides(tmp_path, f"paths.processed={locked / 'processed'}")))
    (locked / "processed").write_text("a file where a folder must go")
    result = run("trashfire.stages.prepare", "--params", str(params))
    assert_one_line_error(result, "paths.processed", "locked/processed is a file", "allowed: a folder path")
