"""Atomic files: a record appears whole or not at all, so a killed run never leaves a half
file that a rerun trusts. Each writer writes a temp file beside the target, then renames."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import socket
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from trashfire.core.errors import DataError

_UMASK = os.umask(0)
os.umask(_UMASK)


_TEMP_SUFFIX = ".tmp"


def _temp_owner() -> str:
    """Who writes a temp file: host and process, so a later run can tell a dead writer's
    leftover from a live writer's file in a folder that sweepers on several hosts share."""
    return f"{socket.gethostname()}~{os.getpid()}"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it onto `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_temp_owner()}.", suffix=_TEMP_SUFFIX)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would make results private to one user
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_dead_temps(folder: str | Path) -> int:
    """Delete temp files whose writer, a process on this host, is gone (a killed run's
    leftovers: never read, since only a finished file is renamed onto its name)."""
    host = socket.gethostname()
    removed = 0
    for tmp in Path(folder).glob(f".*{_TEMP_SUFFIX}"):
        writer = re.search(r"~(\d+)\.[^.]*\.tmp$", tmp.name)  # .<name>.<host>~<pid>.<random>.tmp
        if writer and f".{host}~{writer[1]}." in tmp.name and not _alive(int(writer[1])):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


@contextmanager
def dead_temps_removed(*folders: str | Path) -> Iterator[None]:
    """A killed run's temp files in `folders` removed before the block, and those of a worker
    killed within it (another's failure stops it mid-write) after it."""
    for folder in folders:
        remove_dead_temps(folder)
    try:
        yield
    finally:
        for folder in folders:
            remove_dead_temps(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def read_ahead(paths: Iterable[str | Path]) -> None:
    """Ask the kernel to fetch these files into its page cache in the background (posix_fadvise
    WILLNEED), many at once, while the caller reads the ones before them: read one after another
    from a cold disk, 10^5 small files wait on the disk once each. Nothing where there is no
    posix_fadvise, or a file cannot be opened (its reader says why)."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:  # a file system without it: the reader reads as before
            pass
        finally:
            os.close(fd)


def cell_file(folder: str | Path, cell_hash: str, suffix: str) -> Path:
    """Where a cell's file lives: named by its config hash."""
    return Path(folder) / f"{cell_hash}{suffix}"


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=_jsonable) + "\n")


def is_recorded(path: str | Path) -> bool:
    """A record a rerun can trust: it exists and parses (writes are atomic, so it is whole)."""
    return recorded(path) is not None


def recorded(path: str | Path) -> dict[str, Any] | None:
    """The record a rerun can trust, read once, or None (`is_recorded`)."""
    try:
        return read_json(path)
    except DataError:
        return None


def read_json(path: str | Path) -> dict[str, Any]:
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError(f"record not found: {path}; run the stage that writes it first (dvc repro)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"corrupt record {path}: {err}; delete it and rerun to recompute") from None
    if not isinstance(record, dict):  # every record is an object; a list would fail deep in a stage
        raise DataError(f"corrupt record {path}: holds a JSON {type(record).__name__}, not a JSON object; delete it and rerun to recompute")
    return record


def write_csv(table: Any, path: str | Path) -> None:
    """A table (pandas' DataFrame) as CSV, without its index, written whole or not at all."""
    from trashfire.core.csvtext import write_csv as write_text  # to_csv's bytes, faster on long tables

    with atomic_path(path) as tmp:
        write_text(table, tmp)


def write_table(table: Any, path: str | Path) -> None:
    """A per-sample table (pandas' DataFrame, 10^7 rows at a paper's size) as Parquet, without
    its index, written whole or not at all. Typed and columnar: text columns dictionary-encoded,
    each float column stored as float32 where every value survives the round trip (dummies,
    depths, epochs) and each integer column in the narrowest integer type that holds it;
    `read_table` widens them back, so a table reads back equal, value for value and dtype for
    dtype (docs/design.md, "Per-sample tables")."""
    with atomic_path(path) as tmp:
        write_parquet(table, tmp)


def write_parquet(table: Any, path: str | Path) -> None:
    """write_table's file, written in place: for a caller that holds an atomic_path of its own."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    narrowed = {column: _narrowest(table[column].to_numpy()) for column in table.columns if table[column].dtype.kind in "fiub"}
    # a frame of the same columns, not a copy of them (assign copied 10^7 rows' columns)
    columns = pd.DataFrame({column: narrowed[column] if column in narrowed else table[column] for column in table.columns}, index=table.index, copy=False)
    text = [column for column in columns if isinstance(columns[column].dtype, pd.CategoricalDtype) and columns[column].cat.categories.inferred_type == "string"]
    pq.write_table(_categories_as_text(pa.Table.from_pandas(columns, preserve_index=False), text), path, compression="zstd")


def _categories_as_text(table: Any, names: list[str]) -> Any:
    """An Arrow table whose categorical text columns `names` hold their text, as their object
    columns would have: the same schema and pandas metadata, so the same file. Arrow takes a
    row's text from the categories by its code, where converting 10^7 Python strings a
    column took a quarter of a second each and held the GIL."""
    import pyarrow as pa

    if not names:
        return table
    pandas = json.loads(table.schema.metadata[b"pandas"])
    for entry in pandas["columns"]:
        if entry["name"] in names:
            entry.update(pandas_type="unicode", numpy_type="object", metadata=None)
    for name in names:
        table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(pa.string()))
    return table.replace_schema_metadata({**table.schema.metadata, b"pandas": json.dumps(pandas).encode("utf8")})


def _narrowest(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return values.astype(np.float32) if _float32_holds(values) else values
    if values.dtype.kind in "iu" and values.size:
        for kind in (np.int8, np.int16, np.int32):
            if np.iinfo(kind).min <= values.min() and values.max() <= np.iinfo(kind).max:
                return values.astype(kind)
    return values


def _float32_holds(values: np.ndarray, block: int = 1 << 16) -> bool:
    """Whether every value survives float32 and back, tried a block at a time (stopping at the
    first that does not): a whole column's float32 copy and its way back were 120 MB of fresh
    memory per column at 10^7 rows, made even for a column that cannot narrow."""
    for start in range(0, len(values), block):
        part = values[start : start + block]
        if not np.array_equal(part.astype(np.float32).astype(values.dtype), part, equal_nan=True):
            return False
    return True


def read_table(path: str | Path, columns: list[str] | None = None, what: str = "table", stage: str = "the stage that writes it") -> Any:
    """A table `write_table` wrote (only `columns`, if given: Parquet reads a column at a time),
    its narrowed columns widened back to float64 and int64, text as str. FileNotFoundError where
    there is none (callers name the stage to run); where it is no Parquet table, one DataError
    line: 'corrupt <what> <path>: <why>; rerun <stage>'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=columns).to_pandas()
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as err:
        reason = first_line(err).split(f"'{path}': ", 1)[-1].rstrip(".")  # pyarrow names the path again
        raise DataError(f"corrupt {what} {path}: {reason}; rerun {stage}") from None
    wide_types = {column: np.dtype(np.float64 if table[column].dtype.kind == "f" else np.int64) for column in table if table[column].dtype.kind in "fiu"}
    # the columns already wide stay as read: a copy of each was 2 GB more at 10^7 rows
    widened = {column: table[column].astype(dtype) for column, dtype in wide_types.items() if table[column].dtype != dtype}
    wide = table.assign(**widened)
    del table, widened  # the narrow columns lie in Arrow's buffers: freed here
    # Arrow's allocator keeps what it freed for a reuse that a stage reading one table never
    # makes: 1.6 times the frame (751k rows: 0.6 GB where the frame is 0.19 GB)
    pa.default_memory_pool().release_unused()
    return wide


def first_line(message: Any) -> str:
    """An error's first non-blank line (its type where it has none): what a one-line message quotes."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(message).__name__


def write_npz(path: str | Path, compressed: bool = True, **arrays: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            (np.savez_compressed if compressed else np.savez)(handle, **arrays)


def write_npy(path: str | Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, array)


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, by name. Each member's .npy header is parsed here
    (`_npy_array`): numpy's reader parses it with `ast.literal_eval`, which at 10^5 attack
    cells of 20 arrays each was most of the timing stage's read."""
    try:
        members = _zip_members(Path(path).read_bytes())
        if members is None:  # a layout the plain reader leaves to zipfile (zip64, another compression)
            with zipfile.ZipFile(path) as archive:
                members = {name: archive.read(name) for name in archive.namelist()}
        return {name.removesuffix(".npy"): _npy_array(member) for name, member in members.items()}
    except FileNotFoundError:
        raise DataError(f"array file not found: {path}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # a truncated .npz is a bad zip
        raise DataError(f"corrupt array file {path}: {err}; delete it and rerun") from None


_END = struct.Struct("<IHHHHIIH")  # the end of central directory record
_ENTRY = struct.Struct("<IHHHHHHIIIHHHHHII")  # a central directory entry
_LOCAL = struct.Struct("<IHHHHHIIIHH")  # a member's local header


def _zip_members(blob: bytes) -> dict[str, bytes] | None:
    """An .npz's members by name, read from its central directory in one pass over bytes already
    read (zipfile's objects per member cost 1 ms a file at 10^5 files); each member's CRC is
    checked as zipfile checks it. None for what zipfile should read: zip64 sizes or offsets,
    a compression other than deflate or none, encryption, a comment."""
    if len(blob) < _END.size or blob[-_END.size : -_END.size + 4] != b"PK\x05\x06":
        return None
    _, _, _, _, entries, _, offset, _ = _END.unpack_from(blob, len(blob) - _END.size)
    if entries == 0xFFFF or offset == 0xFFFFFFFF:
        return None
    members = {}
    for _ in range(entries):
        signature, _, _, flags, method, _, _, crc, packed, size, name_length, extra_length, comment_length, _, _, _, local = _ENTRY.unpack_from(blob, offset)
        if signature != 0x02014B50 or flags & 0x1 or method not in (0, 8) or 0xFFFFFFFF in (packed, size, local):
            return None
        name = blob[offset + _ENTRY.size : offset + _ENTRY.size + name_length].decode("utf8" if flags & 0x800 else "cp437")
        offset += _ENTRY.size + name_length + extra_length + comment_length
        local_name, local_extra = _LOCAL.unpack_from(blob, local)[-2:]
        start = local + _LOCAL.size + local_name + local_extra
        data = blob[start : start + packed]
        member = zlib.decompressobj(-15).decompress(data) if method == 8 else data
        if len(member) != size or zlib.crc32(member) != crc:
            raise zipfile.BadZipFile(f"member {name} is cut short or its CRC does not match")
        members[name] = member
    return members


_NPY_MAGIC = b"\x93NUMPY"
_NPY_HEADER = re.compile(r"^\{'descr': '([^']+)', 'fortran_order': (False|True), 'shape': \(([0-9, ]*)\), \}\s*$")


def _npy_array(buffer: bytes) -> np.ndarray:
    """One .npy member as numpy's `format.read_array` gives it (a writable array); a header
    of another layout (a structured or object dtype) goes to numpy's own reader."""
    match = None
    if buffer[:6] == _NPY_MAGIC and buffer[6] in (1, 2, 3):
        size_bytes = 2 if buffer[6] == 1 else 4
        length = int.from_bytes(buffer[8 : 8 + size_bytes], "little")
        start = 8 + size_bytes
        match = _NPY_HEADER.match(buffer[start : start + length].decode("latin1" if buffer[6] < 3 else "utf8"))
    if match is None:
        return np.lib.format.read_array(io.BytesIO(buffer), allow_pickle=False)
    descr, fortran, shape_text = match.groups()
    shape = tuple(int(n) for n in shape_text.replace(" ", "").split(",") if n)
    array = np.frombuffer(buffer, dtype=np.dtype(descr), offset=start + length).copy()  # writable, one copy
    return array.reshape(shape, order="F" if fortran == "True" else "C")


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_hash(config: Any) -> str:
    """A short stable hash of a JSON-able config: the cache key of a cell."""
    text = json.dumps(config, sort_keys=True, default=_jsonable, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")
