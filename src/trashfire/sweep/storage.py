"""Where a study lives (`hydra.sweeper.storage`: an SQLAlchemy URL, a journal file or null; see
trashfire.sweep) and a lock across processes and machines for one study, which serialises
the queueing of a grid and the creation of the storage's tables."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage, InMemoryStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

log = logging.getLogger(__name__)

SCHEMA_LOCK = "optuna schema"  # its own study_lock key (a study of that name would only share the wait)
JOURNAL_SCHEME = "journal://"


def journal_file(spec: str | None) -> Path | None:
    """The journal file a storage setting names (`journal:///abs/file.log`,
    `journal://relative/file.log`, or a path ending in `.log`), or None for a URL."""
    if not spec:
        return None
    if spec.startswith(JOURNAL_SCHEME):
        return Path(spec[len(JOURNAL_SCHEME) :])
    if "://" not in spec and spec.endswith(".log"):
        return Path(spec)
    return None


class _WalConnection(sqlite3.Connection):
    """Write-ahead logging, synced at checkpoints: a commit (each trial, each beat) stops
    costing an fsync, and readers stop blocking the writer. (SQLite on a network file system
    supports neither: use PostgreSQL or a journal file there.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute("PRAGMA journal_mode=WAL")
        self.execute("PRAGMA synchronous=NORMAL")


def engine_kwargs(url: str) -> dict[str, Any]:
    """SQLAlchemy engine arguments for a study's database."""
    if url.startswith("sqlite") and ":memory:" not in url:
        return {"connect_args": {"factory": _WalConnection}}
    return {}


def optuna_storage(spec: str | None) -> BaseStorage:
    """Optuna's storage for a `hydra.sweeper.storage` setting: a journal file, an SQLAlchemy
    URL, or null (in memory). Also what tests and scripts open a study with."""
    if spec is None:
        return InMemoryStorage()
    journal = journal_file(spec)
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(journal)))
    return RDBStorage(spec, engine_kwargs=engine_kwargs(spec))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def study_lock(url: str | None, study_name: str) -> Iterator[None]:
    """A lock across processes and machines for one study, released when its holder dies:
    a file lock beside an SQLite database or a journal file, an advisory lock on PostgreSQL."""
    if url is None or url == "sqlite:///:memory:":
        yield
        return
    journal = journal_file(url)
    if journal is not None or url.startswith("sqlite:///"):
        with _file_lock((journal or Path(url[len("sqlite:///") :])).with_suffix(".lock")):
            yield
        return
    if url.startswith("postgresql"):
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        key = zlib.crc32(f"trashfire:{study_name}".encode())
        engine = sqlalchemy.create_engine(url, poolclass=NullPool)
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
        engine.dispose()
        return
    log.warning("no study lock for %s: start concurrent sweepers on a fresh study one at a time", url.split(":")[0])
    yield
