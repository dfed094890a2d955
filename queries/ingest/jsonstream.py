"""Stream the records of a JSON or JSONL file, one at a time, in bounded memory.

A log of recorded conversations can be larger than memory, so it is never loaded whole: the
reader holds one record (plus a read-ahead chunk) at a time. Three layouts are read:

* **JSONL** (``.jsonl``/``.ndjson``, or a file whose first line is a whole JSON object followed
  by more): one record per line.
* **A JSON array** of records: ``[{...}, {...}]``.
* **A JSON object**: a map of records by key (``{"conv-1": {...}, "conv-2": [...]}``), or, when its
  first value is not a record, the file is one record.

Every record comes out as a :class:`JsonRecord` with its number, line and a digest of its raw
text; a record that cannot be parsed comes out as a :class:`BadRecord` naming its position and
the reason, and reading goes on with the next one. A file that ends inside a record (a
truncated file) yields a last :class:`BadRecord` saying so. ``.gz`` files are read through gzip.

How: the standard library's C decoder (``json.JSONDecoder.raw_decode``) parses each record
straight out of a text buffer; only when it fails (a record cut by the end of the buffer, or a
malformed one) does a small scanner find where the record ends, reading more as needed, so a
malformed record is skipped without losing the records after it. No third-party parser is
needed: ``ijson``'s C backend streams too, but cannot resume after a syntax error and is
slower than ``raw_decode`` on whole records.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal

from .gzipread import read_lines, read_upto

__all__ = [
    "CHUNK_CHARS",
    "BadRecord",
    "JsonRecord",
    "Layout",
    "RecordReader",
]

Layout = Literal["auto", "jsonl", "array", "object"]
"""How records are laid out in the file; ``auto`` decides from the name and the first bytes."""

CHUNK_CHARS: Final = 1 << 20
"""Characters read at a time."""

_WS: Final = re.compile(r"[ \t\n\r]*")
_STRUCT: Final = re.compile(r'["\[\]{}]')
_STRING_REST: Final = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR_END: Final = re.compile(r"[,\]}\s]")
_JSONL_SUFFIXES: Final = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


@dataclass(frozen=True, slots=True)
class JsonRecord:
    """One parsed record."""

    index: int
    """The record's number in the file (1-based)."""
    line: int
    """The line it starts on (1-based)."""
    value: Any
    """The parsed JSON value."""
    digest: str
    """A hash of the record's raw text (and its key): the same record gives the same digest."""
    key: str | None = None
    """Its key, when the file is a JSON object of records."""


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that could not be parsed; the reader went on after it (unless ``fatal``)."""

    index: int
    """The record's number in the file (1-based)."""
    line: int
    """The line it starts on (1-based)."""
    reason: str
    """What is wrong, e.g. ``Expecting ',' delimiter (line 3 column 7)``."""
    key: str | None = None
    fatal: bool = False
    """Nothing after it can be read (the file ends inside it, or is not JSON at all)."""

    @property
    def position(self) -> str:
        """``record 12 (line 345)``, for messages."""
        key = f" {self.key!r}" if self.key is not None else ""
        return f"record {self.index}{key} (line {self.line})"


class _Truncated(Exception):
    pass


