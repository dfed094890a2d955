"""What every model client shares: prices, the retry and circuit-breaker runner, its errors.

A client turns one provider SDK call into a :class:`~loopwatch.instrumentation.types.ModelResponse`.
The SDK's own retries are switched off (``max_retries=0``) so that attempts are counted once, here:
transient failures (408, 429 with ``Retry-After``, 5xx, timeouts, connection errors, as
:func:`~loopwatch.instrumentation.retry.classify` decides) are retried under a
:class:`~loopwatch.instrumentation.retry.RetryPolicy`; a per-model
:class:`~loopwatch.instrumentation.retry.CircuitBreaker` fails fast once a model keeps failing.
A call that fails for good raises :class:`ModelCallError` (a subclass says which way), so the
reference loop and the ``LoopGuard`` stop the run with ``error`` and an explanation naming it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..runtime.drops import record_drop
from ..runtime.reasons import StopReason
from ..runtime.retry import CircuitBreaker, ErrorInfo, RetryPolicy, classify
from ..runtime.types import Message
from ..runtime.validate import check_number

__all__ = [
    "DEFAULT_COOLDOWN_S",
    "DEFAULT_FAILURE_THRESHOLD",
    "MalformedResponse",
    "ModelCallError",
    "ModelCaller",
    "ModelCircuitOpen",
    "ModelPrice",
    "ModelRetryEvent",
    "RawHistory",
    "annotate_model_span",
    "annotate_response",
    "arguments_json",
    "cost_of",
    "int_or_zero",
    "looks_like_error",
    "malformed",
    "not_json",
    "parse_arguments",
    "str_or_none",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_FAILURE_THRESHOLD: Final = 5
"""Transient failures in a row that open a model's circuit, when no breaker is given."""
DEFAULT_COOLDOWN_S: Final = 30.0
"""Seconds an open model circuit waits before one probe, when no breaker is given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """What one model costs, in USD per million tokens. Prices change: pass your own.

    ``cached_input_per_mtok`` prices input tokens read from the provider's prompt cache and
    ``cache_write_per_mtok`` input tokens written to it (Anthropic); ``None`` prices them as
    ordinary input.
    """

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "input_per_mtok",
            "output_per_mtok",
            "cached_input_per_mtok",
            "cache_write_per_mtok",
        ):
            value = getattr(self, name)
            if value is None and name.startswith("cache"):
                continue
            check_number(name, value)

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cached_input_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """USD for one call; ``input_tokens`` counts every input token, cached ones included."""
        cached = min(max(cached_input_tokens, 0), input_tokens)
        written = min(max(cache_write_tokens, 0), input_tokens - cached)
        plain = input_tokens - cached - written
        cached_price = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else self.cached_input_per_mtok
        )
        write_price = self.cache_write_per_mtok
        if write_price is None:
            write_price = self.input_per_mtok
        total = (
            plain * self.input_per_mtok
            + cached * cached_price
            + written * write_price
            + output_tokens * self.output_per_mtok
        )
        return total / 1_000_000


_warned_unpriced: set[str] = set()
_warn_lock = threading.Lock()


def cost_of(
    prices: Mapping[str, ModelPrice] | None,
    models: tuple[str | None, ...],
    input_tokens: int,
    output_tokens: int,
    *,
    cached_input_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """The call's cost from ``prices``, looked up by exact name: the response's model first (a
    dated snapshot such as ``gpt-4o-2024-08-06``), then the requested one. No prices: 0. Prices
    given but none for this model: 0, and one warning per model, so a gap does not go unseen."""
    if not prices:
        return 0.0
    for name in models:
        if name and name in prices:
            return prices[name].cost(
                input_tokens,
                output_tokens,
                cached_input_tokens=cached_input_tokens,
                cache_write_tokens=cache_write_tokens,
            )
    key = "/".join(m for m in models if m)
    with _warn_lock:
        first = key not in _warned_unpriced
        _warned_unpriced.add(key)
    if first:
        _log.warning("loopwatch: no price for model %s; its calls are costed at 0", key)
    return 0.0


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


try:  # the OTel API comes with loopwatch's default install; the clients work without it
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover
    _trace = None  # type: ignore[assignment]


def _loop_chat_span() -> Any:
    """The current span when it is a loopwatch ``chat`` span, else None."""
    if _trace is None:
        return None
    span = _trace.get_current_span()
    attrs = getattr(span, "attributes", None)
    if not attrs or not span.is_recording():
        return None
    if attrs.get("gen_ai.operation.name") != "chat" or "loopwatch.run_id" not in attrs:
        return None
    return span


def annotate_model_span(attributes: Mapping[str, Any]) -> None:
    """Add what only the client knows (provider, response id and model) to the loop's ``chat``
    span, when one is current; a span of the application's own is left alone."""
    try:
        span = _loop_chat_span()
        if span is not None:
            span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    except Exception:
        record_drop("observer_error")


