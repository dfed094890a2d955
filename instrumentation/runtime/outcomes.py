"""One classification of a tool's outcome, used everywhere (docs/runtime.md, "The detectors").

A tool call failed when the tool raised (``ToolError`` or any exception: the registry turns it
into a failed ``ToolOutcome``), returned a ``{"error": ..., "code": ...}`` body (as a mapping or
as its JSON text), returned an :class:`ErrorResult`, or returned text its own error rule
recognizes (``error_prefix``, e.g. ``"Error:"``). Anything else is a success. The registry, the
guard (for text handed to ``after_tool``) and replays ask :func:`tool_error` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["UNKNOWN_ERROR", "ErrorResult", "ToolErrorInfo", "tool_error"]

UNKNOWN_ERROR = "UNKNOWN_ERROR"
"""The code of a failure that named none."""


@dataclass(frozen=True, slots=True)
class ErrorResult:
    """A tool's result marked as an error, its text handed to the model exactly as it is.

    Return it from a tool (a replay of recorded results does, and ``loopwatch import``): the
    call counts as failed, ``content`` goes back unchanged.
    """

    content: str
    """The text the model gets."""
    code: str = UNKNOWN_ERROR
    """The error code (``repeated_error`` keys on tool, code and the normalized message)."""
    message: str | None = None
    """The error message; default: ``content``."""


@dataclass(frozen=True, slots=True)
class ToolErrorInfo:
    """Why a result is a failure."""

    code: str
    message: str


def _from_mapping(data: Mapping[str, Any]) -> ToolErrorInfo | None:
    error = data.get("error")
    if error is None or error is False or error == "":
        return None
    code = data.get("code")
    if isinstance(error, str):
        message = error
    elif isinstance(error, Mapping):
        # {"error": {"message": ..., "code": ...}}: the shape of many HTTP APIs.
        message = str(error.get("message", error))
        code = code or error.get("code") or error.get("type")
    else:
        message = str(error)
    return ToolErrorInfo(str(code) if code else UNKNOWN_ERROR, message)


def tool_error(
    value: Any, *, error_prefix: str | Sequence[str] | None = None
) -> ToolErrorInfo | None:
    """The failure ``value`` (a tool's return value, or the text the model got) stands for, or
    ``None`` for a success.

    ``error_prefix``: the tool's own rule, one prefix or several (``"Error:"``); text starting
    with one is a failure whose message is the text.
    """
    if isinstance(value, ErrorResult):
        return ToolErrorInfo(value.code or UNKNOWN_ERROR, value.message or value.content)
    if isinstance(value, str):
        if error_prefix and value.startswith(
            error_prefix if isinstance(error_prefix, str) else tuple(error_prefix)
        ):
            return ToolErrorInfo(UNKNOWN_ERROR, value)
        if value.startswith("{") and '"error"' in value:
            try:
                data = json.loads(value)
            except ValueError:
                return None
            return _from_mapping(data) if isinstance(data, dict) else None
        return None
    if isinstance(value, Mapping):
        return _from_mapping(value)
    return None
