"""Arrays from a forked worker to the process that forked it, through memory both map.

A job's result travels back pickled through a pipe: an array is copied into the pickle, through
the pipe and out of the pickle again. At 10^7 samples the timing stage's read worker sent a
gigabyte of outcome arrays that way, in about 8 s. Here the stage opens an anonymous file before
it forks (a memfd on Linux, kept in memory; elsewhere an unnamed temp file); the worker, which
inherits it, writes each array into it once; the stage maps the file and reads the arrays in
place. Nothing has a name on disk, so a killed run leaves nothing behind.
"""

from __future__ import annotations

import math
import mmap
import os
import tempfile
from collections.abc import Sequence

import numpy as np

ALIGN = 64  # each array starts on a cache line
POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: the mapping's pages made when it is mapped
Layout = dict[str, tuple[int, str, tuple[int, ...]]]  # name: (offset, dtype, shape)


class ArrayChannel:
    """Open before the fork; `put` in the worker, `get` here (each once), then `close`."""

    def __init__(self) -> None:
        try:
            self._keep, self.fd = None, os.memfd_create("trashfire-arrays", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # not Linux, or memfd refused (a sandbox): an unnamed temp file
            self._keep = tempfile.TemporaryFile()
            self.fd = self._keep.fileno()

    def put(self, arrays: dict[str, np.ndarray | Sequence[np.ndarray]]) -> Layout:
        """Write each array, or each sequence of arrays of one dtype as their flat
        concatenation, in the worker; returns where each is, for `get`. The file is sized
        first and mapped with its pages made at once (MAP_POPULATE), so that copying into it
        takes no page fault per page (a gigabyte is 250,000 of them)."""
        layout, offset, parts_of = {}, 0, {}
        for name, parts in arrays.items():
            whole = isinstance(parts, np.ndarray)
            parts = [parts] if whole else list(parts)
            dtypes = {part.dtype for part in parts}
            if len(dtypes) != 1:
                raise ValueError(f"{name}: one dtype per entry, got {sorted(map(str, dtypes))}")
            offset = -(-offset // ALIGN) * ALIGN
            layout[name] = (offset, dtypes.pop().str, parts[0].shape if whole else (sum(part.size for part in parts),))
            parts_of[name] = parts
            offset += sum(part.nbytes for part in parts)
        if offset:
            os.ftruncate(self.fd, offset)
            with mmap.mmap(self.fd, offset, flags=mmap.MAP_SHARED | POPULATE) as buffer:
                for name, view in self._views(buffer, layout).items():
                    np.concatenate([part if part.ndim == 1 else part.reshape(-1) for part in parts_of[name]], out=view.reshape(-1))
                    del view  # the mapping closes once no array is a view of it
        return layout

    def get(self, layout: Layout) -> dict[str, np.ndarray]:
        """The arrays `put` wrote, as writable views of a shared mapping of the file: the worker
        is done with it, so they are its pages, not a copy (a private mapping made at once
        copies every page)."""
        size = os.fstat(self.fd).st_size
        buffer = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | POPULATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) if size else b""
        return self._views(buffer, layout)

    @staticmethod
    def _views(buffer, layout: Layout) -> dict[str, np.ndarray]:
        arrays = {}
        for name, (offset, dtype, shape) in layout.items():
            count = math.prod(shape)
            values = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset) if count else np.empty(0, dtype=dtype)
            arrays[name] = values.reshape(shape)
        return arrays

    def close(self) -> None:
        """The file goes once no mapping of it is left."""
        if self._keep is not None:
            self._keep.close()
        else:
            os.close(self.fd)
