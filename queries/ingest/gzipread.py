"""Reading a ``.gz`` log to where it is damaged, keeping everything before (docs/import.md).

A gzip file cut short (an interrupted download) or damaged raises only when the reader reaches
the damage, and a buffered read of many bytes then loses those it had inflated. These helpers
read in small pieces, so every byte before the damage is returned, and say why reading stopped.
A file of several gzip members (``cat a.gz b.gz``) is read whole.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import Final

__all__ = ["GZIP_ERRORS", "gzip_reason", "read_lines", "read_upto"]

GZIP_ERRORS: Final = (EOFError, OSError, zlib.error)
"""What reading a cut or damaged gzip stream raises."""


def gzip_reason(exc: BaseException) -> str:
    """Why a ``.gz`` file could not be read to its end, for the skipped-record list."""
    if isinstance(exc, EOFError):
        what = "the gzip file is truncated (it ends before its end-of-stream marker)"
    else:
        what = f"the gzip file is damaged ({exc})"
    return f"{what}: nothing after this point could be read"


def read_upto(stream: gzip.GzipFile, size: int) -> tuple[bytes, str | None]:
    """Up to ``size`` inflated bytes, and why reading stopped early (``None``: it did not)."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        try:
            piece = stream.read1(min(size - got, 1 << 16))
        except GZIP_ERRORS as exc:
            return b"".join(parts), gzip_reason(exc)
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts), None


def read_lines(stream: gzip.GzipFile, failed: list[str]) -> Iterator[bytes]:
    """The inflated lines; where the file is damaged they end, and ``failed`` gets the reason."""
    while True:
        try:
            raw = stream.readline()
        except GZIP_ERRORS as exc:
            failed.append(gzip_reason(exc))
            return
        if not raw:
            return
        yield raw
