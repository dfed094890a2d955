"""Is this error transient? One answer from the error's meaning, used by every retry.

:func:`classify` reads the HTTP status, ``Retry-After``, timeouts and connection failures from
an exception (a :class:`ToolError`, an OS error, or an HTTP client's error recognized by class
name, so that no HTTP library is imported here), never by trying a few times to see
(docs/tools.md, *Transient or permanent*).
"""

from __future__ import annotations

import errno
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC

__all__ = ["TRANSIENT_STATUSES", "ErrorInfo", "ToolError", "classify", "is_transient_status"]


class ToolError(Exception):
    """Raised by a tool to report a failure it understands.

    ``code`` is short and stable (``NOT_FOUND``, ``RATE_LIMITED``): the guard counts repeats of
    it. ``message`` is written for the model, so it can fix its arguments or pick another tool.
    ``transient=None`` decides from ``status`` (408, 429, 5xx) and then from ``code``.
    """

    code: str
    """Short, stable error code; repeats of it are what ``repeated_error`` counts."""
    message: str
    """What went wrong, for the model."""
    transient: bool | None
    """Whether retrying may help; ``None`` = decide from ``status`` and ``code``."""
    status: int | None
    """The HTTP status behind the failure, if any."""
    retry_after: float | None
    """Seconds the server asked to wait before retrying (``Retry-After``), if any."""

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        transient: bool | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        if not isinstance(code, str) or not code:
            raise ValueError(f"code must be a non-empty string, got {code!r}")
        super().__init__(message or code)
        self.code = code
        self.message = message
        self.transient = transient
        self.status = status
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"ToolError({self.code!r}, {self.message!r})"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What :func:`classify` made of an exception."""

    code: str
    """``HTTP_503``, ``TIMEOUT``, ``CONNECTION``, ``PERMISSION``, ``NOT_FOUND``, a ``ToolError``'s
    own code, or ``TOOL_EXCEPTION``."""
    message: str
    """Text for the model (a ``ToolError``'s message; otherwise ``"<ExceptionType>: <text>"``)."""
    transient: bool
    """Retrying may help: 408, 429, 5xx (but 501, 505), timeouts, connection failures."""
    retry_after: float | None = None
    """Seconds the server asked to wait (``Retry-After``), when known."""
    status: int | None = None
    """The HTTP status found on the exception, if any."""


TRANSIENT_STATUSES: frozenset[int] = frozenset({408, 429})
"""Transient 4xx statuses; every 5xx but 501 and 505 is transient too (is_transient_status)."""

# 501 Not Implemented and 505 HTTP Version Not Supported say "this will never work here".
_PERMANENT_5XX = frozenset({501, 505})

# ToolError codes that mean "transient" when the tool set neither `transient` nor `status`.
_TRANSIENT_CODES = frozenset(
    {"TIMEOUT", "CONNECTION", "RATE_LIMITED", "UNAVAILABLE", "TRANSIENT", "THROTTLED"}
)

_CONNECTION_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNREFUSED",
        "ECONNRESET",
        "ECONNABORTED",
        "ENETUNREACH",
        "ENETDOWN",
        "ENETRESET",
        "EHOSTUNREACH",
        "EHOSTDOWN",
        "EPIPE",
        "ENOTCONN",
    )
    if hasattr(errno, name)
)

# Third-party client errors (httpx, requests, openai, aiohttp ...) recognized by class name,
# so that no HTTP library has to be imported here.
_TIMEOUT_CLASS_NAMES = frozenset(
    {
        "Timeout",
        "TimeoutException",
        "ReadTimeout",
        "ConnectTimeout",
        "APITimeoutError",
        "ServerTimeoutError",
    }
)
_CONNECTION_CLASS_NAMES = frozenset(
    {
        "ConnectionError",
        "ConnectError",
        "APIConnectionError",
        "ClientConnectionError",
        "RemoteProtocolError",
        "NetworkError",
    }
)