def _digest(text: str, key: str | None = None) -> str:
    h = hashlib.blake2b(digest_size=16)
    if key is not None:
        h.update(key.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse"
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    return str(exc)


class RecordReader:
    """Iterate the records of ``path`` (``for r in RecordReader(path)``).

    ``bytes_read`` and ``size`` (the file's size on disk) let a caller show progress; for a
    ``.gz`` file both count compressed bytes. ``layout`` is the layout found (or given).
    ``record_keys``: keys that, first in a top-level object, make the file one record (e.g. the
    key conversations keep their messages under) rather than a map of records.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        layout: Layout = "auto",
        record_keys: frozenset[str] = frozenset(),
    ) -> None:
        self.path = Path(path)
        self._record_keys = record_keys
        self.size = self.path.stat().st_size
        self._raw = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self._bin: BinaryIO = (
            gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
            if self.path.name.endswith(".gz")
            else self._raw
        )
        self.layout: Layout = layout
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._json = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._line = 1  # line number at self._pos
        self._line_at = 0  # buffer index up to which newlines are counted into _line
        self._eof = False
        self._index = 0
        self._fatal = False  # the file ended inside a record: nothing after it can be read
        self._gzip_error: str | None = None  # why a .gz file could not be read to its end

    @property
    def bytes_read(self) -> int:
        """Bytes of the file read so far."""
        return self._raw.tell() if not self._raw.closed else self.size

    def close(self) -> None:
        """Close the file."""
        self._bin.close()
        self._raw.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[JsonRecord | BadRecord]:
        try:
            layout = self.layout if self.layout != "auto" else self._sniff()
            self.layout = layout
            if layout == "jsonl":
                yield from self._lines()
            elif layout == "array":
                yield from self._array()
            else:
                yield from self._object()
            if self._gzip_error is not None and not self._fatal:
                # The records before the damage were read; say why nothing after them was.
                yield BadRecord(self._index + 1, self._line_now(), self._gzip_error, fatal=True)
        finally:
            self.close()

    # --- buffer -----------------------------------------------------------------------------
    def _more(self) -> bool:
        """Read another chunk onto the buffer, dropping what is before ``_pos``."""
        if self._eof:
            return False
        data = self._read(CHUNK_CHARS)
        text = self._decoder.decode(data, final=not data)
        if not data:
            self._eof = True
        self._advance_lines(self._pos)
        self._buf = self._buf[self._pos :] + text
        self._line_at -= self._pos
        self._pos = 0
        return bool(text) or not self._eof

    def _read(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at the end, or where a ``.gz`` file is damaged (then
        ``_gzip_error`` says so, and every byte inflated before the damage is returned)."""
        if self._bin is self._raw:
            return self._raw.read(size)
        if self._gzip_error is not None:
            return b""
        data, self._gzip_error = read_upto(self._bin, size)  # type: ignore[arg-type]
        return data

    def _binary_lines(self) -> Iterator[bytes]:
        """The lines of the file as bytes; a damaged ``.gz`` ends them (see :meth:`_read`)."""
        if self._bin is self._raw:
            yield from self._raw
            return
        failed: list[str] = []
        yield from read_lines(self._bin, failed)  # type: ignore[arg-type]
        if failed:
            self._gzip_error = failed[0]

    def _advance_lines(self, upto: int) -> None:
        if upto > self._line_at:
            self._line += self._buf.count("\n", self._line_at, upto)
            self._line_at = upto

    def _skip_ws(self) -> str:
        """Skip whitespace; the next character, or ``""`` at the end of the file."""
        while True:
            end = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            self._pos = end
            if end < len(self._buf):
                return self._buf[end]
            if not self._more():
                return ""

    def _sniff(self) -> Layout:
        if self.path.name.lower().endswith(_JSONL_SUFFIXES):
            return "jsonl"
        first = self._skip_ws()
        if first == "[":
            return "array"
        if first == "{":
            # JSONL when the first line holds a whole value and something follows it.
            while "\n" not in self._buf[self._pos :] and self._more():
                pass
            nl = self._buf.find("\n", self._pos) - self._pos
            if nl < 0:
                return "object"
            try:
                json.loads(self._buf[self._pos : self._pos + nl])
            except (ValueError, RecursionError):
                return "object"
            while not self._buf[self._pos + nl :].strip() and self._more():
                pass
            return "jsonl" if self._buf[self._pos + nl :].strip() else "object"
        return "jsonl"

    # --- JSONL ------------------------------------------------------------------------------
    def _lines(self) -> Iterator[JsonRecord | BadRecord]:
        # Binary lines: a bad byte spoils one line, and positions are exact.
        self._raw.seek(0)
        if self._bin is not self._raw:
            self._bin = gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
        self._buf = ""
        line_no = 0
        for raw in self._binary_lines():
            line_no += 1
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[3:]
            text = raw.strip()
            if not text:
                continue
            self._index += 1
            try:
                decoded = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield BadRecord(
                    self._index, line_no, f"not UTF-8 (byte {exc.start + 1} of the line)"
                )
                continue
            try:
                value = self._json.decode(decoded)
            except (ValueError, RecursionError) as exc:
                where = ""
                if isinstance(exc, json.JSONDecodeError):
                    where = f" (column {exc.colno})"
                yield BadRecord(self._index, line_no, _reason(exc) + where)
                continue
            yield JsonRecord(self._index, line_no, value, _digest(decoded))

    # --- array ------------------------------------------------------------------------------
    def _array(self) -> Iterator[JsonRecord | BadRecord]:
        if self._skip_ws() != "[":
            yield self._not_json()
            return
        self._pos += 1
        first = True
        while True:
            c = self._skip_ws()
            if c == "]":
                self._pos += 1
                yield from self._trailing()
                return
            if c == "":
                yield BadRecord(
                    self._index + 1,
                    self._line_now(),
                    "the file ends before the array's closing ']' (truncated?)",
                    fatal=True,
                )
                return
            if not first:
                if c != ",":
                    yield BadRecord(
                        self._index + 1,
                        self._line_now(),
                        f"expected ',' or ']' between records, found {c!r}",
                    )
                else:
                    self._pos += 1
                    c = self._skip_ws()
                    if c == "":
                        continue
            first = False
            yield from self._element(None)
            if self._fatal:
                return

    def _element(self, key: str | None) -> Iterator[JsonRecord | BadRecord]:
        self._index += 1
        self._advance_lines(self._pos)
        line = self._line
        try:
            value, start, end = self._value()
        except _Truncated:
            self._fatal = True
            reason = self._gzip_error or "the file ends inside this record (truncated?)"
            yield BadRecord(self._index, line, reason, key, True)
            self._pos = len(self._buf)
            return
        except _Malformed as exc:
            yield BadRecord(self._index, line, exc.reason, key)
            return
        yield JsonRecord(self._index, line, value, _digest(self._buf[start:end], key), key)

    def _line_now(self) -> int:
        self._advance_lines(self._pos)
        return self._line

    def _value(self) -> tuple[Any, int, int]:
        """Parse the value at ``_pos``; returns it with its span in the buffer, and moves past it.

        Raises ``_Malformed`` (after moving past the value) or ``_Truncated``.
        """
        buf = self._buf
        start = self._pos
        try:
            value, end = self._json.raw_decode(buf, start)
        except (ValueError, RecursionError):
            pass
        else:
            if (end < len(buf) or self._eof) and (isinstance(value, dict | list) or end < len(buf)):
                self._pos = end
                return value, start, end
        # Cut by the buffer's end, or malformed: find where the value ends, then parse it alone.
        end = self._scan_end()
        start = self._pos
        text = self._buf[start:end]
        self._pos = end
        try:
            value = self._json.decode(text)
        except (ValueError, RecursionError) as exc:
            where = ""
            if isinstance(exc, json.JSONDecodeError) and exc.lineno > 1:
                where = f" (line {exc.lineno} of the record)"
            elif isinstance(exc, json.JSONDecodeError):
                where = f" (column {exc.colno} of the record)"
            raise _Malformed(_reason(exc) + where) from None
        return value, start, end

    def _scan_end(self) -> int:
        """The buffer index just past the value starting at ``_pos`` (reading more as needed)."""
        c = self._buf[self._pos]
        if c not in '[{"':
            # a scalar: up to the next separator
            while True:
                m = _SCALAR_END.search(self._buf, self._pos)
                if m is not None:
                    return m.start() if m.start() > self._pos else m.start() + 1
                if not self._more():
                    return len(self._buf)
        # Openers still open; a mismatched closer closes up to its own opener, so that a
        # record with one bad bracket does not swallow the records after it.
        stack: list[str] = []
        i = self._pos
        while True:
            buf = self._buf
            m = _STRUCT.search(buf, i)
            if m is None:
                i = len(buf)
                offset = self._pos
                if not self._more():
                    raise _Truncated
                i -= offset
                continue
            ch = m.group()
            j = m.end()
            if ch == '"':
                s = _STRING_REST.match(buf, j)
                if s is None:
                    offset = self._pos
                    i = m.start()
                    if not self._more():
                        raise _Truncated
                    i -= offset
                    continue
                i = s.end()
                if not stack:
                    return i
            elif ch == "[" or ch == "{":
                stack.append(ch)
                i = j
            else:
                opener = "[" if ch == "]" else "{"
                while stack and stack.pop() != opener:
                    pass
                i = j
                if not stack:
                    return i

    # --- object -----------------------------------------------------------------------------
    def _object(self) -> Iterator[JsonRecord | BadRecord]:
        if self._skip_ws() != "{":
            yield self._not_json()
            return
        self._pos += 1
        first = True
        while True:
            c = self._skip_ws()
            if c == "}":
                self._pos += 1
                if first:
                    yield JsonRecord(1, 1, {}, _digest("{}"))
                yield from self._trailing()
                return
            if c == "":
                yield BadRecord(
                    self._index + 1,
                    self._line_now(),
                    "the file ends before the object's closing '}' (truncated?)",
                    fatal=True,
                )
                return
            if not first:
                if c != ",":
                    yield BadRecord(
                        self._index + 1,
                        self._line_now(),
                        f"expected ',' or '}}' between records, found {c!r}",
                        fatal=True,
                    )
                    return
                self._pos += 1
                c = self._skip_ws()
            if c != '"':
                yield BadRecord(
                    self._index + 1,
                    self._line_now(),
                    f"expected a quoted key, found {c!r}",
                    fatal=True,
                )
                return
            try:
                key, _, _ = self._value()
            except (_Malformed, _Truncated):
                yield BadRecord(self._index + 1, self._line_now(), "a bad key", fatal=True)
                return
            if self._skip_ws() != ":":
                yield BadRecord(
                    self._index + 1, self._line_now(), f"expected ':' after key {key!r}", fatal=True
                )
                return
            self._pos += 1
            self._skip_ws()
            records = list(self._element(str(key)))
            if first and (key in self._record_keys or not _looks_like_record(records)):
                # The file is one record, not a map of records: read it whole.
                yield from self._whole()
                return
            first = False
            yield from records
            if self._fatal:
                return

    def _whole(self) -> Iterator[JsonRecord | BadRecord]:
        self._bin.close()
        self._raw.close()
        self._raw = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self._bin = (
            gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
            if self.path.name.endswith(".gz")
            else self._raw
        )
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._buf, self._pos, self._line, self._line_at = "", 0, 1, 0
        self._eof = False
        self._index = 0
        self._skip_ws()
        yield from self._element(None)
        if not self._fatal:
            yield from self._trailing()

    def _trailing(self) -> Iterator[BadRecord]:
        c = self._skip_ws()
        if c:
            yield BadRecord(
                self._index + 1,
                self._line_now(),
                f"unexpected text after the end of the JSON value: {c!r}",
                fatal=True,
            )

    def _not_json(self) -> BadRecord:
        c = self._skip_ws()
        return BadRecord(
            1, self._line_now(), f"not JSON: the file starts with {c[:1]!r}", fatal=True
        )


class _Malformed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _looks_like_record(records: list[JsonRecord | BadRecord]) -> bool:
    if len(records) != 1:
        return True
    r = records[0]
    if isinstance(r, BadRecord):
        return True
    v = r.value
    return isinstance(v, dict) or (isinstance(v, list) and all(isinstance(m, dict) for m in v[:3]))
