"""Atomic files: a writer killed mid-write leaves only its temp file, which no reader takes
for the record and the next stage run deletes; a live writer's temp file is left alone."""

import signal
import subprocess
import sys

from trashfire.core.records import atomic_path, remove_dead_temps

KILLED_WRITER = """
import os, signal, sys
from trashfire.core.records import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text('{"half": ')
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_writer_killed_mid_write_leaves_no_record_and_its_temp_is_removed(tmp_path):
    record = tmp_path / "cell.json"
    result = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(record)])
    assert result.returncode == -signal.SIGKILL
    assert not record.exists()  # the half-written content never reaches the record's name
    leftovers = list(tmp_path.glob(".*.tmp"))
    assert len(leftovers) == 1 and leftovers[0].read_text() == '{"half": '

    with atomic_path(tmp_path / "other.json") as live:  # this process is alive: its temp stays
        live.write_text("{}")
        assert remove_dead_temps(tmp_path) == 1
        assert live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json"]