_MAX_MESSAGE_CHARS = 2000


def is_transient_status(status: int) -> bool:
    """408, 429 and 5xx (except 501 and 505) are worth retrying; other statuses are not."""
    return status in TRANSIENT_STATUSES or (500 <= status <= 599 and status not in _PERMANENT_5XX)


def classify(exc: BaseException, *, now: Callable[[], float] = time.time) -> ErrorInfo:
    """Decide whether ``exc`` is transient, and give it a stable code and a message for the model.

    The HTTP status is read from ``ToolError.status`` or an exception's ``status_code``,
    ``status`` or ``response.status_code``; ``Retry-After`` from ``retry_after`` or the
    response's headers (seconds or an HTTP date, measured against ``now``).
    """
    status = _status_of(exc)
    retry_after = _retry_after_of(exc, now)
    if isinstance(exc, ToolError):
        if exc.transient is not None:
            transient = exc.transient
        elif status is not None:
            transient = is_transient_status(status)
        else:
            code = exc.code.upper()
            transient = code in _TRANSIENT_CODES or code.startswith("HTTP_5")
        return ErrorInfo(exc.code, _clip(exc.message or exc.code), transient, retry_after, status)

    message = _clip(_describe(exc))
    if status is not None:
        return ErrorInfo(
            f"HTTP_{status}", message, is_transient_status(status), retry_after, status
        )
    if _is_timeout(exc):
        return ErrorInfo("TIMEOUT", message, True, retry_after)
    if _is_connection(exc):
        return ErrorInfo("CONNECTION", message, True, retry_after)
    if isinstance(exc, PermissionError):
        return ErrorInfo("PERMISSION", message, False)
    if isinstance(exc, FileNotFoundError):
        return ErrorInfo("NOT_FOUND", message, False)
    return ErrorInfo("TOOL_EXCEPTION", message, False)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _clip(text: str) -> str:
    # Error text goes back into the model's context; an HTML error page must not flood it.
    if len(text) <= _MAX_MESSAGE_CHARS:
        return text
    return text[: _MAX_MESSAGE_CHARS - 1] + "…"


def _as_status(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 100 <= value <= 599 else None


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status", "status_code"):
        status = _as_status(getattr(exc, attr, None))
        if status is not None:
            return status
    response = getattr(exc, "response", None)
    if response is not None:
        for attr in ("status_code", "status"):
            status = _as_status(getattr(response, attr, None))
            if status is not None:
                return status
    return None


def _retry_after_of(exc: BaseException, now: Callable[[], float]) -> float | None:
    value = getattr(exc, "retry_after", None)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    for holder in (exc, getattr(exc, "response", None)):
        headers = getattr(holder, "headers", None)
        if headers is None:
            continue
        try:
            raw = headers.get("Retry-After") or headers.get("retry-after")
        except Exception:  # headers of an unknown shape: no hint rather than a crash
            continue
        if raw:
            return _parse_retry_after(str(raw), now)
    return None


def _parse_retry_after(raw: str, now: Callable[[], float]) -> float | None:
    """``Retry-After`` is delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        from email.utils import parsedate_to_datetime  # only HTTP-date headers pay for it

        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": HTTP dates are always GMT
            when = when.replace(tzinfo=UTC)
        return max(when.timestamp() - now(), 0.0)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT:
        return True
    return bool(_class_names(exc) & _TIMEOUT_CLASS_NAMES)


def _is_connection(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError):
        return True
    if isinstance(exc, socket.gaierror):
        # A DNS server failing is temporary; a name that does not exist is not.
        return exc.errno == getattr(socket, "EAI_AGAIN", None)
    if isinstance(exc, OSError) and exc.errno in _CONNECTION_ERRNOS:
        return True
    reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps the socket error
    if isinstance(reason, BaseException) and reason is not exc:
        return _is_timeout(reason) or _is_connection(reason)
    return bool(_class_names(exc) & _CONNECTION_CLASS_NAMES)
