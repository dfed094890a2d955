"""Fingerprints: short, stable hashes of tool calls, results and errors.

A fingerprint is computed from *stable JSON* (keys sorted at every depth, no whitespace), so
``{"a": 1, "b": {"c": 2, "d": 3}}`` and ``{"b": {"d": 3, "c": 2}, "a": 1}`` hash the same.
The guard compares the stable text itself; the short hash is what telemetry exports. Errors are
compared by :func:`error_key`: tool, code and the message with what varies by nature normalized.

Calls and results are compared with their *volatile text* normalized (:func:`normalize_volatile`):
timestamps, durations, UUIDs and hex ids, temp paths, line counters (``/bin/bash: line 62215:``,
``(82 lines total)``, line-number gutters), process ids. Numbers that carry meaning (``5 failed``,
``page 2``) and names (``a.py`` against ``b.py``) are kept, so results that differ in substance
stay apart. A tool whose text must be compared exactly is named with :func:`compare_exactly` (or
``LOOPWATCH_EXACT_TEXT_TOOLS=tool_a,tool_b``); see docs/runtime.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .quickscan import CLASSES, may_be_json
from .settings import env_str
from .stablejson import deep_text, stable_json
from .types import ToolCall

__all__ = [
    "EXACT_TEXT_TOOLS",
    "call_fingerprint",
    "call_key",
    "compare_exactly",
    "error_fingerprint",
    "error_key",
    "exact_text_tools",
    "is_exact_text",
    "normalize_arguments",
    "normalize_error",
    "normalize_volatile",
    "result_fingerprint",
    "short_hash",
    "stable_json",
]

HASH_CHARS = 16
"""Length of an exported fingerprint (hex characters of a 64-bit BLAKE2b digest)."""


def short_hash(text: str) -> str:
    """A 16-hex-character BLAKE2b hash of ``text``."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _arguments_json(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):
        # Raw text from the model: parsed, so key order does not matter; kept as text if not JSON.
        # Blank text is no arguments, as the one parser reads it (arguments.comparable_arguments).
        if not may_be_json(arguments):
            return json.dumps(arguments, ensure_ascii=False) if arguments else "{}"
        if not arguments.strip():
            return "{}"
        try:
            return stable_json(json.loads(arguments))
        except (ValueError, RecursionError):  # nested too deeply to parse: compared as text
            return json.dumps(arguments, ensure_ascii=False)
    try:
        return stable_json(arguments)
    except RecursionError:  # a fingerprint never raises into the loop
        return deep_text(arguments)


def _volatile(tool: str, text: str) -> str:
    return text if tool in EXACT_TEXT_TOOLS else normalize_volatile(text)


def call_key(call: ToolCall) -> str:
    """What a call fingerprint hashes: ``name:stable-json(arguments)`` (the id is ignored), its
    volatile text normalized unless the tool compares exactly."""
    return f"{call.name}:{_volatile(call.name, _arguments_json(call.arguments))}"


def call_fingerprint(call: ToolCall | str, arguments: Mapping[str, Any] | str | None = None) -> str:
    """Short hash of a tool call: its name plus the stable JSON of its arguments, volatile text
    normalized (:func:`normalize_volatile`) unless the tool compares exactly.

    Accepts a :class:`ToolCall`, or a tool name and its arguments.
    """
    if isinstance(call, ToolCall):
        return short_hash(call_key(call))
    args = _arguments_json(arguments if arguments is not None else {})
    return short_hash(f"{call}:{_volatile(call, args)}")


def result_fingerprint(content: str, tool: str | None = None) -> str:
    """Short hash of what a tool returned to the model, its volatile text normalized unless
    ``tool`` compares exactly (:func:`compare_exactly`)."""
    return short_hash(content if tool in EXACT_TEXT_TOOLS else normalize_volatile(content))


# --- volatile text in calls and results ---------------------------------------------------------

EXACT_TEXT_TOOLS: set[str | None] = {
    t.strip() for t in (env_str("LOOPWATCH_EXACT_TEXT_TOOLS") or "").split(",") if t.strip()
}
"""The tools compared as exact text (read it; change it with :func:`compare_exactly`). A set
lookup where a call per tool result would cost more (the detectors' hot path)."""


def compare_exactly(tools: Iterable[str], *, exact: bool = True) -> None:
    """Compare these tools' calls and results as exact text (``exact=False`` undoes it): for
    tools whose numbers or ids are the substance (a counter the model polls, a file of ids).
    Process-wide, like the tool names themselves; also ``LOOPWATCH_EXACT_TEXT_TOOLS``."""
    for tool in tools:
        if not isinstance(tool, str) or not tool:
            raise ValueError(f"tool names must be non-empty strings, got {tool!r}")
        (EXACT_TEXT_TOOLS.add if exact else EXACT_TEXT_TOOLS.discard)(tool)


