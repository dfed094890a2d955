"""Stable JSON: data as text with keys sorted at every depth and no whitespace, so equal data is
equal text (what fingerprints hash; docs/runtime.md)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["deep_text", "stable_json"]


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


def deep_text(value: Any) -> str:
    """Data nested too deeply for the recursive encoder, as text without recursion: equal data,
    equal text (keys sorted), so deep arguments keep distinct fingerprints."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Close):
            out.append(item.text)
        elif isinstance(item, Mapping):
            out.append("{")
            stack.append(_Close("}"))
            for key in sorted(item, key=str, reverse=True):
                stack.extend((item[key], _Close(json.dumps(str(key), ensure_ascii=False) + ":")))
        elif isinstance(item, list | tuple):
            out.append("[")
            stack.append(_Close("]"))
            stack.extend(reversed(item))
        else:
            out.append(stable_json(item) + ",")
    return "".join(out)


class _Close:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
