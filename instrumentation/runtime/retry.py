"""What to do after a tool fails: classify the error, back off and retry, or stop calling it.

Three pieces, usable on their own or through :class:`~loopwatch.instrumentation.tools.ToolRegistry`:

- :func:`classify` answers "is this error transient?" from the error's meaning (HTTP status,
  timeout, connection failure), never by trying a few times to see.
- :class:`RetryPolicy` says how often and how long to wait: exponential backoff with full jitter,
  a cap on each wait, and ``Retry-After`` honoured up to its own cap.
- :class:`CircuitBreaker` fails fast on a tool whose calls keep failing, and lets one probe
  through after a cooldown.
"""

from __future__ import annotations

import errno
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from enum import StrEnum
from typing import Any, Literal

from .settings import env_str
from .validate import check_choice, check_int, check_number

__all__ = [
    "BREAKER_ENV",
    "RETRY_ENV",
    "TRANSIENT_STATUSES",
    "BreakerState",
    "CircuitBreaker",
    "ErrorInfo",
    "RetryPolicy",
    "ToolError",
    "classify",
    "is_transient_status",
]

Jitter = Literal["full", "none"]

# Environment variables read by `RetryPolicy.from_env` / `CircuitBreaker.from_env`, by field.
RETRY_ENV: Mapping[str, str] = {
    "max_attempts": "LOOPWATCH_RETRY_MAX_ATTEMPTS",
    "base_delay_s": "LOOPWATCH_RETRY_BASE_DELAY_S",
    "max_delay_s": "LOOPWATCH_RETRY_MAX_DELAY_S",
    "max_retry_after_s": "LOOPWATCH_RETRY_MAX_RETRY_AFTER_S",
}
BREAKER_ENV: Mapping[str, str] = {
    "failure_threshold": "LOOPWATCH_BREAKER_FAILURE_THRESHOLD",
    "cooldown_s": "LOOPWATCH_BREAKER_COOLDOWN_S",
}

# Beyond this exponent the backoff is far past any sane cap; stops float overflow.
_MAX_EXPONENT = 62


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a transient tool failure is retried.

    Defaults follow a production agent SDK's: 3 attempts, 100 ms base, 3 s cap, full jitter.
    ``RetryPolicy(max_attempts=1)`` switches retrying off.
    """

    max_attempts: int = 3
    """Attempts per logical call, the first one included (1 = never retry)."""
    base_delay_s: float = 0.1
    """Backoff before the second attempt, before jitter; it doubles on each further attempt."""
    max_delay_s: float = 3.0
    """Cap on one backoff wait, before jitter."""
    max_retry_after_s: float = 30.0
    """Cap on a server's ``Retry-After``: a longer one is cut to this."""
    jitter: Jitter = "full"
    """``full``: wait uniformly in ``[0, backoff]``; ``none``: wait the backoff itself."""

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, minimum=1)
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            check_number(name, getattr(self, name))
        check_choice("jitter", self.jitter, ("full", "none"))

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based), before jitter.

        ``min(max_delay_s, base_delay_s * 2**(attempt-1))``.
        """
        exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
        return min(self.max_delay_s, self.base_delay_s * 2.0**exponent)

    def delay(
        self,
        attempt: int,
        retry_after: float | None = None,
        rng: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based).

        With ``retry_after`` (the server said how long), that value capped at
        ``max_retry_after_s``; otherwise full jitter: uniform in ``[0, backoff(attempt)]``,
        drawn as ``rng() * backoff(attempt)``. Always within ``[0, cap]``, whatever ``rng`` returns.
        """
        if retry_after is not None and not math.isnan(retry_after):
            return min(max(float(retry_after), 0.0), self.max_retry_after_s)
        ceiling = self.backoff(attempt)
        if self.jitter == "none":
            return ceiling
        fraction = rng()
        if not 0.0 <= fraction <= 1.0:  # NaN too: a broken rng must not break the bound
            fraction = 1.0 if fraction > 1.0 else 0.0
        return ceiling * fraction

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> RetryPolicy:
        """A policy from ``LOOPWATCH_RETRY_*`` variables (see :data:`RETRY_ENV`); ``overrides`` win.

        A variable that is set but not a number raises ``ValueError`` naming the variable.
        """
        values: dict[str, Any] = {}
        for field_name, var in RETRY_ENV.items():
            raw = env_str(var, environ)
            if raw is not None:
                values[field_name] = _parse_env(var, raw, integer=field_name == "max_attempts")
        values.update(overrides)
        return cls(**values)


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


