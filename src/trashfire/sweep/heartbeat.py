"""Heartbeats of a study's running trials, stamped by the storage's own clock (a table in the
database, files beside a journal), and which running trials are stale: their process stopped
beating (killed?), so the sweeper marks them FAIL and queues them again.

Why not Optuna's own RDB heartbeat: it marks a stale trial FAIL before any hook could record
why (a finished trial takes no attribute), ignores a trial that never beat, does not exist for
journals, and keeps its beats out of the public API.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from optuna.trial import FrozenTrial

from trashfire.core.clocks import exclude_thread_cpu
from trashfire.sweep.storage import SCHEMA_LOCK, engine_kwargs, study_lock

log = logging.getLogger(__name__)

QUEUED_AGAIN = "; queued again"  # how the note of a trial failed and queued again ends
STALE_NOTE = "stale: its process stopped beating (killed?)" + QUEUED_AGAIN


class SqlBeats:
    """Heartbeats of a study's running trials in a table of its database (`trashfire_heartbeats`),
    each stamped by the database's clock, as is the `now` their ages are taken against, so
    the age is signed and free of the sweepers' clocks."""

    TABLE = "trashfire_heartbeats"

    def __init__(self, url: str, study_name: str):
        import sqlalchemy as sa

        self.study_name = study_name
        self.engine = sa.create_engine(url, **engine_kwargs(url))
        metadata = sa.MetaData()
        self.table = sa.Table(
            self.TABLE,
            metadata,
            sa.Column("study_name", sa.String(512), primary_key=True),
            sa.Column("number", sa.Integer, primary_key=True),
            sa.Column("beat", sa.DateTime(timezone=True), nullable=False),
        )
        with study_lock(url, SCHEMA_LOCK):  # two sweepers creating it at once on PostgreSQL collide
            metadata.create_all(self.engine)

    def _rows(self, numbers: Sequence[int]):
        return (self.table.c.study_name == self.study_name) & self.table.c.number.in_(list(numbers))

    def beat(self, numbers: Sequence[int]) -> None:
        import sqlalchemy as sa

        if not numbers:
            return
        for attempt in (1, 2):
            try:
                with self.engine.begin() as connection:
                    have = set(connection.execute(sa.select(self.table.c.number).where(self._rows(numbers))).scalars())
                    if have:
                        connection.execute(sa.update(self.table).where(self._rows(sorted(have))).values(beat=sa.func.now()))
                    for number in sorted(set(numbers) - have):
                        connection.execute(sa.insert(self.table).values(study_name=self.study_name, number=number, beat=sa.func.now()))
                return
            except sa.exc.IntegrityError:  # another sweeper inserted one of them meanwhile: update it
                if attempt == 2:
                    raise

    def ages(self, numbers: Sequence[int]) -> dict[int, timedelta]:
        """Each beaten trial's age, now - beat, both by the database's clock (negative for a beat
        committed after this reader's transaction began)."""
        import sqlalchemy as sa

        if not numbers:
            return {}
        with self.engine.connect() as connection:
            rows = connection.execute(sa.select(self.table.c.number, self.table.c.beat, sa.func.now()).where(self._rows(numbers))).all()
        return {number: _utc(now) - _utc(beat) for number, beat, now in rows}

    def forget(self, numbers: Sequence[int]) -> None:
        import sqlalchemy as sa

        if numbers:
            with self.engine.begin() as connection:
                connection.execute(sa.delete(self.table).where(self._rows(numbers)))


def _utc(stamp: datetime) -> datetime:
    """A database time without a zone: PostgreSQL's timestamptz values come with one (both the
    beat and `now`), SQLite's CURRENT_TIMESTAMP is UTC without one."""
    return stamp if stamp.tzinfo is None else stamp.astimezone(UTC).replace(tzinfo=None)


class FileBeats:
    """Heartbeats beside a journal file (`<journal>.beats/<study>/<trial number>`), each a
    file's modification time, set by the file system (on NFS: the server's clock); `now` is a
    file created there at reading time, so the age is signed and free of the hosts' clocks."""

    def __init__(self, journal: Path, study_name: str):
        self.folder = journal.with_name(journal.name + ".beats") / urllib.parse.quote(study_name, safe="")
        self.folder.mkdir(parents=True, exist_ok=True)

    def beat(self, numbers: Sequence[int]) -> None:
        for number in numbers:
            (self.folder / str(number)).touch()

    def ages(self, numbers: Sequence[int]) -> dict[int, timedelta]:
        with tempfile.NamedTemporaryFile(dir=self.folder, prefix=".now-") as probe:
            now = os.fstat(probe.fileno()).st_mtime
        ages = {}
        for number in numbers:
            with contextlib.suppress(FileNotFoundError):
                ages[number] = timedelta(seconds=now - (self.folder / str(number)).stat().st_mtime)
        return ages

    def forget(self, numbers: Sequence[int]) -> None:
        for number in numbers:
            (self.folder / str(number)).unlink(missing_ok=True)


Beats = SqlBeats | FileBeats


def stale_trials(running: Sequence[FrozenTrial], ages: dict[int, timedelta], grace: int, now: datetime | None = None) -> list[FrozenTrial]:
    """RUNNING trials whose last beat is older than `grace` s (a signed age: a beat newer than
    the reader's clock is fresh, not a day old as Optuna 2's `timedelta.seconds` made it), and
    those that never beat (killed between taking the trial and its first beat) started longer
    ago than that; `datetime_start` is the taking client's clock, as `now` is this one's."""
    limit = timedelta(seconds=grace)
    cutoff = (now or datetime.now()) - limit
    return [t for t in running if (ages[t.number] > limit if t.number in ages else t.datetime_start is not None and t.datetime_start < cutoff)]


class Heartbeat:
    """Beats for the running trials at once and then every `interval` s, from a thread whose
    CPU time the process clock of the trials leaves out."""

    def __init__(self, beats: Beats, interval: int, numbers: list[int]):
        self.beats, self.interval, self.numbers = beats, interval, numbers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trashfire-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.beats.beat(self.numbers)
        self._thread.start()
        exclude_thread_cpu(self._thread)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beats.beat(self.numbers)
            except Exception as err:  # a lost connection must not kill the trials; the next beat retries
                log.warning("heartbeat for trials %s failed: %s", self.numbers, err)
