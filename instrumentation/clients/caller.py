"""Running one model call: retries and a per-model circuit breaker, and the errors it raises.

The SDK's own retries are switched off (``max_retries=0``) so that attempts are counted once,
here: the retry machine (:class:`~loopwatch.instrumentation.runtime.retry.RetryState`) decides, the
``call``/``acall`` drivers call and sleep (docs/tools.md, *One state machine, two drivers*). A
call that fails for good raises :class:`ModelCallError` (a subclass says which way).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..runtime.drops import record_drop
from ..runtime.reasons import StopReason
from ..runtime.retry import (
    BreakerUse,
    CircuitBreaker,
    ErrorInfo,
    RetryPolicy,
    RetryState,
    acall_with_retries,
    call_with_retries,
    classify,
)
from .spans import loop_chat_span

__all__ = [
    "DEFAULT_COOLDOWN_S",
    "DEFAULT_FAILURE_THRESHOLD",
    "MalformedResponse",
    "ModelCallError",
    "ModelCaller",
    "ModelCircuitOpen",
    "ModelRetryEvent",
    "malformed",
    "not_json",
    "retry_on_span",
]

_T = TypeVar("_T")

DEFAULT_FAILURE_THRESHOLD: Final = 5
"""Transient failures in a row that open a model's circuit, when no breaker is given."""
DEFAULT_COOLDOWN_S: Final = 30.0
"""Seconds an open model circuit waits before one probe, when no breaker is given."""


class ModelCallError(RuntimeError):
    """A model call failed for good: a permanent error, or a transient one past its retries."""

    provider: str
    model: str
    info: ErrorInfo | None
    attempts: int

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        info: ErrorInfo | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.info = info
        self.attempts = attempts

    @property
    def code(self) -> str:
        """``HTTP_429``, ``TIMEOUT``, ``CIRCUIT_OPEN``, ``MALFORMED_RESPONSE`` ..."""
        return self.info.code if self.info is not None else "MODEL_ERROR"

    @property
    def transient(self) -> bool:
        return bool(self.info and self.info.transient)


class ModelCircuitOpen(ModelCallError):
    """The model's circuit breaker is open: the call was not made (the run stops with
    ``circuit_open``)."""

    stop_reason = StopReason.CIRCUIT_OPEN


class MalformedResponse(ModelCallError):
    """The provider answered, but not in its wire format (no choices, no content, bad JSON)."""


@dataclass(frozen=True, slots=True)
class ModelRetryEvent:
    """A failed model-call attempt about to be retried (reported before the backoff sleep)."""

    provider: str
    model: str
    attempt: int
    """The attempt that failed, 1-based."""
    delay_s: float
    error_code: str
    error_message: str


def retry_on_span(event: ModelRetryEvent) -> None:
    """The retry as a ``loopwatch.retry`` event on the loop's ``chat`` span, when one is current."""
    try:
        span = loop_chat_span()
        if span is not None:
            span.add_event(
                "loopwatch.retry",
                {
                    "gen_ai.request.model": event.model,
                    "loopwatch.retry.attempt": event.attempt,
                    "loopwatch.retry.delay_s": event.delay_s,
                    "loopwatch.error.code": event.error_code,
                },
            )
    except Exception:
        record_drop("observer_error")


