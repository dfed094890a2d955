"""A bounded on-disk FIFO of export requests: what an agent could not send yet.

Standard library only. Each record is one file, ``<seq>-<spans>.req``, written to a temporary
name, synced and renamed into place, so a record is either whole or absent after a crash; its
content carries a magic, its length and a CRC-32, so a damaged record is found when it is read.
The span count lives in the *name*, so even a record whose bytes are damaged is counted exactly
when it is given up. A spool directory is held by one process at a time (an ``flock`` on its
``lock`` file): agents that share a parent directory each take the first free ``slot-N`` in it,
and an agent that restarts takes a free slot again and finds what its predecessor left there.
See docs/telemetry.md, *The spool*.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

try:  # POSIX; elsewhere the slot is used without a lock (one agent per directory).
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DiskSpool", "SpoolFull", "SpoolRecord", "open_slot"]

_MAGIC: Final = b"LWSP"
_HEADER: Final = struct.Struct(">4sII")  # magic, length, crc32
_NAME: Final = re.compile(r"^(\d{16})-(\d+)\.req$")
_MAX_SLOTS: Final = 64


class SpoolFull(Exception):
    """The record would take the spool past its size bound; nothing was written."""


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One stored request: its sequence number, span count and file."""

    seq: int
    spans: int
    path: Path


class DiskSpool:
    """Records appended at the tail and taken from the head, bounded in bytes on disk.

    Thread-safe: one thread may append while another reads and removes the head.
    """

    def __init__(self, directory: Path, max_bytes: int, *, sync: bool = True) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.sync = sync
        self._lock = threading.Lock()
        self._records: deque[tuple[SpoolRecord, int]] = deque()
        self._bytes = 0
        self._next_seq = 0
        self._scan()

    def _scan(self) -> None:
        found: list[tuple[SpoolRecord, int]] = []
        for entry in os.scandir(self.directory):
            match = _NAME.match(entry.name)
            if match is None:
                if entry.name.endswith(".tmp"):  # a write a crash interrupted: never acknowledged
                    os.unlink(entry.path)
                continue
            record = SpoolRecord(int(match[1]), int(match[2]), Path(entry.path))
            found.append((record, entry.stat().st_size))
        found.sort(key=lambda item: item[0].seq)
        self._records.extend(found)
        self._bytes = sum(size for _, size in found)
        self._next_seq = found[-1][0].seq + 1 if found else 0

    @property
    def size_bytes(self) -> int:
        """Bytes the records take on disk now."""
        with self._lock:
            return self._bytes

    @property
    def spans(self) -> int:
        """Spans held in the spool now."""
        with self._lock:
            return sum(r.spans for r, _ in self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def append(self, payload: bytes, spans: int) -> SpoolRecord:
        """Store ``payload`` (``spans`` spans) at the tail; :class:`SpoolFull` past the bound."""
        size = _HEADER.size + len(payload)
        with self._lock:
            if self._bytes + size > self.max_bytes:
                raise SpoolFull(
                    f"spool {self.directory} holds {self._bytes} of {self.max_bytes} bytes"
                )
            seq = self._next_seq
            self._next_seq += 1
            self._bytes += size  # reserved now, so a concurrent append sees it
        path = self.directory / f"{seq:016d}-{spans}.req"
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(_HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)))
                f.write(payload)
                if self.sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with self._lock:
                self._bytes -= size
            _unlink(tmp)
            raise
        record = SpoolRecord(seq, spans, path)
        with self._lock:
            self._records.append((record, size))
        return record

    def head(self) -> SpoolRecord | None:
        """The oldest record, or ``None`` when empty."""
        with self._lock:
            return self._records[0][0] if self._records else None

    def remove_head(self, record: SpoolRecord) -> None:
        """Forget ``record`` (the head): it was delivered or given up."""
        with self._lock:
            if not self._records or self._records[0][0] != record:
                return
            _, size = self._records.popleft()
            self._bytes -= size
        _unlink(record.path)


def read_record(record: SpoolRecord) -> bytes | None:
    """The payload of ``record``, or ``None`` when its file is damaged or gone."""
    try:
        data = record.path.read_bytes()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, length, crc = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != _MAGIC or length != len(payload) or zlib.crc32(payload) != crc:
        return None
    return payload


def open_slot(parent: Path) -> tuple[Path, IO[bytes] | None]:
    """Take the first free ``slot-N`` directory under ``parent``; (its path, the held lock)."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(_MAX_SLOTS):
        slot = parent / f"slot-{n}"
        slot.mkdir(exist_ok=True)
        handle = open(slot / "lock", "ab")  # noqa: SIM115 - held for the life of the exporter
        if fcntl is None:
            return slot, handle
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return slot, handle
    raise OSError(f"all {_MAX_SLOTS} spool slots under {parent} are held by other processes")


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
