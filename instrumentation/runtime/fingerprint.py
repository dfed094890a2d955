"""Fingerprints: short, stable hashes of tool calls, results and errors.

A fingerprint is computed from *stable JSON* (keys sorted at every depth, no whitespace), so
``{"a": 1, "b": {"c": 2, "d": 3}}`` and ``{"b": {"d": 3, "c": 2}, "a": 1}`` hash the same.
The guard compares the stable text itself; the short hash is what telemetry exports. Errors are
compared by :func:`error_key`: tool, code and the message with what varies by nature normalized.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from .types import ToolCall

__all__ = [
    "call_fingerprint",
    "call_key",
    "error_fingerprint",
    "error_key",
    "normalize_error",
    "result_fingerprint",
    "short_hash",
    "stable_json",
]

HASH_CHARS = 16
"""Length of an exported fingerprint (hex characters of a 64-bit BLAKE2b digest)."""


def _default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted((_normalize(v) for v in value), key=stable_json)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _normalize(value: Any) -> Any:
    # Only for inputs the fast encoder rejects (e.g. non-string keys): every key becomes a string.
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


# One encoder, built once: json.dumps with options builds a new one on every call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
)


def stable_json(value: Any) -> str:
    """JSON text with keys sorted at every depth and no whitespace: equal data, equal text."""
    try:
        return _ENCODER.encode(value)
    except TypeError:
        return _ENCODER.encode(_normalize(value))


def short_hash(text: str) -> str:
    """A 16-hex-character BLAKE2b hash of ``text``."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _arguments_json(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):
        # Raw text from the model: parsed, so key order does not matter; kept as text if not JSON.
        try:
            return stable_json(json.loads(arguments))
        except ValueError:
            return json.dumps(arguments, ensure_ascii=False)
    return stable_json(arguments)


def call_key(call: ToolCall) -> str:
    """What a call fingerprint hashes: ``name:stable-json(arguments)`` (the id is ignored)."""
    return f"{call.name}:{_arguments_json(call.arguments)}"


def call_fingerprint(call: ToolCall | str, arguments: Mapping[str, Any] | str | None = None) -> str:
    """Short hash of a tool call: its name plus the stable JSON of its arguments.

    Accepts a :class:`ToolCall`, or a tool name and its arguments.
    """
    if isinstance(call, ToolCall):
        return short_hash(call_key(call))
    return short_hash(f"{call}:{_arguments_json(arguments if arguments is not None else {})}")


def result_fingerprint(content: str) -> str:
    """Short hash of what a tool returned to the model (compared as text)."""
    return short_hash(content)


def error_fingerprint(tool: str, code: str | None, message: str | None = None) -> str:
    """Short hash of a tool error: :func:`error_key` of tool, code (default ``UNKNOWN_ERROR``)
    and message. Without a message, of tool and code alone (the key before messages counted)."""
    if message is None:
        return short_hash(f"{tool}:{code or 'UNKNOWN_ERROR'}")
    return short_hash(error_key(tool, code, message))


# --- what varies by nature in an error message ----------------------------------------------

_NORMALIZERS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Quoted paths and URLs: 'src/foo.ts', "C:\\x", `/tmp/a b`.
    (re.compile(r"""(['"`])(?:(?!\1).)*[/\\](?:(?!\1).)*\1"""), "<path>"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), "<url>"),
    # Timestamps and dates: 2024-05-13, 2024-05-13T10:00:00.123Z, 10:00:00.
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
            r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
        ),
        "<time>",
    ),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    # Hex digests and ids: at least 8 hex characters with a digit among them.
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.I), "<hex>"),
    # Words with digits in them: HAT030, gift_card_5094406, call_3fA9, v2.
    (re.compile(r"\b(?=\w*[A-Za-z_])(?=\w*\d)\w+\b"), "<id>"),
    (re.compile(r"[-+]?\b\d+(?:[.,]\d+)*\b"), "<n>"),
)


def normalize_error(message: str) -> str:
    """An error message with the parts that vary by nature replaced by placeholders.

    Quoted paths → ``<path>``, URLs → ``<url>``, dates and times → ``<time>``, UUIDs and words
    with digits (``HAT030``, ``gift_card_5094406``) → ``<id>``, hex → ``<hex>``, numbers →
    ``<n>``; whitespace collapsed. ``no such file 'src/a.ts'`` and ``no such file 'src/b.ts'`` are
    one error; ``config file missing`` and ``port in use`` are two.
    """
    text = " ".join(message.split())
    for pattern, placeholder in _NORMALIZERS:
        text = pattern.sub(placeholder, text)
    return text


def error_key(tool: str, code: str | None, message: str | None) -> str:
    """What makes two errors the same error: tool, code and the normalized message."""
    return f"{tool}:{code or 'UNKNOWN_ERROR'}:{normalize_error(message or '')}"