class ModelCaller:
    """Runs one model call with retries and a per-model circuit breaker (sync and async).

    Args:
        provider: ``openai`` or ``anthropic``, for messages and spans.
        retry: the retry policy (default ``RetryPolicy()``: 3 attempts, 0.1 s base, 3 s cap,
            ``Retry-After`` honoured up to 30 s); ``RetryPolicy(max_attempts=1)`` never retries.
        breaker: the breaker, keyed by model; ``True`` (the default) makes one that opens after 5
            transient failures in a row, with a 30 s cooldown; ``None`` switches it off.
        on_retry: hears of each retry before its sleep (an exception from it is counted as
            dropped telemetry); each retry is also a ``loopwatch.retry`` event on the ``chat``
            span.
    """

    def __init__(
        self,
        provider: str,
        *,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | bool | None = True,
        on_retry: Callable[[ModelRetryEvent], None] | None = None,
        sleep: Callable[[float], object] = time.sleep,
        asleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.provider = provider
        self.retry = retry if retry is not None else RetryPolicy()
        if breaker is True:
            self.breaker: CircuitBreaker | None = CircuitBreaker(
                DEFAULT_FAILURE_THRESHOLD, DEFAULT_COOLDOWN_S
            )
        elif breaker is False or breaker is None:
            self.breaker = None
        else:
            self.breaker = breaker
        self.on_retry = on_retry
        """Hears of each retry before its sleep."""
        self._sleep = sleep
        self._asleep = asleep
        self._rng = rng

    def _state(self, model: str) -> RetryState[Any]:
        use = None if self.breaker is None else BreakerUse(self.breaker, model, per_attempt=True)
        return RetryState(_ModelCallHooks(self, model), self.retry, breaker=use, rng=self._rng)

    def call(self, model: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` with retries; raises :class:`ModelCallError` when it fails for good."""
        result: _T = call_with_retries(self._state(model), fn, self._sleep)
        return result

    async def acall(self, model: str, fn: Callable[[], Awaitable[_T]]) -> _T:
        """Async :meth:`call`; cancellation (the run's deadline) propagates untouched."""
        result: _T = await acall_with_retries(self._state(model), fn, self._asleep)
        return result


class _ModelCallHooks:
    """What a model call makes of the retry machine's decisions: a value, or an exception."""

    def __init__(self, caller: ModelCaller, model: str) -> None:
        self.caller = caller
        self.model = model

    def classify(self, exc: Exception) -> ErrorInfo:
        if isinstance(exc, ModelCallError):
            if exc.info is None or not exc.info.transient:
                raise exc
            return exc.info
        return classify(exc)

    def refused(self, state: RetryState[Any]) -> Any:
        breaker, model, provider = self.caller.breaker, self.model, self.caller.provider
        assert breaker is not None  # only a caller with a breaker is refused
        raise ModelCircuitOpen(
            f"{provider} model {model!r}: the circuit breaker is open after "
            f"{breaker.failures(model)} failed calls in a row; the call was not made "
            f"(next probe in {breaker.retry_in(model):.1f} s)",
            provider=provider,
            model=model,
            info=ErrorInfo("CIRCUIT_OPEN", "circuit open", False),
            attempts=0,
        )

    def retrying(self, state: RetryState[Any], info: ErrorInfo, delay: float) -> None:
        caller = self.caller
        event = ModelRetryEvent(
            caller.provider, self.model, state.attempt, delay, info.code, info.message
        )
        retry_on_span(event)
        if caller.on_retry is not None:
            try:
                caller.on_retry(event)
            except Exception:
                record_drop("retry_callback")

    def gave_up(self, state: RetryState[Any], info: ErrorInfo, exc: Exception) -> Any:
        attempt, provider = state.attempt, self.caller.provider
        tries = f" after {attempt} attempts" if attempt > 1 else ""
        raise ModelCallError(
            f"{provider} model {self.model!r} failed{tries}: {info.code} {info.message}",
            provider=provider,
            model=self.model,
            info=info,
            attempts=attempt,
        ) from exc

    def succeeded(self, state: RetryState[Any], value: Any) -> Any:
        return value


def malformed(provider: str, model: str, what: str) -> MalformedResponse:
    """A :class:`MalformedResponse` saying what was wrong."""
    return MalformedResponse(
        f"{provider} model {model!r} returned a malformed response: {what}",
        provider=provider,
        model=model,
        info=ErrorInfo("MALFORMED_RESPONSE", what, False),
    )


def not_json(provider: str, model: str, body: Any) -> MalformedResponse | None:
    """A :class:`MalformedResponse` when the SDK handed back the raw body (it was not JSON)."""
    if isinstance(body, str | bytes):
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        snippet = text[:80] + ("…" if len(text) > 80 else "")
        return malformed(provider, model, f"the body is not JSON: {snippet!r}")
    return None