def is_exact_text(tool: str) -> bool:
    """Whether ``tool``'s calls and results are compared as exact text."""
    return tool in EXACT_TEXT_TOOLS


def exact_text_tools() -> frozenset[str]:
    """The tools compared as exact text."""
    return frozenset(t for t in EXACT_TEXT_TOOLS if t is not None)


FINGERPRINT = re.compile(r"[0-9a-f]{16}")
"""An exported fingerprint (:data:`HASH_CHARS` hex characters): never normalized."""
NORMALIZED_CHARS = 4_096
"""Volatile text is normalized in the first this many characters of a call or result; the rest
is compared exactly (large outputs cost time, and their counters sit in their first lines)."""


def _word_edge(text: str, start: int, end: int) -> bool:
    """No letter, digit or ``_`` right before ``start`` or right at ``end``."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before == "_" or after.isalnum() or after == "_")


def _digits_to_n(m: re.Match[str]) -> str:
    return _ANY_DIGITS.sub("<n>", m.group(0))


def _fixed(placeholder: str) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        return placeholder if _word_edge(m.string, m.start(), m.end()) else m.group(0)

    return replace


def _hex_id(m: re.Match[str]) -> str:
    # an id or digest: 8+ hex characters with a digit and a letter, as a whole word
    text = m.group(0)
    if not _word_edge(m.string, m.start(), m.end()) or text.isdigit() or text.isalpha():
        return text
    return "<hex>"


# Each pattern starts with a character class or a literal, so that the regular-expression
# engine skips ahead quickly (one alternation of all of them ran at ~1 MB/s on large results);
# word edges are checked in the replacement instead of with lookarounds for the same reason.
_ANY_DIGITS = re.compile(r"\d+")
PASSES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str], tuple[str, ...]], ...] = (
    # dates and times, with optional fraction and zone
    (
        re.compile(
            r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
            r"|\d{1,2}:\d{2}:\d{2}(?:\.\d+)?"
        ),
        _fixed("<time>"),
        (":", "-"),
    ),
    (
        re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
        _fixed("<id>"),
        ("-",),
    ),
    (re.compile(r"0[xX][0-9a-fA-F]+"), _fixed("<hex>"), ("0x", "0X")),
    (re.compile(r"[0-9a-fA-F]{8,}"), _hex_id, ()),
    # temp files and folders: /tmp/tmpa8f3k2, /var/folders/x/y/T/abc1, /tmp/pytest-of-u/...
    (
        re.compile(
            r"/(?:private/)?(?:var/)?(?:tmp|var/folders/[\w-]+/[\w-]+/T)/"
            r"(?=[\w.-]*(?:\d|tmp))[\w.-]+"
        ),
        lambda m: "<tmp>",
        ("/tmp/", "/var/"),
    ),
    # line counters: "line 62215", "lines 3-9", "(82 lines total)", "12 more lines"
    (re.compile(r"[Ll]ines? \d+(?:\s*[-,]\s*\d+)?"), _digits_to_n, ("line", "Line")),
    (re.compile(r"\d+ (?:more )?lines\b"), _digits_to_n, (" lines",)),
    # a line-number gutter: "71: code", "  12| code", "   7\tcode" at a line's start
    (re.compile(r"^[ \t]*\d+(?=[:|\t])", re.MULTILINE), _digits_to_n, ()),
    # durations: 0.53s, 12ms, 1.2 seconds
    (
        re.compile(r"\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|secs|sec|seconds|second|s)\b"),
        _fixed("<duration>"),
        ("s",),
    ),
    # process ids and prompt counters: pid 4242, PID: 17, In [12]:
    (
        re.compile(r"(?:pid|PID|process)[ :=#]+\d+|(?:In|Out) ?\[\d+\]"),
        _digits_to_n,
        ("pid", "PID", "process", "In", "Out"),
    ),
)
"""The volatile-text passes, in order: (pattern, replacement, substrings one of which the
text must hold for the pass to run; none: always)."""
_DIGIT = re.compile(r"\d")
# Where any pass above could match (a superset, checked pass by pass in tests/test_volatile.py):
# text without it is returned as it is. Every pass's match holds a digit next to what makes it
# volatile (a separator, a unit, a hex letter, "lines") or one of the words below; substring
# tests and one digit-led pattern are fast on the guard's hot path. What comes before the digit
# (a hex letter, "In [") is looked behind: a pattern led by one character class is scanned for
# that class alone, several times faster than an alternation of patterns led differently.
_NEAR_DIGIT = re.compile(
    r"\d(?:[-:]\d|[:|\t]|\s?[mµun]?s|[a-fA-F]|[xX]| (?:more )?lines|-[a-fA-F]"
    r"|(?<=[a-fA-F]\d)|(?<=[a-fA-F]-\d)|(?<=In\[\d)|(?<=In \[\d)|(?<=Out\[\d)|(?<=Out \[\d))"
)
_UUID_HINT = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-")


def normalize_volatile(text: str) -> str:
    """``text`` with what varies from one identical call to the next replaced by placeholders.

    Dates and times → ``<time>``; UUIDs → ``<id>``; ``0x…`` and hex ids of 8+ characters →
    ``<hex>``; temp paths (``/tmp/tmpa8f3k2``) → ``<tmp>``; line counters (``line 62215``,
    ``(82 lines total)``, a line-number gutter) and process ids → ``<n>``; durations
    (``0.53s``) → ``<duration>``. Other numbers and names are kept: ``5 failed`` and ``3 failed``,
    ``a.py`` and ``b.py`` stay different. A 16-hex-character fingerprint is returned as is.
    """
    if len(text) == 16 and FINGERPRINT.fullmatch(text):
        return text  # a replay's result fingerprint: first, since it would pass the quick check
    head = text if len(text) <= NORMALIZED_CHARS else text[:NORMALIZED_CHARS]
    # The quick check, exactly "a temp path, or a digit and one of the hints". Text it clears
    # is returned: the usual case on the guard's hot path. ASCII text is translated into
    # character classes once (runtime/quickscan.py): no digit, or no digit beside a separator,
    # unit or hex letter, clears it with substring tests, and only a pair found meets the
    # digit-led pattern (which tries its branches at every position: ~6 k machine instructions
    # on a 20-character result, against ~2 k for the classes).
    # "/" first: one character is found by memchr, ~10x faster than a word (and often absent)
    if "/" not in head or ("/tmp/" not in head and "/var/" not in head):
        # quickscan.digit_classes and holds_digit_pair, inlined: this runs on every new result
        classes = None
        if not head.isascii():  # not scanned: the patterns decide
            near = _NEAR_DIGIT.search(head) is not None
        elif "0" not in (classes := head.encode("ascii").translate(CLASSES).decode("ascii")):
            return text  # no digit: only a temp path could have matched
        else:
            near = (
                "0a" in classes
                or "a0" in classes
                or "0s" in classes
                or "0 s" in classes
                or ("[" in classes and "[0" in classes)  # memchr finds "[" first
            ) and _NEAR_DIGIT.search(head) is not None
        if not near and not (
            (
                "line" in head
                or "Line" in head
                or "pid" in head
                or "PID" in head
                or "process" in head
                or ("-" in head and _UUID_HINT.search(head) is not None)
            )
            and (classes is not None or _DIGIT.search(head) is not None)
        ):
            return text
    rest = text[len(head) :]  # the head is normalized, the rest compared exactly
    text = head
    for pattern, replace, hints in PASSES:
        if not hints or any(h in text for h in hints):
            text = pattern.sub(replace, text)
    return text + rest


def normalize_arguments(value: Any, _depth: int = 0) -> Any:
    """Parsed arguments with :func:`normalize_volatile` applied to every string in them (keys
    kept): ``{"cmd": "cat /tmp/tmpa8f3/x"}`` → ``{"cmd": "cat <tmp>/x"}``. A dict or list in
    which nothing changed is returned as it is (no copy). Values nested deeper than 32 levels
    are kept as they are (no recursion limit for hostile input)."""
    kind = type(value)
    if kind is str:
        return normalize_volatile(value)
    if kind is dict or kind is list:  # the usual arguments: checked by type, ABCs are slow here
        if _depth >= 32:
            return value
        changed: Any = None  # a copy, made only when something changed
        for k, v in value.items() if kind is dict else enumerate(value):
            t = type(v)
            if t is int or t is float or t is bool or v is None:
                continue
            n = normalize_volatile(v) if t is str else normalize_arguments(v, _depth + 1)
            if n is not v and n != v:
                if changed is None:
                    changed = kind(value)
                changed[k] = n
        return value if changed is None else changed
    if kind in (int, float, bool) or value is None:
        return value
    if _depth >= 32:
        return value
    if isinstance(value, Mapping):
        return {k: normalize_arguments(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize_arguments(v, _depth + 1) for v in value]
    if isinstance(value, str):
        return normalize_volatile(value)
    return value


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
