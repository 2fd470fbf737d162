"""Reading a job's log file: its end without reading the rest, or all of it in chunks.

A log can be gigabytes and grow while it is read; the portal polls the tail often. Plain Python.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from jobs.clusters.backends.base import LOG_CHUNK_BYTES, LogTail


def tail(handle: BinaryIO, max_bytes: int) -> LogTail:
    """The last ``max_bytes`` of an open file (seek, never a read of what comes before)."""
    size = os.fstat(handle.fileno()).st_size  # a growing file: this instant's size, read no further
    start = max(0, size - max(0, max_bytes))
    handle.seek(start)
    data = handle.read(size - start)
    if start:
        data = _from_a_character(data)
    return LogTail(text=data.decode("utf-8", errors="replace"), size=size, truncated=start > 0)


def chunks(handle: BinaryIO, size: int = LOG_CHUNK_BYTES) -> Iterator[bytes]:
    """The file from its start to its end, ``size`` bytes at a time; closes it."""
    with handle:
        while block := handle.read(size):
            yield block


def _from_a_character(data: bytes) -> bytes:
    # A cut in the middle of a UTF-8 character leaves up to 3 continuation bytes (10xxxxxx):
    # drop them rather than show replacement characters for the cut.
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
        skip += 1
    return data[skip:]