def annotate_response(provider: str, response: Any) -> str | None:
    """The model the provider says answered (``response.model`` when a string), after adding it,
    the provider and the response id to the loop's ``chat`` span (:func:`annotate_model_span`)."""
    model = getattr(response, "model", None)
    model = model if isinstance(model, str) else None
    annotate_model_span(
        {
            "gen_ai.provider.name": provider,
            "gen_ai.response.id": getattr(response, "id", None),
            "gen_ai.response.model": model,
        }
    )
    return model


def int_or_zero(value: Any) -> int:
    """A token count as sent, or 0 when it is missing or not an int (a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def str_or_none(value: object) -> str | None:
    """A non-empty string as is, else None (a response id the provider left out)."""
    return value if isinstance(value, str) and value else None


def _retry_on_span(event: ModelRetryEvent) -> None:
    try:
        span = _loop_chat_span()
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
        self._on_retry = on_retry
        self._sleep = sleep
        self._asleep = asleep
        self._rng = rng

    def _check_open(self, model: str) -> None:
        breaker = self.breaker
        if breaker is not None and not breaker.allow(model):
            wait = breaker.retry_in(model)
            raise ModelCircuitOpen(
                f"{self.provider} model {model!r}: the circuit breaker is open after "
                f"{breaker.failures(model)} failed calls in a row; the call was not made "
                f"(next probe in {wait:.1f} s)",
                provider=self.provider,
                model=model,
                info=ErrorInfo("CIRCUIT_OPEN", "circuit open", False),
                attempts=0,
            )

    def _after_failure(self, model: str, exc: BaseException, attempt: int) -> float:
        """The delay before the next attempt; raises ModelCallError when there is none."""
        if isinstance(exc, ModelCallError):
            if exc.info is None or not exc.info.transient:
                raise exc
            info = exc.info
        else:
            info = classify(exc)
        breaker = self.breaker
        if breaker is not None and info.transient:
            breaker.record_failure(model)
        if info.transient and attempt < self.retry.max_attempts:
            if breaker is not None and not breaker.allow(model):
                self._check_open(model)
            delay = self.retry.delay(attempt, info.retry_after, self._rng)
            event = ModelRetryEvent(self.provider, model, attempt, delay, info.code, info.message)
            _retry_on_span(event)
            if self._on_retry is not None:
                try:
                    self._on_retry(event)
                except Exception:
                    record_drop("retry_callback")
            return delay
        tries = f" after {attempt} attempts" if attempt > 1 else ""
        raise ModelCallError(
            f"{self.provider} model {model!r} failed{tries}: {info.code} {info.message}",
            provider=self.provider,
            model=model,
            info=info,
            attempts=attempt,
        ) from exc

    def _succeeded(self, model: str) -> None:
        if self.breaker is not None:
            self.breaker.record_success(model)

    def call(self, model: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` with retries; raises :class:`ModelCallError` when it fails for good."""
        attempt = 0
        while True:
            self._check_open(model)
            attempt += 1
            try:
                value = fn()
            except Exception as exc:
                self._sleep(self._after_failure(model, exc, attempt))
                continue
            self._succeeded(model)
            return value

    async def acall(self, model: str, fn: Callable[[], Awaitable[_T]]) -> _T:
        """Async :meth:`call`; cancellation (the run's deadline) propagates untouched."""
        attempt = 0
        while True:
            self._check_open(model)
            attempt += 1
            try:
                value = await fn()
            except Exception as exc:
                await self._asleep(self._after_failure(model, exc, attempt))
                continue
            self._succeeded(model)
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


def parse_arguments(raw: Any) -> dict[str, Any] | str:
    """A tool call's arguments as a dict; a string the model sent that is not a JSON object is
    kept as sent (the registry rejects it with ``INVALID_ARGUMENTS``, the model sees why)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return str(raw)
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


def arguments_json(arguments: Mapping[str, Any] | str) -> str:
    """Arguments as the JSON string the wire formats carry (a raw string is sent back as is)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def looks_like_error(content: str | None) -> bool:
    """A tool result in the ``{"error": ..., "code": ...}`` convention (DESIGN §2)."""
    if not content or not content.startswith("{") or '"error"' not in content:
        return False
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


class RawHistory:
    """Provider blocks of assistant messages that ``Message`` cannot hold (thinking with its
    signature, server-tool blocks of a ``pause_turn``), so they are sent back exactly.

    Keyed by the message object itself, bounded (least recently made dropped first).
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._items: OrderedDict[int, tuple[Message, list[dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, message: Message, blocks: list[dict[str, Any]]) -> None:
        with self._lock:
            self._items[id(message)] = (message, blocks)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get(self, message: Message) -> list[dict[str, Any]] | None:
        with self._lock:
            found = self._items.get(id(message))
        if found is None or found[0] is not message:
            return None
        return found[1]
