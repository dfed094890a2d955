"""Values written as TOML text: what :meth:`LimitPolicy.to_toml` and the limits export
(docs/runtime.md, "Defaults") write, without a TOML writer in the standard library."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["toml_key", "toml_string", "toml_value"]


def toml_value(value: Any) -> str:
    """A limit's value as TOML: ``None`` (off) as ``"off"``, a per-tool map as an inline table."""
    if value is None:
        return '"off"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in sorted(value.items()))
        return "{ " + inner + " }" if inner else "{}"
    return repr(value)


_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, every quote, backslash and control character escaped."""
    out = []
    for ch in text:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """A TOML key: bare when it is only ASCII letters, digits, ``_`` and ``-`` (TOML allows no
    other bare characters), else a quoted string."""
    if key and all(c in _BARE_KEY_CHARS for c in key):
        return key
    return toml_string(key)
