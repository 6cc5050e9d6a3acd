"""Atomic files: a writer killed mid-write leaves only its temp file, which no reader takes
for the record and the next stage run deletes; a live writer's temp file is left alone."""

import signal
import subprocess
import sys

from trashfire.core import records
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


def test_read_npz_gives_what_numpy_reads_for_every_kind_of_outcome_array(tmp_path):
    """The timing stage's own .npy header parser (10^5 cells) against numpy's reader: dtypes,
    shapes, memory order, empty and 0-d arrays, and writable results, compressed or not."""
    import numpy as np
    import pytest

    from trashfire.core.errors import DataError
    from trashfire.core.records import read_npz, write_npz

    arrays = {
        "flops": np.arange(5, dtype=np.int64),
        "event": np.array([True, False, True]),
        "broken_by": np.array(["apgd-ce", "", "square"]),
        "norm_by_step": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "margin": np.array([0.5, np.nan, -np.inf]),
        "empty": np.zeros((0, 3)),
        "scalar": np.array(7.25),
        "big_endian": np.arange(3, dtype=">i4"),
    }
    for compressed in (True, False):
        path = tmp_path / f"cell-{compressed}.npz"
        write_npz(path, compressed=compressed, **arrays)
        read = read_npz(path)
        with np.load(path) as reference:
            assert sorted(read) == sorted(reference.files)
            for name in reference.files:
                assert read[name].dtype == reference[name].dtype, name
                assert read[name].shape == reference[name].shape, name
                np.testing.assert_array_equal(read[name], reference[name])
                assert read[name].flags.writeable, name
    whole = (tmp_path / "cell-False.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[:200])  # no central directory: zipfile reads it, and refuses
    flipped = bytearray(whole)
    flipped[whole.index(b"\x93NUMPY") + 130] ^= 0xFF  # a byte of the first array's data: its CRC no longer matches
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    for name in ("cut.npz", "flipped.npz"):
        with pytest.raises(DataError, match="corrupt array file"):
            read_npz(tmp_path / name)


def test_read_ahead_skips_missing_files_and_leaves_no_file_open(tmp_path):
    """The timing stage asks the kernel for the next cells' files before it reads them: a file
    that is not there is its reader's to report, and no descriptor is left open."""
    import os

    files = [tmp_path / f"{i}.json" for i in range(50)]
    for path in files:
        path.write_text("{}")
    open_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    records.read_ahead([*files, tmp_path / "missing.npz"])
    if open_before is not None:
        assert len(os.listdir("/proc/self/fd")) == open_before
    assert all(path.read_text() == "{}" for path in files)


def test_a_text_column_as_categories_writes_the_same_parquet_file_as_its_strings(tmp_path):
    """The timing stage keeps 10^7 rows' labels as codes of a categorical: the file must be the
    one its object column writes, byte for byte, and read back as text (a missing label as
    None), with the float column that holds in float32 narrowed either way."""
    import numpy as np
    import pandas as pd

    codes = np.array([0, 1, -1, 2, 0, 1])
    levels = np.array(["pgd linf", "fgm l2", "hsj"], dtype=object)
    as_text = pd.Series(np.where(codes >= 0, levels[np.maximum(codes, 0)], None), dtype=object)
    strings = pd.DataFrame({"duration": [0.5, 1.25, 2.0, 3.0, 0.1, 7.0], "attack_family": as_text, "depth": [1.0, 2, 3, 4, 5, 6]})
    categories = strings.assign(attack_family=pd.Categorical.from_codes(codes, levels))
    records.write_table(strings, tmp_path / "strings.parquet")
    records.write_table(categories, tmp_path / "categories.parquet")
    assert (tmp_path / "strings.parquet").read_bytes() == (tmp_path / "categories.parquet").read_bytes()
    read = records.read_table(tmp_path / "categories.parquet")
    pd.testing.assert_frame_equal(read, strings)
    assert read["attack_family"].tolist() == ["pgd linf", "fgm l2", None, "hsj", "pgd linf", "fgm l2"]