def _parse_env(var: str, raw: str, *, integer: bool) -> float | int:
    try:
        return int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{var} must be {kind}, got {raw!r}") from None


class BreakerState(StrEnum):
    """A circuit breaker's state for one tool."""

    CLOSED = "closed"
    """Calls go through; consecutive failures are counted."""
    OPEN = "open"
    """Calls fail fast (the tool is not called) until the cooldown has passed."""
    HALF_OPEN = "half_open"
    """The cooldown has passed: one probe call may go through to test the tool."""


@dataclass(slots=True)
class _Circuit:
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    probe_started: float | None = None


class CircuitBreaker:
    """Fails fast on a tool after ``failure_threshold`` consecutive failures, per tool name.

    closed --(N failures in a row)--> open --(cooldown passed)--> half_open: one probe call;
    the probe succeeding closes the circuit, failing re-opens it for another cooldown.
    Thread-safe: sync tools run in worker threads under ``aexecute``.
    """

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_int("failure_threshold", failure_threshold, minimum=1)
        check_number("cooldown_s", cooldown_s)
        self.failure_threshold = failure_threshold
        """Consecutive failures that open the circuit."""
        self.cooldown_s = float(cooldown_s)
        """Seconds an open circuit waits before letting one probe through."""
        self._clock = clock
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        **overrides: Any,
    ) -> CircuitBreaker:
        """A breaker from ``LOOPWATCH_BREAKER_*`` variables (``BREAKER_ENV``); ``overrides`` win."""
        values: dict[str, Any] = {}
        for field_name, var in BREAKER_ENV.items():
            raw = env_str(var, environ)
            if raw is not None:
                values[field_name] = _parse_env(var, raw, integer=field_name == "failure_threshold")
        values.update(overrides)
        return cls(clock=clock, **values)

    def _circuit(self, tool: str) -> _Circuit:
        circuit = self._circuits.get(tool)
        if circuit is None:
            circuit = self._circuits[tool] = _Circuit()
        return circuit

    def allow(self, tool: str) -> bool:
        """Whether a call to ``tool`` may go through now; past the cooldown, ONE probe may."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None or circuit.state is BreakerState.CLOSED:
                return True
            now = self._clock()
            if circuit.state is BreakerState.OPEN:
                if now - circuit.opened_at < self.cooldown_s:
                    return False
                circuit.state = BreakerState.HALF_OPEN
                circuit.probe_started = now
                return True
            # Half-open with a probe out. A probe that never reported back (its caller died)
            # must not block the tool forever: after another cooldown, let a new probe through.
            if circuit.probe_started is not None and now - circuit.probe_started < self.cooldown_s:
                return False
            circuit.probe_started = now
            return True

    def record_success(self, tool: str) -> None:
        """A call to ``tool`` worked: close the circuit and forget the failures."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is not None:
                circuit.state = BreakerState.CLOSED
                circuit.failures = 0
                circuit.probe_started = None

    def record_failure(self, tool: str) -> None:
        """A call to ``tool`` failed: count it; open at the threshold, or when the probe failed."""
        with self._lock:
            circuit = self._circuit(tool)
            circuit.failures += 1
            if circuit.state is BreakerState.HALF_OPEN or (
                circuit.state is BreakerState.CLOSED and circuit.failures >= self.failure_threshold
            ):
                circuit.state = BreakerState.OPEN
                circuit.opened_at = self._clock()
                circuit.probe_started = None

    def state(self, tool: str) -> BreakerState:
        """``tool``'s circuit state; an open one whose cooldown has passed reads ``half_open``."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None:
                return BreakerState.CLOSED
            if (
                circuit.state is BreakerState.OPEN
                and self._clock() - circuit.opened_at >= self.cooldown_s
            ):
                return BreakerState.HALF_OPEN
            return circuit.state

    def failures(self, tool: str) -> int:
        """Consecutive failures recorded for ``tool`` since it last succeeded."""
        with self._lock:
            circuit = self._circuits.get(tool)
            return 0 if circuit is None else circuit.failures

    def retry_in(self, tool: str) -> float:
        """Seconds until an open circuit lets a probe through (0 when calls may go through now)."""
        with self._lock:
            circuit = self._circuits.get(tool)
            if circuit is None or circuit.state is not BreakerState.OPEN:
                return 0.0
            return max(self.cooldown_s - (self._clock() - circuit.opened_at), 0.0)

    def reset(self, tool: str | None = None) -> None:
        """Close ``tool``'s circuit (every circuit when ``tool`` is None)."""
        with self._lock:
            if tool is None:
                self._circuits.clear()
            else:
                self._circuits.pop(tool, None)
